#include "engine/gguf/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf_writer.h"
#include "engine/gguf/tensor_type.h"
#include "tests/test_paths.h"

namespace tandem::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A path under TempDir() unique to this process and test (ctest runs tests
// as parallel processes), unlinked when it goes out of scope. A GgufFile
// opened from it stays valid: the mapping outlives the name.
class TempFile {
 public:
  explicit TempFile(const std::string& tag)
      : path_(::testing::TempDir() + "gguf_test_" + std::to_string(getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + tag +
              ".gguf") {}
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenBytes(const std::vector<uint8_t>& bytes,
                                                    const GgufOpenOptions& options = {}) {
  TempFile temp("bytes");
  WriteBytes(temp.path(), bytes);
  return GgufFile::Open(temp.path(), options);
}

// Passes when opening `bytes` fails with `code` and a message containing
// every one of `parts`.
testing::AssertionResult FailsWith(const std::vector<uint8_t>& bytes,
                                   std::vector<std::string> parts,
                                   absl::StatusCode code = absl::StatusCode::kInvalidArgument,
                                   const GgufOpenOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = OpenBytes(bytes, options);
  if (file.ok()) return testing::AssertionFailure() << "opened without error";
  const std::string message(file.status().message());
  if (file.status().code() != code) {
    return testing::AssertionFailure() << "wrong code: " << file.status();
  }
  for (const std::string& part : parts) {
    if (message.find(part) == std::string::npos) {
      return testing::AssertionFailure() << "'" << part << "' not in: " << message;
    }
  }
  return testing::AssertionSuccess() << message;
}

// Byte-level GGUF builder for headers the writer cannot express.
class RawGguf {
 public:
  template <typename T>
  RawGguf& Put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  RawGguf& U32(uint32_t v) { return Put(v); }
  RawGguf& U64(uint64_t v) { return Put(v); }
  RawGguf& Str(std::string_view s) {
    U64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    bytes_.insert(bytes_.end(), {'G', 'G', 'U', 'F'});
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  // Key and value type id; the caller appends the value.
  RawGguf& Key(std::string_view key, GgufValueType type) {
    return Str(key).U32(static_cast<uint32_t>(type));
  }
  RawGguf& KvU32(std::string_view key, uint32_t v) {
    return Key(key, GgufValueType::kUint32).U32(v);
  }
  RawGguf& ArrayHeader(std::string_view key, GgufValueType element, uint64_t count) {
    return Key(key, GgufValueType::kArray).U32(static_cast<uint32_t>(element)).U64(count);
  }
  RawGguf& Tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type,
                  uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) U64(d);
    return U32(type).U64(offset);
  }
  RawGguf& Zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  RawGguf& PadTo(size_t alignment) {
    return Zeros((alignment - bytes_.size() % alignment) % alignment);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Header of a file with one metadata entry and no tensors.
RawGguf OneKv() { return RawGguf().Header(0, 1); }

// One tensor "t" (F32 unless `type` says otherwise) followed by 64 bytes of
// data.
std::vector<uint8_t> OneTensorFile(const std::vector<uint64_t>& ne, uint32_t type = 0,
                                   uint64_t offset = 0) {
  return RawGguf().Header(1, 0).Tensor("t", ne, type, offset).PadTo(32).Zeros(64).bytes();
}

std::vector<uint8_t> Bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(float));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A small valid file with every writer value type and two tensors.
GgufWriter SmallWriter() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("u32", 7);
  w.SetInt32("i32", -5);
  w.SetUint64("u64", 1ull << 40);
  w.SetFloat32("f32", 0.5f);
  w.SetBool("flag", true);
  w.SetStringArray("strs", {"a", "", "ccc"});
  w.SetFloat32Array("floats", {1.5f, -2.0f});
  w.SetInt32Array("ints", {1, -2, 3});
  w.AddTensor("a", GgmlType::kF32, {2, 3}, Bytes({1, 2, 3, 4, 5, 6}));
  w.AddTensor("b", GgmlType::kF32, {3}, Bytes({7, 8, 9}));
  return w;
}

TEST(GgufWriterTest, RoundTripsEveryWriterValueType) {
  TempFile temp("values");
  const std::string& path = temp.path();
  ASSERT_TRUE(SmallWriter().WriteFile(path).ok());
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_FALSE(f.HasKey("general.alignment"));  // default alignment not written
  EXPECT_THAT(f.Keys(), ElementsAre("general.architecture", "u32", "i32", "u64", "f32", "flag",
                                    "strs", "floats", "ints"));
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetUint32("u32"), 7u);
  EXPECT_EQ(*f.GetInt("i32"), -5);
  EXPECT_EQ(*f.GetInt("u64"), int64_t{1} << 40);
  EXPECT_EQ(*f.GetFloat("f32"), 0.5f);
  EXPECT_TRUE(*f.GetBool("flag"));
  EXPECT_THAT(*f.GetStringArray("strs"), ElementsAre("a", "", "ccc"));
  EXPECT_THAT(*f.GetFloatArray("floats"), ElementsAre(1.5f, -2.0f));
  EXPECT_THAT(*f.GetInt32Array("ints"), ElementsAre(1, -2, 3));
  EXPECT_EQ(*f.GetArrayLength("strs"), 3u);
  EXPECT_EQ(f.KeyType("i32"), GgufValueType::kInt32);
  EXPECT_EQ(f.KeyType("ints"), GgufValueType::kArray);
  EXPECT_EQ(f.ArrayElementType("ints"), GgufValueType::kInt32);
  EXPECT_EQ(f.ArrayElementType("i32"), std::nullopt);
  EXPECT_EQ(f.KeyType("missing"), std::nullopt);
  EXPECT_EQ(*f.GetIntOr("missing", 9), 9);
  EXPECT_EQ(*f.GetFloatOr("missing", 2.5f), 2.5f);
  EXPECT_FALSE(*f.GetBoolOr("missing", false));
  EXPECT_EQ(*f.GetIntOr("u32", 9), 7);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.FindTensor("b"), &f.tensors()[1]);
  EXPECT_EQ(f.FindTensor("c"), nullptr);
}

