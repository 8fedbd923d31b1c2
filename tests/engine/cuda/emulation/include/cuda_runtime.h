// The device side of the host emulation (cuda_runtime_api.h says what it is
// for): the CUDA keywords, threadIdx and friends, __syncthreads and warp
// shuffles, the few intrinsics the kernels use, and RunGrid, which runs a
// kernel's blocks one after another, each CUDA thread of a block a fiber
// on the launching thread: a barrier switches to the next fiber ready to
// run, so a block of 1024 threads costs no OS thread and no system call
// per barrier. A block's dynamic shared memory (launch.cuh's
// DynamicSharedMemory) is one buffer, filled with 0xff bytes (a NaN in f32
// and f16) before every block so that reading what no thread wrote shows;
// a __shared__ array declared in a kernel is a static of that kernel, which
// the blocks, running one at a time, take turns at.
//
// Warp-collective calls (shuffles, mma.h's fragments) must be reached by all
// 32 lanes of a warp still running, and __syncthreads by every thread of the
// block still running, as on a GPU; a kernel that does not deadlocks, which
// the scheduler reports (naming the kernel's grid) and aborts on, rather
// than passing.
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda_runtime_api.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define TANDEM_EMULATION_ASAN 1
#endif

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

// A fiber's saved registers. On x86-64, the stack pointer of a stack whose
// top holds the callee-saved registers and the address to go on at
// (SwitchContext, emulated_runtime.cc: a few instructions, no system call);
// elsewhere a ucontext, whose switches also save and restore the signal
// mask (a system call each).
#if defined(__x86_64__)
struct FiberContext {
  void* sp = nullptr;
};
extern "C" void TandemEmulationSwitchContext(void** save_sp, void* load_sp);
// `context` to start at TandemEmulationFiberEntry on [stack, stack + bytes).
void PrepareContext(FiberContext& context, char* stack, size_t bytes);
inline void SwitchContext(FiberContext& save, FiberContext& load) {
  TandemEmulationSwitchContext(&save.sp, load.sp);
}
#else
struct FiberContext {
  ucontext_t context;
};
void PrepareContext(FiberContext& context, char* stack, size_t bytes);
inline void SwitchContext(FiberContext& save, FiberContext& load) {
  swapcontext(&save.context, &load.context);
}
#endif

// The fibers of the block running on this thread, and the switches between
// them and the scheduler (RunBlocks's loop).
struct Fibers {
  static constexpr size_t kStackBytes = size_t{256} << 10;
  struct Fiber {
    FiberContext context;
    char* stack = nullptr;
    bool done = true;
  };
  FiberContext scheduler;
  std::vector<Fiber> fibers;
  int current = -1;
  // Fibers ready to run, in the order they became so: all at a block's
  // start, then those a barrier releases. A fiber waiting at a barrier is
  // in no list but the barrier's, so the block's fibers never all wait
  // once this is empty unless they deadlocked.
  std::deque<int> runnable;
  const std::function<void()>* body = nullptr;
#ifdef TANDEM_EMULATION_ASAN
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
#endif

