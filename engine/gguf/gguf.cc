#include "engine/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "engine/gguf/gguf_parser.h"

namespace tandem::engine {
namespace {

// The value at `p` of integer type `type` as a T, or nullopt when `type` is
// not an integer type or the value does not fit in T.
template <typename T>
std::optional<T> IntegerAs(GgufValueType type, const uint8_t* p) {
  auto fit = [](auto v) -> std::optional<T> {
    if (!std::in_range<T>(v)) return std::nullopt;
    return static_cast<T>(v);
  };
  switch (type) {
    case GgufValueType::kUint8: return fit(LoadUnaligned<uint8_t>(p));
    case GgufValueType::kInt8: return fit(LoadUnaligned<int8_t>(p));
    case GgufValueType::kUint16: return fit(LoadUnaligned<uint16_t>(p));
    case GgufValueType::kInt16: return fit(LoadUnaligned<int16_t>(p));
    case GgufValueType::kUint32: return fit(LoadUnaligned<uint32_t>(p));
    case GgufValueType::kInt32: return fit(LoadUnaligned<int32_t>(p));
    case GgufValueType::kUint64: return fit(LoadUnaligned<uint64_t>(p));
    case GgufValueType::kInt64: return fit(LoadUnaligned<int64_t>(p));
    default: return std::nullopt;
  }
}

// Decimal text of the integer at `p`, for error messages.
std::string IntegerText(GgufValueType type, const uint8_t* p) {
  if (std::optional<int64_t> v = IntegerAs<int64_t>(type, p)) return absl::StrCat(*v);
  if (std::optional<uint64_t> v = IntegerAs<uint64_t>(type, p)) return absl::StrCat(*v);
  return "?";
}

// Integer key `key` holding a value outside T's range.
absl::Status DoesNotFit(std::string_view key, std::string_view index, GgufValueType type,
                        const uint8_t* p, std::string_view target) {
  return absl::InvalidArgumentError(
      absl::StrCat("key '", ToAbsl(key), "'", ToAbsl(index), ": value ", IntegerText(type, p), " (",
                   GgufValueTypeName(type), ") does not fit in ", ToAbsl(target)));
}

std::optional<float> FloatAt(GgufValueType type, const uint8_t* p) {
  if (type == GgufValueType::kFloat32) return LoadUnaligned<float>(p);
  if (type == GgufValueType::kFloat64) return static_cast<float>(LoadUnaligned<double>(p));
  return std::nullopt;
}

}  // namespace

int64_t GgufTensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         const GgufOpenOptions& options) {
  // The destructor unmaps and closes whatever was set up when a step fails.
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd_ < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (fstat(file->fd_, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  // mmap refuses length 0; an empty file then fails the parser's first read.
  if (file->size_ > 0) {
    void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, file->fd_, 0);
    if (p == MAP_FAILED) return absl::ErrnoToStatus(errno, absl::StrCat("mmap ", path));
    file->base_ = static_cast<const uint8_t*>(p);
  }
  absl::Status status = Parser(*file, options).Parse();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  }
  return file;
}

GgufFile::~GgufFile() {
  if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) close(fd_);
}

bool GgufFile::HasKey(std::string_view key) const { return kv_.contains(ToAbsl(key)); }

std::optional<GgufValueType> GgufFile::KeyType(std::string_view key) const {
  auto it = kv_.find(ToAbsl(key));
  if (it == kv_.end()) return std::nullopt;
  return it->second.type;
}

std::optional<GgufValueType> GgufFile::ArrayElementType(std::string_view key) const {
  auto it = kv_.find(ToAbsl(key));
  if (it == kv_.end() || it->second.type != GgufValueType::kArray) return std::nullopt;
  return it->second.array_type;
}

std::vector<std::string> GgufFile::Keys() const { return key_order_; }

absl::StatusOr<GgufFile::EncodedValue> GgufFile::GetEncoded(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  return EncodedValue{.type = v->type, .bytes = v->encoded};
}

absl::StatusOr<const GgufFile::Value*> GgufFile::Find(std::string_view key) const {
  auto it = kv_.find(ToAbsl(key));
  if (it == kv_.end()) {
    return absl::NotFoundError(absl::StrCat("key '", ToAbsl(key), "' not found in ", path_));
  }
  return &it->second;
}

