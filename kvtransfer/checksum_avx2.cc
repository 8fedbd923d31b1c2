// XXH3-64 built for AVX2 from the system xxhash header (XXH_INLINE_ALL gives
// every function internal linkage here). Compiled with -mavx2; see
// checksum_impl.h for why it includes no C++ headers.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include "kvtransfer/checksum_impl.h"

namespace tandem::kvtransfer::checksum_internal {
namespace {

#define TANDEM_CHECKSUM_OPS_NAME "avx2"
#include "kvtransfer/checksum_ops.inc"
#undef TANDEM_CHECKSUM_OPS_NAME

}  // namespace

const Xxh3Ops& Avx2Ops() { return kOps; }

}  // namespace tandem::kvtransfer::checksum_internal
