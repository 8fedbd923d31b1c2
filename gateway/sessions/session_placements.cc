#include "gateway/sessions/session_placements.h"

#include <algorithm>
#include <utility>

namespace tandem::gateway {

void SessionPlacements::Set(const std::string& session_id, std::vector<std::string> workers) {
  if (capacity_ <= 0) return;
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(session_id);
  if (it != entries_.end()) {
    it->second.workers = std::move(workers);
    order_.splice(order_.end(), order_, it->second.order);
    return;
  }
  if (static_cast<int64_t>(entries_.size()) >= capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(session_id);
  entries_.emplace(session_id, Entry{.workers = std::move(workers), .order = --order_.end()});
}

void SessionPlacements::Add(const std::string& session_id,
                            const std::vector<std::string>& workers) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(session_id);
  if (it == entries_.end()) return;
  for (const std::string& w : workers) {
    std::vector<std::string>& known = it->second.workers;
    if (std::find(known.begin(), known.end(), w) == known.end()) known.push_back(w);
  }
}

void SessionPlacements::Erase(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(session_id);
  if (it == entries_.end()) return;
  order_.erase(it->second.order);
  entries_.erase(it);
}

std::vector<std::string> SessionPlacements::TakeWorker(const std::string& worker) {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : order_) {
    std::vector<std::string>& workers = entries_.at(id).workers;
    auto w = std::find(workers.begin(), workers.end(), worker);
    if (w == workers.end()) continue;
    workers.erase(w);
    out.push_back(id);
  }
  return out;
}

int64_t SessionPlacements::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

std::vector<std::string> SessionPlacements::Copies(const std::string& session_id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(session_id);
  return it == entries_.end() ? std::vector<std::string>{} : it->second.workers;
}

}  // namespace tandem::gateway
