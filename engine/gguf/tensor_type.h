// Element types of GGUF tensors that the engine reads and computes with, and
// the scalar conversions between them. Pure functions; thread-safe.
// Block-quantized types store `BlockSize()` elements in `BlockBytes()` bytes.
#ifndef TANDEM_ENGINE_GGUF_TENSOR_TYPE_H_
#define TANDEM_ENGINE_GGUF_TENSOR_TYPE_H_

#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::engine {

// Values are the on-disk ids of ggml's `ggml_type`. The block-quantized
// layouts other than Q8_0 are in engine/gguf/quant_formats.h.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kBF16 = 30,
};

// Maps an on-disk type id to a supported type; anything else is an error that
// names the id (and the ggml name when known, e.g. "Q4_K").
absl::StatusOr<GgmlType> GgmlTypeFromId(uint32_t id);

std::string_view GgmlTypeName(GgmlType type);
// Parses a type's name: "f32", "q4_k", ... (case-insensitive).
absl::StatusOr<GgmlType> GgmlTypeFromName(std::string_view name);

// Elements per block (1 for plain types, 32 for Q8_0, the legacy quants
// and IQ4_NL, 256 for the K-quants).
int64_t GgmlBlockSize(GgmlType type);
// Bytes per block.
int64_t GgmlBlockBytes(GgmlType type);
// Block-quantized (block size > 1).
bool GgmlIsQuantized(GgmlType type);
// Bytes of a row of `n` elements; `n` must be a multiple of the block size.
inline int64_t GgmlRowBytes(GgmlType type, int64_t n) {
  return n / GgmlBlockSize(type) * GgmlBlockBytes(type);
}

// Q8_0: 32 int8 values sharing one fp16 scale, value = d * qs[i].
inline constexpr int kQ8_0BlockSize = 32;
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQ8_0BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes on disk");

float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);  // round to nearest even

inline float Bf16ToFp32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
uint16_t Fp32ToBf16(float f);  // round to nearest even, NaN kept quiet

// Quantizes `n` floats (a multiple of 32) the way ggml's reference
// quantize_row_q8_0 does: d = max|x| / 127, q = round(x / d).
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n);

// Converts one row of `n` elements (a multiple of the block size) of `type`
// at `src` to floats: the reference dequantizer of each format.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);
// The reverse: `n` floats into `type` at `dst` (GgmlRowBytes(type, n)
// bytes).
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_GGUF_TENSOR_TYPE_H_
