// The host calls of the CUDA emulation (include/cuda_runtime_api.h says what
// it checks): one device of kMemoryBytes, streams that queue their work
// until the host waits, events as points in a stream's queue, graphs as the
// list of work a capture recorded; and the fibers' context switch
// (include/cuda_runtime.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <utility>
#include <vector>

struct CUstream_st {
  std::deque<std::function<void()>> queued;
  uint64_t ran = 0;  // work items run so far
  // While captured: what the capture recorded, the capturing thread, and
  // whether a forbidden call has invalidated it.
  bool capturing = false;
  std::vector<std::function<void()>> captured;
  std::thread::id capturer;
  bool invalidated = false;
};

struct CUevent_st {
  cudaStream_t stream = nullptr;
  uint64_t through = 0;  // the stream's work items up to the record
};

struct CUgraph_st {
  std::vector<std::function<void()>> work;
};

struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};

// A fiber starts here (PrepareContext) and never returns: FiberMain ends
// with its last switch.
extern "C" void TandemEmulationFiberEntry() {
  cuda_emulation::FiberMain();
  std::abort();
}

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack and its pointer at
// *save_sp (rdi), then takes load_sp (rsi) and restores what was saved
// there. (MXCSR and the x87 control word are callee-saved too, but nothing
// here changes them: every fiber runs with the thread's.) A new fiber's
// stack holds the same frame, with TandemEmulationFiberStart as the address
// to return to, which calls the entry with the stack aligned as a call
// expects.
asm(R"(
  .pushsection .text
  .globl TandemEmulationSwitchContext
  .type TandemEmulationSwitchContext, @function
TandemEmulationSwitchContext:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size TandemEmulationSwitchContext, .-TandemEmulationSwitchContext
  .type TandemEmulationFiberStart, @function
TandemEmulationFiberStart:
  call TandemEmulationFiberEntry@PLT
  ud2
  .size TandemEmulationFiberStart, .-TandemEmulationFiberStart
  .popsection
)");
extern "C" void TandemEmulationFiberStart();

void cuda_emulation::PrepareContext(FiberContext& context, char* stack, size_t bytes) {
  // The entry's frame starts 16-byte aligned, below the stack's top.
  const uintptr_t top = ((reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15}) - 16;
  void** sp = reinterpret_cast<void**>(top);
  *--sp = reinterpret_cast<void*>(&TandemEmulationFiberStart);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp, rbx, r12-r15
  context.sp = sp;
}
#else
void cuda_emulation::PrepareContext(FiberContext& context, char* stack, size_t bytes) {
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = bytes;
  context.context.uc_link = nullptr;
  makecontext(&context.context, TandemEmulationFiberEntry, 0);
}
#endif

namespace cuda_emulation {
namespace {

constexpr size_t kMemoryBytes = size_t{8} << 30;
constexpr size_t kAlignment = 256;  // as cudaMalloc's

struct Host {
  std::recursive_mutex mu;
  std::map<uintptr_t, size_t> device;  // allocation -> bytes
  size_t device_bytes = 0;
  std::map<uintptr_t, size_t> pinned;  // cudaMallocHost's, likewise
  std::set<cudaStream_t> streams;
};

Host& TheHost() {
  static Host* host = new Host;  // never destroyed: static destructors may still free
  return *host;
}

// Runs the first `n` queued items of `s`.
void Drain(cudaStream_t s, uint64_t through) {
  while (s->ran < through && !s->queued.empty()) {
    std::function<void()> work = std::move(s->queued.front());
    s->queued.pop_front();
    ++s->ran;
    work();
  }
}

void DrainAll() {
  Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  for (cudaStream_t s : h.streams) Drain(s, UINT64_MAX);
}

// A call a capture forbids, made on the capturing thread while one of its
// streams is captured: the capture is invalidated and the call fails.
bool ForbiddenInCapture() {
  Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  bool forbidden = false;
  for (cudaStream_t s : h.streams) {
    if (s->capturing && s->capturer == std::this_thread::get_id()) {
      s->invalidated = true;
      forbidden = true;
    }
  }
  return forbidden;
}

// Whether [p, p + bytes) lies inside one allocation of `in`.
bool Inside(const std::map<uintptr_t, size_t>& in, const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = in.upper_bound(a);
  if (it == in.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}
bool InDevice(const void* p, size_t bytes) { return Inside(TheHost().device, p, bytes); }
bool Pinned(const void* p, size_t bytes) { return Inside(TheHost().pinned, p, bytes); }

// Whether [p, p + bytes) touches no device allocation.
bool OffDevice(const void* p, size_t bytes) {
  Host& h = TheHost();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = h.device.lower_bound(a + bytes);
  if (it == h.device.begin()) return true;
  --it;
  return it->first + it->second <= a;
}

bool Known(cudaStream_t s) { return s == nullptr || TheHost().streams.contains(s); }

}  // namespace

bool InDeviceMemory(const void* p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
  return InDevice(p, bytes);
}

cudaError_t Fail(cudaError_t error) {
  TheDevice().last_error = error;
  return error;
}

cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work) {
  Host& h = TheHost();
  std::unique_lock<std::recursive_mutex> lock(h.mu);
  if (!Known(stream)) return Fail(cudaErrorInvalidResourceHandle);
  if (stream == nullptr) {
    lock.unlock();
    work();
    return cudaSuccess;
  }
  if (stream->capturing) {
    stream->captured.push_back(std::move(work));
  } else {
    stream->queued.push_back(std::move(work));
  }
  return cudaSuccess;
}

}  // namespace cuda_emulation

