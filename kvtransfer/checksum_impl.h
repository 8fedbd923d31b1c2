// Internal to kvtransfer/checksum: one XXH3-64 implementation as a table of
// functions over an opaque state, so each can be compiled for its own
// instruction set (checksum_avx2.cc is built with -mavx2 and includes no C++
// headers, so none of its inline code can stand in for the baseline's).
#ifndef TANDEM_KVTRANSFER_CHECKSUM_IMPL_H_
#define TANDEM_KVTRANSFER_CHECKSUM_IMPL_H_

#include <stddef.h>
#include <stdint.h>

namespace tandem::kvtransfer::checksum_internal {

struct Xxh3Ops {
  const char* name;
  void* (*create)();  // a reset state, or nullptr when out of memory
  void (*destroy)(void* state);
  void (*update)(void* state, const void* data, size_t size);
  uint64_t (*digest)(const void* state);
  uint64_t (*oneshot)(const void* data, size_t size);
};

// Defined in checksum_avx2.cc; only called where the CPU and OS allow AVX2.
const Xxh3Ops& Avx2Ops();

}  // namespace tandem::kvtransfer::checksum_internal

#endif  // TANDEM_KVTRANSFER_CHECKSUM_IMPL_H_
