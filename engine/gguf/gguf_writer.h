// Builds a GGUF v3 file in memory and writes it out. Used by `tandem
// make-model` and by tests that craft valid and hostile files.
// Thread-compatible.
#ifndef TANDEM_ENGINE_GGUF_GGUF_WRITER_H_
#define TANDEM_ENGINE_GGUF_GGUF_WRITER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  // Setting a key again replaces its value, keeping its first position. No
  // setter or AddTensor validates anything: tests craft hostile files here.
  void SetString(std::string key, std::string_view value);
  void SetUint32(std::string key, uint32_t value);
  void SetInt32(std::string key, int32_t value);
  void SetUint64(std::string key, uint64_t value);
  void SetFloat32(std::string key, float value);
  void SetBool(std::string key, bool value);
  void SetStringArray(std::string key, const std::vector<std::string>& values);
  void SetFloat32Array(std::string key, const std::vector<float>& values);
  void SetInt32Array(std::string key, const std::vector<int32_t>& values);
  // A value already encoded as GGUF stores it (GgufFile::GetEncoded).
  void SetEncoded(std::string key, GgufValueType type, std::span<const uint8_t> bytes) {
    Set(std::move(key), type, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }

  // `ne` in ggml order (ne[0] contiguous); `data` holds the raw bytes,
  // GgmlRowBytes(type, ne[0]) * ne[1] * ... of them.
  void AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                 std::vector<uint8_t> data);

  // The complete file image (header, metadata, tensor infos, padding, data).
  std::vector<uint8_t> Serialize() const;
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Entry {
    std::string key;
    GgufValueType type;
    std::vector<uint8_t> payload;  // encoded value (arrays include header)
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  void Set(std::string key, GgufValueType type, std::vector<uint8_t> payload);

  uint64_t alignment_;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_GGUF_GGUF_WRITER_H_