TEST(GgufWriterTest, SettingAKeyAgainReplacesIt) {
  GgufWriter w;
  w.SetUint32("k", 1);
  w.SetString("k", "two");
  auto file = OpenBytes(w.Serialize());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Keys().size(), 1u);
  EXPECT_EQ(*(*file)->GetString("k"), "two");
}

TEST(GgufWriterTest, WriteFileFailsForMissingDirectory) {
  absl::Status s = SmallWriter().WriteFile(::testing::TempDir() + "no/such/dir/x.gguf");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("no/such/dir/x.gguf"));
}

TEST(GgufReaderTest, ReadsEveryValueTypeAndConvertsIntegers) {
  RawGguf raw;
  raw.Header(0, 15);
  raw.Key("u8", GgufValueType::kUint8).Put<uint8_t>(200);
  raw.Key("i8", GgufValueType::kInt8).Put<int8_t>(-100);
  raw.Key("u16", GgufValueType::kUint16).Put<uint16_t>(60000);
  raw.Key("i16", GgufValueType::kInt16).Put<int16_t>(-30000);
  raw.Key("u32", GgufValueType::kUint32).Put<uint32_t>(4000000000u);
  raw.Key("i32", GgufValueType::kInt32).Put<int32_t>(-1);
  raw.Key("f32", GgufValueType::kFloat32).Put<float>(1.25f);
  raw.Key("bool", GgufValueType::kBool).Put<uint8_t>(0);
  raw.Key("str", GgufValueType::kString).Str("hello");
  raw.Key("u64", GgufValueType::kUint64).Put<uint64_t>(~uint64_t{0});
  raw.Key("i64", GgufValueType::kInt64).Put<int64_t>(int64_t{1} << 40);
  raw.Key("f64", GgufValueType::kFloat64).Put<double>(-0.75);
  raw.ArrayHeader("u8s", GgufValueType::kUint8, 3)
      .Put<uint8_t>(1)
      .Put<uint8_t>(2)
      .Put<uint8_t>(255);
  raw.ArrayHeader("i64s", GgufValueType::kInt64, 2).Put<int64_t>(-3).Put<int64_t>(int64_t{1} << 40);
  raw.ArrayHeader("f64s", GgufValueType::kFloat64, 2).Put<double>(0.5).Put<double>(4.0);
  auto file = OpenBytes(raw.bytes());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(*f.GetInt("u8"), 200);
  EXPECT_EQ(*f.GetInt("i8"), -100);
  EXPECT_EQ(*f.GetUint32("u16"), 60000u);
  EXPECT_EQ(*f.GetInt("i16"), -30000);
  EXPECT_EQ(*f.GetUint32("u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("i32"), -1);
  EXPECT_EQ(*f.GetFloat("f32"), 1.25f);
  EXPECT_FALSE(*f.GetBool("bool"));
  EXPECT_EQ(*f.GetString("str"), "hello");
  EXPECT_EQ(*f.GetInt("i64"), int64_t{1} << 40);
  EXPECT_EQ(*f.GetFloat("f64"), -0.75f);
  EXPECT_THAT(*f.GetInt32Array("u8s"), ElementsAre(1, 2, 255));
  EXPECT_THAT(*f.GetFloatArray("f64s"), ElementsAre(0.5f, 4.0f));
  EXPECT_EQ(f.ArrayElementType("i64s"), GgufValueType::kInt64);

  // Conversions that do not fit or do not apply name the key.
  auto expect_error = [](const absl::Status& s, absl::StatusCode code,
                         const std::vector<std::string>& parts) {
    EXPECT_EQ(s.code(), code) << s;
    for (const std::string& part : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  expect_error(f.GetUint32("i32").status(), kInvalid, {"'i32'", "-1", "uint32"});
  expect_error(f.GetUint32("i64").status(), kInvalid, {"'i64'", "1099511627776"});
  expect_error(f.GetInt("u64").status(), kInvalid, {"'u64'", "18446744073709551615"});
  expect_error(f.GetInt32Array("i64s").status(), kInvalid, {"'i64s'[1]", "int32"});
  expect_error(f.GetFloat("u8").status(), kInvalid, {"'u8'", "UINT8"});
  expect_error(f.GetString("u8").status(), kInvalid, {"'u8'", "STRING"});
  expect_error(f.GetBool("str").status(), kInvalid, {"'str'"});
  expect_error(f.GetInt("str").status(), kInvalid, {"'str'"});
  expect_error(f.GetStringArray("u8s").status(), kInvalid, {"'u8s'", "ARRAY of UINT8"});
  expect_error(f.GetFloatArray("u8s").status(), kInvalid, {"'u8s'"});
  expect_error(f.GetInt32Array("f64s").status(), kInvalid, {"'f64s'"});
  expect_error(f.GetArrayLength("u8").status(), kInvalid, {"'u8'"});
  expect_error(f.GetIntOr("str", 1).status(), kInvalid, {"'str'"});
  expect_error(f.GetFloatOr("str", 1).status(), kInvalid, {"'str'"});
  expect_error(f.GetBoolOr("str", true).status(), kInvalid, {"'str'"});
  expect_error(f.GetInt("absent").status(), absl::StatusCode::kNotFound, {"'absent'"});
}

TEST(GgufWriterTest, RoundTripsTensorsOfEveryTypeAtSeveralAlignments) {
  std::vector<float> f32(12);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = 0.25f * static_cast<float>(i) - 1.0f;
  std::vector<uint8_t> f16, bf16;
  for (float x : f32) {
    const uint16_t h = Fp32ToFp16(x), b = Fp32ToBf16(x);
    f16.insert(f16.end(), {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)});
    bf16.insert(bf16.end(), {static_cast<uint8_t>(b), static_cast<uint8_t>(b >> 8)});
  }
  std::vector<float> q_src(64);
  for (size_t i = 0; i < q_src.size(); ++i) q_src[i] = std::sin(static_cast<float>(i));
  std::vector<uint8_t> q8(2 * sizeof(BlockQ8_0));
  QuantizeRowQ8_0(q_src.data(), reinterpret_cast<BlockQ8_0*>(q8.data()), 64);

  const std::string names[] = {"f32", "f16", "bf16", "q8_0"};
  const GgmlType types[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0};
  const std::vector<int64_t> shapes[] = {{4, 3}, {6, 2}, {12}, {32, 2}};
  const std::vector<uint8_t> datas[] = {Bytes(f32), f16, bf16, q8};
  for (uint64_t alignment : {8, 32, 64, 4096}) {
    SCOPED_TRACE(alignment);
    GgufWriter w(alignment);
    w.SetString("general.architecture", "test");
    for (size_t i = 0; i < 4; ++i) w.AddTensor(names[i], types[i], shapes[i], datas[i]);
    auto file = OpenBytes(w.Serialize());
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufFile& f = **file;
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.HasKey("general.alignment"), alignment != 32);
    ASSERT_EQ(f.tensors().size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      const GgufTensorInfo* t = f.FindTensor(names[i]);
      ASSERT_NE(t, nullptr) << names[i];
      EXPECT_EQ(t, &f.tensors()[i]);
      EXPECT_EQ(t->type, types[i]);
      EXPECT_EQ(t->ne, shapes[i]);
      EXPECT_EQ(t->nbytes, datas[i].size());
      EXPECT_EQ(t->offset % alignment, 0u);
      ASSERT_NE(t->data, nullptr);
      // The mapping is page-aligned, so data is aligned in memory too.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % alignment, 0u);
      EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->nbytes), datas[i]);
    }
    EXPECT_EQ(f.FindTensor("q8_0")->NumElements(), 64);
    std::vector<float> back(64);
    DequantizeRow(GgmlType::kQ8_0, f.FindTensor("q8_0")->data, back.data(), 64);
    for (size_t i = 0; i < back.size(); ++i) EXPECT_NEAR(back[i], q_src[i], 0.01f);
  }
}

