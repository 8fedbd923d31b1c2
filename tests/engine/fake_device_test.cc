// The backend seam, proved on the CPU alone: the fake device's memory
// faults when the host reads it and its ops refuse host addresses; an engine
// on the fake device gives the CPU backend's tokens, logprobs, prompt
// logprobs, block events and exported KV bytes bit for bit; a greedy decode
// step moves O(batch x (k + metadata)) bytes whatever the depth of the
// model, and full logits rows only for samplers that need them; and KV
// handed from an engine on one backend to an engine on the other continues
// as one all-CPU engine would.
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/engine/fake_device_backend.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using testing::DeviceTraffic;
using testing::FakeDeviceBackend;
using testing::LoadSynthetic;
using testing::MakeTestBackend;
using testing::TestBackend;
using testing::TinyOptions;

std::vector<int32_t> Prompt(int n, int32_t salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 7 + salt * 13) % 290);
  return p;
}

GenerationRequest Request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.top_logprobs = 3;
  return r;
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// Everything an engine reports, flattened so two runs compare bit for bit.
struct Transcript {
  std::vector<int64_t> ints;
  std::vector<uint32_t> floats;
  std::vector<uint8_t> kv_bytes;

  void Token(const SampledToken& t) {
    ints.push_back(t.id);
    floats.push_back(Bits(t.logprob));
    for (const TokenLogprob& p : t.top) {
      ints.push_back(p.id);
      floats.push_back(Bits(p.logprob));
    }
  }
  void Event(const TokenEvent& ev) {
    ints.insert(ints.end(), {ev.seq_id, static_cast<int64_t>(ev.finish), ev.cached_tokens});
    Token(ev.token);
    for (const SampledToken& p : ev.prompt_logprobs) Token(p);
    if (ev.kv != nullptr) {
      for (const KvBlockBytes& b : ev.kv->blocks) {
        const size_t at = kv_bytes.size();
        kv_bytes.resize(at + b.size());
        b.CopyTo(kv_bytes.data() + at);
      }
    }
  }
};

Transcript RunToEnd(Engine& e) {
  Transcript t;
  while (e.HasWork()) {
    absl::StatusOr<StepOutput> step = e.Step();
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) break;
    for (const TokenEvent& ev : step->tokens) t.Event(ev);
    for (const BlockEvent& b : step->blocks) {
      t.ints.push_back(static_cast<int64_t>(b.kind));
      t.ints.push_back(static_cast<int64_t>(b.tier));
      t.ints.push_back(static_cast<int64_t>(b.hash.high));
      t.ints.push_back(static_cast<int64_t>(b.hash.low));
    }
  }
  return t;
}

