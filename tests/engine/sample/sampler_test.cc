#include "engine/sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <random>
#include <string>
#include <vector>

// Allocation accounting for the memory tests. Every operator new in this
// binary goes through here; the counters move only while `g_armed` is set, so
// gtest's own allocations are not measured. A 16-byte header remembers each
// block's size, which lets delete subtract exactly what new added.
namespace {

struct AllocStats {
  bool armed = false;
  int64_t live_bytes = 0;   // allocated while armed minus freed while armed
  int64_t peak_bytes = 0;   // max of live_bytes
  size_t largest = 0;       // largest single allocation while armed
};
AllocStats g_alloc;

constexpr size_t kHeader = 16;

void* CountedNew(size_t size) {
  void* raw = std::malloc(size + kHeader);
  if (raw == nullptr) std::abort();  // no exceptions in this project
  *static_cast<size_t*>(raw) = g_alloc.armed ? size : 0;
  if (g_alloc.armed) {
    g_alloc.live_bytes += static_cast<int64_t>(size);
    g_alloc.peak_bytes = std::max(g_alloc.peak_bytes, g_alloc.live_bytes);
    g_alloc.largest = std::max(g_alloc.largest, size);
  }
  return static_cast<char*>(raw) + kHeader;
}

void CountedDelete(void* p) {
  if (p == nullptr) return;
  void* raw = static_cast<char*>(p) - kHeader;
  // Blocks allocated while disarmed carry size 0 and are not counted.
  if (g_alloc.armed) {
    g_alloc.live_bytes -= static_cast<int64_t>(*static_cast<size_t*>(raw));
  }
  std::free(raw);
}

// Arms the counters for its lifetime, starting from zero.
class AllocScope {
 public:
  AllocScope() { g_alloc = AllocStats{.armed = true}; }
  ~AllocScope() { g_alloc.armed = false; }
  const AllocStats& stats() const { return g_alloc; }
};

}  // namespace

void* operator new(size_t size) { return CountedNew(size); }
void* operator new[](size_t size) { return CountedNew(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  return CountedNew(size);
}
void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  return CountedNew(size);
}
void operator delete(void* p) noexcept { CountedDelete(p); }
void operator delete[](void* p) noexcept { CountedDelete(p); }
void operator delete(void* p, size_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, size_t) noexcept { CountedDelete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept {
  CountedDelete(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  CountedDelete(p);
}

namespace tandem::engine {
namespace {

constexpr int32_t kBigVocab = 151936;  // Qwen2's vocabulary

std::vector<float> RandomLogits(int32_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(static_cast<size_t>(n));
  for (float& x : logits) x = normal(rng);
  return logits;
}

// Logits whose softmax at temperature 1 is exactly `probs` (up to rounding).
std::vector<float> LogitsFromProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (const double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Reference: every token's logprob by the textbook formula, in double.
std::vector<double> ReferenceLogprobs(const std::vector<float>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (const float x : logits) sum += std::exp(x - max);
  std::vector<double> out;
  for (const float x : logits) out.push_back(x - max - std::log(sum));
  return out;
}

std::map<int32_t, int> Histogram(const SamplingParams& params,
                                 const std::vector<float>& logits, int draws) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits, 0).id];
  return counts;
}

// --- ValidateSamplingParams ---------------------------------------------

void ExpectRejected(const SamplingParams& params, const std::string& field) {
  const absl::Status status = ValidateSamplingParams(params);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(std::string(status.message()).find(field), std::string::npos)
      << status.message();
}

TEST(ValidateSamplingParamsTest, AcceptsDefaultsAndEdges) {
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
  EXPECT_TRUE(ValidateSamplingParams(
                  {.temperature = 2.0f, .top_p = 1.0f, .top_k = 50, .min_p = 1.0f})
                  .ok());
  EXPECT_TRUE(ValidateSamplingParams({.top_p = 1e-6f}).ok());
}

TEST(ValidateSamplingParamsTest, NamesTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  ExpectRejected({.temperature = -0.5f}, "temperature");
  ExpectRejected({.temperature = nan}, "temperature");
  ExpectRejected({.temperature = inf}, "temperature");
  ExpectRejected({.top_p = 0.0f}, "top_p");
  ExpectRejected({.top_p = 1.01f}, "top_p");
  ExpectRejected({.top_p = nan}, "top_p");
  ExpectRejected({.top_k = -1}, "top_k");
  ExpectRejected({.min_p = -0.01f}, "min_p");
  ExpectRejected({.min_p = 1.5f}, "min_p");
  ExpectRejected({.min_p = nan}, "min_p");
}

// --- Greedy ----------------------------------------------------------------

TEST(SamplerTest, GreedyTakesArgmax) {
  const std::vector<float> logits = RandomLogits(1000, 7);
  Sampler sampler({});
  const SampledToken token = sampler.Sample(logits, 0);
  EXPECT_EQ(token.id, std::max_element(logits.begin(), logits.end()) -
                          logits.begin());
  EXPECT_TRUE(token.top.empty());
}

TEST(SamplerTest, GreedyTieGoesToLowestId) {
  Sampler sampler({});
  EXPECT_EQ(sampler.Sample(std::vector<float>{1, 5, 3, 5, 5}, 0).id, 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{1, 5, 3, 5, 5}, 3).id, 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{2, 2, 2}, 0).id, 0);
}

