// Memory for logprobs is O(batch x k): it grows neither with the number of
// generated tokens nor with the vocabulary. Measured with a counting global
// allocator, so this test lives in its own binary.
#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tests/engine/test_models.h"

namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void Track(int64_t delta) {
  const int64_t now = g_live.fetch_add(delta) + delta;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

// Every allocation records its size in a 16-byte header.
void* operator new(size_t n) {
  void* p = std::malloc(n + 16);
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  Track(static_cast<int64_t>(n));
  return static_cast<char*>(p) + 16;
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - 16;
  Track(-static_cast<int64_t>(*reinterpret_cast<size_t*>(base)));
  std::free(base);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }
// The nothrow forms (std::stable_sort's buffer) come here too: a sanitizer
// runtime replaces them otherwise, and their blocks would lack the header.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { operator delete(p); }

namespace tandem::engine {
namespace {

// Peak bytes allocated above the level at the start of decoding, while
// generating `n` tokens with 20 logprobs each. Events are consumed and
// dropped, as a streaming server does.
int64_t DecodePeakGrowth(const Model& model, int32_t n) {
  auto eng = *Engine::Create(model, MakeCpuBackend({.threads = 1}), {});
  GenerationRequest r;
  r.prompt = {1, 5, 6, 7};
  r.max_tokens = n;
  r.ignore_eos = true;
  r.top_logprobs = 20;
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 1;
  EXPECT_TRUE(eng->Add(r).ok());
  // The first step allocates the scratch buffers of a steady state.
  EXPECT_TRUE(eng->Step().ok());
  EXPECT_TRUE(eng->Step().ok());
  const int64_t base = g_live.load();
  g_peak.store(base);
  int32_t seen = 2;
  while (eng->HasWork()) {
    auto events = testing::Tokens(eng->Step());
    EXPECT_TRUE(events.ok());
    for (const TokenEvent& e : *events) {
      EXPECT_EQ(e.token.top.size(), 20u);
      EXPECT_LE(e.token.top.capacity(), 20u);
      ++seen;
    }
  }
  EXPECT_EQ(seen, n);
  return g_peak.load() - base;
}

TEST(LogprobsMemoryTest, DoesNotGrowWithGeneratedTokens) {
  auto model = testing::LoadSynthetic(testing::TinyOptions());
  const int64_t short_run = DecodePeakGrowth(*model, 50);
  const int64_t long_run = DecodePeakGrowth(*model, 450);
  // The sequence's own token ids grow by 4 bytes per token (8 with vector
  // doubling); 20 retained logprobs would cost at least 160 bytes per token.
  EXPECT_LT(long_run - short_run, 400 * 8 + 4096)
      << "short " << short_run << " long " << long_run;
}

TEST(LogprobsMemoryTest, PerStepStateDoesNotScaleWithVocabulary) {
  SyntheticModelOptions small = testing::TinyOptions();
  SyntheticModelOptions large = testing::TinyOptions();
  large.n_vocab = 8192;
  auto small_model = testing::LoadSynthetic(small);
  auto large_model = testing::LoadSynthetic(large);
  // Decoding allocates nothing per step that depends on the vocabulary: the
  // logits row lives in the forward pass's reused scratch, and top-k
  // selection keeps k entries.
  const int64_t a = DecodePeakGrowth(*small_model, 100);
  const int64_t b = DecodePeakGrowth(*large_model, 100);
  EXPECT_LT(b - a, 8192);  // far below one 8192-float row (32 KiB)
  EXPECT_LT(b, 64 * 1024);
}

}  // namespace
}  // namespace tandem::engine
