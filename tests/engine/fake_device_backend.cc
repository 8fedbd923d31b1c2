#include "tests/engine/fake_device_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/model/copy_weights.h"

namespace tandem::engine::testing {
namespace {

constexpr int64_t kAlign = 64;

int64_t PageSize() { return sysconf(_SC_PAGESIZE); }

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Appends the bytes of `v` to `out`.
template <typename T>
void Pack(const std::vector<T>& v, std::vector<uint8_t>& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

// Reads `n` T from `in` at `at` into `v`, advancing `at`.
template <typename T>
void Unpack(const uint8_t* in, int64_t& at, int64_t n, std::vector<T>& v) {
  v.resize(static_cast<size_t>(n));
  if (n > 0) std::memcpy(v.data(), in + at, static_cast<size_t>(n) * sizeof(T));
  at += n * static_cast<int64_t>(sizeof(T));
}

// The packed metadata's header: T, S, table entries, R.
constexpr int64_t kHeaderBytes = 4 * sizeof(int64_t);

int64_t PackedBytes(int64_t t, int64_t s, int64_t e, int64_t r) {
  return kHeaderBytes + t * (4 + 4 + 8) + s * int64_t{sizeof(StepSequence)} + e * 4 + r * 12;
}

}  // namespace

// The arena readable and writable from construction to destruction, PROT_NONE
// again after the outermost one.
class FakeDeviceBackend::Open {
 public:
  explicit Open(FakeDeviceBackend& b) : b_(b) {
    if (b_.depth_++ == 0 && b_.used_ > 0) Protect(PROT_READ | PROT_WRITE);
  }
  ~Open() {
    if (--b_.depth_ == 0 && b_.used_ > 0) Protect(PROT_NONE);
  }
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;

 private:
  void Protect(int prot) {
    const int64_t bytes = RoundUp(b_.used_, PageSize());
    TANDEM_CHECK(mprotect(b_.arena_, static_cast<size_t>(bytes), prot) == 0,
                 "mprotect of the fake device's arena");
  }
  FakeDeviceBackend& b_;
};

FakeDeviceBackend::FakeDeviceBackend(int64_t arena_bytes, const CpuBackendOptions& cpu)
    : name_("fake-device"), cpu_(MakeCpuBackend(cpu)), capacity_(RoundUp(arena_bytes, 4096)) {
  void* p = mmap(nullptr, static_cast<size_t>(capacity_), PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TANDEM_CHECK(p != MAP_FAILED, "mmap of the fake device's arena") << capacity_ << " bytes";
  arena_ = static_cast<uint8_t*>(p);
}

FakeDeviceBackend::~FakeDeviceBackend() { munmap(arena_, static_cast<size_t>(capacity_)); }

bool FakeDeviceBackend::Contains(const void* p, int64_t bytes) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return bytes >= 0 && b >= arena_ && b + bytes <= arena_ + used_;
}

void FakeDeviceBackend::Expect(const void* p, int64_t bytes, const char* what) const {
  TANDEM_CHECK(Contains(p, bytes), "an op's operand lies in the fake device's memory")
      << what << ": " << p << " + " << bytes << " bytes; arena " << static_cast<void*>(arena_)
      << " + " << used_;
}

void FakeDeviceBackend::ExpectBlock(const KvPoolView& pool, BlockId id) const {
  TANDEM_CHECK(id >= 0 && id < pool.num_blocks, "a block of the pool") << id;
  Expect(pool.base.backend_address() + int64_t{id} * pool.block_bytes, pool.block_bytes,
         "KV block");
}

absl::StatusOr<DevicePtr<uint8_t>> FakeDeviceBackend::Allocate(int64_t bytes,
                                                               std::string_view what) {
  TANDEM_CHECK(!has_step_, "allocations are made at start, before the first step") << what;
  const int64_t at = RoundUp(used_, kAlign);
  if (bytes < 0 || at + bytes > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        std::string(what), ": the fake device has ", capacity_ - at, " of ", bytes, " bytes"));
  }
  // Pages newly allocated join the protected range: closed until a call opens them.
  used_ = at + std::max<int64_t>(bytes, 1);
  TANDEM_CHECK(mprotect(arena_, static_cast<size_t>(RoundUp(used_, PageSize())),
                        depth_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE) == 0,
               "mprotect of the fake device's arena");
  return DevicePtr<uint8_t>(arena_ + at);
}

void FakeDeviceBackend::Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) {
  Open open(*this);
  Expect(dst.backend_address(), static_cast<int64_t>(src.size()), "Upload destination");
  cpu_->Upload(dst, src);
  traffic_.uploaded_bytes += static_cast<int64_t>(src.size());
}

