// libFuzzer target: a GenerateRequest as a client sends it (protobuf bytes),
// parsed and validated the way the gateway does before any work: the wire
// bytes read by rpc::ParseMessage (invalid UTF-8 named), fields checked, the
// prompt tokenized with the tokenizer of $TANDEM_FUZZ_MODEL. Any input gives
// a request or an INVALID_ARGUMENT naming a field, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gateway/calls/validated_request.h"
#include "google/protobuf/stubs/logging.h"
#include "rpc/wire_parse.h"
#include "tandem/v1/generation.pb.h"
#include "tests/fuzz/fuzz_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    // Invalid UTF-8 in a string field is a parse failure, which libprotobuf
    // also logs; the fuzzer makes many.
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  const tandem::engine::Tokenizer& tok = tandem::fuzz::FuzzTokenizer();
  tandem::v1::GenerateRequest request;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!tandem::rpc::ParseMessage(bytes, &request).ok()) return 0;
  tandem::gateway::GatewayLimits limits;
  limits.max_context = 512;
  limits.max_prompt_bytes = 4096;
  (void)tandem::gateway::ValidateGenerateRequest(request, tok, "m", limits);
  return 0;
}