using cuda_emulation::Fail;
using cuda_emulation::TheHost;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  *prop = {};
  std::snprintf(prop->name, sizeof(prop->name), "CUDA emulation on the host");
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = cuda_emulation::kMemoryBytes;
  prop->sharedMemPerBlockOptin = cuda_emulation::TheDevice().shared_optin_bytes;
  prop->multiProcessorCount = 4;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoKernelImageForDevice:
      return "cudaErrorNoKernelImageForDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorMisalignedAddress:
      return "cudaErrorMisalignedAddress";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "emulated CUDA error";
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  cuda_emulation::Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  if (bytes > cuda_emulation::kMemoryBytes - h.device_bytes) {
    return Fail(cudaErrorMemoryAllocation);
  }
  if (bytes == 0) return cudaSuccess;
  // Exactly `bytes`: under AddressSanitizer, a kernel or copy past the end
  // of an allocation is reported.
  *p = ::operator new (bytes, std::align_val_t{cuda_emulation::kAlignment});
  h.device[reinterpret_cast<uintptr_t>(*p)] = bytes;
  h.device_bytes += bytes;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  cuda_emulation::DrainAll();  // a free waits for the device, as cudaFree does
  cuda_emulation::Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  const auto it = h.device.find(reinterpret_cast<uintptr_t>(p));
  if (it == h.device.end()) return Fail(cudaErrorInvalidValue);
  h.device_bytes -= it->second;
  h.device.erase(it);
  ::operator delete (p, std::align_val_t{cuda_emulation::kAlignment});
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = nullptr;
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  *p = ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{cuda_emulation::kAlignment});
  cuda_emulation::Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  h.pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  cuda_emulation::DrainAll();
  cuda_emulation::Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  if (h.pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0) return Fail(cudaErrorInvalidValue);
  ::operator delete (p, std::align_val_t{cuda_emulation::kAlignment});
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  cuda_emulation::Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  *total = cuda_emulation::kMemoryBytes;
  *free = cuda_emulation::kMemoryBytes - h.device_bytes;
  return cudaSuccess;
}

namespace {

// A copy's pointers against its direction.
bool CopyIsValid(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return true;
  std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_ok =
      dst_device ? cuda_emulation::InDevice(dst, bytes) : cuda_emulation::OffDevice(dst, bytes);
  const bool src_ok =
      src_device ? cuda_emulation::InDevice(src, bytes) : cuda_emulation::OffDevice(src, bytes);
  return dst_ok && src_ok;
}

}  // namespace

