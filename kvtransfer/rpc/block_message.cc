#include "kvtransfer/rpc/block_message.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::kvtransfer {
namespace {

// Protobuf wire types and the fields of KvBlockMessage (worker.proto).
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;
constexpr uint32_t kIndexField = 1;
constexpr uint32_t kBlockField = 2;

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads through a message held in pieces, across their boundaries.
class Cursor {
 public:
  explicit Cursor(std::span<const std::string_view> pieces) : pieces_(pieces) { SkipSpent(); }

  bool done() const { return piece_ == pieces_.size(); }

  // False when the bytes end first or the varint runs past 10 bytes.
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return false;
      const auto byte = static_cast<uint8_t>(pieces_[piece_][offset_]);
      ++offset_;
      SkipSpent();
      *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // The next `n` bytes, as views appended to `out` (skipped when null).
  // False when fewer than `n` remain.
  bool Take(uint64_t n, std::vector<std::string_view>* out) {
    while (n > 0) {
      if (done()) return false;
      const std::string_view piece = pieces_[piece_];
      const size_t step = static_cast<size_t>(std::min<uint64_t>(n, piece.size() - offset_));
      if (out != nullptr) out->push_back(piece.substr(offset_, step));
      offset_ += step;
      n -= step;
      SkipSpent();
    }
    return true;
  }

 private:
  void SkipSpent() {
    while (piece_ < pieces_.size() && offset_ == pieces_[piece_].size()) {
      ++piece_;
      offset_ = 0;
    }
  }

  std::span<const std::string_view> pieces_;
  size_t piece_ = 0;
  size_t offset_ = 0;
};

absl::Status Malformed(const std::string& what) {
  return absl::DataLossError(absl::StrCat("KvBlockMessage: ", what));
}

}  // namespace

std::string BlockMessagePrefix(int32_t index, size_t block_bytes) {
  std::string out;
  AppendVarint(out, kIndexField << 3 | kVarint);
  // int32 goes out sign-extended to 64 bits, as protobuf writes it.
  AppendVarint(out, static_cast<uint64_t>(static_cast<int64_t>(index)));
  AppendVarint(out, kBlockField << 3 | kLengthDelimited);
  AppendVarint(out, block_bytes);
  return out;
}

absl::StatusOr<BlockMessageView> ParseBlockMessage(std::span<const std::string_view> pieces) {
  BlockMessageView view;
  Cursor in(pieces);
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.ReadVarint(&tag)) return Malformed("truncated or overlong field tag");
    const uint64_t field = tag >> 3;
    const auto wire_type = static_cast<uint32_t>(tag & 7);
    if (field == 0 || field > 0x1fffffff) {
      return Malformed(absl::StrCat("field number ", field, " is out of range"));
    }
    uint64_t value = 0;
    switch (wire_type) {
      case kVarint:
        if (!in.ReadVarint(&value)) return Malformed(absl::StrCat("field ", field, " truncated"));
        if (field == kIndexField) view.index = static_cast<int32_t>(value);  // as protobuf does
        break;
      case kFixed64:
      case kFixed32:
        if (!in.Take(wire_type == kFixed64 ? 8 : 4, nullptr)) {
          return Malformed(absl::StrCat("field ", field, " truncated"));
        }
        break;
      case kLengthDelimited: {
        if (!in.ReadVarint(&value)) {
          return Malformed(absl::StrCat("field ", field, " length truncated"));
        }
        const bool is_block = field == kBlockField;
        if (is_block) {
          view.block.clear();  // the last occurrence wins
          view.block_bytes = 0;
        }
        if (!in.Take(value, is_block ? &view.block : nullptr)) {
          return Malformed(absl::StrCat(is_block ? "block" : absl::StrCat("field ", field),
                                        ": ", value, " bytes announced, fewer arrived"));
        }
        if (is_block) view.block_bytes = value;
        break;
      }
      default:
        return Malformed(absl::StrCat("field ", field, " has unsupported wire type ", wire_type));
    }
  }
  return view;
}

}  // namespace tandem::kvtransfer
