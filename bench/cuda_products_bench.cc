// The CUDA backend's matrix products timed path by path, weight type by
// weight type and token count by token count, so that where MatMul hands
// one path to the next (engine/cuda/matmul.h: kGemv16MaxTokens,
// kQuantGemvMaxTokens, kQuantTileGemmMaxTokens) can be read off one run:
//
//   gemv     the GEMV (16-bit: up to kGemv16MaxTokens; quantized: any count,
//            in launches of kQuantGemvTokensPerLaunch)
//   tile     the quantized tile GEMM (engine/cuda/quant_gemm.h)
//   cublas   MatMulOnTensorCores: x to 16 bits (and a quantized weight
//            dequantized whole to f16), then cuBLAS
//   matmul   what MatMul picks at that count
//
// Each product is timed with CUDA events over --repeats calls after three
// warm-up calls, each call on the next of enough copies of the weight to
// exceed twice the device's L2, so every call reads its weight from memory
// as a decode step's products do. Prints a table and one JSON line per
// measurement (also appended to --out); never fails on speed. Exits 1 with
// the reason where there is no CUDA device.
//
//   tandem-cuda-products-bench [--device 0] [--rows 2048,5632] [--cols 2048]
//       [--tokens 1,2,4,8,16,17,32,48,64,65,128]
//       [--types f16,bf16,q8_0,q4_0,q4_k,q5_k,q6_k] [--repeats 20] [--out FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "engine/cuda/device.h"
#include "engine/cuda/gemv16.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/quant_gemm.h"
#include "engine/cuda/quant_kernels.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::bench {
namespace {

using engine::GgmlType;
namespace cuda = engine::cuda;

struct Config {
  int device = 0;
  std::vector<int64_t> rows;
  int64_t cols = 0;
  std::vector<int64_t> tokens;
  std::vector<GgmlType> types;
  int repeats = 0;
  std::string out;
};

absl::StatusOr<std::vector<int64_t>> PositiveList(const common::Args& args,
                                                  const std::string& name) {
  std::vector<int64_t> values;
  const std::vector<std::string> items = absl::StrSplit(args.String(name), ',', absl::SkipEmpty());
  for (const std::string& item : items) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v) || v < 1 || v > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": \"", item, "\" is not a count from 1 to 1048576"));
    }
    values.push_back(v);
  }
  if (values.empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, " is empty"));
  return values;
}

absl::StatusOr<Config> ConfigFromArgs(const common::Args& args) {
  Config c;
  ASSIGN_OR_RETURN(c.device, args.IntInRange("device", 0, 1023));
  ASSIGN_OR_RETURN(c.rows, PositiveList(args, "rows"));
  ASSIGN_OR_RETURN(c.tokens, PositiveList(args, "tokens"));
  ASSIGN_OR_RETURN(const int32_t cols, args.IntInRange("cols", 256, 1 << 16));
  if (cols % 256 != 0) return absl::InvalidArgumentError("--cols: not a multiple of 256");
  c.cols = cols;
  ASSIGN_OR_RETURN(c.repeats, args.IntInRange("repeats", 1, 100000));
  const std::vector<std::string> names =
      absl::StrSplit(args.String("types"), ',', absl::SkipEmpty());
  for (const std::string& name : names) {
    absl::StatusOr<GgmlType> t = engine::GgmlTypeFromName(name);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--types: ", t.status().message()));
    const bool sixteen = *t == GgmlType::kF16 || *t == GgmlType::kBF16;
    const bool quantized = *t == GgmlType::kQ8_0 || *t == GgmlType::kQ4_0 ||
                           *t == GgmlType::kQ4_K || *t == GgmlType::kQ5_K || *t == GgmlType::kQ6_K;
    if (!sixteen && !quantized) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--types: ", name, " has no GEMV (f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k do)"));
    }
    c.types.push_back(*t);
  }
  if (c.types.empty()) return absl::InvalidArgumentError("--types is empty");
  c.out = args.String("out");
  return c;
}