std::unique_ptr<Engine> MakeEngine(const Model& model, TestBackend kind, EngineOptions o = {}) {
  auto e = Engine::Create(model, MakeTestBackend(kind, 2), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Requests that take every path a logits row can take: greedy with and
// without top logprobs (summaries only), seeded sampling with top-k / top-p
// / min-p and logit adjustments (whole rows), prompt logprobs (summaries of
// every prompt row), a prompt the cache has seen, and exported KV.
std::vector<GenerationRequest> Workload() {
  std::vector<GenerationRequest> w;
  w.push_back(Request(Prompt(40, 1), 12));
  GenerationRequest no_top = Request(Prompt(23, 2), 9);
  no_top.top_logprobs = 0;
  w.push_back(no_top);
  GenerationRequest sampled = Request(Prompt(33, 3), 10);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 20;
  sampled.sampling.top_p = 0.9f;
  sampled.sampling.seed = 5;
  w.push_back(sampled);
  GenerationRequest min_p = Request(Prompt(18, 4), 10);
  min_p.sampling.temperature = 0.7f;
  min_p.sampling.min_p = 0.05f;
  min_p.sampling.seed = 6;
  w.push_back(min_p);
  GenerationRequest penalized = Request(Prompt(29, 5), 10);
  penalized.sampling.presence_penalty = 0.5f;
  penalized.sampling.repetition_penalty = 1.3f;
  penalized.sampling.logit_bias = {{.id = 7, .bias = 3.0f}};
  w.push_back(penalized);
  GenerationRequest prompt_logprobs = Request(Prompt(90, 6), 5);
  prompt_logprobs.prompt_logprobs = 4;
  w.push_back(prompt_logprobs);
  w.push_back(Request(Prompt(40, 1), 6));  // the first prompt again: cached blocks
  GenerationRequest exported = Request(Prompt(50, 7), 3);
  exported.export_kv = true;
  w.push_back(exported);
  return w;
}

Transcript RunWorkload(const Model& model, TestBackend kind, const EngineOptions& o) {
  std::unique_ptr<Engine> e = MakeEngine(model, kind, o);
  for (const GenerationRequest& r : Workload()) EXPECT_TRUE(e->Add(r).ok());
  return RunToEnd(*e);
}

void ExpectSame(const Transcript& got, const Transcript& want) {
  EXPECT_EQ(got.ints, want.ints);
  EXPECT_EQ(got.floats, want.floats);
  EXPECT_EQ(got.kv_bytes, want.kv_bytes);
  EXPECT_FALSE(want.floats.empty());
}

TEST(FakeDeviceTest, AHostReadOfDeviceMemoryFaults) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  FakeDeviceBackend device(1 << 20, {.threads = 1});
  const DevicePtr<uint8_t> p = *device.Allocate(4096, "test");
  const std::vector<uint8_t> bytes(4096, 7);
  device.Upload(p, bytes);
  std::vector<uint8_t> back(4096);
  device.Download(p, back);  // through the backend: fine
  EXPECT_EQ(back, bytes);
  EXPECT_DEATH(
      {
        volatile uint8_t b = *p.backend_address();
        (void)b;
      },
      "");
  EXPECT_DEATH(
      {
        volatile uint8_t* w = p.backend_address() + 100;
        *w = 1;
      },
      "");
}

TEST(FakeDeviceTest, AnOpHandedHostMemoryIsRefused) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  FakeDeviceBackend device(1 << 20, {.threads = 1});
  const DevicePtr<float> x = (*device.Allocate(64 * 4, "x")).As<float>();
  std::vector<float> host(64, 1.0f);
  EXPECT_DEATH(device.Add(x, cpu::HostPtr<const float>(host.data()), 64),
               "lies in the fake device's memory");
  EXPECT_DEATH(device.Add(x, x, 65), "lies in the fake device's memory");  // past its end
}

TEST(FakeDeviceTest, BothBackendsAgreeBitForBit) {
  const std::unique_ptr<Model> model = LoadSynthetic(TinyOptions());
  // Small steps (chunked prefill, prompt logprobs across chunks) and a pool
  // small enough to preempt and evict.
  EngineOptions o;
  o.max_batch_tokens = 48;
  o.kv.block_size = 8;
  o.kv.budget_bytes = int64_t{40} * 2 * model->config().n_layer * 8 * model->config().kv_dim() * 4;
  ExpectSame(RunWorkload(*model, TestBackend::kFakeDevice, o),
             RunWorkload(*model, TestBackend::kCpu, o));
}

TEST(FakeDeviceTest, BothBackendsAgreeOnF16KvBiasesAndTiedEmbeddings) {
  SyntheticModelOptions options = TinyOptions();
  options.arch = "qwen2";  // q/k/v biases, NeoX RoPE
  options.tied_output = true;
  options.type = GgmlType::kQ8_0;
  const std::unique_ptr<Model> model = LoadSynthetic(options);
  EngineOptions o;
  o.kv.dtype = GgmlType::kF16;
  ExpectSame(RunWorkload(*model, TestBackend::kFakeDevice, o),
             RunWorkload(*model, TestBackend::kCpu, o));
}

TEST(FakeDeviceTest, BothBackendsAgreeOnStories260K) {
  const absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(testing::StoriesPath());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> prompt = (*model)->tokenizer().Encode("Once upon a time", {.add_special = true});
  Transcript results[2];
  for (TestBackend kind : {TestBackend::kCpu, TestBackend::kFakeDevice}) {
    std::unique_ptr<Engine> e = MakeEngine(**model, kind);
    ASSERT_TRUE(e->Add(Request(prompt, 40)).ok());
    results[kind == TestBackend::kFakeDevice] = RunToEnd(*e);
  }
  ExpectSame(results[1], results[0]);
}

