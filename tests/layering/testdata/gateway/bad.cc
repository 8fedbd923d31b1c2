#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "worker/engine_loop.h"
