// tandem-constrain-bench: what structured output costs. For one vocabulary
// (a model's GGUF, vocab-only files included, or the synthetic one) it
// measures
//   - compiling a 50-property JSON Schema (ms, median of 9);
//   - the token mask per generated token along a real JSON document
//     tokenized by that vocabulary: cold (every state computed) and warm
//     (states met before come from the mask cache), mean / p50 / p99 in us;
//   - the engine's decode step with and without a JSON Schema response
//     format, greedy and sampled, at batch 1 and 32, on a synthetic model
//     that carries the same vocabulary (so the rows, masks and sampling are
//     the real size), and the overhead in percent.
// Prints a table, then one JSON line (also written to --out). It reports
// figures; it never fails on speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "engine/backend_factory.h"
#include "engine/constrain/constraint.h"
#include "engine/constrain/json_schema.h"
#include "engine/constrain/matcher.h"
#include "engine/engine.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using engine::OutputConstraint;
namespace constrain = engine::constrain;

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Stats {
  double mean = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  s.max = v.back();
  return s;
}

std::string FiftyPropertySchema() {
  std::string s = R"({"type":"object","properties":{)";
  for (int i = 0; i < 50; ++i) {
    if (i > 0) s += ",";
    const char* type = i % 5 == 0   ? R"({"type":"string","maxLength":64})"
                       : i % 5 == 1 ? R"({"type":"integer"})"
                       : i % 5 == 2 ? R"({"type":"number"})"
                       : i % 5 == 3 ? R"({"enum":["red","green","blue"]})"
                                    : R"({"type":"array","items":{"type":"string"},"maxItems":4})";
    s += absl::StrCat("\"field_", i, "\":", type);
  }
  s += R"(},"required":["field_0","field_1","field_2","field_3","field_4"],
          "additionalProperties":false})";
  return s;
}

// A list of people: at least two, so a batch keeps decoding under the format
// (the document below has three).
constexpr char kPeopleSchema[] = R"json({
  "type": "array",
  "items": {"$ref": "#/$defs/person"},
  "minItems": 2,
  "$defs": {"person": {
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 24},
      "age": {"type": "integer"},
      "email": {"type": "string", "pattern": "[a-z]{1,12}@[a-z]{1,12}\\.(com|org)"},
      "roles": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}},
      "bio": {"type": "string"},
      "active": {"type": "boolean"}
    },
    "required": ["name", "age", "roles"],
    "additionalProperties": false}}
})json";

constexpr char kPeopleDocument[] = R"json([
  {
    "name": "Ada Lovelace",
    "age": 36,
    "email": "ada@analytical.org",
    "roles": ["admin", "user"],
    "bio": "Wrote the first published algorithm for a machine, and notes on it that run longer than the paper they annotate.",
    "active": false
  },
  {"name": "Grace Hopper", "age": 85, "roles": ["user"], "bio": "Compilers, COBOL, and a moth in a relay \u2014 \"the first actual case of bug being found\".", "active": true},
  {"name": "Alan Turing", "age": 41, "email": "alan@bletchley.com", "roles": ["guest"]}
])json";

struct Config {
  std::string vocab;
  // More vocabularies (comma-separated) whose tokens the first lacks are
  // appended (as normal tokens) until the vocabulary holds n_vocab: a
  // vocabulary of real tokens of a size no file at hand has.
  std::string vocab_extra;
  int32_t n_vocab = 0;
  int32_t n_embd = 1024;
  int32_t n_layer = 8;
  int32_t n_ff = 2816;
  std::string type = "q8_0";
  int32_t threads = 2;
  int32_t steps = 24;
  std::vector<int32_t> batches = {1, 32};
  std::string out;
};

struct MaskFigures {
  Stats cold;
  Stats warm;
  int32_t tokens = 0;
  double compile_ms = 0;
  int64_t trie_nodes = 0;
};

