// Security end to end, on real processes: mutual TLS between the gateway and
// the workers (and between the workers: the decode worker fetches KV from
// the prefill worker over it), TLS on the gateway's public port with
// certificates rotated while it runs, API keys, and tenant isolation of the
// prefix cache and of sessions. Certificates are made at test time with
// openssl (tests/e2e/make_test_certs.sh).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "process/http_get.h"
#include "rpc/health.h"
#include "tests/e2e/stack.h"
#include "tests/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using tandem::test_paths::StoriesPath;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh PKI in a temporary directory, removed at the end.
class Pki {
 public:
  Pki() {
    char pattern[] = "/tmp/tandem-pki-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    const std::string cmd = absl::StrCat("bash ", tandem::test_paths::SourceDir(),
                                         "/tests/e2e/make_test_certs.sh ", dir_);
    ok_ = std::system(cmd.c_str()) == 0;
  }
  ~Pki() { std::filesystem::remove_all(dir_); }
  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string pem(const std::string& name) const { return ReadFile(path(name)); }

  // Mutual TLS flags for every process.
  std::vector<std::string> MtlsFlags() const {
    return {"--mtls-cert=" + path("server.crt"), "--mtls-key=" + path("server.key"),
            "--mtls-ca=" + path("ca-ca.crt"), "--mtls-server-name=tandem-internal"};
  }
  // A client trusting `ca`, presenting `identity` (.crt/.key) unless empty.
  std::shared_ptr<grpc::ChannelCredentials> Client(const std::string& ca,
                                                   const std::string& identity) const {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = pem(ca);
    if (!identity.empty()) {
      o.pem_cert_chain = pem(identity + ".crt");
      o.pem_private_key = pem(identity + ".key");
    }
    return grpc::SslCredentials(o);
  }

 private:
  std::string dir_;
  bool ok_ = false;
};

// The HTTP status of `curl ARGS` ("000" when no response came).
std::string Curl(const std::string& args) {
  const std::string cmd = absl::StrCat("curl -s -o /dev/null -w '%{http_code}' ", args);
  FILE* p = ::popen(cmd.c_str(), "r");
  char code[8] = {};
  const size_t n = std::fread(code, 1, sizeof(code) - 1, p);
  ::pclose(p);
  return std::string(code, n);
}

