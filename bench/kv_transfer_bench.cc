// tandem-kv-transfer-bench: KV transfer bandwidth of the gRPC stream
// transport on loopback. A KvLeaseServer holds one prompt's blocks (the
// 25.7M synthetic Llama's KV shape by default: 8 layers, kv_dim 256, f32,
// 16-token blocks) and a KvFetcher fetches, verifies and decodes them, as a
// decode worker does; repeated, median reported. memcpy of the same bytes on
// the same machine is the reference (the target is 25% of it).
// Prints a table and one JSON line (appended to --out); never fails on speed.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <vector>

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
  kvtransfer::KvFetcher fetcher(channels, releases, expect, registry);

  std::vector<double> transfer_gbps;
  std::vector<double> memcpy_gbps;
  // memcpy reference: the same blocks into a destination of the same size
  // (touched once first), RAM to RAM as a transfer's bytes go.
  std::vector<uint8_t> dst(snapshot->blocks.size() * block_bytes, 1);
  for (int32_t r = 0; r < repeats + 1; ++r) {  // the first run warms the channel
    absl::StatusOr<kvtransfer::KvLeaseServer::Held> held = leases.Hold(snapshot, ids);
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
      std::memcpy(to, b.data(), b.size());
      to += b.size();
    }
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
    if (r == 0) continue;
    transfer_gbps.push_back(payload / s / 1e9);
    memcpy_gbps.push_back(payload / ms / 1e9);
  }
  const double t = Median(transfer_gbps);
  const double m = Median(memcpy_gbps);
  std::cout << absl::StrFormat(
      "KV transfer, %d tokens (%.1f MB of KV), %d runs, gRPC stream on loopback\n"
      "  transfer (fetch + verify + decode): %.2f GB/s\n"
      "  memcpy of the same blocks:          %.2f GB/s\n"
      "  ratio:                              %.0f%%\n",
      tokens, payload / 1e6, repeats, t, m, 100.0 * t / m);
  const std::string json = absl::StrFormat(
      "{\"bench\":\"kv_transfer\",\"prompt_tokens\":%d,\"kv_bytes\":%.0f,\"transfer_gbps\":%.3f,"
      "\"memcpy_gbps\":%.3f,\"ratio\":%.3f}",
      tokens, payload, t, m, t / m);
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
      {.name = "out", .default_value = "", .help = "append the JSON line to this file"},
  };
  tandem::common::KeepLargeBuffersInHeap();  // as the workers do
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-kv-transfer-bench", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  for (const char* f : {"prompt-tokens", "n-layer", "kv-dim", "block-size", "repeats"}) {
    if (!args->IntInRange(f, 1, 1 << 20).ok()) {
      std::cerr << args->IntInRange(f, 1, 1 << 20).status().message() << "\n";
      return 2;
    }
  }
  return tandem::bench::Run(*args);
}
