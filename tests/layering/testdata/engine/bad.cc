#include <grpcpp/grpcpp.h>
#include "tandem/v1/worker.pb.h"
#include "kvtransfer/block_codec.h"