absl::StatusOr<MaskFigures> MeasureMasks(const engine::Tokenizer& tok) {
  MaskFigures f;
  // Compile time of a 50-property schema: text, grammar, checks.
  const OutputConstraint fifty{OutputConstraint::Kind::kJsonSchema, FiftyPropertySchema()};
  std::vector<double> compile;
  for (int i = 0; i < 9; ++i) {
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(constrain::Grammar g, constrain::CompileConstraint(fifty));
    compile.push_back(Micros(t0, Clock::now()) / 1000.0);
    (void)g;
  }
  f.compile_ms = Summarize(compile).p50;

  std::shared_ptr<const constrain::TokenVocabulary> vocab =
      constrain::TokenVocabulary::FromTokenizer(tok);
  f.trie_nodes = static_cast<int64_t>(vocab->trie().size());
  const OutputConstraint people{OutputConstraint::Kind::kJsonSchema, kPeopleSchema};
  ASSIGN_OR_RETURN(constrain::Grammar grammar, constrain::CompileConstraint(people));
  // The document as a model would write it: the longest vocabulary token
  // that matches at each point (the tokenizer's own encoding may start
  // with a word-initial space that generated text does not have).
  absl::flat_hash_map<std::string, int32_t> by_bytes;
  size_t longest = 1;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::string& b = vocab->bytes(id);
    if (b.empty()) continue;
    by_bytes.try_emplace(b, id);
    longest = std::max(longest, b.size());
  }
  std::vector<int32_t> doc;
  const std::string text = kPeopleDocument;
  for (size_t at = 0; at < text.size();) {
    size_t len = std::min(longest, text.size() - at);
    for (; len > 0; --len) {
      if (auto it = by_bytes.find(text.substr(at, len)); it != by_bytes.end()) {
        doc.push_back(it->second);
        break;
      }
    }
    if (len == 0) return absl::InternalError("the vocabulary cannot spell the document");
    at += len;
  }
  f.tokens = static_cast<int32_t>(doc.size());
  std::vector<uint64_t> mask;
  // Cold: a cache too small to keep anything. Warm: the second pass of a
  // grammar whose cache saw the first.
  for (const bool warm : {false, true}) {
    constrain::MatcherLimits limits;
    if (!warm) limits.mask_cache_bytes = 1;
    auto compiled = std::make_shared<constrain::CompiledGrammar>(grammar, vocab, limits);
    mask.assign(static_cast<size_t>(compiled->mask_words()), 0);
    std::vector<double> times;
    for (int pass = 0; pass < (warm ? 2 : 1); ++pass) {
      constrain::Matcher m(compiled);
      times.clear();
      for (size_t i = 0; i < doc.size(); ++i) {
        const auto t0 = Clock::now();
        if (!m.FillMask(mask)) return absl::InternalError("mask state overflow");
        times.push_back(Micros(t0, Clock::now()));
        const int32_t id = doc[i];
        if (((mask[id >> 6] >> (id & 63)) & 1) == 0) {
          return absl::InternalError(absl::StrCat("the document's token ", i, " ('",
                                                  tok.TokenBytes(id), "') is masked"));
        }
        if (!m.AcceptToken(id)) return absl::InternalError("document token refused");
      }
      if (!m.CanEnd()) return absl::InternalError("document incomplete under the schema");
    }
    (warm ? f.warm : f.cold) = Summarize(times);
  }
  return f;
}

struct StepFigures {
  int32_t batch = 0;
  bool sampled = false;
  double free_ms = 0;
  double constrained_ms = 0;
};

