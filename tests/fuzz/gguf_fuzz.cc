// libFuzzer target: a GGUF file as a user might hand it over. The bytes are
// opened as a file (GgufFile::Open maps it) and, when that succeeds, read
// for a tokenizer and model hyperparameters. Hostile headers must give a
// status, never a crash, an unbounded allocation or a read past the end.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/gguf/model_config.h"
#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::engine;  // NOLINT: a fuzz entry point
  static const int fd = memfd_create("gguf_fuzz", 0);
  if (fd < 0) return 0;
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  // Small bounds: the fuzzer should find the checks, not exhaust memory.
  GgufOpenOptions options;
  options.require_tensor_data = false;
  options.max_tensors = 1 << 10;
  options.max_kv = 1 << 10;
  options.max_array_elements = 1 << 16;
  options.max_string_bytes = 1 << 16;
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path, options);
  if (!file.ok()) return 0;
  (void)ReadModelConfig(**file);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
  if (tok.ok()) {
    const std::vector<int32_t> ids = (*tok)->Encode("Once upon a time", {});
    for (int32_t id : ids) (void)(*tok)->TokenBytes(id);
  }
  return 0;
}
