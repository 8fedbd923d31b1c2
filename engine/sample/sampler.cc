#include "engine/sample/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/sample/fast_exp.h"

namespace tandem::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Top-p without top-k first gathers only the tokens whose probability is at
// least this much (at most 1/kNucleusMinProb of them) and widens to the whole
// vocabulary only when those do not reach top_p. Real next-token
// distributions almost always put top_p of their mass on far fewer tokens.
constexpr double kNucleusMinProb = 1e-4;

// Scratch larger than this is given back after the call, so that a sampler
// which once saw a flat distribution does not keep a vocabulary-sized buffer.
constexpr size_t kMaxRetainedCandidates = 16384;

// Row passes work in chunks: weights of one chunk live on the stack, and a
// chunk whose max cannot matter is skipped after one vectorized max.
constexpr int32_t kChunk = 256;
constexpr int32_t kSkipChunk = 64;
constexpr int kLanes = 8;

// GCC at -O2 vectorizes only loops it is told to; the engine is built with
// OpenMP, and without it the loops are merely scalar.
#if defined(_OPENMP)
#define TANDEM_SIMD_LOOP _Pragma("omp simd")
#else
#define TANDEM_SIMD_LOOP
#endif

// A NaN logit never wins and gets no mass; +inf is clamped so that
// `logit - max` stays finite. Everything below reads logits through this.
// Branch-free (the NaN test is a quiet compare) so that loops vectorize.
inline float Sanitize(float x) {
  x = std::min(x, std::numeric_limits<float>::max());
  return x == x ? x : kNegInf;
}

// Largest sanitized value, -inf for an empty span. Lanes keep GCC's
// vectorizer happy; max does not depend on order, so neither does this.
float RowMax(std::span<const float> x) {
  std::array<float, kLanes> lane;
  lane.fill(kNegInf);
  const size_t n = x.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lane[j] = std::max(lane[j], Sanitize(x[i + j]));
    }
  }
  for (; i < n; ++i) lane[0] = std::max(lane[0], Sanitize(x[i]));
  return *std::max_element(lane.begin(), lane.end());
}

