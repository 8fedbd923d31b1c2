#include "gateway/routing/reclaimer.h"

#include <new>

namespace tandem::gateway {
namespace {

// Items, or bytes, waiting in one limbo before its writer tries to advance
// the epoch: a few spills wait a little, an outgrown table not long.
constexpr size_t kAdvanceItems = 16;
constexpr size_t kAdvanceBytes = size_t{256} << 10;

}  // namespace

Reclaimer::ReadSection::ReadSection(const Reclaimer& reclaimer) : reclaimer_(reclaimer) {
  for (;;) {
    const uint64_t e = reclaimer_.epoch_.load(std::memory_order_seq_cst);
    parity_ = static_cast<int>(e & 1);
    reclaimer_.readers_[parity_].fetch_add(1, std::memory_order_seq_cst);
    // Counted under e only if the epoch is still e: an advance that saw
    // this parity's count empty must not be followed by a reader of it.
    if (reclaimer_.epoch_.load(std::memory_order_seq_cst) == e) return;
    reclaimer_.readers_[parity_].fetch_sub(1, std::memory_order_release);
  }
}

Reclaimer::ReadSection::~ReadSection() {
  reclaimer_.readers_[parity_].fetch_sub(1, std::memory_order_release);
}

void Reclaimer::TryAdvance(uint64_t from) {
  // Readers are of `from` or of the epoch before (an advance to `from`
  // waited for those of the one before that); those of the epoch before
  // share the parity of from + 1.
  if (readers_[(from + 1) & 1].load(std::memory_order_acquire) != 0) return;
  uint64_t expected = from;
  epoch_.compare_exchange_strong(expected, from + 1, std::memory_order_seq_cst);
}

void Reclaimer::Limbo::Item::Free() const {
  if (free_in != nullptr) {
    free_in(context, p, bytes);
  } else if (free == nullptr) {
    ::operator delete(p);
  } else {
    free(p, bytes);
  }
}

Reclaimer::Limbo::~Limbo() {
  for (const Item& item : items_) item.Free();
}

void Reclaimer::Limbo::Retire(void* p, size_t bytes, void (*free)(void* p, size_t bytes)) {
  Hold(Item{.p = p, .bytes = bytes, .free = free, .free_in = nullptr, .context = nullptr});
}

void Reclaimer::Limbo::Retire(void* p, size_t bytes,
                              void (*free_in)(void* context, void* p, size_t bytes),
                              void* context) {
  Hold(Item{.p = p, .bytes = bytes, .free = nullptr, .free_in = free_in, .context = context});
}

void Reclaimer::Limbo::Hold(Item item) {
  // The unlinking stores are ordered before the epoch is read: a reader
  // that enters in a later epoch cannot reach the item.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  item.epoch = reclaimer_->epoch();
  bytes_ += item.bytes;
  items_.push_back(item);
}

void Reclaimer::Limbo::FreeAllOf(const void* context) {
  std::erase_if(items_, [&](const Item& item) {
    if (item.free_in == nullptr || item.context != context) return false;
    item.Free();
    bytes_ -= item.bytes;
    return true;
  });
}

void Reclaimer::Limbo::CollectSome() {
  uint64_t e = reclaimer_->epoch();
  if (items_.front().epoch + 2 > e && (items_.size() >= kAdvanceItems || bytes_ >= kAdvanceBytes)) {
    reclaimer_->TryAdvance(e);
    e = reclaimer_->epoch();
  }
  while (!items_.empty() && items_.front().epoch + 2 <= e) {
    items_.front().Free();
    bytes_ -= items_.front().bytes;
    items_.pop_front();
  }
}

}  // namespace tandem::gateway
