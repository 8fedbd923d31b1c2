#include "engine/cuda/graph_sections.h"

#include "common/check.h"
#include "engine/cuda/device.h"

namespace tandem::engine::cuda {

GraphSections::~GraphSections() {
  for (auto& [bucket, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
}

// FNV-1a over the words' bytes.
uint64_t GraphSections::Signature(std::span<const uint64_t> words) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t w : words) {
    for (int i = 0; i < 8; ++i) {
      h ^= (w >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

void GraphSections::Begin(int32_t bucket) {
  TANDEM_CHECK(mode_ == Mode::kEager, "one graph section at a time");
  bucket_ = bucket;
  if (graphs_.contains(bucket)) {
    mode_ = Mode::kReplay;
    return;
  }
  mode_ = Mode::kCapture;
  CheckInStep(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture");
}

void GraphSections::End() {
  if (mode_ == Mode::kEager) return;
  const Mode mode = std::exchange(mode_, Mode::kEager);
  std::vector<uint64_t> signature = std::exchange(signature_, {});
  std::vector<std::function<void()>> pending = std::exchange(pending_, {});
  if (mode == Mode::kCapture) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    const bool launched = cudaStreamEndCapture(stream_, &graph) == cudaSuccess &&
                          cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
                          cudaGraphLaunch(exec, stream_) == cudaSuccess;
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (launched) {
      graphs_[bucket_] = {.exec = exec, .signature = std::move(signature)};
      ++stats_.captured;
      return;
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    cudaGetLastError();  // the capture's error, not sticky
    uncapturable_.insert(bucket_);
  } else {
    auto it = graphs_.find(bucket_);
    if (it->second.signature == signature) {
      CheckInStep(cudaGraphLaunch(it->second.exec, stream_), "cudaGraphLaunch");
      ++stats_.replayed;
      return;
    }
    // Not the captured step: capture this bucket afresh next time.
    cudaGraphExecDestroy(it->second.exec);
    graphs_.erase(it);
  }
  ++stats_.fallbacks;
  for (const std::function<void()>& op : pending) op();
}

}  // namespace tandem::engine::cuda