void FakeDeviceBackend::Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) {
  Open open(*this);
  Expect(src.backend_address(), static_cast<int64_t>(dst.size()), "Download source");
  cpu_->Download(src, dst);
  traffic_.downloaded_bytes += static_cast<int64_t>(dst.size());
}

DevicePtr<uint8_t> FakeDeviceBackend::CopyIn(std::span<const uint8_t> bytes,
                                            std::string_view what) {
  absl::StatusOr<DevicePtr<uint8_t>> p = Allocate(static_cast<int64_t>(bytes.size()), what);
  TANDEM_CHECK(p.ok(), "the fake device's arena holds the weights") << p.status();
  Upload(*p, bytes);
  return *p;
}

absl::StatusOr<DeviceWeights> FakeDeviceBackend::PrepareWeights(const ModelWeights& w) {
  // A copy of every tensor, once even where two names share one (tied
  // embeddings).
  ASSIGN_OR_RETURN(const DeviceWeights d, CopyWeights(w, [this](std::span<const uint8_t> bytes) {
                     return absl::StatusOr<DevicePtr<const uint8_t>>(CopyIn(bytes, "weights"));
                   }));
  // The wrapped CPU backend prepares the copies as it would the host's
  // tensors (it repacks matrices for its kernels), so both compute alike.
  ModelWeights copies = w;
  const auto at = [](const WeightMatrix& m, const DeviceMatrix& c) {
    WeightMatrix moved = m;
    moved.data = c.data.backend_address();
    return moved;
  };
  copies.token_embd = at(w.token_embd, d.token_embd);
  copies.output = at(w.output, d.output);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const DeviceLayerWeights& dl = d.layers[i];
    LayerWeights& c = copies.layers[i];
    c.wq = at(l.wq, dl.wq);
    c.wk = at(l.wk, dl.wk);
    c.wv = at(l.wv, dl.wv);
    c.wo = at(l.wo, dl.wo);
    c.w_gate = at(l.w_gate, dl.w_gate);
    c.w_up = at(l.w_up, dl.w_up);
    c.w_down = at(l.w_down, dl.w_down);
  }
  Open open(*this);  // it reads the copies
  const absl::StatusOr<DeviceWeights> prepared = cpu_->PrepareWeights(copies);
  if (!prepared.ok()) return prepared.status();
  return d;
}

absl::Status FakeDeviceBackend::PrepareRope(const RopeTable& rope) {
  // The tables a device would rotate with. The wrapped CPU kernels rotate
  // with the host RopeTable itself: constant, and the same numbers.
  for (std::span<const float> table : {rope.cos_table(), rope.sin_table()}) {
    CopyIn({reinterpret_cast<const uint8_t*>(table.data()), table.size() * sizeof(float)},
           "RoPE table");
  }
  return cpu_->PrepareRope(rope);
}

absl::Status FakeDeviceBackend::ReserveStep(const StepLimits& limits) {
  limits_ = limits;
  step_capacity_ = PackedBytes(limits.max_tokens, limits.max_seqs, limits.max_table_entries,
                               limits.max_logit_rows);
  absl::StatusOr<DevicePtr<uint8_t>> buffer = Allocate(step_capacity_, "step metadata");
  if (!buffer.ok()) return buffer.status();
  step_buffer_ = *buffer;
  packed_.reserve(static_cast<size_t>(step_capacity_));
  return cpu_->ReserveStep(limits);
}

