// ggml's block-quantized tensor formats beyond Q8_0, laid out byte for byte
// as GGUF files store them: the legacy 32-element blocks (Q4_0, Q4_1, Q5_0,
// Q5_1) and the 256-element K-quant super-blocks (Q2_K .. Q6_K), with a
// reference dequantizer per type written from the format's definition and
// a quantizer (for `tandem quantize` and tests). IQ4_NL (the 4-bit
// non-linear type llama-quantize falls back to for Q2_K / Q3_K rows that do
// not fill a super-block) is a Q4_0-shaped block read through a table. The dequantizers are the
// reference the fast kernels are tested against. Pure functions;
// thread-safe.
#ifndef TANDEM_ENGINE_GGUF_QUANT_FORMATS_H_
#define TANDEM_ENGINE_GGUF_QUANT_FORMATS_H_

#include <cstdint>

namespace tandem::engine {

inline constexpr int kQK4 = 32;   // elements per legacy block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

// Q4_0: x = d * (q - 8), q in [0, 15]; element j in the low nibble of
// qs[j], element j + 16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// IQ4_NL: x = d * kIq4NlValues[q], q in [0, 15], nibbles as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;  // fp16
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);
// The format's 16 levels (part of its definition, as GGUF files use it).
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Q4_1: x = d * q + m, q in [0, 15], nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x = d * (q - 16), q in [0, 31]: low 4 bits as Q4_0, bit 4 of
// element j in bit j of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x = d * q + m, q in [0, 31], bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q2_K: 16 sub-blocks of 16; sub-block i has scale d * (scales[i] & 15) and
// min dmin * (scales[i] >> 4); x = scale * q - min, q 2 bits. Each 128-half
// holds 32 bytes of qs, four 2-bit planes (shift 0, 2, 4, 6) of 32 elements
// each.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16, signed 6-bit scales (packed in 12 bytes,
// stored + 32); x = d * scale * (q - 4 * !hbit), q the low 2 bits (planes
// as Q2_K), hbit in hmask (bit plane per 32-element group).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;  // fp16
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes;
// x = d * sc * q - dmin * m, q 4 bits: each 64 elements share 32 bytes
// (low nibbles the first 32, high nibbles the next).
struct BlockQ4_K {
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: Q4_K with a fifth bit per element in qh (bit 2i / 2i+1 for the
// i-th 64-element group's two halves).
struct BlockQ5_K {
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * scale * (q - 32), q 6
// bits: low 4 in ql, high 2 in qh.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;  // fp16
};
static_assert(sizeof(BlockQ6_K) == 210);

// The packed sub-block scales, as the dequantizers and dot products read
// them. Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) of a
// super-block's 12 scale bytes. Q3_K: its 16 signed 6-bit scales (stored
// + 32 in 12 bytes).
void ScaleMinK4(int j, const uint8_t* packed, uint8_t* scale, uint8_t* min);
void UnpackScalesQ3K(const uint8_t* packed, int8_t* scales);
// Q6_K: the super-block's 256 quants in order, 0..63 (the weight is
// d * scale * (q - 32)), from its planes of low nibbles and high bit pairs.
void UnpackQuantsQ6K(const BlockQ6_K& block, uint8_t* q);

// Reference dequantizers: `n` elements (a multiple of the block size) from
// blocks at `x` into `y`.
void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n);
void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t n);
void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t n);
void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n);
void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n);
void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n);
void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n);
void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n);
void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n);
void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n);

// Quantizers: `n` floats (a multiple of the block size) into blocks. The
// legacy types round as ggml's reference quantizers do; the K-quants pick
// each sub-block's scale (and min) by a small search for the lowest squared
// error, then quantize the scales themselves.
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n);
void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n);
// IQ4_NL: per block, the scale of lowest squared error among candidates
// that put the block's extreme value on or near each end of the table.
void QuantizeRowIQ4_NL(const float* x, BlockIQ4_NL* y, int64_t n);
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n);
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n);
void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, int64_t n);
void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, int64_t n);
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n);
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_GGUF_QUANT_FORMATS_H_
