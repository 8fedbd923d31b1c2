#include "engine/gguf/model_fingerprint.h"

#include <bit>

namespace tandem::engine {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t MixBytes(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

// The 8 little-endian bytes of v, whatever the host order.
uint64_t Mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

uint64_t ModelFingerprint(const ModelConfig& c, const GgufFile& file) {
  uint64_t h = kFnvOffset;
  h = MixBytes(h, c.arch.data(), c.arch.size());
  for (int64_t v : {c.n_vocab, c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
                    c.n_rot, static_cast<int32_t>(c.rope_type), static_cast<int32_t>(c.qkv_bias)}) {
    h = Mix(h, static_cast<uint64_t>(v));
  }
  h = Mix(h, std::bit_cast<uint32_t>(c.rope_freq_base));
  h = Mix(h, std::bit_cast<uint32_t>(c.rope_freq_scale));
  h = Mix(h, std::bit_cast<uint32_t>(c.rms_eps));
  for (const GgufTensorInfo& t : file.tensors()) {
    h = MixBytes(h, t.name.data(), t.name.size());
    h = Mix(h, static_cast<uint64_t>(t.type));
    for (int64_t d : t.ne) h = Mix(h, static_cast<uint64_t>(d));
    h = Mix(h, t.offset);
  }
  return h;
}

uint64_t PairFingerprint(uint64_t model, uint64_t draft) {
  constexpr char kTag[] = "draft pair";
  uint64_t h = MixBytes(kFnvOffset, kTag, sizeof(kTag) - 1);
  return Mix(Mix(h, model), draft);
}

}  // namespace tandem::engine