  // From the running fiber straight to the next one ready to run, or back
  // to the scheduler when none is; returns when resumed (by whichever
  // switched to it, which set `current`). Fiber to fiber, a barrier's
  // waiters cost one switch each rather than two.
  __attribute__((noinline)) void Yield() {
    FiberContext& mine = fibers[current].context;
    if (!runnable.empty()) {
      const int next = runnable.front();
      runnable.pop_front();
      SwitchTo(mine, next);
      return;
    }
#ifdef TANDEM_EMULATION_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, scheduler_stack, scheduler_stack_bytes);
#endif
    SwitchContext(mine, scheduler);
#ifdef TANDEM_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  }
  // Fiber i set to run FiberMain from the start of its stack.
  void Start(int i) {
    // Stacks' tops staggered by a few lines each: at one stride, every
    // fiber's hot frames would fall in the same cache sets.
    PrepareContext(fibers[i].context, fibers[i].stack, kStackBytes - 320 * (i % 64));
    fibers[i].done = false;
  }
  // From the scheduler to fiber i, until a fiber switches back to it.
  void Resume(int i) { SwitchTo(scheduler, i); }
  // From `from` (the scheduler's context or the running fiber's) to fiber
  // i; returns when something switches back to `from`.
  __attribute__((noinline)) void SwitchTo(FiberContext& from, int i) {
    current = i;
    threadIdx = {static_cast<unsigned>(i), 0, 0};
#ifdef TANDEM_EMULATION_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, fibers[i].stack, kStackBytes);
#endif
    SwitchContext(from, fibers[i].context);
#ifdef TANDEM_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  }
};

inline thread_local Fibers* current_fibers = nullptr;

// A barrier of fibers: arrive_and_wait returns once `expected` have arrived;
// arrive_and_drop is an exit (the barrier then waits for one fewer).
class Barrier {
 public:
  explicit Barrier(int expected) : expected_(expected) {}
  void arrive_and_wait() {
    Fibers& f = *current_fibers;
    if (++arrived_ == expected_) {
      Release();
      return;
    }
    waiting_.push_back(f.current);
    f.Yield();  // resumed once released
  }
  void arrive_and_drop() {
    --expected_;
    if (expected_ > 0 && arrived_ == expected_) Release();
  }

 private:
  void Release() {
    Fibers& f = *current_fibers;
    f.runnable.insert(f.runnable.end(), waiting_.begin(), waiting_.end());
    waiting_.clear();
    arrived_ = 0;
  }
  int expected_;
  int arrived_ = 0;
  std::vector<int> waiting_;
};

struct Warp {
  static constexpr int kScratch = 256;
  explicit Warp(int lanes) : sync(lanes) {}
  Barrier sync;
  uint64_t slots[32] = {};       // a shuffle's values
  float scratch[kScratch] = {};  // a product's tile (mma.h)
};

struct Block {
  explicit Block(int threads) : sync(threads) {
    for (int w = 0; w < (threads + 31) / 32; ++w) {
      warps.push_back(std::make_unique<Warp>(std::min(32, threads - 32 * w)));
    }
  }
  Barrier sync;
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

// A fiber's whole life: the kernel, then its exit from its warp's and
// block's barriers (an exited thread no longer counts at them, as on a
// GPU: a kernel whose threads leave early still runs its barriers with the
// rest), then back to the scheduler for good.
inline void FiberMain() {
  Fibers& f = *current_fibers;
#ifdef TANDEM_EMULATION_ASAN
  // The launch's first fiber starts from the scheduler, whose stack it
  // notes; the rest may start from another fiber (Yield).
  if (f.scheduler_stack == nullptr) {
    __sanitizer_finish_switch_fiber(nullptr, &f.scheduler_stack, &f.scheduler_stack_bytes);
  } else {
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
  }
#endif
  (*f.body)();
  CurrentWarp().sync.arrive_and_drop();
  current_block->sync.arrive_and_drop();
  f.fibers[f.current].done = true;
#ifdef TANDEM_EMULATION_ASAN
  __sanitizer_start_switch_fiber(nullptr, f.scheduler_stack, f.scheduler_stack_bytes);
#endif
  FiberContext finished;
  SwitchContext(finished, f.scheduler);
}

// The launch's checks: the block's size, and the dynamic shared memory
// against the default or what the kernel opted in to.
inline cudaError_t CheckLaunch(const void* kernel, dim3 block, size_t shared_bytes) {
  Device& device = TheDevice();
  const auto opted = device.opted_in.find(kernel);
  const size_t limit = opted != device.opted_in.end() ? opted->second : device.shared_default_bytes;
  if (shared_bytes > limit || shared_bytes > sizeof(SharedMemory::base)) {
    device.last_error = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  if (block.y != 1 || block.z != 1 || block.x == 0 || block.x > 1024) {
    device.last_error = cudaErrorInvalidConfiguration;
    return cudaErrorInvalidConfiguration;
  }
  return cudaSuccess;
}

// Runs `body` (the kernel called with its arguments) over `grid` x `block`,
// its blocks one after another, each block's threads as fibers, the first
// `shared_bytes` of the dynamic shared memory filled with 0xff first. One grid
// at a time in the process (the shared memory is one).
inline void RunBlocks(dim3 grid, dim3 block, size_t shared_bytes,
                      const std::function<void()>& body) {
  static std::mutex one_grid;
  static std::vector<std::unique_ptr<char[]>> stacks;  // kept for the next grid
  std::lock_guard<std::mutex> lock(one_grid);
  while (stacks.size() < block.x) stacks.emplace_back(new char[Fibers::kStackBytes]);
  Fibers f;
  f.body = &body;
  f.fibers.resize(block.x);
  for (unsigned t = 0; t < block.x; ++t) f.fibers[t].stack = stacks[t].get();
  Fibers* const outer = current_fibers;
  current_fibers = &f;
  blockDim = block;
  gridDim = grid;
  SharedMemory& shared = TheSharedMemory();
  const unsigned blocks = grid.x * grid.y * grid.z;
  for (unsigned i = 0; i < blocks; ++i) {
    std::memset(shared.base, 0xff, shared_bytes);
    Block b(static_cast<int>(block.x));
    current_block = &b;
    blockIdx = {i % grid.x, i / grid.x % grid.y, i / (grid.x * grid.y)};
    for (int t = 0; t < static_cast<int>(block.x); ++t) f.Start(t);
    for (int t = 0; t < static_cast<int>(block.x); ++t) f.runnable.push_back(t);
    while (!f.runnable.empty()) {
      const int t = f.runnable.front();
      f.runnable.pop_front();
      f.Resume(t);
    }
    for (const Fibers::Fiber& fiber : f.fibers) {
      if (fiber.done) continue;
      std::fprintf(stderr,
                   "CUDA emulation: deadlock in block (%u, %u, %u) of a grid of (%u, %u, %u) x "
                   "%u threads: a barrier or warp-collective call some live threads never "
                   "reach\n",
                   blockIdx.x, blockIdx.y, blockIdx.z, grid.x, grid.y, grid.z, block.x);
      std::abort();
    }
    current_block = nullptr;
  }
  current_fibers = outer;
  threadIdx = {};
}

// The checks, then the grid at once.
inline cudaError_t RunGrid(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                           const std::function<void()>& body) {
  if (const cudaError_t e = CheckLaunch(kernel, block, shared_bytes); e != cudaSuccess) return e;
  RunBlocks(grid, block, shared_bytes, body);
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
