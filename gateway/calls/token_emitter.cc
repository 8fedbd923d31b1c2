#include "gateway/calls/token_emitter.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <utility>

#include "common/check.h"
#include "common/json.h"

namespace tandem::gateway {

using tandem::v1::FinishReason;

TokenEmitter::TokenEmitter(const engine::Tokenizer& tokenizer, EmitterOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  for (const std::string& s : options_.stop) {
    TANDEM_CHECK(!s.empty(), "stop strings are validated non-empty");
    max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
  }
}

bool TokenEmitter::Push(const tandem::v1::SampledTokenProto& sampled,
                        std::vector<tandem::v1::Token>* out) {
  if (finished()) return true;
  Held held;
  held.token = MakeToken(sampled);
  held.text_begin = held_text_.size();
  held_.push_back(std::move(held));
  ++pushed_tokens_;
  AppendText(decoder_.Push(held_.back().token.raw()));
  held_.back().clean_end = !DecoderHasPending();

  const int32_t id = sampled.id();
  if (!options_.ignore_eos && tokenizer_.IsValidId(id) && tokenizer_.IsEog(id)) {
    End(tandem::v1::FINISH_REASON_EOS, out);
    return true;
  }
  if (std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(), id) !=
      options_.stop_token_ids.end()) {
    End(tandem::v1::FINISH_REASON_STOP, out);
    return true;
  }
  if (options_.max_tokens > 0 && pushed_tokens_ >= options_.max_tokens) {
    End(tandem::v1::FINISH_REASON_LENGTH, out);
    return true;
  }
  if (const size_t match = FindStop(); match != std::string::npos) {
    CutAtStop(match, out);
    finish_reason_ = tandem::v1::FINISH_REASON_STOP;
    return true;
  }
  if (options_.stop.empty()) {
    // Nothing can be cut later, so even a token whose character is still
    // incomplete goes out now (with empty text).
    ReleaseAll(out);
  } else {
    ReleaseBefore(FindPartialStop(), out);
  }
  return false;
}

void TokenEmitter::Finish(FinishReason reason, std::vector<tandem::v1::Token>* out) {
  if (finished()) return;
  // A stream that ended without saying why is, as far as the client can
  // tell, a stream cut at the sequence's limit.
  End(reason == tandem::v1::FINISH_REASON_UNSPECIFIED ? tandem::v1::FINISH_REASON_LENGTH : reason,
      out);
}

tandem::v1::Token TokenEmitter::MakeToken(const tandem::v1::SampledTokenProto& sampled) {
  return PublicToken(tokenizer_, sampled);
}

tandem::v1::Token PublicToken(const engine::Tokenizer& tokenizer_,
                              const tandem::v1::SampledTokenProto& sampled) {
  tandem::v1::Token token;
  token.set_id(sampled.id());
  token.set_logprob(sampled.logprob());
  if (tokenizer_.IsValidId(sampled.id())) token.set_raw(tokenizer_.TokenBytes(sampled.id()));
  for (const tandem::v1::TopLogprobId& top : sampled.top_logprobs()) {
    tandem::v1::TopLogprob* alt = token.add_top_logprobs();
    alt->set_id(top.id());
    alt->set_logprob(top.logprob());
    if (tokenizer_.IsValidId(top.id())) alt->set_text(SanitizeUtf8(tokenizer_.TokenBytes(top.id())));
  }
  return token;
}

void TokenEmitter::AppendText(const std::string& text) {
  if (text.empty()) return;
  // Text only comes out of the decoder for bytes some held token gave it: a
  // token whose bytes the decoder still holds is never released.
  TANDEM_CHECK(!held_.empty(), "decoded text without a held token");
  held_.back().token.mutable_text()->append(text);
  held_text_ += text;
}

void TokenEmitter::End(FinishReason reason, std::vector<tandem::v1::Token>* out) {
  AppendText(decoder_.Flush());
  // The flushed text (or the last token's) may complete a stop string; the
  // cut text then wins over EOS or LENGTH, since the client never sees the
  // stop string.
  if (const size_t match = FindStop(); match != std::string::npos) {
    CutAtStop(match, out);
    finish_reason_ = tandem::v1::FINISH_REASON_STOP;
    return;
  }
  ReleaseAll(out);
  finish_reason_ = reason;
}

size_t TokenEmitter::FindStop() const {
  size_t earliest = std::string::npos;
  for (const std::string& s : options_.stop) {
    earliest = std::min(earliest, held_text_.find(s));
  }
  return earliest;
}

size_t TokenEmitter::FindPartialStop() const {
  const size_t size = held_text_.size();
  if (max_stop_bytes_ == 0) return size;
  // Only a suffix shorter than the longest stop string can be a proper
  // prefix of one; FindStop has ruled out complete matches.
  const size_t first = size >= max_stop_bytes_ ? size - max_stop_bytes_ + 1 : 0;
  const std::string_view text(held_text_);
  for (size_t p = first; p < size; ++p) {
    const std::string_view suffix = text.substr(p);
    for (const std::string& s : options_.stop) {
      if (s.size() > suffix.size() && std::string_view(s).starts_with(suffix)) return p;
    }
  }
  return size;
}

void TokenEmitter::CutAtStop(size_t match, std::vector<tandem::v1::Token>* out) {
  // Text offsets never decrease along held_, so the kept tokens are a prefix.
  size_t keep = 0;
  while (keep < held_.size() && held_[keep].text_begin < match) {
    Held& held = held_[keep];
    if (held.text_begin + held.token.text().size() > match) {
      held.token.mutable_text()->resize(match - held.text_begin);
    }
    ++keep;
  }
  held_.resize(keep);
  held_text_.resize(std::min(held_text_.size(), match));
  ReleaseAll(out);
}

void TokenEmitter::ReleaseBefore(size_t limit, std::vector<tandem::v1::Token>* out) {
  size_t n = 0;
  while (n < held_.size()) {
    const Held& held = held_[n];
    const size_t end = held.text_begin + held.token.text().size();
    // A token whose last bytes still sit in the decoder has text at or after
    // `end` to come, which may belong to a stop string; one whose text ended
    // before `limit` has had those bytes decoded before `limit` already.
    if (!(end < limit || (end == limit && held.clean_end))) break;
    ++n;
  }
  if (n == 0) return;
  const size_t released_text =
      n < held_.size() ? held_[n].text_begin : held_text_.size();
  for (size_t i = 0; i < n; ++i) out->push_back(std::move(held_[i].token));
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
  held_text_.erase(0, released_text);
  for (Held& held : held_) held.text_begin -= released_text;
  completion_tokens_ += static_cast<int32_t>(n);
}

void TokenEmitter::ReleaseAll(std::vector<tandem::v1::Token>* out) {
  for (Held& held : held_) out->push_back(std::move(held.token));
  completion_tokens_ += static_cast<int32_t>(held_.size());
  held_.clear();
  held_text_.clear();
}

bool TokenEmitter::DecoderHasPending() const {
  // The decoder keeps at most one incomplete character (<= 3 bytes), so a
  // copy is cheap; flushing it yields U+FFFD exactly when bytes are pending.
  engine::Utf8StreamDecoder probe = decoder_;
  return !probe.Flush().empty();
}

}  // namespace tandem::gateway
