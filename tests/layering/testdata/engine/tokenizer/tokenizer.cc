#include "engine/gguf/gguf.h"
#include "engine/cpu/kernels.h"
