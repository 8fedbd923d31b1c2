// A model's weights twice over: as the loaded file holds them (host views
// of the GGUF mapping and f32 copies of the 1-D tensors; Model::Load builds
// them) and as a backend holds them (DevicePtr handles; Backend::
// PrepareWeights builds them once, at engine start). Shapes are in the
// comments; weights are immutable once built (thread-safe to read).
#ifndef TANDEM_ENGINE_MODEL_WEIGHTS_H_
#define TANDEM_ENGINE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "engine/gguf/tensor_type.h"
#include "engine/kv/device_ptr.h"

namespace tandem::engine {

// A 2-D weight as GGUF stores it: `rows` rows (output features) of `cols`
// contiguous elements (input features) of `type`. Host memory, not owned.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  WeightMatrix wq, wk, wv, wo;        // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  std::vector<float> bq, bk, bv;      // qkv biases (qwen2), else empty
  std::vector<float> ffn_norm;        // [n_embd]
  WeightMatrix w_gate, w_up, w_down;  // [n_ff, n_embd] x2, [n_embd, n_ff]
};

struct ModelWeights {
  WeightMatrix token_embd;            // [n_vocab, n_embd]
  std::vector<float> output_norm;     // [n_embd]
  WeightMatrix output;                // [n_vocab, n_embd]; token_embd when tied
  std::vector<float> rope_freq_factors;  // [n_rot / 2] or empty (rope_freqs.weight)
  std::vector<LayerWeights> layers;
};

// WeightMatrix in a backend's memory: rows of GgmlRowBytes(type, cols) bytes.
struct DeviceMatrix {
  GgmlType type = GgmlType::kF32;
  DevicePtr<const uint8_t> data;
  int64_t rows = 0;
  int64_t cols = 0;
};

// LayerWeights in a backend's memory; f32 vectors. A null bias: none.
struct DeviceLayerWeights {
  DevicePtr<const float> attn_norm;
  DeviceMatrix wq, wk, wv, wo;
  DevicePtr<const float> bq, bk, bv;
  DevicePtr<const float> ffn_norm;
  DeviceMatrix w_gate, w_up, w_down;
};

// ModelWeights in a backend's memory. The RoPE frequency factors stay on
// the host: they only shape the RoPE table (Backend::PrepareRope).
struct DeviceWeights {
  DeviceMatrix token_embd;
  DevicePtr<const float> output_norm;
  DeviceMatrix output;
  std::vector<DeviceLayerWeights> layers;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_WEIGHTS_H_