// Sum of floats in double, in a fixed order (kLanes interleaved partial
// sums, combined pairwise): the same inputs always give the same bits.
double SumLanes(const float* w, int32_t count) {
  std::array<double, kLanes> lane{};
  int32_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += w[i + j];
  }
  for (; i < count; ++i) lane[0] += w[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
         ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// Unnormalized temperature-scaled probability exp((logit - max) / T): the
// most likely token weighs 1, so min_p compares weights directly. Scalar
// calls and FillWeights compute the same bits.
struct Weigher {
  float max;
  float inv_temperature;
  float operator()(float logit) const {
    return ExpNonPositive((logit - max) * inv_temperature);
  }
};

// w[i] = weight(logits[i]) for i < count, zero where below `min_weight`.
void FillWeights(const float* logits, int32_t count, const Weigher& weight,
                 float min_weight, float* w) {
  const float max = weight.max;
  const float inv_temperature = weight.inv_temperature;
  TANDEM_SIMD_LOOP
  for (int32_t i = 0; i < count; ++i) {
    const float v = ExpNonPositive((Sanitize(logits[i]) - max) * inv_temperature);
    w[i] = std::isless(v, min_weight) ? 0.0f : v;
  }
}

// Sum of the weights of the whole row that reach `min_weight`, chunk by
// chunk; DrawStreaming repeats exactly these sums.
double RowWeightSum(std::span<const float> logits, const Weigher& weight,
                    float min_weight) {
  std::array<float, kChunk> w;
  const int32_t n = static_cast<int32_t>(logits.size());
  double total = 0.0;
  for (int32_t begin = 0; begin < n; begin += kChunk) {
    const int32_t count = std::min(kChunk, n - begin);
    FillWeights(logits.data() + begin, count, weight, min_weight, w.data());
    total += SumLanes(w.data(), count);
  }
  return total;
}

// The ranking every selection uses: larger value first, ties to the lower id.
// (Candidates keep the logit in TokenLogprob::logprob while being ranked.)
inline bool RanksBefore(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
}

inline float LogProbOf(float logit, const LogSoftmaxStats& stats) {
  return logit - stats.max - stats.log_sum;
}

// A double in [0, 1) from the top 53 bits of one raw draw. Written out
// because std::uniform_real_distribution's output differs between standard
// libraries, and a seed must give the same tokens everywhere.
inline double ToUnitInterval(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int32_t RowSize(std::span<const float> logits) {
  TANDEM_CHECK(!logits.empty(), "logits row is empty");
  TANDEM_CHECK(logits.size() <= static_cast<size_t>(
                                    std::numeric_limits<int32_t>::max()),
               "vocabulary does not fit token ids");
  return static_cast<int32_t>(logits.size());
}


// A bar nothing fails to clear: comparisons with NaN are false.
constexpr float kNoBar = std::numeric_limits<float>::quiet_NaN();

// Calls visit(id, sanitized value) in id order for every token of the row,
// except that a chunk whose max is <= bar() is skipped after one vectorized
// max. `bar` is re-read per chunk because visiting raises it.
template <typename Bar, typename Visit>
void ForEachAbove(std::span<const float> logits, Bar bar, Visit visit) {
  const int32_t n = static_cast<int32_t>(logits.size());
  for (int32_t begin = 0; begin < n; begin += kSkipChunk) {
    const int32_t count = std::min(kSkipChunk, n - begin);
    const std::span<const float> chunk = logits.subspan(begin, count);
    if (RowMax(chunk) <= bar()) continue;
    for (int32_t j = 0; j < count; ++j) visit(begin + j, Sanitize(chunk[j]));
  }
}

// Fills `out` with the `k` best-ranked tokens of the row (in heap order, not
// sorted) using a bounded heap: memory k entries, time O(n) plus O(log k)
// per token that enters the heap.
void SelectTopK(std::span<const float> logits, int32_t k,
                std::vector<TokenLogprob>& out) {
  out.clear();
  out.reserve(static_cast<size_t>(k));
  // With RanksBefore as "less", the heap's front is the worst kept token. A
  // later token with an equal value has a higher id and does not get in.
  ForEachAbove(
      logits,
      [&] {
        return static_cast<int32_t>(out.size()) < k ? kNoBar
                                                     : out.front().logprob;
      },
      [&](int32_t id, float value) {
        const TokenLogprob token{id, value};
        if (static_cast<int32_t>(out.size()) < k) {
          out.push_back(token);
          std::push_heap(out.begin(), out.end(), RanksBefore);
        } else if (RanksBefore(token, out.front())) {
          std::pop_heap(out.begin(), out.end(), RanksBefore);
          out.back() = token;
          std::push_heap(out.begin(), out.end(), RanksBefore);
        }
      });
}

struct Nucleus {
  size_t size = 0;       // leading candidates that form it
  bool reached = false;  // false: all of `c` weighs less than the target
};

// Ranges this short are finished with a sort.
constexpr size_t kSortBelow = 32;

// Reorders `c` so that the nucleus -- the shortest prefix of the ranking
// whose weight reaches `target` -- fills its first `size` entries, in no
// particular order. A weighted quickselect: each round splits the range at
// its ranking median (nth_element) and sums one half, so the cost is O(|c|)
// expected and nothing is fully sorted.
Nucleus SelectNucleus(std::vector<TokenLogprob>& c, double target,
                      const Weigher& weight) {
  const auto at = [&c](size_t i) {
    return c.begin() + static_cast<ptrdiff_t>(i);
  };
  size_t lo = 0;
  size_t hi = c.size();
  double before = 0.0;  // weight of c[0, lo), all ranked before c[lo, hi)
  while (hi - lo > kSortBelow) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(at(lo), at(mid), at(hi), RanksBefore);
    double left = 0.0;
    for (size_t i = lo; i < mid; ++i) left += weight(c[i].logprob);
    if (before + left >= target) {
      hi = mid;
    } else {
      before += left;
      lo = mid;
    }
  }
  std::sort(at(lo), at(hi), RanksBefore);
  for (size_t i = lo; i < hi; ++i) {
    before += weight(c[i].logprob);
    if (before >= target) return {.size = i + 1, .reached = true};
  }
  // Short only by rounding if `hi` was ever lowered, since c[0, hi) then
  // reached the target when summed in another order.
  return {.size = hi, .reached = hi < c.size()};
}

// Draws from c[0, count) in proportion to weight, leaving out tokens below
// the min_p weight. The most likely token weighs exactly 1 >= min_p and is
// always among them, so something is drawn. `u` is in [0, 1).
int32_t DrawCandidates(const std::vector<TokenLogprob>& c, size_t count,
                       float min_p, const Weigher& weight, double u) {
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) {
    const float w = weight(c[i].logprob);
    if (!(w < min_p)) total += w;
  }
  const double r = u * total;
  double cumulative = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < count; ++i) {
    const float w = weight(c[i].logprob);
    if (w < min_p || w <= 0.0f) continue;
    cumulative += w;
    last = c[i].id;
    if (cumulative > r) return last;
  }
  // Reached only when u * total rounds up to total.
  TANDEM_CHECK(last >= 0, "no candidate with weight; the max token is lost");
  return last;
}

