#include "rpc/wire_parse.h"

#include <optional>
#include <string>
#include <vector>

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/slice.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace tandem::rpc {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::internal::WireFormatLite;

// Deeper nesting than this is left to protobuf's own recursion limit.
constexpr int kMaxDepth = 64;

bool ChecksUtf8(const FieldDescriptor* f) {
  return f->type() == FieldDescriptor::TYPE_STRING &&
         f->file()->syntax() == FileDescriptor::SYNTAX_PROTO3;
}

// The path of the first string field in `bytes` (a `d` on the wire) that is
// not UTF-8; "" when there is none; nullopt when the bytes are malformed
// (protobuf's parser then says so).
std::optional<std::string> FindInvalidUtf8(const Descriptor* d, std::string_view bytes,
                                           int depth) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  absl::flat_hash_map<int, int> seen;  // occurrences of each repeated field
  while (const uint32_t tag = in.ReadTag()) {
    const FieldDescriptor* f = d->FindFieldByNumber(static_cast<int>(tag >> 3));
    const bool nested = f != nullptr && (ChecksUtf8(f) || f->type() == FieldDescriptor::TYPE_MESSAGE);
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED ||
        !nested) {
      if (!WireFormatLite::SkipField(&in, tag)) return std::nullopt;
      continue;
    }
    uint32_t length = 0;
    const void* data = nullptr;
    int available = 0;
    if (!in.ReadVarint32(&length) || !in.GetDirectBufferPointer(&data, &available) ||
        static_cast<uint32_t>(available) < length) {
      // An empty field at the very end has no buffer left to point at.
      if (length == 0) continue;
      return std::nullopt;
    }
    const std::string_view payload(static_cast<const char*>(data), length);
    in.Skip(static_cast<int>(length));
    const std::string name =
        f->is_repeated() ? absl::StrCat(f->name(), "[", seen[f->number()]++, "]") : f->name();
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      if (!IsValidUtf8(payload)) return name;
    } else if (depth < kMaxDepth) {
      std::optional<std::string> inner = FindInvalidUtf8(f->message_type(), payload, depth + 1);
      if (!inner.has_value()) return std::nullopt;
      if (!inner->empty()) return absl::StrCat(name, ".", *inner);
    }
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return std::string();
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // a continuation byte, an overlong lead (c0, c1) or past f4
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += len;
  }
  return true;
}

absl::Status ParseMessage(std::string_view bytes, google::protobuf::Message* message) {
  const Descriptor* d = message->GetDescriptor();
  std::optional<std::string> invalid = FindInvalidUtf8(d, bytes, 0);
  if (invalid.has_value() && !invalid->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        *invalid, ": not valid UTF-8 (string fields must be; send token ids for raw bytes)"));
  }
  if (!invalid.has_value() || !message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("the request is not a valid ", d->full_name(),
                                                   " message (", bytes.size(), " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ParseMessage(const grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) {
    return absl::InvalidArgumentError("the request's bytes could not be read");
  }
  if (slices.size() == 1) {
    return ParseMessage(std::string_view(reinterpret_cast<const char*>(slices[0].begin()),
                                         slices[0].size()),
                        message);
  }
  std::string bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return ParseMessage(bytes, message);
}

grpc::ByteBuffer SerializeMessage(const google::protobuf::Message& message) {
  grpc::ByteBuffer out;
  bool own = false;
  // Fails only past protobuf's 2 GiB limit, which no response approaches.
  (void)grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, &out, &own);
  return out;
}

}  // namespace tandem::rpc