TEST(SamplerTest, NanLogitsNeverWin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Sampler sampler({});
  const SampledToken token = sampler.Sample(std::vector<float>{nan, 1, nan, 2}, 4);
  EXPECT_EQ(token.id, 3);
  EXPECT_TRUE(std::isfinite(token.logprob));
  ASSERT_EQ(token.top.size(), 4u);
  EXPECT_EQ(token.top[2].logprob, -std::numeric_limits<float>::infinity());
}

// --- Logprobs --------------------------------------------------------------

TEST(LogprobsTest, NormalizedOverTheVocabulary) {
  for (const float offset : {0.0f, 1000.0f, -1000.0f}) {
    std::vector<float> logits = RandomLogits(kBigVocab, 11, 4.0f);
    for (float& x : logits) x += offset;
    const LogSoftmaxStats stats = ComputeLogSoftmaxStats(logits);
    double sum = 0.0;
    for (const float x : logits) sum += std::exp(double{x} - stats.max - stats.log_sum);
    EXPECT_NEAR(sum, 1.0, 1e-5) << "offset " << offset;
  }
}

TEST(LogprobsTest, TopListCoversSmallVocabulary) {
  // With k == vocabulary size the top list is the whole distribution.
  const std::vector<float> logits = RandomLogits(kMaxTopLogprobs, 12);
  Sampler sampler({.temperature = 1.0f, .seed = 1});
  const SampledToken token = sampler.Sample(logits, kMaxTopLogprobs);
  ASSERT_EQ(token.top.size(), static_cast<size_t>(kMaxTopLogprobs));
  double sum = 0.0;
  for (const TokenLogprob& t : token.top) sum += std::exp(double{t.logprob});
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(LogprobsTest, TopListMatchesFullSortReference) {
  const std::vector<float> logits = RandomLogits(5000, 13);
  const std::vector<double> ref = ReferenceLogprobs(logits);
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const LogSoftmaxStats stats = ComputeLogSoftmaxStats(logits);
  for (const int k : {0, 1, 5, kMaxTopLogprobs}) {
    const std::vector<TokenLogprob> top = TopLogprobs(logits, stats, k);
    ASSERT_EQ(top.size(), static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(top[j].id, order[j]) << "k=" << k << " rank " << j;
      EXPECT_NEAR(top[j].logprob, ref[order[j]], 1e-4);
      if (j > 0) {
        EXPECT_GE(top[j - 1].logprob, top[j].logprob);
      }
    }
  }
}

TEST(LogprobsTest, TopListTiesByLowerId) {
  const std::vector<float> logits = {0, 3, 1, 3, 3, 1};
  const std::vector<TokenLogprob> top =
      TopLogprobs(logits, ComputeLogSoftmaxStats(logits), 5);
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : top) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 2, 5}));
}

TEST(LogprobsTest, ChosenTokenMatchesItsTopEntry) {
  const std::vector<float> logits = RandomLogits(2000, 14, 1.0f);
  const std::vector<double> ref = ReferenceLogprobs(logits);
  Sampler sampler({.temperature = 1.5f, .seed = 99});
  int found = 0;
  for (int i = 0; i < 300; ++i) {
    const SampledToken token = sampler.Sample(logits, kMaxTopLogprobs);
    EXPECT_NEAR(token.logprob, ref[token.id], 1e-4);
    for (const TokenLogprob& t : token.top) {
      if (t.id == token.id) {
        EXPECT_EQ(t.logprob, token.logprob);
        ++found;
      }
    }
  }
  EXPECT_GT(found, 0);  // the check above did run
}

