// --device parsing and the backend factory, without a GPU: the CPU backend
// is built; CUDA is refused with a reason that names --device (in a CUDA
// build on a machine without a usable device, the driver's own reason); and
// weight types without a CUDA kernel are refused by name. With
// TANDEM_REQUIRE_CUDA=1 (scripts/gpu_check.sh on a GPU machine) the CUDA
// cases expect a usable device instead.
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/backend_factory.h"
#include "engine/device_spec.h"
#include "engine/gguf/tensor_type.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

bool CudaRequired() {
  const char* v = std::getenv("TANDEM_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

TEST(DeviceSpecTest, ParsesCpuCudaAndCudaN) {
  for (const auto& [text, kind, index] :
       std::vector<std::tuple<std::string, DeviceKind, int32_t>>{
           {"cpu", DeviceKind::kCpu, 0},
           {"cuda", DeviceKind::kCuda, 0},
           {"cuda:0", DeviceKind::kCuda, 0},
           {"cuda:1", DeviceKind::kCuda, 1},
           {"cuda:1023", DeviceKind::kCuda, 1023}}) {
    const absl::StatusOr<DeviceSpec> d = ParseDeviceSpec(text);
    ASSERT_TRUE(d.ok()) << text << ": " << d.status();
    EXPECT_EQ(d->kind, kind) << text;
    EXPECT_EQ(d->index, index) << text;
    EXPECT_EQ(ParseDeviceSpec(DeviceName(*d))->index, index) << "round trip of " << text;
  }
  EXPECT_EQ(DeviceName({.kind = DeviceKind::kCuda, .index = 3}), "cuda:3");
  EXPECT_EQ(DeviceName({}), "cpu");
}

TEST(DeviceSpecTest, BadValuesAreInvalidArgumentNamingTheFlag) {
  for (const std::string text : {"", "gpu", "CPU", "Cuda", "cpu:0", "cuda:", "cuda:-1",
                                 "cuda:+1", "cuda: 1", "cuda:1x", "cuda:0x1", "cuda:1024",
                                 "cuda:99999999999", "cuda:1:2", " cuda", "cuda0"}) {
    const absl::StatusOr<DeviceSpec> d = ParseDeviceSpec(text);
    ASSERT_FALSE(d.ok()) << "\"" << text << "\" parsed";
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(d.status().message(), HasSubstr("--device: \"" + text + "\""));
  }
}

TEST(BackendFactoryTest, CpuBuildsTheCpuBackend) {
  EXPECT_TRUE(ProbeDevice({}).ok());
  const absl::StatusOr<std::unique_ptr<Backend>> b = MakeBackend({}, {.threads = 2});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->threads(), 2);
  std::unique_ptr<Model> model = testing::LoadSynthetic(testing::TinyOptions());
  ASSERT_NE(model, nullptr);
  const absl::StatusOr<std::unique_ptr<Backend>> for_model =
      MakeBackendForModel(*model, {}, {.threads = 1});
  ASSERT_TRUE(for_model.ok()) << for_model.status();
}

// Here (no GPU, maybe no driver) CUDA is refused with a reason; which one
// depends on the build and the machine, so only its shape is checked. With
// TANDEM_REQUIRE_CUDA=1 the backend is built.
TEST(BackendFactoryTest, CudaIsBuiltOrRefusedWithTheReason) {
  const DeviceSpec cuda{.kind = DeviceKind::kCuda, .index = 0};
  const absl::Status s = MakeBackend(cuda, {}).status();
  if (CudaRequired()) {
    // A usable device: the CUDA backend, named by its device.
    const absl::StatusOr<std::unique_ptr<Backend>> b = MakeBackend(cuda, {});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_THAT(std::string((*b)->name()), ::testing::StartsWith("cuda:0 ("));
    return;
  }
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(ProbeDevice(cuda), s);
  EXPECT_THAT(s.message(), HasSubstr("--device cuda"));
#if TANDEM_TEST_BUILD_HAS_CUDA
  // The driver's words (cudaGetDeviceCount's error) and both versions.
  EXPECT_THAT(s.message(), HasSubstr("cudaGetDeviceCount: "));
  EXPECT_THAT(s.message(), HasSubstr(", runtime "));
  EXPECT_THAT(s.message(), Not(HasSubstr("this build has no CUDA")));
#else
  EXPECT_EQ(std::string(s.message()),
            "--device cuda: this build has no CUDA (built without nvcc or with "
            "-DTANDEM_CUDA=OFF)");
#endif
  // The same before any weights are looked at.
  std::unique_ptr<Model> model = testing::LoadSynthetic(testing::TinyOptions());
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(MakeBackendForModel(*model, cuda, {}).status(), s);
}

TEST(BackendFactoryTest, CudaOrdinalPastTheDevicesIsInvalidArgument) {
  if (!CudaRequired()) GTEST_SKIP() << "needs a CUDA device (TANDEM_REQUIRE_CUDA=1)";
  const absl::Status s = ProbeDevice({.kind = DeviceKind::kCuda, .index = kMaxDeviceIndex});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("--device cuda:1023: this machine has "));
}

