// TokenEmitter on the real stories260K SPM vocabulary (<unk>=0, <s>=1,
// </s>=2, <0xNN> byte tokens at 3..258, pieces such as " Once"=403) and on a
// synthetic vocabulary: text and raw bytes, split UTF-8, EOS, max_tokens,
// stop strings and their holdback.
#include "gateway/calls/token_emitter.h"

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/model/synthetic_model.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace tandem::gateway {
namespace {

using ::tandem::v1::FinishReason;
using ::tandem::v1::SampledTokenProto;
using ::tandem::v1::Token;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int32_t kEos = 2;
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

int32_t ByteToken(uint8_t byte) { return 3 + byte; }

std::vector<int32_t> ByteTokens(std::string_view bytes) {
  std::vector<int32_t> ids;
  for (char c : bytes) ids.push_back(ByteToken(static_cast<uint8_t>(c)));
  return ids;
}

SampledTokenProto Sampled(int32_t id, float logprob = -0.25f) {
  SampledTokenProto token;
  token.set_id(id);
  token.set_logprob(logprob);
  return token;
}

// Spelled out: GCC's -Wmissing-field-initializers flags designated
// initializers that leave `stop` out.
EmitterOptions Options(int32_t max_tokens, bool ignore_eos = false,
                       std::vector<std::string> stop = {}) {
  return {.max_tokens = max_tokens, .ignore_eos = ignore_eos, .stop = std::move(stop)};
}

std::string Text(const std::vector<Token>& tokens) {
  std::string text;
  for (const Token& t : tokens) text += t.text();
  return text;
}

std::vector<std::string> Texts(const std::vector<Token>& tokens) {
  std::vector<std::string> texts;
  for (const Token& t : tokens) texts.push_back(t.text());
  return texts;
}

std::vector<int32_t> Ids(const std::vector<Token>& tokens) {
  std::vector<int32_t> ids;
  for (const Token& t : tokens) ids.push_back(t.id());
  return ids;
}

class TokenEmitterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = engine::LoadTokenizer(tandem::test_paths::StoriesPath());
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }

  // Everything the emitter sent for `ids`, fed one at a time until it
  // reports the end (or, when it never does, after Finish(LENGTH)).
  struct Run {
    std::vector<Token> tokens;
    // Tokens sent by each Push, in order.
    std::vector<std::vector<Token>> per_push;
    bool ended_by_push = false;
    FinishReason reason = tandem::v1::FINISH_REASON_UNSPECIFIED;
    int32_t completion_tokens = 0;
  };

  static Run Feed(EmitterOptions options, const std::vector<int32_t>& ids) {
    TokenEmitter emitter(*tok_, std::move(options));
    Run run;
    for (int32_t id : ids) {
      std::vector<Token> out;
      const bool done = emitter.Push(Sampled(id), &out);
      run.tokens.insert(run.tokens.end(), out.begin(), out.end());
      run.per_push.push_back(std::move(out));
      if (done) {
        run.ended_by_push = true;
        break;
      }
    }
    if (!run.ended_by_push) emitter.Finish(tandem::v1::FINISH_REASON_LENGTH, &run.tokens);
    run.reason = emitter.finish_reason();
    run.completion_tokens = emitter.completion_tokens();
    return run;
  }

  static EmitterOptions Stops(std::vector<std::string> stop) {
    return Options(0, false, std::move(stop));
  }

  static engine::Tokenizer* tok_;
};
engine::Tokenizer* TokenEmitterTest::tok_ = nullptr;

TEST_F(TokenEmitterTest, PiecesComeOutOnePerPushWithTextRawAndLogprob) {
  const std::vector<int32_t> ids = tok_->Encode("Once upon a time", {.add_special = false});
  ASSERT_THAT(ids, ElementsAre(403, 407, 261, 378));
  TokenEmitter emitter(*tok_, Options(10));
  for (int32_t id : ids) {
    std::vector<Token> out;
    EXPECT_FALSE(emitter.Push(Sampled(id, -1.5f), &out));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].id(), id);
    EXPECT_EQ(out[0].text(), tok_->TokenBytes(id));
    EXPECT_EQ(out[0].raw(), tok_->TokenBytes(id));
    EXPECT_FLOAT_EQ(out[0].logprob(), -1.5f);
    EXPECT_THAT(out[0].top_logprobs(), IsEmpty());
  }
  EXPECT_FALSE(emitter.finished());
  EXPECT_EQ(emitter.completion_tokens(), 4);
}

