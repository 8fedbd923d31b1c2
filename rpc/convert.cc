#include "rpc/convert.h"

#include <algorithm>

namespace tandem::rpc {
namespace {

// GenerateRequest, PrefillRequest and DecodeRequest (a local prefill's)
// carry prompt_logprobs; ChatRequest does not.
template <typename Message>
concept HasPromptLogprobs = requires(const Message& m) { m.has_prompt_logprobs(); };

// The one body of every SamplingRequestFromProto overload.
template <typename Message>
engine::SamplingRequest SamplingRequestFromMessage(const Message& m) {
  engine::SamplingRequest s;
  s.sampling = SamplingFromProto(m.sampling());
  s.top_logprobs = m.top_logprobs();
  if constexpr (HasPromptLogprobs<Message>) {
    if (m.has_prompt_logprobs()) s.prompt_logprobs = m.prompt_logprobs();
  }
  return s;
}

// The one body of every SamplingRequestToProto overload.
template <typename Message>
void SamplingRequestToMessage(const engine::SamplingRequest& s, Message* m) {
  SamplingToProto(s.sampling, m->mutable_sampling());
  m->set_top_logprobs(s.top_logprobs);
  if constexpr (HasPromptLogprobs<Message>) {
    if (s.prompt_logprobs >= 0) m->set_prompt_logprobs(s.prompt_logprobs);
  }
}

}  // namespace

engine::SamplingParams SamplingFromProto(const tandem::v1::SamplingParams& p) {
  engine::SamplingParams s{
      .temperature = p.temperature(),
      .top_p = p.top_p() == 0.0f ? 1.0f : p.top_p(),
      .top_k = p.top_k(),
      .min_p = p.min_p(),
      .seed = p.seed(),
      .presence_penalty = p.presence_penalty(),
      .frequency_penalty = p.frequency_penalty(),
      .repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty(),
      .logit_bias = {},
      .min_tokens = p.min_tokens(),
      .stop_token_ids = {p.stop_token_ids().begin(), p.stop_token_ids().end()},
  };
  using Kind = engine::OutputConstraint::Kind;
  const tandem::v1::ResponseFormat& f = p.response_format();
  switch (f.format_case()) {
    case tandem::v1::ResponseFormat::kJsonSchema:
      s.constraint = {.kind = Kind::kJsonSchema, .source = f.json_schema()};
      break;
    case tandem::v1::ResponseFormat::kJsonObject:
      if (f.json_object()) s.constraint = {.kind = Kind::kJsonObject, .source = {}};
      break;
    case tandem::v1::ResponseFormat::kRegex:
      s.constraint = {.kind = Kind::kRegex, .source = f.regex()};
      break;
    case tandem::v1::ResponseFormat::kGrammar:
      s.constraint = {.kind = Kind::kGrammar, .source = f.grammar()};
      break;
    case tandem::v1::ResponseFormat::FORMAT_NOT_SET:
      break;
  }
  switch (p.speculation()) {
    case tandem::v1::SPECULATION_OFF: s.speculation = engine::Speculation::kOff; break;
    case tandem::v1::SPECULATION_PROMPT_LOOKUP:
      s.speculation = engine::Speculation::kPromptLookup;
      break;
    case tandem::v1::SPECULATION_DRAFT:
      s.speculation = engine::Speculation::kDraft;
      break;
    default: s.speculation = engine::Speculation::kDefault; break;
  }
  s.logit_bias.reserve(p.logit_bias_size());
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias.push_back({.id = id, .bias = bias});
  // A proto map has no order; the engine's list does.
  std::sort(s.logit_bias.begin(), s.logit_bias.end(),
            [](const engine::LogitBias& a, const engine::LogitBias& b) { return a.id < b.id; });
  return s;
}

void SamplingToProto(const engine::SamplingParams& s, tandem::v1::SamplingParams* p) {
  p->set_temperature(s.temperature);
  p->set_top_p(s.top_p);
  p->set_top_k(s.top_k);
  p->set_min_p(s.min_p);
  p->set_seed(s.seed);
  p->set_presence_penalty(s.presence_penalty);
  p->set_frequency_penalty(s.frequency_penalty);
  p->set_repetition_penalty(s.repetition_penalty);
  for (const engine::LogitBias& b : s.logit_bias) (*p->mutable_logit_bias())[b.id] = b.bias;
  p->set_min_tokens(s.min_tokens);
  p->mutable_stop_token_ids()->Assign(s.stop_token_ids.begin(), s.stop_token_ids.end());
  switch (s.speculation) {
    case engine::Speculation::kDefault: p->set_speculation(tandem::v1::SPECULATION_DEFAULT); break;
    case engine::Speculation::kOff: p->set_speculation(tandem::v1::SPECULATION_OFF); break;
    case engine::Speculation::kPromptLookup:
      p->set_speculation(tandem::v1::SPECULATION_PROMPT_LOOKUP);
      break;
    case engine::Speculation::kDraft:
      p->set_speculation(tandem::v1::SPECULATION_DRAFT);
      break;
  }
  using Kind = engine::OutputConstraint::Kind;
  tandem::v1::ResponseFormat* f = p->mutable_response_format();
  switch (s.constraint.kind) {
    case Kind::kNone: p->clear_response_format(); break;
    case Kind::kJsonObject: f->set_json_object(true); break;
    case Kind::kJsonSchema: f->set_json_schema(s.constraint.source); break;
    case Kind::kRegex: f->set_regex(s.constraint.source); break;
    case Kind::kGrammar: f->set_grammar(s.constraint.source); break;
  }
}

engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::GenerateRequest& r) {
  return SamplingRequestFromMessage(r);
}

engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::ChatRequest& r) {
  return SamplingRequestFromMessage(r);
}

engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::PrefillRequest& r) {
  return SamplingRequestFromMessage(r);
}

engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::DecodeRequest& r) {
  return SamplingRequestFromMessage(r);
}

void SamplingRequestToProto(const engine::SamplingRequest& s, tandem::v1::GenerateRequest* r) {
  SamplingRequestToMessage(s, r);
}

void SamplingRequestToProto(const engine::SamplingRequest& s, tandem::v1::PrefillRequest* r) {
  SamplingRequestToMessage(s, r);
}

void SamplingRequestToProto(const engine::SamplingRequest& s, tandem::v1::DecodeRequest* r) {
  SamplingRequestToMessage(s, r);
}

void ChatSamplingToGenerate(const tandem::v1::ChatRequest& chat,
                            tandem::v1::GenerateRequest* generate) {
  SamplingRequestToProto(SamplingRequestFromProto(chat), generate);
  if (!chat.sampling().has_seed()) generate->mutable_sampling()->clear_seed();
}

void SampledTokenToProto(const engine::SampledToken& t, tandem::v1::SampledTokenProto* p) {
  p->set_id(t.id);
  p->set_logprob(t.logprob);
  for (const engine::TokenLogprob& alt : t.top) {
    tandem::v1::TopLogprobId* a = p->add_top_logprobs();
    a->set_id(alt.id);
    a->set_logprob(alt.logprob);
  }
}

engine::SampledToken SampledTokenFromProto(const tandem::v1::SampledTokenProto& p) {
  engine::SampledToken t;
  t.id = p.id();
  t.logprob = p.logprob();
  t.top.reserve(p.top_logprobs_size());
  for (const tandem::v1::TopLogprobId& a : p.top_logprobs()) {
    t.top.push_back({.id = a.id(), .logprob = a.logprob()});
  }
  return t;
}

void BlockHashToProto(const engine::BlockHash& h, tandem::v1::BlockHashProto* out) {
  out->set_low(h.low);
  out->set_high(h.high);
}

engine::BlockHash BlockHashFromProto(const tandem::v1::BlockHashProto& p) {
  return engine::BlockHash{.low = p.low(), .high = p.high()};
}

}  // namespace tandem::rpc
