// The device side of the host emulation (cuda_runtime_api.h says what it is
// for): the CUDA keywords, threadIdx and friends, __syncthreads and warp
// shuffles, the few intrinsics the kernels use, and RunGrid, which runs a
// kernel's blocks one after another on blockDim.x std::threads. A
// block's dynamic shared memory (launch.cuh's DynamicSharedMemory) is one
// buffer, filled with 0xff bytes (a NaN in f32 and f16) before every block
// so that reading what no thread wrote shows; a __shared__ array declared
// in a kernel is a static of that kernel, which the blocks, running one at a
// time, take turns at.
//
// Warp-collective calls (shuffles, mma.h's fragments) must be reached by all
// 32 lanes of a warp still running, as on a GPU; a kernel that does not
// deadlocks here (ctest's timeout), rather than passing.
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace cuda_emulation {

struct Warp {
  static constexpr int kScratch = 256;
  explicit Warp(int lanes) : sync(lanes) {}
  std::barrier<> sync;
  uint64_t slots[32] = {};       // a shuffle's values
  float scratch[kScratch] = {};  // a product's tile (mma.h)
};

struct Block {
  explicit Block(int threads) : sync(threads) {
    for (int w = 0; w < (threads + 31) / 32; ++w) {
      warps.push_back(std::make_unique<Warp>(std::min(32, threads - 32 * w)));
    }
  }
  std::barrier<> sync;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local Block* current_block = nullptr;

inline Warp& CurrentWarp() { return *current_block->warps[threadIdx.x / 32]; }

// The dynamic shared memory, as large as the largest opt-in emulated (an
// H100's).
struct SharedMemory {
  alignas(128) uint8_t base[232448];
};
inline SharedMemory& TheSharedMemory() {
  static SharedMemory memory;
  return memory;
}

// Runs `body` (the kernel called with its arguments) over `grid` x `block`
// as a launch would, after the launch's checks: the block's size, and the
// dynamic shared memory against the default or what the kernel opted in to.
inline cudaError_t RunGrid(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                           const std::function<void()>& body) {
  Device& device = TheDevice();
  const auto opted = device.opted_in.find(kernel);
  const size_t limit = opted != device.opted_in.end() ? opted->second : device.shared_default_bytes;
  SharedMemory& shared = TheSharedMemory();
  if (shared_bytes > limit || shared_bytes > sizeof(shared.base)) {
    device.last_error = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  if (block.y != 1 || block.z != 1 || block.x == 0 || block.x > 1024) {
    device.last_error = cudaErrorInvalidConfiguration;
    return cudaErrorInvalidConfiguration;
  }
  // One thread per CUDA thread of a block, each taking every block in turn:
  // all meet before a block starts (the last one done with its memory),
  // thread 0 readies it, all meet again, then run it.
  const unsigned blocks = grid.x * grid.y * grid.z;
  std::unique_ptr<Block> b;
  std::barrier<> turn(static_cast<std::ptrdiff_t>(block.x));
  std::vector<std::thread> threads;
  threads.reserve(block.x);
  for (unsigned t = 0; t < block.x; ++t) {
    threads.emplace_back([&, t] {
      threadIdx = {t, 0, 0};
      blockDim = block;
      gridDim = grid;
      for (unsigned i = 0; i < blocks; ++i) {
        turn.arrive_and_wait();
        if (t == 0) {
          std::memset(shared.base, 0xff, sizeof(shared.base));
          b = std::make_unique<Block>(static_cast<int>(block.x));
        }
        turn.arrive_and_wait();
        blockIdx = {i % grid.x, i / grid.x % grid.y, i / (grid.x * grid.y)};
        current_block = b.get();
        body();
        // An exited thread no longer counts at its block's or warp's
        // barriers, as on a GPU: a kernel whose threads leave early still
        // runs its barriers with the rest.
        CurrentWarp().sync.arrive_and_drop();
        b->sync.arrive_and_drop();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return cudaSuccess;
}

}  // namespace cuda_emulation

inline void __syncthreads() { cuda_emulation::current_block->sync.arrive_and_wait(); }

// Lane i gets lane (i ^ lane_mask)'s value; every lane of the warp takes part.
template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T value, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  cuda_emulation::Warp& w = cuda_emulation::CurrentWarp();
  const int lane = static_cast<int>(threadIdx.x % 32);
  std::memcpy(&w.slots[lane], &value, sizeof(T));
  w.sync.arrive_and_wait();
  T out;
  std::memcpy(&out, &w.slots[lane ^ lane_mask], sizeof(T));
  w.sync.arrive_and_wait();
  return out;
}

// Bit i set where lane i's predicate is; every lane of the warp takes part.
inline unsigned __ballot_sync(unsigned /*mask*/, int predicate) {
  cuda_emulation::Warp& w = cuda_emulation::CurrentWarp();
  const unsigned lane = threadIdx.x % 32;
  w.slots[lane] = predicate != 0;
  w.sync.arrive_and_wait();
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l) bits |= static_cast<unsigned>(w.slots[l] != 0) << l;
  w.sync.arrive_and_wait();
  return bits;
}

inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) {
  cuda_emulation::CurrentWarp().sync.arrive_and_wait();
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
template <typename T>
T __ldg(const T* p) {
  return *p;
}
template <typename T>
T __ldcs(const T* p) {
  return *p;
}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}
// Blocks run one after another, so a fence orders nothing more; the add is
// atomic all the same.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).fetch_add(v);
}
template <typename T>
T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
T max(T a, T b) {
  return a < b ? b : a;
}

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_
