#include "engine/gguf/gguf_parser.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace tandem::engine {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian
// Smallest encodings, used to refuse counts that cannot fit in what is left of
// the file before anything is allocated for them. A KV is a key length, a
// type id and at least one value byte; a tensor info is a name length, n_dims,
// one ne, a type id and an offset.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint32_t kMaxDims = 4;

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

std::string Quoted(std::string_view s) { return absl::StrCat("'", ToAbsl(s), "'"); }

}  // namespace

uint64_t GgufScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

bool GgufIsInteger(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: return true;
    default: return false;
  }
}

std::string GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "UINT8";
    case GgufValueType::kInt8: return "INT8";
    case GgufValueType::kUint16: return "UINT16";
    case GgufValueType::kInt16: return "INT16";
    case GgufValueType::kUint32: return "UINT32";
    case GgufValueType::kInt32: return "INT32";
    case GgufValueType::kFloat32: return "FLOAT32";
    case GgufValueType::kBool: return "BOOL";
    case GgufValueType::kString: return "STRING";
    case GgufValueType::kArray: return "ARRAY";
    case GgufValueType::kUint64: return "UINT64";
    case GgufValueType::kInt64: return "INT64";
    case GgufValueType::kFloat64: return "FLOAT64";
  }
  return absl::StrCat("type ", static_cast<uint32_t>(type));
}

absl::Status GgufFile::Parser::Truncated(std::string_view what, uint64_t n) const {
  return Invalid(absl::StrCat("truncated file: ", ToAbsl(what), " needs ", n, " bytes at offset ",
                              pos_, " but only ", Remaining(), " remain (file size ", file_.size_,
                              ")"));
}

absl::StatusOr<uint32_t> GgufFile::Parser::ReadU32(std::string_view what) {
  if (Remaining() < 4) return Truncated(what, 4);
  uint32_t v = LoadUnaligned<uint32_t>(file_.base_ + pos_);
  pos_ += 4;
  return v;
}

absl::StatusOr<uint64_t> GgufFile::Parser::ReadU64(std::string_view what) {
  if (Remaining() < 8) return Truncated(what, 8);
  uint64_t v = LoadUnaligned<uint64_t>(file_.base_ + pos_);
  pos_ += 8;
  return v;
}

absl::StatusOr<std::string_view> GgufFile::Parser::ReadString(std::string_view what) {
  const uint64_t start = pos_;
  ASSIGN_OR_RETURN(uint64_t length, ReadU64(what));
  if (length > options_.max_string_bytes) {
    return Invalid(absl::StrCat(ToAbsl(what), ": string length ", length, " at offset ", start,
                                " exceeds the limit of ", options_.max_string_bytes, " bytes"));
  }
  if (Remaining() < length) return Truncated(what, length);
  std::string_view s(reinterpret_cast<const char*>(file_.base_ + pos_), length);
  pos_ += length;
  return s;
}

absl::Status GgufFile::Parser::Parse() {
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  RETURN_IF_ERROR(ParseHeader(n_tensors, n_kv));
  file_.key_order_.reserve(n_kv);
  file_.kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) RETURN_IF_ERROR(ParseKv(i));
  RETURN_IF_ERROR(ParseAlignment());

  if (n_tensors > Remaining() / kMinTensorInfoBytes) {
    return Invalid(absl::StrCat("n_tensors ", n_tensors, " cannot fit in the ", Remaining(),
                                " bytes left after the metadata (offset ", pos_, ")"));
  }
  file_.tensors_.reserve(n_tensors);
  file_.tensor_index_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) RETURN_IF_ERROR(ParseTensorInfo(i));

  // pos_ <= size_ < 2^63 and alignment_ <= 2^31, so this cannot overflow.
  const uint64_t data_start = (pos_ + file_.alignment_ - 1) / file_.alignment_ * file_.alignment_;
  return PlaceTensors(data_start);
}

