// The CUDA Backend against the CPU backend: every op on random inputs
// through the Backend interface, and whole engines (greedy decoding of
// stories260K, the 25.7M synthetic model and small models that take every
// path: biases, NeoX RoPE, tied embeddings, f16 KV, chunked prefill, prompt
// logprobs), and a request prefilled on one backend and decoded on the
// other. Each test skips on a machine without a usable CUDA device and fails
// instead with TANDEM_REQUIRE_CUDA=1 (scripts/gpu_check.sh sets it).
//
// Tolerances. F32 element-wise ops and copies: 1e-5 relative or exact;
// attention and the logits reduction: 1e-4 (a different summation order).
// Engines: greedy ids equal up to the first position where the CPU's top-2
// gap is below the tolerance (after it, a legitimate rounding difference can
// pick the other token and the texts part), logprobs within 1e-3 for F32
// weights; 2e-2 for F16 and 5e-2 for BF16 (the GPU rounds the activations
// to the weight's type for the tensor cores at prefill; the CPU rounds them
// to bf16 for BF16 weights where it has AVX512_BF16); 0.15 for the quantized
// types, whose CPU dots quantize the activations to 8 bits and whose GPU
// kernels do not (on these random-weight models that moves logprobs by up
// to 0.06). The host-side arithmetic is tested in step_plan_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/launch.h"
#include "engine/engine.h"
#include "engine/model/backend.h"
#include "engine/model/rope.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using testing::LoadSynthetic;
using testing::TinyOptions;

// Under the host emulation of CUDA (tests/engine/CMakeLists.txt builds this
// file against it too), where a 512-token prefill of the 25.7M model takes
// a minute, the slowest engine tests take fewer runs: the long prompts of
// the attention tiles' test two rather than three, the programmatic
// launches F16 and Q4_K (the 16-bit and quantized GEMVs) without F32 and Q6_K.
#ifdef TANDEM_CUDA_EMULATION
constexpr int kLongPrompts = 2;
constexpr GgmlType kLaunchTypes[] = {GgmlType::kF16, GgmlType::kQ4_K};
#else
constexpr int kLongPrompts = 3;
constexpr GgmlType kLaunchTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ4_K,
                                     GgmlType::kQ6_K};
#endif