// Median decode step (ms) of `batch` sequences, all running, after their
// prefill.
absl::StatusOr<double> DecodeStep(const engine::Model& model, const Config& c, int32_t batch,
                                  bool sampled, bool constrained) {
  engine::EngineOptions options;
  options.max_running = std::max(64, batch);
  options.kv.budget_bytes = int64_t{512} << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::Engine::Create(model, engine::MakeCpuBackend({.threads = c.threads}),
                                          options));
  const std::vector<int32_t> prompt =
      model.tokenizer().Encode("Here is a list of people as JSON:", {.add_special = true,
                                                                     .parse_special = false});
  for (int32_t i = 0; i < batch; ++i) {
    engine::GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = c.steps + 8;
    r.ignore_eos = true;
    r.sampling.temperature = sampled ? 1.0f : 0.0f;
    r.sampling.seed = 100 + static_cast<uint64_t>(i);
    if (constrained) {
      r.sampling.constraint = {OutputConstraint::Kind::kJsonSchema, kPeopleSchema};
    }
    RETURN_IF_ERROR(eng->Add(std::move(r)).status());
  }
  std::vector<double> steps;
  int32_t seen_first = 0;
  while (eng->HasWork()) {
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(engine::StepOutput out, eng->Step());
    const double ms = Micros(t0, Clock::now()) / 1000.0;
    bool finished = false;
    for (const engine::TokenEvent& e : out.tokens) {
      finished |= e.finish != engine::FinishReason::kNone;
    }
    // Pure decode steps with the whole batch running.
    if (seen_first >= batch && !finished && static_cast<int32_t>(out.tokens.size()) == batch) {
      steps.push_back(ms);
    }
    seen_first += static_cast<int32_t>(out.tokens.size());
    if (finished) break;
  }
  if (steps.empty()) return absl::InternalError("no pure decode step was measured");
  return Summarize(steps).p50;
}

// `first`'s tokenizer metadata with the tokens of `extras` (comma-separated
// GGUF paths) that it lacks appended up to `n_vocab` tokens, written to
// `path`.
absl::Status MergeVocabularies(const std::string& first, const std::string& extras,
                               int32_t n_vocab, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<engine::GgufFile> a, engine::GgufFile::Open(first));
  ASSIGN_OR_RETURN(std::vector<std::string_view> a_tokens,
                   a->GetStringArray("tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(std::vector<int32_t> types, a->GetInt32Array("tokenizer.ggml.token_type"));
  std::vector<std::string> tokens(a_tokens.begin(), a_tokens.end());
  absl::flat_hash_map<std::string, int32_t> have;
  for (size_t i = 0; i < tokens.size(); ++i) have.emplace(tokens[i], static_cast<int32_t>(i));
  for (absl::string_view extra : absl::StrSplit(extras, ',')) {
    ASSIGN_OR_RETURN(std::unique_ptr<engine::GgufFile> b,
                     engine::GgufFile::Open(std::string(extra)));
    ASSIGN_OR_RETURN(std::vector<std::string_view> b_tokens,
                     b->GetStringArray("tokenizer.ggml.tokens"));
    for (std::string_view t : b_tokens) {
      if (static_cast<int32_t>(tokens.size()) >= n_vocab) break;
      if (have.emplace(std::string(t), static_cast<int32_t>(tokens.size())).second) {
        tokens.emplace_back(t);
        types.push_back(1);  // normal
      }
    }
  }
  if (static_cast<int32_t>(tokens.size()) < n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("the two vocabularies hold only ",
                                                   tokens.size(), " distinct tokens"));
  }
  engine::GgufWriter w;
  for (const std::string& key : a->Keys()) {
    if (!key.starts_with("tokenizer.") || key == "tokenizer.ggml.tokens" ||
        key == "tokenizer.ggml.token_type" || key == "tokenizer.ggml.scores") {
      continue;
    }
    ASSIGN_OR_RETURN(engine::GgufFile::EncodedValue v, a->GetEncoded(key));
    w.SetEncoded(key, v.type, v.bytes);
  }
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  if (absl::StatusOr<std::vector<float>> scores = a->GetFloatArray("tokenizer.ggml.scores");
      scores.ok()) {
    scores->resize(tokens.size(), 0.0f);
    w.SetFloat32Array("tokenizer.ggml.scores", *scores);
  }
  return w.WriteFile(path);
}

