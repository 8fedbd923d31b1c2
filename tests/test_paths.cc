#include "tests/test_paths.h"

#include <string>

namespace tandem::test_paths {

std::string BinDir() { return TANDEM_BIN_DIR; }

std::string SourceDir() { return TANDEM_SOURCE_DIR; }

std::string SharedModelsDir() { return TANDEM_SHARED_MODELS_DIR; }

std::string StoriesPath() { return SharedModelsDir() + "/stories260K.gguf"; }

}  // namespace tandem::test_paths