// As CUDA does, only a copy to or from pinned memory waits in the queue:
// one from pageable memory takes its bytes before it returns, one into
// pageable memory returns once done, and neither can be captured.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (!CopyIsValid(dst, src, bytes, kind)) return Fail(cudaErrorInvalidValue);
  if (bytes == 0) return cudaSuccess;
  bool pageable_source = false, pageable_target = false;
  {
    std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
    pageable_source = kind == cudaMemcpyHostToDevice && !cuda_emulation::Pinned(src, bytes);
    pageable_target = kind == cudaMemcpyDeviceToHost && !cuda_emulation::Pinned(dst, bytes);
    if (!cuda_emulation::Known(stream)) return Fail(cudaErrorInvalidResourceHandle);
    if ((pageable_source || pageable_target) && stream != nullptr && stream->capturing) {
      stream->invalidated = true;
      return Fail(cudaErrorStreamCaptureUnsupported);
    }
  }
  if (pageable_source) {
    auto taken = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                        static_cast<const uint8_t*>(src) + bytes);
    return cuda_emulation::Enqueue(stream, [=] { std::memcpy(dst, taken->data(), bytes); });
  }
  const cudaError_t e = cuda_emulation::Enqueue(stream, [=] { std::memmove(dst, src, bytes); });
  if (e == cudaSuccess && pageable_target) return cudaStreamSynchronize(stream);
  return e;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  if (!CopyIsValid(dst, src, bytes, kind)) return Fail(cudaErrorInvalidValue);
  cuda_emulation::DrainAll();
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  {
    std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
    if (bytes > 0 && !cuda_emulation::InDevice(p, bytes)) return Fail(cudaErrorInvalidValue);
  }
  return cuda_emulation::Enqueue(stream, [=] {
    if (bytes > 0) std::memset(p, value, bytes);
  });
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
  cuda_emulation::DrainAll();
  return e;
}

cudaError_t cudaDeviceSynchronize() {
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  cuda_emulation::DrainAll();
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
  *stream = new CUstream_st;
  cuda_emulation::Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  h.streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  cuda_emulation::Host& h = TheHost();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  if (stream == nullptr || !h.streams.contains(stream)) return Fail(cudaErrorInvalidResourceHandle);
  cuda_emulation::Drain(stream, UINT64_MAX);  // its work still completes
  h.streams.erase(stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
  if (!cuda_emulation::Known(stream)) return Fail(cudaErrorInvalidResourceHandle);
  if (stream != nullptr) cuda_emulation::Drain(stream, UINT64_MAX);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode /*mode*/) {
  std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
  if (stream == nullptr || !cuda_emulation::Known(stream) || stream->capturing) {
    return Fail(cudaErrorInvalidValue);
  }
  stream->capturing = true;
  stream->invalidated = false;
  stream->captured.clear();
  stream->capturer = std::this_thread::get_id();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
  if (stream == nullptr || !cuda_emulation::Known(stream) || !stream->capturing) {
    return Fail(cudaErrorInvalidValue);
  }
  stream->capturing = false;
  std::vector<std::function<void()>> work = std::move(stream->captured);
  stream->captured.clear();
  if (stream->invalidated) return Fail(cudaErrorStreamCaptureInvalidated);
  *graph = new CUgraph_st{std::move(work)};
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long /*flags*/) {
  *exec = nullptr;
  if (graph == nullptr) return Fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->work};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return Fail(cudaErrorInvalidValue);
  for (const std::function<void()>& work : exec->work) {
    if (const cudaError_t e = cuda_emulation::Enqueue(stream, work); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned /*flags*/) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
  if (event == nullptr || !cuda_emulation::Known(stream)) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  if (stream != nullptr && stream->capturing) return cudaSuccess;  // a node of the graph
  event->stream = stream;
  event->through = stream == nullptr ? 0 : stream->ran + stream->queued.size();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (cuda_emulation::ForbiddenInCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (event->stream != nullptr && cuda_emulation::Known(event->stream)) {
    cuda_emulation::Drain(event->stream, event->through);
  }
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  const bool done = [&] {
    std::lock_guard<std::recursive_mutex> lock(TheHost().mu);
    for (cudaEvent_t e : {start, end}) {
      if (e->stream != nullptr && cuda_emulation::Known(e->stream) && e->stream->ran < e->through) {
        return false;
      }
    }
    return true;
  }();
  if (!done) return Fail(cudaErrorNotReady);
  // No clock to read: a millisecond per event of distance, so rates stay
  // finite and positive.
  *ms = 1.0f;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
