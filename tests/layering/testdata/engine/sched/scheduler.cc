// A scheduler reaching for a kernel: the engine/sched room may not.
#include "engine/sample/sampler.h"
#include "engine/cpu/kernels.h"
