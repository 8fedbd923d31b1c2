#include "rpc/status.h"
#include "gateway/generate_call.h"