// Temperature and min_p only: two streaming passes over the row and no heap
// memory. The second pass repeats the first one's chunk sums bit for bit, so
// it finds the chunk holding u * total and only that chunk is walked token
// by token.
int32_t DrawStreaming(std::span<const float> logits, float min_p,
                      const Weigher& weight, double u) {
  const double total = RowWeightSum(logits, weight, min_p);
  const double r = u * total;
  std::array<float, kChunk> w;
  const int32_t n = static_cast<int32_t>(logits.size());
  double cumulative = 0.0;
  for (int32_t begin = 0; begin < n; begin += kChunk) {
    const int32_t count = std::min(kChunk, n - begin);
    FillWeights(logits.data() + begin, count, weight, min_p, w.data());
    const double chunk_sum = SumLanes(w.data(), count);
    if (!(cumulative + chunk_sum > r)) {
      cumulative += chunk_sum;
      continue;
    }
    int32_t last_positive = -1;
    for (int32_t j = 0; j < count; ++j) {
      if (w[j] <= 0.0f) continue;
      cumulative += w[j];
      last_positive = begin + j;
      if (cumulative > r) return last_positive;
    }
    // Summed one by one the chunk fell short by rounding; it still holds r.
    return last_positive;
  }
  // u * total rounded up to total: the last token with any weight.
  for (int32_t i = n - 1; i > 0; --i) {
    const float v = weight(Sanitize(logits[i]));
    if (v > 0.0f && !(v < min_p)) return i;
  }
  return 0;
}

// Replaces `out` with every token whose logit is >= threshold, in id order.
void CollectAtLeast(std::span<const float> logits, double threshold,
                    std::vector<TokenLogprob>& out) {
  out.clear();
  // The float just below the nearest float to the threshold: every value
  // >= threshold is above it, so no chunk holding one is skipped.
  const float bar =
      threshold == -std::numeric_limits<double>::infinity() ? kNoBar
      : threshold > std::numeric_limits<float>::max()
          ? std::numeric_limits<float>::max()
          : std::nextafter(static_cast<float>(threshold), kNegInf);
  ForEachAbove(
      logits, [bar] { return bar; },
      [&](int32_t id, float value) {
        if (static_cast<double>(value) >= threshold) out.push_back({id, value});
      });
}

