#include "engine/engine.h"
#include "tandem/v1/worker.pb.h"
#include "rpc/status.h"
