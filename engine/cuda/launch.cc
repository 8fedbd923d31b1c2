#include "engine/cuda/launch.h"

namespace tandem::engine::cuda {
namespace {

thread_local bool programmatic_launch = false;

}  // namespace

void SetProgrammaticLaunch(bool on) { programmatic_launch = on; }

bool ProgrammaticLaunch() { return programmatic_launch; }

}  // namespace tandem::engine::cuda
