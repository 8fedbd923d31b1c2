#include "engine/model/rope.h"

#include <cmath>

#include "common/check.h"

namespace tandem::engine {

RopeTable::RopeTable(const ModelConfig& config, std::span<const float> freq_factors,
                     int32_t max_positions)
    : n_rot_(config.n_rot), type_(config.rope_type), max_positions_(max_positions) {
  const int32_t half = n_rot_ / 2;
  TANDEM_CHECK(freq_factors.empty() || static_cast<int32_t>(freq_factors.size()) == half,
               "rope freq factors must have n_rot / 2 entries");
  // Frequencies are built by repeated multiplication in float, as llama.cpp
  // does, so the angles match its tables bit for bit where possible.
  const float theta_scale = std::pow(config.rope_freq_base, -2.0f / n_rot_);
  theta_scale_.resize(half);
  float scale = 1.0f;
  for (int32_t i = 0; i < half; ++i) {
    const float factor = freq_factors.empty() ? 1.0f : freq_factors[i];
    theta_scale_[i] = scale / factor * config.rope_freq_scale;
    scale *= theta_scale;
  }
  cos_.resize(static_cast<size_t>(max_positions) * half);
  sin_.resize(cos_.size());
  for (int32_t p = 0; p < max_positions; ++p) {
    float theta_base = static_cast<float>(p);
    for (int32_t i = 0; i < half; ++i) {
      const float factor = freq_factors.empty() ? 1.0f : freq_factors[i];
      const float theta = config.rope_freq_scale * (theta_base / factor);
      cos_[static_cast<size_t>(p) * half + i] = std::cos(theta);
      sin_[static_cast<size_t>(p) * half + i] = std::sin(theta);
      theta_base *= theta_scale;
    }
  }
}

void RopeTable::Rotate(float* x, int32_t n_heads, int32_t head_dim, const float* cos,
                       const float* sin) const {
  const int32_t half = n_rot_ / 2;
  for (int32_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int32_t i = 0; i < half; ++i) {
      // Normal: pairs (2i, 2i+1). NeoX: pairs (i, i + n_rot/2).
      const int32_t a = type_ == RopeType::kNormal ? 2 * i : i;
      const int32_t b = type_ == RopeType::kNormal ? 2 * i + 1 : i + half;
      const float x0 = v[a];
      const float x1 = v[b];
      v[a] = x0 * cos[i] - x1 * sin[i];
      v[b] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

void RopeTable::Apply(float* x, int32_t n_heads, int32_t head_dim, int32_t pos) const {
  TANDEM_DCHECK(pos >= 0 && pos < max_positions_, "position within the RoPE table");
  const size_t row = static_cast<size_t>(pos) * (n_rot_ / 2);
  Rotate(x, n_heads, head_dim, cos_.data() + row, sin_.data() + row);
}

void RopeTable::ApplyDelta(float* x, int32_t n_heads, int32_t head_dim,
                           int32_t delta) const {
  std::vector<float> c(n_rot_ / 2), s(n_rot_ / 2);
  DeltaTables(delta, c.data(), s.data());
  Rotate(x, n_heads, head_dim, c.data(), s.data());
}

void RopeTable::DeltaTables(int32_t delta, float* cos, float* sin) const {
  for (int32_t i = 0; i < n_rot_ / 2; ++i) {
    const float theta = static_cast<float>(delta) * theta_scale_[i];
    cos[i] = std::cos(theta);
    sin[i] = std::sin(theta);
  }
}

}  // namespace tandem::engine
