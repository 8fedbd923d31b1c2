// Files and directories a test writes under the test temp dir, removed when
// the test process exits (ctest runs each case as a process of its own), so
// a test run leaves nothing behind in /tmp: a model quantized, a disk tier
// filled.
#ifndef TANDEM_TESTS_COMMON_TEMP_PATHS_H_
#define TANDEM_TESTS_COMMON_TEMP_PATHS_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace tandem::testing {

// `stem` + "_" + the process id + `suffix` under the test temp dir, removed
// (with whatever it holds) now and when the process exits.
inline std::string TempPathRemovedAtExit(const std::string& stem, const std::string& suffix = "") {
  struct Registry {
    std::mutex mu;
    std::vector<std::string> paths;
    ~Registry() {
      std::error_code ignored;
      for (const std::string& p : paths) std::filesystem::remove_all(p, ignored);
    }
  };
  static Registry registry;
  const std::string path =
      ::testing::TempDir() + "/" + stem + "_" + std::to_string(::getpid()) + suffix;
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.paths.push_back(path);
  return path;
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_COMMON_TEMP_PATHS_H_