namespace {

std::string Describe(GgufValueType type, GgufValueType array_type) {
  if (type != GgufValueType::kArray) return GgufValueTypeName(type);
  return absl::StrCat("ARRAY of ", GgufValueTypeName(array_type));
}

absl::Status WrongType(std::string_view key, std::string actual, std::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("key '", ToAbsl(key), "' has type ", actual, ", expected ", ToAbsl(expected)));
}

}  // namespace

absl::StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufValueType::kString) {
    return WrongType(key, Describe(v->type, v->array_type), "STRING");
  }
  // The parser checked the length against the file.
  const uint64_t length = LoadUnaligned<uint64_t>(v->data);
  return std::string_view(reinterpret_cast<const char*>(v->data + 8), length);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (!GgufIsInteger(v->type)) {
    return WrongType(key, Describe(v->type, v->array_type), "an integer");
  }
  std::optional<int64_t> out = IntegerAs<int64_t>(v->type, v->data);
  if (!out) return DoesNotFit(key, "", v->type, v->data, "int64");
  return *out;
}

absl::StatusOr<uint32_t> GgufFile::GetUint32(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (!GgufIsInteger(v->type)) {
    return WrongType(key, Describe(v->type, v->array_type), "an integer");
  }
  std::optional<uint32_t> out = IntegerAs<uint32_t>(v->type, v->data);
  if (!out) return DoesNotFit(key, "", v->type, v->data, "uint32");
  return *out;
}

absl::StatusOr<float> GgufFile::GetFloat(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  std::optional<float> out = FloatAt(v->type, v->data);
  if (!out) return WrongType(key, Describe(v->type, v->array_type), "FLOAT32 or FLOAT64");
  return *out;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufValueType::kBool) {
    return WrongType(key, Describe(v->type, v->array_type), "BOOL");
  }
  return *v->data != 0;
}

absl::StatusOr<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return WrongType(key, Describe(v->type, v->array_type), "ARRAY of STRING");
  }
  // count <= remaining bytes / 8 at parse time, so this allocation is bounded
  // by the file size.
  std::vector<std::string_view> out;
  out.reserve(v->count);
  const uint8_t* p = v->data;
  for (uint64_t i = 0; i < v->count; ++i) {
    const uint64_t length = LoadUnaligned<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), length);
    p += 8 + length;
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufValueType::kArray ||
      (v->array_type != GgufValueType::kFloat32 && v->array_type != GgufValueType::kFloat64)) {
    return WrongType(key, Describe(v->type, v->array_type), "ARRAY of FLOAT32 or FLOAT64");
  }
  const uint64_t size = GgufScalarSize(v->array_type);
  std::vector<float> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) out[i] = *FloatAt(v->array_type, v->data + i * size);
  return out;
}

absl::StatusOr<std::vector<int32_t>> GgufFile::GetInt32Array(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufValueType::kArray || !GgufIsInteger(v->array_type)) {
    return WrongType(key, Describe(v->type, v->array_type), "ARRAY of an integer type");
  }
  const uint64_t size = GgufScalarSize(v->array_type);
  std::vector<int32_t> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    const uint8_t* p = v->data + i * size;
    std::optional<int32_t> e = IntegerAs<int32_t>(v->array_type, p);
    if (!e) return DoesNotFit(key, absl::StrCat("[", i, "]"), v->array_type, p, "int32");
    out[i] = *e;
  }
  return out;
}

absl::StatusOr<uint64_t> GgufFile::GetArrayLength(std::string_view key) const {
  ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufValueType::kArray) {
    return WrongType(key, Describe(v->type, v->array_type), "ARRAY");
  }
  return v->count;
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(std::string_view key, int64_t fallback) const {
  if (!HasKey(key)) return fallback;
  return GetInt(key);
}

absl::StatusOr<float> GgufFile::GetFloatOr(std::string_view key, float fallback) const {
  if (!HasKey(key)) return fallback;
  return GetFloat(key);
}

absl::StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  if (!HasKey(key)) return fallback;
  return GetBool(key);
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(ToAbsl(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tandem::engine