void FakeDeviceBackend::BeginStep(const StepMetadata& m) {
  TANDEM_CHECK(m.n_tokens() <= limits_.max_tokens &&
                   static_cast<int32_t>(m.seqs.size()) <= limits_.max_seqs &&
                   static_cast<int32_t>(m.block_tables.size()) <= limits_.max_table_entries &&
                   m.n_logit_rows() <= limits_.max_logit_rows,
               "a step's metadata fits ReserveStep's limits");
  TANDEM_CHECK(m.positions.size() == m.tokens.size() &&
                   m.slot_mapping.size() == m.tokens.size() &&
                   m.logit_top_k.size() == m.logit_rows.size() &&
                   m.logit_target.size() == m.logit_rows.size(),
               "the step's per-token and per-row arrays agree");
  packed_.clear();
  const int64_t header[4] = {m.n_tokens(), static_cast<int64_t>(m.seqs.size()),
                             static_cast<int64_t>(m.block_tables.size()), m.n_logit_rows()};
  packed_.insert(packed_.end(), reinterpret_cast<const uint8_t*>(header),
                 reinterpret_cast<const uint8_t*>(header) + kHeaderBytes);
  Pack(m.tokens, packed_);
  Pack(m.positions, packed_);
  Pack(m.slot_mapping, packed_);
  Pack(m.seqs, packed_);
  Pack(m.block_tables, packed_);
  Pack(m.logit_rows, packed_);
  Pack(m.logit_top_k, packed_);
  Pack(m.logit_target, packed_);
  // One upload for the whole step; the kernels read what arrived.
  Upload(step_buffer_, packed_);
  Open open(*this);
  const uint8_t* in = step_buffer_.backend_address();
  int64_t h[4];
  std::memcpy(h, in, kHeaderBytes);
  int64_t at = kHeaderBytes;
  Unpack(in, at, h[0], step_.tokens);
  Unpack(in, at, h[0], step_.positions);
  Unpack(in, at, h[0], step_.slot_mapping);
  Unpack(in, at, h[1], step_.seqs);
  Unpack(in, at, h[2], step_.block_tables);
  Unpack(in, at, h[3], step_.logit_rows);
  Unpack(in, at, h[3], step_.logit_top_k);
  Unpack(in, at, h[3], step_.logit_target);
  has_step_ = true;
  cpu_->BeginStep(step_);
}

const StepMetadata& FakeDeviceBackend::step() const {
  TANDEM_CHECK(has_step_, "BeginStep before the step's ops");
  return step_;
}

void FakeDeviceBackend::Embed(const DeviceMatrix& table, DevicePtr<float> x) {
  Open open(*this);
  Expect(table.data.backend_address(), GgmlRowBytes(table.type, table.cols) * table.rows,
         "Embed table");
  Expect(x.backend_address(), int64_t{step().n_tokens()} * table.cols * 4, "Embed x");
  cpu_->Embed(table, x);
}

void FakeDeviceBackend::MatMul(const DeviceMatrix& w, DevicePtr<const float> x,
                               int64_t n_tokens, DevicePtr<float> y) {
  Open open(*this);
  Expect(w.data.backend_address(), GgmlRowBytes(w.type, w.cols) * w.rows, "MatMul w");
  Expect(x.backend_address(), n_tokens * w.cols * 4, "MatMul x");
  Expect(y.backend_address(), n_tokens * w.rows * 4, "MatMul y");
  cpu_->MatMul(w, x, n_tokens, y);
}

void FakeDeviceBackend::AddBias(DevicePtr<float> x, DevicePtr<const float> bias,
                                int64_t n_rows, int64_t dim) {
  Open open(*this);
  Expect(x.backend_address(), n_rows * dim * 4, "AddBias x");
  Expect(bias.backend_address(), dim * 4, "AddBias bias");
  cpu_->AddBias(x, bias, n_rows, dim);
}

void FakeDeviceBackend::Rope(DevicePtr<float> x, int32_t n_heads, int32_t head_dim) {
  Open open(*this);
  Expect(x.backend_address(), int64_t{step().n_tokens()} * n_heads * head_dim * 4, "Rope x");
  cpu_->Rope(x, n_heads, head_dim);
}

void FakeDeviceBackend::StoreKv(const PagedKvView& kv, DevicePtr<const float> k,
                                DevicePtr<const float> v) {
  Open open(*this);
  const int64_t rows = step().n_tokens();
  Expect(k.backend_address(), rows * kv.kv_dim * 4, "StoreKv k");
  Expect(v.backend_address(), rows * kv.kv_dim * 4, "StoreKv v");
  const int64_t row_bytes = int64_t{kv.kv_dim} * GgmlBlockBytes(kv.dtype);
  for (int64_t slot : step().slot_mapping) {
    const uint8_t* block = kv.base.backend_address() + slot / kv.block_size * kv.block_bytes;
    const int64_t at = slot % kv.block_size * row_bytes;
    Expect(block + kv.k_offset + at, row_bytes, "StoreKv key slot");
    Expect(block + kv.v_offset + at, row_bytes, "StoreKv value slot");
  }
  cpu_->StoreKv(kv, k, v);
}

void FakeDeviceBackend::RmsNorm(DevicePtr<const float> x, DevicePtr<const float> weight,
                                int64_t n_tokens, int64_t dim, float eps, DevicePtr<float> y) {
  Open open(*this);
  Expect(x.backend_address(), n_tokens * dim * 4, "RmsNorm x");
  Expect(weight.backend_address(), dim * 4, "RmsNorm weight");
  Expect(y.backend_address(), n_tokens * dim * 4, "RmsNorm y");
  cpu_->RmsNorm(x, weight, n_tokens, dim, eps, y);
}