TEST(GgufReaderTest, ReadsStories260K) {
  auto file = GgufFile::Open(tandem::test_paths::StoriesPath());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.file_size(), 1185376u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.context_length"), 2048);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*f.GetInt("llama.block_count"), 5);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f.GetInt("llama.feed_forward_length"), 172);
  EXPECT_NEAR(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5f, 1e-9f);
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*f.GetUint32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*f.GetUint32("tokenizer.ggml.eos_token_id"), 2u);
  auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  EXPECT_EQ(f.GetFloatArray("tokenizer.ggml.scores")->size(), 512u);
  auto types = f.GetInt32Array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ(std::count(types->begin(), types->end(), 6), 256);
  EXPECT_EQ(std::count(types->begin(), types->end(), 1), 253);

  ASSERT_EQ(f.tensors().size(), 48u);
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kF32);
  EXPECT_THAT(embd->ne, ElementsAre(64, 512));
  EXPECT_EQ(embd->nbytes, 64u * 512 * 4);
  EXPECT_THAT(f.FindTensor("blk.4.ffn_down.weight")->ne, ElementsAre(172, 64));
  EXPECT_THAT(f.FindTensor("output_norm.weight")->ne, ElementsAre(64));
  int64_t elements = 0;
  uint64_t last_end = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
    elements += t.NumElements();
    last_end = std::max(last_end, t.offset + t.nbytes);
    float first;
    std::memcpy(&first, t.data, sizeof(first));
    EXPECT_TRUE(std::isfinite(first)) << t.name;
  }
  EXPECT_EQ(elements, 292800);
  EXPECT_EQ(14176 + last_end, f.file_size());  // data section starts at 14176
}

