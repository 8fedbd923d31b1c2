// AVX2 + FMA + F16C kernel for one (sequence, KV head) task of paged
// attention, used by PagedAttention on the AVX2 table (no AVX-512) when
// head_dim is a multiple of 8; the same streaming online softmax over
// 16-key tiles as the AVX-512 kernel. Also the AVX2 table's SwiGLU, which
// shares its exp. Internal to engine/cpu; engine-thread only.
#ifndef TANDEM_ENGINE_CPU_ATTENTION_AVX2_H_
#define TANDEM_ENGINE_CPU_ATTENTION_AVX2_H_

#include <cstdint>
#include <vector>

#include "engine/cpu/attention.h"

namespace tandem::engine::cpu {

// True when this CPU and shape can use AttendGroupAvx2.
bool CanUseAvx2Attention(int32_t head_dim);

void AttendGroupAvx2(const AttentionArgs& args, const AttentionSequence& seq, int32_t g,
                     std::vector<float>& scratch);

// out = SiLU(gate) * up, 8 lanes at a time; needs AVX2 + FMA.
void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_ATTENTION_AVX2_H_
