// Tests for engine/tokenizer/tokenizer.h and its parts (pre-tokenizer, regex matcher,
// UTF-8 helpers): the real SPM vocabulary of stories260K.gguf, synthetic
// byte-level BPE vocabularies written with GgufWriter, the pre-tokenizer
// splitters on tricky strings. reference_vectors_test.cc checks whole
// encodings against SentencePiece and GPT-2's BPE algorithm.
#include "engine/tokenizer/tokenizer.h"

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/pretokenizer_regex.h"
#include "engine/tokenizer/unicode.h"
#include "tests/test_paths.h"

namespace tandem::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// SPM: the real stories260K vocabulary (512 tokens: <unk>=0, <s>=1, </s>=2,
// <0x00>..<0xFF> at 3..258).

class Stories260KTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = LoadTokenizer(tandem::test_paths::StoriesPath());
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static std::vector<int32_t> Enc(std::string_view s, bool add_special = true) {
    return tok_->Encode(s, {.add_special = add_special});
  }
  static Tokenizer* tok_;
};
Tokenizer* Stories260KTest::tok_ = nullptr;

TEST_F(Stories260KTest, Metadata) {
  EXPECT_EQ(tok_->n_vocab(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_TRUE(tok_->add_bos());  // llama.cpp's SPM default; the key is absent
  EXPECT_FALSE(tok_->add_eos());
  EXPECT_EQ(tok_->token_type(0), TokenType::kUnknown);
  EXPECT_EQ(tok_->token_type(1), TokenType::kControl);
  EXPECT_EQ(tok_->token_type(3), TokenType::kByte);
  EXPECT_EQ(tok_->TokenText(3), "<0x00>");
  EXPECT_EQ(tok_->TokenText(258), "<0xFF>");
  EXPECT_TRUE(tok_->IsEog(2));
  EXPECT_FALSE(tok_->IsEog(1));
  EXPECT_FALSE(tok_->IsEog(403));
}

TEST_F(Stories260KTest, EncodesPromptLikeLlamaCpp) {
  // Every word of the prompt is a single vocabulary piece ("▁Once", "▁upon",
  // "▁a", "▁time"), so the bigram merges must reach them; BOS comes first.
  EXPECT_THAT(Enc("Once upon a time"), ElementsAre(1, 403, 407, 261, 378));
  EXPECT_EQ(tok_->TokenText(403), "\u2581Once");
  EXPECT_EQ(tok_->TokenText(378), "\u2581time");
  EXPECT_THAT(Enc("Once upon a time", false), ElementsAre(403, 407, 261, 378));
  EXPECT_THAT(Enc("Lily's mom said", false), ElementsAre(317, 439, 419, 357, 336));
  EXPECT_THAT(Enc(""), ElementsAre(1));
  EXPECT_THAT(Enc("", false), ElementsAre());
}

TEST_F(Stories260KTest, ByteFallbackForCharactersOutsideTheVocab) {
  // "▁" then the UTF-8 bytes as <0xNN> tokens (id = byte + 3).
  EXPECT_THAT(Enc("\U0001F999", false), ElementsAre(410, 0xF0 + 3, 0x9F + 3, 0xA6 + 3, 0x99 + 3));
  EXPECT_THAT(Enc("\u6211", false), ElementsAre(410, 0xE6 + 3, 0x88 + 3, 0x91 + 3));
  EXPECT_THAT(Enc("\n", false), ElementsAre(410, 0x0A + 3));
  EXPECT_EQ(tok_->TokenBytes(0xE6 + 3), "\xE6");
}

TEST_F(Stories260KTest, TokenBytes) {
  EXPECT_EQ(tok_->TokenBytes(1), "");  // control
  EXPECT_EQ(tok_->TokenBytes(2), "");
  EXPECT_EQ(tok_->TokenBytes(0), "");  // unknown
  EXPECT_EQ(tok_->TokenBytes(13), "\n");
  EXPECT_EQ(tok_->TokenBytes(403), " Once");
  EXPECT_EQ(tok_->TokenBytes(-1), "");
  EXPECT_EQ(tok_->TokenBytes(512), "");
}

TEST_F(Stories260KTest, DecodeRoundTrips) {
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "Hello world",
      " leading space",
      "  two leading spaces",
      "trailing spaces   ",
      "tabs\tand\nnew\nlines\n\n",
      "emoji \U0001F999\U0001F680 and CJK \u6211\u60F3\u5728",
      "mixed: na\u00EFve caf\u00E9 \u043D\u0435\u0449\u043E \u1780\u17B6\u1793\u17CB",
      "numbers 1234567890 and punctuation !?.,;:'\"()[]{}",
      "",
  };
  for (const std::string& text : texts) {
    EXPECT_EQ(tok_->Decode(Enc(text)), text) << text;
    EXPECT_EQ(tok_->Decode(Enc(text, false)), text) << text;
  }
  // As in llama.cpp, a literal U+2581 in the input is indistinguishable from
  // an escaped space and decodes as one.
  EXPECT_EQ(tok_->Decode(Enc("\u2581x y")), " x y");
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {"a", "b", " ", "  ", "\n", "\t", "\u00E9",
                                             "\u6211", "\U0001F999", "Once", "time", "."};
  for (int i = 0; i < 200; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    EXPECT_EQ(tok_->Decode(Enc(text)), text) << text;
  }
}

TEST_F(Stories260KTest, StreamDecoderReassemblesByteTokens) {
  const std::string text = "\u6211\U0001F999 ok \u00E9";
  const std::vector<int32_t> ids = Enc(text, false);
  Utf8StreamDecoder dec;
  std::string streamed;
  std::vector<std::string> chunks;
  for (int32_t id : ids) {
    chunks.push_back(dec.Push(tok_->TokenBytes(id)));
    streamed += chunks.back();
  }
  streamed += dec.Flush();
  EXPECT_EQ(streamed, " " + text);  // the SPM space prefix is in the pieces
  for (const std::string& c : chunks) {
    EXPECT_EQ(c.find("\xEF\xBF\xBD"), std::string::npos) << "partial char emitted";
  }
}

// ---------------------------------------------------------------------------
// Utf8StreamDecoder.

TEST(Utf8StreamDecoderTest, SplitsTwoThreeAndFourByteCharacters) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.Push("a\xC3"), "a");
  EXPECT_EQ(d.Push("\xA9"), "\u00E9");
  EXPECT_EQ(d.Push("\xE2"), "");
  EXPECT_EQ(d.Push("\x82"), "");
  EXPECT_EQ(d.Push("\xAC!"), "\u20AC!");
  EXPECT_EQ(d.Push("\xF0\x9F"), "");
  EXPECT_EQ(d.Push("\xA6"), "");
  EXPECT_EQ(d.Push("\x99"), "\U0001F999");
  EXPECT_EQ(d.Push("\xE2\x82"), "");
  EXPECT_EQ(d.Push("\xAC\xF0\x9F\xA6\x99x"), "\u20AC\U0001F999x");
  EXPECT_EQ(d.Flush(), "");
}

