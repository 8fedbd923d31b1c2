// tandem-kv-transfer-bench: KV transfer bandwidth of the gRPC stream
// transport on loopback. A KvLeaseServer holds one prompt's blocks (the
// 25.7M synthetic Llama's KV shape by default: 8 layers, kv_dim 256, f32,
// 16-token blocks) and a KvFetcher fetches, verifies and decodes them, as a
// decode worker does; repeated, median reported. memcpy of the same bytes on
// the same machine is the reference (the target is 25% of it).
// Prints a table and one JSON line (appended to --out); never fails on speed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/flags.h"
#include "common/malloc_tuning.h"
#include "kvtransfer/rpc/kv_fetcher.h"
#include "kvtransfer/rpc/lease_server.h"
#include "kvtransfer/rpc/release_client.h"
#include "rpc/bootstrap.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::bench {
namespace {

// Serves FetchKv and ReleaseKv from a lease server, as the Prefill service does.
class LeaseOnlyPrefill final
    : public tandem::v1::Prefill::WithRawCallbackMethod_FetchKv<
          tandem::v1::Prefill::CallbackService> {
 public:
  explicit LeaseOnlyPrefill(kvtransfer::KvLeaseServer& leases) : leases_(leases) {}
  grpc::ServerWriteReactor<grpc::ByteBuffer>* FetchKv(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* request) override {
    return leases_.Fetch(ctx, request);
  }
  grpc::ServerUnaryReactor* ReleaseKv(grpc::CallbackServerContext* ctx,
                                      const tandem::v1::ReleaseKvRequest* request,
                                      tandem::v1::ReleaseKvResponse*) override {
    leases_.Release(*request);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  kvtransfer::KvLeaseServer& leases_;
};

// The kernel's own floor for the same bytes: a plain TCP socket pair on
// loopback, one thread sending each block with send(), this one receiving
// them with recv() into one buffer. No framing, checksum or gRPC.
class RawTcpPair {
 public:
  static absl::StatusOr<RawTcpPair> Open() {
    RawTcpPair pair;
    pair.listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (pair.listener_ < 0 || bind(pair.listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(pair.listener_, 1) != 0 ||
        getsockname(pair.listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return absl::UnavailableError(absl::StrCat("loopback listener: ", std::strerror(errno)));
    }
    pair.client_ = socket(AF_INET, SOCK_STREAM, 0);
    if (pair.client_ < 0 || connect(pair.client_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        (pair.server_ = accept(pair.listener_, nullptr, nullptr)) < 0) {
      return absl::UnavailableError(absl::StrCat("loopback connect: ", std::strerror(errno)));
    }
    return pair;
  }
  RawTcpPair(RawTcpPair&& o) noexcept
      : listener_(std::exchange(o.listener_, -1)),
        client_(std::exchange(o.client_, -1)),
        server_(std::exchange(o.server_, -1)) {}
  ~RawTcpPair() {
    for (int fd : {listener_, client_, server_}) {
      if (fd >= 0) close(fd);
    }
  }

  // Seconds to move every block into `dst`; -1 on a socket error.
  double Move(const std::vector<engine::KvBlockBytes>& blocks, std::vector<uint8_t>& dst) {
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<bool> failed{false};
    std::thread sender([&] {
      for (const engine::KvBlockBytes& b : blocks) {
        for (const std::span<const uint8_t> piece : b.pieces()) {
          for (size_t off = 0; off < piece.size();) {
            const ssize_t n = send(server_, piece.data() + off, piece.size() - off, 0);
            if (n <= 0) {
              failed = true;
              return;
            }
            off += static_cast<size_t>(n);
          }
        }
      }
    });
    for (size_t off = 0; off < dst.size() && !failed;) {
      const ssize_t n = recv(client_, dst.data() + off, dst.size() - off, 0);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    sender.join();
    if (failed) return -1;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  RawTcpPair() = default;
  int listener_ = -1;
  int client_ = -1;
  int server_ = -1;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(const common::Args& args) {
  const int32_t tokens = *args.IntInRange("prompt-tokens", 1, 1 << 20);
  const int32_t n_layer = *args.IntInRange("n-layer", 1, 1024);
  const int32_t kv_dim = *args.IntInRange("kv-dim", 1, 1 << 16);
  const int32_t block_size = *args.IntInRange("block-size", 1, 1024);
  const int32_t repeats = *args.IntInRange("repeats", 1, 1000);
  const int32_t streams = *args.IntInRange("streams", 1, 16);

  // A snapshot of random bytes in the engine's block layout.
  auto snapshot = std::make_shared<engine::KvSnapshot>();
  snapshot->model_fingerprint = 0x5eed;
  snapshot->n_tokens = tokens;
  snapshot->block_size = block_size;
  snapshot->n_layer = n_layer;
  snapshot->kv_dim = kv_dim;
  snapshot->dtype = engine::GgmlType::kF32;
  const size_t block_bytes = size_t{2} * n_layer * block_size * kv_dim * sizeof(float);
  std::mt19937_64 rng(1);
  for (int32_t b = 0; b < (tokens + block_size - 1) / block_size; ++b) {
    std::vector<uint8_t> bytes(block_bytes);
    for (size_t i = 0; i < bytes.size(); i += 8) {
      const uint64_t r = rng();
      std::memcpy(bytes.data() + i, &r, std::min<size_t>(8, bytes.size() - i));
    }
    snapshot->blocks.push_back(std::move(bytes));
  }
  std::vector<int32_t> ids(tokens);
  for (int32_t i = 0; i < tokens; ++i) ids[i] = 3 + i % 1000;
  const double payload = static_cast<double>(snapshot->blocks.size() * block_bytes);

  prometheus::Registry registry;
  kvtransfer::KvLeaseServer leases({}, registry);
  LeaseOnlyPrefill service(leases);
  absl::StatusOr<rpc::StartedServer> server = rpc::StartGrpcServer({}, {&service});
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  rpc::ChannelCache channels;
  kvtransfer::ReleaseClient releases(channels, "bench");
  const kvtransfer::BlockExpectation expect{
      .model_fingerprint = snapshot->model_fingerprint,
      .block_size = static_cast<uint32_t>(block_size),
      .layer_count = static_cast<uint32_t>(n_layer),
      .kv_dim = static_cast<uint32_t>(kv_dim),
      .dtype = engine::GgmlType::kF32,
      .payload_bytes = static_cast<int64_t>(block_bytes)};
  kvtransfer::KvFetcher fetcher(channels, releases, expect, registry, streams);

  absl::StatusOr<RawTcpPair> tcp = RawTcpPair::Open();
  if (!tcp.ok()) {
    std::cerr << tcp.status() << "\n";
    return 1;
  }
  std::vector<double> transfer_gbps;
  std::vector<double> memcpy_gbps;
  std::vector<double> tcp_gbps;
  // memcpy reference: the same blocks into a destination of the same size
  // (touched once first), RAM to RAM as a transfer's bytes go.
  std::vector<uint8_t> dst(snapshot->blocks.size() * block_bytes, 1);
  for (int32_t r = 0; r < repeats + 1; ++r) {  // the first run warms the channel
    absl::StatusOr<kvtransfer::KvLeaseServer::Held> held = leases.Hold(snapshot, ids, 0);
    if (!held.ok()) {
      std::cerr << held.status() << "\n";
      return 1;
    }
    absl::Notification done;
    absl::Status status;
    const auto t0 = std::chrono::steady_clock::now();
    fetcher.Start({.address = server->address, .lease_id = held->lease_id,
                   .num_blocks = held->num_blocks, .token_ids = ids},
                  [&](kvtransfer::FetchResult result) {
                    status = result.kv.status();
                    done.Notify();
                  });
    done.WaitForNotification();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!status.ok()) {
      std::cerr << "fetch failed: " << status << "\n";
      return 1;
    }
    const auto m0 = std::chrono::steady_clock::now();
    uint8_t* to = dst.data();
    for (const engine::KvBlockBytes& b : snapshot->blocks) {
      b.CopyTo(to);
      to += b.size();
    }
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
    const double ts = tcp->Move(snapshot->blocks, dst);
    if (ts < 0) {
      std::cerr << "raw TCP reference failed\n";
      return 1;
    }
    if (r == 0) continue;
    transfer_gbps.push_back(payload / s / 1e9);
    memcpy_gbps.push_back(payload / ms / 1e9);
    tcp_gbps.push_back(payload / ts / 1e9);
  }
  const double t = Median(transfer_gbps);
  const double m = Median(memcpy_gbps);
  const double k = Median(tcp_gbps);
  std::cout << absl::StrFormat(
      "KV transfer, %d tokens (%.1f MB of KV), %d runs (medians), loopback, %d stream(s)\n"
      "  transfer, gRPC (fetch + verify + decode): %.2f GB/s\n"
      "  memcpy of the same blocks:                %.2f GB/s\n"
      "  raw TCP socket pair (send/recv only):     %.2f GB/s\n"
      "  transfer / memcpy:                        %.1f%%\n"
      "  transfer / raw TCP:                       %.1f%%\n",
      tokens, payload / 1e6, repeats, streams, t, m, k, 100.0 * t / m, 100.0 * t / k);
  const std::string json = absl::StrFormat(
      "{\"bench\":\"kv_transfer\",\"prompt_tokens\":%d,\"streams\":%d,\"kv_bytes\":%.0f,"
      "\"transfer_gbps\":%.3f,"
      "\"memcpy_gbps\":%.3f,\"raw_tcp_gbps\":%.3f,\"ratio\":%.3f,\"ratio_to_tcp\":%.3f}",
      tokens, streams, payload, t, m, k, t / m, t / k);
  std::cout << json << "\n";
  if (!args.String("out").empty()) std::ofstream(args.String("out"), std::ios::app) << json << "\n";
  releases.AwaitIdle();  // the last release is answered before the server goes
  server->server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "prompt-tokens", .default_value = "2000", .help = "positions transferred"},
      {.name = "n-layer", .default_value = "8", .help = "layers of the KV shape"},
      {.name = "kv-dim", .default_value = "256", .help = "n_head_kv * head_dim"},
      {.name = "block-size", .default_value = "16", .help = "tokens per block"},
      {.name = "repeats", .default_value = "10", .help = "measured runs (median reported)"},
      {.name = "streams", .default_value = "2",
       .help = "streams the fetch is striped over (the decode worker's --kv-transfer-streams)"},
      {.name = "out", .default_value = "", .help = "append the JSON line to this file"},
  };
  tandem::common::KeepLargeBuffersInHeap();  // as the workers do
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-kv-transfer-bench", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  for (const char* f : {"prompt-tokens", "n-layer", "kv-dim", "block-size", "repeats", "streams"}) {
    if (!args->IntInRange(f, 1, 1 << 20).ok()) {
      std::cerr << args->IntInRange(f, 1, 1 << 20).status().message() << "\n";
      return 2;
    }
  }
  return tandem::bench::Run(*args);
}
