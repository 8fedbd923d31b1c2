// Helper process for subprocess_test: behaves like a Tandem binary (or like
// a broken one) depending on argv[1], so the parent side of the READY
// contract can be tested against a real child. Single-threaded except for
// the gRPC/metrics servers in "serve" mode.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rpc/bootstrap.h"
#include "rpc/metrics.h"

namespace {

void PauseForever() {
  while (true) pause();
}

// The pattern every Tandem main follows.
int Serve() {
  tandem::rpc::BlockShutdownSignals();
  auto metrics = tandem::rpc::MetricsServer::Start("127.0.0.1:0");
  if (!metrics.ok()) {
    std::fprintf(stderr, "%s\n", metrics.status().ToString().c_str());
    return 1;
  }
  tandem::rpc::CounterMetric((*metrics)->registry(),
                                "tandem_ready_child_starts_total",
                                "Times this child started.")
      .Increment();
  auto grpc = tandem::rpc::StartGrpcServer({}, {});
  if (!grpc.ok()) {
    std::fprintf(stderr, "%s\n", grpc.status().ToString().c_str());
    return 1;
  }
  std::printf("loading nothing in particular\n");
  tandem::common::PrintReady({grpc->address, (*metrics)->address()});
  const int signal = tandem::rpc::WaitForShutdownSignal();
  std::fprintf(stderr, "ready_child: got signal %d\n", signal);
  tandem::rpc::ShutdownServer(*grpc->server, absl::Seconds(1));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve") return Serve();
  if (mode == "fail") {
    std::printf("loading model\nbad magic in model file\n");
    std::fflush(stdout);
    std::fprintf(stderr, "ready_child: failing on purpose\n");
    return 3;
  }
  if (mode == "hang") {  // never ready; dies by SIGTERM's default action
    std::printf("thinking\n");
    std::fflush(stdout);
    PauseForever();
  }
  if (mode == "ignore_term") {  // ready, but only SIGKILL ends it
    signal(SIGTERM, SIG_IGN);
    tandem::common::PrintReady({"127.0.0.1:1", ""});
    PauseForever();
  }
  if (mode == "env") {  // READY with an address taken from the environment
    const char* value = std::getenv("READY_CHILD_ADDRESS");
    tandem::common::PrintReady({value != nullptr ? value : "missing", ""});
    PauseForever();
  }
  if (mode == "flood") {  // READY, then far more output than a pipe holds
    tandem::common::PrintReady({"127.0.0.1:1", ""});
    const std::string line(1023, 'x');
    for (int i = 0; i < 4096; ++i) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "flood done\n");
    return 0;
  }
  if (mode == "close_stdout") {  // closes stdout without READY, keeps running
    std::fclose(stdout);
    PauseForever();
  }
  std::fprintf(stderr, "ready_child: unknown mode \"%s\"\n", mode.c_str());
  return 2;
}
