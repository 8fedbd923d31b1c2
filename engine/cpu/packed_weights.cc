#include "engine/cpu/packed_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "common/check.h"
#include "engine/gguf/quant_formats.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cpu {

namespace {

// Row i's part of a Q4_Kx16 block (or the Q4_K part of a Q5_Kx16 one) at
// `out`, from a Q4_K / Q5_K block's fields.
void PackK4Block(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qs, int64_t i,
                 uint8_t* out) {
  std::memcpy(out + 2 * i, &d, 2);
  std::memcpy(out + 2 * kPackRows + 2 * i, &dmin, 2);
  for (int sub = 0; sub < 8; ++sub) {
    ScaleMinK4(sub, scales, out + 4 * kPackRows + kPackRows * sub + i,
               out + 12 * kPackRows + kPackRows * sub + i);
  }
  for (int v = 0; v < 32; ++v) std::memcpy(out + 20 * kPackRows + 64 * v + 4 * i, qs + 4 * v, 4);
}

// Row i's part of a Q6_Kx16 block at `out`.
void PackQ6KBlock(const BlockQ6_K& block, int64_t i, uint8_t* out) {
  // The 6-bit quants in order (ggml's Q6_K: two halves of 128 weights, each
  // from 64 bytes of low nibbles and 32 of high bit pairs).
  uint8_t q[kQKK];
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = block.ql + 64 * n;
    const uint8_t* qh = block.qh + 32 * n;
    for (int l = 0; l < 32; ++l) {
      q[128 * n + l] = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
      q[128 * n + l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
      q[128 * n + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
      q[128 * n + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
    }
  }
  std::memcpy(out + 2 * i, &block.d, 2);
  uint8_t* quants = out + 18 * kPackRows;
  for (int k = 0; k < 16; ++k) {
    out[2 * kPackRows + kPackRows * k + i] = static_cast<uint8_t>(block.scales[k]);
    for (int j = 0; j < 4; ++j) {
      for (int c = 0; c < 4; ++c) quants[64 * (4 * k + j) + 4 * i + c] = q[16 * k + 4 * j + c];
    }
  }
}

}  // namespace

PackedMatrix PackedMatrix::Pack(const WeightMatrix& w) {
  TANDEM_CHECK(
      Packable(w.type) && (w.cols % PackedBlockCols(w.type) == 0 || w.type == GgmlType::kBF16),
      "packable rows of whole blocks")
      << GgmlTypeName(w.type) << " cols=" << w.cols;
  PackedMatrix p;
  p.type_ = w.type;
  p.rows_ = w.rows;
  p.cols_ = w.cols;
  const size_t bytes = (static_cast<size_t>(p.bytes()) + 63) / 64 * 64;
  p.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  TANDEM_CHECK(p.data_ != nullptr, "out of memory packing weights") << bytes << " bytes";
  std::memset(p.data_.get(), 0, bytes);  // padding rows: zero scales and quants
  const auto* src = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = GgmlRowBytes(w.type, w.cols);
  const int64_t block_bytes = PackedBlockBytes(w.type);
  const bool q8 = w.type == GgmlType::kQ8_0;
  if (w.type == GgmlType::kF16 || w.type == GgmlType::kF32) {
    const int64_t elem = w.type == GgmlType::kF32 ? 4 : 2;
    for (int64_t r = 0; r < w.rows; ++r) {
      uint8_t* group = p.data_.get() + r / kPackRows * p.group_bytes();
      const int64_t i = r % kPackRows;
      for (int64_t c = 0; c < w.cols; ++c) {
        std::memcpy(group + kPackRows * elem * c + elem * i, src + r * row_bytes + elem * c, elem);
      }
    }
  }
  if (w.type == GgmlType::kBF16) {
    for (int64_t r = 0; r < w.rows; ++r) {
      uint8_t* group = p.data_.get() + r / kPackRows * p.group_bytes();
      const int64_t i = r % kPackRows;
      for (int64_t c = 0; c < w.cols; ++c) {
        std::memcpy(group + 64 * (c / 2) + 4 * i + 2 * (c % 2), src + r * row_bytes + 2 * c, 2);
      }
    }
  }
  const bool blocks =
      w.type != GgmlType::kBF16 && w.type != GgmlType::kF16 && w.type != GgmlType::kF32;
  for (int64_t r = 0; r < w.rows && blocks; ++r) {
    uint8_t* group = p.data_.get() + r / kPackRows * p.group_bytes();
    const int64_t i = r % kPackRows;
    for (int64_t b = 0; b < p.blocks(); ++b) {
      uint8_t* out = group + b * block_bytes;
      if (w.type == GgmlType::kQ6_K) {
        BlockQ6_K block;
        std::memcpy(&block, src + r * row_bytes + b * sizeof(BlockQ6_K), sizeof(block));
        PackQ6KBlock(block, i, out);
      } else if (w.type == GgmlType::kQ4_K) {
        BlockQ4_K block;
        std::memcpy(&block, src + r * row_bytes + b * sizeof(BlockQ4_K), sizeof(block));
        PackK4Block(block.d, block.dmin, block.scales, block.qs, i, out);
      } else if (w.type == GgmlType::kQ5_K) {
        BlockQ5_K block;
        std::memcpy(&block, src + r * row_bytes + b * sizeof(BlockQ5_K), sizeof(block));
        PackK4Block(block.d, block.dmin, block.scales, block.qs, i, out);
        // ggml's Q5_K: bit 2j (2j + 1) of qh[l] is the fifth bit of weight
        // l of sub-block 2j (2j + 1).
        uint8_t* fifth = out + 20 * kPackRows + 32 * 64;
        for (int v = 0; v < 8; ++v) {
          for (int c = 0; c < 4; ++c) fifth[64 * v + 4 * i + c] = block.qh[4 * v + c];
        }
      } else if (q8) {
        BlockQ8_0 block;
        std::memcpy(&block, src + r * row_bytes + b * sizeof(BlockQ8_0), sizeof(block));
        std::memcpy(out + 2 * i, &block.d, 2);
        for (int c = 0; c < kQ8_0BlockSize; ++c) {
          // w + 128, as the unsigned byte the dot takes.
          out[2 * kPackRows + 64 * (c / 4) + 4 * i + c % 4] =
              static_cast<uint8_t>(block.qs[c]) ^ 0x80;
        }
      } else {
        BlockQ4_0 block;
        std::memcpy(&block, src + r * row_bytes + b * sizeof(BlockQ4_0), sizeof(block));
        std::memcpy(out + 2 * i, &block.d, 2);
        for (int v = 0; v < 4; ++v) {
          std::memcpy(out + 2 * kPackRows + 64 * v + 4 * i, block.qs + 4 * v, 4);
        }
      }
    }
  }
  return p;
}

void ReleasePages(const WeightMatrix& w) {
#ifdef MADV_PAGEOUT
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto src = reinterpret_cast<uintptr_t>(w.data);
  const auto begin = (src + page - 1) / page * page;
  const auto end =
      (src + static_cast<uintptr_t>(w.rows * GgmlRowBytes(w.type, w.cols))) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
#else
  (void)w;
#endif
}

}  // namespace tandem::engine::cpu