// Opens `path` truncated to each length in `lengths` (descending) and expects
// an error every time.
void ExpectEveryTruncationFails(const std::string& path, const std::vector<uint64_t>& lengths) {
  for (uint64_t length : lengths) {
    ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(length)), 0);
    auto file = GgufFile::Open(path);
    ASSERT_FALSE(file.ok()) << "prefix of " << length << " bytes opened";
    ASSERT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  }
}

TEST(GgufReaderTest, EveryPrefixOfASmallFileFails) {
  TempFile temp("prefix_small");
  const std::string& path = temp.path();
  const std::vector<uint8_t> image = SmallWriter().Serialize();
  WriteBytes(path, image);
  ASSERT_TRUE(GgufFile::Open(path).ok());
  std::vector<uint64_t> lengths;
  for (uint64_t n = image.size(); n-- > 0;) lengths.push_back(n);
  ExpectEveryTruncationFails(path, lengths);
}

TEST(GgufReaderTest, PrefixesOfTheRealModelFail) {
  std::ifstream in(tandem::test_paths::StoriesPath(), std::ios::binary);
  const std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  ASSERT_EQ(image.size(), 1185376u);
  TempFile temp("prefix_model");
  const std::string& path = temp.path();
  WriteBytes(path, image);
  // Strided through the tensor data, then every length of the header.
  std::vector<uint64_t> lengths;
  for (uint64_t n = image.size() - 1; n > 14400; n -= 997) lengths.push_back(n);
  for (uint64_t n = 14400; n-- > 0;) lengths.push_back(n);
  ExpectEveryTruncationFails(path, lengths);
}

