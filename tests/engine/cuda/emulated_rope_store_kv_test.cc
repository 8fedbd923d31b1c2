// engine/cuda/rope_store_kv.cu's fused RoPE and KV store, its own source run
// on the CPU under the CUDA emulation (emulation/), against the host's
// RopeTable and a store written out here: q and k rotated in place (both
// styles, a partial rotation), k and v in their slots of f32 and f16 pools,
// pad rows (slot -1) storing nothing, and a call without q (a layer whose
// keys alone are stored). In every build: no GPU or nvcc needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/gguf/model_config.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/rope.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

namespace tandem::engine::cuda {
namespace {

constexpr int32_t kHeadDim = 64;
constexpr int32_t kHeads = 4;
constexpr int32_t kKvHeads = 2;
constexpr int32_t kKvDim = kKvHeads * kHeadDim;
constexpr int32_t kBlockSize = 4;
constexpr int32_t kBlocks = 3;
constexpr uint8_t kUntouched = 0xab;

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

// A one-layer pool: each block's keys, then its values.
struct Pool {
  explicit Pool(bool f16)
      : elem(f16 ? 2 : 4),
        bytes(size_t{kBlocks} * 2 * kBlockSize * kKvDim * elem, kUntouched),
        view{.base = bytes.data(),
             .block_bytes = 2 * kBlockSize * kKvDim * elem,
             .k_offset = 0,
             .v_offset = kBlockSize * kKvDim * elem,
             .block_size = kBlockSize,
             .kv_dim = kKvDim,
             .f16 = f16} {}
  // The bytes of `row` ([kv_dim] f32) as the pool holds them.
  std::vector<uint8_t> Encoded(const float* row) const {
    std::vector<uint8_t> out(size_t{kKvDim} * elem);
    for (int32_t i = 0; i < kKvDim; ++i) {
      if (view.f16) {
        const uint16_t h = Fp32ToFp16(row[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(out.data() + 4 * i, &row[i], 4);
      }
    }
    return out;
  }
  std::vector<uint8_t> At(int64_t slot, bool value) const {
    const uint8_t* p = bytes.data() + slot / kBlockSize * view.block_bytes +
                       (value ? view.v_offset : view.k_offset) + slot % kBlockSize * kKvDim * elem;
    return {p, p + size_t{kKvDim} * elem};
  }
  int64_t elem;
  std::vector<uint8_t> bytes;
  emulation::KvPool view;
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-6f * std::max(1.0f, std::abs(want[i]))) << "at " << i;
  }
}

TEST(EmulatedRopeStoreKvTest, RotatesQAndKAndStoresKAndVInTheirSlots) {
  std::mt19937 rng(21);
  for (const RopeType type : {RopeType::kNormal, RopeType::kNeox}) {
    for (const bool f16 : {false, true}) {
      for (const bool with_q : {true, false}) {
        SCOPED_TRACE(testing::Message() << (type == RopeType::kNeox ? "neox" : "normal")
                                        << (f16 ? ", f16" : ", f32") << (with_q ? "" : ", no q"));
        ModelConfig c;
        c.n_rot = 48;  // fewer than head_dim: the rest is left alone
        c.head_dim = kHeadDim;
        c.rope_type = type;
        c.rope_freq_base = 10000.0f;
        const RopeTable rope(c, {}, 64);
        const std::vector<int32_t> positions = {0, 5, 63, 17, 9};
        const std::vector<int64_t> slots = {0, 5, -1, 11, 6};  // -1: a pad row
        const auto tokens = static_cast<int64_t>(positions.size());
        const std::vector<float> q0 = Random(tokens * kHeads * kHeadDim, rng);
        const std::vector<float> k0 = Random(tokens * kKvDim, rng);
        const std::vector<float> v = Random(tokens * kKvDim, rng);
        std::vector<float> q = q0, k = k0, want_q = q0, want_k = k0;
        for (int64_t t = 0; t < tokens; ++t) {
          if (with_q)
            rope.Apply(want_q.data() + t * kHeads * kHeadDim, kHeads, kHeadDim, positions[t]);
          rope.Apply(want_k.data() + t * kKvDim, kKvHeads, kHeadDim, positions[t]);
        }
        Pool pool(f16);
        ASSERT_EQ(emulation::RunRopeStoreKv(
                      with_q ? q.data() : nullptr, kHeads, k.data(), v.data(), kKvHeads, kHeadDim,
                      positions.data(), c.n_rot, type == RopeType::kNeox, rope.cos_table().data(),
                      rope.sin_table().data(), pool.view, slots.data(), tokens),
                  0);
        ExpectNear(q, want_q);  // q0 itself without q
        ExpectNear(k, want_k);
        std::vector<bool> stored(kBlocks * kBlockSize, false);
        for (int64_t t = 0; t < tokens; ++t) {
          if (slots[t] < 0) continue;
          stored[slots[t]] = true;
          // The stored key is the rotated one the kernel left in k.
          EXPECT_EQ(pool.At(slots[t], false), pool.Encoded(k.data() + t * kKvDim)) << "key " << t;
          EXPECT_EQ(pool.At(slots[t], true), pool.Encoded(v.data() + t * kKvDim)) << "value " << t;
        }
        const std::vector<uint8_t> untouched(size_t{kKvDim} * pool.elem, kUntouched);
        for (int64_t s = 0; s < kBlocks * kBlockSize; ++s) {
          if (stored[s]) continue;
          EXPECT_EQ(pool.At(s, false), untouched) << "slot " << s;
          EXPECT_EQ(pool.At(s, true), untouched) << "slot " << s;
        }
      }
    }
  }
}

TEST(EmulatedRopeStoreKvTest, APoolOfAnotherRowWidthIsRefused) {
  std::vector<float> k(kKvDim), v(kKvDim);
  const std::vector<float> table(64, 1.0f);
  const int32_t position = 0;
  const int64_t slot = 0;
  Pool pool(false);
  pool.view.kv_dim = kKvDim / 2;
  EXPECT_NE(
      emulation::RunRopeStoreKv(nullptr, 0, k.data(), v.data(), kKvHeads, kHeadDim, &position,
                                kHeadDim, false, table.data(), table.data(), pool.view, &slot, 1),
      0);
}

}  // namespace
}  // namespace tandem::engine::cuda
