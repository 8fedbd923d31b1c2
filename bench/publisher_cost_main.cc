// tandem-publisher-bench: a worker's CPU for serving its block events to G
// gateways (bench/publisher_cost.h); prints each run and the cost of one
// more subscriber, and appends one JSON line to --out. Run with --connect
// it is the subscribers' side of a run.
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/publisher_cost.h"
#include "common/flags.h"

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "subscribers",
       .default_value = "0,1,2,4,8,16",
       .help = "gateways subscribed, one run each (comma-separated)"},
      {.name = "batches", .default_value = "4000", .help = "engine steps published per run"},
      {.name = "events-per-batch",
       .default_value = "64",
       .help = "block events per step (half stored, half removed)"},
      {.name = "batches-per-second", .default_value = "500", .help = "the steps' pace"},
      {.name = "blocks-held",
       .default_value = "100000",
       .help = "the worker's pool in blocks (what each snapshot carries)"},
      {.name = "coalesce-ms",
       .default_value = "5",
       .help = "the worker's --block-events-coalesce-ms (0: a batch per step)"},
      {.name = "connect", .help = "(internal) subscribe to this address instead"},
      {.name = "last-block",
       .default_value = "0",
       .help = "(internal) read until this block is stored"},
      {.name = "out", .help = "file to append the JSON line to"},
  };
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-publisher-bench", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  std::vector<int32_t> subscribers;
  for (absl::string_view s : absl::StrSplit(args->String("subscribers"), ',')) {
    int32_t g = 0;
    if (!absl::SimpleAtoi(s, &g) || g < 0 || g > 256) {
      std::cerr << "tandem-publisher-bench: --subscribers: numbers in 0..256\n";
      return 2;
    }
    subscribers.push_back(g);
  }
  if (args->IsSet("connect")) {
    auto last = args->Int("last-block");
    if (!last.ok() || subscribers.size() != 1) return 2;
    return tandem::bench::RunSubscribers(args->String("connect"), subscribers[0], *last);
  }
  auto batches = args->IntInRange("batches", 1, 1 << 24);
  auto events = args->IntInRange("events-per-batch", 2, 1 << 16);
  auto pace = args->IntInRange("batches-per-second", 1, 100000);
  auto held = args->IntInRange("blocks-held", 1, 1 << 26);
  auto coalesce = args->IntInRange("coalesce-ms", 0, 1000);
  for (const absl::Status& s :
       {batches.status(), events.status(), pace.status(), held.status(), coalesce.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-publisher-bench: " << s.message() << "\n";
      return 2;
    }
  }
  tandem::bench::PublisherCostConfig c;
  c.subscribers = subscribers;
  c.batches = *batches;
  c.events_per_batch = *events;
  c.batches_per_second = *pace;
  c.blocks_held = *held;
  c.coalesce_ms = *coalesce;
  c.self = "/proc/self/exe";
  absl::StatusOr<tandem::bench::PublisherCostResult> r = tandem::bench::RunPublisherCost(c);
  if (!r.ok()) {
    std::cerr << "tandem-publisher-bench: " << r.status().message() << "\n";
    return 1;
  }
  for (const tandem::bench::PublisherCostRun& run : r->runs) {
    std::cout << absl::StrFormat("  G=%-3d %.2f s, worker CPU %.3f s (%.2f%% of a core)\n",
                                 run.subscribers, run.seconds, run.cpu_seconds,
                                 100 * run.cpu_seconds / run.seconds);
  }
  std::cout << absl::StrFormat(
      "publisher: %d events/s in %d steps/s, coalesced over %d ms: one more subscriber costs "
      "%.3f%% of a core (%.0f ns per event)\n",
      static_cast<int>(r->events_per_second), c.batches_per_second, c.coalesce_ms,
      100 * r->core_fraction_per_subscriber, r->ns_per_event_per_subscriber);
  if (args->IsSet("out")) {
    std::ofstream out(args->String("out"), std::ios::app);
    out << tandem::bench::PublisherCostJson(c, *r) << "\n";
  }
  return 0;
}
