#include "gateway/http/http_front.h"

#include <ctime>
#include <utility>

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "gateway/http/openai_api.h"
#include "gateway/calls/validated_request.h"
#include "rpc/status.h"

namespace tandem::gateway {
namespace {

constexpr char kJson[] = "application/json";

void Fail(httplib::Response& res, const absl::Status& status) {
  res.status = openai::HttpStatus(status.code());
  res.set_content(openai::ErrorBody(status), kJson);
}

// The request headers a gRPC call carries as metadata. InvalidArgument when
// one could not be sent as metadata.
absl::Status CopyMetadata(const httplib::Request& req, grpc::ClientContext& ctx) {
  if (req.has_header("x-request-id")) {
    const std::string id = req.get_header_value("x-request-id");
    if (absl::Status s = ValidateRequestId(id, "x-request-id"); !s.ok()) return s;
    ctx.AddMetadata("x-request-id", id);
  }
  if (req.has_header("authorization")) {
    const std::string value = req.get_header_value("authorization");
    for (char c : value) {
      if (c < 0x20 || c > 0x7e) {
        return absl::InvalidArgumentError("authorization: must be printable ASCII");
      }
    }
    ctx.AddMetadata("authorization", value);
  }
  return absl::OkStatus();
}

// One Generate call behind an HTTP request. A call abandoned before its end
// (the client went away mid-stream) is cancelled, so its workers stop.
struct Call {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<tandem::v1::GenerateResponse>> reader;
  bool finished = false;

  grpc::Status Finish() {
    finished = true;
    return reader->Finish();
  }
  ~Call() {
    if (reader == nullptr || finished) return;
    ctx.TryCancel();
    tandem::v1::GenerateResponse drain;
    while (reader->Read(&drain)) {
    }
    reader->Finish();
  }
};

// Whether every string was written (false: the client is gone).
bool WriteAll(httplib::DataSink& sink, const std::vector<std::string>& events) {
  for (const std::string& e : events) {
    if (!sink.write(e.data(), e.size())) return false;
  }
  return true;
}

std::string PathLabel(const std::string& path) {
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/models"}) {
    if (path == known) return known;
  }
  return "other";
}

}  // namespace

HttpFront::HttpFront(std::shared_ptr<grpc::Channel> channel, prometheus::Registry& registry,
                     std::shared_ptr<HttpsCertificate> https)
    : stub_(tandem::v1::Generation::NewStub(std::move(channel))),
      https_(std::move(https)),
      server_(https_ == nullptr
                  ? std::make_unique<httplib::Server>()
                  : std::make_unique<httplib::SSLServer>([cert = https_.get()](SSL_CTX& ctx) {
                      return cert->Configure(ctx);
                    })),
      requests_(prometheus::BuildCounter()
                    .Name("tandem_http_requests_total")
                    .Help("Requests answered by the OpenAI-compatible HTTP front, by path and "
                          "HTTP status")
                    .Register(registry)) {}

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Start(
    const HttpFrontOptions& options, std::shared_ptr<grpc::Channel> channel,
    prometheus::Registry& registry) {
  absl::StatusOr<common::HostPort> hp = common::SplitHostPort(options.listen);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--http-listen: ", hp.status().message()));
  }
  std::unique_ptr<HttpFront> front(new HttpFront(std::move(channel), registry, options.https));
  if (!front->server_->is_valid()) {
    return absl::InvalidArgumentError("--tls-client-ca: not a usable CA bundle for HTTPS");
  }
  const int threads = options.threads;
  front->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  front->server_->set_payload_max_length(options.max_body_bytes);
  front->model_name_ = options.model_name;
  front->tool_call_format_ = options.tool_call_format;
  front->Route();
  const std::string host = common::StripBrackets(hp->host);
  int port = hp->port;
  if (port == 0) {
    port = front->server_->bind_to_any_port(host);
    if (port < 0) {
      return absl::UnavailableError(absl::StrCat("--http-listen: cannot bind ", options.listen));
    }
  } else if (!front->server_->bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrCat("--http-listen: cannot bind ", options.listen));
  }
  front->address_ = common::JoinHostPort(hp->host, port);
  httplib::Server* server = front->server_.get();
  // The socket listens from the bind on: connections made before the loop
  // below starts wait in the backlog.
  front->thread_ = std::thread([server] { server->listen_after_bind(); });
  return front;
}

