// tandem-tier-bench: what a cached prefix costs from each cache tier against
// computing it, in one process (the engine and its tiers, as a worker runs
// them, without RPCs). Each repeat takes a fresh seeded prompt of
// --prompt-tokens ids and times the first token (Add to the first sampled
// token) five ways:
//   recompute:  nothing cached;
//   device:     its blocks in the pool (the prompt ran just before);
//   host:       its blocks evicted to host RAM (another prompt of the same
//               length ran in between, on a pool that holds one prompt);
//   disk cold:  a fresh engine (a restart) on the same --disk-cache-dir,
//               with the files dropped from the page cache first;
//   disk warm:  the same with the files in the page cache.
// Then the disk tier's write throughput: --write-blocks blocks of the
// model's block size enqueued at once, until all are written (fsync'd).
// Prints medians and one JSON line (appended to --out). Reports; never fails
// on speed.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "prometheus/registry.h"
#include "worker/kv_tiers.h"

namespace tandem::bench {
namespace {

namespace fs = std::filesystem;

struct Config {
  std::string model;
  std::string dir;
  int32_t prompt_tokens = 2000;
  int32_t repeats = 3;
  int32_t threads = 2;
  int32_t write_blocks = 512;
  std::string out;
};

std::vector<int32_t> RandomPrompt(int32_t n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, n_vocab - 1);
  std::vector<int32_t> p = {1};
  while (static_cast<int32_t>(p.size()) < n) p.push_back(id(rng));
  return p;
}

// Seconds from Add to the first token, and the prompt tokens it found cached.
absl::StatusOr<double> TimeToFirstToken(engine::Engine& e, const std::vector<int32_t>& prompt,
                                        int32_t* cached) {
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 1;
  r.ignore_eos = true;
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(e.Add(r).status());
  double took = -1;
  while (e.HasWork()) {
    ASSIGN_OR_RETURN(engine::StepOutput out, e.Step());
    if (!out.tokens.empty() && took < 0) {
      took = absl::ToDoubleSeconds(absl::Now() - start);
      *cached = out.tokens.front().cached_tokens;
    }
  }
  return took;
}

absl::StatusOr<std::unique_ptr<engine::Engine>> MakeEngine(const engine::Model& model,
                                                           const Config& c,
                                                           engine::KvTierStore* tiers) {
  engine::EngineOptions o;
  o.max_context = c.prompt_tokens + 16;
  // One prompt's blocks and a little more: the next prompt evicts them all.
  const int64_t blocks = (c.prompt_tokens + 15) / 16 + 4;
  o.kv.budget_bytes = blocks * 2 * model.config().n_layer * 16 * model.config().kv_dim() * 4;
  o.tiers = tiers;
  return engine::Engine::Create(model, engine::MakeCpuBackend({.threads = c.threads}), o);
}

absl::StatusOr<std::unique_ptr<worker::TieredKvStore>> MakeTiers(const engine::Model& model,
                                                                 const Config& c,
                                                                 int64_t host_bytes,
                                                                 prometheus::Registry& registry) {
  worker::KvTierOptions o;
  o.host_budget_bytes = host_bytes;
  o.disk_dir = c.dir;
  o.disk_budget_bytes = int64_t{16} << 30;
  o.disk_queue_bytes = int64_t{1} << 30;  // every block of a prompt is written
  return worker::TieredKvStore::Create(
      o, kvtransfer::ExpectationFor(model.config(), model.fingerprint(), 16,
                                    engine::GgmlType::kF32),
      registry);
}

// Drops the directory's files from the page cache (written and synced, so
// their pages are clean): the next reads come from the device.
void DropPageCache(const std::string& dir) {
  for (const auto& f : fs::directory_iterator(dir)) {
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(const Config& c) {
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(c.model);
  if (!model.ok()) {
    std::cerr << "tandem-tier-bench: " << model.status().message() << "\n";
    return 1;
  }
  const engine::Model& m = **model;
  const int64_t block_bytes = int64_t{2} * m.config().n_layer * 16 * m.config().kv_dim() * 4;
  const int64_t prompt_bytes = (c.prompt_tokens / 16 + 1) * block_bytes;
  std::vector<double> recompute, device, host, disk_cold, disk_warm;
  int32_t cached[5] = {};
  auto fail = [](const absl::Status& s) {
    std::cerr << "tandem-tier-bench: " << s.message() << "\n";
    return 1;
  };
  for (int32_t r = 0; r < c.repeats; ++r) {
    fs::remove_all(c.dir);
    const std::vector<int32_t> prompt =
        RandomPrompt(c.prompt_tokens, m.config().n_vocab, 1000 + r);
    const std::vector<int32_t> other = RandomPrompt(c.prompt_tokens, m.config().n_vocab, 2000 + r);
    {
      prometheus::Registry registry;
      auto tiers = MakeTiers(m, c, 2 * prompt_bytes, registry);
      if (!tiers.ok()) return fail(tiers.status());
      auto e = MakeEngine(m, c, tiers->get());
      if (!e.ok()) return fail(e.status());
      absl::StatusOr<double> t = TimeToFirstToken(**e, prompt, &cached[0]);
      if (!t.ok()) return fail(t.status());
      recompute.push_back(*t);
      t = TimeToFirstToken(**e, prompt, &cached[1]);
      if (!t.ok()) return fail(t.status());
      device.push_back(*t);
      int32_t unused;
      if (absl::Status s = TimeToFirstToken(**e, other, &unused).status(); !s.ok()) {
        return fail(s);
      }
      t = TimeToFirstToken(**e, prompt, &cached[2]);
      if (!t.ok()) return fail(t.status());
      host.push_back(*t);
      (*tiers)->disk()->Flush();
    }
    DropPageCache(c.dir);
    for (int warm = 0; warm < 2; ++warm) {
      prometheus::Registry registry;
      auto tiers = MakeTiers(m, c, 0, registry);
      if (!tiers.ok()) return fail(tiers.status());
      auto e = MakeEngine(m, c, tiers->get());
      if (!e.ok()) return fail(e.status());
      absl::StatusOr<double> t = TimeToFirstToken(**e, prompt, &cached[3 + warm]);
      if (!t.ok()) return fail(t.status());
      (warm ? disk_warm : disk_cold).push_back(*t);
    }
  }

  // Write throughput: blocks of this model's size, enqueued at once.
  double write_mb_s = 0, write_blocks_s = 0;
  {
    fs::remove_all(c.dir);
    prometheus::Registry registry;
    auto tiers = MakeTiers(m, c, 0, registry);
    if (!tiers.ok()) return fail(tiers.status());
    worker::DiskTier& disk = *(*tiers)->disk();
    std::vector<uint8_t> bytes(static_cast<size_t>(block_bytes));
    std::mt19937 rng(7);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const engine::KvBlockBytes block(bytes);
    const absl::Time start = absl::Now();
    for (int32_t i = 0; i < c.write_blocks; ++i) {
      const engine::BlockHash h{.low = static_cast<uint64_t>(i) + 1, .high = 0x7e57};
      disk.Enqueue(h, {}, i, block);
    }
    disk.Flush();
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    write_blocks_s = disk.blocks() / s;
    write_mb_s = static_cast<double>(disk.bytes()) / s / 1e6;
  }
  fs::remove_all(c.dir);

  const std::string label = fs::path(c.model).filename().string();
  std::cout << absl::StrFormat(
      "%s, %d-token prompt (%d cached tokens, %.1f MB of KV), threads %d, median of %d:\n"
      "  TTFT recompute %.1f ms | device %.1f ms | host %.1f ms | disk cold %.1f ms | "
      "disk warm %.1f ms\n"
      "  disk tier writes: %.0f blocks/s, %.0f MB/s (%lld-byte blocks, fsync each)\n",
      label, c.prompt_tokens, cached[2], cached[2] / 16 * block_bytes / 1e6, c.threads,
      c.repeats, 1e3 * Median(recompute), 1e3 * Median(device), 1e3 * Median(host),
      1e3 * Median(disk_cold), 1e3 * Median(disk_warm), write_blocks_s, write_mb_s,
      static_cast<long long>(block_bytes));
  if (cached[1] == 0 || cached[2] == 0 || cached[3] == 0 || cached[4] == 0) {
    std::cout << "  (a tier run found nothing cached: cached tokens " << cached[1] << " "
              << cached[2] << " " << cached[3] << " " << cached[4] << ")\n";
  }
  if (!c.out.empty()) {
    std::ofstream(c.out, std::ios::app) << absl::StrFormat(
        "{\"bench\":\"tiers\",\"model\":\"%s\",\"prompt_tokens\":%d,\"cached_tokens\":%d,"
        "\"ttft_ms\":{\"recompute\":%.2f,\"device\":%.2f,\"host\":%.2f,\"disk_cold\":%.2f,"
        "\"disk_warm\":%.2f},\"disk_write_blocks_per_s\":%.1f,\"disk_write_mb_per_s\":%.1f}\n",
        label, c.prompt_tokens, cached[2], 1e3 * Median(recompute), 1e3 * Median(device),
        1e3 * Median(host), 1e3 * Median(disk_cold), 1e3 * Median(disk_warm), write_blocks_s,
        write_mb_s);
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  using tandem::common::Args;
  using tandem::common::FlagSpec;
  const std::vector<FlagSpec> specs = {
      {.name = "model", .help = "GGUF model file", .required = true},
      {.name = "disk-cache-dir", .default_value = "/tmp/tandem-tier-bench",
       .help = "disk tier directory (deleted before and after)"},
      {.name = "prompt-tokens", .default_value = "2000", .help = "prompt length"},
      {.name = "repeats", .default_value = "3", .help = "prompts timed (the median is printed)"},
      {.name = "threads", .default_value = "2", .help = "compute threads"},
      {.name = "write-blocks", .default_value = "512", .help = "blocks of the write test"},
      {.name = "out", .default_value = "", .help = "file to append the JSON line to"},
  };
  std::vector<std::string> argv_s(argv + 1, argv + argc);
  absl::StatusOr<Args> args = Args::Parse(argv_s, specs);
  if (!args.ok() || args->help()) {
    std::cerr << (args.ok() ? "" : std::string(args.status().message()) + "\n")
              << Args::Usage("tandem-tier-bench", specs);
    return args.ok() ? 0 : 2;
  }
  tandem::bench::Config c;
  c.model = args->String("model");
  c.dir = args->String("disk-cache-dir");
  c.out = args->String("out");
  absl::StatusOr<int32_t> prompt = args->IntInRange("prompt-tokens", 32, 1 << 20);
  absl::StatusOr<int32_t> repeats = args->IntInRange("repeats", 1, 1000);
  absl::StatusOr<int32_t> threads = args->IntInRange("threads", 1, 256);
  absl::StatusOr<int32_t> blocks = args->IntInRange("write-blocks", 1, 1 << 20);
  for (const absl::Status& s :
       {prompt.status(), repeats.status(), threads.status(), blocks.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-tier-bench: " << s.message() << "\n";
      return 2;
    }
  }
  c.prompt_tokens = *prompt;
  c.repeats = *repeats;
  c.threads = *threads;
  c.write_blocks = *blocks;
  return tandem::bench::Run(c);
}
