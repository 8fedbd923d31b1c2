// XXH3-64, the KV block checksum, over bytes that may arrive in pieces. It
// runs on the widest vector unit the CPU and OS allow: AVX2 where present
// (compiled here from the system xxhash header), else the system libxxhash
// (SSE2 on x86-64). XXH3's digests do not depend on the vector unit, so a
// block checksummed on one machine verifies on any other. At transfer
// speeds the checksum is a full pass over every block on both ends, so its
// speed is the transport's. Thread-compatible (ChecksumOf: thread-safe).
#ifndef TANDEM_KVTRANSFER_CHECKSUM_H_
#define TANDEM_KVTRANSFER_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem::kvtransfer {

// A running checksum: Update with each piece in order, then Digest.
// Digest() of pieces equals ChecksumOf() of their concatenation.
class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(Checksum&& other) noexcept;
  Checksum& operator=(Checksum&& other) noexcept;
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;

  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // the implementation's XXH3 state
};

uint64_t ChecksumOf(const void* data, size_t size);

// The implementation in use: "avx2" or "libxxhash".
std::string_view ChecksumImplementation();

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_CHECKSUM_H_
