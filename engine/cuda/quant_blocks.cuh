// Decoders of GGUF's block-quantized weight formats for the GPU kernels in
// quant_kernels.cu and quant_gemm.cu (the GEMV, the f16 dequantizer, the
// embedding gather and the tile GEMM all decode through these, so they
// agree on the layout), and WithFormat, which their launchers dispatch
// through.
//
// A block is cut into `kUnits` units, the piece one thread decodes at a
// time: `kRuns` runs of `kLen` contiguous elements, each run with one scale
// and one min, weight = scale * q - min. Keeping scale and q apart lets the
// GEMV apply the scale once per run; Weight() rebuilds each element with the
// same roundings, in the same order, as the CPU reference dequantizers
// (engine/gguf/quant_formats.cc, DequantizeRowQ8_0), so a gathered embedding
// row is bit-identical to the CPU's.
//
// Every function is __host__ __device__ so a host program can check the
// decoders against DequantizeRow without a GPU. Block layouts: the structs
// in engine/gguf/quant_formats.h and tensor_type.h, whose sizes and field
// offsets the static_asserts below pin.
#ifndef TANDEM_ENGINE_CUDA_QUANT_BLOCKS_CUH_
#define TANDEM_ENGINE_CUDA_QUANT_BLOCKS_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/gguf/quant_formats.h"
#include "engine/gguf/tensor_type.h"

#define TANDEM_HD __host__ __device__ __forceinline__

namespace tandem::engine::cuda::quant {

// A T at `p`, which must be aligned for T. Device code dereferences (one
// load instruction); host code copies, which is defined for any bytes.
template <typename T>
TANDEM_HD T Load(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

// Four bytes at a 2-byte-aligned `p`, little-endian: the blocks of 18, 34
// and 210 bytes put their fields only 2-byte aligned.
TANDEM_HD uint32_t LoadU32Aligned2(const uint8_t* p) {
  return static_cast<uint32_t>(Load<uint16_t>(p)) |
         (static_cast<uint32_t>(Load<uint16_t>(p + 2)) << 16);
}

// Byte i (0..3) of a little-endian word.
TANDEM_HD uint32_t Byte(uint32_t word, int i) { return (word >> (8 * i)) & 0xFFu; }

TANDEM_HD float HalfBitsToFloat(uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));  // exact, as the CPU's Fp16ToFp32
}

