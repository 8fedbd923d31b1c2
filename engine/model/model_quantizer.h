// `tandem quantize`: rewrites a GGUF model with its weight matrices in a
// quantized type, choosing each tensor's type the way llama-quantize's named
// mixes do (Q4_K_M keeps half of the attn_v and ffn_down matrices and the
// output matrix in Q6_K, ...), with every metadata key kept and
// general.file_type / general.quantization_version set, so that llama.cpp
// loads the result. Vectors (norms) stay as they are; a matrix whose row
// length the chosen type cannot hold falls back as llama-quantize does
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16). Input tensors of any
// type this engine reads are dequantized first. Thread-compatible.
#ifndef TANDEM_ENGINE_MODEL_MODEL_QUANTIZER_H_
#define TANDEM_ENGINE_MODEL_MODEL_QUANTIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine {

// llama.cpp's llama_ftype values for the mixes this writes.
enum class QuantMix : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kBF16 = 32,
};

// "Q4_K_M", "q5_0", ... (case-insensitive); InvalidArgument naming --type
// and listing the mixes otherwise.
absl::StatusOr<QuantMix> QuantMixFromName(std::string_view name);
std::string QuantMixNames();

// What each tensor of `model` becomes under `mix`, in file order.
struct TensorPlan {
  std::string name;
  GgmlType from;
  GgmlType to;
};
absl::StatusOr<std::vector<TensorPlan>> PlanQuantization(const GgufFile& model, QuantMix mix);

struct QuantizeStats {
  int64_t tensors = 0;
  int64_t bytes_in = 0;   // tensor data
  int64_t bytes_out = 0;
};

// Writes `in` quantized with `mix` to `out`.
absl::StatusOr<QuantizeStats> QuantizeModel(const std::string& in, const std::string& out,
                                             QuantMix mix);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_MODEL_QUANTIZER_H_