absl::Status Run(const Config& c) {
  // The synthetic model, with the vocabulary's tokenizer when one is given.
  engine::SyntheticModelOptions o;
  o.n_embd = c.n_embd;
  o.n_layer = c.n_layer;
  o.n_head = c.n_embd / 64;
  o.n_head_kv = std::max(1, o.n_head / 4);
  o.n_ff = c.n_ff;
  o.context_length = 4096;
  ASSIGN_OR_RETURN(o.type, engine::GgmlTypeFromName(c.type));
  std::string vocab_name = "synthetic";
  std::string vocab_path = c.vocab;
  if (!c.vocab_extra.empty()) {
    vocab_path = absl::StrCat("/tmp/tandem_constrain_bench_vocab_", c.n_vocab, ".gguf");
    RETURN_IF_ERROR(MergeVocabularies(c.vocab, c.vocab_extra, c.n_vocab, vocab_path));
  }
  if (!c.vocab.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<engine::GgufFile> v, engine::GgufFile::Open(vocab_path));
    ASSIGN_OR_RETURN(const uint64_t n, v->GetArrayLength("tokenizer.ggml.tokens"));
    o.n_vocab = static_cast<int32_t>(n);
    o.vocab_from = vocab_path;
    vocab_name = c.vocab.substr(c.vocab.find_last_of('/') + 1);
    if (!c.vocab_extra.empty()) {
      vocab_name += " + tokens of " + c.vocab_extra;
    }
  } else {
    o.n_vocab = 32000;
  }
  const std::string path = absl::StrCat("/tmp/tandem_constrain_bench_", o.n_vocab, "_",
                                        c.n_embd, "_", c.n_layer, "_", c.type, ".gguf");
  RETURN_IF_ERROR(engine::WriteSyntheticModel(o, path));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model, engine::Model::Load(path));
  const engine::Tokenizer& tok = model->tokenizer();

  ASSIGN_OR_RETURN(MaskFigures masks, MeasureMasks(tok));
  std::vector<StepFigures> steps;
  for (int32_t batch : c.batches) {
    for (bool sampled : {false, true}) {
      StepFigures s{.batch = batch, .sampled = sampled};
      ASSIGN_OR_RETURN(s.free_ms, DecodeStep(*model, c, batch, sampled, false));
      ASSIGN_OR_RETURN(s.constrained_ms, DecodeStep(*model, c, batch, sampled, true));
      steps.push_back(s);
    }
  }

  std::cout << absl::StrFormat("vocabulary: %s (%d tokens, %d trie nodes)\n", vocab_name,
                               tok.n_vocab(), masks.trie_nodes);
  std::cout << absl::StrFormat("model: synthetic n_embd=%d n_layer=%d n_ff=%d %s, threads %d\n",
                               c.n_embd, c.n_layer, c.n_ff, c.type, c.threads);
  std::cout << absl::StrFormat("50-property schema compile: %.2f ms\n", masks.compile_ms);
  std::cout << absl::StrFormat("mask per token over a %d-token JSON document (us):\n",
                               masks.tokens);
  std::cout << absl::StrFormat("| %-6s | %9s | %9s | %9s | %9s |\n", "cache", "mean", "p50",
                               "p99", "max");
  for (const auto& [name, s] : {std::pair{"cold", masks.cold}, std::pair{"warm", masks.warm}}) {
    std::cout << absl::StrFormat("| %-6s | %9.1f | %9.1f | %9.1f | %9.1f |\n", name, s.mean,
                                 s.p50, s.p99, s.max);
  }
  std::cout << "decode step (ms, median), free vs JSON Schema response format:\n";
  std::cout << absl::StrFormat("| %5s | %-7s | %9s | %11s | %8s |\n", "batch", "sampler",
                               "free", "constrained", "overhead");
  std::string json = absl::StrFormat(
      R"({"bench":"constrain","vocab":"%s","n_vocab":%d,"compile_50_ms":%.3f,)"
      R"("mask_cold_us":{"mean":%.2f,"p50":%.2f,"p99":%.2f},)"
      R"("mask_warm_us":{"mean":%.2f,"p50":%.2f,"p99":%.2f},"steps":[)",
      vocab_name, tok.n_vocab(), masks.compile_ms, masks.cold.mean, masks.cold.p50,
      masks.cold.p99, masks.warm.mean, masks.warm.p50, masks.warm.p99);
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepFigures& s = steps[i];
    const double overhead = 100.0 * (s.constrained_ms - s.free_ms) / s.free_ms;
    std::cout << absl::StrFormat("| %5d | %-7s | %9.2f | %11.2f | %7.1f%% |\n", s.batch,
                                 s.sampled ? "sampled" : "greedy", s.free_ms, s.constrained_ms,
                                 overhead);
    absl::StrAppendFormat(&json,
                          R"(%s{"batch":%d,"sampled":%s,"free_ms":%.3f,"constrained_ms":%.3f,)"
                          R"("overhead_pct":%.2f})",
                          i == 0 ? "" : ",", s.batch, s.sampled ? "true" : "false", s.free_ms,
                          s.constrained_ms, overhead);
  }
  json += "]}";
  std::cout << json << "\n";
  if (!c.out.empty()) std::ofstream(c.out, std::ios::app) << json << "\n";
  std::remove(path.c_str());
  if (vocab_path != c.vocab) std::remove(vocab_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  using tandem::common::FlagSpec;
  const std::vector<FlagSpec> specs = {
      {.name = "vocab", .default_value = "",
       .help = "a GGUF whose vocabulary to use (vocab-only files work); empty: synthetic 32000"},
      {.name = "vocab-extra", .default_value = "",
       .help = "more GGUF vocabularies, comma-separated: their tokens --vocab lacks are "
               "appended up to --n-vocab tokens"},
      {.name = "n-vocab", .default_value = "0",
       .help = "with --vocab-extra: the merged vocabulary's size"},
      {.name = "n-embd", .default_value = "1024", .help = "synthetic model width"},
      {.name = "n-layer", .default_value = "8", .help = "synthetic model layers"},
      {.name = "n-ff", .default_value = "2816", .help = "synthetic model feed-forward width"},
      {.name = "type", .default_value = "q8_0", .help = "synthetic model weight type"},
      {.name = "threads", .default_value = "2", .help = "compute threads"},
      {.name = "steps", .default_value = "24", .help = "decode steps measured per run"},
      {.name = "batches", .default_value = "1,32", .help = "batch sizes, comma-separated"},
      {.name = "out", .default_value = "", .help = "append the JSON line to this file"},
  };
  absl::StatusOr<tandem::common::Args> args =
      tandem::common::Args::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args.ok()) {
    std::cerr << "tandem-constrain-bench: " << args.status().message() << "\n";
    return 2;
  }
  tandem::bench::Config c;
  c.vocab = args->String("vocab");
  c.vocab_extra = args->String("vocab-extra");
  c.n_vocab = *args->IntInRange("n-vocab", 0, 1 << 22);
  c.n_embd = *args->IntInRange("n-embd", 64, 16384);
  c.n_layer = *args->IntInRange("n-layer", 1, 256);
  c.n_ff = *args->IntInRange("n-ff", 64, 65536);
  c.type = args->String("type");
  c.threads = *args->IntInRange("threads", 1, 256);
  c.steps = *args->IntInRange("steps", 2, 100000);
  c.batches.clear();
  for (absl::string_view b : absl::StrSplit(args->String("batches"), ',')) {
    c.batches.push_back(std::stoi(std::string(b)));
  }
  c.out = args->String("out");
  absl::Status s = tandem::bench::Run(c);
  if (!s.ok()) {
    std::cerr << "tandem-constrain-bench: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
