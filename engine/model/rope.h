// Rotary position embedding: cos/sin tables for positions [0, max_positions)
// computed once (capped by --max-context), and their application to query and
// key heads. Immutable after construction; thread-safe.
#ifndef TANDEM_ENGINE_MODEL_ROPE_H_
#define TANDEM_ENGINE_MODEL_ROPE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "engine/gguf/model_config.h"

namespace tandem::engine {

class RopeTable {
 public:
  // `freq_factors` (llama3-style rope_freqs.weight) may be empty.
  RopeTable(const ModelConfig& config, std::span<const float> freq_factors,
            int32_t max_positions);

  int32_t max_positions() const { return max_positions_; }
  // The rotated dimensions of a head, how they pair, and the tables
  // [max_positions][n_rot / 2] (what a GPU backend uploads).
  int32_t n_rot() const { return n_rot_; }
  RopeType type() const { return type_; }
  std::span<const float> cos_table() const { return cos_; }
  std::span<const float> sin_table() const { return sin_; }

  // Rotates x, [n_heads][head_dim], as position `pos` (< max_positions).
  void Apply(float* x, int32_t n_heads, int32_t head_dim, int32_t pos) const;

  // Rotates x by a position delta (positive or negative) computed on the fly;
  // RoPE composes, so shifting cached keys by `delta` equals recomputing them
  // at their new positions.
  void ApplyDelta(float* x, int32_t n_heads, int32_t head_dim, int32_t delta) const;

  // The cos and sin ApplyDelta rotates pair i by, into cos[i] and sin[i],
  // i < n_rot / 2 (a device backend's table for a SHIFT window's move).
  void DeltaTables(int32_t delta, float* cos, float* sin) const;

 private:
  void Rotate(float* x, int32_t n_heads, int32_t head_dim, const float* cos,
              const float* sin) const;

  int32_t n_rot_;
  RopeType type_;
  int32_t max_positions_;
  std::vector<float> theta_scale_;  // [n_rot / 2]: per-pair frequency
  std::vector<float> cos_;          // [max_positions][n_rot / 2]
  std::vector<float> sin_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_ROPE_H_