bool CudaRequired() {
  const char* v = std::getenv("TANDEM_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

// Skips (or fails under TANDEM_REQUIRE_CUDA=1) without a usable device.
#define TANDEM_REQUIRE_DEVICE()                                                      \
  do {                                                                               \
    const absl::StatusOr<int> count = cuda::DeviceCount();                           \
    if (!count.ok()) {                                                               \
      if (CudaRequired()) FAIL() << "TANDEM_REQUIRE_CUDA=1: " << count.status();     \
      GTEST_SKIP() << count.status().message();                                      \
    }                                                                                \
  } while (0)

std::unique_ptr<Backend> Cuda(const CudaBackendOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Backend>> b = MakeCudaBackend(options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

std::unique_ptr<Backend> Cpu() { return MakeCpuBackend({.threads = 2}); }

// --- Ops ---------------------------------------------------------------------

// The same inputs in both backends' memory.
class Pair {
 public:
  Pair() : cpu_(Cpu()), cuda_(Cuda()) {}
  Backend& cpu() { return *cpu_; }
  Backend& cuda() { return *cuda_; }
  bool ok() const { return cuda_ != nullptr; }

  struct Ptr {
    DevicePtr<uint8_t> cpu;
    DevicePtr<uint8_t> cuda;
    int64_t bytes = 0;
    DevicePtr<float> f(bool on_cuda) const { return (on_cuda ? cuda : cpu).As<float>(); }
  };
  Ptr Put(const void* host, int64_t bytes) {
    Ptr p{.cpu = *cpu_->Allocate(bytes, "test"), .cuda = *cuda_->Allocate(bytes, "test"),
          .bytes = bytes};
    const std::span<const uint8_t> s(static_cast<const uint8_t*>(host), bytes);
    cpu_->Upload(p.cpu, s);
    cuda_->Upload(p.cuda, s);
    return p;
  }
  template <typename T>
  Ptr Put(const std::vector<T>& v) {
    return Put(v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
  }
  Ptr Zeros(int64_t bytes) { return Put(std::vector<uint8_t>(bytes, 0)); }
  template <typename T>
  std::vector<T> Get(const Ptr& p, bool on_cuda) {
    std::vector<T> v(p.bytes / sizeof(T));
    (on_cuda ? cuda_ : cpu_)
        ->Download(on_cuda ? p.cuda : p.cpu,
                   {reinterpret_cast<uint8_t*>(v.data()), v.size() * sizeof(T)});
    return v;
  }
  // Runs `op` on each backend.
  template <typename Op>
  void Both(Op op) {
    op(*cpu_, false);
    op(*cuda_, true);
  }

 private:
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda_;
};

std::vector<float> Random(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0f, std::abs(want[i]))) << what << " at " << i;
  }
}

TEST(CudaBackendTest, ElementwiseOpsMatchTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  Pair p;
  ASSERT_TRUE(p.ok());
  std::mt19937 rng(7);
  const int64_t rows = 7, dim = 300;
  const auto x = p.Put(Random(rng, rows * dim, 3.0f));
  const auto y = p.Put(Random(rng, rows * dim));
  const auto w = p.Put(Random(rng, dim));
  const auto out = p.Zeros(rows * dim * 4);
  p.Both([&](Backend& b, bool g) {
    b.RmsNorm(x.f(g), w.f(g), rows, dim, 1e-5f, out.f(g));
    b.AddBias(out.f(g), w.f(g), rows, dim);
    b.Add(out.f(g), y.f(g), rows * dim);
    b.SwiGlu(out.f(g), y.f(g), rows * dim, out.f(g));
  });
  ExpectNear(p.Get<float>(out, true), p.Get<float>(out, false), 1e-5f, "rmsnorm/bias/add/swiglu");
}

// A mixed step: a prefill chunk, a decode row deep in its context, a chunk
// continuing a cached prefix; blocks scattered over the pool.
struct MixedStep {
  static constexpr int32_t kBlockSize = 16;
  StepMetadata meta;
  int32_t num_blocks = 24;

  MixedStep() {
    struct Seq {
      int32_t n_rows, kv_start;
      std::vector<BlockId> blocks;
    };
    const std::vector<Seq> seqs = {{5, 0, {3}}, {1, 37, {10, 2, 17}}, {9, 20, {5, 22}}};
    for (const Seq& s : seqs) {
      const int32_t first = meta.n_tokens();
      meta.seqs.push_back({.first_row = first,
                           .n_rows = s.n_rows,
                           .kv_start = s.kv_start,
                           .table_offset = static_cast<int32_t>(meta.block_tables.size()),
                           .n_blocks = static_cast<int32_t>(s.blocks.size())});
      meta.block_tables.insert(meta.block_tables.end(), s.blocks.begin(), s.blocks.end());
      for (int32_t i = 0; i < s.n_rows; ++i) {
        const int32_t slot = s.kv_start + i;
        meta.tokens.push_back((first + i) * 37 % 300);
        meta.positions.push_back(slot + 3);  // positions need not equal slots
        meta.slot_mapping.push_back(int64_t{s.blocks[slot / kBlockSize]} * kBlockSize +
                                    slot % kBlockSize);
      }
      meta.logit_rows.push_back(first + s.n_rows - 1);
      meta.logit_top_k.push_back(static_cast<int32_t>(meta.logit_rows.size()) * 6 - 1);
      meta.logit_target.push_back(static_cast<int32_t>(meta.logit_rows.size()) * 11);
    }
    meta.logit_rows.push_back(2);  // a prompt row too, not reduced
    meta.logit_top_k.push_back(-1);
    meta.logit_target.push_back(-1);
  }
  StepLimits limits() const {
    return {.max_tokens = 64, .max_seqs = 8, .max_table_entries = 64, .max_logit_rows = 8};
  }
};

PagedKvView LayerView(DevicePtr<uint8_t> base, GgmlType dtype, int32_t kv_dim) {
  const int64_t elem = dtype == GgmlType::kF16 ? 2 : 4;
  const int64_t half = MixedStep::kBlockSize * kv_dim * elem;
  return {.dtype = dtype,
          .base = base,
          .block_bytes = 2 * half,
          .k_offset = 0,
          .v_offset = half,
          .block_size = MixedStep::kBlockSize,
          .kv_dim = kv_dim};
}

TEST(CudaBackendTest, StepOpsMatchTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  const std::unique_ptr<Model> model = LoadSynthetic(TinyOptions());
  ASSERT_NE(model, nullptr);
  ModelConfig config = model->config();
  for (const RopeType rope_type : {RopeType::kNormal, RopeType::kNeox}) {
    for (const GgmlType kv_type : {GgmlType::kF32, GgmlType::kF16}) {
      SCOPED_TRACE(::testing::Message() << "neox " << (rope_type == RopeType::kNeox) << " kv "
                                        << GgmlTypeName(kv_type));
      config.rope_type = rope_type;
      const RopeTable rope(config, {}, 256);
      Pair p;
      ASSERT_TRUE(p.ok());
      std::mt19937 rng(11);
      MixedStep step;
      const int32_t T = step.meta.n_tokens();
      const int32_t R = step.meta.n_logit_rows();
      const int32_t n_head = 4, n_head_kv = 2, head_dim = 16, cols = 64, vocab = 300;
      const int32_t q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
      p.Both([&](Backend& b, bool) {
        ASSERT_TRUE(b.PrepareRope(rope).ok());
        ASSERT_TRUE(b.ReserveStep(step.limits()).ok());
      });
      // The pool, filled with earlier keys and values the rows attend to.
      const int64_t elem = kv_type == GgmlType::kF16 ? 2 : 4;
      const int64_t pool_bytes =
          int64_t{step.num_blocks} * 2 * MixedStep::kBlockSize * kv_dim * elem;
      std::vector<uint8_t> pool_init(pool_bytes);
      if (kv_type == GgmlType::kF32) {
        const std::vector<float> v = Random(rng, pool_bytes / 4);
        std::memcpy(pool_init.data(), v.data(), pool_bytes);
      } else {
        for (int64_t i = 0; i < pool_bytes / 2; ++i) {
          const uint16_t h = Fp32ToFp16(std::uniform_real_distribution<float>(-1, 1)(rng));
          std::memcpy(pool_init.data() + 2 * i, &h, 2);
        }
      }
      const auto pool = p.Put(pool_init);
      const auto table_f32 = p.Put(Random(rng, vocab * cols));
      std::vector<uint16_t> f16_rows(vocab * cols), bf16_rows(vocab * cols);
      for (size_t i = 0; i < f16_rows.size(); ++i) {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        f16_rows[i] = Fp32ToFp16(f);
        bf16_rows[i] = Fp32ToBf16(f);
      }
      const auto table_f16 = p.Put(f16_rows);
      const auto table_bf16 = p.Put(bf16_rows);
      const auto q = p.Put(Random(rng, T * q_dim));
      const auto k = p.Put(Random(rng, T * kv_dim));
      const auto v = p.Put(Random(rng, T * kv_dim));
      const auto att = p.Zeros(int64_t{T} * q_dim * 4);
      const auto x = p.Zeros(int64_t{T} * cols * 4);
      const auto x16 = p.Zeros(int64_t{T} * cols * 4);
      const auto xb16 = p.Zeros(int64_t{T} * cols * 4);
      const auto gathered = p.Zeros(int64_t{R} * q_dim * 4);
      std::vector<float> logits_host = Random(rng, R * vocab, 8.0f);
      logits_host[1 * vocab + 5] = logits_host[1 * vocab + 6] = 20.0f;  // a tie: the lower id first
      const auto logits = p.Put(logits_host);
      std::map<bool, std::vector<LogitsSummary>> summaries;
      p.Both([&](Backend& b, bool g) {
        const PagedKvView view = LayerView(g ? pool.cuda : pool.cpu, kv_type, kv_dim);
        b.BeginStep(step.meta);
        const auto matrix = [&](const Pair::Ptr& t, GgmlType type) {
          return DeviceMatrix{
              .type = type, .data = g ? t.cuda : t.cpu, .rows = vocab, .cols = cols};
        };
        b.Embed(matrix(table_f32, GgmlType::kF32), x.f(g));
        b.Embed(matrix(table_f16, GgmlType::kF16), x16.f(g));
        b.Embed(matrix(table_bf16, GgmlType::kBF16), xb16.f(g));
        b.Rope(q.f(g), n_head, head_dim);
        b.Rope(k.f(g), n_head_kv, head_dim);
        b.StoreKv(view, k.f(g), v.f(g));
        b.PagedAttention({.q = q.f(g), .out = att.f(g), .n_head = n_head, .n_head_kv = n_head_kv,
                          .head_dim = head_dim, .kv = view});
        b.GatherRows(att.f(g), q_dim, gathered.f(g));
        std::vector<LogitsSummary> s(R);
        b.ReduceLogits(logits.f(g), vocab, s);
        summaries[g] = s;
      });
      EXPECT_EQ(p.Get<float>(x, true), p.Get<float>(x, false)) << "embed f32";
      EXPECT_EQ(p.Get<float>(x16, true), p.Get<float>(x16, false)) << "embed f16";
      EXPECT_EQ(p.Get<float>(xb16, true), p.Get<float>(xb16, false)) << "embed bf16";
      ExpectNear(p.Get<float>(q, true), p.Get<float>(q, false), 1e-5f, "rope q");
      ExpectNear(p.Get<float>(k, true), p.Get<float>(k, false), 1e-5f, "rope k");
      if (kv_type == GgmlType::kF32) {
        ExpectNear(p.Get<float>(pool, true), p.Get<float>(pool, false), 1e-5f, "stored kv");
      } else {
        const std::vector<uint16_t> got = p.Get<uint16_t>(pool, true);
        const std::vector<uint16_t> want = p.Get<uint16_t>(pool, false);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(Fp16ToFp32(got[i]), Fp16ToFp32(want[i]), 1e-3f) << "stored f16 kv at " << i;
        }
      }
      ExpectNear(p.Get<float>(att, true), p.Get<float>(att, false), 1e-4f, "attention");
      ExpectNear(p.Get<float>(gathered, true), p.Get<float>(gathered, false), 1e-4f, "gather");
      for (int32_t r = 0; r < R; ++r) {
        const LogitsSummary& got = summaries[true][r];
        const LogitsSummary& want = summaries[false][r];
        if (step.meta.logit_top_k[r] < 0) continue;
        EXPECT_NEAR(got.max, want.max, 1e-6f) << "row " << r;
        EXPECT_NEAR(got.log_sum, want.log_sum, 1e-5f) << "row " << r;
        EXPECT_EQ(got.target_logit, want.target_logit) << "row " << r;
        ASSERT_EQ(got.n_top, want.n_top) << "row " << r;
        for (int32_t i = 0; i < got.n_top; ++i) {
          EXPECT_EQ(got.top_ids[i], want.top_ids[i]) << "row " << r << " top " << i;
          EXPECT_NEAR(got.top_logprobs[i], want.top_logprobs[i], 1e-5f) << "row " << r;
        }
      }
    }
  }
}

TEST(CudaBackendTest, BlockCopiesAndSlotMovesMatchTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  const std::unique_ptr<Model> model = LoadSynthetic(TinyOptions());
  ASSERT_NE(model, nullptr);
  const RopeTable rope(model->config(), {}, 256);
  for (const GgmlType kv_type : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(GgmlTypeName(kv_type));
    Pair p;
    ASSERT_TRUE(p.ok());
    std::mt19937 rng(3);
    const int32_t kv_dim = 32, head_dim = 16, num_blocks = 12, layers = 2;
    const int64_t elem = kv_type == GgmlType::kF16 ? 2 : 4;
    const int64_t layer_block = 2 * MixedStep::kBlockSize * kv_dim * elem;
    const int64_t block_bytes = layers * layer_block;
    const auto pool = p.Zeros(num_blocks * block_bytes);
    p.Both([&](Backend& b, bool) { ASSERT_TRUE(b.PrepareRope(rope).ok()); });
    // Whole blocks in: random bytes that are valid floats of the type.
    const std::vector<BlockId> ids = {7, 2, 9, 0};
    std::vector<std::vector<uint8_t>> blocks;
    std::vector<KvBlockBytes> views;
    for (size_t i = 0; i < ids.size(); ++i) {
      std::vector<uint8_t> bytes(block_bytes);
      for (int64_t j = 0; j < block_bytes / elem; ++j) {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        if (elem == 4) {
          std::memcpy(bytes.data() + 4 * j, &f, 4);
        } else {
          const uint16_t h = Fp32ToFp16(f);
          std::memcpy(bytes.data() + 2 * j, &h, 2);
        }
      }
      blocks.push_back(std::move(bytes));
    }
    for (const auto& b : blocks) views.emplace_back(b);
    std::vector<PagedKvView> layer_views[2];
    p.Both([&](Backend& b, bool g) {
      const KvPoolView whole{.base = g ? pool.cuda : pool.cpu, .block_bytes = block_bytes,
                             .num_blocks = num_blocks};
      b.WriteBlocks(whole, ids, views);
      std::vector<uint8_t> back(ids.size() * block_bytes);
      b.ReadBlocks(whole, ids, back);
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(std::vector<uint8_t>(back.begin() + i * block_bytes,
                                       back.begin() + (i + 1) * block_bytes),
                  blocks[i])
            << "block " << i << (g ? " cuda" : " cpu");
      }
      for (int32_t l = 0; l < layers; ++l) {
        PagedKvView v = LayerView(g ? pool.cuda : pool.cpu, kv_type, kv_dim);
        v.block_bytes = block_bytes;
        v.k_offset = l * layer_block;
        v.v_offset = l * layer_block + layer_block / 2;
        layer_views[g].push_back(v);
      }
    });
    // A SHIFT: slots 5.. of block 7 and the first 9 of block 2 move down by
    // 5 (block 7's sources and destinations overlap), keys rotated by -5.
    std::vector<int64_t> src, dst;
    for (int64_t s = 7 * 16 + 5; s < 7 * 16 + 16; ++s) src.push_back(s);
    for (int64_t s = 2 * 16; s < 2 * 16 + 9; ++s) src.push_back(s);
    for (size_t i = 0; i < src.size(); ++i) {
      dst.push_back(i < 16 ? 7 * 16 + static_cast<int64_t>(i)
                           : 2 * 16 + static_cast<int64_t>(i) - 16);
    }
    p.Both([&](Backend& b, bool g) { b.MoveKvSlots(layer_views[g], head_dim, src, dst, -5); });
    if (kv_type == GgmlType::kF32) {
      ExpectNear(p.Get<float>(pool, true), p.Get<float>(pool, false), 1e-5f, "moved kv");
    } else {
      const std::vector<uint16_t> got = p.Get<uint16_t>(pool, true);
      const std::vector<uint16_t> want = p.Get<uint16_t>(pool, false);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(Fp16ToFp32(got[i]), Fp16ToFp32(want[i]), 1e-3f) << "moved f16 kv at " << i;
      }
    }
  }
}

