#include "engine/model/model_quantizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/gguf/gguf_writer.h"

namespace tandem::engine {
namespace {

struct MixName {
  QuantMix mix;
  const char* name;
  GgmlType base;  // the type of most matrices
};

constexpr MixName kMixes[] = {
    {QuantMix::kF32, "F32", GgmlType::kF32},       {QuantMix::kF16, "F16", GgmlType::kF16},
    {QuantMix::kBF16, "BF16", GgmlType::kBF16},    {QuantMix::kQ8_0, "Q8_0", GgmlType::kQ8_0},
    {QuantMix::kQ4_0, "Q4_0", GgmlType::kQ4_0},    {QuantMix::kQ4_1, "Q4_1", GgmlType::kQ4_1},
    {QuantMix::kQ5_0, "Q5_0", GgmlType::kQ5_0},    {QuantMix::kQ5_1, "Q5_1", GgmlType::kQ5_1},
    {QuantMix::kQ2_K, "Q2_K", GgmlType::kQ2_K},    {QuantMix::kQ3_K_S, "Q3_K_S", GgmlType::kQ3_K},
    {QuantMix::kQ3_K_M, "Q3_K_M", GgmlType::kQ3_K}, {QuantMix::kQ3_K_L, "Q3_K_L", GgmlType::kQ3_K},
    {QuantMix::kQ4_K_S, "Q4_K_S", GgmlType::kQ4_K}, {QuantMix::kQ4_K_M, "Q4_K_M", GgmlType::kQ4_K},
    {QuantMix::kQ5_K_S, "Q5_K_S", GgmlType::kQ5_K}, {QuantMix::kQ5_K_M, "Q5_K_M", GgmlType::kQ5_K},
    {QuantMix::kQ6_K, "Q6_K", GgmlType::kQ6_K},
};

const MixName& Mix(QuantMix mix) {
  for (const MixName& m : kMixes) {
    if (m.mix == mix) return m;
  }
  return kMixes[0];
}

// llama-quantize's heuristic for spending more bits on some layers: the
// first and last eighth, and every third one between.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// What the mix state needs of the model.
struct ModelFacts {
  int n_attention_wv = 0;
  int n_ffn_down = 0;
  int n_gqa = 1;
  bool has_output = false;
};

struct Counters {
  int i_attention_wv = 0;
  int i_ffn_down = 0;
};

bool IsQuantizable(const GgufTensorInfo& t) {
  return absl::EndsWith(t.name, "weight") && t.ne.size() >= 2 &&
         !absl::StrContains(t.name, "_norm.weight");
}

// llama-quantize's per-tensor choice for the quantized mixes.
GgmlType ChooseType(const std::string& name, int64_t row_length, QuantMix mix, GgmlType type,
                    const ModelFacts& m, Counters& c) {
  if (name == "output.weight" || (!m.has_output && name == "token_embd.weight")) {
    if (row_length % GgmlBlockSize(type) != 0) return GgmlType::kQ8_0;
    return type != GgmlType::kQ8_0 ? GgmlType::kQ6_K : type;
  }
  if (name == "token_embd.weight") return type;
  if (absl::StrContains(name, "attn_v.weight")) {
    const int i = c.i_attention_wv++;
    switch (mix) {
      case QuantMix::kQ2_K: return m.n_gqa >= 4 ? GgmlType::kQ4_K : GgmlType::kQ3_K;
      case QuantMix::kQ3_K_M: return i < 2 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
      case QuantMix::kQ3_K_L: return GgmlType::kQ5_K;
      case QuantMix::kQ4_K_M:
      case QuantMix::kQ5_K_M:
        return UseMoreBits(i, m.n_attention_wv) ? GgmlType::kQ6_K : type;
      case QuantMix::kQ4_K_S: return i < 4 ? GgmlType::kQ5_K : type;
      default: return type;
    }
  }
  if (absl::StrContains(name, "ffn_down")) {
    const int i = c.i_ffn_down++, n = m.n_ffn_down;
    switch (mix) {
      case QuantMix::kQ2_K: return GgmlType::kQ3_K;
      case QuantMix::kQ3_K_M: return i < n / 16 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
      case QuantMix::kQ3_K_L: return GgmlType::kQ5_K;
      case QuantMix::kQ4_K_M:
      case QuantMix::kQ5_K_M:
        return UseMoreBits(i, n) ? GgmlType::kQ6_K : type;
      case QuantMix::kQ4_K_S: return i < n / 8 ? GgmlType::kQ5_K : type;
      default: return type;
    }
  }
  if (absl::StrContains(name, "attn_output.weight")) {
    switch (mix) {
      case QuantMix::kQ2_K: return GgmlType::kQ3_K;
      case QuantMix::kQ3_K_M: return GgmlType::kQ4_K;
      case QuantMix::kQ3_K_L: return GgmlType::kQ5_K;
      default: return type;
    }
  }
  if (absl::StrContains(name, "attn_qkv.weight")) {
    switch (mix) {
      case QuantMix::kQ3_K_M:
      case QuantMix::kQ3_K_L: return GgmlType::kQ4_K;
      case QuantMix::kQ4_K_M: return GgmlType::kQ5_K;
      case QuantMix::kQ5_K_M: return GgmlType::kQ6_K;
      default: return type;
    }
  }
  return type;
}

// A type whose blocks a row of `row_length` holds: llama-quantize's
// fallbacks, then F16.
GgmlType Fallback(GgmlType type, int64_t row_length) {
  if (row_length % GgmlBlockSize(type) == 0) return type;
  switch (type) {
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: type = GgmlType::kIQ4_NL; break;
    case GgmlType::kQ4_K: type = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: type = GgmlType::kQ5_1; break;
    case GgmlType::kQ6_K: type = GgmlType::kQ8_0; break;
    default: break;
  }
  return row_length % GgmlBlockSize(type) == 0 ? type : GgmlType::kF16;
}

}  // namespace

absl::StatusOr<QuantMix> QuantMixFromName(std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(absl::string_view(name.data(), name.size()));
  for (const MixName& m : kMixes) {
    if (upper == m.name) return m.mix;
  }
  return absl::InvalidArgumentError(absl::StrCat("--type: \"", std::string(name),
                                                 "\" is not one of ", QuantMixNames()));
}

std::string QuantMixNames() {
  std::string names;
  for (const MixName& m : kMixes) absl::StrAppend(&names, names.empty() ? "" : ", ", m.name);
  return names;
}

absl::StatusOr<std::vector<TensorPlan>> PlanQuantization(const GgufFile& model, QuantMix mix) {
  ModelFacts facts;
  for (const GgufTensorInfo& t : model.tensors()) {
    facts.n_attention_wv += absl::StrContains(t.name, "attn_v.weight");
    facts.n_ffn_down += absl::StrContains(t.name, "ffn_down");
    facts.has_output |= t.name == "output.weight";
  }
  if (absl::StatusOr<std::string_view> arch = model.GetString("general.architecture");
      arch.ok()) {
    const std::string a(*arch);
    ASSIGN_OR_RETURN(const int64_t n_head, model.GetIntOr(a + ".attention.head_count", 1));
    ASSIGN_OR_RETURN(const int64_t n_head_kv,
                     model.GetIntOr(a + ".attention.head_count_kv", n_head));
    if (n_head_kv > 0) facts.n_gqa = static_cast<int>(n_head / n_head_kv);
  }
  const GgmlType base = Mix(mix).base;
  Counters counters;
  std::vector<TensorPlan> plan;
  for (const GgufTensorInfo& t : model.tensors()) {
    GgmlType to = t.type;
    if (IsQuantizable(t)) {
      to = GgmlIsQuantized(base) ? ChooseType(t.name, t.ne[0], mix, base, facts, counters)
                                 : base;
      to = Fallback(to, t.ne[0]);
    }
    plan.push_back({.name = t.name, .from = t.type, .to = to});
  }
  return plan;
}

absl::StatusOr<QuantizeStats> QuantizeModel(const std::string& in, const std::string& out,
                                             QuantMix mix) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> model, GgufFile::Open(in));
  ASSIGN_OR_RETURN(const std::vector<TensorPlan> plan, PlanQuantization(*model, mix));
  GgufWriter writer(model->alignment());
  for (const std::string& key : model->Keys()) {
    ASSIGN_OR_RETURN(const GgufFile::EncodedValue v, model->GetEncoded(key));
    writer.SetEncoded(key, v.type, v.bytes);
  }
  writer.SetUint32("general.quantization_version", 2);
  writer.SetUint32("general.file_type", static_cast<uint32_t>(mix));
  QuantizeStats stats;
  std::vector<float> row;
  for (size_t i = 0; i < plan.size(); ++i) {
    const GgufTensorInfo& t = model->tensors()[i];
    const int64_t cols = t.ne[0];
    const int64_t rows = t.NumElements() / std::max<int64_t>(cols, 1);
    const int64_t in_row = GgmlRowBytes(t.type, cols);
    const int64_t out_row = GgmlRowBytes(plan[i].to, cols);
    std::vector<uint8_t> data(static_cast<size_t>(out_row * rows));
    if (plan[i].to == t.type) {
      std::copy(t.data, t.data + data.size(), data.begin());
    } else {
      row.resize(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(t.type, t.data + r * in_row, row.data(), cols);
        QuantizeRow(plan[i].to, row.data(), data.data() + r * out_row, cols);
      }
    }
    ++stats.tensors;
    stats.bytes_in += in_row * rows;
    stats.bytes_out += out_row * rows;
    writer.AddTensor(t.name, plan[i].to, t.ne, std::move(data));
  }
  RETURN_IF_ERROR(writer.WriteFile(out));
  return stats;
}

}  // namespace tandem::engine
