// Structured output in the engine: a constrained sequence's matcher, the
// mask it puts on each sampled row, and the end of the output.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/engine.h"

namespace tandem::engine {

absl::StatusOr<std::unique_ptr<constrain::Matcher>> Engine::StartMatcher(
    const GenerationRequest& request, const SampledToken* first) {
  const OutputConstraint& constraint = request.sampling.constraint;
  if (!constraint.active()) return nullptr;
  if (grammars_ == nullptr) {
    // Control tokens add no text; only the end ids among them are ever
    // allowed, where the output may end.
    auto vocab = constrain::TokenVocabulary::FromTokenizer(model_.tokenizer());
    grammars_ = std::make_unique<constrain::GrammarCache>(
        std::move(vocab), options_.constrain_compile, options_.constrain_matcher,
        options_.grammar_cache_size);
  }
  absl::StatusOr<std::shared_ptr<constrain::CompiledGrammar>> grammar =
      grammars_->Get(constraint);
  if (!grammar.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format: ", grammar.status().message()));
  }
  auto matcher = std::make_unique<constrain::Matcher>(*std::move(grammar));
  // A continued sequence re-derives its place from the tokens it brings.
  auto advance = [&](int32_t id, const std::string& field) -> absl::Status {
    if (matcher->AcceptToken(id)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": token ", id, " does not continue the response_format"));
  };
  for (size_t i = 0; i < request.generated.size(); ++i) {
    RETURN_IF_ERROR(advance(request.generated[i], absl::StrCat("generated[", i, "]")));
  }
  if (first != nullptr) RETURN_IF_ERROR(advance(first->id, "first_token"));
  return matcher;
}

void Engine::MaskRow(Sequence& seq) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constrain::Matcher& m = *seq.matcher;
  mask_.assign(static_cast<size_t>(m.grammar().mask_words()), 0);
  const bool ok = m.FillMask(mask_);
  const Tokenizer& tok = model_.tokenizer();
  bool any = false;
  if (ok) {
    if (seq.request.ignore_eos) {
      for (int32_t id : tok.eog_ids()) mask_[id >> 6] &= ~(uint64_t{1} << (id & 63));
    }
    any = std::any_of(mask_.begin(), mask_.end(), [](uint64_t w) { return w != 0; });
  }
  if (!any) {
    // Nothing can continue the output (the state outgrew its bound, or the
    // vocabulary cannot spell what the format needs): the sequence ends at
    // an end-of-generation token where the model has one.
    mask_.assign(mask_.size(), 0);
    for (int32_t id : tok.eog_ids()) mask_[id >> 6] |= uint64_t{1} << (id & 63);
  }
  const auto n = static_cast<int32_t>(row_.size());
  for (int32_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = mask_[w];
    if (bits == ~uint64_t{0}) continue;
    const int32_t end = std::min(n, (w + 1) * 64);
    for (int32_t id = w * 64; id < end; ++id) {
      if (((bits >> (id - w * 64)) & 1) == 0) row_[id] = kNegInf;
    }
  }
}

FinishReason Engine::AdvanceMatcher(Sequence& seq, int32_t id) {
  constrain::Matcher& m = *seq.matcher;
  if (!m.AcceptToken(id)) return FinishReason::kStop;
  return m.IsTerminated() ? FinishReason::kStop : FinishReason::kNone;
}

}  // namespace tandem::engine