TEST(Utf8StreamDecoderTest, InvalidBytesBecomeReplacementCharacters) {
  const std::string kFffd = "\xEF\xBF\xBD";
  Utf8StreamDecoder d;
  EXPECT_EQ(d.Push("\xFF"), kFffd);
  EXPECT_EQ(d.Push("\xC3" "A"), kFffd + "A");  // lead byte without continuation
  EXPECT_EQ(d.Push("\x80"), kFffd);             // stray continuation
  EXPECT_EQ(d.Push("\xC0\xAF"), kFffd + kFffd);  // overlong
  EXPECT_EQ(d.Push("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(d.Push("\xE2\x82"), "");
  EXPECT_EQ(d.Flush(), kFffd);  // incomplete at the end
  EXPECT_EQ(d.Flush(), "");
}

// ---------------------------------------------------------------------------
// Pre-tokenizer splitters and the regex matcher.

std::vector<std::string> Words(std::string_view pre, std::string_view text) {
  auto p = PreTokenizer::Create(pre);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? (*p)->Split(text) : std::vector<std::string>{};
}

TEST(PreTokenizerTest, Llama3) {
  EXPECT_THAT(Words("llama3", "Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Words("llama-bpe", "I've 12345 apples!!\n\n  x"),
              ElementsAre("I", "'ve", " ", "123", "45", " apples", "!!\n\n", " ", " x"));
  EXPECT_THAT(Words("llama3", "WE'VE 'RE"), ElementsAre("WE", "'VE", " '", "RE"));
  EXPECT_THAT(Words("llama3", "1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(Words("llama3", "\n ="), ElementsAre("\n", " ="));
  EXPECT_THAT(Words("llama3", "a  "), ElementsAre("a", "  "));
  EXPECT_THAT(Words("llama3", "a\u00A0b"), ElementsAre("a", "\u00A0b"));
  EXPECT_THAT(Words("llama3", "na\u00EFve cafe\u0301"),
              ElementsAre("na\u00EFve", " cafe", "\u0301"));
  EXPECT_THAT(Words("llama3", "\u6211\u60F3\u5728apple\u5DE5\u4F5C1314151\u5929"),
              ElementsAre("\u6211\u60F3\u5728apple\u5DE5\u4F5C", "131", "415", "1",
                          "\u5929"));
  EXPECT_THAT(Words("llama3", "  \t\n  x"), ElementsAre("  \t\n", " ", " x"));
}

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_THAT(Words("gpt-2", "I've 12345 apples!!\n\n  x"),
              ElementsAre("I", "'ve", " 12345", " apples", "!!", "\n\n ", " x"));
  EXPECT_THAT(Words("gpt-2", "WE'VE"), ElementsAre("WE", "'", "VE"));  // case-sensitive
  EXPECT_THAT(Words("gpt-2", "a\u00A0b"), ElementsAre("a", "\u00A0", "b"));
  EXPECT_THAT(Words("gpt-2", "a  "), ElementsAre("a", "  "));
  EXPECT_THAT(Words("gpt-2", "cafe\u0301!"), ElementsAre("cafe", "\u0301!"));
}

TEST(PreTokenizerTest, Qwen2SplitsDigitsOneByOne) {
  EXPECT_THAT(Words("qwen2", "I've 12345 apples!!\n\n  x"),
              ElementsAre("I", "'ve", " ", "1", "2", "3", "4", "5", " apples", "!!\n\n", " ",
                          " x"));
  EXPECT_THAT(Words("qwen2", "Hello, y'all!"), ElementsAre("Hello", ",", " y", "'all", "!"));
}

TEST(PreTokenizerTest, OtherNamedPreTokenizers) {
  EXPECT_THAT(Words("starcoder", "x 123"), ElementsAre("x", " ", "1", "2", "3"));
  EXPECT_THAT(Words("default", "a+=12345"), ElementsAre("a", "+=", "123", "45"));
  EXPECT_THAT(Words("deepseek-coder", "ab\ncd 12"), ElementsAre("ab", "\n", "cd", " ", "1", "2"));
  EXPECT_THAT(Words("tekken", "HelloWorld"), ElementsAre("Hello", "World"));
  EXPECT_THAT(Words("gpt-4o", "HelloWorld's 12345"),
              ElementsAre("Hello", "World's", " ", "123", "45"));
}

TEST(PreTokenizerTest, UnknownAndUnsupportedNamesAreRefusedByName) {
  auto unknown = PreTokenizer::Create("no-such-pre");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("no-such-pre"));
  auto unsupported = PreTokenizer::Create("kimi-k2");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(unsupported.status().message()), HasSubstr("kimi-k2"));
}

std::vector<size_t> RegexSplit(std::string_view pattern, std::string_view text) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status();
  if (!re.ok()) return {};
  const std::vector<uint32_t> cpts = DecodeUtf8Lenient(text);
  return (*re)->Split(cpts, {cpts.size()});
}

TEST(RegexTest, BacktrackingLookaheadAndCategories) {
  EXPECT_THAT(RegexSplit("\\s+(?!\\S)|\\s+", "a   b"), ElementsAre(1, 2, 1, 1));
  // ASCII characters use llama.cpp's tables: '~' is a symbol, '!' is not.
  EXPECT_THAT(RegexSplit("\\p{S}+", "a+<~!"), ElementsAre(1, 3, 1));
  EXPECT_THAT(RegexSplit("((?=[\\p{L}])([^a-z]))+", "ABcD"), ElementsAre(2, 1, 1));
  EXPECT_THAT(RegexSplit("\\p{N}{1,3}", "12345"), ElementsAre(3, 2));
  EXPECT_THAT(RegexSplit("\\p{L}+", "\u00E9t\u00E9 \u6211"), ElementsAre(3, 1, 1));
  EXPECT_THAT(RegexSplit("\\s+$", "a  "), ElementsAre(1, 2));
  EXPECT_THAT(RegexSplit("[\u4E00-\u9FA5]+", "ab\u6211\u60F3c"), ElementsAre(2, 2, 1));
  EXPECT_THAT(RegexSplit("(IMGIMG)((A|B){1,4})Z", "xIMGIMGABBZy"), ElementsAre(1, 10, 1));
}

TEST(RegexTest, LongWordsDoNotExhaustTheStack) {
  const std::string word(200000, 'a');
  // Single-symbol repeats run iteratively...
  EXPECT_THAT(RegexSplit("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", word), ElementsAre(200000));
  // ...and nested group repeats stop at a depth limit instead of crashing.
  const std::vector<size_t> nested = RegexSplit("(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+", word);
  size_t total = 0;
  for (size_t n : nested) total += n;
  EXPECT_EQ(total, word.size());
  // exaone-moe keeps space-separated words together.
  EXPECT_THAT(Words("exaone-moe", "two words, more"), ElementsAre("two words", ",", " more"));
}

TEST(RegexTest, RejectsUnsupportedSyntax) {
  for (const char* bad : {"\\p{Han}+", "(?i:a)", "[a-", "a+?", "(a", "\\b"}) {
    EXPECT_FALSE(Regex::Compile(bad).ok()) << bad;
  }
}

// ---------------------------------------------------------------------------
// Synthetic byte-level BPE vocabularies.

struct BpeVocabSpec {
  std::string pre = "gpt-2";
  std::vector<std::string> extra_tokens;  // after the 256 byte tokens
  std::vector<int32_t> extra_types;       // default normal
  std::vector<std::string> merges;
  std::optional<bool> add_bos;
  std::optional<uint32_t> bos_id;
};

std::string Spell(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += ByteToUnicode(static_cast<uint8_t>(c));
  return out;
}

std::string WriteBpeVocab(const std::string& name, const BpeVocabSpec& spec) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(ByteToUnicode(static_cast<uint8_t>(b)));
    types.push_back(1);
  }
  for (size_t i = 0; i < spec.extra_tokens.size(); ++i) {
    tokens.push_back(spec.extra_tokens[i]);
    types.push_back(i < spec.extra_types.size() ? spec.extra_types[i] : 1);
  }
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "gpt2");
  if (!spec.pre.empty()) w.SetString("tokenizer.ggml.pre", spec.pre);
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetStringArray("tokenizer.ggml.merges", spec.merges);
  if (spec.bos_id) w.SetUint32("tokenizer.ggml.bos_token_id", *spec.bos_id);
  if (spec.add_bos) w.SetBool("tokenizer.ggml.add_bos_token", *spec.add_bos);
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& path) {
  auto t = LoadTokenizer(path);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Token ids 256.. in the order of `extra_tokens`.
BpeVocabSpec TheVocab(std::string pre) {
  BpeVocabSpec spec;
  spec.pre = std::move(pre);
  spec.extra_tokens = {Spell(" t"), "he", Spell(" the"), "in", Spell(" in"),
                       "<|endoftext|>", "<|user|>", "xyz", "<|im_end|>"};
  spec.extra_types = {1, 1, 1, 1, 1, 3, 4, 1, 1};
  spec.merges = {Spell(" ") + " t", "h e", Spell(" t") + " he", "i n", Spell(" ") + " in"};
  return spec;
}
constexpr int32_t kSpaceT = 256, kHe = 257, kSpaceThe = 258, kIn = 259, kSpaceIn = 260,
                  kEndOfText = 261, kUser = 262, kXyz = 263, kImEnd = 264;

TEST(BpeTokenizerTest, MergesByRankAndSpellsBytes) {
  auto tok = LoadOrDie(WriteBpeVocab("bpe_basic", TheVocab("gpt-2")));
  ASSERT_NE(tok, nullptr);
  const EncodeOptions raw{.add_special = false};
  EXPECT_THAT(tok->Encode(" the", raw), ElementsAre(kSpaceThe));
  EXPECT_THAT(tok->Encode("the in", raw), ElementsAre('t', kHe, kSpaceIn));
  EXPECT_THAT(tok->Encode("xyz", raw), ElementsAre('x', 'y', 'z'));  // no merges
  EXPECT_THAT(tok->Encode("\n", raw), ElementsAre('\n'));
  EXPECT_THAT(tok->Encode("\u00E9", raw), ElementsAre(0xC3, 0xA9));
  EXPECT_EQ(tok->TokenBytes(kSpaceThe), " the");
  EXPECT_EQ(tok->TokenBytes(' '), " ");
  EXPECT_EQ(tok->TokenBytes(0xC3), "\xC3");
  EXPECT_FALSE(tok->add_bos());  // gpt-2 pre: no BOS by default
  for (std::string text : {"the cat in the hat", "  spaced\tout\n", "\u00E9\u6211\U0001F999",
                           "<|endoftext|> is plain text here"}) {
    EXPECT_EQ(tok->Decode(tok->Encode(text, {})), text);
  }
}

TEST(BpeTokenizerTest, LowerRankMergesFirst) {
  BpeVocabSpec a;
  a.extra_tokens = {"ab", "bc"};
  a.merges = {"a b", "b c"};
  auto ab_first = LoadOrDie(WriteBpeVocab("rank_ab", a));
  ASSERT_NE(ab_first, nullptr);
  EXPECT_THAT(ab_first->Encode("abc", {.add_special = false}), ElementsAre(256, 'c'));
  a.merges = {"b c", "a b"};
  auto bc_first = LoadOrDie(WriteBpeVocab("rank_bc", a));
  ASSERT_NE(bc_first, nullptr);
  EXPECT_THAT(bc_first->Encode("abc", {.add_special = false}), ElementsAre('a', 257));
}

TEST(BpeTokenizerTest, Llama3IgnoresMergesForWholeWordsAndAddsBos) {
  BpeVocabSpec spec = TheVocab("llama3");
  spec.bos_id = kEndOfText;
  auto tok = LoadOrDie(WriteBpeVocab("bpe_llama3", spec));
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(tok->Encode("xyz", {.add_special = false}), ElementsAre(kXyz));
  EXPECT_TRUE(tok->add_bos());
  EXPECT_THAT(tok->Encode(" the", {}), ElementsAre(kEndOfText, kSpaceThe));
  spec.add_bos = false;  // the key overrides the pre-tokenizer's default
  auto no_bos = LoadOrDie(WriteBpeVocab("bpe_llama3_nobos", spec));
  ASSERT_NE(no_bos, nullptr);
  EXPECT_THAT(no_bos->Encode(" the", {}), ElementsAre(kSpaceThe));
}

TEST(BpeTokenizerTest, SpecialTokensAndEog) {
  auto tok = LoadOrDie(WriteBpeVocab("bpe_special", TheVocab("qwen2")));
  ASSERT_NE(tok, nullptr);
  const std::string text = "in<|endoftext|><|user|>in";
  // Control tokens are text unless parse_special; user-defined ones are
  // always matched (llama.cpp's tokenizer_st_partition).
  const std::vector<int32_t> plain = tok->Encode(text, {.add_special = false});
  EXPECT_EQ(plain.front(), kIn);
  EXPECT_THAT(plain, ::testing::Contains(kUser));
  EXPECT_THAT(plain, ::testing::Not(::testing::Contains(kEndOfText)));
  EXPECT_THAT(tok->Encode(text, {.add_special = false, .parse_special = true}),
              ElementsAre(kIn, kEndOfText, kUser, kIn));
  EXPECT_EQ(tok->TokenBytes(kEndOfText), "");
  EXPECT_EQ(tok->TokenBytes(kUser), "<|user|>");
  EXPECT_TRUE(tok->IsEog(kEndOfText));
  // "<|im_end|>" is stored as a normal token; llama.cpp detects it by text,
  // makes it control and end-of-generation.
  EXPECT_TRUE(tok->IsEog(kImEnd));
  EXPECT_EQ(tok->token_type(kImEnd), TokenType::kControl);
  EXPECT_EQ(tok->TokenBytes(kImEnd), "");
  EXPECT_FALSE(tok->IsEog(kHe));
  EXPECT_EQ(tok->Decode(plain), text);
}

TEST(BpeTokenizerTest, InvalidUtf8BecomesReplacementCharacter) {
  auto tok = LoadOrDie(WriteBpeVocab("bpe_invalid", TheVocab("llama3")));
  ASSERT_NE(tok, nullptr);
  // As in llama.cpp, the pre-tokenizer decodes text and replaces invalid
  // bytes with U+FFFD before byte-level spelling.
  EXPECT_THAT(tok->Encode("a\xFF", {.add_special = false}), ElementsAre('a', 0xEF, 0xBF, 0xBD));
}

// ---------------------------------------------------------------------------
// Loading errors name the offending key or value.

std::string LoadError(const std::string& name, const std::function<void(GgufWriter&)>& fill) {
  GgufWriter w;
  fill(w);
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  EXPECT_TRUE(w.WriteFile(path).ok());
  auto t = LoadTokenizer(path);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : std::string(t.status().message());
}

void ByteTokens(GgufWriter& w) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(ByteToUnicode(static_cast<uint8_t>(b)));
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
}

