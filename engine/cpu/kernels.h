// Per-ISA CPU compute kernels behind the CPU backend: matrix-vector products
// over a range of weight rows (decode and small batches), weight dequantization
// for the GEMM path, activation quantization for Q8_0, and the element-wise
// ops. Callers: engine/cpu/matmul.cc, engine/cpu/cpu_backend.cc and the kernel
// tests. Every function is reentrant; callers own all buffers.
#ifndef TANDEM_ENGINE_CPU_KERNELS_H_
#define TANDEM_ENGINE_CPU_KERNELS_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cpu {

struct PackedGemvArgs;  // engine/cpu/packed_weights.h

// Instruction sets with their own kernels. kPortable is plain C++ compiled for
// the baseline target and runs anywhere.
enum class Isa {
  kPortable,
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512 F/BW/VL/DQ + VNNI + F16C
};

std::string_view IsaName(Isa isa);
// The ISA IsaName gives `name`, or nullopt.
std::optional<Isa> IsaFromName(std::string_view name);
// The best ISA this CPU supports, or the one the environment variable
// TANDEM_ISA names ("portable", "avx2", "avx512") when this CPU has it;
// decided once.
Isa DetectIsa();
bool IsaSupported(Isa isa);

// Activations quantized for the Q8_0 kernels, one row per token. Each row is
// `pairs` = ceil(cols / 64) pairs of 32-element blocks; a missing second block
// of the last pair is zero. Per token t and pair p (64 lanes of int8, 16 lanes
// of int32/float, lane groups of 8 per block):
//   qs[t][p*64 + 32*b + i]  = round(x[t][64p + 32b + i] / d_b)
//   bias[t][p*16 + 8*b + j] = -16 * sum_i qs of block b (so that the 8 lanes
//                             of a block sum to -128 * block sum)
//   scale[t][p*16 + 8*b + j] = d_b = max|x block| / 127
// The bias lets the kernels feed weights to an unsigned-by-signed int8 dot
// product as (w + 128). Buffers are 64-byte aligned.
struct Q8Activations {
  int64_t pairs = 0;
  int8_t* qs = nullptr;      // [n][pairs * 64]
  int32_t* bias = nullptr;   // [n][pairs * 16]
  float* scale = nullptr;    // [n][pairs * 16]
};

// One matrix-vector (or small matrix-matrix) product over a row range:
//   y[t * ldy + r] = sum_c x[t, c] * w[r, c]   for t < n, row_begin <= r < row_end.
struct GemvArgs {
  GgmlType type = GgmlType::kF32;
  const uint8_t* w = nullptr;  // row r at w + r * row_bytes; any alignment
  int64_t row_bytes = 0;
  int64_t cols = 0;
  int64_t n = 0;
  const float* x = nullptr;            // [n][cols]; used by F32, F16, BF16
  const Q8Activations* xq = nullptr;   // used by Q8_0, Q4_0 (cols % 32 == 0)
  float* y = nullptr;
  int64_t ldy = 0;
  // Per-calling-thread scratch of at least GemvScratchFloats(cols) floats,
  // 64-byte aligned.
  float* scratch = nullptr;
};

inline int64_t GemvScratchFloats(int64_t cols) { return 8 * (cols + 16); }

// Function table of one ISA. All pointers are non-null.
struct KernelTable {
  Isa isa;
  void (*gemv)(const GemvArgs& args, int64_t row_begin, int64_t row_end);
  // Quantizes x: [n][cols] (cols % 32 == 0) into `out`, sized for n tokens.
  void (*quantize_q8)(const float* x, int64_t n, int64_t cols,
                      const Q8Activations& out);
  // Converts `rows` rows of `cols` elements of `type` (row i at
  // src + i * row_bytes) into dst: [rows][cols] f32.
  void (*dequantize_rows)(GgmlType type, const uint8_t* src, int64_t row_bytes,
                          int64_t rows, int64_t cols, float* dst);
  // Same contracts as the Backend methods; ranges, not thread-parallel.
  void (*rms_norm)(const float* x, const float* weight, int64_t n_tokens,
                   int64_t dim, float eps, float* y);
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
  void (*add)(float* x, const float* y, int64_t n);
  // One row of a block-quantized type with a quantized-activation dot
  // product (engine/cpu/quant_dot.h: HasQuantDot) against n tokens'
  // activations quantized by QuantizeActivations (token t's at xq + t *
  // x_bytes): y[t * ldy] for each.
  void (*quant_dot)(GgmlType type, const uint8_t* w, const uint8_t* xq, int64_t x_bytes,
                    int64_t n, int64_t cols, float* y, int64_t ldy);
  // Whether `gemv` multiplies Q4_0 as well as Q8_0 blocks by Q8Activations
  // (args.xq) in VNNI register tiles, which beat dequantized sgemm at any
  // row length and token count; without it Q4_0 goes through quant_dot.
  bool vnni_gemv = false;
  // Products of matrices repacked at load (engine/cpu/packed_weights.h:
  // PackedMatrix), or null where this ISA has no packed layout.
  void (*packed_gemv)(const PackedGemvArgs& args, int64_t row_begin, int64_t row_end) = nullptr;
};

// The table for `isa`; `isa` must be supported (CHECKed by callers via
// IsaSupported when forced).
const KernelTable& Kernels(Isa isa);

// Per-ISA tables, defined in kernels_portable.cc / kernels_avx2.cc /
// kernels_avx512.cc.
const KernelTable& PortableKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_KERNELS_H_
