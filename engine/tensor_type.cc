#include "engine/tensor_type.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tandem::engine {
namespace {

std::string_view KnownGgmlName(uint32_t id) {
  // Names of ggml types this engine does not compute with, for error messages.
  switch (id) {
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 9: return "Q8_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    default: return "";
  }
}

}  // namespace

absl::StatusOr<GgmlType> GgmlTypeFromId(uint32_t id) {
  switch (id) {
    case 0: return GgmlType::kF32;
    case 1: return GgmlType::kF16;
    case 8: return GgmlType::kQ8_0;
    case 30: return GgmlType::kBF16;
    default: break;
  }
  std::string_view known = KnownGgmlName(id);
  if (!known.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "tensor type ", std::string(known), " (id ", id,
        ") is not supported; supported: F32, F16, BF16, Q8_0"));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tensor type id ", id));
}

std::string_view GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kBF16: return "BF16";
  }
  return "?";
}

absl::StatusOr<GgmlType> GgmlTypeFromName(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "f32") return GgmlType::kF32;
  if (lower == "f16") return GgmlType::kF16;
  if (lower == "bf16") return GgmlType::kBF16;
  if (lower == "q8_0") return GgmlType::kQ8_0;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown type name \"", lower, "\"; expected f32, f16, bf16 or q8_0"));
}

int64_t GgmlBlockSize(GgmlType type) {
  return type == GgmlType::kQ8_0 ? kQ8_0BlockSize : 1;
}

int64_t GgmlBlockBytes(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16: return 2;
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ8_0: return sizeof(BlockQ8_0);
  }
  return 0;
}

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t Fp32ToFp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;   // NaN
  if (abs >= 0x477ff000) return sign | 0x7c00;  // overflow -> inf
  if (abs < 0x38800000) {                       // subnormal or zero in fp16
    if (abs < 0x33000000) return sign;          // rounds to zero
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}

uint16_t Fp32ToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 64);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQ8_0BlockSize;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQ8_0BlockSize;
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0BlockSize; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = Fp32ToFp16(d);
    for (int j = 0; j < kQ8_0BlockSize; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::lroundf(xb[j] * id));
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n) {
  const int64_t nb = n / kQ8_0BlockSize;
  for (int64_t b = 0; b < nb; ++b) {
    const float d = Fp16ToFp32(x[b].d);
    for (int j = 0; j < kQ8_0BlockSize; ++j) y[b * kQ8_0BlockSize + j] = d * x[b].qs[j];
  }
}

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case GgmlType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(h[i]);
      return;
    }
    case GgmlType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(h[i]);
      return;
    }
    case GgmlType::kQ8_0:
      DequantizeRowQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
  }
}

}  // namespace tandem::engine
