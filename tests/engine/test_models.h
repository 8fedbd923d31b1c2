// Test fixtures: small synthetic models written once per test process, and
// the path of the shared stories260K model.
#ifndef TANDEM_TESTS_ENGINE_TEST_MODELS_H_
#define TANDEM_TESTS_ENGINE_TEST_MODELS_H_

#include <cstdlib>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "engine/sched/request.h"
#include "engine/model/synthetic_model.h"
#include "tests/test_paths.h"

namespace tandem::engine::testing {

// A model small enough for exhaustive comparisons: 2 layers, GQA 4/2.
inline SyntheticModelOptions TinyOptions() {
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 64;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 96;
  o.context_length = 512;
  o.seed = 42;
  return o;
}

inline std::unique_ptr<Model> LoadSynthetic(const SyntheticModelOptions& o) {
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/tandem_synth_", o.arch, "_", std::string(GgmlTypeName(o.type)), "_",
      o.n_vocab, "_", o.n_embd, "_", o.n_layer, "_", o.n_head, "_", o.n_head_kv, "_", o.n_ff,
      "_", o.tied_output, "_", o.seed, o.copying ? "_copying" : "", ".gguf");
  absl::Status written = WriteSyntheticModel(o, path);
  EXPECT_TRUE(written.ok()) << written;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// The tokens of one engine step (block events dropped), for tests that only
// look at tokens.
inline absl::StatusOr<std::vector<TokenEvent>> Tokens(absl::StatusOr<StepOutput> step) {
  if (!step.ok()) return step.status();
  return std::move(step->tokens);
}

inline std::string StoriesPath() { return tandem::test_paths::StoriesPath(); }

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_TEST_MODELS_H_
