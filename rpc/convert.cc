#include "rpc/convert.h"

namespace tandem::rpc {

engine::SamplingParams SamplingFromProto(const tandem::v1::SamplingParams& p) {
  return engine::SamplingParams{
      .temperature = p.temperature(),
      .top_p = p.top_p() == 0.0f ? 1.0f : p.top_p(),
      .top_k = p.top_k(),
      .min_p = p.min_p(),
      .seed = p.seed(),
  };
}

void SamplingToProto(const engine::SamplingParams& s, tandem::v1::SamplingParams* p) {
  p->set_temperature(s.temperature);
  p->set_top_p(s.top_p);
  p->set_top_k(s.top_k);
  p->set_min_p(s.min_p);
  p->set_seed(s.seed);
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
