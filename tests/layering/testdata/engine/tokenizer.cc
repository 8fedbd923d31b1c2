#include "engine/gguf.h"
#include "engine/cpu/kernels.h"
