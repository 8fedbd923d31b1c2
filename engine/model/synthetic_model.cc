#include "engine/model/synthetic_model.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"

namespace tandem::engine {
namespace {

// Portable deterministic normal samples (SplitMix64 + Box-Muller), so a seed
// gives the same model on every platform and standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (Next() >> 11) * (1.0 / 9007199254740992.0); }
  float Normal() {
    const double u1 = std::max(Uniform(), 1e-300);
    const double u2 = Uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2));
  }

 private:
  uint64_t state_;
};

std::vector<uint8_t> Encode(const std::vector<float>& values, GgmlType type) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<uint8_t> out(GgmlRowBytes(type, n));
  QuantizeRow(type, values.data(), out.data(), n);
  return out;
}

// English-like pieces for the vocabulary. Every prefix of a word is added
// before the word, so SentencePiece's pairwise merges can reach it.
constexpr const char* kWords[] = {
    "the", "and", "was", "she", "he", "to", "a", "of", "in", "it", "they", "her", "his",
    "day", "one", "upon", "time", "once", "there", "little", "girl", "boy", "play",
    "with", "big", "saw", "said", "went", "happy", "friend", "tree", "ball", "park",
    "mom", "dog", "cat", "sun", "run", "fun", "very", "had", "on", "for", "is", "you",
    "that", "not", "but", "so", "then", "what", "we", "all", "be", "at", "up", "out",
    "red", "blue", "green", "look", "like", "love", "help", "home", "named", "loved"};

std::vector<std::string> Pieces(int32_t n_pieces) {
  std::vector<std::string> pieces;
  absl::flat_hash_set<std::string> seen;
  auto add = [&](const std::string& p) {
    if (static_cast<int32_t>(pieces.size()) < n_pieces && seen.insert(p).second) {
      pieces.push_back(p);
    }
  };
  const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  add(space);
  for (char c = 'a'; c <= 'z'; ++c) add(std::string(1, c));
  for (const char* c : {".", ",", "!", "?", "'", "\""}) add(c);
  for (const char* w : kWords) {
    const std::string word(w);
    for (size_t k = 1; k <= word.size(); ++k) add(space + word.substr(0, k));
  }
  for (char c = 'A'; c <= 'Z'; ++c) add(std::string(1, c));
  for (char c = '0'; c <= '9'; ++c) add(std::string(1, c));
  // Fill the rest with two-letter pieces.
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) add(std::string{a, b});
  }
  return pieces;
}

void AddTokenizer(const SyntheticModelOptions& o, GgufWriter& w) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(absl::StrFormat("<0x%02X>", b));
    types.push_back(6);  // byte
  }
  for (std::string& p : Pieces(o.n_vocab - static_cast<int32_t>(tokens.size()))) {
    tokens.push_back(std::move(p));
    types.push_back(1);  // normal
  }
  while (static_cast<int32_t>(tokens.size()) < o.n_vocab) {  // unreachable fillers
    tokens.push_back(absl::StrCat("<unused", tokens.size(), ">"));
    types.push_back(5);
  }
  // Longer pieces score higher so merges prefer whole words.
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 259; i < tokens.size(); ++i) {
    scores[i] = static_cast<float>(tokens[i].size()) - static_cast<float>(i) * 1e-4f;
  }
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetBool("tokenizer.ggml.add_eos_token", false);
  if (!o.chat_template.empty()) w.SetString("tokenizer.chat_template", o.chat_template);
}

absl::Status CopyTokenizer(const SyntheticModelOptions& o, GgufWriter& w) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> vocab, GgufFile::Open(o.vocab_from));
  ASSIGN_OR_RETURN(const uint64_t n, vocab->GetArrayLength("tokenizer.ggml.tokens"));
  if (n != static_cast<uint64_t>(o.n_vocab)) {
    return absl::InvalidArgumentError(absl::StrCat("n_vocab ", o.n_vocab, " is not the ", n,
                                                   " tokens of ", o.vocab_from));
  }
  for (const std::string& key : vocab->Keys()) {
    if (!key.starts_with("tokenizer.")) continue;
    ASSIGN_OR_RETURN(GgufFile::EncodedValue v, vocab->GetEncoded(key));
    w.SetEncoded(key, v.type, v.bytes);
  }
  return absl::OkStatus();
}