// --- Engines -----------------------------------------------------------------

struct Generation {
  std::map<int64_t, std::vector<SampledToken>> tokens;  // by sequence, in order
};

Generation Generate(Engine& e) {
  Generation run;
  while (e.HasWork()) {
    absl::StatusOr<StepOutput> step = e.Step();
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) break;
    for (const TokenEvent& ev : step->tokens) {
      std::vector<SampledToken>& seq = run.tokens[ev.seq_id];
      for (const SampledToken& p : ev.prompt_logprobs) seq.push_back(p);
      seq.push_back(ev.token);
    }
  }
  return run;
}

// Token by token: equal ids and logprobs within `tol`. Where the CPU's two
// best are closer than `tol` either pick is right, so the ids may part
// there, and the texts are compared no further. Returns the positions
// compared.
int64_t ExpectAgree(const std::vector<SampledToken>& got, const std::vector<SampledToken>& want,
                    float tol, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  int64_t compared = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const SampledToken& g = got[i];
    const SampledToken& w = want[i];
    const bool near_tie = w.top.size() >= 2 && w.top[0].logprob - w.top[1].logprob < tol;
    if (g.id != w.id) {
      EXPECT_TRUE(near_tie) << what << " position " << i << ": id " << g.id << ", the CPU's "
                            << w.id << " (logprob " << g.logprob << " vs " << w.logprob
                            << ", the CPU's top-2 gap "
                            << (w.top.size() >= 2 ? w.top[0].logprob - w.top[1].logprob : 0.0f)
                            << ")";
      break;
    }
    EXPECT_NEAR(g.logprob, w.logprob, tol) << what << " position " << i;
    ++compared;
  }
  return compared;
}

