#include "engine/model/copy_weights.h"

#include "absl/container/flat_hash_map.h"
#include "common/status_macros.h"

namespace tandem::engine {

absl::StatusOr<DeviceWeights> CopyWeights(const ModelWeights& w, CopyInFn copy_in,
                                          std::vector<DeviceMatrix>* distinct) {
  absl::flat_hash_map<const void*, DevicePtr<const uint8_t>> copied;
  const auto matrix = [&](const WeightMatrix& m) -> absl::StatusOr<DeviceMatrix> {
    DeviceMatrix d{.type = m.type, .data = {}, .rows = m.rows, .cols = m.cols};
    if (m.data == nullptr) return d;
    if (const auto it = copied.find(m.data); it != copied.end()) {
      d.data = it->second;
      return d;
    }
    const auto bytes = static_cast<size_t>(m.rows * GgmlRowBytes(m.type, m.cols));
    ASSIGN_OR_RETURN(d.data, copy_in({static_cast<const uint8_t*>(m.data), bytes}));
    copied.emplace(m.data, d.data);
    if (distinct != nullptr) distinct->push_back(d);
    return d;
  };
  const auto vector = [&](const std::vector<float>& v) -> absl::StatusOr<DevicePtr<const float>> {
    if (v.empty()) return DevicePtr<const float>();
    ASSIGN_OR_RETURN(const DevicePtr<const uint8_t> p,
                     copy_in({reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)}));
    return p.As<const float>();
  };
  DeviceWeights d;
  ASSIGN_OR_RETURN(d.token_embd, matrix(w.token_embd));
  ASSIGN_OR_RETURN(d.output_norm, vector(w.output_norm));
  ASSIGN_OR_RETURN(d.output, matrix(w.output));
  for (const LayerWeights& l : w.layers) {
    DeviceLayerWeights& dl = d.layers.emplace_back();
    ASSIGN_OR_RETURN(dl.attn_norm, vector(l.attn_norm));
    ASSIGN_OR_RETURN(dl.wq, matrix(l.wq));
    ASSIGN_OR_RETURN(dl.wk, matrix(l.wk));
    ASSIGN_OR_RETURN(dl.wv, matrix(l.wv));
    ASSIGN_OR_RETURN(dl.wo, matrix(l.wo));
    ASSIGN_OR_RETURN(dl.bq, vector(l.bq));
    ASSIGN_OR_RETURN(dl.bk, vector(l.bk));
    ASSIGN_OR_RETURN(dl.bv, vector(l.bv));
    ASSIGN_OR_RETURN(dl.ffn_norm, vector(l.ffn_norm));
    ASSIGN_OR_RETURN(dl.w_gate, matrix(l.w_gate));
    ASSIGN_OR_RETURN(dl.w_up, matrix(l.w_up));
    ASSIGN_OR_RETURN(dl.w_down, matrix(l.w_down));
  }
  return d;
}

}  // namespace tandem::engine
