#include "kvtransfer/checksum.h"

#include <xxhash.h>

#include <utility>

#include "common/check.h"
#include "kvtransfer/checksum_impl.h"

namespace tandem::kvtransfer {
namespace {

using checksum_internal::Xxh3Ops;

#define TANDEM_CHECKSUM_OPS_NAME "libxxhash"
#include "kvtransfer/checksum_ops.inc"
#undef TANDEM_CHECKSUM_OPS_NAME

// Chosen once. __builtin_cpu_supports("avx2") also checks that the OS saves
// the AVX registers (XCR0), so a VM that hides AVX gets the baseline.
const Xxh3Ops& Ops() {
  static const Xxh3Ops& ops = [&]() -> const Xxh3Ops& {
#if defined(TANDEM_CHECKSUM_AVX2)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) return checksum_internal::Avx2Ops();
#endif
    return kOps;
  }();
  return ops;
}

}  // namespace

Checksum::Checksum() : state_(Ops().create()) {
  TANDEM_CHECK(state_ != nullptr, "XXH3 state allocation");
}

Checksum::~Checksum() {
  if (state_ != nullptr) Ops().destroy(state_);
}

Checksum::Checksum(Checksum&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}

Checksum& Checksum::operator=(Checksum&& other) noexcept {
  std::swap(state_, other.state_);
  return *this;
}

void Checksum::Update(const void* data, size_t size) {
  TANDEM_CHECK(state_ != nullptr, "Checksum used after move");
  Ops().update(state_, data, size);
}

uint64_t Checksum::Digest() const {
  TANDEM_CHECK(state_ != nullptr, "Checksum used after move");
  return Ops().digest(state_);
}

uint64_t ChecksumOf(const void* data, size_t size) { return Ops().oneshot(data, size); }

std::string_view ChecksumImplementation() { return Ops().name; }

}  // namespace tandem::kvtransfer
