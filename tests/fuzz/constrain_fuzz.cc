// libFuzzer target: structured output's compilers and matcher. The first
// byte picks what the rest is (a GBNF grammar, a regex or a JSON Schema); it
// is compiled under small limits and, when it compiles, a matcher walks up
// to 64 steps over a small vocabulary, taking the allowed token the input
// selects at each step. Any input gives a result or an error status, never a
// crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/constrain/constraint.h"
#include "engine/constrain/matcher.h"

namespace constrain = tandem::engine::constrain;
using tandem::engine::OutputConstraint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* const kVocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"", "\":", "\",", "true", "null", " \"", "ab", "\xC3\xA9", "]}"}) {
      tokens.push_back(t);
    }
    tokens.push_back("");  // an end id
    const auto end = static_cast<int32_t>(tokens.size()) - 1;
    return new std::shared_ptr<const constrain::TokenVocabulary>(
        std::make_shared<constrain::TokenVocabulary>(tokens, std::vector<int32_t>{end}));
  }();
  if (size == 0) return 0;
  static constexpr OutputConstraint::Kind kKinds[] = {
      OutputConstraint::Kind::kGrammar, OutputConstraint::Kind::kRegex,
      OutputConstraint::Kind::kJsonSchema, OutputConstraint::Kind::kJsonObject};
  OutputConstraint c{kKinds[data[0] % 4],
                     std::string(reinterpret_cast<const char*>(data + 1), size - 1)};
  constrain::CompileLimits limits{.max_elements = 1 << 14, .max_text_bytes = 1 << 16,
                                  .max_depth = 16, .max_repeat = 64};
  absl::StatusOr<constrain::Grammar> grammar = constrain::CompileConstraint(c, limits);
  if (!grammar.ok()) return 0;
  auto compiled = std::make_shared<constrain::CompiledGrammar>(
      *std::move(grammar), *kVocab,
      constrain::MatcherLimits{.max_stacks = 256, .mask_cache_bytes = 1 << 16});
  constrain::Matcher m(compiled);
  std::vector<uint64_t> mask(static_cast<size_t>(compiled->mask_words()));
  for (size_t step = 0; step < 64 && !m.IsTerminated(); ++step) {
    if (!m.FillMask(mask)) break;
    // The allowed token the input's bytes point at.
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < (*kVocab)->size(); ++id) {
      if ((mask[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    const int32_t id = allowed[data[step % size] % allowed.size()];
    if (!m.AcceptToken(id)) __builtin_trap();  // the mask allowed it
    if (id == (*kVocab)->size() - 1) break;     // ended
  }
  return 0;
}
