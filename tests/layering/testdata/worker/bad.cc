#include "rpc/status.h"
#include "gateway/calls/generate_call.h"