TEST(TokenizerLoadTest, ErrorsNameTheProblem) {
  EXPECT_THAT(LoadError("e_model", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "mystery");
                ByteTokens(w);
              }),
              HasSubstr("mystery"));
  EXPECT_THAT(LoadError("e_bert", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "bert");
                ByteTokens(w);
              }),
              HasSubstr("bert"));
  EXPECT_THAT(LoadError("e_nomodel", [](GgufWriter& w) { ByteTokens(w); }),
              HasSubstr("tokenizer.ggml.model"));
  EXPECT_THAT(LoadError("e_pre", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "gpt2");
                w.SetString("tokenizer.ggml.pre", "martian");
                ByteTokens(w);
                w.SetStringArray("tokenizer.ggml.merges", {});
              }),
              HasSubstr("martian"));
  EXPECT_THAT(LoadError("e_merges", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "gpt2");
                ByteTokens(w);
              }),
              HasSubstr("tokenizer.ggml.merges"));
  EXPECT_THAT(LoadError("e_tokens", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "llama");
              }),
              HasSubstr("tokenizer.ggml.tokens"));
  EXPECT_THAT(LoadError("e_scores", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "llama");
                w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
                w.SetFloat32Array("tokenizer.ggml.scores", {0, 0});
              }),
              HasSubstr("tokenizer.ggml.scores"));
  EXPECT_THAT(LoadError("e_types", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "llama");
                w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
                w.SetInt32Array("tokenizer.ggml.token_type", {2, 3});
              }),
              HasSubstr("tokenizer.ggml.token_type"));
  EXPECT_THAT(LoadError("e_dup", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "llama");
                w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "a"});
              }),
              HasSubstr("duplicate token 'a'"));
  // BPE defaults BOS to id 11, which does not exist in a 4-token vocabulary.
  EXPECT_THAT(LoadError("e_bos", [](GgufWriter& w) {
                w.SetString("tokenizer.ggml.model", "gpt2");
                w.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "ab"});
                w.SetStringArray("tokenizer.ggml.merges", {"a b"});
                w.SetBool("tokenizer.ggml.add_bos_token", true);
              }),
              HasSubstr("tokenizer.ggml.bos_token_id"));
}

TEST(TokenizerLoadTest, OutOfRangeSpecialIdsAreIgnoredLikeLlamaCpp) {
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\u2581a", "a"});
  w.SetInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
  w.SetUint32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
  w.SetUint32("tokenizer.ggml.eos_token_id", 99);  // keeps the default 2
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  const std::string path = ::testing::TempDir() + "/spm_ids.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto tok = LoadOrDie(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_THAT(tok->Encode("a", {}), ElementsAre(1, 4));  // no "▁" prefix
  EXPECT_THAT(tok->Encode(" a", {.add_special = false}), ElementsAre(3));
}

}  // namespace
}  // namespace tandem::engine
