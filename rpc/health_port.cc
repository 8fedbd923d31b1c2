#include "rpc/health_port.h"

#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/status_macros.h"

namespace tandem::rpc {

class HealthPort::Mirror final : public grpc::HealthCheckServiceInterface {
 public:
  explicit Mirror(grpc::HealthCheckServiceInterface* port) : port_(port) {}
  void set_main(grpc::HealthCheckServiceInterface* main) { main_ = main; }

  void SetServingStatus(const std::string& service_name, bool serving) override {
    if (main_ != nullptr) main_->SetServingStatus(service_name, serving);
    port_->SetServingStatus(service_name, serving);
  }
  // The overall status resets every named one, liveness included: set it
  // again.
  void SetServingStatus(bool serving) override {
    if (main_ != nullptr) main_->SetServingStatus(serving);
    port_->SetServingStatus(serving);
    port_->SetServingStatus("liveness", true);
  }
  void Shutdown() override {
    if (main_ != nullptr) main_->Shutdown();
  }

 private:
  grpc::HealthCheckServiceInterface* main_ = nullptr;
  grpc::HealthCheckServiceInterface* const port_;
};

common::FlagSpec HealthListenFlagSpec() {
  return {.name = "health-listen", .default_value = "",
          .help = "plaintext host:port serving only grpc.health.v1 (the main port's status, "
                  "and \"liveness\"), for probes that cannot speak TLS; empty = off"};
}

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(const std::string& listen) {
  ASSIGN_OR_RETURN(const common::HostPort hp, common::SplitHostPort(listen));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<HealthPort> health(new HealthPort());
  health->server_ = builder.BuildAndStart();
  if (health->server_ == nullptr || port == 0 ||
      health->server_->GetHealthCheckService() == nullptr) {
    return absl::UnavailableError(absl::StrCat("--health-listen: cannot listen on ", listen));
  }
  health->address_ = common::JoinHostPort(hp.host, port);
  health->mirror_ = std::make_unique<Mirror>(health->server_->GetHealthCheckService());
  health->mirror_->SetServingStatus(false);  // until the main server says otherwise
  return health;
}

HealthPort::~HealthPort() {
  if (server_ != nullptr) {
    server_->Shutdown();
    server_->Wait();
  }
}

grpc::HealthCheckServiceInterface* HealthPort::Tee(grpc::HealthCheckServiceInterface* main) {
  mirror_->set_main(main);
  return mirror_.get();
}

}  // namespace tandem::rpc