void FakeDeviceBackend::SwiGlu(DevicePtr<const float> gate, DevicePtr<const float> up,
                               int64_t n, DevicePtr<float> out) {
  Open open(*this);
  Expect(gate.backend_address(), n * 4, "SwiGlu gate");
  Expect(up.backend_address(), n * 4, "SwiGlu up");
  Expect(out.backend_address(), n * 4, "SwiGlu out");
  cpu_->SwiGlu(gate, up, n, out);
}

void FakeDeviceBackend::Add(DevicePtr<float> x, DevicePtr<const float> y, int64_t n) {
  Open open(*this);
  Expect(x.backend_address(), n * 4, "Add x");
  Expect(y.backend_address(), n * 4, "Add y");
  cpu_->Add(x, y, n);
}

void FakeDeviceBackend::PagedAttention(const AttentionOp& op) {
  Open open(*this);
  const int64_t rows = step().n_tokens();
  Expect(op.q.backend_address(), rows * op.n_head * op.head_dim * 4, "PagedAttention q");
  Expect(op.out.backend_address(), rows * op.n_head * op.head_dim * 4, "PagedAttention out");
  for (BlockId id : step().block_tables) {
    Expect(op.kv.base.backend_address() + int64_t{id} * op.kv.block_bytes, op.kv.block_bytes,
           "PagedAttention KV block");
  }
  cpu_->PagedAttention(op);
}

void FakeDeviceBackend::GatherRows(DevicePtr<const float> x, int64_t dim,
                                   DevicePtr<float> out) {
  Open open(*this);
  Expect(x.backend_address(), int64_t{step().n_tokens()} * dim * 4, "GatherRows x");
  Expect(out.backend_address(), int64_t{step().n_logit_rows()} * dim * 4, "GatherRows out");
  cpu_->GatherRows(x, dim, out);
}

void FakeDeviceBackend::ReduceLogits(DevicePtr<const float> logits, int32_t n_vocab,
                                     std::span<LogitsSummary> out) {
  Open open(*this);
  Expect(logits.backend_address(), int64_t{step().n_logit_rows()} * n_vocab * 4,
         "ReduceLogits logits");
  cpu_->ReduceLogits(logits, n_vocab, out);
  // What a device sends back: each reduced row's summary, O(k).
  for (size_t r = 0; r < step().logit_top_k.size(); ++r) {
    if (step().logit_top_k[r] >= 0) traffic_.downloaded_bytes += out[r].wire_bytes();
  }
}

void FakeDeviceBackend::ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                                   std::span<uint8_t> out) {
  Open open(*this);
  for (BlockId id : ids) ExpectBlock(pool, id);
  cpu_->ReadBlocks(pool, ids, out);
  traffic_.downloaded_bytes += static_cast<int64_t>(ids.size()) * pool.block_bytes;
  ++traffic_.block_reads;
}

void FakeDeviceBackend::WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                                    std::span<const KvBlockBytes> blocks) {
  Open open(*this);
  for (BlockId id : ids) ExpectBlock(pool, id);
  cpu_->WriteBlocks(pool, ids, blocks);
  traffic_.uploaded_bytes += static_cast<int64_t>(ids.size()) * pool.block_bytes;
  ++traffic_.block_writes;
}

void FakeDeviceBackend::MoveKvSlots(std::span<const PagedKvView> layers, int32_t head_dim,
                                    std::span<const int64_t> src, std::span<const int64_t> dst,
                                    int32_t delta) {
  Open open(*this);
  for (const PagedKvView& kv : layers) {
    const int64_t row_bytes = int64_t{kv.kv_dim} * GgmlBlockBytes(kv.dtype);
    for (std::span<const int64_t> slots : {src, dst}) {
      for (int64_t slot : slots) {
        const uint8_t* block = kv.base.backend_address() + slot / kv.block_size * kv.block_bytes;
        const int64_t at = slot % kv.block_size * row_bytes;
        Expect(block + kv.k_offset + at, row_bytes, "MoveKvSlots key slot");
        Expect(block + kv.v_offset + at, row_bytes, "MoveKvSlots value slot");
      }
    }
  }
  cpu_->MoveKvSlots(layers, head_dim, src, dst, delta);
  // The slot lists go over with the op; no KV bytes cross.
  traffic_.uploaded_bytes += static_cast<int64_t>(src.size() + dst.size()) * 8;
}

}  // namespace tandem::engine::testing
