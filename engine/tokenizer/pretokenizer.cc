// The regex lists are the tokenizer.json patterns in the form llama.cpp
// uses them (case-insensitive groups spelled out). Each regex refines the
// segments the previous one produced; llama.cpp routes the exact GPT-2 and
// Llama-3 patterns to hand-written splitters whose edge cases (segment ends,
// unassigned code points) differ slightly from a true regex, so those two
// are reimplemented as such rather than run through Regex.
#include "engine/tokenizer/pretokenizer.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "engine/tokenizer/unicode.h"

namespace tandem::engine {

namespace {

constexpr char kGpt2Regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr char kLlama3Regex[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
    "\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kLlama3RegexOriginal[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
    "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kQwen2Regex[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
    "\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kContractions[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
constexpr char kPoroRegex[] =
    " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+";
constexpr char kCjkRegex[] = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
// tekken / gpt-4o: an upper-then-lower letter run, with llama.cpp's
// lookahead spelling of [\p{Lu}...] classes.
constexpr char kCasedWordA[] =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+";
constexpr char kCasedWordB[] =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*";
// DeepSeek LLM's cased-letter class (Unicode L&), spelled with escapes.
constexpr char kDeepseekLetters[] =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
    "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5"
    "\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77"
    "\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57"
    "\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4"
    "\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D"
    "\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B"
    "\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F"
    "\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A"
    "\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB"
    "\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943]+";

struct PreSpec {
  std::vector<std::string> regexes;
  PreTokenizerTraits traits;
};

// Returns false if `pre` is not a name llama.cpp knows; `*supported` says
// whether this implementation handles it.
bool LookupPre(std::string_view pre, PreSpec* spec, bool* supported) {
  using S = std::string;
  const S gpt2 = kGpt2Regex;
  const S llama3 = kLlama3Regex;
  const S qwen2 = kQwen2Regex;
  const S contractions = kContractions;
  const std::vector<S> default_set = {"[\\p{P}\\$\\+<=>\\^~\\|]+", gpt2, "\\p{N}+",
                                      "[0-9][0-9][0-9]"};
  auto in = [&](std::initializer_list<std::string_view> names) {
    for (std::string_view n : names) {
      if (pre == n) return true;
    }
    return false;
  };
  *supported = true;
  PreTokenizerTraits& t = spec->traits;
  if (pre.empty() || pre == "default") {
    spec->regexes = default_set;
  } else if (in({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                 "midm-2.0", "lfm2", "jina-v5-nano"})) {
    spec->regexes = {llama3};
    t.ignore_merges = true;
    t.add_bos = true;
  } else if (in({"dbrx", "smaug-bpe"})) {
    spec->regexes = {llama3};
  } else if (in({"glm4", "chatglm-bpe"})) {
    spec->regexes = {llama3};
    t.clear_bos = true;
  } else if (pre == "deepseek-llm") {
    spec->regexes = {"[\r\n]", kDeepseekLetters,
                     "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
                     "\\s+$", kCjkRegex, "\\p{N}+"};
  } else if (pre == "deepseek-coder") {
    spec->regexes = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjkRegex, "\\p{N}"};
  } else if (in({"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"})) {
    spec->regexes = {
        "\\p{N}{1,3}", "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
        "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
  } else if (pre == "falcon") {
    spec->regexes = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", gpt2, "[0-9][0-9][0-9]"};
  } else if (in({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                 "minerva-7b", "mellum2"})) {
    spec->regexes = {"\\p{N}", gpt2};
  } else if (in({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                 "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4", "mpt", "olmo",
                 "jais", "trillion", "granite-docling"})) {
    spec->regexes = {gpt2};
  } else if (in({"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2",
                 "hunyuan", "solar-open", "grok-2"})) {
    spec->regexes = {qwen2};
  } else if (pre == "laguna") {
    spec->regexes = {"[^\\n]+|[\\n]+", qwen2};
  } else if (pre == "qwen35") {
    spec->regexes = {contractions +
                     "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
                     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  } else if (pre == "jais-2") {
    spec->regexes = {contractions +
                     "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                     "|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)"
                     "|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)"
                     "|\\s{1}"};
  } else if (in({"poro-chat", "bloom", "gpt3-finnish"})) {
    spec->regexes = {kPoroRegex};
  } else if (pre == "viking") {
    spec->regexes = {kPoroRegex, "\\p{N}"};
  } else if (pre == "tekken") {
    spec->regexes = {S(kCasedWordA) + "|" + kCasedWordB +
                     "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    t.ignore_merges = true;
    t.add_bos = true;
  } else if (in({"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"})) {
    spec->regexes = {S(kCasedWordA) + contractions + "?|" + kCasedWordB + contractions +
                     "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)"
                     "|\\s+"};
  } else if (in({"bailingmoe", "bailingmoe2", "llada-moe"})) {
    spec->regexes = {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?"
                     "\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)"
                     "|\\s+"};
  } else if (pre == "seed-coder") {
    spec->regexes = {contractions +
                     "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+"
                     "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  } else if (pre == "ufakzeka") {
    spec->regexes = {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                     "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  } else if (pre == "minicpm5") {
    spec->regexes = {"\\p{N}{1,3}",
                     contractions +
                         "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
                         "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    t.ignore_merges = true;
  } else if (pre == "exaone-moe") {
    spec->regexes = {contractions +
                     "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}"
                     "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"};
  } else if (pre == "chameleon") {
    spec->regexes = {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                     "([\\t\\n]|    |  )", "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]", gpt2};
    t.add_bos = true;
  } else if (in({"kimi-k2", "afmoe", "gemma4", "granite-embed-multi-311m", "sarvam-moe",
                 "whitespace", "jina-v1-en", "jina-v2-code", "roberta-bpe", "superbpe",
                 "tiny_aya", "cohere2moe", "youtu", "spark2_5", "granite-embed-multi-97m"})) {
    *supported = false;
  } else {
    return false;
  }
  return true;
}

// Shared scaffolding of llama.cpp's hand-written splitters: positions
// outside the current segment read as "out of range" (no flags).
class SegmentCursor {
 public:
  static constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

  SegmentCursor(const std::vector<uint32_t>& cpts, size_t begin, size_t end,
                std::vector<size_t>* out)
      : cpts_(cpts), begin_(begin), end_(end), prev_end_(begin), out_(out) {}

  uint32_t Cpt(size_t pos) const {
    return pos >= begin_ && pos < end_ ? cpts_[pos] : kOutOfRange;
  }
  CodepointFlags Flags(size_t pos) const {
    return pos >= begin_ && pos < end_ ? GetCodepointFlags(cpts_[pos]) : CodepointFlags{};
  }
  size_t end() const { return end_; }
  // Emits [prev_end, end) as a word if non-empty; returns its length.
  size_t AddToken(size_t end) {
    const size_t len = end - prev_end_;
    if (len > 0) out_->push_back(len);
    prev_end_ = end;
    return len;
  }
  // "\s+(?!\S)|\s+" for the `spaces` (> 0) whitespace at *pos: a run that a
  // non-space follows leaves its last space to that next token.
  void AddWhitespaceRun(size_t* pos, size_t spaces) {
    *pos += spaces > 1 && Cpt(*pos + spaces) != kOutOfRange ? spaces - 1 : spaces;
    AddToken(*pos);
  }
  // 's 't 'm 'd 're 've 'll at pos (case-insensitively if `fold`); returns
  // the contraction length or 0.
  size_t Contraction(size_t pos, bool fold) const {
    if (Cpt(pos) != '\'' || pos + 1 >= end_) return 0;
    auto at = [&](size_t p) { return fold ? ToLowerCodepoint(Cpt(p)) : Cpt(p); };
    const uint32_t c1 = at(pos + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= end_) return 0;
    const uint32_t c2 = at(pos + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
      return 3;
    }
    return 0;
  }

 private:
  const std::vector<uint32_t>& cpts_;
  size_t begin_;
  size_t end_;
  size_t prev_end_;
  std::vector<size_t>* out_;
};

bool IsPunctLike(const CodepointFlags& f) {
  return !(f.is_whitespace || f.is_letter() || f.is_number()) && f.defined();
}

}  // namespace

std::vector<size_t> SplitGpt2(const std::vector<uint32_t>& cpts,
                              const std::vector<size_t>& segment_lengths) {
  std::vector<size_t> out;
  size_t start = 0;
  for (const size_t len : segment_lengths) {
    SegmentCursor s(cpts, start, start + len, &out);
    for (size_t pos = start; pos < s.end();) {
      const uint32_t cpt = s.Cpt(pos);
      if (const size_t n = s.Contraction(pos, /*fold=*/false); n > 0) {
        pos += s.AddToken(pos + n);
        continue;
      }
      // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": classified by the
      // character after an optional leading space.
      CodepointFlags f = cpt == ' ' ? s.Flags(pos + 1) : s.Flags(pos);
      if (f.is_letter() || f.is_number() || IsPunctLike(f)) {
        const CodepointFlags first = f;
        auto same = [&](const CodepointFlags& g) {
          if (first.is_letter()) return g.is_letter();
          if (first.is_number()) return g.is_number();
          return IsPunctLike(g);
        };
        pos += cpt == ' ' ? 1 : 0;
        while (same(f)) f = s.Flags(++pos);
        s.AddToken(pos);
        continue;
      }
      size_t spaces = 0;
      while (s.Flags(pos + spaces).is_whitespace) ++spaces;
      if (spaces > 0) {
        s.AddWhitespaceRun(&pos, spaces);
        continue;
      }
      s.AddToken(++pos);
    }
    start += len;
  }
  return out;
}

std::vector<size_t> SplitLlama3(const std::vector<uint32_t>& cpts,
                                const std::vector<size_t>& segment_lengths) {
  std::vector<size_t> out;
  size_t start = 0;
  for (const size_t len : segment_lengths) {
    SegmentCursor s(cpts, start, start + len, &out);
    for (size_t pos = start; pos < s.end();) {
      const uint32_t cpt = s.Cpt(pos);
      const CodepointFlags flags = s.Flags(pos);
      if (const size_t n = s.Contraction(pos, /*fold=*/true); n > 0) {
        pos += s.AddToken(pos + n);
        continue;
      }
      // "[^\r\n\p{L}\p{N}]?\p{L}+"
      if (!(cpt == '\r' || cpt == '\n' || flags.is_number()) &&
          (flags.is_letter() || s.Flags(pos + 1).is_letter())) {
        ++pos;
        while (s.Flags(pos).is_letter()) ++pos;
        s.AddToken(pos);
        continue;
      }
      // "\p{N}{1,3}"
      if (flags.is_number()) {
        size_t group_start = pos;
        while (s.Flags(pos).is_number()) {
          if (++pos - group_start >= 3) {
            s.AddToken(pos);
            group_start = pos;
          }
        }
        s.AddToken(pos);
        continue;
      }
      // " ?[^\s\p{L}\p{N}]+[\r\n]*". llama.cpp tests the first character's
      // flags (not the one after the space) for "defined" here.
      CodepointFlags f = cpt == ' ' ? s.Flags(pos + 1) : flags;
      if (!(f.is_whitespace || f.is_letter() || f.is_number()) && flags.defined()) {
        pos += cpt == ' ' ? 1 : 0;
        while (IsPunctLike(f)) f = s.Flags(++pos);
        while (s.Cpt(pos) == '\r' || s.Cpt(pos) == '\n') ++pos;
        s.AddToken(pos);
        continue;
      }
      size_t spaces = 0;
      size_t last_newline_end = 0;
      while (s.Flags(pos + spaces).is_whitespace) {
        const uint32_t c = s.Cpt(pos + spaces);
        if (c == '\r' || c == '\n') last_newline_end = pos + spaces + 1;
        ++spaces;
      }
      if (last_newline_end > 0) {  // "\s*[\r\n]+"
        pos = last_newline_end;
        s.AddToken(pos);
        continue;
      }
      if (spaces > 0) {
        s.AddWhitespaceRun(&pos, spaces);
        continue;
      }
      s.AddToken(++pos);
    }
    start += len;
  }
  return out;
}

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view pre) {
  PreSpec spec;
  bool supported = false;
  if (!LookupPre(pre, &spec, &supported)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pre-tokenizer tokenizer.ggml.pre='", ToAbsl(pre), "'"));
  }
  if (!supported) {
    return absl::UnimplementedError(absl::StrCat(
        "pre-tokenizer tokenizer.ggml.pre='", ToAbsl(pre), "' is not supported"));
  }
  return Build(spec.regexes, spec.traits);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromRegexes(
    const std::vector<std::string>& regexes) {
  return Build(regexes, PreTokenizerTraits{});
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Build(
    const std::vector<std::string>& regexes, const PreTokenizerTraits& traits) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  p->traits_ = traits;
  for (const std::string& re : regexes) {
    Step step;
    if (re == kGpt2Regex) {
      step.custom = Custom::kGpt2;
    } else if (re == kLlama3Regex || re == kLlama3RegexOriginal) {
      step.custom = Custom::kLlama3;
    } else {
      auto compiled = Regex::Compile(re);
      if (!compiled.ok()) return compiled.status();
      step.regex = std::move(*compiled);
    }
    p->steps_.push_back(std::move(step));
  }
  return p;
}

std::vector<std::string> PreTokenizer::Split(std::string_view text) const {
  const std::vector<uint32_t> cpts = DecodeUtf8Lenient(text);
  std::vector<size_t> segments = {cpts.size()};
  for (const Step& step : steps_) {
    switch (step.custom) {
      case Custom::kGpt2: segments = SplitGpt2(cpts, segments); break;
      case Custom::kLlama3: segments = SplitLlama3(cpts, segments); break;
      case Custom::kNone: segments = step.regex->Split(cpts, segments); break;
    }
  }
  std::vector<std::string> words;
  words.reserve(segments.size());
  size_t start = 0;
  for (const size_t len : segments) {
    words.push_back(CodepointsToUtf8(cpts, start, start + len));
    start += len;
  }
  return words;
}

}  // namespace tandem::engine