TEST(GgufReaderTest, RandomByteCorruptionNeverCrashes) {
  const std::vector<uint8_t> image = SmallWriter().Serialize();
  std::mt19937 rng(1234);
  const uint8_t interesting[] = {0x00, 0x01, 0x02, 0x7f, 0x80, 0xff};
  int opened = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> bytes = image;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % bytes.size();
      bytes[at] = rng() % 2 ? interesting[rng() % 6] : static_cast<uint8_t>(rng());
    }
    auto file = OpenBytes(bytes);
    if (!file.ok()) continue;
    ++opened;
    // Whatever opened must be safe to read in full.
    const GgufFile& f = **file;
    for (const std::string& key : f.Keys()) {
      EXPECT_EQ(f.GetString(key).ok(), f.KeyType(key) == GgufValueType::kString);
      EXPECT_EQ(f.GetStringArray(key).ok(), f.ArrayElementType(key) == GgufValueType::kString);
      (void)f.GetInt(key);
      (void)f.GetFloatArray(key);
      (void)f.GetInt32Array(key);
    }
    for (const GgufTensorInfo& t : f.tensors()) {
      EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes).size(), t.nbytes);
    }
  }
  EXPECT_GT(opened, 0);  // some flips land in tensor data and stay valid
}

TEST(GgufReaderTest, OpenOfMissingOrEmptyFileFails) {
  EXPECT_EQ(GgufFile::Open(TempFile("does_not_exist").path()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(FailsWith({}, {"magic", "truncated"}));
  EXPECT_FALSE(GgufFile::Open(::testing::TempDir()).ok());
}

TEST(GgufHostileTest, BadMagicAndVersions) {
  std::vector<uint8_t> bytes = RawGguf().Header(0, 0).bytes();
  bytes[0] = 'X';
  EXPECT_TRUE(FailsWith(bytes, {"magic"}));
  EXPECT_TRUE(FailsWith(RawGguf().Header(0, 0, 1).bytes(), {"version 1"}));
  EXPECT_TRUE(FailsWith(RawGguf().Header(0, 0, 99).bytes(), {"version 99"}));
  EXPECT_TRUE(FailsWith(RawGguf().Header(0, 0, 0x03000000).bytes(), {"big-endian"}));
  EXPECT_TRUE(OpenBytes(RawGguf().Header(0, 0, 2).bytes()).ok());
}

TEST(GgufHostileTest, HugeCounts) {
  EXPECT_TRUE(
      FailsWith(RawGguf().Header(1ull << 60, 0).bytes(), {"n_tensors", "1152921504606846976"}));
  EXPECT_TRUE(FailsWith(RawGguf().Header(0, 1ull << 60).bytes(), {"n_kv", "1152921504606846976"}));
  // Under the limits but beyond what the file can hold.
  EXPECT_TRUE(FailsWith(RawGguf().Header(1000, 0).bytes(), {"n_tensors 1000"}));
  EXPECT_TRUE(FailsWith(RawGguf().Header(0, 1000).bytes(), {"n_kv 1000"}));
  GgufOpenOptions tight;
  tight.max_kv = 1;
  EXPECT_TRUE(FailsWith(RawGguf().Header(0, 2).KvU32("a", 1).KvU32("b", 2).bytes(),
                        {"n_kv 2", "limit of 1"}, absl::StatusCode::kInvalidArgument, tight));
}

TEST(GgufHostileTest, HugeStringsAndArrays) {
  EXPECT_TRUE(FailsWith(OneKv().U64(1ull << 62).Zeros(16).bytes(),
                        {"key of metadata entry #0", "4611686018427387904"}));
  EXPECT_TRUE(FailsWith(OneKv().Key("name", GgufValueType::kString).U64(~0ull).bytes(),
                        {"'name'", "18446744073709551615"}));
  EXPECT_TRUE(FailsWith(OneKv().Key("name", GgufValueType::kString).U64(100).Str("x").bytes(),
                        {"'name'", "truncated"}));
  EXPECT_TRUE(FailsWith(OneKv().ArrayHeader("arr", GgufValueType::kUint32, 1ull << 60).bytes(),
                        {"'arr'", "array count 1152921504606846976"}));
  EXPECT_TRUE(FailsWith(OneKv().ArrayHeader("arr", GgufValueType::kUint64, 1 << 27).U64(0).bytes(),
                        {"'arr'", "134217728"}));
  EXPECT_TRUE(
      FailsWith(OneKv().ArrayHeader("strs", GgufValueType::kString, 1 << 20).Str("a").bytes(),
                {"'strs'", "1048576"}));
  EXPECT_TRUE(FailsWith(OneKv()
                            .ArrayHeader("strs", GgufValueType::kString, 2)
                            .Str("a")
                            .U64(1ull << 50)
                            .Zeros(8)
                            .bytes(),
                        {"'strs'[1]", "1125899906842624"}));
  GgufOpenOptions tight;
  tight.max_string_bytes = 4;
  EXPECT_TRUE(FailsWith(OneKv().KvU32("longkey", 1).bytes(), {"string length 7"},
                        absl::StatusCode::kInvalidArgument, tight));
}

TEST(GgufHostileTest, BadValueTypes) {
  EXPECT_TRUE(
      FailsWith(OneKv().Str("weird").U32(13).U32(0).bytes(), {"'weird'", "unknown value type 13"}));
  EXPECT_TRUE(FailsWith(OneKv().ArrayHeader("a", static_cast<GgufValueType>(77), 1).U64(0).bytes(),
                        {"'a'", "unknown array element type 77"}));
  EXPECT_TRUE(FailsWith(OneKv().ArrayHeader("nested", GgufValueType::kArray, 1).U64(0).bytes(),
                        {"'nested'", "nested arrays"}));
  EXPECT_TRUE(FailsWith(OneKv().Key("b", GgufValueType::kBool).Put<uint8_t>(2).bytes(),
                        {"'b'", "bool value 2"}));
  EXPECT_TRUE(FailsWith(
      OneKv().ArrayHeader("bs", GgufValueType::kBool, 2).Put<uint8_t>(1).Put<uint8_t>(9).bytes(),
      {"'bs'[1]", "bool value 9"}));
}

TEST(GgufHostileTest, BadTensorTypes) {
  EXPECT_TRUE(FailsWith(OneTensorFile({32}, 99), {"tensor 't'", "99"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({32}, 23), {"tensor 't'", "IQ4_XS"},
                        absl::StatusCode::kUnimplemented));
}

TEST(GgufHostileTest, BadShapes) {
  EXPECT_TRUE(OpenBytes(OneTensorFile({8})).ok());
  EXPECT_TRUE(FailsWith(OneTensorFile({}), {"tensor 't'", "n_dims 0"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({1, 1, 1, 1, 1}), {"tensor 't'", "n_dims 5"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({8, 0}), {"tensor 't'", "ne[1] = 0"}));
  EXPECT_TRUE(
      FailsWith(OneTensorFile({1ull << 63}), {"tensor 't'", "ne[0] = 9223372036854775808"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({1ull << 32, 1ull << 32}), {"tensor 't'", "overflows"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({1ull << 31, 1ull << 31}), {"tensor 't'", "overflows"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({1ull << 62}), {"tensor 't'", "overflows"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({33}, 8), {"tensor 't'", "ne[0] = 33", "Q8_0", "32"}));
  // A K-quant row holds whole 256-element super-blocks.
  EXPECT_TRUE(FailsWith(OneTensorFile({32}, 12), {"tensor 't'", "ne[0] = 32", "Q4_K", "256"}));
}

TEST(GgufHostileTest, BadTensorOffsets) {
  EXPECT_TRUE(FailsWith(OneTensorFile({8}, 0, 4096), {"tensor 't'", "past end of file"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({8}, 0, ~0ull << 5), {"tensor 't'", "overflows"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({8}, 0, 16), {"tensor 't'", "offset 16", "alignment 32"}));
  EXPECT_TRUE(FailsWith(OneTensorFile({1024}), {"tensor 't'", "past end of file"}));
  // Vocab-only readers may open files whose tensor data is absent.
  GgufOpenOptions no_data;
  no_data.require_tensor_data = false;
  auto file = OpenBytes(OneTensorFile({8}, 0, 4096), no_data);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors()[0].data, nullptr);
}

TEST(GgufHostileTest, BadAlignment) {
  for (uint64_t alignment : {0, 3, 4, 48}) {
    GgufWriter w(alignment);
    w.AddTensor("t", GgmlType::kF32, {4}, Bytes({1, 2, 3, 4}));
    EXPECT_TRUE(
        FailsWith(w.Serialize(), {"general.alignment", std::to_string(alignment), "power of two"}));
  }
  EXPECT_TRUE(
      FailsWith(OneKv().Key("general.alignment", GgufValueType::kUint64).U64(1ull << 40).bytes(),
                {"general.alignment", "1099511627776", "uint32"}));
  GgufWriter str;
  str.SetString("general.alignment", "32");
  EXPECT_TRUE(FailsWith(str.Serialize(), {"general.alignment", "STRING"}));
}

TEST(GgufHostileTest, DuplicateKeyAndTensorName) {
  // Built with the writer, then one name patched to equal the other.
  auto patch = [](std::vector<uint8_t> bytes, std::string_view from, std::string_view to) {
    auto it = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
    if (it == bytes.end()) ADD_FAILURE() << "no " << from << " in the image";
    if (it != bytes.end()) std::copy(to.begin(), to.end(), it);
    return bytes;
  };
  GgufWriter keys;
  keys.SetUint32("dup.a", 1);
  keys.SetUint32("dup.b", 2);
  EXPECT_TRUE(FailsWith(patch(keys.Serialize(), "dup.b", "dup.a"), {"duplicate key 'dup.a'"}));
  GgufWriter tensors;
  tensors.AddTensor("w.1", GgmlType::kF32, {1}, Bytes({1}));
  tensors.AddTensor("w.2", GgmlType::kF32, {1}, Bytes({2}));
  EXPECT_TRUE(FailsWith(patch(tensors.Serialize(), "w.2", "w.1"), {"duplicate tensor name 'w.1'"}));
  // The writer itself does not refuse duplicate tensor names.
  tensors.AddTensor("w.1", GgmlType::kF32, {1}, Bytes({3}));
  EXPECT_TRUE(FailsWith(tensors.Serialize(), {"duplicate tensor name 'w.1'"}));
}

}  // namespace
}  // namespace tandem::engine
