#include "engine/cuda/device.h"
