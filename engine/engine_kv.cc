// The engine's KV bytes crossing the backend seam (engine.h): tiers'
// promotions, demotions and write-through copies, imported snapshots,
// exports and the SHIFT re-rotation. Block bytes live in backend memory;
// they come out only through Backend::ReadBlocks into host staging and go in
// only through Backend::WriteBlocks, a batch per step (or per promotion)
// rather than a copy per block; a SHIFT moves them where they are
// (Backend::MoveKvSlots). Engine-thread only, like the Engine.
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "engine/engine.h"

namespace tandem::engine {

void Engine::OnPoolEviction(BlockId id, const BlockHash& hash) {
  // The block's bytes stay in place until something writes it: this
  // step's promotions, imports or forward pass. FlushEvictions hands them to
  // the tiers before any of those. A block promoted earlier in this
  // Schedule has its bytes still on the host, and its write is dropped.
  // The tiers keep only blocks that hold the draft's KV too: one without
  // it goes (a sequence that finds it nowhere computes it again).
  if (options_.tiers != nullptr && !kv_->pool().draft_missing(id)) {
    Evicted e{.id = id, .hash = hash, .unwritten = {}};
    const auto p = std::find_if(promoted_.begin(), promoted_.end(),
                                [id](const Promoted& q) { return q.id == id; });
    if (p != promoted_.end()) {
      e.unwritten.resize(p->bytes.size());
      p->bytes.CopyTo(e.unwritten.data());
      promoted_.erase(p);
    }
    evicted_.push_back(std::move(e));
  }
  pending_blocks_.push_back({.kind = BlockEvent::Kind::kRemoved, .hash = hash, .parent_hash = {},
                             .tier = KvTier::kDevice});
}

void Engine::FlushEvictions() {
  if (evicted_.empty()) return;
  std::vector<BlockId> ids;
  ids.reserve(evicted_.size());
  for (const Evicted& e : evicted_) {
    if (e.unwritten.empty()) ids.push_back(e.id);
  }
  const std::span<const uint8_t> bytes =
      ids.empty() ? std::span<const uint8_t>() : ReadToStaging(ids);
  const auto bb = static_cast<size_t>(kv_->block_bytes());
  size_t at = 0;
  for (const Evicted& e : evicted_) {
    if (!e.unwritten.empty()) {
      options_.tiers->OnEvicted(e.hash, e.unwritten);
      continue;
    }
    options_.tiers->OnEvicted(e.hash, bytes.subspan(at, bb));
    at += bb;
  }
  evicted_.clear();
}

void Engine::WritePromotions() {
  if (promoted_.empty()) return;
  std::vector<BlockId> ids;
  std::vector<KvBlockBytes> blocks;
  ids.reserve(promoted_.size());
  blocks.reserve(promoted_.size());
  for (Promoted& p : promoted_) {
    ids.push_back(p.id);
    blocks.push_back(std::move(p.bytes));
  }
  promoted_.clear();
  backend_->WriteBlocks(kv_->pool_view(), ids, blocks);
}

std::span<const uint8_t> Engine::ReadToStaging(std::span<const BlockId> ids) {
  const size_t n = ids.size() * static_cast<size_t>(kv_->block_bytes());
  if (staging_.size() < n) staging_.resize(n);
  const std::span<uint8_t> out(staging_.data(), n);
  backend_->ReadBlocks(kv_->pool_view(), ids, out);
  return out;
}

std::optional<KvTier> Engine::Promote(const BlockHash& hash, BlockList& list) {
  // A block evicted earlier in this Schedule and looked up now reaches the
  // tiers first (with the others queued), so that the lookup finds it as it
  // would had eviction handed it over at once.
  if (std::any_of(evicted_.begin(), evicted_.end(),
                  [&hash](const Evicted& e) { return e.hash == hash; })) {
    FlushEvictions();
  }
  std::optional<TierBlock> found = options_.tiers->Lookup(hash);
  if (!found.has_value()) return std::nullopt;
  TANDEM_CHECK(static_cast<int64_t>(found->bytes.size()) == kv_->block_bytes(),
               "a tier returned a block of another size")
      << found->bytes.size() << " vs " << kv_->block_bytes();
  if (!kv_->pool().Extend(list, 1)) return std::nullopt;
  const BlockId id = list.ids().back();
  // Written with the step's other promotions, after the blocks evicted by
  // this Schedule (Extend's included) have been read.
  promoted_.push_back({.id = id, .bytes = std::move(found->bytes)});
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
  auto kv = std::make_shared<KvSnapshot>();
  kv->model_fingerprint = kv_fingerprint_;
  kv->block_size = kv_->block_size();
  kv->n_layer = kv_->n_layer();
  kv->kv_dim = kv_->kv_dim();
  kv->dtype = kv_->dtype();
  return kv;
}

std::shared_ptr<const KvSnapshot> Engine::Export(const Sequence& seq) {
  std::shared_ptr<KvSnapshot> kv = EmptySnapshot();
  kv->n_tokens = seq.n_computed;
  // A draft put off (export_without_draft, or cached blocks that lack its
  // KV) reaches only so far: the receiver computes the rest.
  if (draft_.model != nullptr && seq.draft_lag > 0) {
    kv->draft_tokens = seq.n_computed - seq.draft_lag;
  }
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
  // A block that lacks the draft's KV (its draft put it off) gets it first,
  // computed over the tokens, when the blocks before it are in the pool.
  int32_t draft_from = -1, draft_to = -1;  // blocks
  for (const BlockHash& hash : PrefixBlockHashes(tokens, bs, kv_fingerprint_, cache_salt)) {
    if (const std::optional<BlockId> id = kv_->pool().FindHash(hash); id.has_value()) {
      const auto index = static_cast<int32_t>(from_tiers.size());
      if (kv_->pool().draft_missing(*id)) {
        if (pool_ids.size() < from_tiers.size()) break;  // a tier's block before it
        if (draft_from < 0) draft_from = index;
        draft_to = index + 1;
      }
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
  if (draft_from >= 0) {
    // The draft's passes write only the draft's half of blocks no one
    // reads it from (they lack it), so the shared blocks can take it.
    const absl::Status filled =
        FillDraft(tokens, std::span<const BlockId>(pool_ids).subspan(0, draft_to), draft_from * bs,
                  draft_to * bs);
    if (!filled.ok()) {
      // A draft pass failed (the backend's error): the blocks from the
      // first that lacks the draft's KV are not exported, and the puller
      // computes them itself.
      if (draft_from == 0) return nullptr;
      pool_ids.resize(static_cast<size_t>(draft_from));
      from_tiers.resize(static_cast<size_t>(draft_from));
    }
  }
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
  // A block the draft's KV does not fill yet (Sequence::draft_lag) is
  // shared marked as lacking it: whoever needs it computes it (RunDraft,
  // ExportCachedPrefix), and the tiers get the block once it holds it.
  const int32_t full = seq.n_computed / bs;
  const int32_t draft_full = (seq.n_computed - seq.draft_lag) / bs;
  for (; seq.n_hashed < full; ++seq.n_hashed) {
    const BlockHash parent = seq.last_hash;
    seq.last_hash = HashBlock(
        parent, std::span<const int32_t>(seq.tokens).subspan(int64_t{seq.n_hashed} * bs, bs),
        kv_fingerprint_, bs, seq.request.cache_salt);
    // A block filled and never written again: the pool may share it. When
    // another block already holds this hash the block stays private.
    const BlockId id = (*seq.blocks)[seq.n_hashed];
    if (kv_->pool().SetHash(id, seq.last_hash)) {
      events.push_back({.kind = BlockEvent::Kind::kStored, .hash = seq.last_hash,
                        .parent_hash = parent, .tier = KvTier::kDevice});
      if (draft_.model != nullptr && seq.n_hashed >= draft_full) {
        kv_->pool().SetDraftMissing(id, true);
        continue;
      }
      if (options_.tiers != nullptr) {
        // The tiers get the bytes with the step's other blocks (ReadStepBlocks).
        stored_.push_back(
            {.hash = seq.last_hash, .parent = parent, .index = seq.n_hashed, .id = id});
      }
    }
  }
}

std::optional<BlockList> Engine::ShiftPinned(const GenerationRequest& request) {
  const auto it = pins_.find(request.pin_key);
  if (it == pins_.end() || it->second.tokens.empty()) return std::nullopt;
  Pin& pin = it->second;
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
  std::optional<BlockList> kept;
  if (blocks > 0) {
    // In place, in the pinned blocks: every slot from the cut on takes the
    // slot `cut` places later, its key rotated back by `cut` positions. The
    // slots before the cut stay where they are.
    std::vector<int64_t> src_slots;
    std::vector<int64_t> dst_slots;
    for (int32_t dst = std::min(from, blocks * bs); dst < blocks * bs; ++dst) {
      const int32_t src = dst + cut;
      src_slots.push_back(int64_t{pin.blocks[src / bs]} * bs + src % bs);
      dst_slots.push_back(int64_t{pin.blocks[dst / bs]} * bs + dst % bs);
    }
    if (cut > 0 && !src_slots.empty()) {
      // The model's layers, then the draft's (after them in each block,
      // rotated with the draft's RoPE by its backend).
      const auto move = [&](Backend& backend, const ModelConfig& c, int32_t first_layer) {
        std::vector<PagedKvView> layers;
        layers.reserve(static_cast<size_t>(c.n_layer));
        for (int32_t layer = 0; layer < c.n_layer; ++layer) {
          layers.push_back(kv_->LayerView(first_layer + layer));
        }
        backend.MoveKvSlots(layers, c.head_dim, src_slots, dst_slots, -cut);
      };
      move(*backend_, model_.config(), 0);
      if (draft_.model != nullptr) {
        move(*draft_.backend, draft_.model->config(), model_.config().n_layer);
      }
    }
    // The sequence takes the leading blocks and their references; the rest
    // of the pin goes back with it below.
    pinned_blocks_ -= pin.blocks.size();
    kept = std::move(pin.blocks);
    kept->Truncate(blocks);
  }
  Unpin(request.pin_key);
  return kept;
}

}  // namespace tandem::engine