// top_p (with or without min_p) and no top_k: the nucleus of the full
// temperature-scaled softmax. Gathers candidates above a value threshold
// into `candidates` (scratch) instead of copying the row; see
// kNucleusMinProb.
int32_t DrawNucleus(std::span<const float> logits, const SamplingParams& params,
                    const Weigher& weight, double u,
                    std::vector<TokenLogprob>& candidates) {
  const double total = RowWeightSum(logits, weight, 0.0f);
  const double t = params.temperature;
  // weight >= w  <=>  logit >= max + T * log(w). The min_p bound is loosened
  // a little so rounding cannot leave out a token that the exact test in
  // DrawCandidates keeps.
  const double log_min_p = std::log(static_cast<double>(params.min_p));
  const double min_p_threshold =
      params.min_p > 0.0f
          ? weight.max + t * log_min_p - 1e-3 * t * (1.0 - log_min_p)
          : -std::numeric_limits<double>::infinity();
  const double frequent_threshold =
      weight.max + t * (std::log(kNucleusMinProb) + std::log(total));
  // Both gathered sets are prefixes of the ranking. If the gathered set
  // holds top_p of the mass it contains the nucleus; if it holds everything
  // min_p keeps, min_p's cut lies inside it either way. Only a flat row
  // (the nucleus reaching below kNucleusMinProb) gathers the whole row.
  CollectAtLeast(logits, std::max(frequent_threshold, min_p_threshold),
                 candidates);
  const double target = params.top_p * total;
  Nucleus nucleus = SelectNucleus(candidates, target, weight);
  if (!nucleus.reached && frequent_threshold > min_p_threshold) {
    CollectAtLeast(logits, min_p_threshold, candidates);
    nucleus = SelectNucleus(candidates, target, weight);
  }
  return DrawCandidates(candidates, nucleus.size, params.min_p, weight, u);
}

}  // namespace

LogSoftmaxStats ComputeLogSoftmaxStats(std::span<const float> logits) {
  RowSize(logits);
  const float max = RowMax(logits);
  if (max == kNegInf) {
    // No token is possible: every logprob comes out -inf rather than NaN.
    return {.max = 0.0f, .log_sum = std::numeric_limits<float>::infinity()};
  }
  // The max term contributes exactly 1, so the sum is in [1, n]; summing in
  // double keeps it accurate at 150K terms.
  const double sum =
      RowWeightSum(logits, Weigher{.max = max, .inv_temperature = 1.0f}, 0.0f);
  return {.max = max, .log_sum = static_cast<float>(std::log(sum))};
}

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits,
                                      const LogSoftmaxStats& stats, int k) {
  TANDEM_CHECK(k >= 0 && k <= kMaxTopLogprobs,
               "top logprobs count outside [0, kMaxTopLogprobs]");
  const int32_t n = RowSize(logits);
  const int count = static_cast<int>(std::min<int32_t>(k, n));
  if (count == 0) return {};
  // Insertion into a fixed sorted array; no allocation until the result.
  std::array<TokenLogprob, kMaxTopLogprobs> best;
  int filled = 0;
  const auto insert = [&](int32_t id, float value) {
    int pos;
    if (filled < count) {
      pos = filled++;
    } else if (value > best[count - 1].logprob) {
      pos = count - 1;
    } else {
      return;
    }
    // Equal values stay ahead: they were seen first, so their ids are lower.
    while (pos > 0 && value > best[pos - 1].logprob) {
      best[pos] = best[pos - 1];
      --pos;
    }
    best[pos] = {id, value};
  };
  ForEachAbove(
      logits,
      [&] { return filled < count ? kNoBar : best[count - 1].logprob; },
      insert);

  std::vector<TokenLogprob> top;
  top.reserve(static_cast<size_t>(count));
  for (int j = 0; j < count; ++j) {
    top.push_back({best[j].id, LogProbOf(best[j].logprob, stats)});
  }
  return top;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed) {
  TANDEM_CHECK(ValidateSamplingParams(params).ok(),
               "SamplingParams must pass ValidateSamplingParams first");
}

void Sampler::Skip(int calls) {
  // Sample draws exactly one value per call when temperature > 0, none when
  // greedy.
  if (params_.temperature > 0.0f && calls > 0) rng_.discard(static_cast<uint64_t>(calls));
}

