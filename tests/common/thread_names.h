// The names of a process's threads, from /proc: for tests that check which
// threads a component starts (or does not).
#ifndef TANDEM_TESTS_COMMON_THREAD_NAMES_H_
#define TANDEM_TESTS_COMMON_THREAD_NAMES_H_

#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tandem::testing {

inline std::vector<std::string> ThreadNames(pid_t pid = ::getpid()) {
  std::vector<std::string> names;
  const std::filesystem::path tasks =
      std::filesystem::path("/proc") / std::to_string(pid) / "task";
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  return names;
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_COMMON_THREAD_NAMES_H_
