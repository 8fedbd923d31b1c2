// Weight matrices repacked once, when the CPU backend prepares a model, into
// the row-interleaved layout of the AVX-512 VNNI kernels (the idea of
// llama.cpp's ggml-cpu "repack"; our own layout and code). Callers: the CPU
// backend (PrepareWeights packs, MatMul finds), MatMulRunner and the kernel
// tests.
//
// Q4_0 ("Q4_0x16"): rows in groups of 16 (the last group padded with zero
// rows); a group is its blocks of 32 columns in order, each 288 bytes:
//   16 fp16 scales, row i's at 2i;
//   4 x 64 bytes of quants: vector v, row i's 4 bytes at 64v + 4i are the
//   row's Q4_0 quant bytes 4v..4v+3 (low nibbles: weights 4v..4v+3; high
//   nibbles: weights 16+4v..16+4v+3).
// Q8_0 ("Q8_0x16"): the same with 8 x 64 bytes of quants (544 bytes a block),
// vector v holding weights 4v..4v+3 of each row, each stored as w + 128 (the
// VNNI dot's unsigned operand).
// Q4_K ("Q4_Kx16"): blocks of 256 columns (a super-block), each 2368 bytes:
//   16 fp16 d, then 16 fp16 dmin (row i's at 2i);
//   the 8 sub-blocks' 6-bit scales unpacked, sub-block s row i at 16s + i,
//   then their mins the same way;
//   32 x 64 bytes of quants: vector 8j + v, row i's 4 bytes at 4i are the
//   row's quant bytes 32j + 4v..+3 (low nibbles: sub-block 2j's weights
//   4v..4v+3; high nibbles: sub-block 2j + 1's).
// Q5_K ("Q5_Kx16"): a Q4_Kx16 block followed by 8 x 64 bytes of fifth bits
//   (2880 bytes a block): vector v, row i's byte c at 4i holds at bit 2j + h the fifth
//   bit of weight 4v + c of sub-block 2j + h (the weight whose low bits are
//   in quant vector 8j + v, low nibble for h = 0, high for h = 1).
// Q6_K ("Q6_Kx16"): blocks of 256 columns, each 4384 bytes:
//   16 fp16 d (row i's at 2i);
//   the 16 sub-blocks' int8 scales, sub-block k row i at 32 + 16k + i;
//   64 x 64 bytes of quants, one byte each: vector 4k + j, row i's 4 bytes
//   at 4i are weights 16k + 4j..+3. A byte per 6-bit quant reads 30% more
//   than ggml's planes but needs no unpacking, which this kernel is bound by
//   (25.7M Q6_K: prefill +14%, decode +19%; the 1B Q4_K_M decode, whose
//   output and some down matrices are Q6_K, +10%).
//   Quants are q = 0..63; a weight is d * scale * (q - 32).
// BF16 ("BF16x16"): rows in groups of 16, columns in pairs (an odd count
//   padded with a zero column): pair k of a group is 64 bytes, row i's two
//   bf16 weights 2k and 2k + 1 at 4i. Its kernel needs AVX512_BF16 and
//   multiplies activations rounded to bf16 (as llama.cpp does for BF16
//   weights): one dot then adds 2 products for each of 16 rows.
// The K-quants' kernels take the activations as ggml's Q8_K (one scale per
// 256, sums of each 16) and sum as ggml does, in int32 per super-block, so
// their numbers are llama.cpp's up to f32 rounding order.
// F16 / F32 ("F16x16", "F32x16"): rows in groups of 16, one column of the
//   16 rows after another (32 / 64 bytes), multiplied by f32 activations
//   with f32 FMAs: the same products as the row-at-a-time kernels, but one
//   sequential stream per group, which decode reads nearer the DRAM limit.
// One 64-byte load then holds 4 weights of each of 16 rows, so a VNNI dot
// against 4 activation bytes broadcast to every lane advances 16 rows at once,
// and the 8 dots of a block share one integer sum per row: a row's block
// costs 1/16 of a conversion and scale, where a row-at-a-time dot pays one
// per block.
#ifndef TANDEM_ENGINE_CPU_PACKED_WEIGHTS_H_
#define TANDEM_ENGINE_CPU_PACKED_WEIGHTS_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "engine/cpu/kernels.h"
#include "engine/model/backend.h"

