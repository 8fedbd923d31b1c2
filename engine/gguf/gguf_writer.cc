#include "engine/gguf/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::engine {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kGgufVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr char kAlignmentKey[] = "general.alignment";

// Appends the little-endian bytes of `v` (the host is little-endian; the
// reader's header asserts it).
template <typename T>
void Append(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void AppendString(std::vector<uint8_t>& out, std::string_view s) {
  Append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void AppendArrayHeader(std::vector<uint8_t>& out, GgufValueType element, uint64_t count) {
  Append<uint32_t>(out, static_cast<uint32_t>(element));
  Append<uint64_t>(out, count);
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Writes all of `data` to `fd`, retrying short writes and EINTR.
bool WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void GgufWriter::Set(std::string key, GgufValueType type, std::vector<uint8_t> payload) {
  // Setting a key again replaces its value where it first appeared, as
  // ggml's gguf_set_* does.
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.type = type;
      e.payload = std::move(payload);
      return;
    }
  }
  entries_.push_back(Entry{std::move(key), type, std::move(payload)});
}

void GgufWriter::SetString(std::string key, std::string_view value) {
  std::vector<uint8_t> p;
  AppendString(p, value);
  Set(std::move(key), GgufValueType::kString, std::move(p));
}

void GgufWriter::SetUint32(std::string key, uint32_t value) {
  std::vector<uint8_t> p;
  Append(p, value);
  Set(std::move(key), GgufValueType::kUint32, std::move(p));
}

void GgufWriter::SetInt32(std::string key, int32_t value) {
  std::vector<uint8_t> p;
  Append(p, value);
  Set(std::move(key), GgufValueType::kInt32, std::move(p));
}

void GgufWriter::SetUint64(std::string key, uint64_t value) {
  std::vector<uint8_t> p;
  Append(p, value);
  Set(std::move(key), GgufValueType::kUint64, std::move(p));
}

void GgufWriter::SetFloat32(std::string key, float value) {
  std::vector<uint8_t> p;
  Append(p, value);
  Set(std::move(key), GgufValueType::kFloat32, std::move(p));
}

void GgufWriter::SetBool(std::string key, bool value) {
  std::vector<uint8_t> p;
  Append<uint8_t>(p, value ? 1 : 0);
  Set(std::move(key), GgufValueType::kBool, std::move(p));
}

void GgufWriter::SetStringArray(std::string key, const std::vector<std::string>& values) {
  std::vector<uint8_t> p;
  AppendArrayHeader(p, GgufValueType::kString, values.size());
  for (const std::string& v : values) AppendString(p, v);
  Set(std::move(key), GgufValueType::kArray, std::move(p));
}

void GgufWriter::SetFloat32Array(std::string key, const std::vector<float>& values) {
  std::vector<uint8_t> p;
  AppendArrayHeader(p, GgufValueType::kFloat32, values.size());
  for (float v : values) Append(p, v);
  Set(std::move(key), GgufValueType::kArray, std::move(p));
}

void GgufWriter::SetInt32Array(std::string key, const std::vector<int32_t>& values) {
  std::vector<uint8_t> p;
  AppendArrayHeader(p, GgufValueType::kInt32, values.size());
  for (int32_t v : values) Append(p, v);
  Set(std::move(key), GgufValueType::kArray, std::move(p));
}

void GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                           std::vector<uint8_t> data) {
  // No shape or size checks: tests use the writer to build hostile files.
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), std::move(data)});
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  // Alignment 0 cannot pad; it is still written out so readers can refuse it.
  const uint64_t pad = std::max<uint64_t>(alignment_, 1);
  const bool explicit_alignment = std::any_of(
      entries_.begin(), entries_.end(), [](const Entry& e) { return e.key == kAlignmentKey; });
  const bool write_alignment = alignment_ != kDefaultAlignment && !explicit_alignment;

  std::vector<uint8_t> out;
  Append<uint32_t>(out, kGgufMagic);
  Append<uint32_t>(out, kGgufVersion);
  Append<uint64_t>(out, tensors_.size());
  Append<uint64_t>(out, entries_.size() + (write_alignment ? 1 : 0));
  if (write_alignment) {
    AppendString(out, kAlignmentKey);
    if (alignment_ <= std::numeric_limits<uint32_t>::max()) {
      Append<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kUint32));
      Append<uint32_t>(out, static_cast<uint32_t>(alignment_));
    } else {
      Append<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kUint64));
      Append<uint64_t>(out, alignment_);
    }
  }
  for (const Entry& e : entries_) {
    AppendString(out, e.key);
    Append<uint32_t>(out, static_cast<uint32_t>(e.type));
    out.insert(out.end(), e.payload.begin(), e.payload.end());
  }

  // Offsets relative to the data section; each tensor starts aligned.
  std::vector<uint64_t> offsets;
  offsets.reserve(tensors_.size());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    offsets.push_back(offset);
    AppendString(out, t.name);
    Append<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Append<uint64_t>(out, static_cast<uint64_t>(d));
    Append<uint32_t>(out, static_cast<uint32_t>(t.type));
    Append<uint64_t>(out, offset);
    offset = AlignUp(offset + t.data.size(), pad);
  }

  // Zero padding up to the data section and between tensors; none after the
  // last one, so every strict prefix of a file with tensors is truncated.
  const uint64_t data_start = AlignUp(out.size(), pad);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + offsets[i], 0);
    out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
  }
  if (tensors_.empty()) out.resize(data_start, 0);
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> image = Serialize();
  // Write a sibling temp file and rename it, so readers never map a half
  // written model.
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("create temp file for ", path));
  const bool ok =
      fchmod(fd, 0644) == 0 && WriteAll(fd, image.data(), image.size()) && fsync(fd) == 0;
  const int write_errno = errno;
  if (close(fd) != 0 || !ok) {
    const int err = ok ? errno : write_errno;
    unlink(tmp.c_str());
    return absl::ErrnoToStatus(err, absl::StrCat("write ", tmp));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::ErrnoToStatus(err, absl::StrCat("rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine
