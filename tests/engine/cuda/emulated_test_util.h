// What the emulated GEMV tests (emulated_gemv16_test.cc, emulated_quant_test.cc)
// share: seeded random inputs and the RMSNorm a folded norm must match.
#ifndef TANDEM_TESTS_ENGINE_CUDA_EMULATED_TEST_UTIL_H_
#define TANDEM_TESTS_ENGINE_CUDA_EMULATED_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tandem::engine::cuda {

// n values uniform in [-size, size).
inline std::vector<float> RandomVector(int64_t n, std::mt19937& rng, float size = 2.0f) {
  std::uniform_real_distribution<float> value(-size, size);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

// RmsNorm(x) with `weight`, in double, as LaunchRmsNorm defines it.
inline std::vector<float> Normed(const std::vector<float>& x, int64_t cols,
                                 const std::vector<float>& weight, float eps) {
  std::vector<float> out(x.size());
  for (size_t t = 0; t < x.size() / cols; ++t) {
    double squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) squares += double{x[t * cols + c]} * x[t * cols + c];
    const double scale = 1.0 / std::sqrt(squares / cols + eps);
    for (int64_t c = 0; c < cols; ++c) {
      out[t * cols + c] = static_cast<float>(x[t * cols + c] * scale * weight[c]);
    }
  }
  return out;
}

// Tokens of x whose sizes differ by orders of magnitude, so that a token
// scaled by another's norm, or by none, is caught.
inline std::vector<float> TokensOfManySizes(int64_t n_tokens, int64_t cols, std::mt19937& rng) {
  std::vector<float> x = RandomVector(n_tokens * cols, rng);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = 0; c < cols; ++c) x[t * cols + c] *= std::pow(7.0f, static_cast<float>(t % 4));
  }
  return x;
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_TESTS_ENGINE_CUDA_EMULATED_TEST_UTIL_H_