HttpFront::~HttpFront() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void HttpFront::Stop() { server_->stop(); }

void HttpFront::Count(const std::string& path, int status) {
  requests_.Add({{"path", PathLabel(path)}, {"code", absl::StrCat(status)}}).Increment();
}

void HttpFront::Route() {
  server_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    Count(req.path, res.status);
  });
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const absl::Status status =
        res.status == 404 ? absl::NotFoundError(absl::StrCat("no route for ", req.method, " ",
                                                             req.path))
        : res.status == 413 ? absl::InvalidArgumentError("body: larger than the limit")
                            : absl::InvalidArgumentError("the request could not be read");
    const int code = res.status;
    res.set_content(openai::ErrorBody(status), kJson);
    res.status = code;
  });
  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(openai::Endpoint::kCompletions, req, res);
  });
  server_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Generate(openai::Endpoint::kChat, req, res);
                });
  server_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    grpc::ClientContext ctx;
    if (absl::Status s = CopyMetadata(req, ctx); !s.ok()) return Fail(res, s);
    tandem::v1::ListModelsResponse models;
    const grpc::Status status = stub_->ListModels(&ctx, {}, &models);
    if (!status.ok()) return Fail(res, rpc::FromGrpcStatus(status));
    res.set_content(openai::ModelsBody(models), kJson);
  });
}

void HttpFront::Generate(openai::Endpoint endpoint, const httplib::Request& req,
                         httplib::Response& res) {
  absl::StatusOr<openai::Request> parsed = openai::ParseRequest(endpoint, req.body, tool_call_format_);
  if (!parsed.ok()) return Fail(res, parsed.status());
  auto call = std::make_shared<Call>();
  if (absl::Status s = CopyMetadata(req, call->ctx); !s.ok()) return Fail(res, s);
  call->reader = stub_->Generate(&call->ctx, parsed->generate);
  // The first message (or the error) decides the HTTP status, before any
  // byte of the body is sent.
  tandem::v1::GenerateResponse first;
  if (!call->reader->Read(&first)) {
    const grpc::Status status = call->Finish();
    return Fail(res, status.ok() ? absl::InternalError("the stream ended without a message")
                                 : openai::ExplainForcedCallError(parsed->tools,
                                                                  rpc::FromGrpcStatus(status)));
  }
  res.set_header("x-request-id", first.request_id());
  const std::string model =
      parsed->generate.model().empty() ? model_name_ : parsed->generate.model();
  const auto created = static_cast<int64_t>(std::time(nullptr));
  auto builder =
      std::make_shared<openai::ResponseBuilder>(*parsed, first.request_id(), model, created);
  if (!parsed->stream) {
    builder->Add(first);
    tandem::v1::GenerateResponse message;
    while (call->reader->Read(&message)) builder->Add(message);
    const grpc::Status status = call->Finish();
    if (!status.ok()) return Fail(res, rpc::FromGrpcStatus(status));
    res.set_content(builder->Body(), kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  auto pending = std::make_shared<std::vector<std::string>>(builder->Events(first));
  res.set_chunked_content_provider(
      "text/event-stream", [call, builder, pending](size_t, httplib::DataSink& sink) {
        if (!WriteAll(sink, *pending)) return false;
        pending->clear();
        tandem::v1::GenerateResponse message;
        if (call->reader->Read(&message)) return WriteAll(sink, builder->Events(message));
        const grpc::Status status = call->Finish();
        if (!status.ok()) {
          // Past the headers an error can only be an event of its own.
          const std::string error =
              absl::StrCat("data: ", openai::ErrorBody(rpc::FromGrpcStatus(status)), "\n\n");
          if (!sink.write(error.data(), error.size())) return false;
        } else if (!WriteAll(sink, builder->Closing())) {
          return false;
        }
        sink.done();
        return true;
      });
}

}  // namespace tandem::gateway
