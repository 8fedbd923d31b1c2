// The backend an engine test runs on. ctest runs the engine, forward,
// engine-steps, prefix-cache, shift, tiers and session suites twice: as they
// are (the CPU backend) and with TANDEM_TEST_BACKEND=fake-device under the
// "FakeDevice." prefix (tests/engine/fake_device_backend.h), so each suite's
// expectations hold on memory the host cannot touch. Test code; any thread.
#ifndef TANDEM_TESTS_ENGINE_TEST_BACKENDS_H_
#define TANDEM_TESTS_ENGINE_TEST_BACKENDS_H_

#include <memory>
#include <string_view>

#include "engine/model/backend.h"

namespace tandem::engine::testing {

enum class TestBackend { kCpu, kFakeDevice };

std::string_view TestBackendName(TestBackend backend);
// kFakeDevice when the environment's TANDEM_TEST_BACKEND is "fake-device",
// else kCpu.
TestBackend CurrentTestBackend();
// A backend of `kind` whose kernels use `threads` threads.
std::unique_ptr<Backend> MakeTestBackend(TestBackend kind, int threads);
// Of CurrentTestBackend().
std::unique_ptr<Backend> MakeTestBackend(int threads);

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_TEST_BACKENDS_H_
