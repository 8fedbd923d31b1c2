// Read-only view of a GGUF (v2/v3) file over mmap. Callers: the model loader,
// the tokenizer loader, `tandem tokenize`. Every count, type, offset,
// alignment and tensor extent is checked when the file is opened; afterwards
// the object is immutable and thread-safe. Tensor data pointers and string
// views point into the mapping and live as long as the GgufFile.
#ifndef TANDEM_ENGINE_GGUF_GGUF_H_
#define TANDEM_ENGINE_GGUF_GGUF_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine {

// On-disk ids of GGUF metadata value types.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  // ggml order: ne[0] is the contiguous (innermost) dimension. 1..4 entries.
  std::vector<int64_t> ne;
  uint64_t offset = 0;        // relative to the start of the data section
  uint64_t nbytes = 0;        // checked to lie inside the file
  const uint8_t* data = nullptr;

  int64_t NumElements() const;
};

struct GgufOpenOptions {
  // Tensor infos are parsed and checked either way; with false, tensor data
  // extents are not required to lie within the file (vocab-only readers).
  bool require_tensor_data = true;
  // Upper bounds that keep a hostile header from allocating without limit.
  uint64_t max_tensors = 1 << 20;
  uint64_t max_kv = 1 << 20;
  uint64_t max_array_elements = 1ull << 28;
  uint64_t max_string_bytes = 1ull << 30;
};

class GgufFile {
 public:
  // Maps and parses `path`. A malformed, truncated or hostile file gives
  // InvalidArgument (or Unimplemented for an unsupported tensor type) naming
  // what is wrong and where, e.g. "tensor 'blk.0.attn_q.weight': data [a, b)
  // extends past end of file (size c)".
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(
      const std::string& path, const GgufOpenOptions& options = {});

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }

  bool HasKey(std::string_view key) const;
  std::optional<GgufValueType> KeyType(std::string_view key) const;
  // For arrays: the element type.
  std::optional<GgufValueType> ArrayElementType(std::string_view key) const;
  std::vector<std::string> Keys() const;

  // Typed getters. NotFound if the key is absent; InvalidArgument naming the
  // key if its type does not convert (integers convert between widths when
  // the value fits; floats accept f32 and f64).
  absl::StatusOr<std::string_view> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<uint32_t> GetUint32(std::string_view key) const;
  absl::StatusOr<float> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;
  absl::StatusOr<std::vector<int32_t>> GetInt32Array(std::string_view key) const;
  absl::StatusOr<uint64_t> GetArrayLength(std::string_view key) const;

  // Getter with a default for absent keys; a present key of the wrong type is
  // still an error.
  absl::StatusOr<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  absl::StatusOr<float> GetFloatOr(std::string_view key, float fallback) const;
  absl::StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;

  // A value as the file encodes it (an array with its element type and
  // count), with its type: for copying metadata into another file
  // (GgufWriter::SetEncoded).
  struct EncodedValue {
    GgufValueType type;
    std::span<const uint8_t> bytes;
  };
  absl::StatusOr<EncodedValue> GetEncoded(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  struct Value {
    GgufValueType type;
    GgufValueType array_type = GgufValueType::kUint8;  // arrays only
    uint64_t count = 0;                                // arrays only
    const uint8_t* data = nullptr;  // start of the value (after array header)
    // The value as the file encodes it (arrays with their header).
    std::span<const uint8_t> encoded;
  };
  class Parser;

  GgufFile() = default;
  absl::StatusOr<const Value*> Find(std::string_view key) const;

  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  absl::flat_hash_map<std::string, Value> kv_;
  std::vector<std::string> key_order_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_GGUF_GGUF_H_
