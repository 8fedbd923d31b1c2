// tandem-prefix-pull-bench: what pulling a prompt's prefix from another
// prefill worker costs against computing it, on two running prefill workers
// (bench/prefix_pull.sh starts them). Each repeat takes a fresh seeded
// prefix of --prefix-tokens ids plus a --question-tokens question and times
// the target worker's Prefill call (client wall time) three ways:
//   compute: the target has nothing cached and computes the whole prompt;
//   pull:    the holder has the prefix cached (warmed by a Prefill there) and
//            the target is told to pull it (ExportPrefix + FetchKv), then
//            computes the question;
//   local:   the target has the prefix cached itself (the best case).
// Prints medians and one JSON line (appended to --out). Reports; never fails
// on speed.
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/load_stats.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "rpc/status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::bench {
namespace {

struct Worker {
  std::string address;
  std::unique_ptr<v1::Prefill::Stub> stub;
};

// Runs a Prefill, releases its lease, and returns the call's wall seconds.
absl::StatusOr<double> TimedPrefill(Worker& w, const std::vector<int32_t>& prompt,
                                    const std::string& holder, int32_t holder_blocks,
                                    int32_t* cached) {
  v1::PrefillRequest req;
  req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  req.set_prefix_holder(holder);
  req.set_prefix_blocks(holder_blocks);
  v1::PrefillResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  const absl::Time start = absl::Now();
  const grpc::Status s = w.stub->Prefill(&ctx, req, &resp);
  const double took = absl::ToDoubleSeconds(absl::Now() - start);
  if (!s.ok()) return rpc::FromGrpcStatus(s, "Prefill on " + w.address);
  if (cached != nullptr) *cached = resp.cached_prompt_tokens();
  grpc::ClientContext rctx;
  v1::ReleaseKvRequest release;
  release.set_lease_id(resp.lease_id());
  release.set_ok(true);
  v1::ReleaseKvResponse released;
  (void)w.stub->ReleaseKv(&rctx, release, &released);
  return took;
}

std::vector<int32_t> Ids(std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<int32_t> id(3, 255);  // inside any model's vocabulary
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = id(rng);
  return out;
}

int Run(const common::Args& args) {
  auto flag = [&](const char* name, int lo, int hi) {
    absl::StatusOr<int32_t> v = args.IntInRange(name, lo, hi);
    if (!v.ok()) {
      std::cerr << "tandem-prefix-pull-bench: " << v.status().message() << "\n";
      std::exit(2);
    }
    return *v;
  };
  const int prefix_tokens = flag("prefix-tokens", 16, 1 << 20);
  const int question_tokens = flag("question-tokens", 1, 1 << 20);
  const int repeats = flag("repeats", 1, 1000);
  const int block_size = flag("block-size", 1, 4096);
  Worker holder{args.String("holder"), nullptr}, target{args.String("target"), nullptr};
  for (Worker* w : {&holder, &target}) {
    w->stub = v1::Prefill::NewStub(
        grpc::CreateChannel(w->address, grpc::InsecureChannelCredentials()));
  }
  const int32_t blocks = prefix_tokens / block_size;
  std::mt19937_64 rng(1);
  std::vector<double> compute, pull, local;
  int32_t pulled_cached = 0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<int32_t> prefix = Ids(rng, prefix_tokens);
    prefix[0] = 1;
    auto prompt = [&](int salt) {
      std::vector<int32_t> p = prefix;
      std::mt19937_64 q(static_cast<uint64_t>(r) * 1000 + salt);
      for (int32_t t : Ids(q, question_tokens)) p.push_back(t);
      return p;
    };
    // The target computes the whole prompt (its first sight of the prefix).
    absl::StatusOr<double> c = TimedPrefill(target, prompt(1), "", 0, nullptr);
    // Another fresh prefix, cached on the holder only, pulled by the target.
    std::vector<int32_t> saved = prefix;
    prefix = Ids(rng, prefix_tokens);
    prefix[0] = 1;
    absl::StatusOr<double> warm = TimedPrefill(holder, prompt(2), "", 0, nullptr);
    absl::StatusOr<double> p = TimedPrefill(target, prompt(3), holder.address, blocks,
                                            &pulled_cached);
    // The target's own cache: the first prefix again, another question.
    prefix = saved;
    absl::StatusOr<double> l = TimedPrefill(target, prompt(4), "", 0, nullptr);
    for (const absl::StatusOr<double>* s : {&c, &warm, &p, &l}) {
      if (!s->ok()) {
        std::cerr << "tandem-prefix-pull-bench: " << s->status() << "\n";
        return 1;
      }
    }
    compute.push_back(*c);
    pull.push_back(*p);
    local.push_back(*l);
  }
  const double c50 = Percentile(compute, 50), p50 = Percentile(pull, 50),
               l50 = Percentile(local, 50);
  std::cout << absl::StrFormat(
      "prefix %d tokens + question %d, %d repeats (medians of the target's Prefill call):\n"
      "  compute the prefix    %8.1f ms\n"
      "  pull it from a peer   %8.1f ms  (%d prompt tokens not computed)\n"
      "  local prefix cache    %8.1f ms\n",
      prefix_tokens, question_tokens, repeats, c50 * 1e3, p50 * 1e3, pulled_cached, l50 * 1e3);
  const std::string json = absl::StrCat(
      "{\"bench\": \"prefix_pull\", \"prefix_tokens\": ", prefix_tokens,
      ", \"question_tokens\": ", question_tokens, ", \"repeats\": ", repeats,
      ", \"compute_s\": ", c50, ", \"pull_s\": ", p50, ", \"local_s\": ", l50,
      ", \"pulled_cached_tokens\": ", pulled_cached, "}");
  std::cout << json << "\n";
  if (!args.String("out").empty()) {
    std::ofstream(args.String("out"), std::ios::app) << json << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "holder", .help = "prefill worker that caches the prefix", .required = true},
      {.name = "target", .help = "prefill worker that computes or pulls it", .required = true},
      {.name = "prefix-tokens", .default_value = "2000", .help = "shared prefix length"},
      {.name = "question-tokens", .default_value = "50", .help = "tokens after the prefix"},
      {.name = "block-size", .default_value = "16", .help = "the workers' KV block size"},
      {.name = "repeats", .default_value = "3", .help = "fresh prefixes timed"},
      {.name = "out", .help = "file to append the JSON line to"},
  };
  int exit_code = 0;
  std::optional<tandem::common::Args> args = tandem::common::ParseFlagsOrExit(
      "tandem-prefix-pull-bench", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  return tandem::bench::Run(*args);
}
