#include "worker/engine_loop.h"
#include "engine/sampling_params.h"
