#include "gateway/routing/kv_budget.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "rpc/metrics.h"

namespace tandem::gateway {

KvBudget::KvBudget(double overcommit, prometheus::Registry& registry)
    : overcommit_(overcommit),
      charged_gauge_(rpc::GaugeMetric(
          registry, "tandem_decode_kv_charged_tokens",
          "KV tokens (prompt + max_tokens, whole blocks) charged to requests in flight")),
      capacity_gauge_(rpc::GaugeMetric(
          registry, "tandem_decode_kv_capacity_tokens",
          "KV tokens the reachable decode workers hold at most, as they report")) {}

void KvBudget::SetCapacity(int64_t tokens, int32_t block_size) {
  absl::MutexLock lock(&mu_);
  capacity_ = std::max<int64_t>(tokens, 0);
  block_size_ = std::max(block_size, 1);
  capacity_gauge_.Set(static_cast<double>(capacity_));
}

absl::StatusOr<KvBudget::Ticket> KvBudget::TryCharge(int64_t tokens) {
  absl::MutexLock lock(&mu_);
  const int64_t need = (std::max<int64_t>(tokens, 1) + block_size_ - 1) / block_size_ * block_size_;
  const int64_t budget =
      static_cast<int64_t>(std::floor(static_cast<double>(capacity_) * overcommit_));
  if (overcommit_ > 0 && capacity_ > 0 && charged_ > 0 && charged_ + need > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "decode KV: ", charged_, " of ", budget, " tokens (", capacity_,
        " on the decode workers x --kv-overcommit ", overcommit_,
        ") are charged to requests in flight; this one needs ", need,
        " (prompt + max_tokens); retry later"));
  }
  charged_ += need;
  charged_gauge_.Set(static_cast<double>(charged_));
  return Ticket([this, need] { Return(need); });
}

void KvBudget::Return(int64_t tokens) {
  absl::MutexLock lock(&mu_);
  charged_ -= tokens;
  charged_gauge_.Set(static_cast<double>(charged_));
}

int64_t KvBudget::charged() const {
  absl::MutexLock lock(&mu_);
  return charged_;
}

}  // namespace tandem::gateway