TEST(LogprobsTest, RawLogitsNotTemperatureOrTruncation) {
  // Logprobs describe the model, not the sampling settings.
  const std::vector<float> logits = RandomLogits(300, 15);
  Sampler plain({.temperature = 1.0f, .seed = 3});
  Sampler shaped(
      {.temperature = 0.2f, .top_p = 0.5f, .top_k = 3, .min_p = 0.1f, .seed = 3});
  const SampledToken a = plain.Sample(logits, 10);
  const SampledToken b = shaped.Sample(logits, 10);
  ASSERT_EQ(a.top.size(), b.top.size());
  for (size_t j = 0; j < a.top.size(); ++j) {
    EXPECT_EQ(a.top[j].id, b.top[j].id);
    EXPECT_EQ(a.top[j].logprob, b.top[j].logprob);
  }
}

TEST(LogprobsTest, KBounds) {
  const std::vector<float> small = {1, 2, 3};
  Sampler sampler({});
  EXPECT_TRUE(sampler.Sample(small, 0).top.empty());
  EXPECT_EQ(sampler.Sample(small, kMaxTopLogprobs).top.size(), 3u);
  EXPECT_EQ(sampler.Sample(RandomLogits(100, 1), kMaxTopLogprobs).top.size(),
            static_cast<size_t>(kMaxTopLogprobs));
}

TEST(LogprobsDeathTest, KOutOfRangeIsABug) {
  const std::vector<float> logits = {1, 2, 3};
  EXPECT_DEATH(Sampler({}).Sample(logits, kMaxTopLogprobs + 1), "top_logprobs");
  EXPECT_DEATH(Sampler({}).Sample(logits, -1), "top_logprobs");
}

// --- Truncation ------------------------------------------------------------

TEST(SamplerTest, TopKOneIsGreedy) {
  for (uint64_t row = 0; row < 50; ++row) {
    const std::vector<float> logits = RandomLogits(3000, 100 + row, 1.0f);
    Sampler greedy({});
    Sampler top1({.temperature = 1.0f, .top_k = 1, .seed = row});
    EXPECT_EQ(top1.Sample(logits, 0).id, greedy.Sample(logits, 0).id);
  }
}

TEST(SamplerTest, SubnormalTemperatureIsGreedy) {
  // Valid (finite, > 0) but 1 / T overflows.
  const std::vector<float> logits = RandomLogits(3000, 50, 1.0f);
  Sampler greedy({});
  Sampler cold({.temperature = 1e-40f, .top_p = 0.9f, .seed = 1});
  ASSERT_TRUE(ValidateSamplingParams(cold.params()).ok());
  EXPECT_EQ(cold.Sample(logits, 0).id, greedy.Sample(logits, 0).id);
}

TEST(SamplerTest, TinyTopPIsGreedy) {
  for (uint64_t row = 0; row < 50; ++row) {
    // Flat rows too, where no single token holds even kNucleusMinProb.
    const float scale = row % 2 == 0 ? 1.0f : 0.01f;
    const std::vector<float> logits = RandomLogits(kBigVocab, 200 + row, scale);
    Sampler greedy({});
    Sampler nucleus({.temperature = 1.0f, .top_p = 1e-6f, .seed = row});
    EXPECT_EQ(nucleus.Sample(logits, 0).id, greedy.Sample(logits, 0).id);
  }
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingP) {
  const std::vector<float> logits = LogitsFromProbs({0.05, 0.5, 0.15, 0.3});
  // 0.5 < 0.7 <= 0.5 + 0.3: tokens 1 and 3, drawn 5:3.
  auto counts = Histogram({.temperature = 1.0f, .top_p = 0.7f, .seed = 5}, logits,
                          8000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[1] / 8000.0, 0.625, 0.02);
  EXPECT_NEAR(counts[3] / 8000.0, 0.375, 0.02);
  counts = Histogram({.temperature = 1.0f, .top_p = 0.9f, .seed = 5}, logits, 4000);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts.count(0), 0u);
}