// One greedy decode step of `batch` sequences on the fake device: its traffic.
DeviceTraffic DecodeStepTraffic(const Model& model, int32_t batch, int32_t k) {
  auto device = std::make_unique<FakeDeviceBackend>(int64_t{1} << 30,
                                                    CpuBackendOptions{.threads = 1});
  FakeDeviceBackend* fake = device.get();
  auto e = Engine::Create(model, std::move(device), {});
  EXPECT_TRUE(e.ok()) << e.status();
  for (int32_t i = 0; i < batch; ++i) {
    GenerationRequest r = Request(Prompt(10, i), 8);
    r.top_logprobs = k;
    EXPECT_TRUE((*e)->Add(r).ok());
  }
  // The prompts, and the first token of each.
  EXPECT_EQ((*e)->Step()->tokens.size(), static_cast<size_t>(batch));
  fake->ResetTraffic();
  EXPECT_EQ((*e)->Step()->tokens.size(), static_cast<size_t>(batch));  // one decode step
  return fake->traffic();
}

TEST(FakeDeviceTest, AGreedyDecodeStepMovesOnlyMetadataAndTopK) {
  SyntheticModelOptions two = TinyOptions();
  SyntheticModelOptions four = TinyOptions();
  four.n_layer = 4;
  const std::unique_ptr<Model> shallow = LoadSynthetic(two);
  const std::unique_ptr<Model> deep = LoadSynthetic(four);
  for (const int32_t k : {1, 5, 20}) {
    for (const int32_t batch : {1, 4, 16}) {
      const DeviceTraffic t2 = DecodeStepTraffic(*shallow, batch, k);
      const DeviceTraffic t4 = DecodeStepTraffic(*deep, batch, k);
      // Down: each row's summary (4 scalars and k pairs), nothing else.
      EXPECT_EQ(t2.downloaded_bytes, batch * (16 + 8 * int64_t{k}));
      // Up: the step's metadata in one piece: a header, per token its id,
      // position and slot, per row its index, k and target, per sequence its
      // extent and its block table (one block of 16 slots here).
      EXPECT_LE(t2.uploaded_bytes, 32 + batch * ((4 + 4 + 8) + 12 + (20 + 4)));
      // Nothing per layer: twice the layers, the same bytes.
      EXPECT_EQ(t4.uploaded_bytes, t2.uploaded_bytes) << "batch " << batch << " k " << k;
      EXPECT_EQ(t4.downloaded_bytes, t2.downloaded_bytes) << "batch " << batch << " k " << k;
    }
  }
}

TEST(FakeDeviceTest, WholeRowsComeDownOnlyForSamplersThatNeedThem) {
  const std::unique_ptr<Model> model = LoadSynthetic(TinyOptions());
  auto device = std::make_unique<FakeDeviceBackend>(int64_t{1} << 30,
                                                    CpuBackendOptions{.threads = 1});
  FakeDeviceBackend* fake = device.get();
  auto e = *Engine::Create(*model, std::move(device), {});
  GenerationRequest sampled = Request(Prompt(10, 1), 8);
  sampled.sampling.temperature = 0.8f;
  ASSERT_TRUE(e->Add(sampled).ok());
  GenerationRequest penalized = Request(Prompt(10, 2), 8);
  penalized.sampling.frequency_penalty = 1.0f;
  ASSERT_TRUE(e->Add(penalized).ok());
  ASSERT_TRUE(e->Add(Request(Prompt(10, 3), 8)).ok());  // greedy: summary only
  ASSERT_EQ(e->Step()->tokens.size(), 3u);
  fake->ResetTraffic();
  ASSERT_EQ(e->Step()->tokens.size(), 3u);
  const int64_t row = int64_t{model->config().n_vocab} * 4;
  EXPECT_EQ(fake->traffic().downloaded_bytes, 2 * row + (16 + 8 * 3));
}