namespace tandem::engine::cpu {

inline constexpr int kPackRows = 16;

// Columns of one packed block of a Packable type.
constexpr int64_t PackedBlockCols(GgmlType type) {
  if (type == GgmlType::kF16 || type == GgmlType::kF32) return 1;
  if (type == GgmlType::kBF16) return 2;
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K ? 256 : 32;
}

// The form of x a packed type's kernel multiplies (PackedGemvArgs): F32
// and F16 the floats, BF16 x rounded to bf16, Q4_0 and Q8_0 Q8Activations,
// the K-quants Q8_K blocks.
enum class PackedInput { kFloat, kBf16, kQ8, kQ8K };
constexpr PackedInput PackedInputOf(GgmlType type) {
  if (type == GgmlType::kF16 || type == GgmlType::kF32) return PackedInput::kFloat;
  if (type == GgmlType::kBF16) return PackedInput::kBf16;
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0 ? PackedInput::kQ8 : PackedInput::kQ8K;
}

// Byte offsets inside one packed block of 16 rows (the layouts above).
// Q4_0 / Q8_0: 16 fp16 scales, then the quants.
inline constexpr int64_t kPackedQuants = 2 * kPackRows;
// Q4_K / Q5_K: d, dmin, scales, mins, quants, then Q5_K's fifth bits.
inline constexpr int64_t kK4Dmin = 2 * kPackRows;
inline constexpr int64_t kK4Scales = 4 * kPackRows;
inline constexpr int64_t kK4Mins = 12 * kPackRows;
inline constexpr int64_t kK4Quants = 20 * kPackRows;
inline constexpr int64_t kK5Fifth = kK4Quants + 32 * 64;
// Q6_K: d, scales, quants.
inline constexpr int64_t kQ6KScales = 2 * kPackRows;
inline constexpr int64_t kQ6KQuants = 18 * kPackRows;

// Bytes of one packed block x 16 rows of a Packable type.
constexpr int64_t PackedBlockBytes(GgmlType type) {
  switch (type) {
    case GgmlType::kF16:
      return 2 * kPackRows;
    case GgmlType::kF32:
    case GgmlType::kBF16:
      return 4 * kPackRows;
    case GgmlType::kQ8_0:
      return kPackedQuants + 8 * 64;
    case GgmlType::kQ4_K:
      return kK4Quants + 32 * 64;
    case GgmlType::kQ5_K:
      return kK5Fifth + 8 * 64;
    case GgmlType::kQ6_K:
      return kQ6KQuants + 64 * 64;
    default:
      return kPackedQuants + 4 * 64;  // Q4_0
  }
}

class PackedMatrix {
 public:
  // Whether Pack takes `type`.
  static bool Packable(GgmlType type) {
    return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_K ||
           type == GgmlType::kQ5_K || type == GgmlType::kQ6_K || type == GgmlType::kBF16 ||
           type == GgmlType::kF16 || type == GgmlType::kF32;
  }
  // `w` (Packable; a block type's cols a multiple of its block) in its
  // type's x16 layout.
  static PackedMatrix Pack(const WeightMatrix& w);

  GgmlType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t blocks() const { return (cols_ + PackedBlockCols(type_) - 1) / PackedBlockCols(type_); }
  // Bytes of one 16-row group; group g starts at data() + g * group_bytes().
  int64_t group_bytes() const { return blocks() * PackedBlockBytes(type_); }
  const uint8_t* data() const { return data_.get(); }
  int64_t bytes() const { return (rows_ + kPackRows - 1) / kPackRows * group_bytes(); }

 private:
  GgmlType type_ = GgmlType::kQ4_0;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  // 64-byte aligned, in a slab of huge pages it may share with other
  // matrices (which keep the slab while any of them lives).
  std::shared_ptr<uint8_t> data_;
};

// A packed matrix times n tokens' Q8Activations:
//   y[t * ldy + r] = sum_c x[t, c] * w[r, c]   for t < n, row_begin <= r < row_end,
// row_begin a multiple of kPackRows; rows past row_end are not written.
struct PackedGemvArgs {
  const PackedMatrix* w = nullptr;
  const Q8Activations* xq = nullptr;  // the block types'
  const uint16_t* xb = nullptr;       // BF16's: [n][blocks() * 2] bf16, zero padded
  const float* x = nullptr;           // F16's and F32's: [n][cols]
  const uint8_t* xk = nullptr;        // the K-quants': token t's Q8_K blocks at
  int64_t xk_bytes = 0;               //   xk + t * xk_bytes (quant_dot.h)
  int64_t n = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// The AVX-512 VNNI kernel (engine/cpu/packed_avx512.cc); the AVX-512
// table's packed_gemv.
void PackedGemvAvx512(const PackedGemvArgs& args, int64_t row_begin, int64_t row_end);
// Its F16, F32 and BF16 half (engine/cpu/packed_float_avx512.cc).
void PackedFloatGemvAvx512(const PackedGemvArgs& args, int64_t row_begin, int64_t row_end);

// One token's activations (cols a multiple of 256) as Q8_K blocks into
// `out`, byte for byte what QuantizeActivations writes for a K-quant.
void QuantizeQ8KAvx512(const float* x, int64_t cols, void* out);

// Asks the OS to drop the resident pages of w's data (MADV_PAGEOUT, a hint:
// a file mapping's pages are read back if used again), once a packed copy
// serves its products.
void ReleasePages(const WeightMatrix& w);

// Whether this CPU has AVX512_BF16 (BF16x16's kernel).
bool Bf16DotSupported();
// x: [n][cols] f32 rounded to bf16 (nearest even) into out: [n][padded],
// padded >= cols even, the padding zero. Needs Bf16DotSupported().
void ToBf16Avx512(const float* x, int64_t n, int64_t cols, int64_t padded, uint16_t* out);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_PACKED_WEIGHTS_H_