TEST(SamplerTest, TopPAppliesAfterTopK) {
  const std::vector<float> logits = LogitsFromProbs({0.05, 0.5, 0.15, 0.3});
  // Over the full softmax top_p = 0.6 needs tokens 1 and 3; after top_k = 2
  // token 1 alone holds 0.5 / 0.8 = 0.625 >= 0.6.
  auto counts = Histogram({.temperature = 1.0f, .top_p = 0.6f, .seed = 6}, logits,
                          2000);
  EXPECT_EQ(counts.size(), 2u);
  counts = Histogram({.temperature = 1.0f, .top_p = 0.6f, .top_k = 2, .seed = 6},
                     logits, 2000);
  EXPECT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[1], 2000);
}

TEST(SamplerTest, TopKDrawsOnlyTheKBestInProportion) {
  const std::vector<float> logits = LogitsFromProbs({0.1, 0.4, 0.2, 0.3});
  auto counts = Histogram({.temperature = 1.0f, .top_k = 2, .seed = 8}, logits,
                          8000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[1] / 8000.0, 4.0 / 7.0, 0.02);
  EXPECT_NEAR(counts[3] / 8000.0, 3.0 / 7.0, 0.02);
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  const std::vector<float> logits = LogitsFromProbs({0.05, 0.5, 0.15, 0.3});
  // min_p = 0.2: cut at 0.1 keeps tokens 1, 2, 3 (renormalized over 0.95).
  for (const int32_t top_k : {0, 3}) {
    for (const float top_p : {1.0f, 0.99f}) {
      auto counts = Histogram(
          {.temperature = 1.0f, .top_p = top_p, .top_k = top_k, .min_p = 0.2f, .seed = 9},
          logits, 8000);
      EXPECT_EQ(counts.count(0), 0u) << top_k << " " << top_p;
      EXPECT_EQ(counts.size(), 3u);
      EXPECT_NEAR(counts[2] / 8000.0, 0.15 / 0.95, 0.02);
    }
  }
  // min_p = 0.7: cut at 0.35 keeps only token 1; min_p = 1 keeps the max.
  EXPECT_EQ(Histogram({.temperature = 1.0f, .min_p = 0.7f, .seed = 1}, logits, 500)
                .size(),
            1u);
  const auto only_max =
      Histogram({.temperature = 3.0f, .min_p = 1.0f, .seed = 1}, logits, 500);
  ASSERT_EQ(only_max.size(), 1u);
  EXPECT_EQ(only_max.begin()->first, 1);
}

TEST(SamplerTest, MinPOverBigVocabularyWithTopP) {
  // Exercises the top_p path that gathers candidates by a min_p threshold.
  const std::vector<float> logits = RandomLogits(kBigVocab, 21, 2.0f);
  const std::vector<double> ref = ReferenceLogprobs(logits);
  const double max_logprob = *std::max_element(ref.begin(), ref.end());
  Sampler sampler({.temperature = 1.0f, .top_p = 0.95f, .min_p = 0.05f, .seed = 4});
  for (int i = 0; i < 200; ++i) {
    const int32_t id = sampler.Sample(logits, 0).id;
    EXPECT_GE(ref[id], max_logprob + std::log(0.05) - 1e-4);
  }
}

TEST(SamplerTest, LowTemperatureConcentrates) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, 0.5f};
  auto cold = Histogram({.temperature = 0.1f, .seed = 10}, logits, 5000);
  EXPECT_GT(cold[0] / 5000.0, 0.99);
  // T = 1 follows the softmax.
  const std::vector<double> ref = ReferenceLogprobs(logits);
  auto warm = Histogram({.temperature = 1.0f, .seed = 10}, logits, 20000);
  for (int32_t id = 0; id < 4; ++id) {
    EXPECT_NEAR(warm[id] / 20000.0, std::exp(ref[id]), 0.015) << id;
  }
  // High temperature flattens toward uniform.
  auto hot = Histogram({.temperature = 100.0f, .seed = 10}, logits, 20000);
  for (int32_t id = 0; id < 4; ++id) EXPECT_NEAR(hot[id] / 20000.0, 0.25, 0.02);
}

