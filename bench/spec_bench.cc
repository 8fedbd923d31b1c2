// tandem-spec-bench: decode tokens/s per sequence with and without
// speculation (prompt lookup, or a --draft-model's proposals), on one
// model, for
//   - an edit-style workload (the prompt holds a passage and asks for it
//     again: prompt lookup's case),
//   - free generation from a short prompt (little to look up: the adaptive k
//     must keep the loss small), and
//   - a reply that has begun to repeat the passage ("continue"),
// at the batch sizes asked for. Both runs of a pair use the same engine
// options but speculation, in the same process; the outputs are checked to
// be token-for-token equal. With a draft, the draft's own decode speed is
// measured too, and the speedup Leviathan et al.'s analysis predicts from
// the measured acceptance rate and the draft/model step-time ratio is
// printed beside the measured one. Prints a table, then one JSON line (also
// appended to --out). It reports figures; it never fails on speed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/model/model.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kPassage[] =
    "The lighthouse keeper climbed the winding stairs every evening, counting the steps "
    "and listening to the sea below. At the top he lit the lamp, wiped the glass and "
    "watched the beam sweep across the water. Ships passed in the dark, and each one "
    "blinked its thanks before it went on its way. In the morning he walked down again, "
    "made tea, and wrote in his book how many ships had gone by.";

struct Run {
  double tokens_per_s = 0;  // per sequence, decode only
  std::vector<std::vector<int32_t>> ids;
  // Per sequence and token: the logprob gap between the two most likely
  // tokens (a near tie decides differently when a row is computed in a
  // chunk instead of alone).
  std::vector<std::vector<float>> gaps;
  int64_t proposed = 0;
  int64_t accepted = 0;
  // Per sequence and decode step: the proposals made and kept (0, 0 for a
  // step without proposals).
  std::vector<std::pair<int32_t, int32_t>> steps;
};

// The engine's KV block size (EngineOptions' default, which Decode keeps).
constexpr int32_t kBlockSize = 16;

// Leviathan et al.: with proposals each kept with probability alpha, k of
// them keep alpha (1 - alpha^k) / (1 - alpha) on average and the step
// yields one token more.
double KeptMean(double alpha, int32_t k) {
  return alpha >= 1.0 ? k : alpha * (1.0 - std::pow(alpha, k)) / (1.0 - alpha);
}