bool Sampler::SamplesFromTop() const {
  // Sample's own test for an argmax draw.
  return std::isinf(1.0f / params_.temperature);
}

SampledToken Sampler::SampleFromTop(std::span<const TokenLogprob> top, int top_logprobs) {
  TANDEM_CHECK(SamplesFromTop(), "SampleFromTop is for greedy samplers");
  TANDEM_CHECK(top_logprobs >= 0 && top_logprobs <= kMaxTopLogprobs,
               "top_logprobs outside [0, kMaxTopLogprobs]");
  TANDEM_CHECK(!top.empty(), "the top of a row holds at least its argmax");
  // Sample draws once whenever temperature > 0, a subnormal one included.
  if (params_.temperature > 0.0f) rng_();
  SampledToken out;
  // As TopLogprobs: top_logprobs of them, or all of a shorter row.
  out.top.assign(top.begin(), top.begin() + std::min<size_t>(top_logprobs, top.size()));
  // Sample's argmax is the first position of the max, which TopLogprobs
  // ranks first (ties to the lower id), and its logprob is the same
  // LogProbOf(Sanitize(logit), stats).
  out.id = top.front().id;
  out.logprob = top.front().logprob;
  return out;
}

SampledToken Sampler::Sample(std::span<const float> logits, int top_logprobs) {
  TANDEM_CHECK(top_logprobs >= 0 && top_logprobs <= kMaxTopLogprobs,
               "top_logprobs outside [0, kMaxTopLogprobs]");
  const int32_t n = RowSize(logits);
  const LogSoftmaxStats stats = ComputeLogSoftmaxStats(logits);

  SampledToken out;
  out.top = TopLogprobs(logits, stats, top_logprobs);

  // Exactly one draw per call whenever temperature > 0, whatever survives
  // truncation, so token t depends only on the seed and the rows up to t.
  const double u =
      params_.temperature > 0.0f ? ToUnitInterval(rng_()) : 0.0;
  // A subnormal temperature overflows 1/T; its distribution is the argmax.
  const float inv_temperature = 1.0f / params_.temperature;
  const bool greedy = std::isinf(inv_temperature);
  const bool no_token_possible = std::isinf(stats.log_sum);

  if (greedy || no_token_possible) {
    if (!out.top.empty()) {
      out.id = out.top.front().id;
    } else {
      // The first position of the max; the max is exact, so == finds it.
      const float max = no_token_possible ? kNegInf : stats.max;
      out.id = 0;
      while (Sanitize(logits[out.id]) != max) ++out.id;
    }
  } else {
    const Weigher weight{.max = stats.max, .inv_temperature = inv_temperature};
    const bool use_top_k = params_.top_k > 0 && params_.top_k < n;
    const bool use_top_p = params_.top_p < 1.0f;
    if (use_top_k) {
      // Temperature is monotone, so the top-k of the raw logits is the top-k
      // of the scaled ones. top_p then sees the distribution renormalized
      // over these k tokens (the order HF and vLLM apply them in).
      SelectTopK(logits, params_.top_k, candidates_);
      size_t keep = candidates_.size();
      if (use_top_p) {
        double total = 0.0;
        for (const TokenLogprob& c : candidates_) total += weight(c.logprob);
        // Rounding may keep the sum short of the target: then all k stay.
        keep = SelectNucleus(candidates_, params_.top_p * total, weight).size;
      }
      out.id = DrawCandidates(candidates_, keep, params_.min_p, weight, u);
    } else if (use_top_p) {
      out.id = DrawNucleus(logits, params_, weight, u, candidates_);
    } else {
      out.id = DrawStreaming(logits, params_.min_p, weight, u);
    }
    if (candidates_.capacity() > kMaxRetainedCandidates) {
      std::vector<TokenLogprob>().swap(candidates_);
    }
  }
  out.logprob = LogProbOf(Sanitize(logits[out.id]), stats);
  return out;
}

}  // namespace tandem::engine