// Reference for what a sampler may draw, computed the slow obvious way in
// double: temperature, top_k, top_p over the renormalized survivors, min_p.
// Returns each allowed token's final probability.
std::map<int32_t, double> ReferenceAllowed(const std::vector<float>& logits,
                                           const SamplingParams& params) {
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < order.size()) {
    order.resize(static_cast<size_t>(params.top_k));
  }
  const double max = logits[order[0]];
  std::vector<double> p;
  double sum = 0.0;
  for (const int32_t id : order) {
    p.push_back(std::exp((logits[id] - max) / params.temperature));
    sum += p.back();
  }
  size_t keep = order.size();
  double cumulative = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    cumulative += p[i] / sum;
    if (params.top_p < 1.0f && cumulative >= params.top_p) {
      keep = i + 1;
      break;
    }
  }
  std::map<int32_t, double> allowed;
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    if (p[i] < params.min_p * p[0]) continue;  // p[0] is the max
    allowed[order[i]] = p[i];
    kept += p[i];
  }
  for (auto& [id, prob] : allowed) prob /= kept;
  return allowed;
}

TEST(SamplerTest, MatchesBruteForceReference) {
  int cases = 0;
  for (const float scale : {3.0f, 0.3f, 0.02f}) {  // peaked .. nearly flat
    const std::vector<float> logits = RandomLogits(4000, 300 + cases, scale);
    for (const SamplingParams& base :
         {SamplingParams{.temperature = 0.7f, .top_p = 0.5f},
          SamplingParams{.temperature = 1.3f, .top_p = 0.9f},
          SamplingParams{.temperature = 1.0f, .top_p = 0.9f, .top_k = 100},
          SamplingParams{.temperature = 1.0f, .top_k = 7},
          SamplingParams{.temperature = 1.0f, .top_p = 0.95f, .min_p = 0.3f},
          SamplingParams{.temperature = 2.0f, .min_p = 0.5f}}) {
      SamplingParams params = base;
      params.seed = static_cast<uint64_t>(++cases);
      const std::map<int32_t, double> allowed = ReferenceAllowed(logits, params);
      // The most likely allowed token, to check frequencies as well.
      int32_t argmax = -1;
      double top_prob = 0.0;
      for (const auto& [id, prob] : allowed) {
        if (prob > top_prob) {
          argmax = id;
          top_prob = prob;
        }
      }
      Sampler sampler(params);
      int top_hits = 0;
      constexpr int kDraws = 3000;
      for (int i = 0; i < kDraws; ++i) {
        const int32_t id = sampler.Sample(logits, 0).id;
        ASSERT_TRUE(allowed.contains(id))
            << "scale " << scale << " case " << cases << " drew " << id
            << " outside the " << allowed.size() << " allowed";
        top_hits += id == argmax;
      }
      EXPECT_NEAR(top_hits / double{kDraws}, top_prob, 0.04)
          << "scale " << scale << " case " << cases;
    }
  }
}

TEST(SamplerTest, MaskedTokensAreNeverDrawn) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = RandomLogits(kBigVocab, 40, 0.5f);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (i % 3 == 0) logits[i] = -inf;
    if (i % 7 == 0) logits[i] = nan;
  }
  for (const SamplingParams& params :
       {SamplingParams{.temperature = 5.0f, .seed = 1},
        SamplingParams{.temperature = 5.0f, .top_p = 0.99f, .seed = 2},
        SamplingParams{.temperature = 5.0f, .top_k = 100000, .seed = 3}}) {
    Sampler sampler(params);
    for (int i = 0; i < 60; ++i) {
      const SampledToken token = sampler.Sample(logits, 3);
      EXPECT_NE(token.id % 3, 0);
      EXPECT_NE(token.id % 7, 0);
      EXPECT_TRUE(std::isfinite(token.logprob));
    }
  }
}

TEST(SamplerTest, AllMaskedRowIsHandled) {
  const std::vector<float> logits(1000, -std::numeric_limits<float>::infinity());
  for (const float temperature : {0.0f, 1.0f}) {
    Sampler sampler({.temperature = temperature, .top_p = 0.9f, .seed = 1});
    const SampledToken token = sampler.Sample(logits, 3);
    EXPECT_EQ(token.id, 0);
    EXPECT_EQ(token.logprob, -std::numeric_limits<float>::infinity());
    ASSERT_EQ(token.top.size(), 3u);
    EXPECT_EQ(token.top[2].id, 2);
  }
}

