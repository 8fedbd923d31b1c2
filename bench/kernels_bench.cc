// Micro-benchmarks of the CPU kernels: single matmuls per weight type and
// shape (GFLOP/s, weight GB/s), whole-model matmul sets for decode and
// prefill of a 25.7M-parameter Llama and of stories260K (tokens/s), and the
// element-wise ops. Reports only; never fails on speed.
//
//   tandem-kernels-bench [--threads=2] [--isa=avx512|portable]
//                        [--benchmark_filter=...] [--benchmark_out=results.json]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/gguf/tensor_type.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/backend.h"

namespace tandem::engine::cpu {
namespace {

struct BenchConfig {
  int threads = 2;
  Isa isa = DetectIsa();
};
BenchConfig& Config() {
  static BenchConfig config;
  return config;
}

// A weight matrix with realistic values (finite scales, no denormals).
struct OwnedWeights {
  std::vector<uint8_t> bytes;
  WeightMatrix matrix;
};

OwnedWeights MakeWeights(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  const int64_t row_bytes = GgmlRowBytes(type, cols);
  OwnedWeights w;
  // 32-byte aligned starts like GGUF tensors; rows themselves are not.
  w.bytes.resize(rows * row_bytes + 64);
  uint8_t* base = w.bytes.data() + (32 - reinterpret_cast<uintptr_t>(w.bytes.data()) % 32) % 32;
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& f : row) f = dist(rng);
    uint8_t* dst = base + r * row_bytes;
    std::vector<uint8_t> encoded(row_bytes);
    QuantizeRow(type, row.data(), encoded.data(), cols);
    std::memcpy(dst, encoded.data(), row_bytes);
  }
  w.matrix = {type, base, rows, cols};
  return w;
}

std::vector<float> MakeActivations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& f : x) f = dist(rng);
  return x;
}

void SetCounters(benchmark::State& state, double flops, double weight_bytes, double tokens) {
  const auto rate = benchmark::Counter::kIsIterationInvariantRate;
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, rate);
  state.counters["GB/s"] = benchmark::Counter(weight_bytes / 1e9, rate);
  state.counters["tok/s"] = benchmark::Counter(tokens, rate);
}

// One matmul of a rows x cols weight over n tokens.
void BM_MatMul(benchmark::State& state, GgmlType type, int64_t rows, int64_t cols, int64_t n,
               MatMulPath path) {
  const OwnedWeights w = MakeWeights(type, rows, cols, 1);
  const std::vector<float> x = MakeActivations(n * cols, 2);
  std::vector<float> y(n * rows);
  MatMulRunner runner(Kernels(Config().isa), Config().threads);
  for (auto _ : state) {
    runner.Run(w.matrix, x.data(), n, y.data(), path);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, 2.0 * rows * cols * n, GgmlRowBytes(type, cols) * rows, n);
}

// The matmuls of a whole Llama forward pass (attention and norms excluded),
// with every layer's weights distinct so decode streams them from memory as
// the real model does.
struct ModelShape {
  const char* name;
  int64_t embd, ff, kv, layers, vocab;
};
constexpr ModelShape kLlama25M = {"llama25M", 512, 1536, 256, 8, 512};
constexpr ModelShape kStories260K = {"stories260K", 64, 172, 32, 5, 512};

void BM_Model(benchmark::State& state, ModelShape shape, GgmlType type, int64_t n) {
  std::vector<OwnedWeights> weights;
  uint32_t seed = 10;
  const bool q8_ok = type != GgmlType::kQ8_0 || (shape.ff % 32 == 0 && shape.embd % 32 == 0);
  if (!q8_ok) {
    state.SkipWithError("shape not a multiple of the Q8_0 block");
    return;
  }
  for (int64_t l = 0; l < shape.layers; ++l) {
    for (const auto& [rows, cols] : {std::pair{shape.embd, shape.embd}, {shape.kv, shape.embd},
                                     {shape.kv, shape.embd}, {shape.embd, shape.embd},
                                     {shape.ff, shape.embd}, {shape.ff, shape.embd},
                                     {shape.embd, shape.ff}}) {
      weights.push_back(MakeWeights(type, rows, cols, seed++));
    }
  }
  weights.push_back(MakeWeights(type, shape.vocab, shape.embd, seed++));
  const std::vector<float> x = MakeActivations(n * shape.ff, 3);
  std::vector<float> y(n * std::max(shape.ff, shape.vocab));
  auto backend = MakeCpuBackendWithIsa({.threads = Config().threads}, Config().isa);
  double flops = 0.0, bytes = 0.0;
  for (const OwnedWeights& w : weights) {
    flops += 2.0 * w.matrix.rows * w.matrix.cols * n;
    bytes += GgmlRowBytes(type, w.matrix.cols) * w.matrix.rows;
  }
  for (auto _ : state) {
    for (const OwnedWeights& w : weights) {
      backend->MatMul(HostMatrix(w.matrix), HostPtr(x.data()), n, HostPtr(y.data()));
    }
    benchmark::ClobberMemory();
  }
  SetCounters(state, flops, bytes, n);
}

