// The tokenizer of the model $TANDEM_FUZZ_MODEL names (scripts/fuzz.sh sets
// it), loaded once per fuzz process; aborts without one.
#ifndef TANDEM_TESTS_FUZZ_FUZZ_MODEL_H_
#define TANDEM_TESTS_FUZZ_FUZZ_MODEL_H_

#include <cstdlib>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

namespace tandem::fuzz {

inline const engine::Tokenizer& FuzzTokenizer() {
  static const engine::Tokenizer* const tok = [] {
    const char* path = std::getenv("TANDEM_FUZZ_MODEL");
    if (path == nullptr) std::abort();
    auto file = engine::GgufFile::Open(path, {.require_tensor_data = false});
    if (!file.ok()) std::abort();
    auto t = engine::Tokenizer::FromGguf(**file);
    if (!t.ok()) std::abort();
    return t->release();
  }();
  return *tok;
}

}  // namespace tandem::fuzz

#endif  // TANDEM_TESTS_FUZZ_FUZZ_MODEL_H_