// A greedy sampler fed only a row's top tokens (what a backend's logits
// reduction returns) gives what it gives from the whole row, bit for bit, on
// rows with ties, NaNs, +-inf and nothing possible, and its RNG moves alike.
TEST(SamplerTest, GreedyFromTheTopEqualsGreedyFromTheRow) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows = {RandomLogits(3000, 51, 1.0f), {2.0f, 5.0f, 5.0f, 1.0f},
                                          std::vector<float>(700, -kInf)};
  std::vector<float> odd = RandomLogits(500, 52, 3.0f);
  odd[7] = std::numeric_limits<float>::quiet_NaN();
  odd[9] = kInf;
  odd[300] = kInf;
  rows.push_back(odd);
  for (const SamplingParams& params :
       {SamplingParams{}, SamplingParams{.temperature = 1e-40f, .top_p = 0.9f, .seed = 3}}) {
    for (const std::vector<float>& row : rows) {
      for (const int k : {0, 1, 3, kMaxTopLogprobs}) {
        Sampler whole(params);
        Sampler from_top(params);
        ASSERT_TRUE(from_top.SamplesFromTop());
        const SampledToken want = whole.Sample(row, k);
        const std::vector<TokenLogprob> top =
            TopLogprobs(row, ComputeLogSoftmaxStats(row), std::max(k, 1));
        const SampledToken got = from_top.SampleFromTop(top, k);
        EXPECT_EQ(got.id, want.id);
        EXPECT_EQ(std::bit_cast<uint32_t>(got.logprob), std::bit_cast<uint32_t>(want.logprob));
        ASSERT_EQ(got.top.size(), want.top.size());
        for (size_t i = 0; i < got.top.size(); ++i) {
          EXPECT_EQ(got.top[i].id, want.top[i].id);
          EXPECT_EQ(std::bit_cast<uint32_t>(got.top[i].logprob),
                    std::bit_cast<uint32_t>(want.top[i].logprob));
        }
        // The next draws agree too: both consumed the same RNG.
        EXPECT_EQ(whole.Sample(row, 0).id, from_top.Sample(row, 0).id);
      }
    }
  }
  EXPECT_FALSE(Sampler({.temperature = 0.5f}).SamplesFromTop());
}

TEST(LogprobsTest, SparseRowFillsTopListWithMaskedByLowestId) {
  std::vector<float> logits(5000, -std::numeric_limits<float>::infinity());
  logits[4321] = 1.0f;
  logits[777] = 2.0f;
  const std::vector<TokenLogprob> top =
      TopLogprobs(logits, ComputeLogSoftmaxStats(logits), 5);
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : top) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<int32_t>{777, 4321, 0, 1, 2}));
  EXPECT_NEAR(std::exp(top[0].logprob) + std::exp(top[1].logprob), 1.0, 1e-6);
}

TEST(SamplerDeathTest, UnvalidatedParamsAreABug) {
  EXPECT_DEATH(Sampler({.temperature = -1.0f}), "ValidateSamplingParams");
}

// --- Determinism -----------------------------------------------------------

std::vector<int32_t> DrawSequence(const SamplingParams& params, int n) {
  Sampler sampler(params);
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> logits = RandomLogits(512, 1000 + i, 1.0f);
    ids.push_back(sampler.Sample(logits, 0).id);
  }
  return ids;
}

TEST(SamplerTest, SameSeedSameTokens) {
  for (const SamplingParams& params :
       {SamplingParams{.temperature = 1.0f, .seed = 42},
        SamplingParams{.temperature = 0.8f, .top_p = 0.9f, .seed = 42},
        SamplingParams{.temperature = 0.8f, .top_p = 0.9f, .top_k = 40, .min_p = 0.02f,
                       .seed = 42}}) {
    const std::vector<int32_t> a = DrawSequence(params, 1000);
    EXPECT_EQ(a, DrawSequence(params, 1000));
    SamplingParams other = params;
    other.seed = 43;
    const std::vector<int32_t> b = DrawSequence(other, 1000);
    int differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
    EXPECT_GT(differ, 100);
  }
}

TEST(SamplerTest, DrawIsPortableFunctionOfRawEngineOutput) {
  // 1024 equal logits: every weight is exactly 1, so the token must be
  // floor(u * 1024) with u built from the top 53 bits of the raw draw, i.e.
  // the top 10 bits. std::mt19937_64's sequence is fixed by the standard.
  const std::vector<float> logits(1024, 0.25f);
  Sampler sampler({.temperature = 0.7f, .seed = 2024});
  std::mt19937_64 engine(2024);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(sampler.Sample(logits, 0).id, static_cast<int32_t>(engine() >> 54));
  }
}

