#include "engine/cpu/packed_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/check.h"
#include "engine/cpu/huge_pages.h"
#include "engine/gguf/quant_formats.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cpu {

namespace {

// Packed matrices are carved out of slabs on huge pages (huge_pages.h): a
// decode GEMV streams every weight once per token (25.7M F16 decode at batch
// 1 went 580-596 -> 613-677 tok/s). A slab is shared by the matrices in it
// and freed with the last; one of 32 MiB (or the matrix's size) is opened
// when the current one cannot fit the next matrix.
constexpr size_t kSlabBytes = size_t{32} << 20;

struct Slabs {
  std::mutex mu;
  std::weak_ptr<uint8_t> current;  // the rest under mu
  size_t used = 0;
  size_t size = 0;
};

std::shared_ptr<uint8_t> AllocatePacked(size_t bytes) {
  static Slabs* const slabs = new Slabs();
  bytes = (bytes + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(slabs->mu);
  std::shared_ptr<uint8_t> slab = slabs->current.lock();
  if (slab == nullptr || slabs->size - slabs->used < bytes) {
    const size_t want =
        std::max(kSlabBytes, (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    auto* base = static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, want));
    TANDEM_CHECK(base != nullptr, "out of memory packing weights") << want << " bytes";
    AdviseHugePages(base, want);
    std::shared_ptr<uint8_t> fresh(base, [](uint8_t* p) { std::free(p); });
    // The slab with more room left stays current.
    if (slab == nullptr || want - bytes > slabs->size - slabs->used) {
      slabs->current = fresh;
      slabs->size = want;
      slabs->used = bytes;
    }
    return fresh;
  }
  uint8_t* at = slab.get() + slabs->used;
  slabs->used += bytes;
  return std::shared_ptr<uint8_t>(slab, at);  // shares the slab's count
}

// Row i's part of a Q4_Kx16 block (or the Q4_K part of a Q5_Kx16 one) at
// `out`, from a Q4_K / Q5_K block's fields.
void PackK4Block(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qs, int64_t i,
                 uint8_t* out) {
  std::memcpy(out + 2 * i, &d, 2);
  std::memcpy(out + kK4Dmin + 2 * i, &dmin, 2);
  for (int sub = 0; sub < 8; ++sub) {
    ScaleMinK4(sub, scales, out + kK4Scales + kPackRows * sub + i,
               out + kK4Mins + kPackRows * sub + i);
  }
  for (int v = 0; v < 32; ++v) std::memcpy(out + kK4Quants + 64 * v + 4 * i, qs + 4 * v, 4);
}

// Row i's part of one packed block at `out`, from the source block at `src`
// (a block type's bytes as ggml stores them).
void PackBlock(GgmlType type, const uint8_t* src, int64_t i, uint8_t* out) {
  switch (type) {
    case GgmlType::kQ4_0: {
      BlockQ4_0 block;
      std::memcpy(&block, src, sizeof(block));
      std::memcpy(out + 2 * i, &block.d, 2);
      for (int v = 0; v < 4; ++v) {
        std::memcpy(out + kPackedQuants + 64 * v + 4 * i, block.qs + 4 * v, 4);
      }
      return;
    }
    case GgmlType::kQ8_0: {
      BlockQ8_0 block;
      std::memcpy(&block, src, sizeof(block));
      std::memcpy(out + 2 * i, &block.d, 2);
      for (int c = 0; c < kQ8_0BlockSize; ++c) {
        // w + 128, as the unsigned byte the dot takes.
        out[kPackedQuants + 64 * (c / 4) + 4 * i + c % 4] =
            static_cast<uint8_t>(block.qs[c]) ^ 0x80;
      }
      return;
    }
    case GgmlType::kQ4_K: {
      BlockQ4_K block;
      std::memcpy(&block, src, sizeof(block));
      PackK4Block(block.d, block.dmin, block.scales, block.qs, i, out);
      return;
    }
    case GgmlType::kQ5_K: {
      BlockQ5_K block;
      std::memcpy(&block, src, sizeof(block));
      PackK4Block(block.d, block.dmin, block.scales, block.qs, i, out);
      // ggml's Q5_K: bit 2j (2j + 1) of qh[l] is the fifth bit of weight
      // l of sub-block 2j (2j + 1).
      for (int v = 0; v < 8; ++v) {
        for (int c = 0; c < 4; ++c) out[kK5Fifth + 64 * v + 4 * i + c] = block.qh[4 * v + c];
      }
      return;
    }
    case GgmlType::kQ6_K: {
      BlockQ6_K block;
      std::memcpy(&block, src, sizeof(block));
      uint8_t q[kQKK];
      UnpackQuantsQ6K(block, q);
      std::memcpy(out + 2 * i, &block.d, 2);
      for (int k = 0; k < 16; ++k) {
        out[kQ6KScales + kPackRows * k + i] = static_cast<uint8_t>(block.scales[k]);
        for (int j = 0; j < 4; ++j) {
          std::memcpy(out + kQ6KQuants + 64 * (4 * k + j) + 4 * i, q + 16 * k + 4 * j, 4);
        }
      }
      return;
    }
    default:
      TANDEM_CHECK(false, "no packed layout for") << GgmlTypeName(type);
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
  p.data_ = AllocatePacked(bytes);
  std::memset(p.data_.get(), 0, bytes);  // padding rows: zero scales and quants
  const int64_t row_bytes = GgmlRowBytes(w.type, w.cols);
  const int64_t block_bytes = PackedBlockBytes(w.type);
  const int64_t source_block_bytes = GgmlRowBytes(w.type, PackedBlockCols(w.type));
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    uint8_t* group = p.data_.get() + r / kPackRows * p.group_bytes();
    const int64_t i = r % kPackRows;
    switch (w.type) {
      case GgmlType::kF16:
      case GgmlType::kF32: {
        const int64_t elem = w.type == GgmlType::kF32 ? 4 : 2;
        for (int64_t c = 0; c < w.cols; ++c) {
          std::memcpy(group + kPackRows * elem * c + elem * i, row + elem * c, elem);
        }
        break;
      }
      case GgmlType::kBF16:
        for (int64_t c = 0; c < w.cols; ++c) {
          std::memcpy(group + 64 * (c / 2) + 4 * i + 2 * (c % 2), row + 2 * c, 2);
        }
        break;
      default:
        for (int64_t b = 0; b < p.blocks(); ++b) {
          PackBlock(w.type, row + b * source_block_bytes, i, group + b * block_bytes);
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
