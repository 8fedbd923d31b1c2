// Internal to the GGUF reader (gguf.cc, gguf_parser.cc): the bounds-checked
// parser that fills a GgufFile from its mapping, and the byte helpers the
// getters share with it. Not included by any other module.
#ifndef TANDEM_ENGINE_GGUF_GGUF_PARSER_H_
#define TANDEM_ENGINE_GGUF_GGUF_PARSER_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"

namespace tandem::engine {

// GGUF v2/v3 files read here are little-endian; so must the host be, since
// values are copied out of the mapping byte for byte.
static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

// Reads a T from a possibly unaligned position in the mapping.
template <typename T>
T LoadUnaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Highest on-disk value type id (kFloat64).
inline constexpr uint32_t kMaxGgufValueType = 12;

// Bytes of one value of a fixed-size type; 0 for strings, arrays and ids
// above kMaxGgufValueType.
uint64_t GgufScalarSize(GgufValueType type);
bool GgufIsInteger(GgufValueType type);
// "UINT8", "STRING", ...; "type <id>" for unknown ids.
std::string GgufValueTypeName(GgufValueType type);

// Walks the header, metadata and tensor infos of one mapped file, checking
// every read against the file size and every count against `options`, and
// fills the GgufFile's fields. Single use; runs inside GgufFile::Open.
class GgufFile::Parser {
 public:
  Parser(GgufFile& file, const GgufOpenOptions& options) : file_(file), options_(options) {}

  // Error messages name the field and byte offset but not the path (Open
  // prefixes that).
  absl::Status Parse();

 private:
  uint64_t Remaining() const { return file_.size_ - pos_; }
  // InvalidArgument saying that `what` needs `n` bytes at the cursor.
  absl::Status Truncated(std::string_view what, uint64_t n) const;
  absl::StatusOr<uint32_t> ReadU32(std::string_view what);
  absl::StatusOr<uint64_t> ReadU64(std::string_view what);
  // A u64 length followed by that many bytes, at most max_string_bytes.
  absl::StatusOr<std::string_view> ReadString(std::string_view what);

  absl::Status ParseHeader(uint64_t& n_tensors, uint64_t& n_kv);
  absl::Status ParseKv(uint64_t index);
  // Reads one value of `type` (the cursor is just past its type id).
  absl::Status ParseValue(std::string_view key, GgufValueType type, Value& value);
  absl::Status ParseArray(std::string_view key, Value& value);
  absl::Status ParseAlignment();
  absl::Status ParseTensorInfo(uint64_t index);
  // Sets each tensor's data pointer once the data section start is known.
  absl::Status PlaceTensors(uint64_t data_start);

  GgufFile& file_;
  const GgufOpenOptions& options_;
  uint64_t pos_ = 0;  // cursor, always <= file_.size_
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_GGUF_GGUF_PARSER_H_
