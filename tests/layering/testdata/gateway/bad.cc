#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "worker/engine_loop.h"
