// Key names, defaults and the text-based special-token detection follow
// llama.cpp's llama_vocab::impl::load. Special token ids that are out of
// range are ignored (llama.cpp warns and keeps its default), which is how
// files that store 0xFFFFFFFF for "none" load; everything structural
// (missing or mistyped arrays, short arrays, duplicates) is an error naming
// the key.
#include "engine/tokenizer/tokenizer_vocab.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace tandem::engine {

namespace {

constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kScoresKey[] = "tokenizer.ggml.scores";
constexpr char kTypesKey[] = "tokenizer.ggml.token_type";

bool OneOf(std::string_view s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

uint32_t AttrFromType(int32_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return 0;  // undefined
  }
}

TokenType TypeFromAttr(uint32_t a) {
  if (a & kAttrControl) return TokenType::kControl;
  if (a & kAttrUserDefined) return TokenType::kUserDefined;
  if (a & kAttrUnknown) return TokenType::kUnknown;
  if (a & kAttrByte) return TokenType::kByte;
  if (a & kAttrNormal) return TokenType::kNormal;
  if (a & kAttrUnused) return TokenType::kUnused;
  return TokenType::kUndefined;
}

// Hex value of a "<0xNN>" byte token (lenient like strtol: stops at the
// first non-hex digit).
uint8_t ByteTokenValue(const std::string& text) {
  unsigned v = 0;
  for (size_t i = 3; i < 5 && i < text.size(); ++i) {
    const char c = text[i];
    if (!std::isxdigit(static_cast<unsigned char>(c))) break;
    v = v * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(c))
                                           ? c - '0'
                                           : (c | 0x20) - 'a' + 10);
  }
  return static_cast<uint8_t>(v);
}

std::string StringOr(const GgufFile& file, std::string_view key) {
  auto v = file.GetString(key);
  return v.ok() ? std::string(*v) : std::string();
}

bool IsCSpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

}  // namespace

int32_t VocabTokenizer::FindToken(std::string_view text) const {
  auto it = token_to_id_.find(ToAbsl(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

void VocabTokenizer::SetAttr(int32_t id, uint32_t a) { attrs_[id] = a; }
void VocabTokenizer::AddAttr(int32_t id, uint32_t bits) { attrs_[id] |= bits; }

std::string VocabTokenizer::TokenBytes(int32_t id) const {
  return IsValidId(id) ? pieces_[id] : std::string();
}

absl::Status VocabTokenizer::ReadTokens(const GgufFile& file) {
  auto tokens = file.GetStringArray(kTokensKey);
  if (!tokens.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer vocabulary ", kTokensKey, ": ", tokens.status().message()));
  }
  const size_t n = tokens->size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTokensKey, " has ", n, " entries; expected 1..2^31-1"));
  }

  scores_.assign(n, 0.0f);
  if (file.HasKey(kScoresKey)) {
    const auto elem = file.ArrayElementType(kScoresKey);
    std::vector<float> scores;
    if (elem == GgufValueType::kInt32) {
      auto ints = file.GetInt32Array(kScoresKey);
      if (!ints.ok()) return ints.status();
      scores.assign(ints->begin(), ints->end());
    } else {
      auto floats = file.GetFloatArray(kScoresKey);
      if (!floats.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            kScoresKey, " must be a float32 or int32 array: ", floats.status().message()));
      }
      scores = std::move(*floats);
    }
    if (scores.size() < n) {
      return absl::InvalidArgumentError(absl::StrCat(kScoresKey, " has ", scores.size(),
                                                     " entries, fewer than the ", n,
                                                     " tokens"));
    }
    std::copy(scores.begin(), scores.begin() + static_cast<ptrdiff_t>(n), scores_.begin());
  }

  attrs_.assign(n, kAttrNormal);
  if (file.HasKey(kTypesKey)) {
    auto types = file.GetInt32Array(kTypesKey);
    if (!types.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kTypesKey, " must be an int32 array: ", types.status().message()));
    }
    if (types->size() < n) {
      return absl::InvalidArgumentError(absl::StrCat(
          kTypesKey, " has ", types->size(), " entries, fewer than the ", n, " tokens"));
    }
    for (size_t i = 0; i < n; ++i) attrs_[i] = AttrFromType((*types)[i]);
  }

  tokens_.resize(n);
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string word((*tokens)[i]);
    if (word.empty()) word = absl::StrCat("[EMPTY_", i, "]");  // as llama.cpp
    auto [it, inserted] = token_to_id_.emplace(word, static_cast<int32_t>(i));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(kTokensKey, ": duplicate token '",
                                                     word, "' at ids ", it->second,
                                                     " and ", i));
    }
    tokens_[i] = std::move(word);
  }
  return absl::OkStatus();
}

