// The engine's KV bytes crossing the backend seam (engine.h): tiers'
// promotions, demotions and write-through copies, imported snapshots,
// exports and the SHIFT re-rotation. Block bytes live in backend memory;
// they come out only through Backend::ReadBlocks into host staging and go in
// only through Backend::WriteBlocks, a batch per step (or per promotion)
// rather than a copy per block. Engine-thread only, like the Engine.
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "engine/engine.h"

namespace tandem::engine {

void Engine::OnPoolEviction(BlockId id, const BlockHash& hash) {
  // The block's bytes stay in place until something writes it: later in
  // this Schedule (a promotion) or in this step's import or forward pass.
  // FlushEvictions hands them to the tiers before any of those.
  if (options_.tiers != nullptr) evicted_.push_back({.id = id, .hash = hash});
  pending_blocks_.push_back({.kind = BlockEvent::Kind::kRemoved, .hash = hash, .parent_hash = {},
                             .tier = KvTier::kDevice});
}

void Engine::FlushEvictions() {
  if (evicted_.empty()) return;
  std::vector<BlockId> ids;
  ids.reserve(evicted_.size());
  for (const Evicted& e : evicted_) ids.push_back(e.id);
  const std::span<const uint8_t> bytes = ReadToStaging(ids);
  const auto bb = static_cast<size_t>(kv_->block_bytes());
  for (size_t i = 0; i < evicted_.size(); ++i) {
    options_.tiers->OnEvicted(evicted_[i].hash, bytes.subspan(i * bb, bb));
  }
  evicted_.clear();
}

std::span<const uint8_t> Engine::ReadToStaging(std::span<const BlockId> ids) {
  const size_t n = ids.size() * static_cast<size_t>(kv_->block_bytes());
  if (staging_.size() < n) staging_.resize(n);
  const std::span<uint8_t> out(staging_.data(), n);
  backend_->ReadBlocks(kv_->pool_view(), ids, out);
  return out;
}

std::optional<KvTier> Engine::Promote(const BlockHash& hash, BlockList& list) {
  // Blocks evicted earlier in this Schedule reach the tiers first, so that
  // the lookup sees them as it did when eviction handed them over at once.
  FlushEvictions();
  std::optional<TierBlock> found = options_.tiers->Lookup(hash);
  if (!found.has_value()) return std::nullopt;
  TANDEM_CHECK(static_cast<int64_t>(found->bytes.size()) == kv_->block_bytes(),
               "a tier returned a block of another size")
      << found->bytes.size() << " vs " << kv_->block_bytes();
  if (!kv_->pool().Extend(list, 1)) return std::nullopt;
  const BlockId id = list.ids().back();
  FlushEvictions();  // Extend may have evicted the very block written next
  backend_->WriteBlocks(kv_->pool_view(), std::span<const BlockId>(&id, 1),
                        std::span<const KvBlockBytes>(&found->bytes, 1));
  // The pool lacked `hash` (the caller looked it up first), so it takes it.
  TANDEM_CHECK(kv_->pool().SetHash(id, hash), "a promoted block's hash was already held");
  options_.tiers->Promoted(hash, found->tier);
  pending_blocks_.push_back(
      {.kind = BlockEvent::Kind::kStored, .hash = hash, .parent_hash = {},
       .tier = KvTier::kDevice});
  return found->tier;
}

void Engine::CopyImports(std::span<const int64_t> seq_ids) {
  std::vector<BlockId> ids;
  std::vector<KvBlockBytes> blocks;
  for (int64_t seq_id : seq_ids) {
    Sequence& seq = *scheduler_.Find(seq_id);
    const KvSnapshot& kv = *seq.import;
    // kv.blocks[i] is block first_block + i; those before import_from_block
    // came from the cache.
    for (int32_t b = std::max(seq.import_from_block, kv.first_block);
         b < kv.first_block + static_cast<int32_t>(kv.blocks.size()); ++b) {
      ids.push_back((*seq.blocks)[b]);
      blocks.push_back(kv.blocks[b - kv.first_block]);  // shares the bytes
    }
  }
  if (!ids.empty()) backend_->WriteBlocks(kv_->pool_view(), ids, blocks);
  for (int64_t seq_id : seq_ids) {
    // From here on an ordinary sequence whose prompt is computed.
    scheduler_.Find(seq_id)->import.reset();
  }
}

std::shared_ptr<KvSnapshot> Engine::EmptySnapshot() const {
  const ModelConfig& c = model_.config();
  auto kv = std::make_shared<KvSnapshot>();
  kv->model_fingerprint = model_.fingerprint();
  kv->block_size = kv_->block_size();
  kv->n_layer = c.n_layer;
  kv->kv_dim = c.kv_dim();
  kv->dtype = kv_->dtype();
  return kv;
}

std::shared_ptr<const KvSnapshot> Engine::Export(const Sequence& seq) {
  std::shared_ptr<KvSnapshot> kv = EmptySnapshot();
  kv->n_tokens = seq.n_computed;
  const int32_t n_blocks = (seq.n_computed + kv->block_size - 1) / kv->block_size;
  // The bytes are read with the step's other blocks (ReadStepBlocks).
  const auto ids = std::span<const BlockId>(seq.blocks->ids()).subspan(0, n_blocks);
  exports_.push_back({.kv = kv, .ids = {ids.begin(), ids.end()}});
  return kv;
}

void Engine::ReadStepBlocks() {
  std::vector<BlockId> ids;
  for (const Stored& s : stored_) ids.push_back(s.id);
  for (const PendingExport& e : exports_) ids.insert(ids.end(), e.ids.begin(), e.ids.end());
  if (ids.empty()) return;
  // Nothing has written the pool since Update began: the blocks hold what
  // the step computed, even those of sequences that finished and let go.
  const std::span<const uint8_t> bytes = ReadToStaging(ids);
  const auto bb = static_cast<size_t>(kv_->block_bytes());
  size_t at = 0;
  for (const Stored& s : stored_) {
    options_.tiers->OnStored(s.hash, s.parent, s.index, bytes.subspan(at, bb));
    at += bb;
  }
  for (const PendingExport& e : exports_) {
    e.kv->blocks.reserve(e.ids.size());
    for (size_t i = 0; i < e.ids.size(); ++i, at += bb) {
      e.kv->blocks.emplace_back(bytes.data() + at, bytes.data() + at + bb);  // a copy
    }
  }
  stored_.clear();
  exports_.clear();
}

std::shared_ptr<const KvSnapshot> Engine::ExportCachedPrefix(std::span<const int32_t> tokens,
                                                             uint64_t cache_salt) {
  const int32_t bs = kv_->block_size();
  std::shared_ptr<KvSnapshot> kv = EmptySnapshot();
  // Hashed blocks are never written again, so a cached or shared one can
  // be copied as it is. The lower tiers' copies are frozen already: shared,
  // not copied again. Pool blocks are read in one batch afterwards, so
  // their places are kept open here.
  std::vector<BlockId> pool_ids;
  std::vector<std::optional<KvBlockBytes>> from_tiers;
  for (const BlockHash& hash : PrefixBlockHashes(tokens, bs, model_.fingerprint(), cache_salt)) {
    if (const std::optional<BlockId> id = kv_->pool().FindHash(hash); id.has_value()) {
      pool_ids.push_back(*id);
      from_tiers.emplace_back(std::nullopt);
      continue;
    }
    std::optional<TierBlock> found =
        options_.tiers != nullptr ? options_.tiers->Lookup(hash) : std::nullopt;
    if (!found.has_value() || static_cast<int64_t>(found->bytes.size()) != kv_->block_bytes()) {
      break;
    }
    from_tiers.emplace_back(std::move(found->bytes));
  }
  if (from_tiers.empty()) return nullptr;
  const std::span<const uint8_t> bytes =
      pool_ids.empty() ? std::span<const uint8_t>() : ReadToStaging(pool_ids);
  const auto bb = static_cast<size_t>(kv_->block_bytes());
  size_t at = 0;
  for (std::optional<KvBlockBytes>& block : from_tiers) {
    if (block.has_value()) {
      kv->blocks.push_back(std::move(*block));
    } else {
      kv->blocks.emplace_back(bytes.data() + at, bytes.data() + at + bb);  // a copy
      at += bb;
    }
  }
  kv->n_tokens = static_cast<int32_t>(kv->blocks.size()) * bs;
  return kv;
}

void Engine::HashFullBlocks(Sequence& seq, std::vector<BlockEvent>& events) {
  // A SHIFT session's KV is its own, and so is a rolled window's: never
  // shared, never reported.
  if (seq.request.private_kv || seq.rolled) return;
  const int32_t bs = kv_->block_size();
  const int32_t full = seq.n_computed / bs;
  for (; seq.n_hashed < full; ++seq.n_hashed) {
    const BlockHash parent = seq.last_hash;
    seq.last_hash = HashBlock(
        parent, std::span<const int32_t>(seq.tokens).subspan(int64_t{seq.n_hashed} * bs, bs),
        model_.fingerprint(), bs, seq.request.cache_salt);
    // A block filled and never written again: the pool may share it. When
    // another block already holds this hash the block stays private.
    const BlockId id = (*seq.blocks)[seq.n_hashed];
    if (kv_->pool().SetHash(id, seq.last_hash)) {
      events.push_back({.kind = BlockEvent::Kind::kStored, .hash = seq.last_hash,
                        .parent_hash = parent, .tier = KvTier::kDevice});
      if (options_.tiers != nullptr) {
        // The tiers get the bytes with the step's other blocks (ReadStepBlocks).
        stored_.push_back(
            {.hash = seq.last_hash, .parent = parent, .index = seq.n_hashed, .id = id});
      }
    }
  }
}

std::shared_ptr<const KvSnapshot> Engine::ShiftPinned(const GenerationRequest& request) {
  const auto it = pins_.find(request.pin_key);
  if (it == pins_.end() || it->second.tokens.empty()) return nullptr;
  const Pin& pin = it->second;
  const int32_t bs = kv_->block_size();
  const int32_t held = static_cast<int32_t>(pin.tokens.size());
  const int32_t from = std::clamp(request.shift_from, 0, held);
  const int32_t cut = std::clamp(request.shift_count, 0, held - from);
  // The pinned tokens with the cut dropped, as far as the prompt has them
  // (its last token is always computed), in whole blocks.
  const int32_t n = static_cast<int32_t>(request.prompt.size());
  int32_t agree = 0;
  while (agree < held - cut && agree < n - 1) {
    const int32_t src = agree < from ? agree : agree + cut;
    if (pin.tokens[src] != request.prompt[agree]) break;
    ++agree;
  }
  const int32_t blocks = agree / bs;
  std::shared_ptr<KvSnapshot> kv;
  if (blocks > 0) {
    const ModelConfig& c = model_.config();
    kv = EmptySnapshot();
    kv->n_tokens = blocks * bs;
    // The pinned blocks the kept slots come from, read in one batch; the
    // re-rotation below works on these host bytes.
    const int32_t last_src = blocks * bs - 1 < from ? blocks * bs - 1 : blocks * bs - 1 + cut;
    const auto src_ids = std::span<const BlockId>(pin.blocks.ids()).subspan(0, last_src / bs + 1);
    const std::span<const uint8_t> staged = ReadToStaging(src_ids);
    const int32_t kv_dim = c.kv_dim();
    const bool f16 = kv_->dtype() == GgmlType::kF16;
    const int64_t elem = f16 ? 2 : 4;
    std::vector<float> k(kv_dim);
    std::vector<uint8_t> block(kv_->block_bytes());
    for (int32_t b = 0; b < blocks; ++b) {
      for (int32_t slot = 0; slot < bs; ++slot) {
        const int32_t dst = b * bs + slot;
        const int32_t src = dst < from ? dst : dst + cut;
        const uint8_t* src_block = staged.data() + int64_t{src / bs} * kv_->block_bytes();
        for (int32_t layer = 0; layer < c.n_layer; ++layer) {
          const PagedKvView view = kv_->LayerView(layer);
          const int64_t src_off = int64_t{src % bs} * kv_dim * elem;
          const int64_t dst_off = int64_t{slot} * kv_dim * elem;
          const uint8_t* sk = src_block + view.k_offset + src_off;
          uint8_t* dk = block.data() + view.k_offset + dst_off;
          std::memcpy(block.data() + view.v_offset + dst_off,
                      src_block + view.v_offset + src_off, kv_dim * elem);
          if (dst == src) {
            std::memcpy(dk, sk, kv_dim * elem);
            continue;
          }
          // The key moves `cut` positions back: rotate it by -cut.
          for (int32_t i = 0; i < kv_dim; ++i) {
            if (f16) {
              uint16_t h;
              std::memcpy(&h, sk + 2 * i, 2);
              k[i] = Fp16ToFp32(h);
            } else {
              std::memcpy(&k[i], sk + 4 * i, 4);
            }
          }
          rope_->ApplyDelta(k.data(), c.n_head_kv, c.head_dim, -cut);
          for (int32_t i = 0; i < kv_dim; ++i) {
            if (f16) {
              const uint16_t h = Fp32ToFp16(k[i]);
              std::memcpy(dk + 2 * i, &h, 2);
            } else {
              std::memcpy(dk + 4 * i, &k[i], 4);
            }
          }
        }
      }
      kv->blocks.emplace_back(block);
    }
  }
  Unpin(request.pin_key);  // the sequence holds its own copy from here on
  return kv;
}

}  // namespace tandem::engine
