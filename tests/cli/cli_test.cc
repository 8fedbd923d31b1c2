// The `tandem` binary end to end: make-model, quantize, generate (plain and
// --jsonl), tokenize, and clear errors for bad flags.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/test_paths.h"

namespace {

using ::testing::HasSubstr;

struct Result {
  int exit_code;
  std::string out;
};

// Runs a shell command, capturing stdout (and stderr when merged by the caller).
Result Shell(const std::string& cmd) {
  Result r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Tandem() { return tandem::test_paths::BinDir() + "/tandem"; }
std::string Stories() { return tandem::test_paths::StoriesPath(); }

TEST(CliTest, GenerateStoriesGreedy) {
  const Result r = Shell(Tandem() + " generate --model " + Stories() +
                       " --prompt 'Once upon a time' --max-tokens 64 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out,
            ", there was a little girl named Lily. She loved to play outside in the park. One "
            "day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
            "Lily's mom said\n");
}

TEST(CliTest, GenerateJsonlCarriesLogprobs) {
  const Result r = Shell(Tandem() + " generate --model " + Stories() +
                       " --prompt 'Once upon a time' --max-tokens 5 --top-logprobs 3 --jsonl "
                       "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0);
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_THAT(lines[0], HasSubstr("\"text\": \",\""));
  for (const std::string& l : lines) {
    EXPECT_THAT(l, HasSubstr("\"logprob\": "));
    EXPECT_THAT(l, HasSubstr("\"top_logprobs\": [{\"id\": "));
  }
}

TEST(CliTest, TokenizeWithAndWithoutSpecials) {
  Result r = Shell(Tandem() + " tokenize --model " + Stories() + " --text 'Once upon a time'");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("[1, ", 0), 0u) << r.out;
  Result plain =
      Shell(Tandem() + " tokenize --model " + Stories() + " --text 'Once upon a time' --no-special");
  ASSERT_EQ(plain.exit_code, 0);
  EXPECT_EQ("[1, " + plain.out.substr(1), r.out);
}

TEST(CliTest, MakeModelThenGenerate) {
  const std::string path = ::testing::TempDir() + "/cli_synth.gguf";
  Result made = Shell(Tandem() + " make-model --out " + path +
                    " --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --n-vocab 300"
                    " --type q8_0 --seed 3");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  Result gen = Shell(Tandem() + " generate --model " + path +
                   " --prompt 'the little girl' --max-tokens 8 --ignore-eos --temperature 0.9"
                   " --seed 5 --jsonl 2>/dev/null");
  ASSERT_EQ(gen.exit_code, 0);
  std::vector<std::string> lines = absl::StrSplit(gen.out, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 8u);
  Result again = Shell(Tandem() + " generate --model " + path +
                     " --prompt 'the little girl' --max-tokens 8 --ignore-eos --temperature 0.9"
                     " --seed 5 --jsonl 2>/dev/null");
  EXPECT_EQ(again.out, gen.out);
}

// TANDEM_ISA forces a lower kernel table; every table gives the same story.
TEST(CliTest, EveryKernelTableTellsTheSameStory) {
  const std::string run = " generate --model " + Stories() +
                          " --prompt 'Once upon a time' --max-tokens 24 2>&1";
  const Result best = Shell(Tandem() + run);
  ASSERT_EQ(best.exit_code, 0);
  for (const std::string isa : {"portable", "avx2", "avx512"}) {
    const Result r = Shell("TANDEM_ISA=" + isa + " " + Tandem() + run);
    ASSERT_EQ(r.exit_code, 0) << isa;
    std::string story = r.out.substr(0, r.out.find("prompt:"));
    // The table runs where this CPU has it; else the best one, with a
    // warning first.
    const bool lacks = absl::StartsWith(story, "TANDEM_ISA=" + isa + ": this CPU lacks it");
    if (lacks) story.erase(0, story.find('\n') + 1);
    EXPECT_EQ(story, best.out.substr(0, best.out.find("prompt:"))) << isa;
    if (!lacks) {
      EXPECT_THAT(r.out, HasSubstr("backend cpu-" + isa));
      // The flag does the same.
      const Result flag = Shell(Tandem() + run + " --isa " + isa);
      EXPECT_THAT(flag.out, HasSubstr("backend cpu-" + isa));
    }
  }
  const Result bad = Shell(Tandem() + run + " --isa avx9000");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out, HasSubstr("--isa"));
}

TEST(CliTest, QuantizeWritesAModelThatGenerates) {
  const std::string path = ::testing::TempDir() + "/cli_stories_q4km.gguf";
  Result q = Shell(Tandem() + " quantize --in " + Stories() + " --out " + path +
                   " --type q4_k_m 2>&1");
  ASSERT_EQ(q.exit_code, 0) << q.out;
  EXPECT_THAT(q.out, HasSubstr("48 tensors"));
  Result gen = Shell(Tandem() + " generate --model " + path +
                     " --prompt 'Once upon a time' --max-tokens 8 2>/dev/null");
  ASSERT_EQ(gen.exit_code, 0);
  EXPECT_THAT(gen.out, HasSubstr("there was a little girl"));
  Result bad = Shell(Tandem() + " quantize --in " + Stories() + " --out " + path +
                     " --type Q9_X 2>&1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out, HasSubstr("--type"));
  EXPECT_THAT(bad.out, HasSubstr("Q4_K_M"));
  Result missing = Shell(Tandem() + " quantize --in /nonexistent.gguf --out " + path +
                         " --type q8_0 2>&1");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.out, HasSubstr("/nonexistent.gguf"));
}

// A CUDA build here (no GPU) has the driver's reason, a CPU-only build says
// it has no CUDA; a GPU machine says the CUDA forward pass is not built.
// Each exits 1 before generating anything, naming --device.
TEST(CliTest, GenerateOnCudaIsRefusedWithTheReason) {
  for (const std::string device : {"cuda", "cuda:1"}) {
    const Result r = Shell(Tandem() + " generate --model " + Stories() +
                           " --prompt hi --max-tokens 4 --device " + device + " 2>&1");
    // 2 for cuda:1 on a machine with one GPU (an ordinal it lacks).
    if (device == "cuda") {
      EXPECT_EQ(r.exit_code, 1) << r.out;
    }
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("tandem generate: --device cuda"));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("backend cpu")));
  }
}

TEST(CliTest, BadFlagsNameTheFlag) {
  Result r = Shell(Tandem() + " generate --model " + Stories() +
                 " --prompt hi --max-tokens abc 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--max-tokens"));
  r = Shell(Tandem() + " generate --model " + Stories() + " --prompt hi --top-logprobs 21 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("top_logprobs"));
  r = Shell(Tandem() + " generate --model /nonexistent.gguf --prompt hi 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("/nonexistent.gguf"));
  r = Shell(Tandem() + " generate --model " + Stories() + " --prompt hi --device gpu 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--device: \"gpu\""));
  r = Shell(Tandem() + " generate --bogus 1 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--bogus"));
  r = Shell(Tandem() + " make-model --out /tmp/x.gguf --n-head 3 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("n_head"));
}

}  // namespace
