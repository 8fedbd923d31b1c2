// tandem-holder-table-bench: one shard's table of the gateway's block index
// (gateway/routing/holder_table.h) alone, at the size the flags give: the
// writer's steady stream (each op stores a new key and removes the oldest,
// so the table stays as full as it was filled), then a route's reads (keys
// held, looked up). Each op's keys are loaded `--ahead` ops before, as the
// index's apply path and walk do. Prints ns an op and how full the table
// is, and appends one JSON line to --out. Seeded; it reports, and never
// fails on speed.
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "gateway/routing/holder_table.h"

namespace {

using Clock = std::chrono::steady_clock;
using tandem::gateway::HolderTable;

double NsPerOp(Clock::time_point start, int64_t ops) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
         static_cast<double>(ops);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "keys", .default_value = "1000000", .help = "keys held throughout, 1..2^30"},
      {.name = "ops", .default_value = "2000000", .help = "stores (each with a removal) timed"},
      {.name = "ahead", .default_value = "4", .help = "ops whose keys are loaded ahead, 0..64"},
      {.name = "seed", .default_value = "1", .help = "the seed of the drawn keys"},
      {.name = "out", .help = "file to append the JSON line to"},
  };
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-holder-table-bench", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  auto keys = args->IntInRange("keys", 1, 1 << 30);
  auto ops = args->IntInRange("ops", 1, 1 << 30);
  auto ahead = args->IntInRange("ahead", 0, 64);
  auto seed = args->IntInRange("seed", 0, 1 << 30);
  for (const absl::Status& s : {keys.status(), ops.status(), ahead.status(), seed.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-holder-table-bench: " << s.message() << "\n";
      return 2;
    }
  }
  std::mt19937_64 rng(static_cast<uint64_t>(*seed));
  HolderTable table;
  std::deque<HolderTable::Mixed> held;
  const Clock::time_point fill_start = Clock::now();
  for (int32_t i = 0; i < *keys; ++i) {
    held.push_back(HolderTable::MixKey(rng()));
    table.Add(held.back(), 1, 0);
  }
  const double fill_ns = NsPerOp(fill_start, *keys);
  // The growths within the filling: a fresh slot array each, every key moved.
  const HolderTable::Growths growths = table.growths();
  const double moved_ns = growths.keys_moved > 0 ? static_cast<double>(growths.nanos) /
                                                       static_cast<double>(growths.keys_moved)
                                                 : 0;
  const double growth_share =
      fill_ns > 0 ? static_cast<double>(growths.nanos) / (fill_ns * *keys) : 0;
  const double full = static_cast<double>(table.size()) / static_cast<double>(table.capacity());

  // The steady stream: the keys to store drawn first, so that the timed
  // loop does the table's work alone.
  std::vector<HolderTable::Mixed> fresh(static_cast<size_t>(*ops));
  for (HolderTable::Mixed& k : fresh) k = HolderTable::MixKey(rng());
  const auto a = static_cast<size_t>(*ahead);
  const Clock::time_point stream_start = Clock::now();
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (a > 0 && i + a < fresh.size()) {
      table.PrefetchForWrite(fresh[i + a]);
      if (a < held.size()) table.PrefetchForWrite(held[a]);
    }
    table.Add(fresh[i], 1, 0);
    held.push_back(fresh[i]);
    table.Remove(held.front(), 1, 0);
    held.pop_front();
  }
  // Each op is two changes: a store and a removal.
  const double change_ns = NsPerOp(stream_start, 2 * *ops);

  // A route's reads: held keys in a drawn order, each found.
  std::vector<HolderTable::Mixed> reads(static_cast<size_t>(*ops));
  for (HolderTable::Mixed& k : reads) k = held[rng() % held.size()];
  int64_t found = 0;
  const Clock::time_point read_start = Clock::now();
  for (size_t i = 0; i < reads.size(); ++i) {
    if (a > 0 && i + a < reads.size()) table.Prefetch(reads[i + a]);
    found += table.VisitConcurrent(
        reads[i], [](std::span<const HolderTable::Holder>) {}, [](HolderTable::Bitmap) {});
  }
  const double read_ns = NsPerOp(read_start, *ops);
  const double table_mib = static_cast<double>(table.MemoryBytes()) / (1 << 20);

  std::cout << absl::StrFormat(
      "holder table: %d keys in %d slots (%.3f full, %.1f MiB)\n"
      "  filling: %.1f ns a key; its %d growths %.1f ms (%.0f%% of it), %.1f ns a key moved\n"
      "  steady stream (a store and a removal an op, %d ahead): %.1f ns a change\n"
      "  reads of held keys: %.1f ns a read (%d of %d found)\n",
      table.size(), table.capacity(), full, table_mib, fill_ns, growths.count,
      static_cast<double>(growths.nanos) * 1e-6, 100 * growth_share, moved_ns, *ahead, change_ns,
      read_ns, found, *ops);
  if (args->IsSet("out")) {
    std::ofstream out(args->String("out"), std::ios::app);
    out << absl::StrFormat(
        "{\"bench\":\"holder_table\",\"keys\":%d,\"capacity\":%d,\"full\":%.4f,"
        "\"table_mib\":%.1f,\"ops\":%d,\"ahead\":%d,\"fill_ns\":%.1f,\"change_ns\":%.1f,"
        "\"read_ns\":%.1f,\"growths\":%d,\"growth_ms\":%.1f,\"moved_key_ns\":%.1f}\n",
        table.size(), table.capacity(), full, table_mib, *ops, *ahead, fill_ns, change_ns, read_ns,
        growths.count, static_cast<double>(growths.nanos) * 1e-6, moved_ns);
  }
  return found == *ops ? 0 : 1;
}
