#include "bench/fleet_oracle.h"

namespace tandem::bench {
namespace {

std::vector<uint64_t> Lows(
    const google::protobuf::RepeatedPtrField<tandem::v1::BlockHashProto>& hashes) {
  std::vector<uint64_t> lows;
  lows.reserve(static_cast<size_t>(hashes.size()));
  for (const auto& h : hashes) lows.push_back(h.low());
  return lows;
}

}  // namespace

FleetOracle::FleetOracle(int workers, int32_t prompt_blocks, int32_t block_size)
    : workers_(workers),
      prompt_blocks_(prompt_blocks),
      block_size_(block_size),
      holders_(workers) {}

void FleetOracle::Begin(int worker, const tandem::v1::BlockEventBatch& snapshot) {
  holders_.Change(worker, Lows(snapshot.stored()), {});
}

void FleetOracle::LogRestart(int worker, const tandem::v1::BlockEventBatch& snapshot) {
  log_.emplace_back(Change{.worker = worker, .stored = {}, .removed = Lows(snapshot.stored())});
}

void FleetOracle::LogChange(int worker, const tandem::v1::BlockEventBatch& batch) {
  log_.emplace_back(
      Change{.worker = worker, .stored = Lows(batch.stored()), .removed = Lows(batch.removed())});
}

void FleetOracle::LogRoute(std::vector<engine::BlockHash> lookup, std::vector<Load> loads,
                           int chosen, std::vector<int32_t> expected) {
  log_.emplace_back(Route{.lookup = std::move(lookup),
                          .loads = std::move(loads),
                          .chosen = chosen,
                          .expected = std::move(expected)});
}

int FleetOracle::Choose(const Route& route, const std::vector<int32_t>& held) const {
  int oracle = 0;
  double oracle_cost = 0;
  for (int i = 0; i < workers_; ++i) {
    const auto [tokens_in_flight, requests_in_flight] = route.loads[static_cast<size_t>(i)];
    const double cost = (prompt_blocks_ - held[static_cast<size_t>(i)]) +
                        static_cast<double>(tokens_in_flight) / block_size_;
    if (i == 0 || cost < oracle_cost ||
        (cost == oracle_cost &&
         requests_in_flight < route.loads[static_cast<size_t>(oracle)].second)) {
      oracle = i;
      oracle_cost = cost;
    }
  }
  return oracle;
}

FleetOracle::Score FleetOracle::Replay() {
  Score score;
  std::vector<int32_t> held;
  for (const auto& entry : log_) {
    if (const Change* c = std::get_if<Change>(&entry)) {
      holders_.Change(c->worker, c->stored, c->removed);
      continue;
    }
    const Route& route = std::get<Route>(entry);
    holders_.LeadingHeld(route.lookup, held);
    if (!route.expected.empty()) {
      for (int i = 0; i < workers_; ++i) {
        score.disagreements +=
            route.expected[static_cast<size_t>(i)] != held[static_cast<size_t>(i)];
      }
    }
    score.hit_blocks += held[static_cast<size_t>(route.chosen)];
    score.oracle_hit_blocks += held[static_cast<size_t>(Choose(route, held))];
  }
  log_.clear();
  log_.shrink_to_fit();
  return score;
}

}  // namespace tandem::bench
