#include "bench/index_writers.h"

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "gateway/routing/block_index.h"
#include "gateway/routing/holder_table.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A worker's cache: its blocks, oldest first, and the same as a set.
struct Cache {
  std::deque<uint64_t> fifo;
  absl::flat_hash_set<uint64_t> held;
};

class Blocks {
 public:
  Blocks(const WritersConfig& config, uint64_t seed) : config_(config), rng_(seed), unit_(0, 1) {}
  // A block for `worker` to store that it does not hold yet.
  uint64_t Draw(int worker, const Cache& cache) {
    for (;;) {
      uint64_t key;
      if (unit_(rng_) < config_.shared_fraction) {
        key = gateway::HolderTable::Mix(0x5a4e3dull + rng_() % config_.shared_blocks);
      } else {
        key = gateway::HolderTable::Mix((uint64_t{1} << 62) ^
                                        (static_cast<uint64_t>(worker) << 36) ^ own_++);
      }
      if (!cache.held.contains(key)) return key;
    }
  }

 private:
  const WritersConfig& config_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_;
  uint64_t own_ = 0;
};

void AddHash(google::protobuf::RepeatedPtrField<tandem::v1::BlockHashProto>* to, uint64_t key) {
  tandem::v1::BlockHashProto* h = to->Add();
  h->set_low(key);
  h->set_high(key * 31);
}

tandem::v1::BlockEventBatch NewBatch(uint64_t sequence, bool snapshot) {
  tandem::v1::BlockEventBatch b;
  b.set_epoch(1);
  b.set_sequence(sequence);
  b.set_snapshot(snapshot);
  b.set_model_fingerprint(0x5eedf1ee7ull);
  b.set_block_size(16);
  return b;
}

}  // namespace

WritersResult RunWriters(const WritersConfig& config) {
  WritersResult r;
  gateway::BlockIndex index({.max_entries = int64_t{1} << 40, .shards = config.shards});
  const auto workers = static_cast<size_t>(config.workers);
  std::vector<Cache> caches(workers);
  Blocks blocks(config, config.seed);
  // The fill, unmeasured: a snapshot of a full cache per worker.
  for (size_t w = 0; w < workers; ++w) {
    tandem::v1::BlockEventBatch snap = NewBatch(1, true);
    for (int64_t i = 0; i < config.blocks_per_worker; ++i) {
      const uint64_t key = blocks.Draw(static_cast<int>(w), caches[w]);
      caches[w].fifo.push_back(key);
      caches[w].held.insert(key);
      AddHash(snap.mutable_stored(), key);
    }
    if (index.Apply(static_cast<int>(w), snap) != gateway::BlockIndex::Applied::kApplied) {
      std::fprintf(stderr, "tandem-index-writers: a snapshot was refused\n");
      std::abort();
    }
  }
  // The measured batches, made beforehand: new blocks in, the oldest out.
  std::vector<std::vector<tandem::v1::BlockEventBatch>> batches(workers);
  for (int32_t b = 0; b < config.batches_per_worker; ++b) {
    for (size_t w = 0; w < workers; ++w) {
      tandem::v1::BlockEventBatch batch = NewBatch(static_cast<uint64_t>(b) + 2, false);
      Cache& cache = caches[w];
      for (int32_t i = 0; i < config.batch_blocks; ++i) {
        const uint64_t key = blocks.Draw(static_cast<int>(w), cache);
        cache.fifo.push_back(key);
        cache.held.insert(key);
        AddHash(batch.mutable_stored(), key);
      }
      while (static_cast<int64_t>(cache.fifo.size()) > config.blocks_per_worker) {
        const uint64_t key = cache.fifo.front();
        cache.fifo.pop_front();
        cache.held.erase(key);
        AddHash(batch.mutable_removed(), key);
      }
      r.events += batch.stored_size() + batch.removed_size();
      batches[w].push_back(std::move(batch));
    }
  }
  for (const Cache& c : caches) r.expected_entries += static_cast<int64_t>(c.held.size());

  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> cpu(static_cast<size_t>(config.threads), 0);
  std::vector<std::thread> threads;
  for (int32_t t = 0; t < config.threads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      const double c0 = ThreadCpuSeconds();
      for (int32_t b = 0; b < config.batches_per_worker; ++b) {
        for (size_t w = static_cast<size_t>(t); w < workers;
             w += static_cast<size_t>(config.threads)) {
          if (index.Apply(static_cast<int>(w), batches[w][static_cast<size_t>(b)]) !=
              gateway::BlockIndex::Applied::kApplied) {
            std::fprintf(stderr, "tandem-index-writers: a delta was refused\n");
            std::abort();
          }
        }
      }
      cpu[static_cast<size_t>(t)] = ThreadCpuSeconds() - c0;
    });
  }
  while (ready.load() < config.threads) std::this_thread::yield();
  const Clock::time_point start = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (double c : cpu) r.cpu_seconds += c;
  r.events_per_second = r.wall_seconds > 0 ? r.events / r.wall_seconds : 0;
  r.events_per_cpu_second = r.cpu_seconds > 0 ? r.events / r.cpu_seconds : 0;
  r.entries = index.entries();
  return r;
}

std::string WritersJson(const WritersConfig& c, const WritersResult& r) {
  return absl::StrFormat(
      "{\"bench\":\"index_writers\",\"workers\":%d,\"blocks_per_worker\":%d,"
      "\"batch_blocks\":%d,\"batches_per_worker\":%d,\"shared_fraction\":%.3f,"
      "\"shared_blocks\":%d,\"threads\":%d,\"shards\":%d,\"events\":%d,\"wall_seconds\":%.3f,"
      "\"cpu_seconds\":%.3f,\"events_per_second\":%.0f,\"events_per_cpu_second\":%.0f,"
      "\"entries\":%d,\"expected_entries\":%d}",
      c.workers, c.blocks_per_worker, c.batch_blocks, c.batches_per_worker, c.shared_fraction,
      c.shared_blocks, c.threads, c.shards, r.events, r.wall_seconds, r.cpu_seconds,
      r.events_per_second, r.events_per_cpu_second, r.entries, r.expected_entries);
}

}  // namespace tandem::bench