TEST(BackendFactoryTest, WeightTypesWithoutACudaKernelAreRefusedByName) {
  const std::vector<WeightTensorType> mixed = {
      {.name = "token_embd.weight", .type = GgmlType::kF16},
      {.name = "blk.0.ffn_down.weight", .type = GgmlType::kQ5_0},
      {.name = "blk.0.ffn_up.weight", .type = GgmlType::kQ8_0},
      {.name = "blk.1.ffn_down.weight", .type = GgmlType::kQ2_K},
      {.name = "blk.1.ffn_up.weight", .type = GgmlType::kQ5_0},
  };
  const absl::Status s = CheckWeightTypes(DeviceKind::kCuda, mixed);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--device cuda: weight type Q5_0 (blk.0.ffn_down.weight) "
                                     "has no CUDA kernel"));
  EXPECT_THAT(s.message(), HasSubstr("3 of the model's 5 matrices have none (Q5_0, Q2_K)"));
  EXPECT_THAT(s.message(), HasSubstr("the CUDA kernels take F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"));
  // The CPU takes every type; CUDA those of engine/cuda/weight_types.h.
  EXPECT_TRUE(CheckWeightTypes(DeviceKind::kCpu, mixed).ok());
  for (const GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                           GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    EXPECT_TRUE(DeviceHasKernel(DeviceKind::kCuda, t)) << GgmlTypeName(t);
  }
  for (const GgmlType t : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ2_K,
                           GgmlType::kQ3_K, GgmlType::kIQ4_NL}) {
    EXPECT_FALSE(DeviceHasKernel(DeviceKind::kCuda, t)) << GgmlTypeName(t);
    EXPECT_TRUE(DeviceHasKernel(DeviceKind::kCpu, t)) << GgmlTypeName(t);
  }
  EXPECT_TRUE(CheckWeightTypes(DeviceKind::kCuda, {}).ok());
}

// A model file's matrices, by name and type, as the factory checks them:
// a Q8_0 model passes, a Q2_K one is refused naming its first matrix.
TEST(BackendFactoryTest, ModelMatricesAreCheckedByName) {
  SyntheticModelOptions o = testing::TinyOptions();
  o.type = GgmlType::kQ8_0;
  std::unique_ptr<Model> q8 = testing::LoadSynthetic(o);
  ASSERT_NE(q8, nullptr);
  const std::vector<WeightTensorType> matrices = MatrixTypes(q8->file());
  ASSERT_FALSE(matrices.empty());
  bool saw_ffn_down = false;
  for (const WeightTensorType& w : matrices) {
    EXPECT_THAT(w.name, Not(HasSubstr("norm"))) << "1-D tensors are not matrices";
    if (w.name == "blk.1.ffn_down.weight") {
      saw_ffn_down = true;
      EXPECT_EQ(w.type, GgmlType::kQ8_0);
    }
  }
  EXPECT_TRUE(saw_ffn_down);
  EXPECT_TRUE(CheckWeightTypes(DeviceKind::kCuda, matrices).ok());

  o.type = GgmlType::kQ2_K;
  o.n_embd = 256;  // K-quant rows, the KV width included, are whole 256-element blocks
  o.n_ff = 512;
  o.n_head_kv = 4;
  std::unique_ptr<Model> q2 = testing::LoadSynthetic(o);
  ASSERT_NE(q2, nullptr);
  const std::vector<WeightTensorType> q2_matrices = MatrixTypes(q2->file());
  const absl::Status s = CheckWeightTypes(DeviceKind::kCuda, q2_matrices);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  const WeightTensorType* first = nullptr;
  for (const WeightTensorType& w : q2_matrices) {
    if (w.type == GgmlType::kQ2_K) {
      first = &w;
      break;
    }
  }
  ASSERT_NE(first, nullptr);
  EXPECT_THAT(s.message(), HasSubstr("weight type Q2_K (" + first->name + ") has no CUDA kernel"));
}

}  // namespace
}  // namespace tandem::engine
