// Where the tests find what the build knows by absolute path: the built
// executables, the source tree and the shared model directory. The paths are
// compiled into one small library (test_paths.cc, tests/CMakeLists.txt)
// rather than into every test's object, so no other object depends on where
// the tree is cloned and ccache can share them between clones.
#ifndef TANDEM_TESTS_TEST_PATHS_H_
#define TANDEM_TESTS_TEST_PATHS_H_

#include <string>

namespace tandem::test_paths {

// The build's bin/ directory: tandem, the workers, the benchmarks.
std::string BinDir();

// The repository's root.
std::string SourceDir();

// The directory holding stories260K.gguf (../shared/models by default; the
// TANDEM_SHARED_MODELS_DIR cache variable moves it).
std::string SharedModelsDir();

// SharedModelsDir() + "/stories260K.gguf".
std::string StoriesPath();

}  // namespace tandem::test_paths

#endif  // TANDEM_TESTS_TEST_PATHS_H_