// --- Memory: O(k), not O(vocabulary) --------------------------------------

TEST(SamplerMemoryTest, TopLogprobsAllocatesOnlyItsResult) {
  for (const int32_t vocab : {1000, kBigVocab}) {
    const std::vector<float> logits = RandomLogits(vocab, 30);
    const LogSoftmaxStats stats = ComputeLogSoftmaxStats(logits);
    AllocScope scope;
    const std::vector<TokenLogprob> top = TopLogprobs(logits, stats, kMaxTopLogprobs);
    EXPECT_EQ(scope.stats().peak_bytes,
              static_cast<int64_t>(kMaxTopLogprobs * sizeof(TokenLogprob)))
        << "vocab " << vocab;
    EXPECT_EQ(top.capacity(), static_cast<size_t>(kMaxTopLogprobs));
  }
}

TEST(SamplerMemoryTest, TopKSamplingScratchIsBoundedByK) {
  constexpr int32_t kTopK = 40;
  const std::vector<float> logits = RandomLogits(kBigVocab, 31);
  Sampler sampler({.temperature = 0.9f, .top_p = 0.95f, .top_k = kTopK, .seed = 1});
  AllocScope scope;
  for (int i = 0; i < 20; ++i) {
    const SampledToken token = sampler.Sample(logits, kMaxTopLogprobs);
    EXPECT_EQ(token.top.capacity(), static_cast<size_t>(kMaxTopLogprobs));
  }
  // Results are gone; what stays live is the sampler's scratch.
  EXPECT_LE(scope.stats().live_bytes,
            static_cast<int64_t>(kTopK * sizeof(TokenLogprob)));
  EXPECT_LE(scope.stats().largest, kTopK * sizeof(TokenLogprob));
  EXPECT_LT(scope.stats().peak_bytes, 2000);  // never near 4 * 151936 bytes
}

TEST(SamplerMemoryTest, PlainTemperatureUsesNoScratch) {
  const std::vector<float> logits = RandomLogits(kBigVocab, 32);
  Sampler sampler({.temperature = 1.0f, .min_p = 0.01f, .seed = 1});
  AllocScope scope;
  for (int i = 0; i < 5; ++i) sampler.Sample(logits, 0);
  EXPECT_EQ(scope.stats().peak_bytes, 0);
}

TEST(SamplerMemoryTest, FlatTopPDoesNotRetainAVocabularyBuffer) {
  // A flat row forces the nucleus search over the whole vocabulary; the
  // scratch that needed is returned before Sample returns.
  const std::vector<float> logits = RandomLogits(kBigVocab, 33, 0.01f);
  Sampler sampler({.temperature = 1.0f, .top_p = 0.9f, .seed = 1});
  AllocScope scope;
  for (int i = 0; i < 3; ++i) sampler.Sample(logits, 5);
  EXPECT_EQ(scope.stats().live_bytes, 0);
  EXPECT_GT(scope.stats().peak_bytes,  // it did need the whole row meanwhile
            static_cast<int64_t>(kBigVocab / 2 * sizeof(TokenLogprob)));
}

TEST(SamplerMemoryTest, PeakedTopPKeepsSmallScratch) {
  // A typical peaked row: the nucleus is found among few candidates.
  std::vector<float> logits = RandomLogits(kBigVocab, 34, 1.0f);
  for (int32_t i = 0; i < 50; ++i) logits[static_cast<size_t>(i) * 997] += 12.0f;
  Sampler sampler({.temperature = 0.8f, .top_p = 0.9f, .seed = 1});
  AllocScope scope;
  for (int i = 0; i < 5; ++i) sampler.Sample(logits, 0);
  EXPECT_LT(scope.stats().peak_bytes, 64 * 1024);
}

TEST(SamplerMemoryTest, ResultSizeIsIndependentOfVocabulary) {
  static_assert(sizeof(TokenLogprob) == 8);
  Sampler sampler({.temperature = 1.0f, .seed = 1});
  for (const int32_t vocab : {100, kBigVocab}) {
    const SampledToken token = sampler.Sample(RandomLogits(vocab, 35), 7);
    EXPECT_EQ(token.top.size(), 7u);
    EXPECT_EQ(token.top.capacity(), 7u);
  }
}

}  // namespace
}  // namespace tandem::engine
