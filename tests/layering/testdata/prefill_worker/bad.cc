#include "decode_worker/decode_service.h"