absl::Status CudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Enough copies of one random `type` weight [rows][cols] to exceed `bytes`.
struct Weights {
  std::vector<cuda::DeviceBuffer> copies;
  int64_t bytes = 0;  // one copy's
};
absl::StatusOr<Weights> MakeWeights(const cuda::Stream& stream, GgmlType type, int64_t rows,
                                    int64_t cols, int64_t at_least, std::mt19937& rng) {
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> source(rows * cols);
  for (float& v : source) v = value(rng);
  Weights w;
  w.bytes = engine::GgmlRowBytes(type, cols) * rows;
  std::vector<uint8_t> host(w.bytes);
  engine::QuantizeRow(type, source.data(), host.data(), rows * cols);
  const int64_t n = std::max<int64_t>(1, (at_least + w.bytes - 1) / w.bytes);
  for (int64_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::Allocate(w.bytes));
    RETURN_IF_ERROR(b.Upload(stream, host.data(), w.bytes));
    w.copies.push_back(std::move(b));
  }
  RETURN_IF_ERROR(stream.Synchronize());
  return w;
}

// Microseconds a call of `run` (given the copy to read) takes, over
// `repeats` calls after three warm-up ones.
absl::StatusOr<double> Time(const cuda::Stream& stream, int64_t copies, int repeats,
                            const std::function<absl::Status(int64_t)>& run) {
  for (int64_t i = 0; i < 3; ++i) RETURN_IF_ERROR(run(i % copies));
  cudaEvent_t start = nullptr, stop = nullptr;
  RETURN_IF_ERROR(CudaOk(cudaEventCreate(&start), "cudaEventCreate"));
  RETURN_IF_ERROR(CudaOk(cudaEventCreate(&stop), "cudaEventCreate"));
  absl::Status s = CudaOk(cudaEventRecord(start, stream.stream()), "cudaEventRecord");
  for (int i = 0; i < repeats && s.ok(); ++i) s = run((3 + i) % copies);
  if (s.ok()) s = CudaOk(cudaEventRecord(stop, stream.stream()), "cudaEventRecord");
  if (s.ok()) s = CudaOk(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.0f;
  if (s.ok()) s = CudaOk(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RETURN_IF_ERROR(s);
  RETURN_IF_ERROR(stream.Synchronize());
  return 1000.0 * ms / repeats;
}

absl::Status Run(const Config& c) {
  int count = 0;
  const cudaError_t found = cudaGetDeviceCount(&count);
  if (found != cudaSuccess || count <= c.device) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device ", c.device, " here (",
        found != cudaSuccess ? absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(found))
                             : absl::StrCat(count, " found"),
        ")"));
  }
  RETURN_IF_ERROR(CudaOk(cudaSetDevice(c.device), "cudaSetDevice"));
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(CudaOk(cudaGetDeviceProperties(&prop, c.device), "cudaGetDeviceProperties"));
  ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(c.device));
  const int64_t cold = 2 * static_cast<int64_t>(prop.l2CacheSize);
  std::cout << absl::StrFormat("device %d: %s, L2 %d MiB; %d calls a measurement\n", c.device,
                               prop.name, prop.l2CacheSize >> 20, c.repeats);
  std::cout << absl::StrFormat("| %-5s | %5s x %-5s | %6s | %-6s | %10s | %8s | %8s |\n", "type",
                               "rows", "cols", "tokens", "path", "us", "GB/s", "TFLOP/s");
  std::ofstream out;
  if (!c.out.empty()) {
    out.open(c.out, std::ios::app);
    if (!out) return absl::InvalidArgumentError(absl::StrCat("--out: cannot open ", c.out));
  }
  std::mt19937 rng(1);
  const int64_t max_tokens = *std::max_element(c.tokens.begin(), c.tokens.end());
  for (const GgmlType type : c.types) {
    const bool sixteen = type == GgmlType::kF16 || type == GgmlType::kBF16;
    for (const int64_t rows : c.rows) {
      ASSIGN_OR_RETURN(Weights w, MakeWeights(stream, type, rows, c.cols, cold, rng));
      const auto copies = static_cast<int64_t>(w.copies.size());
      auto weight = [&](int64_t i) {
        return cuda::DeviceWeight{
            .type = type, .data = w.copies[i].data(), .rows = rows, .cols = c.cols};
      };
      std::vector<float> x_host(max_tokens * c.cols);
      std::normal_distribution<float> value(0.0f, 1.0f);
      for (float& v : x_host) v = value(rng);
      ASSIGN_OR_RETURN(cuda::DeviceBuffer x, cuda::DeviceBuffer::Allocate(x_host.size() * 4));
      RETURN_IF_ERROR(x.Upload(stream, x_host.data(), x_host.size() * 4));
      ASSIGN_OR_RETURN(cuda::DeviceBuffer y, cuda::DeviceBuffer::Allocate(max_tokens * rows * 4));
      const int64_t scratch_bytes = std::max(cuda::TensorCoreScratchBytes(weight(0), max_tokens),
                                             cuda::MatMulScratchBytes(weight(0), max_tokens));
      ASSIGN_OR_RETURN(cuda::DeviceBuffer scratch, cuda::DeviceBuffer::Allocate(scratch_bytes));
      for (const int64_t n : c.tokens) {
        std::vector<std::pair<std::string, std::function<absl::Status(int64_t)>>> paths;
        if (sixteen && n <= cuda::kGemv16MaxTokens) {
          paths.push_back({"gemv", [&, n](int64_t i) {
                             return CudaOk(
                                 cuda::LaunchGemv16(w.copies[i].data(), type == GgmlType::kBF16,
                                                    rows, c.cols, x.as<float>(), n, y.as<float>(),
                                                    stream.stream()),
                                 "LaunchGemv16");
                           }});
        }
        if (!sixteen) {
          paths.push_back({"gemv", [&, n](int64_t i) {
                             return CudaOk(cuda::LaunchMatMulQuant(type, w.copies[i].data(), rows,
                                                                   c.cols, x.as<float>(), n,
                                                                   y.as<float>(), stream.stream()),
                                           "LaunchMatMulQuant");
                           }});
          paths.push_back({"tile", [&, n](int64_t i) {
                             return CudaOk(
                                 cuda::LaunchQuantTileGemm(type, w.copies[i].data(), rows, c.cols,
                                                           x.as<float>(), n, y.as<float>(), false,
                                                           stream.stream()),
                                 "LaunchQuantTileGemm");
                           }});
        }
        paths.push_back({"cublas", [&, n](int64_t i) {
                           return cuda::MatMulOnTensorCores(stream, weight(i), x.as<float>(), n,
                                                            y.as<float>(), scratch);
                         }});
        paths.push_back({"matmul", [&, n](int64_t i) {
                           return cuda::MatMul(stream, weight(i), x.as<float>(), n, y.as<float>(),
                                               scratch);
                         }});
        for (const auto& [path, run] : paths) {
          ASSIGN_OR_RETURN(const double us, Time(stream, copies, c.repeats, run));
          const double gbs = static_cast<double>(w.bytes) / (us * 1e3);
          const double tflops = 2.0 * static_cast<double>(rows * c.cols * n) / (us * 1e6);
          const std::string name(engine::GgmlTypeName(type));
          std::cout << absl::StrFormat(
              "| %-5s | %5d x %-5d | %6d | %-6s | %10.2f | %8.1f | %8.2f |\n", name, rows, c.cols,
              n, path, us, gbs, tflops);
          const std::string line = absl::StrFormat(
              "{\"bench\":\"cuda-products\",\"device\":\"%s\",\"type\":\"%s\",\"rows\":%d,"
              "\"cols\":%d,\"tokens\":%d,\"path\":\"%s\",\"us\":%.3f,\"weight_gb_s\":%.2f,"
              "\"tflop_s\":%.3f}",
              prop.name, name, rows, c.cols, n, path, us, gbs, tflops);
          if (out) out << line << "\n";
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  using tandem::common::FlagSpec;
  const std::vector<FlagSpec> specs = {
      {.name = "device", .default_value = "0", .help = "the CUDA device"},
      {.name = "rows", .default_value = "2048,5632", .help = "weight rows, comma-separated"},
      {.name = "cols", .default_value = "2048", .help = "weight columns (a multiple of 256)"},
      {.name = "tokens",
       .default_value = "1,2,4,8,16,17,32,48,64,65,128",
       .help = "token counts, comma-separated"},
      {.name = "types",
       .default_value = "f16,bf16,q8_0,q4_0,q4_k,q5_k,q6_k",
       .help = "weight types, comma-separated"},
      {.name = "repeats", .default_value = "20", .help = "timed calls a measurement"},
      {.name = "out", .default_value = "", .help = "append the JSON lines to this file"},
  };
  absl::StatusOr<tandem::common::Args> args =
      tandem::common::Args::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) std::cerr << "tandem-cuda-products-bench: " << args.status().message() << "\n";
    std::cerr << tandem::common::Args::Usage("cuda-products-bench", specs);
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<tandem::bench::Config> config = tandem::bench::ConfigFromArgs(*args);
  absl::Status s = config.ok() ? tandem::bench::Run(*config) : config.status();
  if (!s.ok()) {
    std::cerr << "tandem-cuda-products-bench: " << s.message() << "\n";
    return config.ok() ? 1 : 2;
  }
  return 0;
}