TANDEM_HD float BitsToFloat(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

// v - bias as a float, for v < 2^22 and a small integer bias. 2^23 + v has
// v in its low mantissa bits, and subtracting 2^23 + bias is exact; this
// avoids the int-to-float conversion instruction, which runs at a quarter
// of the FMA rate on sm_80 / sm_90 and would otherwise bound the GEMV's
// decode, one per weight.
TANDEM_HD float SmallIntToFloat(uint32_t v, float bias) {
  return BitsToFloat(0x4B000000u | v) - (8388608.0f + bias);
}

// a * b and a - b rounded once each: nvcc would otherwise contract
// a * b - c into one FMA, which rounds differently from the CPU reference
// (built as ISO C++ for x86-64 without FMA, so never contracted).
TANDEM_HD float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TANDEM_HD float SubRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Two floats as f16 (nearest even) in one word, the first in the low half
// as in memory.
TANDEM_HD uint32_t PackHalves(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  uint32_t word;
  memcpy(&word, &h, sizeof(word));
  return word;
}

template <int kRunCount, int kRunLen>
struct Unit {
  int offset[kRunCount];  // each run's first element within the block
  float scale[kRunCount];
  float min[kRunCount];  // weight = scale * q - min; 0 for formats without one
  float q[kRunCount][kRunLen];
};

// Element i of run r, rounded as the CPU reference rounds it: the scale
// (d, or d times a sub-block scale) first, then times q, then minus the
// min. x - 0 is x for every float, so formats without a min are exact too.
template <typename U>
TANDEM_HD float Weight(const U& u, int r, int i) {
  return SubRn(MulRn(u.scale[r], u.q[r][i]), u.min[r]);
}

// Elements e..e + 7 of run r as f16 in one 16-byte word, each rounded as
// Weight rounds it.
template <typename U>
TANDEM_HD uint4 EightHalves(const U& u, int r, int e) {
  uint4 v;
  v.x = PackHalves(Weight(u, r, e), Weight(u, r, e + 1));
  v.y = PackHalves(Weight(u, r, e + 2), Weight(u, r, e + 3));
  v.z = PackHalves(Weight(u, r, e + 4), Weight(u, r, e + 5));
  v.w = PackHalves(Weight(u, r, e + 6), Weight(u, r, e + 7));
  return v;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K
// super-block, from its 12 packed bytes held as three little-endian words.
struct ScaleMin {
  uint32_t scale;
  uint32_t min;
};
TANDEM_HD uint32_t PackedByte(const uint32_t (&w)[3], int i) {
  const uint32_t word = i < 4 ? w[0] : (i < 8 ? w[1] : w[2]);  // selects, no local memory
  return Byte(word, i % 4);
}
TANDEM_HD ScaleMin UnpackScaleMinK4(const uint32_t (&w)[3], int j) {
  if (j < 4) return {PackedByte(w, j) & 63u, PackedByte(w, j + 4) & 63u};
  return {(PackedByte(w, j + 4) & 0xFu) | ((PackedByte(w, j - 4) >> 6) << 4),
          (PackedByte(w, j + 4) >> 4) | ((PackedByte(w, j) >> 6) << 4)};
}

// Q8_0 (34 bytes: f16 d, 32 int8): unit = half a block, one run of 16.
struct Q8_0 {
  static constexpr int kElems = kQ8_0BlockSize;
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr int kUnits = 2;
  static constexpr int kRuns = 1;
  static constexpr int kLen = 16;
  static constexpr bool kHasMin = false;
  static constexpr int kAlignment = 2;  // of the row start this decoder needs
  using UnitT = Unit<kRuns, kLen>;
  static_assert(offsetof(BlockQ8_0, qs) == 2);

  TANDEM_HD static void Decode(const uint8_t* block, int part, UnitT& u) {
    u.offset[0] = 16 * part;
    u.scale[0] = HalfBitsToFloat(Load<uint16_t>(block));
    u.min[0] = 0.0f;
    const uint8_t* qs = block + 2 + 16 * part;
#pragma unroll
    for (int i = 0; i < 16; i += 4) {
      const uint32_t word = LoadU32Aligned2(qs + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // int8 b as unsigned b + 128 (flip the sign bit), then minus 128.
        u.q[0][i + j] = SmallIntToFloat(Byte(word, j) ^ 0x80u, 128.0f);
      }
    }
  }
};

// Q4_0 (18 bytes: f16 d, 16 bytes of nibbles; element j low nibble of
// qs[j], j + 16 its high nibble): unit = 8 qs bytes, runs [8p, 8p + 8) and
// [16 + 8p, 24 + 8p).
struct Q4_0 {
  static constexpr int kElems = kQK4;
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr int kUnits = 2;
  static constexpr int kRuns = 2;
  static constexpr int kLen = 8;
  static constexpr bool kHasMin = false;
  static constexpr int kAlignment = 2;
  using UnitT = Unit<kRuns, kLen>;
  static_assert(offsetof(BlockQ4_0, qs) == 2);

  TANDEM_HD static void Decode(const uint8_t* block, int part, UnitT& u) {
    const float d = HalfBitsToFloat(Load<uint16_t>(block));
    u.offset[0] = 8 * part;
    u.offset[1] = 16 + 8 * part;
    u.scale[0] = u.scale[1] = d;
    u.min[0] = u.min[1] = 0.0f;
    const uint8_t* qs = block + 2 + 8 * part;
#pragma unroll
    for (int i = 0; i < 8; i += 4) {
      const uint32_t word = LoadU32Aligned2(qs + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        u.q[0][i + j] = SmallIntToFloat(Byte(word, j) & 0xFu, 8.0f);
        u.q[1][i + j] = SmallIntToFloat(Byte(word, j) >> 4, 8.0f);
      }
    }
  }
};

// The shared part of Q4_K and Q5_K: f16 d and dmin, 12 bytes of packed
// 6-bit scales and mins; 64-element group g uses 32 qs bytes, low nibbles
// elements [64g, 64g + 32), high nibbles the next 32. Unit k (0..7) takes
// 16 of those bytes: g = k / 2, l0 = 16 * (k % 2), runs [64g + l0, +16)
// (sub-block 2g) and [64g + 32 + l0, +16) (sub-block 2g + 1).
struct K4Header {
  float scale[2];
  float min[2];
};
TANDEM_HD K4Header DecodeK4Header(const uint8_t* block, int g) {
  const uint32_t dm = Load<uint32_t>(block);
  const float d = HalfBitsToFloat(static_cast<uint16_t>(dm & 0xFFFFu));
  const float dmin = HalfBitsToFloat(static_cast<uint16_t>(dm >> 16));
  const uint32_t packed[3] = {Load<uint32_t>(block + 4), Load<uint32_t>(block + 8),
                              Load<uint32_t>(block + 12)};
  K4Header h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const ScaleMin sm = UnpackScaleMinK4(packed, 2 * g + r);
    // The CPU computes d * sc * q - dmin * m: d * sc and dmin * m first.
    h.scale[r] = MulRn(d, SmallIntToFloat(sm.scale, 0.0f));
    h.min[r] = MulRn(dmin, SmallIntToFloat(sm.min, 0.0f));
  }
  return h;
}

// What Q4_K and Q5_K share of a unit: part p of a super-block is half of
// group g = p / 2's 32 elements in each of its two sub-blocks (runs), scaled
// and offset by the group's header. Returns g.
TANDEM_HD int DecodeK4Runs(const uint8_t* block, int part, Unit<2, 16>& u) {
  const int g = part / 2;
  const int l0 = 16 * (part % 2);
  const K4Header h = DecodeK4Header(block, g);
  u.offset[0] = 64 * g + l0;
  u.offset[1] = 64 * g + 32 + l0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    u.scale[r] = h.scale[r];
    u.min[r] = h.min[r];
  }
  return g;
}

