// The CUDA kernel tests' fixture and helpers (cuda_kernels_test.cc,
// cuda_products_test.cc): a stream on device 0 or a skip (a failure when
// TANDEM_REQUIRE_CUDA=1, which scripts/gpu_check.sh sets, so a GPU run
// cannot pass by skipping), seeded random inputs, copies up and down.
#ifndef TANDEM_TESTS_ENGINE_CUDA_CUDA_TEST_UTIL_H_
#define TANDEM_TESTS_ENGINE_CUDA_CUDA_TEST_UTIL_H_

#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cuda {

inline bool CudaRequired() {
  const char* v = std::getenv("TANDEM_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<int> count = DeviceCount();
    if (!count.ok()) {
      if (CudaRequired()) FAIL() << "TANDEM_REQUIRE_CUDA=1: " << count.status().message();
      GTEST_SKIP() << count.status().message();
    }
    absl::StatusOr<Stream> stream = Stream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_.emplace(std::move(*stream));
  }

  std::vector<float> Random(size_t n, float scale = 1.0f) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }

  // A device copy of `bytes` host bytes.
  DeviceBuffer Up(const void* host, size_t bytes) {
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(b->Upload(*stream_, host, bytes).ok());
    return std::move(*b);
  }
  template <typename T>
  DeviceBuffer Up(const std::vector<T>& v) {
    return Up(v.data(), v.size() * sizeof(T));
  }
  // Queued behind the kernels on the same stream; read after the sync.
  template <typename T>
  std::vector<T> Down(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(b.Download(*stream_, v.data(), n * sizeof(T)).ok());
    EXPECT_TRUE(stream_->Synchronize().ok());
    return v;
  }

  std::mt19937 rng_{20261124};
  std::optional<Stream> stream_;
};

inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0f, std::abs(want[i]))) << "at " << i;
  }
}

// Weights of `type` from random f32 values, as GGUF would store them.
inline std::vector<uint8_t> Encode(GgmlType type, const std::vector<float>& values) {
  std::vector<uint8_t> bytes;
  if (type == GgmlType::kF32) {
    bytes.resize(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else if (GgmlIsQuantized(type)) {
    // The project's quantizers; blocks never straddle rows (cols is a
    // multiple of the block size), so the matrix quantizes as one long row.
    const auto n = static_cast<int64_t>(values.size());
    bytes.resize(GgmlRowBytes(type, n));
    QuantizeRow(type, values.data(), bytes.data(), n);
  } else {
    bytes.resize(values.size() * 2);
    uint16_t* out = reinterpret_cast<uint16_t*>(bytes.data());
    for (size_t i = 0; i < values.size(); ++i) {
      out[i] = type == GgmlType::kF16 ? Fp32ToFp16(values[i]) : Fp32ToBf16(values[i]);
    }
  }
  return bytes;
}
}  // namespace tandem::engine::cuda

#endif  // TANDEM_TESTS_ENGINE_CUDA_CUDA_TEST_UTIL_H_
