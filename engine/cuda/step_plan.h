// The CUDA backend's host-side arithmetic, apart from the device so that it
// is tested on any machine (tests/engine/cuda/step_plan_test.cc): where a
// step's metadata arrays live and what they hold, which decode steps run
// from a CUDA graph and padded to which bucket, and what an allocation that
// does not fit says. Plain C++; no CUDA headers.
#ifndef TANDEM_ENGINE_CUDA_STEP_PLAN_H_
#define TANDEM_ENGINE_CUDA_STEP_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/model/backend.h"

namespace tandem::engine::cuda {

// Where each of a step's metadata arrays lives in the device buffer (and
// its pinned mirror): fixed offsets for ReserveStep's limits, so the
// kernels' pointers (and a captured graph's) are the same every step. Each
// region starts 256-byte aligned.
struct MetaLayout {
  int64_t tokens = 0;        // int32 [T]
  int64_t positions = 0;     // int32 [T]
  int64_t slots = 0;         // int64 [T]
  int64_t kv_len = 0;        // int32 [T]: slots row t attends to (its own included)
  int64_t table_offset = 0;  // int32 [T]: its sequence's table in block_table
  int64_t block_table = 0;   // int32 [max_table_entries]
  int64_t logit_rows = 0;    // int32 [R]
  int64_t top_k = 0;         // int32 [R]
  int64_t target = 0;        // int32 [R]
  int64_t bytes = 0;

  static MetaLayout For(const StepLimits& l) {
    MetaLayout m;
    int64_t at = 0;
    const auto region = [&at](int64_t bytes) {
      const int64_t offset = at;
      at += (bytes + 255) / 256 * 256;
      return offset;
    };
    m.tokens = region(int64_t{l.max_tokens} * 4);
    m.positions = region(int64_t{l.max_tokens} * 4);
    m.slots = region(int64_t{l.max_tokens} * 8);
    m.kv_len = region(int64_t{l.max_tokens} * 4);
    m.table_offset = region(int64_t{l.max_tokens} * 4);
    m.block_table = region(int64_t{l.max_table_entries} * 4);
    m.logit_rows = region(int64_t{l.max_logit_rows} * 4);
    m.top_k = region(int64_t{l.max_logit_rows} * 4);
    m.target = region(int64_t{l.max_logit_rows} * 4);
    m.bytes = at;
    return m;
  }
};

// Writes the step's metadata into `host` (the pinned mirror, laid out as
// `layout`) and calls copy(offset, bytes) for each array written, token
// arrays over `rows` rows and logits arrays over `logit_rows` (a graph's
// bucket pads both). Pad rows read token 0 at position 0, store nothing
// (slot -1), attend to nothing (kv_len 0), gather row 0 and are not reduced
// (top_k -1).
template <typename Copy>
void WriteStepMeta(const StepMetadata& step, const MetaLayout& layout, int32_t rows,
                   int32_t logit_rows, uint8_t* host, Copy&& copy) {
  const auto put_rows = [&](int64_t offset, const auto& v, auto pad, int32_t n) {
    using Element = std::decay_t<decltype(v[0])>;
    auto* row = reinterpret_cast<Element*>(host + offset);
    std::memcpy(row, v.data(), v.size() * sizeof(Element));
    std::fill(row + v.size(), row + n, static_cast<Element>(pad));
    copy(offset, int64_t{n} * int64_t{sizeof(Element)});
  };
  put_rows(layout.tokens, step.tokens, 0, rows);
  put_rows(layout.positions, step.positions, 0, rows);
  put_rows(layout.slots, step.slot_mapping, -1, rows);
  auto* kv_len = reinterpret_cast<int32_t*>(host + layout.kv_len);
  auto* table_offset = reinterpret_cast<int32_t*>(host + layout.table_offset);
  std::fill(kv_len, kv_len + rows, 0);
  std::fill(table_offset, table_offset + rows, 0);
  for (const StepSequence& s : step.seqs) {
    for (int32_t i = 0; i < s.n_rows; ++i) {
      kv_len[s.first_row + i] = s.kv_start + i + 1;
      table_offset[s.first_row + i] = s.table_offset;
    }
  }
  copy(layout.kv_len, int64_t{rows} * 4);
  copy(layout.table_offset, int64_t{rows} * 4);
  put_rows(layout.block_table, step.block_tables, 0,
           static_cast<int32_t>(step.block_tables.size()));
  put_rows(layout.logit_rows, step.logit_rows, 0, logit_rows);
  put_rows(layout.top_k, step.logit_top_k, -1, logit_rows);
  put_rows(layout.target, step.logit_target, -1, logit_rows);
}

// The bucket a step's graph is for, or 0 for an eager step. Graph steps are
// decode steps: one row per sequence, each row its own logits row (in
// order), at most graph_max_batch of them. The bucket is the next power of
// two, capped by graph_max_batch and by the rows the buffers hold (a cap
// that is not a power of two is a bucket of its own).
inline int32_t GraphBucket(const StepMetadata& step, int32_t graph_max_batch,
                           const StepLimits& limits) {
  const int32_t T = step.n_tokens();
  if (graph_max_batch <= 0 || T == 0 || T > graph_max_batch) return 0;
  if (step.n_logit_rows() != T || static_cast<int32_t>(step.seqs.size()) != T) return 0;
  for (int32_t r = 0; r < T; ++r) {
    if (step.logit_rows[r] != r) return 0;
  }
  const int32_t cap = std::min({graph_max_batch, limits.max_tokens, limits.max_logit_rows});
  if (T > cap) return 0;
  int32_t bucket = 1;
  while (bucket < T) bucket *= 2;
  return std::min(bucket, cap);
}

inline int64_t MiB(int64_t bytes) { return (bytes + (1 << 20) - 1) >> 20; }

// An allocation that did not fit: what and how much, the device's free and
// total memory (cudaMemGetInfo), what the process holds by use, and the
// flags that size each use.
inline std::string OutOfMemoryMessage(std::string_view what, int64_t bytes,
                                      std::string_view device, int64_t free_bytes,
                                      int64_t total_bytes,
                                      const std::map<std::string, int64_t>& held_by_use) {
  std::string held;
  for (const auto& [use, b] : held_by_use) {
    absl::StrAppend(&held, held.empty() ? "" : ", ", use, " ", MiB(b), " MiB");
  }
  return absl::StrCat(std::string(what), ": cannot allocate ", MiB(bytes), " MiB on ",
                      std::string(device), " (", MiB(free_bytes), " MiB free of ",
                      MiB(total_bytes), " MiB; this process holds ",
                      held.empty() ? "nothing" : held,
                      "): lower --kv-budget-mb (the KV pool) or --max-batch-tokens (the step's "
                      "scratch), or use a smaller model");
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_STEP_PLAN_H_