// The copying model (SyntheticModelOptions::copying). The residual stream's
// layout: dimension 0 holds a constant, then five 64-dimension token codes
// (random +-1 vectors, one per vocabulary entry, drawn from the seed alone):
// the current token's (A), those of the 1st..4th tokens before it (B1..B4,
// written by layer 0), and the code layer 1 retrieves (R), which the output
// matrix reads.
namespace copying {

constexpr int32_t kCode = 64;      // dimensions of a token code
constexpr int32_t kOffsets = 4;    // previous tokens layer 0 gathers
constexpr int32_t kPosPairs = 8;   // RoPE pairs that carry position
constexpr float kConstant = 8.0f;  // the constant dimension's value
constexpr float kNoise = 0.05f;    // other weights: this times the usual init
constexpr int32_t kA = 1;
constexpr int32_t kB = kA + kCode;  // B_j starts at kB + (j - 1) * kCode
constexpr int32_t kR = kB + kOffsets * kCode;
constexpr int32_t kWidth = kR + kCode;  // 385: the narrowest n_embd
// The induction head's match: code bits [kSegment[j], kSegment[j + 1]) of
// the token j places back. Earlier tokens weigh less (fewer bits), so the
// position whose last four tokens all match wins, and among partial matches
// the one matching the most recent tokens.
constexpr int32_t kSegment[kOffsets + 1] = {0, 24, 36, 42, 48};
constexpr int32_t kMatchDims = kSegment[kOffsets];

// A row-major [rows x cols] matrix of small noise, to be written into.
struct Matrix {
  int64_t cols;
  int64_t rows;
  std::vector<float> v;
  Matrix(int64_t cols, int64_t rows, Rng& rng) : cols(cols), rows(rows), v(cols * rows) {
    const float scale = kNoise / std::sqrt(static_cast<float>(cols));
    for (float& x : v) x = rng.Normal() * scale;
  }
  float& at(int64_t row, int64_t col) { return v[static_cast<size_t>(row * cols + col)]; }
};

float Rms(int32_t n_embd, int32_t codes) {
  return std::sqrt((kConstant * kConstant + static_cast<float>(codes * kCode)) / n_embd + 1e-5f);
}

void AddWeights(const SyntheticModelOptions& o, GgufWriter& w) {
  const int32_t n = o.n_embd;
  const int32_t hd = n / o.n_head;
  const int32_t kv_dim = hd * o.n_head_kv;
  Rng rng(o.seed);
  Rng code_rng(o.seed ^ 0x636f707969ull);  // codes depend on the seed alone
  std::vector<int8_t> code(static_cast<size_t>(o.n_vocab) * kCode);
  for (int8_t& c : code) c = (code_rng.Next() >> 63) ? 1 : -1;
  auto bit = [&](int64_t token, int32_t i) { return code[token * kCode + i]; };

  auto add = [&](const std::string& name, const Matrix& m) {
    w.AddTensor(name, o.type, {m.cols, m.rows}, Encode(m.v, o.type));
  };
  auto ones = [&](const std::string& name, int64_t size) {
    w.AddTensor(name, GgmlType::kF32, {size},
                Encode(std::vector<float>(size, 1.0f), GgmlType::kF32));
  };

  // Pairs 0..7 rotate as RoPE has them; the rest are held still (factor
  // 1e6), so they match content at any distance.
  std::vector<float> factors(hd / 2, 1e6f);
  std::vector<float> theta(kPosPairs);
  for (int32_t p = 0; p < kPosPairs; ++p) {
    factors[p] = 1.0f;
    theta[p] = std::pow(10000.0f, -2.0f * p / hd);
  }
  w.AddTensor("rope_freqs.weight", GgmlType::kF32, {hd / 2}, Encode(factors, GgmlType::kF32));
  // A previous-token head's score is amp * sum_p cos((t - s - j) theta_p);
  // its worst rival position trails the target by `gap` * amp, which is
  // made 16 nats after the 1/sqrt(hd) scaling.
  double gap = 1e9;
  for (int32_t d = 1; d <= o.context_length; ++d) {
    double s = 0;
    for (float t : theta) s += 1.0 - std::cos(d * static_cast<double>(t));
    gap = std::min(gap, s);
  }
  const float amp = static_cast<float>(16.0 * std::sqrt(hd) / gap);

  Matrix embd(n, o.n_vocab, rng);
  for (int64_t t = 0; t < o.n_vocab; ++t) {
    embd.at(t, 0) = kConstant;
    for (int32_t i = 0; i < kCode; ++i) embd.at(t, kA + i) = bit(t, i);
  }
  add("token_embd.weight", embd);
  ones("output_norm.weight", n);
  // logit(v) = 0.5 * code(v) . R: the retrieved token leads any other by
  // 0.5 * 2 * (their codes' Hamming distance), about 13 nats or more.
  Matrix out(n, o.n_vocab, rng);
  const float rms_out = Rms(n, 6);
  for (int64_t t = 0; t < o.n_vocab; ++t) {
    for (int32_t i = 0; i < kCode; ++i) out.at(t, kR + i) = 0.5f * rms_out * bit(t, i);
  }
  add("output.weight", out);

  for (int32_t l = 0; l < o.n_layer; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    Matrix q(n, n, rng), k(n, kv_dim, rng), v(n, kv_dim, rng), wo(n, n, rng);
    if (l == 0) {
      // Every KV head: key pair p = (1, 0) from the constant; value = A.
      const float rms = Rms(n, 1);
      for (int32_t g = 0; g < o.n_head_kv; ++g) {
        for (int32_t p = 0; p < kPosPairs; ++p) k.at(g * hd + 2 * p, 0) = rms / kConstant;
        for (int32_t i = 0; i < kCode; ++i) v.at(g * hd + i, kA + i) = rms;
      }
      // Query head j - 1 peaks j positions back; its output goes to B_j.
      for (int32_t j = 1; j <= kOffsets; ++j) {
        const int32_t h = j - 1;
        for (int32_t p = 0; p < kPosPairs; ++p) {
          q.at(h * hd + 2 * p, 0) = amp * std::cos(j * theta[p]) * rms / kConstant;
          q.at(h * hd + 2 * p + 1, 0) = -amp * std::sin(j * theta[p]) * rms / kConstant;
        }
        for (int32_t i = 0; i < kCode; ++i) wo.at(kB + (j - 1) * kCode + i, h * hd + i) = 1.0f;
      }
    } else if (l == 1) {
      // Query head 0 at t: bits of tokens t, t-1, t-2, t-3; key at s: the
      // same bits of tokens s-1 .. s-4. The best match's value, A at s (the
      // token that followed), goes to R.
      const float rms = Rms(n, 5);
      // Each bit that differs costs 2 * scale nats after the 1/sqrt(hd)
      // scaling: 12 nats.
      const float scale = 6.0f * std::sqrt(static_cast<float>(hd));
      for (int32_t j = 0; j < kOffsets; ++j) {
        const int32_t q_src = j == 0 ? kA : kB + (j - 1) * kCode;
        const int32_t k_src = kB + j * kCode;
        for (int32_t m = kSegment[j]; m < kSegment[j + 1]; ++m) {
          const int32_t row = 2 * kPosPairs + m;
          q.at(row, q_src + m) = scale * rms;
          k.at(row, k_src + m) = rms;
        }
      }
      for (int32_t i = 0; i < kCode; ++i) {
        v.at(i, kA + i) = rms;
        wo.at(kR + i, i) = 1.0f;
      }
    }
    ones(b + "attn_norm.weight", n);
    add(b + "attn_q.weight", q);
    add(b + "attn_k.weight", k);
    add(b + "attn_v.weight", v);
    add(b + "attn_output.weight", wo);
    ones(b + "ffn_norm.weight", n);
    add(b + "ffn_gate.weight", Matrix(n, o.n_ff, rng));
    add(b + "ffn_up.weight", Matrix(n, o.n_ff, rng));
    add(b + "ffn_down.weight", Matrix(o.n_ff, n, rng));
  }
}

}  // namespace copying

}  // namespace

