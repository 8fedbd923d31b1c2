// An immutable copy of a sequence's KV blocks, for handing to another
// process (prefill -> decode). Values, not views: it never aliases memory a
// running sequence writes. Thread-safe once built (read-only).
#ifndef TANDEM_ENGINE_KV_SNAPSHOT_H_
#define TANDEM_ENGINE_KV_SNAPSHOT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/tensor_type.h"

namespace tandem::engine {

// One block's bytes, immutable. Either a copy, or a buffer adopted whole with
// the block lying at an offset inside it, so a receiver keeps the message
// buffer the wire delivered (header and checksum around the payload)
// instead of copying the payload out of it.
class KvBlockBytes {
 public:
  KvBlockBytes(const std::vector<uint8_t>& bytes)  // NOLINT: implicit, a copy
      : KvBlockBytes(bytes.data(), bytes.data() + bytes.size()) {}
  KvBlockBytes(const uint8_t* begin, const uint8_t* end)
      : storage_(reinterpret_cast<const char*>(begin), end - begin), size_(end - begin) {}
  // Adopts `buffer`; the block is its bytes [offset, offset + size).
  KvBlockBytes(std::string buffer, size_t offset, size_t size)
      : storage_(std::move(buffer)), offset_(offset), size_(size) {}

  const uint8_t* data() const {
    return reinterpret_cast<const uint8_t*>(storage_.data()) + offset_;
  }
  size_t size() const { return size_; }
  uint8_t operator[](size_t i) const { return data()[i]; }
  operator std::span<const uint8_t>() const { return {data(), size_}; }  // NOLINT

 private:
  std::string storage_;
  size_t offset_ = 0;
  size_t size_ = 0;
};

struct KvSnapshot {
  uint64_t model_fingerprint = 0;
  int32_t n_tokens = 0;  // positions held, [0, n_tokens)
  int32_t block_size = 0;
  int32_t n_layer = 0;
  int32_t kv_dim = 0;
  GgmlType dtype = GgmlType::kF32;
  // ceil(n_tokens / block_size) blocks, each in the engine's block layout
  // ([layer][k|v][slot][kv_dim]) and size.
  std::vector<KvBlockBytes> blocks;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_SNAPSHOT_H_
