// The gateway's OpenAI-compatible HTTP front (--http-listen): POST
// /v1/completions and /v1/chat/completions (whole JSON or, with "stream":
// true, server-sent events) and GET /v1/models. Each request is translated
// (openai_api.h) and sent through an in-process channel to the gateway's own
// Generation service, so validation, routing, admission, metrics and
// metadata (authorization, x-request-id) are those of a gRPC call: one code
// path behind both fronts. Served by cpp-httplib's thread pool, one thread
// per request in progress. Thread-safe.
#ifndef TANDEM_GATEWAY_HTTP_HTTP_FRONT_H_
#define TANDEM_GATEWAY_HTTP_HTTP_FRONT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"
#include "gateway/http/https_certificate.h"
#include "gateway/http/openai_api.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace tandem::gateway {

struct HttpFrontOptions {
  // "host:port"; port 0 lets the kernel pick.
  std::string listen;
  // Requests served at once (each streaming response holds one thread).
  int threads = 64;
  // Largest request body accepted (413 above it).
  size_t max_body_bytes = 8 << 20;
  // What responses report as "model" when a request names none.
  std::string model_name;
  // Non-null: HTTPS with this (reloading) certificate; null: plain HTTP.
  std::shared_ptr<HttpsCertificate> https = nullptr;
  // How the model writes tool calls (--tool-call-parser; "auto" is resolved
  // from the chat template before the front starts).
  tools::ToolCallFormat tool_call_format = tools::ToolCallFormat::kJson;
};

class HttpFront {
 public:
  // Binds and starts serving; `channel` reaches the Generation service.
  static absl::StatusOr<std::unique_ptr<HttpFront>> Start(const HttpFrontOptions& options,
                                                          std::shared_ptr<grpc::Channel> channel,
                                                          prometheus::Registry& registry);
  // Stops accepting and waits for the requests in progress.
  ~HttpFront();

  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // The bound "host:port".
  const std::string& address() const { return address_; }
  // Stops accepting connections; idempotent.
  void Stop();

 private:
  HttpFront(std::shared_ptr<grpc::Channel> channel, prometheus::Registry& registry,
            std::shared_ptr<HttpsCertificate> https);
  void Route();
  void Generate(openai::Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // Counts one answered request.
  void Count(const std::string& path, int status);

  std::unique_ptr<tandem::v1::Generation::Stub> stub_;
  const std::shared_ptr<HttpsCertificate> https_;  // outlives server_'s SSL_CTX
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  std::string model_name_;
  tools::ToolCallFormat tool_call_format_ = tools::ToolCallFormat::kJson;
  prometheus::Family<prometheus::Counter>& requests_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_HTTP_HTTP_FRONT_H_
