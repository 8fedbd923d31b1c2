// tandem-picker-bench: the router's pick alone (gateway/routing/worker_picker.h):
// a LinearCost over --workers workers, as KvRouter::Route ranks them. Each
// pick's base costs are one of 64 drawn overlap patterns of a
// --prompt-blocks prompt (a quarter of the workers hold its system prompt,
// an eighth a drawn longer prefix, the rest nothing), so costs tie as they
// do at a fleet whose workers share prefixes, and --held picks stay in
// flight with drawn tokens, so loads differ. Prints ns a pick and a worker,
// and appends one JSON line to --out. Seeded; it reports, and never fails
// on speed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "gateway/routing/worker_picker.h"

int main(int argc, char** argv) {
  using tandem::gateway::WorkerPicker;
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "workers", .default_value = "1000", .help = "workers ranked a pick, 1..8191"},
      {.name = "picks", .default_value = "200000", .help = "picks timed"},
      {.name = "held", .default_value = "300", .help = "picks kept in flight throughout"},
      {.name = "prompt-blocks", .default_value = "256", .help = "blocks of a prompt, 1..65536"},
      {.name = "seed", .default_value = "1", .help = "the seed of the drawn costs and loads"},
      {.name = "out", .help = "file to append the JSON line to"},
  };
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-picker-bench", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  auto workers = args->IntInRange("workers", 1, 8191);
  auto picks = args->IntInRange("picks", 1, 1 << 30);
  auto held_picks = args->IntInRange("held", 0, 1 << 20);
  auto blocks = args->IntInRange("prompt-blocks", 1, 65536);
  auto seed = args->IntInRange("seed", 0, 1 << 30);
  for (const absl::Status& s :
       {workers.status(), picks.status(), held_picks.status(), blocks.status(), seed.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-picker-bench: " << s.message() << "\n";
      return 2;
    }
  }
  std::mt19937_64 rng(static_cast<uint64_t>(*seed));
  std::vector<std::string> addresses;
  for (int32_t i = 0; i < *workers; ++i) addresses.push_back(absl::StrCat("worker-", i));
  WorkerPicker picker(addresses);

  // The router's weights (KvRouterOptions' defaults: 1 an uncached block,
  // 1 a block of load) and block size.
  constexpr int64_t kBlockSize = 16;
  const int64_t prompt_tokens = kBlockSize * *blocks;
  const int32_t system_blocks = std::max(1, *blocks / 4);
  std::vector<std::vector<double>> bases(64, std::vector<double>(static_cast<size_t>(*workers)));
  for (std::vector<double>& base : bases) {
    const auto longer = static_cast<int32_t>(
        system_blocks + rng() % static_cast<uint64_t>(*blocks - system_blocks + 1));
    for (double& b : base) {
      const uint64_t draw = rng() % 8;
      const int32_t overlap = draw == 0 ? longer : draw <= 2 ? system_blocks : 0;
      b = static_cast<double>(*blocks - overlap);
    }
  }
  std::vector<WorkerPicker::Pick> held;
  for (int32_t i = 0; i < *held_picks; ++i) {
    held.push_back(
        picker.Acquire({}, static_cast<int64_t>(rng() % static_cast<uint64_t>(prompt_tokens))));
  }
  const std::vector<int> exclude;
  const WorkerPicker::Charge charge = [&](int) { return prompt_tokens; };
  int64_t valid = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int32_t p = 0; p < *picks; ++p) {
    const WorkerPicker::LinearCost cost{.base = bases[static_cast<size_t>(p) % bases.size()],
                                        .beyond = static_cast<double>(*blocks),
                                        .per_token = 1,
                                        .token_divisor = static_cast<double>(kBlockSize)};
    valid += picker.Acquire(exclude, charge, cost).valid();
  }
  const double pick_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      *picks;

  std::cout << absl::StrFormat(
      "picker: %d workers, %d picks held, %d-block prompts: %.1f ns a pick (%.2f ns a worker)\n",
      *workers, *held_picks, *blocks, pick_ns, pick_ns / *workers);
  if (args->IsSet("out")) {
    std::ofstream out(args->String("out"), std::ios::app);
    out << absl::StrFormat(
        "{\"bench\":\"picker\",\"workers\":%d,\"held\":%d,\"prompt_blocks\":%d,\"picks\":%d,"
        "\"pick_ns\":%.1f,\"worker_ns\":%.3f}\n",
        *workers, *held_picks, *blocks, *picks, pick_ns, pick_ns / *workers);
  }
  return valid == *picks ? 0 : 1;
}