std::unique_ptr<Engine> MakeEngine(const Model& model, std::unique_ptr<Backend> b,
                                   const EngineOptions& o = {}) {
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(model, std::move(b), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<GenerationRequest> Requests(const Model& model, int n, int32_t max_tokens) {
  std::vector<GenerationRequest> out;
  const int32_t vocab = model.config().n_vocab;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    r.prompt = {1};
    for (int j = 1; j < 9 + 13 * i; ++j) r.prompt.push_back(3 + (j * 7 + i * 31) % (vocab - 3));
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.top_logprobs = 5;
    if (i == 1) r.prompt_logprobs = 3;
    out.push_back(std::move(r));
  }
  return out;
}

void ExpectEnginesAgree(const Model& model, const EngineOptions& o, float tol,
                        const std::vector<GenerationRequest>& requests,
                        const CudaBackendOptions& cuda = {}) {
  Generation runs[2];
  for (const bool on_cuda : {false, true}) {
    std::unique_ptr<Backend> b = on_cuda ? Cuda(cuda) : Cpu();
    ASSERT_NE(b, nullptr);
    std::unique_ptr<Engine> e = MakeEngine(model, std::move(b), o);
    ASSERT_NE(e, nullptr);
    for (const GenerationRequest& r : requests) ASSERT_TRUE(e->Add(r).ok());
    runs[on_cuda] = Generate(*e);
  }
  ASSERT_EQ(runs[1].tokens.size(), runs[0].tokens.size());
  int64_t compared = 0;
  for (const auto& [seq, want] : runs[0].tokens) {
    compared += ExpectAgree(runs[1].tokens[seq], want, tol, "sequence " + std::to_string(seq));
  }
  EXPECT_GT(compared, static_cast<int64_t>(requests.size()));
}

TEST(CudaBackendTest, TinyModelsDecodeAsOnTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  const std::unique_ptr<Model> llama = LoadSynthetic(TinyOptions());
  ASSERT_NE(llama, nullptr);
  // Chunked prefill and prompt logprobs across chunks.
  EngineOptions small;
  small.max_batch_tokens = 48;
  small.kv.block_size = 8;
  ExpectEnginesAgree(*llama, small, 1e-3f, Requests(*llama, 5, 24));
  // Biases, NeoX RoPE, tied output, f16 KV.
  SyntheticModelOptions qwen = TinyOptions();
  qwen.arch = "qwen2";
  qwen.tied_output = true;
  const std::unique_ptr<Model> qwen_model = LoadSynthetic(qwen);
  ASSERT_NE(qwen_model, nullptr);
  EngineOptions f16;
  f16.kv.dtype = GgmlType::kF16;
  ExpectEnginesAgree(*qwen_model, f16, 1e-3f, Requests(*qwen_model, 4, 24));
}

TEST(CudaBackendTest, WeightTypesDecodeAsOnTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  for (const GgmlType type : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                              GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(GgmlTypeName(type));
    SyntheticModelOptions o = TinyOptions();
    o.n_embd = 256;  // whole K-quant blocks, the KV width included
    o.n_ff = 512;
    o.n_head_kv = 4;
    o.type = type;
    const std::unique_ptr<Model> model = LoadSynthetic(o);
    ASSERT_NE(model, nullptr);
    // 16-bit weights: the GPU rounds the activations to the weight's type
    // for the tensor cores at prefill and keeps them in f32 at decode; the
    // CPU keeps them in f32 for F16 and rounds them to bf16 for BF16 where
    // it has AVX512_BF16 (as llama.cpp does), at prefill and decode alike.
    // Quantized weights: the CPU's dots quantize the activations to 8 bits,
    // the GPU's do not. The prompts are longer than kQuantGemvMaxTokens, so
    // prefill takes the dequantize-then-GEMM path and decode the GEMV.
    // Measured on an H200: up to 0.058 for Q8_0 and Q5_K, 0.026 for BF16
    // (on a host CPU with AVX512_BF16), within 1e-2 for F16.
    const float tol =
        type == GgmlType::kF16 ? 2e-2f : type == GgmlType::kBF16 ? 5e-2f : 0.15f;
    ExpectEnginesAgree(*model, {}, tol, Requests(*model, 4, 16));
  }
}

TEST(CudaBackendTest, Stories260KDecodesAsOnTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  const absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(testing::StoriesPath());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<GenerationRequest> requests;
  for (const char* text : {"Once upon a time", "The little dog", "Lily and Tom went to the park"}) {
    GenerationRequest r;
    r.prompt = (*model)->tokenizer().Encode(text, {.add_special = true});
    r.max_tokens = 64;
    r.ignore_eos = true;
    r.top_logprobs = 5;
    requests.push_back(std::move(r));
  }
  ExpectEnginesAgree(**model, {}, 1e-3f, requests);
}

TEST(CudaBackendTest, The25MModelDecodesAsOnTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  const std::unique_ptr<Model> model = LoadSynthetic(SyntheticModelOptions{});
  ASSERT_NE(model, nullptr);
  std::vector<GenerationRequest> requests = Requests(*model, 4, 32);
  // A prompt of a whole max_batch_tokens step: many more rows than logits rows.
  GenerationRequest long_prompt = requests.front();
  while (long_prompt.prompt.size() < 512) {
    long_prompt.prompt.push_back(3 + static_cast<int32_t>(long_prompt.prompt.size() * 5 % 500));
  }
  requests.push_back(long_prompt);
  ExpectEnginesAgree(*model, {}, 1e-3f, requests);
}

// Prefill attention's tiles on the tensor cores (--cuda-attention), with f32
// and f16 KV: stories260K (head_dim 8: one 16-dimension fragment, mostly
// padding) and the 25.7M model (head_dim 64) with prompts of a whole
// 512-token step, so most rows go through the tile kernel. `tol` holds with
// f32 KV; with f16 KV every tile math is held to at least kF16KvTol: rounding
// k and v to f16 turns the backends' f32 differences (their GEMMs sum in
// other orders) into a whole f16 step (2^-11) wherever a value lies near the
// middle between two halves, and that grows over the decoded tokens. Measured
// under the host emulation on stories260K: the f32 and split-f16 tile kernels
// part from the CPU by the same 1.5e-3 with f16 KV and 5e-6 with f32 KV, and
// the CPU's AVX2 kernels part from its AVX-512 ones by 4.3e-4 and 2.6e-6
// (docs/development.md). f16 tiles round q, k, v and the probabilities,
// hence their own tolerance.
constexpr float kF16KvTol = 3e-3f;

void ExpectTensorCoreTilesAgree(CudaAttention attention, float tol) {
  const CudaBackendOptions tiles{.attention = attention};
  const auto kv_tol = [tol](GgmlType kv) {
    return kv == GgmlType::kF16 ? std::max(tol, kF16KvTol) : tol;
  };
  const absl::StatusOr<std::unique_ptr<Model>> stories = Model::Load(testing::StoriesPath());
  ASSERT_TRUE(stories.ok()) << stories.status();
  std::vector<GenerationRequest> requests;
  for (const char* text : {"Once upon a time there was a little girl named Lily. She loved to",
                           "The little dog ran to the park and saw a big red ball"}) {
    GenerationRequest r;
    r.prompt = (*stories)->tokenizer().Encode(text, {.add_special = true});
    r.max_tokens = 48;
    r.ignore_eos = true;
    r.top_logprobs = 5;
    r.prompt_logprobs = 3;
    requests.push_back(std::move(r));
  }
  for (const GgmlType kv : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(GgmlTypeName(kv));
    EngineOptions o;
    o.kv.dtype = kv;
    ExpectEnginesAgree(**stories, o, kv_tol(kv), requests, tiles);
  }
  const std::unique_ptr<Model> model = LoadSynthetic(SyntheticModelOptions{});
  ASSERT_NE(model, nullptr);
  std::vector<GenerationRequest> long_prompts = Requests(*model, kLongPrompts, 16);
  for (GenerationRequest& r : long_prompts) {
    while (r.prompt.size() < 512)
      r.prompt.push_back(3 + static_cast<int32_t>(r.prompt.size() * 5 % 500));
  }
  for (const GgmlType kv : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(GgmlTypeName(kv));
    EngineOptions o;
    o.kv.dtype = kv;
    ExpectEnginesAgree(*model, o, kv_tol(kv), long_prompts, tiles);
  }
}

TEST(CudaBackendTest, SplitF16AttentionTilesDecodeAsOnTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  ExpectTensorCoreTilesAgree(CudaAttention::kSplitF16, 1e-3f);
}

TEST(CudaBackendTest, F16AttentionTilesDecodeAsOnTheCpu) {
  TANDEM_REQUIRE_DEVICE();
  ExpectTensorCoreTilesAgree(CudaAttention::kF16, 2e-2f);
}

// Decode steps replayed from CUDA graphs (batches shrinking through the
// buckets as sequences finish, padded to them) give what eager steps give.
TEST(CudaBackendTest, GraphDecodeStepsMatchEagerOnes) {
  TANDEM_REQUIRE_DEVICE();
  const std::unique_ptr<Model> model = LoadSynthetic(SyntheticModelOptions{});
  ASSERT_NE(model, nullptr);
  std::vector<GenerationRequest> requests = Requests(*model, 6, 8);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].max_tokens = 6 + 5 * int32_t(i);
  Generation runs[2];
  for (const bool graphs : {false, true}) {
    std::unique_ptr<Backend> b = Cuda({.graph_max_batch = graphs ? 256 : 0});
    ASSERT_NE(b, nullptr);
    const Backend* backend = b.get();
    std::unique_ptr<Engine> e = MakeEngine(*model, std::move(b));
    ASSERT_NE(e, nullptr);
    for (const GenerationRequest& r : requests) ASSERT_TRUE(e->Add(r).ok());
    runs[graphs] = Generate(*e);
    const CudaGraphStats stats = GraphStats(*backend);
    if (graphs) {
      EXPECT_GE(stats.captured, 3);  // buckets 8, 4, 2, 1 as the batch shrinks
      EXPECT_GT(stats.replayed, 10);
      EXPECT_EQ(stats.fallbacks, 0);
    } else {
      EXPECT_EQ(stats.captured + stats.replayed + stats.fallbacks, 0);
    }
  }
  int64_t compared = 0, total = 0;
  for (const auto& [seq, want] : runs[0].tokens) {
    compared += ExpectAgree(runs[1].tokens[seq], want, 1e-4f, "sequence " + std::to_string(seq));
    total += static_cast<int64_t>(want.size());
  }
  EXPECT_GT(compared, total / 2);
}

