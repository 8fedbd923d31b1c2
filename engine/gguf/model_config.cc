#include "engine/gguf/model_config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace tandem::engine {

extern const ArchTraits kLlamaArch;
extern const ArchTraits kQwen2Arch;

const ArchTraits* FindArch(std::string_view name) {
  for (const ArchTraits* arch : {&kLlamaArch, &kQwen2Arch}) {
    if (name == arch->name) return arch;
  }
  return nullptr;
}

namespace {

absl::StatusOr<int32_t> GetPositive(const GgufFile& file, const std::string& key,
                                    int64_t max) {
  ASSIGN_OR_RETURN(int64_t v, file.GetInt(key));
  if (v < 1 || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata ", key, " = ", v, " is out of range [1, ", max, "]"));
  }
  return static_cast<int32_t>(v);
}

}  // namespace

absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file) {
  ModelConfig c;
  ASSIGN_OR_RETURN(std::string_view arch_name, file.GetString("general.architecture"));
  const ArchTraits* arch = FindArch(arch_name);
  if (arch == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "general.architecture \"", ToAbsl(arch_name),
        "\" is not supported; supported: llama, qwen2"));
  }
  c.arch = arch->name;
  c.rope_type = arch->rope_type;
  c.qkv_bias = arch->qkv_bias;
  const std::string p = c.arch + ".";

  constexpr int64_t kMaxDim = 1 << 20;
  ASSIGN_OR_RETURN(c.n_embd, GetPositive(file, p + "embedding_length", kMaxDim));
  ASSIGN_OR_RETURN(c.n_layer, GetPositive(file, p + "block_count", 4096));
  ASSIGN_OR_RETURN(c.n_ff, GetPositive(file, p + "feed_forward_length", kMaxDim));
  ASSIGN_OR_RETURN(c.n_head, GetPositive(file, p + "attention.head_count", 4096));
  c.n_head_kv = c.n_head;
  if (file.HasKey(p + "attention.head_count_kv")) {
    ASSIGN_OR_RETURN(c.n_head_kv, GetPositive(file, p + "attention.head_count_kv", 4096));
  }
  if (c.n_head % c.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata ", p, "attention.head_count (", c.n_head,
        ") is not a multiple of attention.head_count_kv (", c.n_head_kv, ")"));
  }
  c.head_dim = c.n_embd / c.n_head;
  if (file.HasKey(p + "attention.key_length")) {
    ASSIGN_OR_RETURN(c.head_dim, GetPositive(file, p + "attention.key_length", 4096));
  } else if (c.n_embd % c.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata ", p, "embedding_length (", c.n_embd,
        ") is not a multiple of attention.head_count (", c.n_head, ")"));
  }
  if (file.HasKey(p + "attention.value_length")) {
    ASSIGN_OR_RETURN(int32_t v_len, GetPositive(file, p + "attention.value_length", 4096));
    if (v_len != c.head_dim) {
      return absl::UnimplementedError(absl::StrCat(
          "metadata ", p, "attention.value_length (", v_len,
          ") differs from the key length (", c.head_dim, "); not supported"));
    }
  }
  ASSIGN_OR_RETURN(c.n_ctx_train, GetPositive(file, p + "context_length", 1 << 24));
  c.n_rot = c.head_dim;
  if (file.HasKey(p + "rope.dimension_count")) {
    ASSIGN_OR_RETURN(c.n_rot, GetPositive(file, p + "rope.dimension_count", c.head_dim));
  }
  if (c.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata ", p, "rope.dimension_count (", c.n_rot, ") must be even"));
  }
  ASSIGN_OR_RETURN(c.rope_freq_base, file.GetFloatOr(p + "rope.freq_base", 10000.0f));
  if (!(c.rope_freq_base > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata ", p, "rope.freq_base must be positive"));
  }
  // Linear scaling, as llama.cpp: rope.scaling.type "linear" with
  // rope.scaling.factor, or the older rope.scale_linear.
  float factor = 1.0f;
  std::string scaling_type = "linear";
  if (file.HasKey(p + "rope.scaling.type")) {
    ASSIGN_OR_RETURN(std::string_view t, file.GetString(p + "rope.scaling.type"));
    scaling_type = std::string(t);
  }
  if (scaling_type != "none" && scaling_type != "linear") {
    return absl::UnimplementedError(absl::StrCat(
        "metadata ", p, "rope.scaling.type \"", scaling_type,
        "\" is not supported; supported: none, linear"));
  }
  if (file.HasKey(p + "rope.scaling.factor")) {
    ASSIGN_OR_RETURN(factor, file.GetFloat(p + "rope.scaling.factor"));
  } else if (file.HasKey(p + "rope.scale_linear")) {
    ASSIGN_OR_RETURN(factor, file.GetFloat(p + "rope.scale_linear"));
  }
  if (scaling_type == "linear" && factor != 0.0f) {
    if (!(factor > 0.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata ", p, "rope.scaling.factor must be positive"));
    }
    c.rope_freq_scale = 1.0f / factor;
  }
  ASSIGN_OR_RETURN(c.rms_eps, file.GetFloatOr(p + "attention.layer_norm_rms_epsilon", 1e-5f));
  if (!(c.rms_eps > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata ", p, "attention.layer_norm_rms_epsilon must be positive"));
  }
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::InvalidArgumentError("tensor token_embd.weight is missing");
  }
  if (embd->ne.size() != 2) {
    return absl::InvalidArgumentError("tensor token_embd.weight must be 2-D");
  }
  c.n_vocab = static_cast<int32_t>(embd->ne[1]);
  return c;
}

}  // namespace tandem::engine