absl::Status ValidateSyntheticModelOptions(const SyntheticModelOptions& o) {
  if (o.arch != "llama" && o.arch != "qwen2") {
    return absl::InvalidArgumentError(
        absl::StrCat("arch \"", o.arch, "\" is not supported; use llama or qwen2"));
  }
  if (o.n_vocab < 259 + 16 || o.n_vocab > 1 << 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_vocab ", o.n_vocab, " is out of range [275, 1048576]"));
  }
  for (auto [name, v] : {std::pair{"n_embd", o.n_embd}, {"n_layer", o.n_layer},
                         {"n_head", o.n_head}, {"n_head_kv", o.n_head_kv},
                         {"n_ff", o.n_ff}, {"context_length", o.context_length}}) {
    if (v < 1 || v > 1 << 20) {
      return absl::InvalidArgumentError(absl::StrCat(name, " ", v, " is out of range"));
    }
  }
  if (o.n_embd % o.n_head != 0 || (o.n_embd / o.n_head) % 2 != 0) {
    return absl::InvalidArgumentError("n_embd must be a multiple of 2 * n_head");
  }
  if (o.n_head % o.n_head_kv != 0) {
    return absl::InvalidArgumentError("n_head must be a multiple of n_head_kv");
  }
  const int64_t bs = GgmlBlockSize(o.type);
  if (o.n_embd % bs != 0 || o.n_ff % bs != 0 || o.n_embd / o.n_head * o.n_head_kv % bs != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("type ", absl::AsciiStrToLower(std::string(GgmlTypeName(o.type))),
                     " needs n_embd, n_ff and the KV width to be multiples of ", bs));
  }
  if (o.copying) {
    if (o.arch != "llama") return absl::InvalidArgumentError("copying needs arch llama");
    if (o.tied_output) {
      return absl::InvalidArgumentError(
          "copying needs an output matrix of its own; drop tied_output");
    }
    if (o.n_layer < 2 || o.n_head < copying::kOffsets ||
        o.n_embd / o.n_head < 2 * copying::kPosPairs + copying::kMatchDims ||
        o.n_embd / o.n_head < copying::kCode || o.n_embd < copying::kWidth) {
      return absl::InvalidArgumentError(
          absl::StrCat("copying needs n_layer >= 2, n_head >= ", copying::kOffsets,
                       ", a head width (n_embd / n_head) >= ", copying::kCode,
                       " and n_embd >= ", copying::kWidth));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteSyntheticModel(const SyntheticModelOptions& o, const std::string& path) {
  RETURN_IF_ERROR(ValidateSyntheticModelOptions(o));
  const int32_t head_dim = o.n_embd / o.n_head;
  const int32_t kv_dim = head_dim * o.n_head_kv;
  GgufWriter w;
  const std::string a = o.arch + ".";
  w.SetString("general.architecture", o.arch);
  w.SetString("general.name",
              absl::StrCat("tandem-synthetic-", o.arch, o.copying ? "-copying" : ""));
  w.SetUint32(a + "context_length", o.context_length);
  w.SetUint32(a + "embedding_length", o.n_embd);
  w.SetUint32(a + "block_count", o.n_layer);
  w.SetUint32(a + "feed_forward_length", o.n_ff);
  w.SetUint32(a + "attention.head_count", o.n_head);
  w.SetUint32(a + "attention.head_count_kv", o.n_head_kv);
  w.SetUint32(a + "rope.dimension_count", head_dim);
  w.SetFloat32(a + "rope.freq_base", 10000.0f);
  w.SetFloat32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (o.vocab_from.empty()) {
    AddTokenizer(o, w);
  } else {
    RETURN_IF_ERROR(CopyTokenizer(o, w));
  }

  if (o.copying) {
    copying::AddWeights(o, w);
    return w.WriteFile(path);
  }
  Rng rng(o.seed);
  // Weights ~ N(0, 1/fan_in) keep activations of order one through layers.
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows) {
    std::vector<float> v(static_cast<size_t>(cols * rows));
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    for (float& x : v) x = rng.Normal() * scale;
    w.AddTensor(name, o.type, {cols, rows}, Encode(v, o.type));
  };
  auto vector = [&](const std::string& name, int64_t n, float base, float jitter) {
    std::vector<float> v(n);
    for (float& x : v) x = base + jitter * rng.Normal();
    w.AddTensor(name, GgmlType::kF32, {n}, Encode(v, GgmlType::kF32));
  };
  matrix("token_embd.weight", o.n_embd, o.n_vocab);
  vector("output_norm.weight", o.n_embd, 1.0f, 0.1f);
  if (!o.tied_output) matrix("output.weight", o.n_embd, o.n_vocab);
  for (int32_t i = 0; i < o.n_layer; ++i) {
    const std::string b = absl::StrCat("blk.", i, ".");
    vector(b + "attn_norm.weight", o.n_embd, 1.0f, 0.1f);
    matrix(b + "attn_q.weight", o.n_embd, o.n_embd);
    matrix(b + "attn_k.weight", o.n_embd, kv_dim);
    matrix(b + "attn_v.weight", o.n_embd, kv_dim);
    if (o.arch == "qwen2") {
      vector(b + "attn_q.bias", o.n_embd, 0.0f, 0.1f);
      vector(b + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      vector(b + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    matrix(b + "attn_output.weight", o.n_embd, o.n_embd);
    vector(b + "ffn_norm.weight", o.n_embd, 1.0f, 0.1f);
    matrix(b + "ffn_gate.weight", o.n_embd, o.n_ff);
    matrix(b + "ffn_up.weight", o.n_embd, o.n_ff);
    matrix(b + "ffn_down.weight", o.n_ff, o.n_embd);
  }
  return w.WriteFile(path);
}

}  // namespace tandem::engine
