#include "worker/engine_loop.h"
#include "engine/sample/sampling_params.h"
