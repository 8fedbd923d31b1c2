#include "engine/gguf/tensor_type.h"

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/gguf/quant_formats.h"

namespace tandem::engine {
namespace {

// Names of ggml types this engine does not compute with, for error messages.
std::string_view UnsupportedGgmlName(uint32_t id) {
  switch (id) {
    case 9: return "Q8_1";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 29: return "IQ1_M";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
    default: return "";
  }
}

void F32ToFloat(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}
void FloatToF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}
void F16ToFloat(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(h[i]);
}
void FloatToF16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(src[i]);
}
void Bf16ToFloat(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(h[i]);
}
void FloatToBf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToBf16(src[i]);
}

// Adapts a typed block (de)quantizer to the table's untyped signature.
template <typename Block, void (*kFn)(const Block*, float*, int64_t)>
void ToFloat(const void* src, float* dst, int64_t n) {
  kFn(static_cast<const Block*>(src), dst, n);
}
template <typename Block, void (*kFn)(const float*, Block*, int64_t)>
void FromFloat(const float* src, void* dst, int64_t n) {
  kFn(src, static_cast<Block*>(dst), n);
}

struct TypeTraits {
  GgmlType type;
  std::string_view name;
  int64_t block_size;
  int64_t block_bytes;
  void (*to_float)(const void* src, float* dst, int64_t n);
  void (*from_float)(const float* src, void* dst, int64_t n);
};

#define TANDEM_QUANT_TRAITS(T, NAME, QK)                                            \
  TypeTraits {                                                                      \
    GgmlType::k##T, NAME, QK, sizeof(Block##T), &ToFloat<Block##T, &DequantizeRow##T>, \
        &FromFloat<Block##T, &QuantizeRow##T>                                       \
  }

constexpr TypeTraits kTraits[] = {
    {GgmlType::kF32, "F32", 1, 4, &F32ToFloat, &FloatToF32},
    {GgmlType::kF16, "F16", 1, 2, &F16ToFloat, &FloatToF16},
    {GgmlType::kBF16, "BF16", 1, 2, &Bf16ToFloat, &FloatToBf16},
    TANDEM_QUANT_TRAITS(Q8_0, "Q8_0", kQ8_0BlockSize),
    TANDEM_QUANT_TRAITS(Q4_0, "Q4_0", kQK4),
    TANDEM_QUANT_TRAITS(Q4_1, "Q4_1", kQK4),
    TANDEM_QUANT_TRAITS(Q5_0, "Q5_0", kQK4),
    TANDEM_QUANT_TRAITS(Q5_1, "Q5_1", kQK4),
    TANDEM_QUANT_TRAITS(Q2_K, "Q2_K", kQKK),
    TANDEM_QUANT_TRAITS(Q3_K, "Q3_K", kQKK),
    TANDEM_QUANT_TRAITS(Q4_K, "Q4_K", kQKK),
    TANDEM_QUANT_TRAITS(Q5_K, "Q5_K", kQKK),
    TANDEM_QUANT_TRAITS(Q6_K, "Q6_K", kQKK),
    TANDEM_QUANT_TRAITS(IQ4_NL, "IQ4_NL", kQK4),
};

#undef TANDEM_QUANT_TRAITS

const TypeTraits* FindTraits(uint32_t id) {
  for (const TypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const TypeTraits& Traits(GgmlType type) {
  const TypeTraits* t = FindTraits(static_cast<uint32_t>(type));
  TANDEM_CHECK(t != nullptr, "a GgmlType value outside the table") << static_cast<int>(type);
  return *t;
}

std::string SupportedNames() {
  std::string names;
  for (const TypeTraits& t : kTraits) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", std::string(t.name));
  }
  return names;
}

}  // namespace

absl::StatusOr<GgmlType> GgmlTypeFromId(uint32_t id) {
  if (const TypeTraits* t = FindTraits(id); t != nullptr) return t->type;
  std::string_view known = UnsupportedGgmlName(id);
  if (!known.empty()) {
    return absl::UnimplementedError(absl::StrCat("tensor type ", std::string(known), " (id ", id,
                                                 ") is not supported; supported: ",
                                                 SupportedNames()));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tensor type id ", id));
}

std::string_view GgmlTypeName(GgmlType type) { return Traits(type).name; }

absl::StatusOr<GgmlType> GgmlTypeFromName(std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(absl::string_view(name.data(), name.size()));
  for (const TypeTraits& t : kTraits) {
    if (t.name == upper) return t.type;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown type name \"", std::string(name),
                                                 "\"; expected one of ", SupportedNames()));
}

int64_t GgmlBlockSize(GgmlType type) { return Traits(type).block_size; }

int64_t GgmlBlockBytes(GgmlType type) { return Traits(type).block_bytes; }

bool GgmlIsQuantized(GgmlType type) { return Traits(type).block_size > 1; }

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
  Traits(type).to_float(src, dst, n);
}

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  Traits(type).from_float(src, dst, n);
}

}  // namespace tandem::engine