absl::Status VocabTokenizer::ReadSpecialIds(const GgufFile& file,
                                            const VocabDefaults& defaults) {
  const int64_t n = n_vocab();
  auto in_range = [&](int32_t id) { return id >= 0 && id < n ? id : -1; };
  bos_id_ = in_range(defaults.bos_id);
  eos_id_ = in_range(defaults.eos_id);
  unk_id_ = in_range(defaults.unk_id);
  int32_t unused_id = -1;
  struct KeyTarget {
    const char* key;
    int32_t* id;
  };
  const KeyTarget keys[] = {
      {"tokenizer.ggml.bos_token_id", &bos_id_},
      {"tokenizer.ggml.eos_token_id", &eos_id_},
      {"tokenizer.ggml.eot_token_id", &eot_id_},
      {"tokenizer.ggml.eom_token_id", &eom_id_},
      {"tokenizer.ggml.unknown_token_id", &unk_id_},
      {"tokenizer.ggml.seperator_token_id", &unused_id},  // sic, the GGUF key
      {"tokenizer.ggml.padding_token_id", &unused_id},
      {"tokenizer.ggml.fim_pre_token_id", &fim_pre_id_},
      {"tokenizer.ggml.fim_suf_token_id", &fim_suf_id_},
      {"tokenizer.ggml.fim_mid_token_id", &fim_mid_id_},
      {"tokenizer.ggml.fim_pad_token_id", &fim_pad_id_},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep_id_},
      {"tokenizer.ggml.fim_sep_token_id", &fim_sep_id_},
      {"tokenizer.ggml.prefix_token_id", &fim_pre_id_},  // deprecated names
      {"tokenizer.ggml.suffix_token_id", &fim_suf_id_},
      {"tokenizer.ggml.middle_token_id", &fim_mid_id_},
  };
  for (const KeyTarget& k : keys) {
    if (!file.HasKey(k.key)) continue;
    auto v = file.GetInt(k.key);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(k.key, " must be an integer: ", v.status().message()));
    }
    if (*v >= 0 && *v < n) *k.id = static_cast<int32_t>(*v);
  }

  add_bos_ = defaults.add_bos;
  add_eos_ = defaults.add_eos;
  for (auto [key, flag] : {std::pair{"tokenizer.ggml.add_bos_token", &add_bos_},
                           std::pair{"tokenizer.ggml.add_eos_token", &add_eos_}}) {
    auto v = file.GetBoolOr(key, *flag);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " must be a bool: ", v.status().message()));
    }
    *flag = *v;
  }
  if (add_bos_ && bos_id_ < 0) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  }
  if (add_eos_ && eos_id_ < 0) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
  }
  return absl::OkStatus();
}

