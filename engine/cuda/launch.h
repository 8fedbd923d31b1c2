// How this thread's kernel launches order themselves after the kernel
// before them on their stream (engine/cuda/launch.cuh launches them).
//
// Ordinarily a kernel starts once the one before it has finished and its
// writes are visible. With programmatic dependent launch (compute
// capability 9.0 and newer; CUDA's "PDL"), a kernel may start while the one
// before it is still running, as soon as every block of that one has
// passed its own wait: its blocks then load what no kernel writes (a
// product's weights, into L2) and wait there (griddepcontrol.wait) for the
// kernel before to finish before they touch anything it reads or writes.
// A decode step is some 200 short kernels; each otherwise starts its weight
// loads only after the one before it ends (docs/benchmarks.md, "GPU").
//
// The setting belongs to the calling thread, as cudaSetDevice's device
// does: a CUDA backend sets it from --cuda-pdl wherever it sets its device,
// and every launch on that thread follows it. Off unless set.
#ifndef TANDEM_ENGINE_CUDA_LAUNCH_H_
#define TANDEM_ENGINE_CUDA_LAUNCH_H_

namespace tandem::engine::cuda {

void SetProgrammaticLaunch(bool on);
bool ProgrammaticLaunch();

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_LAUNCH_H_