TEST_F(TokenEmitterTest, CharacterSplitOverByteTokensComesWithTheCompletingToken) {
  // "é" = C3 A9; without stop strings nothing is held back.
  TokenEmitter emitter(*tok_, Options(10));
  std::vector<Token> out;
  EXPECT_FALSE(emitter.Push(Sampled(ByteToken(0xC3)), &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text(), "");
  EXPECT_EQ(out[0].raw(), "\xC3");
  out.clear();
  EXPECT_FALSE(emitter.Push(Sampled(ByteToken(0xA9)), &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text(), "\xC3\xA9");
  EXPECT_EQ(out[0].raw(), "\xA9");
}

TEST_F(TokenEmitterTest, FourByteCharacterOverFourTokens) {
  const Run run = Feed(Options(4), ByteTokens("\xF0\x9F\x99\x82"));  // U+1F642
  EXPECT_THAT(Texts(run.tokens), ElementsAre("", "", "", "\xF0\x9F\x99\x82"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_LENGTH);
}

TEST_F(TokenEmitterTest, TopLogprobTextsAreSanitizedTokenBytes) {
  SampledTokenProto sampled = Sampled(485, -0.1f);  // "é" as one piece
  auto* top = sampled.add_top_logprobs();
  top->set_id(485);
  top->set_logprob(-0.1f);
  top = sampled.add_top_logprobs();
  top->set_id(ByteToken(0xC3));  // half a character on its own
  top->set_logprob(-2.5f);
  top = sampled.add_top_logprobs();
  top->set_id(kEos);
  top->set_logprob(-3.0f);
  TokenEmitter emitter(*tok_, Options(10));
  std::vector<Token> out;
  emitter.Push(sampled, &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].top_logprobs_size(), 3);
  EXPECT_EQ(out[0].top_logprobs(0).id(), 485);
  EXPECT_EQ(out[0].top_logprobs(0).text(), "\xC3\xA9");
  EXPECT_EQ(out[0].top_logprobs(1).text(), kReplacement);
  EXPECT_FLOAT_EQ(out[0].top_logprobs(1).logprob(), -2.5f);
  EXPECT_EQ(out[0].top_logprobs(2).text(), "");
}

TEST_F(TokenEmitterTest, EosEndsTheStreamAndIsIncluded) {
  const Run run = Feed(Options(10), {403, 407, kEos, 261});
  ASSERT_TRUE(run.ended_by_push);
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_EOS);
  EXPECT_THAT(Ids(run.tokens), ElementsAre(403, 407, kEos));
  EXPECT_EQ(run.tokens.back().text(), "");
  EXPECT_EQ(run.tokens.back().raw(), "");
  EXPECT_EQ(run.completion_tokens, 3);
  EXPECT_EQ(Text(run.tokens), " Once upon");
}

TEST_F(TokenEmitterTest, EosFlushesAnIncompleteCharacterIntoItsText) {
  const Run run = Feed(Options(10), {ByteToken(0xC3), kEos});
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_EOS);
  EXPECT_THAT(Texts(run.tokens), ElementsAre("", kReplacement));
}

TEST_F(TokenEmitterTest, IgnoredEosIsAnOrdinaryToken) {
  const Run run = Feed(Options(3, /*ignore_eos=*/true), {403, kEos, 407, 261});
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_THAT(Ids(run.tokens), ElementsAre(403, kEos, 407));
  EXPECT_EQ(Text(run.tokens), " Once upon");
}

TEST_F(TokenEmitterTest, MaxTokensEndsWithLength) {
  const Run run = Feed(Options(2), {403, 407, 261});
  ASSERT_TRUE(run.ended_by_push);
  EXPECT_EQ(run.per_push.size(), 2u);
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(run.completion_tokens, 2);
  EXPECT_EQ(Text(run.tokens), " Once upon");
}

