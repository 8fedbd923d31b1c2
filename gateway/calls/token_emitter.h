// Turns the sampled tokens of one request (ids and logprobs from the prefill
// and decode workers) into the public tandem.v1.Token messages sent to the
// client: text, raw bytes, top-logprob texts, end-of-generation, max_tokens
// and stop strings. The gateway's Generate reactor owns one per request.
// Thread-compatible.
#ifndef TANDEM_GATEWAY_CALLS_TOKEN_EMITTER_H_
#define TANDEM_GATEWAY_CALLS_TOKEN_EMITTER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tandem/v1/generation.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

struct EmitterOptions {
  // Tokens after which generation ends with FINISH_REASON_LENGTH; <= 0 means
  // no limit (the stream then ends by EOS, a stop string or Finish()).
  int32_t max_tokens = 0;
  // When false, an end-of-generation token ends the stream (and is sent).
  bool ignore_eos = false;
  // Non-empty, valid UTF-8 strings (ValidatedRequest::stop).
  std::vector<std::string> stop;
  // Generating one of these ends the stream with FINISH_REASON_STOP (the
  // token is sent).
  std::vector<int32_t> stop_token_ids = {};
};

// The public Token for a sampled one: id, raw bytes, logprob and the
// alternatives with their texts; `text` is left empty (the emitter decides
// it). Ids outside the vocabulary render as empty bytes.
tandem::v1::Token PublicToken(const engine::Tokenizer& tokenizer,
                              const tandem::v1::SampledTokenProto& sampled);

// Semantics of what comes out:
// - Token.raw is the token's own bytes (Tokenizer::TokenBytes) and
//   Token.text the valid UTF-8 text the token completes, so a character
//   split over tokens comes out with the token that completes it and text may
//   be empty. Control tokens (EOS included) render "".
// - TopLogprob.text is the alternative's own bytes with invalid UTF-8
//   replaced by U+FFFD.
// - Stop strings are matched on the decoded text. The first stop string to
//   appear ends generation (when several appear with the same token, the one
//   that starts earliest wins); the concatenated text of everything sent is
//   then the generated text up to, not including, the match. The token in
//   which the match starts is sent with its text cut there (raw untouched);
//   tokens entirely after the match start are dropped. Text that could still
//   become a stop string is held back, with its tokens, until it cannot
//   (without stop strings nothing is held back).
// - At the end the UTF-8 decoder is flushed into the last token's text (an
//   incomplete trailing character becomes U+FFFD).
// Ids outside the vocabulary (a worker bug) render as empty bytes rather
// than crash the gateway.
class TokenEmitter {
 public:
  // `tokenizer` must outlive the emitter.
  TokenEmitter(const engine::Tokenizer& tokenizer, EmitterOptions options);

  TokenEmitter(const TokenEmitter&) = delete;
  TokenEmitter& operator=(const TokenEmitter&) = delete;

  // Feeds the next sampled token and appends to `out` the tokens that are now
  // safe to send (zero or more). Returns true when generation is over for
  // this request (max_tokens reached, an end-of-generation token when
  // !ignore_eos, or a stop string matched): `out` then holds everything left
  // to send and finish_reason() says why. Once over, further calls append
  // nothing and return true (the rest of a worker's batch is discarded).
  bool Push(const tandem::v1::SampledTokenProto& token, std::vector<tandem::v1::Token>* out);

  // The stream ended for another reason (the decode worker finished with
  // LENGTH at max_context): flushes everything held back into `out`. The
  // finish reason becomes `reason`, or FINISH_REASON_STOP if the flushed
  // text completes a stop string. A no-op once finished.
  void Finish(tandem::v1::FinishReason reason, std::vector<tandem::v1::Token>* out);

  bool finished() const { return finish_reason_ != tandem::v1::FINISH_REASON_UNSPECIFIED; }
  // FINISH_REASON_UNSPECIFIED until finished.
  tandem::v1::FinishReason finish_reason() const { return finish_reason_; }
  // Tokens appended to `out` so far; once finished, the request's completion
  // tokens (after stop truncation, counting the token the stop cut).
  int32_t completion_tokens() const { return completion_tokens_; }

 private:
  // A token held back, and where its text lies in held_text_.
  struct Held {
    tandem::v1::Token token;
    size_t text_begin = 0;
    // The UTF-8 decoder held none of this token's bytes once it was pushed,
    // so all of its bytes lie in its text (and not in a later token's).
    bool clean_end = true;
  };

  tandem::v1::Token MakeToken(const tandem::v1::SampledTokenProto& sampled);
  // Appends `text` to the last held token and to held_text_.
  void AppendText(const std::string& text);
  // Ends the stream: flushes the decoder, applies a stop string that the
  // flushed text completes, and releases all held tokens.
  void End(tandem::v1::FinishReason reason, std::vector<tandem::v1::Token>* out);
  // Byte offset in held_text_ of the earliest complete stop string, or npos.
  size_t FindStop() const;
  // Byte offset in held_text_ of the earliest suffix that is a proper prefix
  // of a stop string, or held_text_.size() if there is none.
  size_t FindPartialStop() const;
  // Keeps the held tokens before `match` (cutting the one it starts in),
  // drops the rest, and releases them all.
  void CutAtStop(size_t match, std::vector<tandem::v1::Token>* out);
  // Releases the leading held tokens whose bytes all lie before `limit`.
  void ReleaseBefore(size_t limit, std::vector<tandem::v1::Token>* out);
  void ReleaseAll(std::vector<tandem::v1::Token>* out);
  bool DecoderHasPending() const;

  const engine::Tokenizer& tokenizer_;
  const EmitterOptions options_;
  // Longest stop string in bytes (0 without stop strings).
  size_t max_stop_bytes_ = 0;
  engine::Utf8StreamDecoder decoder_;
  // Tokens not sent yet, in order; held_text_ is their texts concatenated.
  // Invariant between calls: held_text_ holds no complete stop string, and
  // every token already sent lies wholly before any text that could still
  // become one.
  std::vector<Held> held_;
  std::string held_text_;
  int32_t pushed_tokens_ = 0;
  int32_t completion_tokens_ = 0;
  tandem::v1::FinishReason finish_reason_ = tandem::v1::FINISH_REASON_UNSPECIFIED;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_CALLS_TOKEN_EMITTER_H_
