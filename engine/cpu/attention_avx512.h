// AVX-512 kernel for one (sequence, KV head) task of paged attention, used by
// PagedAttention when the CPU has AVX-512 and head_dim is a multiple of 16.
// Internal to engine/cpu; engine-thread only (called inside its pool).
#ifndef TANDEM_ENGINE_CPU_ATTENTION_AVX512_H_
#define TANDEM_ENGINE_CPU_ATTENTION_AVX512_H_

#include <vector>

#include "engine/cpu/attention.h"

namespace tandem::engine::cpu {

// True when this CPU and shape can use AttendGroupAvx512.
bool CanUseAvx512Attention(int32_t head_dim);

// Softmax(q k^T / sqrt(d)) v for every query row of `seq` and every query
// head sharing KV head `g`, streaming over the sequence's blocks 16 keys at a
// time with an online softmax. `scratch` is reused between calls.
void AttendGroupAvx512(const AttentionArgs& args, const AttentionSequence& seq, int32_t g,
                       std::vector<float>& scratch);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_ATTENTION_AVX512_H_