TEST_F(TokenEmitterTest, MaxTokensFlushesAnIncompleteCharacter) {
  const Run run = Feed(Options(2), ByteTokens("a\xC3"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_THAT(Texts(run.tokens), ElementsAre("a", kReplacement));
  EXPECT_EQ(run.tokens.back().raw(), "\xC3");
}

TEST_F(TokenEmitterTest, StopInsideOneTokenCutsThatToken) {
  const Run run = Feed(Stops({"nce"}), {403, 407});  // " Once"
  ASSERT_TRUE(run.ended_by_push);
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  ASSERT_EQ(run.tokens.size(), 1u);
  EXPECT_EQ(run.tokens[0].text(), " O");
  EXPECT_EQ(run.tokens[0].raw(), " Once");  // raw is the token's own bytes
  EXPECT_EQ(run.completion_tokens, 1);
}

TEST_F(TokenEmitterTest, StopSpanningTokensDropsTokensAfterTheMatchStart) {
  // " Once| upon| a| time": "pon a" starts inside " upon".
  const Run run = Feed(Stops({"pon a"}), {403, 407, 261, 378});
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_EQ(run.per_push.size(), 3u);  // ended by " a"
  EXPECT_THAT(Texts(run.tokens), ElementsAre(" Once", " u"));
  EXPECT_EQ(run.completion_tokens, 2);
}

TEST_F(TokenEmitterTest, StopAtTheVeryStartSendsNothing) {
  const Run run = Feed(Stops({"ab"}), ByteTokens("abc"));
  ASSERT_TRUE(run.ended_by_push);
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_THAT(run.tokens, IsEmpty());
  EXPECT_EQ(run.completion_tokens, 0);
}

TEST_F(TokenEmitterTest, PossibleStopPrefixIsHeldBackThenReleased) {
  const Run run = Feed(Stops({"lo w"}), ByteTokens("hello there"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_LENGTH);  // from Finish
  EXPECT_EQ(Text(run.tokens), "hello there");
  EXPECT_EQ(run.completion_tokens, 11);
  // h, e sent at once; "l" held until the second "l" shows it cannot start
  // the match; "lo " held until "t".
  std::vector<std::string> sent;
  for (const auto& out : run.per_push) sent.push_back(Text(out));
  EXPECT_THAT(sent, ElementsAre("h", "e", "", "l", "", "", "lo t", "h", "e", "r", "e"));
}

TEST_F(TokenEmitterTest, StopAfterHeldPrefix) {
  const Run run = Feed(Stops({"lo w"}), ByteTokens("hello world"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_EQ(Text(run.tokens), "hel");
  EXPECT_EQ(run.completion_tokens, 3);
}

TEST_F(TokenEmitterTest, OverlappingCandidates) {
  // "aab" in "aaab": the candidate at 0 fails, the one at 1 matches.
  Run run = Feed(Stops({"aab"}), ByteTokens("aaab"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_EQ(Text(run.tokens), "a");
  // "abab" in "ababab": matches at 0 as soon as it appears.
  run = Feed(Stops({"abab"}), ByteTokens("xababab"));
  EXPECT_EQ(Text(run.tokens), "x");
  EXPECT_EQ(run.per_push.size(), 5u);
}

TEST_F(TokenEmitterTest, FirstStopToAppearEndsGeneration) {
  // "lo" appears (and ends generation) before "world" could.
  Run run = Feed(Stops({"world", "lo"}), ByteTokens("hello world"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_EQ(Text(run.tokens), "hel");
  // "abcd" never appears: "bc" ends generation first.
  run = Feed(Stops({"abcd", "bc"}), ByteTokens("abcd"));
  EXPECT_EQ(Text(run.tokens), "a");
}

TEST_F(TokenEmitterTest, StopsCompletedByTheSameTokenEarliestStartWins) {
  Run run = Feed(Stops({"cd", "bcd"}), ByteTokens("abcd"));
  EXPECT_EQ(Text(run.tokens), "a");
  // Both inside " Once" (one token): "nce" starts before "ce".
  run = Feed(Stops({"ce", "nce"}), {403, 407});
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_THAT(Texts(run.tokens), ElementsAre(" O"));
}

TEST_F(TokenEmitterTest, StopMadeOfASplitCharacter) {
  // "x", C3, A9: the match starts at the text of A9, and C3 (whose byte
  // belongs to the match) is held and dropped too.
  Run run = Feed(Stops({"\xC3\xA9"}), ByteTokens("x\xC3\xA9y"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_THAT(Ids(run.tokens), ElementsAre(ByteToken('x')));
  EXPECT_EQ(run.per_push[0].size(), 1u);  // "x" was not held
  EXPECT_EQ(run.completion_tokens, 1);
  // The same character as one piece.
  run = Feed(Stops({"\xC3\xA9"}), {ByteToken('x'), 485});
  EXPECT_THAT(Texts(run.tokens), ElementsAre("x"));
  // A different character with the same lead byte is released.
  run = Feed(Stops({"\xC3\xA9"}), ByteTokens("\xC3\xB1z"));  // "ñz"
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(Text(run.tokens), "\xC3\xB1z");
  EXPECT_EQ(run.per_push[1].size(), 2u);
}

TEST_F(TokenEmitterTest, FinishFlushesHeldTokens) {
  TokenEmitter emitter(*tok_, Stops({"abc"}));
  std::vector<Token> out;
  EXPECT_FALSE(emitter.Push(Sampled(ByteToken('a')), &out));
  EXPECT_FALSE(emitter.Push(Sampled(ByteToken('b')), &out));
  // "ab" may still become "abc" as far as the emitter knows: it does not
  // guess what the pending byte will turn into.
  EXPECT_FALSE(emitter.Push(Sampled(ByteToken(0xC3)), &out));
  EXPECT_THAT(out, IsEmpty());
  emitter.Finish(tandem::v1::FINISH_REASON_LENGTH, &out);
  EXPECT_THAT(Texts(out), ElementsAre("a", "b", kReplacement));
  EXPECT_EQ(emitter.finish_reason(), tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(emitter.completion_tokens(), 3);
  out.clear();
  EXPECT_TRUE(emitter.Push(Sampled(ByteToken('z')), &out));  // ignored once over
  emitter.Finish(tandem::v1::FINISH_REASON_EOS, &out);
  EXPECT_THAT(out, IsEmpty());
  EXPECT_EQ(emitter.finish_reason(), tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(emitter.completion_tokens(), 3);
}

TEST_F(TokenEmitterTest, FinishWithHeldPrefixOnly) {
  TokenEmitter emitter(*tok_, Stops({"abc"}));
  std::vector<Token> out;
  EXPECT_FALSE(emitter.Push(Sampled(ByteToken('a')), &out));
  EXPECT_FALSE(emitter.Push(Sampled(ByteToken('b')), &out));
  EXPECT_THAT(out, IsEmpty());
  emitter.Finish(tandem::v1::FINISH_REASON_LENGTH, &out);
  EXPECT_EQ(Text(out), "ab");
  EXPECT_EQ(emitter.completion_tokens(), 2);
}

TEST_F(TokenEmitterTest, StopBeatsEosAndLengthOnTheSameToken) {
  Run run = Feed(Options(2, false, {"ab"}), ByteTokens("ab"));
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_THAT(run.tokens, IsEmpty());
  // The U+FFFD flushed at EOS completes "a\uFFFD".
  run = Feed(Stops({std::string("a") + kReplacement}), {ByteToken('a'), ByteToken(0xC3), kEos});
  EXPECT_EQ(run.reason, tandem::v1::FINISH_REASON_STOP);
  EXPECT_THAT(run.tokens, IsEmpty());
}

TEST_F(TokenEmitterTest, OutOfVocabularyIdsRenderEmpty) {
  SampledTokenProto sampled = Sampled(100000);
  sampled.add_top_logprobs()->set_id(-1);
  TokenEmitter emitter(*tok_, Options(10));
  std::vector<Token> out;
  EXPECT_FALSE(emitter.Push(sampled, &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].raw(), "");
  EXPECT_EQ(out[0].top_logprobs(0).text(), "");
}

// Property: for any text and stop strings, the sent text is the generated
// text up to the first stop match, whatever the token boundaries.
TEST_F(TokenEmitterTest, SentTextIsGeneratedTextUpToTheFirstStop) {
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "Tom and Lily played in the park. They were very happy!",
      "Caf\xC3\xA9 cr\xC3\xA8me \xF0\x9F\x99\x82 na\xC3\xAFve \xE2\x80\x94 the end.",
      "aaaaabaaaabaaab abab ababab"};
  std::mt19937 rng(7);
  for (const std::string& text : texts) {
    const std::vector<int32_t> pieces = tok_->Encode(text, {.add_special = false});
    const std::vector<int32_t> bytes = ByteTokens(text);
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<std::string> stop;
      const int n_stop = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n_stop; ++i) {
        // A substring starting and ending on character boundaries, or one
        // that does not occur.
        size_t begin = rng() % text.size();
        while (begin > 0 && (text[begin] & 0xC0) == 0x80) --begin;
        size_t end = std::min(text.size(), begin + 1 + rng() % 8);
        while (end < text.size() && (text[end] & 0xC0) == 0x80) ++end;
        stop.push_back(rng() % 5 == 0 ? "zq" : text.substr(begin, end - begin));
      }
      for (const std::vector<int32_t>* ids : {&pieces, &bytes}) {
        // Reference: the first prefix of tokens whose bytes contain a stop,
        // cut at the earliest match in it.
        std::string generated;
        std::string expected;
        bool stopped = false;
        for (int32_t id : *ids) {
          generated += tok_->TokenBytes(id);
          size_t match = std::string::npos;
          for (const std::string& s : stop) match = std::min(match, generated.find(s));
          if (match != std::string::npos) {
            expected = generated.substr(0, match);
            stopped = true;
            break;
          }
        }
        if (!stopped) expected = generated;
        const Run run = Feed(Stops(stop), *ids);
        const std::string context = ::testing::PrintToString(stop) + " in " + text;
        EXPECT_EQ(Text(run.tokens), expected) << context;
        EXPECT_EQ(run.reason, stopped ? tandem::v1::FINISH_REASON_STOP
                                      : tandem::v1::FINISH_REASON_LENGTH)
            << context;
        EXPECT_EQ(run.completion_tokens, static_cast<int32_t>(run.tokens.size()));
        // The raw bytes sent cover the text sent.
        std::string raw;
        for (const Token& t : run.tokens) raw += t.raw();
        EXPECT_TRUE(std::string_view(raw).starts_with(expected)) << context;
      }
    }
  }
}

// A synthetic SentencePiece vocabulary (engine/model/synthetic_model.h) round-trips
// and ends on its EOS.
TEST(TokenEmitterSyntheticTest, RoundTripAndEos) {
  const std::string path = ::testing::TempDir() + "/token_emitter_synthetic.gguf";
  engine::SyntheticModelOptions options;
  options.n_embd = 64;
  options.n_layer = 1;
  options.n_head = 4;
  options.n_head_kv = 2;
  options.n_ff = 128;
  ASSERT_TRUE(engine::WriteSyntheticModel(options, path).ok());
  auto tok = engine::LoadTokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "the quick brown fox \xC3\xA9t\xC3\xA9";
  std::vector<int32_t> ids = (*tok)->Encode(text, {.add_special = false});
  ids.push_back((*tok)->eos_id());
  TokenEmitter emitter(**tok, Options(1000, false, {"fox"}));
  std::vector<Token> out;
  bool done = false;
  for (int32_t id : ids) {
    if ((done = emitter.Push(Sampled(id), &out))) break;
  }
  ASSERT_TRUE(done);
  EXPECT_EQ(emitter.finish_reason(), tandem::v1::FINISH_REASON_STOP);
  std::string expected = (*tok)->Decode(ids);
  expected = expected.substr(0, expected.find("fox"));
  std::string sent = Text(out);
  // Decode drops the SPM leading space; the stream keeps it.
  if (!expected.starts_with(" ") && sent.starts_with(" ")) sent.erase(0, 1);
  EXPECT_EQ(sent, expected);

  TokenEmitter no_stop(**tok, Options(1000));
  out.clear();
  done = false;
  for (int32_t id : ids) {
    if ((done = no_stop.Push(Sampled(id), &out))) break;
  }
  ASSERT_TRUE(done);
  EXPECT_EQ(no_stop.finish_reason(), tandem::v1::FINISH_REASON_EOS);
  EXPECT_EQ(out.back().id(), (*tok)->eos_id());
  EXPECT_EQ(no_stop.completion_tokens(), static_cast<int32_t>(ids.size()));
}

}  // namespace
}  // namespace tandem::gateway