// The launch setting is the calling thread's, as the device is: a backend
// sets it on its thread, and another thread's launches keep their own (off
// unless set). No device needed.
TEST(CudaLaunchTest, TheProgrammaticSettingIsTheCallingThreads) {
  cuda::SetProgrammaticLaunch(true);
  EXPECT_TRUE(cuda::ProgrammaticLaunch());
  bool other = true;
  std::thread([&] { other = cuda::ProgrammaticLaunch(); }).join();
  EXPECT_FALSE(other);
  cuda::SetProgrammaticLaunch(false);
  EXPECT_FALSE(cuda::ProgrammaticLaunch());
}

// Programmatic launches (--cuda-pdl) run the same kernels in the same order
// on the same data, so they give what ordinary launches give, bit for bit:
// prefill (the attention tile kernel, cuBLAS), graph-replayed decode and
// eager decode, through the 16-bit GEMV (F16) and the quantized one (Q4_K,
// Q6_K), whose weights they load into L2 ahead. Below compute capability
// 9.0 the backend refuses the option by name.
TEST(CudaBackendTest, ProgrammaticLaunchesMatchOrdinaryOnes) {
  TANDEM_REQUIRE_DEVICE();
  const absl::StatusOr<cuda::DeviceInfo> info = cuda::GetDeviceInfo(0);
  ASSERT_TRUE(info.ok()) << info.status();
  if (info->major < 9) {
    const absl::StatusOr<std::unique_ptr<Backend>> b =
        MakeCudaBackend({.device = 0, .programmatic_launch = true});
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("--cuda-pdl"), std::string_view::npos) << b.status();
    GTEST_SKIP() << "compute capability " << info->major << "." << info->minor
                 << ": no programmatic launches";
  }
  for (const GgmlType type : kLaunchTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    SyntheticModelOptions o = TinyOptions();
    o.n_embd = 256;
    o.n_ff = 512;
    o.n_head_kv = 4;
    o.type = type;
    const std::unique_ptr<Model> model = LoadSynthetic(o);
    ASSERT_NE(model, nullptr);
    std::vector<GenerationRequest> requests = Requests(*model, 5, 12);
    for (size_t i = 0; i < requests.size(); ++i) requests[i].max_tokens = 4 + 3 * int32_t(i);
    for (const int32_t graphs : {0, 256}) {
      Generation runs[2];
      for (const bool pdl : {false, true}) {
        absl::StatusOr<std::unique_ptr<Backend>> b =
            MakeCudaBackend({.device = 0, .graph_max_batch = graphs, .programmatic_launch = pdl});
        ASSERT_TRUE(b.ok()) << b.status();
        std::unique_ptr<Engine> e = MakeEngine(*model, *std::move(b));
        ASSERT_NE(e, nullptr);
        for (const GenerationRequest& r : requests) ASSERT_TRUE(e->Add(r).ok());
        runs[pdl] = Generate(*e);
      }
      ASSERT_EQ(runs[1].tokens.size(), runs[0].tokens.size());
      for (const auto& [seq, want] : runs[0].tokens) {
        const std::vector<SampledToken>& got = runs[1].tokens[seq];
        ASSERT_EQ(got.size(), want.size()) << "graphs " << graphs << ", sequence " << seq;
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(got[i].id, want[i].id) << "graphs " << graphs << ", sequence " << seq;
          EXPECT_EQ(got[i].logprob, want[i].logprob) << "graphs " << graphs << ", sequence " << seq;
          ASSERT_EQ(got[i].top.size(), want[i].top.size());
          for (size_t k = 0; k < want[i].top.size(); ++k) {
            EXPECT_EQ(got[i].top[k].id, want[i].top[k].id);
            EXPECT_EQ(got[i].top[k].logprob, want[i].top[k].logprob);
          }
        }
      }
    }
  }
}