absl::Status GgufFile::Parser::ParseHeader(uint64_t& n_tensors, uint64_t& n_kv) {
  ASSIGN_OR_RETURN(uint32_t magic, ReadU32("magic"));
  if (magic != kGgufMagic) {
    return Invalid(absl::StrCat("bad magic 0x", absl::Hex(magic, absl::kZeroPad8),
                                " at offset 0: not a GGUF file"));
  }
  ASSIGN_OR_RETURN(uint32_t version, ReadU32("version"));
  if (version == 1) {
    return Invalid(
        "GGUF version 1 is not supported (it uses 32-bit counts); re-convert the "
        "model to GGUF v3");
  }
  if (version != 2 && version != 3) {
    // A big-endian file's small version reads as a multiple of 2^16 here.
    const uint32_t swapped = __builtin_bswap32(version);
    if ((version & 0xffff) == 0 && swapped <= 3) {
      return Invalid(absl::StrCat("big-endian GGUF (version ", swapped, ") is not supported"));
    }
    return Invalid(
        absl::StrCat("unsupported GGUF version ", version, " at offset 4 (supported: 2, 3)"));
  }
  file_.version_ = version;

  ASSIGN_OR_RETURN(n_tensors, ReadU64("n_tensors"));
  ASSIGN_OR_RETURN(n_kv, ReadU64("n_kv"));
  if (n_tensors > options_.max_tensors) {
    return Invalid(absl::StrCat("n_tensors ", n_tensors, " at offset 8 exceeds the limit of ",
                                options_.max_tensors));
  }
  if (n_kv > options_.max_kv) {
    return Invalid(
        absl::StrCat("n_kv ", n_kv, " at offset 16 exceeds the limit of ", options_.max_kv));
  }
  if (n_kv > Remaining() / kMinKvBytes) {
    return Invalid(
        absl::StrCat("n_kv ", n_kv, " cannot fit in the ", Remaining(), " bytes after the header"));
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ParseKv(uint64_t index) {
  const uint64_t start = pos_;
  ASSIGN_OR_RETURN(std::string_view key_view,
                   ReadString(absl::StrCat("key of metadata entry #", index)));
  std::string key(key_view);
  if (file_.kv_.contains(key)) {
    return Invalid(absl::StrCat("duplicate key ", Quoted(key), " at offset ", start));
  }
  const std::string what = absl::StrCat("key ", Quoted(key));
  const uint64_t type_offset = pos_;
  ASSIGN_OR_RETURN(uint32_t type_id, ReadU32(absl::StrCat(what, " value type")));
  if (type_id > kMaxGgufValueType) {
    return Invalid(
        absl::StrCat(what, ": unknown value type ", type_id, " at offset ", type_offset));
  }
  Value value;
  const uint64_t value_offset = pos_;
  RETURN_IF_ERROR(ParseValue(key, static_cast<GgufValueType>(type_id), value));
  value.encoded = {file_.base_ + value_offset, static_cast<size_t>(pos_ - value_offset)};
  file_.kv_.emplace(key, value);
  file_.key_order_.push_back(std::move(key));
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ParseValue(std::string_view key, GgufValueType type, Value& value) {
  value.type = type;
  value.data = file_.base_ + pos_;
  const std::string what = absl::StrCat("key ", Quoted(key));
  if (type == GgufValueType::kArray) return ParseArray(key, value);
  if (type == GgufValueType::kString) return ReadString(what).status();
  const uint64_t size = GgufScalarSize(type);
  if (Remaining() < size) return Truncated(what, size);
  if (type == GgufValueType::kBool && file_.base_[pos_] > 1) {
    return Invalid(absl::StrCat(what, ": bool value ", static_cast<int>(file_.base_[pos_]),
                                " at offset ", pos_, " is not 0 or 1"));
  }
  pos_ += size;
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ParseArray(std::string_view key, Value& value) {
  const std::string what = absl::StrCat("key ", Quoted(key));
  const uint64_t type_offset = pos_;
  ASSIGN_OR_RETURN(uint32_t type_id, ReadU32(absl::StrCat(what, " array element type")));
  if (type_id > kMaxGgufValueType) {
    return Invalid(
        absl::StrCat(what, ": unknown array element type ", type_id, " at offset ", type_offset));
  }
  // ggml refuses arrays of arrays too; nothing that reads models needs them.
  if (type_id == static_cast<uint32_t>(GgufValueType::kArray)) {
    return Invalid(
        absl::StrCat(what, ": nested arrays are not supported (offset ", type_offset, ")"));
  }
  const GgufValueType elem = static_cast<GgufValueType>(type_id);
  const uint64_t count_offset = pos_;
  ASSIGN_OR_RETURN(uint64_t count, ReadU64(absl::StrCat(what, " array count")));
  if (count > options_.max_array_elements) {
    return Invalid(absl::StrCat(what, ": array count ", count, " at offset ", count_offset,
                                " exceeds the limit of ", options_.max_array_elements));
  }
  value.array_type = elem;
  value.count = count;
  value.data = file_.base_ + pos_;

  // Every element takes at least `min_size` bytes (a string its length), so
  // a count the rest of the file cannot hold is refused before the walk.
  const uint64_t min_size = elem == GgufValueType::kString ? 8 : GgufScalarSize(elem);
  if (count > Remaining() / min_size) {
    return Invalid(absl::StrCat(what, ": array of ", count, " ", GgufValueTypeName(elem),
                                " at offset ", count_offset, " needs at least ", min_size,
                                " bytes each but only ", Remaining(), " remain"));
  }
  if (elem == GgufValueType::kString) {
    for (uint64_t i = 0; i < count; ++i) {
      if (Remaining() < 8) return Truncated(absl::StrCat(what, "[", i, "]"), 8);
      const uint64_t length = LoadUnaligned<uint64_t>(file_.base_ + pos_);
      if (length > options_.max_string_bytes || length > Remaining() - 8) {
        // Cold path: ReadString fails here and words the message.
        return ReadString(absl::StrCat(what, "[", i, "]")).status();
      }
      pos_ += 8 + length;
    }
    return absl::OkStatus();
  }
  if (elem == GgufValueType::kBool) {
    for (uint64_t i = 0; i < count; ++i) {
      if (file_.base_[pos_ + i] > 1) {
        return Invalid(absl::StrCat(what, "[", i, "]: bool value ",
                                    static_cast<int>(file_.base_[pos_ + i]), " at offset ",
                                    pos_ + i, " is not 0 or 1"));
      }
    }
  }
  pos_ += count * min_size;  // checked above: count * min_size <= Remaining()
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ParseAlignment() {
  if (!file_.HasKey("general.alignment")) return absl::OkStatus();
  ASSIGN_OR_RETURN(uint32_t alignment, file_.GetUint32("general.alignment"));
  // ggml asks for a power of two; the GGUF spec also for a multiple of 8,
  // which keeps every tensor's data aligned for its element type in memory.
  if (alignment < 8 || !std::has_single_bit(alignment)) {
    return Invalid(
        absl::StrCat("key 'general.alignment': value ", alignment, " is not a power of two >= 8"));
  }
  file_.alignment_ = alignment;
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ParseTensorInfo(uint64_t index) {
  const uint64_t start = pos_;
  GgufTensorInfo info;
  ASSIGN_OR_RETURN(std::string_view name, ReadString(absl::StrCat("name of tensor #", index)));
  info.name = std::string(name);
  const std::string what = absl::StrCat("tensor ", Quoted(info.name));
  if (file_.tensor_index_.contains(ToAbsl(info.name))) {
    return Invalid(absl::StrCat("duplicate tensor name ", Quoted(info.name), " at offset ", start));
  }

  const uint64_t dims_offset = pos_;
  ASSIGN_OR_RETURN(uint32_t n_dims, ReadU32(absl::StrCat(what, " n_dims")));
  if (n_dims < 1 || n_dims > kMaxDims) {
    return Invalid(absl::StrCat(what, ": n_dims ", n_dims, " at offset ", dims_offset,
                                " is outside 1..", kMaxDims));
  }
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne_offset = pos_;
    ASSIGN_OR_RETURN(uint64_t ne, ReadU64(absl::StrCat(what, " ne[", d, "]")));
    if (ne < 1 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(absl::StrCat(what, ": ne[", d, "] = ", ne, " at offset ", ne_offset,
                                  " is outside 1..INT64_MAX"));
    }
    info.ne.push_back(static_cast<int64_t>(ne));
    if (__builtin_mul_overflow(elements, static_cast<int64_t>(ne), &elements)) {
      return Invalid(absl::StrCat(what, ": element count of shape [", absl::StrJoin(info.ne, ", "),
                                  "] overflows int64"));
    }
  }

  const uint64_t type_offset = pos_;
  ASSIGN_OR_RETURN(uint32_t type_id, ReadU32(absl::StrCat(what, " type")));
  absl::StatusOr<GgmlType> type = GgmlTypeFromId(type_id);
  if (!type.ok()) {
    return absl::Status(type.status().code(), absl::StrCat(what, ": ", type.status().message(),
                                                           " (offset ", type_offset, ")"));
  }
  info.type = *type;
  const int64_t block = GgmlBlockSize(info.type);
  if (info.ne[0] % block != 0) {
    return Invalid(absl::StrCat(what, ": ne[0] = ", info.ne[0], " is not a multiple of the ",
                                ToAbsl(GgmlTypeName(info.type)), " block size ", block));
  }
  // Blocks times block bytes, not GgmlRowBytes: a row of a hostile shape can
  // overflow int64 on its own. ne[0] is a multiple of the block size, so the
  // element count is too.
  const uint64_t blocks = static_cast<uint64_t>(elements / block);
  const uint64_t block_bytes = static_cast<uint64_t>(GgmlBlockBytes(info.type));
  if (__builtin_mul_overflow(blocks, block_bytes, &info.nbytes)) {
    return Invalid(absl::StrCat(what, ": byte size of shape [", absl::StrJoin(info.ne, ", "),
                                "] overflows uint64"));
  }

  const uint64_t offset_offset = pos_;
  ASSIGN_OR_RETURN(info.offset, ReadU64(absl::StrCat(what, " offset")));
  if (info.offset % file_.alignment_ != 0) {
    return Invalid(absl::StrCat(what, ": data offset ", info.offset, " at offset ", offset_offset,
                                " is not a multiple of the alignment ", file_.alignment_));
  }
  file_.tensor_index_.emplace(info.name, file_.tensors_.size());
  file_.tensors_.push_back(std::move(info));
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::PlaceTensors(uint64_t data_start) {
  const uint64_t size = file_.size_;
  for (GgufTensorInfo& info : file_.tensors_) {
    // [data_start + offset, data_start + offset + nbytes) within [0, size),
    // written so that no sum can wrap.
    const bool inside = data_start <= size && info.offset <= size - data_start &&
                        info.nbytes <= size - data_start - info.offset;
    if (inside) {
      info.data = file_.base_ + data_start + info.offset;
      continue;
    }
    if (!options_.require_tensor_data) continue;
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(data_start, info.offset, &begin) ||
        __builtin_add_overflow(begin, info.nbytes, &end)) {
      return Invalid(absl::StrCat("tensor ", Quoted(info.name), ": data offset ", info.offset,
                                  " + size ", info.nbytes, " overflows (file size ", size, ")"));
    }
    return Invalid(absl::StrCat("tensor ", Quoted(info.name), ": data [", begin, ", ", end,
                                ") extends past end of file (size ", size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine
