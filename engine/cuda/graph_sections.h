// The CUDA backend's graphs (engine/cuda/cuda_backend.cc). A decode step of
// a bucket's size is one section: its ops from BeginStep to the step's
// first host interaction (ReduceLogits, a Download, the next BeginStep...).
// A bucket's first section is captured (cudaStreamBeginCapture, the ops
// queued as usual, then instantiated and launched); later ones replay it:
// their ops are only checked against the captured ones (a signature of
// each op and its arguments) and one cudaGraphLaunch runs them all. The ops
// are also kept as closures while a section is open, so a capture that fails
// (the bucket then stays eager) or a step whose ops differ (the bucket is
// captured afresh next time) runs them eagerly instead, and is counted.
// Engine-thread only, like the backend.
#ifndef TANDEM_ENGINE_CUDA_GRAPH_SECTIONS_H_
#define TANDEM_ENGINE_CUDA_GRAPH_SECTIONS_H_

#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <span>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/container/flat_hash_set.h"
#include "engine/cuda/cuda_backend.h"

namespace tandem::engine::cuda {

// An op's word for GraphSections::Op: a pointer by its address, a float by
// its bits, an integer or enum as it is.
template <typename T>
uint64_t ToWord(T v) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<uintptr_t>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::bit_cast<uint32_t>(static_cast<float>(v));
  } else {
    return static_cast<uint64_t>(v);
  }
}
// An op's words: a tag of its own first, then its arguments.
template <typename... Args>
std::array<uint64_t, sizeof...(Args)> Words(Args... args) {
  return {ToWord(args)...};
}

class GraphSections {
 public:
  explicit GraphSections(cudaStream_t stream) : stream_(stream) {}
  // Destroys the graphs; End() an open section first.
  ~GraphSections();
  GraphSections(const GraphSections&) = delete;
  GraphSections& operator=(const GraphSections&) = delete;

  // Whether a section may be opened for `bucket`: not once its capture failed.
  bool Usable(int32_t bucket) const { return !uncapturable_.contains(bucket); }
  // Opens a section for `bucket`: replaying its graph, or capturing one.
  void Begin(int32_t bucket);
  // An op: launched now (no section open, or capturing), or only checked
  // against the graph (replaying). `words` name the op and its arguments;
  // they are hashed only inside a section.
  template <typename Launch>
  void Op(std::span<const uint64_t> words, Launch&& launch) {
    if (mode_ == Mode::kEager) {
      launch();
      return;
    }
    signature_.push_back(Signature(words));
    if (mode_ == Mode::kCapture) launch();
    pending_.emplace_back(std::forward<Launch>(launch));
  }
  // Closes the open section, if any: the captured graph instantiated and
  // launched, or the bucket's graph launched, or the kept ops run eagerly.
  void End();

  CudaGraphStats stats() const { return stats_; }

 private:
  enum class Mode { kEager, kCapture, kReplay };
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::vector<uint64_t> signature;
  };
  static uint64_t Signature(std::span<const uint64_t> words);

  const cudaStream_t stream_;
  Mode mode_ = Mode::kEager;
  int32_t bucket_ = 0;                            // the open section's
  std::vector<uint64_t> signature_;               // the open section's ops
  std::vector<std::function<void()>> pending_;    // and the ops themselves
  std::map<int32_t, Graph> graphs_;               // by bucket
  absl::flat_hash_set<int32_t> uncapturable_;     // buckets whose capture failed
  CudaGraphStats stats_;
};

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_GRAPH_SECTIONS_H_