void VocabTokenizer::DetectSpecialTokens(const GgufFile& file) {
  const int32_t n = n_vocab();
  // Tokens whose text marks them as special though the file may not say so
  // (llama.cpp "auto-detect special tokens by text"); each becomes control.
  auto detect = [&](int32_t* id, std::initializer_list<std::string_view> texts) {
    if (*id >= 0) return;
    for (int32_t i = 0; i < n; ++i) {
      if (OneOf(tokens_[i], texts)) {
        *id = i;
        AddAttr(i, kAttrControl);
        return;
      }
    }
  };
  detect(&eot_id_, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "<end_of_utterance>"});
  detect(&eom_id_, {"<|eom_id|>"});
  detect(&fim_pre_id_, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                        "<\uFF5Cfim\u2581begin\uFF5C>", "<PRE>", "\u2581<PRE>",
                        "<|code_prefix|>", "<|prefix|>"});
  detect(&fim_suf_id_, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                        "<\uFF5Cfim\u2581hole\uFF5C>", "<SUF>", "\u2581<SUF>",
                        "<|code_suffix|>", "<|suffix|>"});
  detect(&fim_mid_id_, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                        "<\uFF5Cfim\u2581end\uFF5C>", "<MID>", "\u2581<MID>",
                        "<|code_middle|>", "<|middle|>"});
  detect(&fim_pad_id_, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(&fim_rep_id_, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                        "<reponame>"});
  detect(&fim_sep_id_, {"<|file_sep|>"});

  for (int32_t i = 0; i < n; ++i) {
    if ((attrs_[i] & kAttrControl) && tokens_[i].find("unused") != std::string::npos) {
      AddAttr(i, kAttrUnused);
    }
  }

  absl::flat_hash_set<int32_t> eog;
  for (int32_t id : {fim_pad_id_, fim_rep_id_, fim_sep_id_}) {
    if (id >= 0) eog.insert(id);
  }
  for (int32_t i = 0; i < n; ++i) {
    if (OneOf(tokens_[i],
              {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
               "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
               "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
               "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
               "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "[e~["})) {
      eog.insert(i);
      AddAttr(i, kAttrControl);
    }
  }
  // gpt-oss: these structural tokens are always rendered.
  for (int32_t i = 0; i < n; ++i) {
    if (OneOf(tokens_[i], {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      SetAttr(i, kAttrUserDefined);
    }
  }
  for (int32_t id : {eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) eog.insert(id);
  }
  // o200k_harmony / solar-open: "<|end|>" ends a message, not generation.
  {
    int32_t end_id = -1;
    bool has_return = false, has_call = false, has_flush = false;
    for (int32_t id : eog) {
      const std::string& t = tokens_[id];
      if (t == "<|return|>") has_return = true;
      if (t == "<|call|>" || t == "<|calls|>") has_call = true;
      if (t == "<|flush|>") has_flush = true;
      if (t == "<|end|>") end_id = id;
    }
    if (end_id >= 0 && has_call && (has_return || has_flush)) {
      eog.erase(end_id);
      SetAttr(end_id, kAttrUserDefined);
    }
  }
  // gemma4 / paddleocr: "</s>" is ordinary text there.
  {
    int32_t s_id = -1;
    bool has_tool_response = false;
    for (int32_t id : eog) {
      if (tokens_[id] == "<|tool_response>") has_tool_response = true;
      if (tokens_[id] == "</s>") s_id = id;
    }
    if (has_tool_response && s_id >= 0) {
      eog.erase(s_id);
      SetAttr(s_id, kAttrNormal);
    }
  }
  eog_ids_.assign(eog.begin(), eog.end());
  std::sort(eog_ids_.begin(), eog_ids_.end());

  for (int32_t i = 0; i < n; ++i) {
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_tokens_.push_back(i);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });

  // Per-model strip attributes (llama.cpp sets them by model or pre name).
  std::string name = StringOr(file, "general.name");
  absl::AsciiStrToLower(&name);
  const std::string pre = StringOr(file, "tokenizer.ggml.pre");
  const std::string arch = StringOr(file, "general.architecture");
  auto set_strip = [&](std::string_view text, uint32_t bit, bool on) {
    const int32_t id = FindToken(text);
    if (id < 0) return;
    attrs_[id] = on ? (attrs_[id] | bit) : (attrs_[id] & ~bit);
  };
  auto contains = [](const std::string& s, std::initializer_list<std::string_view> subs) {
    for (std::string_view sub : subs) {
      if (s.find(sub) != std::string::npos) return true;
    }
    return false;
  };
  if (contains(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set_strip("<mask>", kAttrLstrip, true);
  } else if (contains(name, {"phi-3", "phi3"})) {
    for (int32_t id : special_tokens_) AddAttr(id, kAttrRstrip);
    set_strip("</s>", kAttrRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_strip(t, kAttrRstrip, false);
  } else if (contains(name, {"modern-bert"})) {
    set_strip("[MASK]", kAttrLstrip, true);
  }
}

absl::Status VocabTokenizer::Load(const GgufFile& file, const VocabDefaults& defaults) {
  add_space_prefix_ = defaults.add_space_prefix;
  auto prefix = file.GetBoolOr("tokenizer.ggml.add_space_prefix", add_space_prefix_);
  if (!prefix.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.ggml.add_space_prefix must be a bool: ", prefix.status().message()));
  }
  add_space_prefix_ = *prefix;
  remove_leading_space_ = add_space_prefix_;

  if (absl::Status s = ReadTokens(file); !s.ok()) return s;
  if (absl::Status s = ReadSpecialIds(file, defaults); !s.ok()) return s;
  DetectSpecialTokens(file);

  types_.resize(attrs_.size());
  pieces_.resize(attrs_.size());
  for (size_t i = 0; i < attrs_.size(); ++i) {
    const uint32_t a = attrs_[i];
    types_[i] = TypeFromAttr(a);
    // llama.cpp token_to_piece(special=false).
    if (a & (kAttrUnknown | kAttrControl)) continue;
    if (a & kAttrUserDefined) {
      pieces_[i] = tokens_[i];
    } else if (a & kAttrNormal) {
      pieces_[i] = NormalPiece(tokens_[i]);
    } else if (a & kAttrByte) {
      pieces_[i] = std::string(1, static_cast<char>(ByteTokenValue(tokens_[i])));
    }
  }
  return absl::OkStatus();
}

std::vector<VocabTokenizer::Fragment> VocabTokenizer::Partition(std::string_view text,
                                                                bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const int32_t id : special_tokens_) {
    const uint32_t a = attrs_[id];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& tok = tokens_[id];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset;
      size_t len = f.length;
      while (len > 0) {
        const size_t m = text.substr(0, base + len).find(tok, base);
        if (m == std::string_view::npos) {
          next.push_back({-1, base, len});
          break;
        }
        size_t left = m - base;
        if (a & kAttrLstrip) {
          while (left > 0 && IsCSpace(text[base + left - 1])) --left;
        }
        if (left > 0) next.push_back({-1, base, left});
        next.push_back({id, m, tok.size()});
        size_t right_begin = m + tok.size();
        const size_t end = base + len;
        if (a & kAttrRstrip) {
          while (right_begin < end && IsCSpace(text[right_begin])) ++right_begin;
        }
        base = right_begin;
        len = end - right_begin;
      }
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace tandem::engine
