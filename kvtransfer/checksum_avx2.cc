// XXH3-64 built for AVX2 from the system xxhash header (XXH_INLINE_ALL gives
// every function internal linkage here). Compiled with -mavx2; see
// checksum_impl.h for why it includes no C++ headers.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include "kvtransfer/checksum_impl.h"

namespace tandem::kvtransfer::checksum_internal {
namespace {

void* Create() {
  XXH3_state_t* state = XXH3_createState();
  if (state != nullptr) XXH3_64bits_reset(state);
  return state;
}
void Destroy(void* state) { XXH3_freeState(static_cast<XXH3_state_t*>(state)); }
void Update(void* state, const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, size);
}
uint64_t Digest(const void* state) {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
}
uint64_t OneShot(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace

const Xxh3Ops& Avx2Ops() {
  static constexpr Xxh3Ops kOps = {"avx2", &Create, &Destroy, &Update, &Digest, &OneShot};
  return kOps;
}

}  // namespace tandem::kvtransfer::checksum_internal
