#include "tests/engine/test_backends.h"

#include <cstdlib>
#include <string>

#include "common/check.h"
#include "tests/engine/fake_device_backend.h"

namespace tandem::engine::testing {
namespace {

// Room for the default 256 MiB KV budget, the test models and their
// scratch; reserved, committed only as written.
constexpr int64_t kArenaBytes = int64_t{1} << 30;

}  // namespace

std::string_view TestBackendName(TestBackend backend) {
  return backend == TestBackend::kFakeDevice ? "fake-device" : "cpu";
}

TestBackend CurrentTestBackend() {
  const char* env = std::getenv("TANDEM_TEST_BACKEND");
  if (env == nullptr || std::string(env).empty() || std::string(env) == "cpu") {
    return TestBackend::kCpu;
  }
  TANDEM_CHECK(std::string(env) == "fake-device", "TANDEM_TEST_BACKEND is cpu or fake-device")
      << env;
  return TestBackend::kFakeDevice;
}

std::unique_ptr<Backend> MakeTestBackend(TestBackend kind, int threads) {
  if (kind == TestBackend::kFakeDevice) {
    return std::make_unique<FakeDeviceBackend>(kArenaBytes, CpuBackendOptions{.threads = threads});
  }
  return MakeCpuBackend({.threads = threads});
}

std::unique_ptr<Backend> MakeTestBackend(int threads) {
  return MakeTestBackend(CurrentTestBackend(), threads);
}

}  // namespace tandem::engine::testing
