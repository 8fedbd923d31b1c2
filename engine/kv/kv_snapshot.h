// An immutable copy of a sequence's KV blocks, for handing to another
// process (prefill -> decode). Values, not views: it never aliases memory a
// running sequence writes. Thread-safe once built (read-only).
#ifndef TANDEM_ENGINE_KV_KV_SNAPSHOT_H_
#define TANDEM_ENGINE_KV_KV_SNAPSHOT_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/check.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine {

// One block's bytes, immutable: a copy, or pieces of buffers adopted from a
// transport (kept alive by an owner), so a receiver keeps the buffers the
// wire delivered instead of gathering the block out of them. Copies of a
// KvBlockBytes share the bytes.
class KvBlockBytes {
 public:
  using Piece = std::span<const uint8_t>;

  KvBlockBytes(const std::vector<uint8_t>& bytes)  // NOLINT: implicit, a copy
      : KvBlockBytes(bytes.data(), bytes.data() + bytes.size()) {}
  KvBlockBytes(const uint8_t* begin, const uint8_t* end);  // a copy
  // Adopts `pieces`, which `owner` keeps valid; the block is their
  // concatenation.
  KvBlockBytes(std::shared_ptr<const void> owner, std::vector<Piece> pieces);

  size_t size() const { return size_; }
  // The bytes in order: one piece for a copy, any number when adopted.
  std::span<const Piece> pieces() const { return pieces_; }
  // Writes the size() bytes to `out`.
  void CopyTo(uint8_t* out) const;
  // Byte i, walking the pieces: for checks and tests, not bulk access.
  uint8_t operator[](size_t i) const;

 private:
  std::shared_ptr<const void> owner_;
  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

inline KvBlockBytes::KvBlockBytes(const uint8_t* begin, const uint8_t* end) {
  auto copy = std::make_shared<const std::vector<uint8_t>>(begin, end);
  pieces_.emplace_back(copy->data(), copy->size());
  size_ = copy->size();
  owner_ = std::move(copy);
}

inline KvBlockBytes::KvBlockBytes(std::shared_ptr<const void> owner, std::vector<Piece> pieces)
    : owner_(std::move(owner)), pieces_(std::move(pieces)) {
  for (const Piece& p : pieces_) size_ += p.size();
}

inline void KvBlockBytes::CopyTo(uint8_t* out) const {
  for (const Piece& p : pieces_) {
    if (!p.empty()) std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
}

inline uint8_t KvBlockBytes::operator[](size_t i) const {
  TANDEM_CHECK(i < size_, "block byte index in range") << "i=" << i << " size=" << size_;
  for (const Piece& p : pieces_) {
    if (i < p.size()) return p[i];
    i -= p.size();
  }
  return 0;  // not reached: the pieces add up to size_
}

struct KvSnapshot {
  uint64_t model_fingerprint = 0;
  int32_t n_tokens = 0;  // positions held, [0, n_tokens)
  int32_t block_size = 0;
  int32_t n_layer = 0;
  int32_t kv_dim = 0;
  GgmlType dtype = GgmlType::kF32;
  // Delta transfer: blocks [0, first_block) are not here; the receiver
  // holds them already (the leading full blocks of the same token chain).
  int32_t first_block = 0;
  // Blocks first_block .. ceil(n_tokens / block_size) - 1, each in the
  // engine's block layout ([layer][k|v][slot][kv_dim]) and size.
  std::vector<KvBlockBytes> blocks;
  // With a draft model beside the model (a pair's layout): positions
  // [0, draft_tokens) hold the draft's KV too; the draft's half of the
  // blocks past it is unwritten, and the receiver computes it when it
  // proposes. Unset: every position holds it.
  std::optional<int32_t> draft_tokens = std::nullopt;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_KV_SNAPSHOT_H_