// Q4_K (144 bytes); 16-byte loads of qs, so the row start must be 16-byte
// aligned (144 is a multiple of 16, so every block then is).
struct Q4_K {
  static constexpr int kElems = kQKK;
  static constexpr int kBytes = sizeof(BlockQ4_K);
  static constexpr int kUnits = 8;
  static constexpr int kRuns = 2;
  static constexpr int kLen = 16;
  static constexpr bool kHasMin = true;
  static constexpr int kAlignment = 16;
  using UnitT = Unit<kRuns, kLen>;
  static_assert(offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);
  static_assert(kBytes % 16 == 0);

  TANDEM_HD static void Decode(const uint8_t* block, int part, UnitT& u) {
    DecodeK4Runs(block, part, u);
    const uint4 qs = Load<uint4>(block + 16 + 16 * part);
    const uint32_t words[4] = {qs.x, qs.y, qs.z, qs.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t byte = Byte(words[i / 4], i % 4);
      u.q[0][i] = SmallIntToFloat(byte & 0xFu, 0.0f);
      u.q[1][i] = SmallIntToFloat(byte >> 4, 0.0f);
    }
  }
};

// Q5_K (176 bytes): Q4_K's layout plus qh, whose byte l holds the fifth bit
// of element 32 * s + l of sub-block s in bit s. 16-byte loads of qs and
// qh; 176 is a multiple of 16.
struct Q5_K {
  static constexpr int kElems = kQKK;
  static constexpr int kBytes = sizeof(BlockQ5_K);
  static constexpr int kUnits = 8;
  static constexpr int kRuns = 2;
  static constexpr int kLen = 16;
  static constexpr bool kHasMin = true;
  static constexpr int kAlignment = 16;
  using UnitT = Unit<kRuns, kLen>;
  static_assert(offsetof(BlockQ5_K, scales) == 4 && offsetof(BlockQ5_K, qh) == 16 &&
                offsetof(BlockQ5_K, qs) == 48);
  static_assert(kBytes % 16 == 0);

