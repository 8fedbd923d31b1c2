#include "gateway/generation_service.h"

#include "absl/strings/str_cat.h"
#include "gateway/generate_call.h"
#include "rpc/status.h"

namespace tandem::gateway {

GenerationService::GenerationService(std::unique_ptr<engine::Tokenizer> tokenizer,
                                     GatewayOptions options, prometheus::Registry& registry)
    : tokenizer_(std::move(tokenizer)),
      options_(std::move(options)),
      prefill_(options_.prefill_workers),
      decode_(options_.decode_workers),
      metrics_(registry) {}

grpc::Status GenerationService::Count(const char* method, const absl::Status& status) {
  metrics_.requests.Add({{"method", method}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  return rpc::ToGrpcStatus(status);
}

grpc::Status GenerationService::Generate(grpc::ServerContext* ctx,
                                         const tandem::v1::GenerateRequest* request,
                                         grpc::ServerWriter<tandem::v1::GenerateResponse>* writer) {
  absl::StatusOr<ValidatedRequest> validated =
      ValidateGenerateRequest(*request, *tokenizer_, options_.model_name, options_.limits);
  if (!validated.ok()) return Count("Generate", validated.status());
  GenerateCall call({.tokenizer = tokenizer_.get(),
                     .prefill = &prefill_,
                     .decode = &decode_,
                     .channels = &channels_,
                     .metrics = &metrics_,
                     .request_timeout = options_.request_timeout},
                    ctx, writer);
  return Count("Generate", call.Run(*validated));
}

grpc::Status GenerationService::Tokenize(grpc::ServerContext*,
                                         const tandem::v1::TokenizeRequest* request,
                                         tandem::v1::TokenizeResponse* response) {
  if (!request->model().empty() && request->model() != options_.model_name) {
    return Count("Tokenize", absl::InvalidArgumentError(absl::StrCat(
                                 "model: unknown model \"", request->model(),
                                 "\"; this gateway serves \"", options_.model_name, "\"")));
  }
  if (static_cast<int64_t>(request->text().size()) > options_.limits.max_prompt_bytes) {
    return Count("Tokenize", absl::InvalidArgumentError(absl::StrCat(
                                 "text: ", request->text().size(), " bytes exceed the limit of ",
                                 options_.limits.max_prompt_bytes)));
  }
  const bool special = !request->no_special();
  for (int32_t id : tokenizer_->Encode(request->text(),
                                       {.add_special = special, .parse_special = special})) {
    response->add_token_ids(id);
  }
  return Count("Tokenize", absl::OkStatus());
}

grpc::Status GenerationService::ListModels(grpc::ServerContext*,
                                           const tandem::v1::ListModelsRequest*,
                                           tandem::v1::ListModelsResponse* response) {
  tandem::v1::ModelInfo* m = response->add_models();
  m->set_id(options_.model_name);
  m->set_architecture(options_.architecture);
  m->set_vocab_size(tokenizer_->n_vocab());
  m->set_max_context(options_.limits.max_context);
  return Count("ListModels", absl::OkStatus());
}

}  // namespace tandem::gateway