void BM_RmsNorm(benchmark::State& state, int64_t n, int64_t dim) {
  const std::vector<float> x = MakeActivations(n * dim, 4), weight = MakeActivations(dim, 5);
  std::vector<float> y(n * dim);
  auto backend = MakeCpuBackendWithIsa({.threads = Config().threads}, Config().isa);
  for (auto _ : state) {
    backend->RmsNorm(HostPtr(x.data()), HostPtr(weight.data()), n, dim, 1e-5f, HostPtr(y.data()));
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      2.0 * n * dim * sizeof(float) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SwiGlu(benchmark::State& state, int64_t n) {
  const std::vector<float> gate = MakeActivations(n, 6), up = MakeActivations(n, 7);
  std::vector<float> out(n);
  auto backend = MakeCpuBackendWithIsa({.threads = Config().threads}, Config().isa);
  for (auto _ : state) {
    backend->SwiGlu(HostPtr(gate.data()), HostPtr(up.data()), n, HostPtr(out.data()));
    benchmark::ClobberMemory();
  }
  state.counters["Gelem/s"] =
      benchmark::Counter(n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Paged attention of one layer of the 25.7M model's shape (8 query heads over
// 4 KV heads of 64): `n_seqs` sequences each computing `rows` rows at the end
// of a `ctx`-token context (rows 1: a decode step; more: a prompt chunk),
// every sequence with its own blocks (block size 16).
void BM_Attention(benchmark::State& state, GgmlType kv_type, int32_t n_seqs, int32_t rows,
                  int32_t ctx) {
  ModelConfig config;
  config.n_layer = 1;
  config.n_head = 8;
  config.n_head_kv = 4;
  config.head_dim = 64;
  constexpr int32_t kBlock = 16;
  auto backend = MakeCpuBackendWithIsa({.threads = Config().threads}, Config().isa);
  const int64_t kv_bytes = int64_t{n_seqs} * (ctx + kBlock) * 2 * 256 * 4;
  auto kv = *CreateKvCache(
      *backend, config,
      {.block_size = kBlock, .budget_bytes = kv_bytes + (1 << 20), .dtype = kv_type});
  std::vector<BlockList> lists;
  std::vector<AttentionSequence> seqs;
  StepMetadata store;
  for (int32_t s = 0; s < n_seqs; ++s) {
    lists.push_back(*kv->pool().Allocate((ctx + kBlock - 1) / kBlock));
    for (int32_t p = 0; p < ctx; ++p) {
      store.tokens.push_back(0);
      store.slot_mapping.push_back(int64_t{lists.back()[p / kBlock]} * kBlock + p % kBlock);
    }
  }
  for (int32_t s = 0; s < n_seqs; ++s) {
    seqs.push_back(
        {.first_row = s * rows, .n_rows = rows, .kv_start = ctx - rows, .blocks = lists[s].ids()});
  }
  const int64_t kv_dim = config.n_head_kv * config.head_dim;
  const std::vector<float> k = MakeActivations(int64_t{n_seqs} * ctx * kv_dim, 8);
  const std::vector<float> v = MakeActivations(int64_t{n_seqs} * ctx * kv_dim, 9);
  backend->BeginStep(store);
  backend->StoreKv(kv->LayerView(0), HostPtr<const float>(k.data()),
                   HostPtr<const float>(v.data()));
  const int64_t q_dim = config.n_head * config.head_dim;
  const std::vector<float> q = MakeActivations(int64_t{n_seqs} * rows * q_dim, 10);
  std::vector<float> out(q.size());
  const AttentionArgs args{.q = q.data(),
                           .out = out.data(),
                           .n_head = config.n_head,
                           .n_head_kv = config.n_head_kv,
                           .head_dim = config.head_dim,
                           .kv = kv->LayerView(0),
                           .seqs = seqs};
  for (auto _ : state) {
    PagedAttention(args, {.threads = Config().threads, .isa = Config().isa});
    benchmark::ClobberMemory();
  }
  // Scores and the weighted sum over the visible keys (causal within a chunk).
  const double keys = static_cast<double>(n_seqs) * rows * (ctx - (rows - 1) / 2.0);
  const double flops = keys * config.n_head * config.head_dim * 4.0;
  const double bytes = static_cast<double>(n_seqs) * ctx * kv_dim * 2 * GgmlBlockBytes(kv_type);
  SetCounters(state, flops, bytes, static_cast<double>(n_seqs) * rows);
}

std::string PathName(MatMulPath path) {
  switch (path) {
    case MatMulPath::kAuto: return "auto";
    case MatMulPath::kGemv: return "gemv";
    case MatMulPath::kGemm: return "gemm";
  }
  return "?";
}

void RegisterAll() {
  const GgmlType kTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0};
  struct Shape {
    int64_t rows, cols;
  };
  const Shape kShapes[] = {{512, 512}, {256, 512}, {1536, 512}, {512, 1536}, {4096, 4096}};
  for (GgmlType type : kTypes) {
    const std::string t(GgmlTypeName(type));
    for (const Shape& s : kShapes) {
      for (int64_t n : {1, 4, 16, 32, 64, 128, 512}) {
        if (s.rows == 4096 && n > 16) continue;
        for (MatMulPath path : {MatMulPath::kGemv, MatMulPath::kGemm}) {
          if (n == 1 && path == MatMulPath::kGemm) {
            continue;
          }
          const std::string name = "MatMul/" + t + "/" + std::to_string(s.rows) + "x" +
                                   std::to_string(s.cols) + "/n:" + std::to_string(n) + "/" +
                                   PathName(path);
          benchmark::RegisterBenchmark(name.c_str(), BM_MatMul, type, s.rows, s.cols, n, path)
              ->UseRealTime();
        }
      }
    }
    for (const ModelShape& m : {kLlama25M, kStories260K}) {
      for (int64_t n : {1, 8, 32, 512}) {
        if (m.ff % 32 != 0 && type == GgmlType::kQ8_0) continue;
        const std::string name = std::string("Model/") + m.name + "/" + t + "/n:" +
                                 std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_Model, m, type, n)->UseRealTime();
      }
    }
  }
  for (GgmlType kv_type : {GgmlType::kF32, GgmlType::kF16}) {
    for (const auto& [seqs, rows, ctx] :
         {std::tuple{32, 1, 320}, {8, 1, 320}, {1, 1, 2048}, {1, 32, 256}, {1, 128, 512}}) {
      const std::string name = "Attention/" + std::string(GgmlTypeName(kv_type)) +
                               "/seqs:" + std::to_string(seqs) + "/rows:" + std::to_string(rows) +
                               "/ctx:" + std::to_string(ctx);
      benchmark::RegisterBenchmark(name.c_str(), BM_Attention, kv_type, seqs, rows, ctx)
          ->UseRealTime();
    }
  }
  for (const auto& [n, dim] : {std::pair<int64_t, int64_t>{1, 512}, {512, 512}}) {
    const std::string name = "RmsNorm/n:" + std::to_string(n) + "/dim:" + std::to_string(dim);
    benchmark::RegisterBenchmark(name.c_str(), BM_RmsNorm, n, dim)->UseRealTime();
  }
  for (int64_t n : {1536, 512 * 1536}) {
    benchmark::RegisterBenchmark(("SwiGlu/n:" + std::to_string(n)).c_str(), BM_SwiGlu, n)
        ->UseRealTime();
  }
}

// Takes --threads=N and --isa=NAME out of argv before Google Benchmark sees it.
bool ParseOwnFlags(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      Config().threads = std::atoi(arg.c_str() + 10);
      if (Config().threads < 1) return false;
    } else if (arg.rfind("--isa=", 0) == 0) {
      const std::string isa = arg.substr(6);
      if (isa == "portable") {
        Config().isa = Isa::kPortable;
      } else if (isa == "avx2" && IsaSupported(Isa::kAvx2)) {
        Config().isa = Isa::kAvx2;
      } else if (isa == "avx512" && IsaSupported(Isa::kAvx512)) {
        Config().isa = Isa::kAvx512;
      } else {
        return false;
      }
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return true;
}

}  // namespace
}  // namespace tandem::engine::cpu

int main(int argc, char** argv) {
  using tandem::engine::cpu::Config;
  if (!tandem::engine::cpu::ParseOwnFlags(&argc, argv)) {
    std::fprintf(stderr, "usage: %s [--threads=N>=1] [--isa=avx512|portable] [benchmark flags]\n",
                 argv[0]);
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::AddCustomContext("threads", std::to_string(Config().threads));
  benchmark::AddCustomContext("isa", std::string(tandem::engine::cpu::IsaName(Config().isa)));
  tandem::engine::cpu::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
