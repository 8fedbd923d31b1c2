#include "engine/model/model.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/gguf/model_fingerprint.h"

namespace tandem::engine {
namespace {

std::string ShapeString(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) absl::StrAppend(&s, i ? ", " : "", ne[i]);
  return s + "]";
}

// Binds tensors by name and checks their shapes against the config.
class WeightBinder {
 public:
  explicit WeightBinder(const GgufFile& file) : file_(file) {}

  absl::StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t cols,
                                      int64_t rows) const {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Find(name, {cols, rows}));
    return WeightMatrix{.type = t->type, .data = t->data, .rows = rows, .cols = cols};
  }

  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n) const {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Find(name, {n}));
    if (t->type == GgmlType::kQ8_0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, ": 1-D tensors must be F32, F16 or BF16"));
    }
    std::vector<float> v(n);
    DequantizeRow(t->type, t->data, v.data(), n);
    return v;
  }

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }

 private:
  absl::StatusOr<const GgufTensorInfo*> Find(const std::string& name,
                                             const std::vector<int64_t>& ne) const {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is missing"));
    std::vector<int64_t> got = t->ne;
    while (got.size() > ne.size() && got.back() == 1) got.pop_back();
    if (got != ne) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape ",
                                                     ShapeString(t->ne), ", expected ",
                                                     ShapeString(ne)));
    }
    return t;
  }

  const GgufFile& file_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  std::unique_ptr<Model> m(new Model());
  ASSIGN_OR_RETURN(m->file_, GgufFile::Open(path));
  ASSIGN_OR_RETURN(m->config_, ReadModelConfig(*m->file_));
  ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromGguf(*m->file_));
  const ModelConfig& c = m->config_;
  if (m->tokenizer_->n_vocab() != c.n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.ggml.tokens has ", m->tokenizer_->n_vocab(),
        " entries but token_embd.weight has ", c.n_vocab, " rows"));
  }

  WeightBinder bind(*m->file_);
  ModelWeights& w = m->weights_;
  ASSIGN_OR_RETURN(w.token_embd, bind.Matrix("token_embd.weight", c.n_embd, c.n_vocab));
  ASSIGN_OR_RETURN(w.output_norm, bind.Vector("output_norm.weight", c.n_embd));
  if (bind.Has("output.weight")) {
    ASSIGN_OR_RETURN(w.output, bind.Matrix("output.weight", c.n_embd, c.n_vocab));
  } else {
    w.output = w.token_embd;  // tied embeddings
  }
  if (bind.Has("rope_freqs.weight")) {
    ASSIGN_OR_RETURN(w.rope_freq_factors, bind.Vector("rope_freqs.weight", c.n_rot / 2));
  }
  w.layers.resize(c.n_layer);
  for (int32_t i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string b = absl::StrCat("blk.", i, ".");
    ASSIGN_OR_RETURN(l.attn_norm, bind.Vector(b + "attn_norm.weight", c.n_embd));
    ASSIGN_OR_RETURN(l.wq, bind.Matrix(b + "attn_q.weight", c.n_embd, c.q_dim()));
    ASSIGN_OR_RETURN(l.wk, bind.Matrix(b + "attn_k.weight", c.n_embd, c.kv_dim()));
    ASSIGN_OR_RETURN(l.wv, bind.Matrix(b + "attn_v.weight", c.n_embd, c.kv_dim()));
    ASSIGN_OR_RETURN(l.wo, bind.Matrix(b + "attn_output.weight", c.q_dim(), c.n_embd));
    if (c.qkv_bias) {
      ASSIGN_OR_RETURN(l.bq, bind.Vector(b + "attn_q.bias", c.q_dim()));
      ASSIGN_OR_RETURN(l.bk, bind.Vector(b + "attn_k.bias", c.kv_dim()));
      ASSIGN_OR_RETURN(l.bv, bind.Vector(b + "attn_v.bias", c.kv_dim()));
    }
    ASSIGN_OR_RETURN(l.ffn_norm, bind.Vector(b + "ffn_norm.weight", c.n_embd));
    ASSIGN_OR_RETURN(l.w_gate, bind.Matrix(b + "ffn_gate.weight", c.n_embd, c.n_ff));
    ASSIGN_OR_RETURN(l.w_up, bind.Matrix(b + "ffn_up.weight", c.n_embd, c.n_ff));
    ASSIGN_OR_RETURN(l.w_down, bind.Matrix(b + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  m->fingerprint_ = ModelFingerprint(c, *m->file_);
  return m;
}

}  // namespace tandem::engine