  TANDEM_HD static void Decode(const uint8_t* block, int part, UnitT& u) {
    const int g = DecodeK4Runs(block, part, u);
    const int l0 = 16 * (part % 2);
    const uint4 qs = Load<uint4>(block + 48 + 16 * part);
    const uint4 qh = Load<uint4>(block + 16 + l0);
    const uint32_t low_words[4] = {qs.x, qs.y, qs.z, qs.w};
    const uint32_t high_words[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t byte = Byte(low_words[i / 4], i % 4);
      const uint32_t high = Byte(high_words[i / 4], i % 4) >> (2 * g);
      u.q[0][i] = SmallIntToFloat((byte & 0xFu) | ((high & 1u) << 4), 0.0f);
      u.q[1][i] = SmallIntToFloat((byte >> 4) | (((high >> 1) & 1u) << 4), 0.0f);
    }
  }
};

// Q6_K (210 bytes: ql[128], qh[64], int8 scales[16], f16 d). Element
// e = 128h + 32k + l (h half, k 0..3, l 0..31): low 4 bits from
// ql[64h + l + 32 (k % 2)] (low nibble for k < 2, else high), high 2 bits
// (qh[32h + l] >> 2k) & 3, sub-block scale scales[e / 16]; weight
// d * scale * (q - 32). Unit p (0..7): h = p / 4, l0 = 8 (p % 4), the four
// runs [128h + 32k + l0, +8), one per k, which share their ql and qh bytes.
struct Q6_K {
  static constexpr int kElems = kQKK;
  static constexpr int kBytes = sizeof(BlockQ6_K);
  static constexpr int kUnits = 8;
  static constexpr int kRuns = 4;
  static constexpr int kLen = 8;
  static constexpr bool kHasMin = false;
  static constexpr int kAlignment = 2;
  using UnitT = Unit<kRuns, kLen>;
  static_assert(offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 &&
                offsetof(BlockQ6_K, d) == 208);

  TANDEM_HD static void Decode(const uint8_t* block, int part, UnitT& u) {
    const int h = part / 4;
    const int l0 = 8 * (part % 4);
    const float d = HalfBitsToFloat(Load<uint16_t>(block + 208));
    const uint8_t* ql = block + 64 * h + l0;
    const uint8_t* qh = block + 128 + 32 * h + l0;
    const uint32_t a[2] = {LoadU32Aligned2(ql), LoadU32Aligned2(ql + 4)};            // k = 0, 2
    const uint32_t b[2] = {LoadU32Aligned2(ql + 32), LoadU32Aligned2(ql + 36)};      // k = 1, 3
    const uint32_t c[2] = {LoadU32Aligned2(qh), LoadU32Aligned2(qh + 4)};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      u.offset[k] = 32 * k + 128 * h + l0;
      const int sub = 8 * h + 2 * k + l0 / 16;
      const int8_t scale = static_cast<int8_t>(block[192 + sub]);
      // The CPU computes d * scale * (q - 32): d * scale first.
      u.scale[k] = MulRn(d, SmallIntToFloat(static_cast<uint32_t>(scale + 128), 128.0f));
      u.min[k] = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t low_byte = Byte(k % 2 == 0 ? a[i / 4] : b[i / 4], i % 4);
        const uint32_t low = k < 2 ? (low_byte & 0xFu) : (low_byte >> 4);
        const uint32_t high = (Byte(c[i / 4], i % 4) >> (2 * k)) & 3u;
        u.q[k][i] = SmallIntToFloat(low | (high << 4), 32.0f);
      }
    }
  }
};

// Host side: whether `p` is `alignment`-byte aligned.
inline bool Aligned(const void* p, int alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// Calls fn(F{}) with the decoder of `type` (host side); cudaErrorInvalidValue
// for a type without one.
template <typename Fn>
cudaError_t WithFormat(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::kQ8_0:
      return fn(Q8_0{});
    case GgmlType::kQ4_0:
      return fn(Q4_0{});
    case GgmlType::kQ4_K:
      return fn(Q4_K{});
    case GgmlType::kQ5_K:
      return fn(Q5_K{});
    case GgmlType::kQ6_K:
      return fn(Q6_K{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tandem::engine::cuda::quant

#endif  // TANDEM_ENGINE_CUDA_QUANT_BLOCKS_CUH_
