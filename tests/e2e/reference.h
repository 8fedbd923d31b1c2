// What the in-process engine (`tandem generate`) produces for a request, the
// reference the end-to-end tests hold the served output to.
#ifndef TANDEM_TESTS_E2E_REFERENCE_H_
#define TANDEM_TESTS_E2E_REFERENCE_H_

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "tests/engine/test_models.h"

namespace tandem::testing {

// Runs `request` with `prompt` tokenized as the gateway does (BOS where the
// model adds it, special-token text read as those tokens) on a fresh engine.
inline std::vector<engine::TokenEvent> EngineReference(const engine::Model& model,
                                                       const std::string& prompt,
                                                       engine::GenerationRequest request) {
  auto eng = engine::Engine::Create(model, engine::MakeCpuBackend({.threads = 2}), {});
  EXPECT_TRUE(eng.ok()) << eng.status();
  request.prompt = model.tokenizer().Encode(prompt, {.add_special = true, .parse_special = true});
  EXPECT_TRUE((*eng)->Add(request).ok());
  std::vector<engine::TokenEvent> out;
  while ((*eng)->HasWork()) {
    auto events = engine::testing::Tokens((*eng)->Step());
    EXPECT_TRUE(events.ok());
    for (auto& e : *events) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_E2E_REFERENCE_H_
