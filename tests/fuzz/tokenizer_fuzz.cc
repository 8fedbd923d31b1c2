// libFuzzer target: text and token ids as clients send them, through the
// tokenizer of the model named by $TANDEM_FUZZ_MODEL (a GGUF file; the fuzz
// script runs it with stories260K's SPM vocabulary and a synthetic BPE one).
// Encoding any bytes (invalid UTF-8 included), with and without special
// tokens, and decoding any ids in range must not crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "tests/fuzz/fuzz_model.h"


extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tandem::engine::Tokenizer* const tok = &tandem::fuzz::FuzzTokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool special = size > 0 && (data[0] & 1);
  const std::vector<int32_t> ids =
      tok->Encode(text, {.add_special = special, .parse_special = special});
  (void)tok->Decode(ids);
  // The same bytes as ids.
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  for (int32_t& id : raw) id = static_cast<int32_t>(static_cast<uint32_t>(id) % tok->n_vocab());
  (void)tok->Decode(raw);
  for (int32_t id : raw) (void)tok->TokenBytes(id);
  return 0;
}
