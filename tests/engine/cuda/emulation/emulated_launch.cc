// engine/cuda/launch.cc compiled for the host, in the emulated kernels'
// namespace (emulated_kernels.h): whether this thread's launches are
// programmatic, which the kernels pass on to their prefetches.
#define tandem tandem_emulated
#include "engine/cuda/launch.cc"
#undef tandem