// The alpha under which the steps' proposals would keep as many as they
// did (bisection: KeptMean grows with alpha).
double FitAlpha(const std::vector<std::pair<int32_t, int32_t>>& steps) {
  double kept = 0;
  for (const auto& [k, a] : steps) kept += a;
  double lo = 0.0;
  double hi = 1.0;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    double expected = 0;
    for (const auto& [k, a] : steps) expected += k > 0 ? KeptMean(mid, k) : 0.0;
    (expected < kept ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

// The speedup those steps predict: each yields 1 + KeptMean tokens and
// costs a model step plus c per draft pass (k of them when proposing; a
// step without proposals puts its draft token off until a block fills,
// when one pass computes the block's: c / block_size). Leviathan et al. take
// the model's step over 1 + k tokens to cost what one token's does (`v` =
// 1: bound by reading the weights); `v` > 1 is what a step of
// `v_rows` rows measured against one row, taken as growing linearly with
// the rows in between.
double PredictedSpeedup(const std::vector<std::pair<int32_t, int32_t>>& steps, double alpha,
                        double c, double v = 1.0, int32_t v_rows = 2) {
  double tokens = 0;
  double cost = 0;
  for (const auto& [k, a] : steps) {
    tokens += 1.0 + (k > 0 ? KeptMean(alpha, k) : 0.0);
    cost += 1.0 + (v - 1.0) * k / std::max(1, v_rows - 1) + (k > 0 ? c * k : c / kBlockSize);
  }
  return cost == 0 ? 0.0 : tokens / cost;
}

// `draft`: speculate with it (null: prompt lookup when `speculate`).
absl::StatusOr<Run> Decode(const engine::Model& model, const engine::Model* draft,
                           const std::string& prompt, int32_t batch, int32_t tokens, bool speculate,
                           int32_t k, int32_t threads, double min_gain = 1.0) {
  engine::EngineOptions options;
  options.speculation.min_gain = min_gain;
  options.speculation.prompt_lookup = speculate && draft == nullptr;
  options.speculation.draft = speculate && draft != nullptr;
  options.speculation.k = k;
  engine::DraftModel d;
  if (speculate && draft != nullptr) {
    d = {.model = draft, .backend = engine::MakeCpuBackend({.threads = threads})};
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::Engine::Create(model, engine::MakeCpuBackend({.threads = threads}),
                                          options, std::move(d)));
  std::vector<int64_t> ids;
  for (int32_t i = 0; i < batch; ++i) {
    engine::GenerationRequest r;
    r.prompt = model.tokenizer().Encode(prompt, {.add_special = true, .parse_special = false});
    r.max_tokens = tokens;
    r.ignore_eos = true;
    r.top_logprobs = 2;
    ASSIGN_OR_RETURN(int64_t id, eng->Add(std::move(r)));
    ids.push_back(id);
  }
  Run run;
  run.ids.resize(static_cast<size_t>(batch));
  run.gaps.resize(static_cast<size_t>(batch));
  // Timed from the step after every sequence has its first token.
  int32_t firsts = 0;
  bool timing = false;
  Clock::time_point start;
  int64_t decoded = 0;
  while (eng->HasWork()) {
    ASSIGN_OR_RETURN(engine::StepOutput out, eng->Step());
    std::vector<size_t> stepped;
    for (const engine::TokenEvent& e : out.tokens) {
      const size_t i = std::find(ids.begin(), ids.end(), e.seq_id) - ids.begin();
      if (run.ids[i].empty()) ++firsts;
      if (timing) ++decoded;
      // A sequence's first event of a step carries the step's proposals.
      if (timing && std::find(stepped.begin(), stepped.end(), i) == stepped.end()) {
        stepped.push_back(i);
        run.steps.emplace_back(e.spec_proposed, e.spec_accepted);
      }
      run.ids[i].push_back(e.token.id);
      run.gaps[i].push_back(e.token.top.size() >= 2 ? e.token.top[0].logprob - e.token.top[1].logprob
                                                    : 1e9f);
    }
    if (!timing && firsts == batch) {
      timing = true;
      start = Clock::now();
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  run.tokens_per_s = static_cast<double>(decoded) / batch / seconds;
  run.proposed = eng->stats().spec_proposed;
  run.accepted = eng->stats().spec_accepted;
  return run;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  using tandem::common::FlagSpec;
  const std::vector<FlagSpec> specs = {
      {.name = "model",
       .default_value = "../shared/models/stories260K.gguf",
       .help = "the GGUF model"},
      {.name = "tokens", .default_value = "256", .help = "tokens generated per sequence"},
      {.name = "batches", .default_value = "1,8", .help = "batch sizes, comma-separated"},
      {.name = "spec-k", .default_value = "4", .help = "most tokens proposed per step"},
      {.name = "spec-min-gain",
       .default_value = "1",
       .help = "the engine's --spec-min-gain: draft proposals only where they are expected "
               "to pay this much; 0 = always"},
      {.name = "draft-model",
       .default_value = "",
       .help = "speculate with this draft model's proposals instead of prompt lookup"},
      {.name = "threads", .default_value = "2", .help = "compute threads"},
      {.name = "out", .default_value = "", .help = "append the JSON line to this file"},
      {.name = "print-prompt",
       .default_value = "",
       .help =
           "print the prompt of this workload (edit, free or continue) and exit, so that another "
           "engine can be given the same text (bench/spec_vs_llama.sh)"},
  };
  absl::StatusOr<tandem::common::Args> args =
      tandem::common::Args::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args.ok()) {
    std::cerr << "tandem-spec-bench: " << args.status().message() << "\n";
    return 2;
  }
  const std::string edit = absl::StrCat(tandem::bench::kPassage, "\n\nThe same, again:\n\n",
                                        tandem::bench::kPassage, "\n\n");
  struct Workload {
    const char* name;
    std::string prompt;
  };
  // "continue": the passage, then the request to repeat it and the reply's
  // first words, so the text to copy is the passage itself (a model that
  // copies, given "edit", may as well repeat the request, which also occurs
  // in its prompt).
  const std::string cont =
      absl::StrCat(tandem::bench::kPassage, "\n\nThe same, again:\n\nThe lighthouse keeper");
  const Workload workloads[] = {{"edit", edit}, {"free", "Once upon a time"}, {"continue", cont}};
  if (const std::string print = args->String("print-prompt"); !print.empty()) {
    for (const Workload& w : workloads) {
      if (print == w.name) {
        std::cout << w.prompt;
        return 0;
      }
    }
    std::cerr << "tandem-spec-bench: --print-prompt: \"" << print
              << "\" is not edit, free or continue\n";
    return 2;
  }
  auto model = tandem::engine::Model::Load(args->String("model"));
  if (!model.ok()) {
    std::cerr << "tandem-spec-bench: " << model.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<tandem::engine::Model> draft;
  if (const std::string path = args->String("draft-model"); !path.empty()) {
    auto d = tandem::engine::Model::Load(path);
    if (!d.ok()) {
      std::cerr << "tandem-spec-bench: --draft-model: " << d.status().message() << "\n";
      return 1;
    }
    draft = std::move(*d);
  }
  const int32_t tokens = *args->IntInRange("tokens", 8, 1 << 20);
  const absl::StatusOr<double> min_gain_flag = args->Double("spec-min-gain");
  if (!min_gain_flag.ok() || *min_gain_flag < 0) {
    std::cerr << "tandem-spec-bench: --spec-min-gain must be a number >= 0\n";
    return 2;
  }
  const double min_gain = *min_gain_flag;
  const int32_t k = *args->IntInRange("spec-k", 1, 64);
  const int32_t threads = *args->IntInRange("threads", 1, 256);
  std::cout << absl::StrFormat(
      "model: %s, draft: %s, threads %d, k %d, min gain %.2f, %d tokens per sequence\n",
      args->String("model"), draft ? args->String("draft-model") : "none (prompt lookup)", threads,
      k, min_gain, tokens);
  std::cout << absl::StrFormat(
      "| %-8s | %5s | %10s | %10s | %7s | %9s | %5s | %6s | %6s | %9s | %6s | %9s |\n", "workload",
      "batch", "plain t/s", "spec t/s", "speedup", "kept/prop", "same", "alpha", "c", "predicted",
      "v", "pred. v");
  std::string json =
      absl::StrFormat(R"({"bench":"speculation","model":"%s","draft":"%s","k":%d,"runs":[)",
                      args->String("model"), args->String("draft-model"), k);
  bool first = true;
  for (const Workload& w : workloads) {
    for (absl::string_view b : absl::StrSplit(args->String("batches"), ',')) {
      const int32_t batch = std::stoi(std::string(b));
      auto plain =
          tandem::bench::Decode(**model, nullptr, w.prompt, batch, tokens, false, k, threads);
      auto spec = tandem::bench::Decode(**model, draft.get(), w.prompt, batch, tokens, true, k,
                                        threads, min_gain);
      if (!plain.ok() || !spec.ok()) {
        std::cerr << "tandem-spec-bench: "
                  << (plain.ok() ? spec.status() : plain.status()).message() << "\n";
        return 1;
      }
      // With a draft: its step time against the model's (c), the
      // acceptance rate the steps imply (alpha), and the speedup those two
      // predict.
      double alpha = 0;
      double c = 0;
      double predicted = 0;
      double v = 0;
      double predicted_v = 0;
      if (draft) {
        auto alone =
            tandem::bench::Decode(*draft, nullptr, w.prompt, batch, tokens, false, k, threads);
        if (!alone.ok()) {
          std::cerr << "tandem-spec-bench: " << alone.status().message() << "\n";
          return 1;
        }
        c = plain->tokens_per_s / alone->tokens_per_s;
        alpha = tandem::bench::FitAlpha(spec->steps);
        predicted = tandem::bench::PredictedSpeedup(spec->steps, alpha, c);
        // The model's step over k + 1 rows against one row's: k + 1
        // sequences decoding together (each row attends to its own prompt,
        // as a verification's rows attend to one).
        auto wide = tandem::bench::Decode(**model, nullptr, w.prompt, batch * (k + 1), tokens,
                                          false, k, threads);
        if (!wide.ok()) {
          std::cerr << "tandem-spec-bench: " << wide.status().message() << "\n";
          return 1;
        }
        v = plain->tokens_per_s / wide->tokens_per_s;
        predicted_v = tandem::bench::PredictedSpeedup(spec->steps, alpha, c, v, k + 1);
      }
      const bool same = plain->ids == spec->ids;
      if (!same) {
        // Where the streams part, and how close the plain run's two best
        // tokens were there.
        for (size_t q = 0; q < plain->ids.size(); ++q) {
          const auto& a = plain->ids[q];
          const auto& b = spec->ids[q];
          size_t t = 0;
          while (t < a.size() && t < b.size() && a[t] == b[t]) ++t;
          if (t < a.size()) {
            std::cout << absl::StrFormat(
                "  %s batch %d: sequence %d differs from token %d, where the plain run's top-2 "
                "logprob gap was %.2e\n",
                w.name, batch, q, t, plain->gaps[q][t]);
            break;
          }
        }
      }
      const double speedup = spec->tokens_per_s / plain->tokens_per_s;
      const double rate = spec->proposed == 0 ? 0.0
                                              : static_cast<double>(spec->accepted) /
                                                    static_cast<double>(spec->proposed);
      std::cout << absl::StrFormat(
          "| %-8s | %5d | %10.1f | %10.1f | %6.2fx | %9.2f | %5s | %6.3f | %6.3f | %8.2fx | %6.2f "
          "| %8.2fx |\n",
          w.name, batch, plain->tokens_per_s, spec->tokens_per_s, speedup, rate,
          same ? "yes" : "NO", alpha, c, predicted, v, predicted_v);
      absl::StrAppendFormat(
          &json,
          R"(%s{"workload":"%s","batch":%d,"plain_tps":%.2f,"spec_tps":%.2f,"speedup":%.3f,)"
          R"("proposed":%d,"accepted":%d,"same_output":%s,"alpha":%.4f,"c":%.4f,)"
          R"("predicted_speedup":%.3f,"v":%.3f,"predicted_speedup_v":%.3f})",
          first ? "" : ",", w.name, batch, plain->tokens_per_s, spec->tokens_per_s, speedup,
          spec->proposed, spec->accepted, same ? "true" : "false", alpha, c, predicted, v,
          predicted_v);
      first = false;
    }
  }
  json += "]}";
  std::cout << json << "\n";
  const std::string out = args->String("out");
  if (!out.empty()) std::ofstream(out, std::ios::app) << json << "\n";
  return 0;
}