// Prefill on one backend, hand the KV over, decode on the other: what one
// CPU engine gives.
void ExpectHandOffAgrees(bool prefill_on_cuda) {
  const std::unique_ptr<Model> model = LoadSynthetic(SyntheticModelOptions{});
  ASSERT_NE(model, nullptr);
  for (const GgmlType kv_type : {GgmlType::kF32, GgmlType::kF16}) {
    EngineOptions o;
    o.kv.dtype = kv_type;
    GenerationRequest r = Requests(*model, 3, 24).back();
    std::unique_ptr<Engine> prefill = MakeEngine(*model, prefill_on_cuda ? Cuda() : Cpu(), o);
    ASSERT_NE(prefill, nullptr);
    GenerationRequest first_req = r;
    first_req.max_tokens = 1;
    first_req.export_kv = true;
    ASSERT_TRUE(prefill->Add(first_req).ok());
    absl::StatusOr<StepOutput> step = prefill->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_EQ(step->tokens.size(), 1u);
    const TokenEvent first = step->tokens.front();
    ASSERT_NE(first.kv, nullptr);
    std::unique_ptr<Engine> decode = MakeEngine(*model, prefill_on_cuda ? Cpu() : Cuda(), o);
    ASSERT_NE(decode, nullptr);
    ASSERT_TRUE(decode->AddWithKv(r, first.token, first.kv).ok());
    std::vector<SampledToken> got = {first.token};
    for (const auto& [seq, tokens] : Generate(*decode).tokens) {
      got.insert(got.end(), tokens.begin(), tokens.end());
    }
    std::unique_ptr<Engine> solo = MakeEngine(*model, Cpu(), o);
    ASSERT_TRUE(solo->Add(r).ok());
    const Generation want = Generate(*solo);
    ASSERT_EQ(want.tokens.size(), 1u);
    EXPECT_GT(ExpectAgree(got, want.tokens.begin()->second, 1e-3f,
                          std::string("kv ") + std::string(GgmlTypeName(kv_type))),
              1);
  }
}

TEST(CudaBackendTest, ACudaPrefillFeedsACpuDecode) {
  TANDEM_REQUIRE_DEVICE();
  ExpectHandOffAgrees(true);
}

TEST(CudaBackendTest, ACpuPrefillFeedsACudaDecode) {
  TANDEM_REQUIRE_DEVICE();
  ExpectHandOffAgrees(false);
}

}  // namespace
}  // namespace tandem::engine