// A SHIFT turn re-rotates its session's KV where it lies: what crosses for
// it is the slot lists, never the blocks, and the turn then computes only
// the tokens after the kept ones.
TEST(FakeDeviceTest, AShiftTurnKeepsItsKvOnTheDevice) {
  const std::unique_ptr<Model> model = LoadSynthetic(TinyOptions());
  auto device = std::make_unique<FakeDeviceBackend>(int64_t{1} << 30,
                                                    CpuBackendOptions{.threads = 1});
  FakeDeviceBackend* fake = device.get();
  auto e = *Engine::Create(*model, std::move(device), {});
  const int32_t bs = EngineOptions{}.kv.block_size;
  auto turn = [](std::vector<int32_t> prompt) {
    GenerationRequest r = Request(std::move(prompt), 1);
    r.private_kv = true;
    r.pin_key = "session";
    return r;
  };
  const std::vector<int32_t> first = Prompt(3 * bs + 5, 4);
  ASSERT_TRUE(e->Add(turn(first)).ok());
  while (e->HasWork()) ASSERT_TRUE(e->Step().ok());
  ASSERT_EQ(e->stats().pins, 1);

  // Drop 7 tokens after the first 4: two whole blocks stay, re-rotated.
  const int32_t from = 4;
  const int32_t cut = 7;
  std::vector<int32_t> next;
  for (int32_t i = 0; i < 3 * bs; ++i) {
    if (i < from || i >= from + cut) next.push_back(first[i]);
  }
  for (int32_t t : Prompt(6, 5)) next.push_back(t);
  GenerationRequest shifted = turn(next);
  shifted.shift_from = from;
  shifted.shift_count = cut;
  fake->ResetTraffic();
  ASSERT_TRUE(e->Add(shifted).ok());
  const int64_t moved = 2 * bs - from;  // slots from the cut to the end of block 2
  EXPECT_EQ(fake->traffic().uploaded_bytes, moved * 2 * 8);
  EXPECT_EQ(fake->traffic().downloaded_bytes, 0);
  EXPECT_EQ(e->stats().pins, 0);  // the sequence holds the blocks now
  absl::StatusOr<StepOutput> step = e->Step();
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->tokens.size(), 1u);
  EXPECT_EQ(step->tokens.front().cached_tokens, 2 * bs);
}

// A prefill engine on `prefill_kind` hands its KV to a decode engine on
// `decode_kind`: the tokens and logprobs of one all-CPU engine.
void ExpectHandOffMatchesCpu(TestBackend prefill_kind, TestBackend decode_kind) {
  const std::unique_ptr<Model> model = LoadSynthetic(TinyOptions());
  for (float temperature : {0.0f, 0.9f}) {
    GenerationRequest r = Request(Prompt(37, 9), 10);
    r.sampling.temperature = temperature;
    r.sampling.seed = 77;
    std::unique_ptr<Engine> prefill = MakeEngine(*model, prefill_kind);
    GenerationRequest first_req = r;
    first_req.max_tokens = 1;
    first_req.export_kv = true;
    ASSERT_TRUE(prefill->Add(first_req).ok());
    absl::StatusOr<StepOutput> step = prefill->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_EQ(step->tokens.size(), 1u);
    const TokenEvent first = step->tokens.front();
    ASSERT_NE(first.kv, nullptr);

    std::unique_ptr<Engine> decode = MakeEngine(*model, decode_kind);
    ASSERT_TRUE(decode->AddWithKv(r, first.token, first.kv).ok());
    Transcript got;
    got.Token(first.token);
    while (decode->HasWork()) {
      step = decode->Step();
      ASSERT_TRUE(step.ok()) << step.status();
      for (const TokenEvent& ev : step->tokens) got.Token(ev.token);
    }
    // One engine on the CPU does everything.
    Transcript want;
    std::unique_ptr<Engine> solo = MakeEngine(*model, TestBackend::kCpu);
    ASSERT_TRUE(solo->Add(r).ok());
    while (solo->HasWork()) {
      step = solo->Step();
      ASSERT_TRUE(step.ok()) << step.status();
      for (const TokenEvent& ev : step->tokens) want.Token(ev.token);
    }
    ASSERT_EQ(want.ints.size(), got.ints.size());
    EXPECT_EQ(got.ints, want.ints) << "temperature " << temperature;
    EXPECT_EQ(got.floats, want.floats) << "temperature " << temperature;
  }
}

TEST(FakeDeviceTest, AFakeDevicePrefillFeedsACpuDecode) {
  ExpectHandOffMatchesCpu(TestBackend::kFakeDevice, TestBackend::kCpu);
}

TEST(FakeDeviceTest, ACpuPrefillFeedsAFakeDeviceDecode) {
  ExpectHandOffMatchesCpu(TestBackend::kCpu, TestBackend::kFakeDevice);
}

}  // namespace
}  // namespace tandem::engine