// Exit status of tandem-load with `flags` and the environment assignments
// `env` (its output discarded).
int Load(const std::string& flags, const std::string& env = "") {
  const std::string cmd = absl::StrCat(
      env, " ", tandem::test_paths::BinDir(), "/tandem-load --requests 4 --concurrency 2 ",
      "--prompt-tokens 24 --max-tokens 2 ", flags, " >/dev/null 2>&1");
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

grpc::Status Stats(const std::string& address,
                   const std::shared_ptr<grpc::ChannelCredentials>& creds) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("tandem-internal");
  auto stub = tandem::v1::Prefill::NewStub(grpc::CreateCustomChannel(address, creds, args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  tandem::v1::WorkerStats stats;
  return stub->GetWorkerStats(&ctx, tandem::v1::WorkerStatsRequest(), &stats);
}

tandem::v1::GenerateRequest Prompt(int tokens, int32_t seed_token) {
  tandem::v1::GenerateRequest req;
  req.add_prompt_token_ids(1);
  for (int i = 1; i < tokens; ++i) req.add_prompt_token_ids(3 + (i * 7 + seed_token) % 400);
  req.set_max_tokens(3);
  return req;
}

TEST(SecurityTest, MutualTlsBetweenTheParts) {
  Pki pki;
  ASSERT_TRUE(pki.ok());
  StackOptions options;
  options.model = StoriesPath();
  options.worker_flags = pki.MtlsFlags();
  options.worker_flags.push_back("--health-listen=127.0.0.1:0");
  options.gateway_flags = pki.MtlsFlags();
  std::unique_ptr<Stack> stack = Stack::Start(options);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::string worker = stack->prefill_info().grpc_address;

  // A worker refuses plaintext, a client without a certificate, and one
  // whose certificate another CA signed.
  EXPECT_FALSE(Stats(worker, grpc::InsecureChannelCredentials()).ok());
  EXPECT_FALSE(Stats(worker, pki.Client("ca-ca.crt", "")).ok());
  EXPECT_FALSE(Stats(worker, pki.Client("ca-ca.crt", "rogue-client")).ok());
  // A client with a certificate the CA signed gets through.
  const grpc::Status good = Stats(worker, pki.Client("ca-ca.crt", "client"));
  EXPECT_TRUE(good.ok()) << good.error_message();
  // Probes without certificates use the plaintext health port, which
  // serves nothing but grpc.health.v1.
  for (const common::ReadyInfo* info : {&stack->prefill_info(), &stack->decode_info()}) {
    ASSERT_FALSE(info->health_address.empty());
    auto plain = grpc::CreateChannel(info->health_address, grpc::InsecureChannelCredentials());
    EXPECT_EQ(*rpc::CheckHealth(plain), rpc::HealthState::kServing);
    EXPECT_EQ(*rpc::CheckHealth(plain, "liveness"), rpc::HealthState::kServing);
    EXPECT_FALSE(Stats(info->health_address, grpc::InsecureChannelCredentials()).ok());
  }

  // Gateway -> prefill -> (KV over mTLS) -> decode, end to end.
  const Completion c = Generate(stack->gateway(), Prompt(40, 1));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.tokens.size(), 3u);
  EXPECT_TRUE(stack->Stop());
}

TEST(SecurityTest, PublicTlsPicksUpRotatedCertificates) {
  Pki pki;
  ASSERT_TRUE(pki.ok());
  // The gateway serves copies, so they can be replaced under it.
  const std::string cert = pki.path("public.crt");
  const std::string key = pki.path("public.key");
  std::filesystem::copy_file(pki.path("server.crt"), cert);
  std::filesystem::copy_file(pki.path("server.key"), key);
  StackOptions options;
  options.model = StoriesPath();
  options.gateway_flags = {"--tls-cert=" + cert, "--tls-key=" + key, "--tls-reload-s=1",
                           "--health-listen=127.0.0.1:0", "--http-listen=127.0.0.1:0"};
  std::unique_ptr<Stack> stack = Stack::Start(options);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::string address = stack->gateway_info().grpc_address;
  auto generate = [&](const std::shared_ptr<grpc::ChannelCredentials>& creds) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    auto stub =
        tandem::v1::Generation::NewStub(grpc::CreateCustomChannel(address, creds, args));
    return Generate(*stub, Prompt(8, 2));
  };

  EXPECT_FALSE(generate(grpc::InsecureChannelCredentials()).status.ok());
  // The gateway's health (SERVING once its workers are) in plaintext.
  auto health = grpc::CreateChannel(stack->gateway_info().health_address,
                                    grpc::InsecureChannelCredentials());
  EXPECT_EQ(*rpc::CheckHealth(health), rpc::HealthState::kServing);
  EXPECT_EQ(*rpc::CheckHealth(health, "tandem.v1.Generation"), rpc::HealthState::kServing);
  EXPECT_EQ(*rpc::CheckHealth(health, "liveness"), rpc::HealthState::kServing);
  const Completion tls = generate(pki.Client("ca-ca.crt", ""));
  ASSERT_TRUE(tls.status.ok()) << tls.status.error_message();
  // A client that trusts only the other CA is refused ...
  EXPECT_FALSE(generate(pki.Client("other-ca.crt", "")).status.ok());
  // ... and so it is on the HTTP front, which serves HTTPS with the same
  // certificate.
  const std::string http = stack->gateway_info().http_address;
  auto https = [&](const std::string& ca) {
    return Curl(absl::StrCat("--cacert ", pki.path(ca), " https://", http, "/v1/models"));
  };
  EXPECT_EQ(https("ca-ca.crt"), "200");
  EXPECT_EQ(https("other-ca.crt"), "000");
  EXPECT_EQ(Curl(absl::StrCat("http://", http, "/v1/models")), "000");
  // Tandem's own clients take the CA.
  EXPECT_EQ(Load(absl::StrCat("--addr ", address, " --tls-ca ", pki.path("ca-ca.crt"),
                              " --tls-server-name localhost")),
            0);
  EXPECT_NE(Load(absl::StrCat("--addr ", address)), 0);

  // ... until the files change to a certificate that CA signed (written
  // aside and renamed in, as a Kubernetes secret mount swaps them).
  std::filesystem::copy_file(pki.path("server2.crt"), cert + ".new");
  std::filesystem::copy_file(pki.path("server2.key"), key + ".new");
  std::filesystem::rename(key + ".new", key);
  std::filesystem::rename(cert + ".new", cert);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool rotated = false;
  while (!rotated && absl::Now() < deadline) {
    rotated = generate(pki.Client("other-ca.crt", "")).status.ok();
    if (!rotated) absl::SleepFor(absl::Milliseconds(200));  // the watcher's next look
  }
  EXPECT_TRUE(rotated) << "the gateway still serves the old certificate";
  EXPECT_FALSE(generate(pki.Client("ca-ca.crt", "")).status.ok());
  // The HTTPS front looks at the files at most once a second too.
  bool https_rotated = false;
  while (!https_rotated && absl::Now() < deadline) {
    https_rotated = https("other-ca.crt") == "200";
    if (!https_rotated) absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_TRUE(https_rotated) << "the HTTP front still serves the old certificate";
  EXPECT_EQ(https("ca-ca.crt"), "000");
  EXPECT_TRUE(stack->Stop());
}

class ApiKeyTest : public ::testing::Test {
 protected:
  static constexpr char kKeyA[] = "sk-tenant-a-0123456789";
  static constexpr char kKeyB[] = "sk-tenant-b-9876543210";

  static void SetUpTestSuite() {
    keys_ = new std::string(absl::StrCat(::testing::TempDir(), "/tandem-api-keys-",
                                         ::getpid()));
    std::ofstream(*keys_) << "# tenant key\nacme " << kKeyA << "\nglobex " << kKeyB << "\n";
    StackOptions options;
    options.model = StoriesPath();
    options.gateway_flags = {"--api-keys-file=" + *keys_, "--http-listen=127.0.0.1:0"};
    stack_ = Stack::Start(options).release();
    ASSERT_NE(stack_, nullptr);
    ASSERT_TRUE(stack_->AwaitGatewaySynced());
  }
  static void TearDownTestSuite() {
    if (stack_ != nullptr) {
      EXPECT_TRUE(stack_->Stop());
    }
    delete stack_;
    std::filesystem::remove(*keys_);
    delete keys_;
  }
  static Metadata Bearer(const std::string& key) { return {{"authorization", "Bearer " + key}}; }
  static double Failures(const std::string& reason) {
    return MetricValue(stack_->gateway_info().metrics_address,
                       absl::StrCat("tandem_auth_failures_total{method=\"Generate\",reason=\"",
                                    reason, "\"}"));
  }

  static Stack* stack_;
  static std::string* keys_;
};
Stack* ApiKeyTest::stack_ = nullptr;
std::string* ApiKeyTest::keys_ = nullptr;

TEST_F(ApiKeyTest, NoKeyOrAWrongKeyIsUnauthenticatedAndCounted) {
  const Completion none = Generate(stack_->gateway(), Prompt(8, 3));
  EXPECT_EQ(none.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(none.status.error_message(), HasSubstr("authorization"));
  const std::string wrong = "sk-not-a-key-at-all-42";
  const Completion bad = Generate(stack_->gateway(), Prompt(8, 3), Bearer(wrong));
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(bad.status.error_message(), Not(HasSubstr(wrong)));  // never echoed
  const Completion basic =
      Generate(stack_->gateway(), Prompt(8, 3), {{"authorization", "Basic abc"}});
  EXPECT_EQ(basic.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_GE(Failures("missing"), 1);
  EXPECT_GE(Failures("unknown_key"), 1);
  EXPECT_GE(Failures("malformed"), 1);
  // No metric label carries a key.
  const std::string metrics = *process::HttpGet(stack_->gateway_info().metrics_address,
                                                "/metrics");
  EXPECT_THAT(metrics, Not(HasSubstr(wrong)));
  EXPECT_THAT(metrics, Not(HasSubstr(kKeyA)));

  const Completion good = Generate(stack_->gateway(), Prompt(8, 3), Bearer(kKeyA));
  EXPECT_TRUE(good.status.ok()) << good.status.error_message();
  // Every method asks.
  grpc::ClientContext ctx;
  tandem::v1::ListModelsResponse models;
  EXPECT_EQ(stack_->gateway().ListModels(&ctx, {}, &models).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// The HTTP front passes the Authorization header on: the same keys, 401.
TEST_F(ApiKeyTest, TheHttpFrontTakesTheSameKeys) {
  auto post = [](const std::string& header) {
    return Curl(absl::StrCat(
        "-H 'content-type: application/json' ",
        header.empty() ? "" : absl::StrCat("-H '", header, "' "),
        "-d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 2}' http://",
        stack_->gateway_info().http_address, "/v1/completions"));
  };
  EXPECT_EQ(post(""), "401");
  EXPECT_EQ(post("Authorization: Bearer sk-wrong-key-123456"), "401");
  EXPECT_EQ(post(absl::StrCat("Authorization: Bearer ", kKeyB)), "200");
}

TEST_F(ApiKeyTest, TandemLoadSendsTheKey) {
  const std::string addr = "--addr " + stack_->gateway_info().grpc_address;
  EXPECT_NE(Load(addr), 0);
  EXPECT_EQ(Load(absl::StrCat(addr, " --api-key ", kKeyA)), 0);
  // From the environment, over HTTP too.
  EXPECT_EQ(Load(absl::StrCat(addr, " --http-addr ", stack_->gateway_info().http_address),
                 absl::StrCat("TANDEM_API_KEY=", kKeyB)),
            0);
}

TEST_F(ApiKeyTest, TenantsNeverShareCachedBlocks) {
  // Five full blocks of 16; the last prompt token's block is always computed.
  const tandem::v1::GenerateRequest req = Prompt(90, 4);
  const Completion a1 = Generate(stack_->gateway(), req, Bearer(kKeyA));
  ASSERT_TRUE(a1.status.ok()) << a1.status.error_message();
  EXPECT_EQ(a1.usage.cached_prompt_tokens(), 0);
  const Completion a2 = Generate(stack_->gateway(), req, Bearer(kKeyA));
  ASSERT_TRUE(a2.status.ok());
  EXPECT_GE(a2.usage.cached_prompt_tokens(), 64) << "the same tenant hits its own blocks";
  // The other tenant, same prompt: nothing of acme's is found (the prefill
  // worker's cache nor, for the decode side, its pool).
  const Completion b1 = Generate(stack_->gateway(), req, Bearer(kKeyB));
  ASSERT_TRUE(b1.status.ok());
  EXPECT_EQ(b1.usage.cached_prompt_tokens(), 0);
  const Completion b2 = Generate(stack_->gateway(), req, Bearer(kKeyB));
  ASSERT_TRUE(b2.status.ok());
  EXPECT_GE(b2.usage.cached_prompt_tokens(), 64);
  // Same tokens either way: the salt changes only which blocks are shared.
  ASSERT_EQ(a1.tokens.size(), b1.tokens.size());
  for (size_t i = 0; i < a1.tokens.size(); ++i) EXPECT_EQ(a1.tokens[i].id(), b1.tokens[i].id());
}

TEST_F(ApiKeyTest, SessionsBelongToTheirTenant) {
  tandem::v1::CreateSessionRequest create;
  create.set_system_prompt("You are terse.");
  tandem::v1::SessionInfo info;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kKeyA));
    ASSERT_TRUE(stack_->gateway().CreateSession(&ctx, create, &info).ok());
  }
  auto get = [&](const std::string& key) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + key);
    tandem::v1::GetSessionRequest req;
    req.set_session_id(info.session_id());
    tandem::v1::SessionInfo out;
    return stack_->gateway().GetSession(&ctx, req, &out).error_code();
  };
  EXPECT_EQ(get(kKeyA), grpc::StatusCode::OK);
  EXPECT_EQ(get(kKeyB), grpc::StatusCode::NOT_FOUND);
  tandem::v1::ChatRequest chat;
  chat.set_session_id(info.session_id());
  chat.set_message("Hello");
  chat.set_max_tokens(2);
  EXPECT_EQ(Chat(stack_->gateway(), chat, Bearer(kKeyB)).status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  const Completion turn = Chat(stack_->gateway(), chat, Bearer(kKeyA));
  EXPECT_TRUE(turn.status.ok()) << turn.status.error_message();
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kKeyB));
  tandem::v1::ListSessionsResponse listed;
  ASSERT_TRUE(stack_->gateway().ListSessions(&ctx, {}, &listed).ok());
  for (const auto& s : listed.sessions()) EXPECT_NE(s.session_id(), info.session_id());
}

}  // namespace
}  // namespace tandem::testing
