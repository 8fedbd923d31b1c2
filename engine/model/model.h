// A loaded model: the mapped GGUF file, its hyperparameters, views of its
// weights and its tokenizer. Built once by Model::Load, then immutable and
// shared read-only by every engine thread (thread-safe). Weight matrices point
// into the mapping; 1-D tensors (norms, biases) are copied to f32.
#ifndef TANDEM_ENGINE_MODEL_MODEL_H_
#define TANDEM_ENGINE_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/model_config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }
  // Identifies the model for KV compatibility checks and block hashes
  // (ModelFingerprint: hyperparameters and tensor layout, no weight bytes).
  uint64_t fingerprint() const { return fingerprint_; }
  // Weight type of the bulk of the model (that of blk.0.attn_q.weight).
  GgmlType weight_type() const { return weights_.layers[0].wq.type; }

 private:
  Model() = default;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  uint64_t fingerprint_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_MODEL_H_
