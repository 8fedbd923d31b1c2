// Whole encodings checked against implementations that share no code with
// engine/tokenizer/: SentencePiece on the SPM vocabulary of stories260K.gguf,
// and GPT-2's byte-level BPE algorithm with the Hugging Face pre-tokenizer
// patterns on a BPE vocabulary written here. The inputs are of the kinds
// llama.cpp's test-tokenizer-0 runs on every vocabulary it supports
// (whitespace runs, contractions, digit and punctuation runs, accents,
// Cyrillic, Thai, CJK, emoji and ZWJ sequences, special-token text); that
// test's vectors come from SentencePiece and Hugging Face's tokenizers too.
// The ids were computed by reference_vectors.py beside this file (run by
// hand; see its docstring), and every vector is encoded with add_special and
// parse_special false, as llama.cpp's vectors are.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "tests/test_paths.h"

namespace tandem::engine {
namespace {

struct ReferenceVector {
  std::string text;
  std::vector<int32_t> ids;
};

// One failure per mismatch, naming the text.
void ExpectReferenceIds(const Tokenizer& tok, const std::vector<ReferenceVector>& vectors) {
  for (const ReferenceVector& v : vectors) {
    EXPECT_EQ(tok.Encode(v.text, {.add_special = false, .parse_special = false}), v.ids)
        << "'" << v.text << "'";
  }
}

// SentencePiece on a model rebuilt from the GGUF's pieces, scores and types
// (BPE with byte fallback, identity normalisation, the dummy U+2581 prefix,
// whitespace kept): what llama.cpp's llama-spm vectors check, on the SPM
// vocabulary the project ships.
TEST(SpmReferenceTest, Stories260KMatchesSentencePiece) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizer(tandem::test_paths::StoriesPath());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<ReferenceVector> vectors = {
    {"", {}},
    {" ", {410, 410}},
    {"  ", {410, 410, 410}},
    {"   ", {410, 410, 410, 410}},
    {"\t", {410, 12}},
    {"\n", {410, 13}},
    {"\n\n", {410, 13, 13}},
    {"\t\n", {410, 12, 13}},
    {" \n ", {410, 410, 13, 410}},
    {"Hello world", {346, 306, 414, 263, 304, 341}},
    {" Hello world", {410, 346, 306, 414, 263, 304, 341}},
    {"Hello World", {346, 306, 414, 410, 448, 304, 341}},
    {" Hello World!", {410, 346, 306, 414, 410, 448, 304, 341, 443}},
    {"Hello, world!", {346, 306, 414, 432, 263, 304, 341, 443}},
    {"  Hello", {410, 410, 346, 306, 414}},
    {"    Hello\n    Hello", {410, 410, 410, 410, 346, 306, 414, 13, 410, 410, 410, 346, 306, 414}},
    {"Once upon a time, there was a little girl named Lily.", {403, 407, 261, 378, 432, 383, 286,
         261, 376, 298, 315, 421, 395, 317, 426}},
    {"She said: \"Don't go!\" and ran.", {338, 336, 467, 313, 455, 289, 439, 413, 298, 414, 443,
         436, 269, 352, 303, 426}},
    {"it's they're we'll I'd you've IT'S", {312, 439, 419, 366, 439, 276, 382, 439, 306, 359, 439,
         418, 364, 439, 360, 359, 434, 439, 437}},
    {"123 4567 89012", {410, 475, 479, 472, 410, 484, 480, 490, 491, 410, 487, 483, 477, 475, 479}},
    {"3.14159", {410, 472, 426, 475, 484, 475, 480, 483}},
    {"!!!!!!", {410, 443, 443, 443, 443, 443, 443}},
    {"...", {410, 426, 426, 426}},
    {"( [ { } ] )", {410, 489, 410, 508, 410, 126, 410, 128, 410, 509, 410, 488}},
    {"a\tb\tc", {261, 12, 430, 12, 429}},
    {"na\u00EFve caf\u00E9", {297, 412, 198, 178, 360, 280, 412, 431, 485}},
    {"\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440", {410, 211, 162, 212, 131, 211, 187,
         211, 181, 211, 184, 212, 133, 432, 410, 211, 191, 211, 187, 212, 131}},
    {"\u0E2A\u0E27\u0E31\u0E2A\u0E14\u0E35", {410, 227, 187, 173, 227, 187, 170, 227, 187, 180, 227,
         187, 173, 227, 187, 151, 227, 187, 184}},
    {"\u6211\u60F3\u5728\u82F9\u679C\u5DE5\u4F5C", {410, 233, 139, 148, 233, 134, 182, 232, 159,
         171, 235, 142, 188, 233, 161, 159, 232, 186, 168, 231, 192, 159}},
    {"\U0001F999 llamas \U0001F680", {410, 243, 162, 169, 156, 278, 421, 314, 412, 419, 410, 243,
         162, 157, 131}},
    {"\U0001F469\u200D\U0001F469\u200D\U0001F467", {410, 243, 162, 148, 172, 229, 131, 144, 243,
         162, 148, 172, 229, 131, 144, 243, 162, 148, 170}},
    {"e\u0301", {344, 207, 132}},
    {"UPPER lower MiXeD", {410, 471, 460, 460, 459, 461, 278, 327, 285, 392, 417, 478, 411, 455}},
    {"<s> </s> <unk>", {410, 504, 419, 505, 410, 504, 492, 419, 505, 410, 504, 379, 433, 505}},
    {"\u2581already escaped", {410, 261, 421, 276, 380, 422, 344, 419, 429, 412, 427, 266}},
    {"The dog's ball was red. He liked to play with it every day!", {291, 400, 428, 439, 419, 268,
         388, 286, 352, 266, 426, 346, 397, 355, 267, 337, 335, 312, 344, 363, 328, 443}},
    {"line one\n\n  line two\t\n", {278, 271, 411, 353, 411, 13, 13, 410, 278, 271, 411, 259, 424,
         414, 12, 13}},
    {"HELLO, WORLD? 2024-05-17 12:30", {320, 459, 438, 438, 441, 432, 410, 448, 441, 461, 438, 455,
         450, 410, 479, 477, 479, 484, 464, 477, 480, 464, 475, 491, 410, 475, 479, 467, 472, 477}},
  };
  ExpectReferenceIds(**tok, vectors);
}

// ---------------------------------------------------------------------------
// Byte-level BPE: what llama.cpp's vectors for real BPE vocabularies
// (gpt-2, llama-bpe, qwen2, ...) check. The vocabulary's merges were learned
// by reference_vectors.py from a short English text with numbers and
// punctuation, most frequent pair first; tokens 0..255 are the bytes (GPT-2's
// spelling) and token 256 + i is merge i's result.

const std::vector<std::string>& ReferenceMerges() {
  static const std::vector<std::string> merges = {
    "h e", "\u0120 t", "e d", "\u0120 w", "l i", "\u0120 li", "l l", "o n", "\u0120 d", "\u0120 s",
    "\u0120t he", "H e", "a y", "i t", "n d", "r l", "\u0120 W", "\u0120 a", "! !", "' s", "* *",
    "- -", ". .", "1 2", "? ?", "He ll", "Hell o", "a s", "h a", "i d", "it h", "k ed", "l ay",
    "n e", "o g", "o rl", "o u", "orl d", "p lay", "r e", "v e", "\u010A \u0120", "\u0120 12",
    "\u0120 e", "\u0120 g", "\u0120 i", "\u0120 play", "\u0120d og", "\u0120li ked", "\u0120li ne",
    "\u0120t o", "\u0120w as", "\u0120w ith", "! \"", "!! !", "' ll", "' re", "' t", "' ve", "** *",
    "-- -", ".. .", "0 2", "0 5", "02 4", "1 4", "1 5", "1 7", "14 15", "1415 9", "2 024", "3 0",
    "3 4", "34 5", "345 6", "3456 7", "34567 8", "345678 9", "3456789 0", "?? ?", "D on", "E L",
    "EL L", "ELL O", "H ELLO", "I t", "L D", "L i", "Li l", "Lil y", "O R", "O n", "OR LD", "On c",
    "Onc e", "S he",
  };
  return merges;
}

std::unique_ptr<Tokenizer> ReferenceBpeTokenizer(const std::string& pre) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(ByteToUnicode(static_cast<uint8_t>(b)));
  for (const std::string& merge : ReferenceMerges()) {
    // Spelled bytes never include ' ' (byte 0x20 is spelled U+0120).
    std::string token = merge;
    token.erase(token.find(' '), 1);
    tokens.push_back(token);
  }
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", pre);
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
  w.SetStringArray("tokenizer.ggml.merges", ReferenceMerges());
  const std::string path = ::testing::TempDir() + "/bpe_reference_" + pre + ".gguf";
  EXPECT_TRUE(w.WriteFile(path).ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizer(path);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(BpeReferenceTest, Gpt2MatchesGpt2sAlgorithm) {
  std::unique_ptr<Tokenizer> tok = ReferenceBpeTokenizer("gpt-2");
  ASSERT_NE(tok, nullptr);
  const std::vector<ReferenceVector> vectors = {
    {"", {}},
    {" ", {32}},
    {"  ", {32, 32}},
    {"   ", {32, 32, 32}},
    {"\t", {9}},
    {"\n", {10}},
    {"\n\n", {10, 10}},
    {"\t\n", {9, 10}},
    {" \n ", {32, 297}},
    {"Hello world", {282, 259, 293}},
    {" Hello world", {32, 282, 259, 293}},
    {"Hello World", {282, 272, 293}},
    {" Hello World!", {32, 282, 272, 293, 33}},
    {"Hello, world!", {282, 44, 259, 293, 33}},
    {"  Hello", {32, 32, 282}},
    {"    Hello\n    Hello", {32, 32, 32, 32, 282, 297, 32, 32, 32, 282}},
    {"Once upon a time, there was a little girl named Lily.", {350, 32, 117, 112, 263, 273, 257,
         105, 109, 101, 44, 266, 295, 307, 273, 261, 116, 116, 108, 101, 300, 105, 271, 32, 110, 97,
         109, 258, 32, 345, 46}},
    {"She said: \"Don't go!\" and ran.", {351, 265, 97, 285, 58, 32, 34, 336, 313, 300, 111, 309,
         273, 270, 32, 114, 97, 110, 46}},
    {"it's they're we'll I'd you've IT'S", {269, 275, 266, 121, 312, 259, 101, 311, 32, 73, 39, 100,
         32, 121, 292, 314, 32, 73, 84, 39, 83}},
    {"123 4567 89012", {279, 51, 32, 52, 53, 54, 55, 32, 56, 57, 48, 279}},
    {"3.14159", {51, 46, 325}},
    {"!!!!!!", {274, 274, 274}},
    {"...", {317}},
    {"( [ { } ] )", {40, 32, 91, 32, 123, 32, 125, 32, 93, 32, 41}},
    {"a\tb\tc", {97, 9, 98, 9, 99}},
    {"na\u00EFve caf\u00E9", {110, 97, 195, 175, 296, 32, 99, 97, 102, 195, 169}},
    {"\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440", {208, 159, 209, 128, 208, 184, 208,
         178, 208, 181, 209, 130, 44, 32, 208, 188, 208, 184, 209, 128}},
    {"\u0E2A\u0E27\u0E31\u0E2A\u0E14\u0E35", {224, 184, 170, 224, 184, 167, 224, 184, 177, 224, 184,
         170, 224, 184, 148, 224, 184, 181}},
    {"\u6211\u60F3\u5728\u82F9\u679C\u5DE5\u4F5C", {230, 136, 145, 230, 131, 179, 229, 156, 168,
         232, 139, 185, 230, 158, 156, 229, 183, 165, 228, 189, 156}},
    {"\U0001F999 llamas \U0001F680", {240, 159, 166, 153, 32, 262, 97, 109, 283, 32, 240, 159, 154,
         128}},
    {"\U0001F469\u200D\U0001F469\u200D\U0001F467", {240, 159, 145, 169, 226, 128, 141, 240, 159,
         145, 169, 226, 128, 141, 240, 159, 145, 167}},
    {"e\u0301", {101, 204, 129}},
    {"UPPER lower MiXeD", {85, 80, 80, 69, 82, 32, 108, 111, 119, 101, 114, 32, 77, 105, 88, 101,
         68}},
    {"<s> </s> <unk>", {60, 115, 62, 32, 60, 47, 115, 62, 32, 60, 117, 110, 107, 62}},
    {"\u2581already escaped", {226, 150, 129, 97, 108, 295, 97, 100, 121, 299, 115, 99, 97, 112,
         258}},
    {"The dog's ball was red. He liked to play with it every day!", {84, 256, 303, 275, 32, 98, 97,
         262, 307, 32, 114, 258, 46, 32, 267, 304, 306, 302, 308, 32, 269, 299, 296, 114, 121, 264,
         268, 33}},
    {"line one\n\n  line two\t\n", {260, 289, 32, 263, 101, 10, 297, 305, 257, 119, 111, 9, 10}},
    {"HELLO, WORLD? 2024-05-17 12:30", {340, 44, 272, 348, 63, 32, 326, 45, 319, 45, 323, 298, 58,
         327}},
  };
  ExpectReferenceIds(*tok, vectors);
}

// Llama 3 splits digits in threes, and takes a word that is itself a token
// whole before merging.
TEST(BpeReferenceTest, Llama3MatchesGpt2sAlgorithm) {
  std::unique_ptr<Tokenizer> tok = ReferenceBpeTokenizer("llama3");
  ASSERT_NE(tok, nullptr);
  const std::vector<ReferenceVector> vectors = {
    {"", {}},
    {" ", {32}},
    {"  ", {32, 32}},
    {"   ", {32, 32, 32}},
    {"\t", {9}},
    {"\n", {10}},
    {"\n\n", {10, 10}},
    {"\t\n", {9, 10}},
    {" \n ", {32, 10, 32}},
    {"Hello world", {282, 259, 293}},
    {" Hello world", {32, 282, 259, 293}},
    {"Hello World", {282, 272, 293}},
    {" Hello World!", {32, 282, 272, 293, 33}},
    {"Hello, world!", {282, 44, 259, 293, 33}},
    {"  Hello", {32, 32, 282}},
    {"    Hello\n    Hello", {32, 32, 32, 32, 282, 10, 32, 32, 32, 32, 282}},
    {"Once upon a time, there was a little girl named Lily.", {350, 32, 117, 112, 263, 273, 257,
         105, 109, 101, 44, 266, 295, 307, 273, 261, 116, 116, 108, 101, 300, 105, 271, 32, 110, 97,
         109, 258, 32, 345, 46}},
    {"She said: \"Don't go!\" and ran.", {351, 265, 97, 285, 58, 32, 34, 336, 313, 300, 111, 309,
         273, 270, 32, 114, 97, 110, 46}},
    {"it's they're we'll I'd you've IT'S", {269, 275, 266, 121, 312, 259, 101, 311, 32, 73, 39, 100,
         32, 121, 292, 314, 32, 73, 84, 39, 83}},
    {"123 4567 89012", {279, 51, 32, 52, 53, 54, 55, 32, 56, 57, 48, 279}},
    {"3.14159", {51, 46, 321, 49, 53, 57}},
    {"!!!!!!", {274, 274, 274}},
    {"...", {317}},
    {"( [ { } ] )", {40, 32, 91, 32, 123, 32, 125, 32, 93, 32, 41}},
    {"a\tb\tc", {97, 9, 98, 9, 99}},
    {"na\u00EFve caf\u00E9", {110, 97, 195, 175, 296, 32, 99, 97, 102, 195, 169}},
    {"\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440", {208, 159, 209, 128, 208, 184, 208,
         178, 208, 181, 209, 130, 44, 32, 208, 188, 208, 184, 209, 128}},
    {"\u0E2A\u0E27\u0E31\u0E2A\u0E14\u0E35", {224, 184, 170, 224, 184, 167, 224, 184, 177, 224, 184,
         170, 224, 184, 148, 224, 184, 181}},
    {"\u6211\u60F3\u5728\u82F9\u679C\u5DE5\u4F5C", {230, 136, 145, 230, 131, 179, 229, 156, 168,
         232, 139, 185, 230, 158, 156, 229, 183, 165, 228, 189, 156}},
    {"\U0001F999 llamas \U0001F680", {240, 159, 166, 153, 32, 262, 97, 109, 283, 32, 240, 159, 154,
         128}},
    {"\U0001F469\u200D\U0001F469\u200D\U0001F467", {240, 159, 145, 169, 226, 128, 141, 240, 159,
         145, 169, 226, 128, 141, 240, 159, 145, 167}},
    {"e\u0301", {101, 204, 129}},
    {"UPPER lower MiXeD", {85, 80, 80, 69, 82, 32, 108, 111, 119, 101, 114, 32, 77, 105, 88, 101,
         68}},
    {"<s> </s> <unk>", {60, 115, 62, 32, 60, 47, 115, 62, 32, 60, 117, 110, 107, 62}},
    {"\u2581already escaped", {226, 150, 129, 97, 108, 295, 97, 100, 121, 299, 115, 99, 97, 112,
         258}},
    {"The dog's ball was red. He liked to play with it every day!", {84, 256, 303, 275, 32, 98, 97,
         262, 307, 32, 114, 258, 46, 32, 267, 304, 306, 302, 308, 32, 269, 299, 296, 114, 121, 264,
         268, 33}},
    {"line one\n\n  line two\t\n", {260, 289, 32, 263, 101, 10, 10, 32, 305, 257, 119, 111, 9, 10}},
    {"HELLO, WORLD? 2024-05-17 12:30", {340, 44, 272, 348, 63, 32, 50, 318, 52, 45, 319, 45, 323,
         32, 279, 58, 327}},
  };
  ExpectReferenceIds(*tok, vectors);
}

// Qwen2: Llama 3's pattern with digits one by one.
TEST(BpeReferenceTest, Qwen2MatchesGpt2sAlgorithm) {
  std::unique_ptr<Tokenizer> tok = ReferenceBpeTokenizer("qwen2");
  ASSERT_NE(tok, nullptr);
  const std::vector<ReferenceVector> vectors = {
    {"", {}},
    {" ", {32}},
    {"  ", {32, 32}},
    {"   ", {32, 32, 32}},
    {"\t", {9}},
    {"\n", {10}},
    {"\n\n", {10, 10}},
    {"\t\n", {9, 10}},
    {" \n ", {32, 10, 32}},
    {"Hello world", {282, 259, 293}},
    {" Hello world", {32, 282, 259, 293}},
    {"Hello World", {282, 272, 293}},
    {" Hello World!", {32, 282, 272, 293, 33}},
    {"Hello, world!", {282, 44, 259, 293, 33}},
    {"  Hello", {32, 32, 282}},
    {"    Hello\n    Hello", {32, 32, 32, 32, 282, 10, 32, 32, 32, 32, 282}},
    {"Once upon a time, there was a little girl named Lily.", {350, 32, 117, 112, 263, 273, 257,
         105, 109, 101, 44, 266, 295, 307, 273, 261, 116, 116, 108, 101, 300, 105, 271, 32, 110, 97,
         109, 258, 32, 345, 46}},
    {"She said: \"Don't go!\" and ran.", {351, 265, 97, 285, 58, 32, 34, 336, 313, 300, 111, 309,
         273, 270, 32, 114, 97, 110, 46}},
    {"it's they're we'll I'd you've IT'S", {269, 275, 266, 121, 312, 259, 101, 311, 32, 73, 39, 100,
         32, 121, 292, 314, 32, 73, 84, 39, 83}},
    {"123 4567 89012", {49, 50, 51, 32, 52, 53, 54, 55, 32, 56, 57, 48, 49, 50}},
    {"3.14159", {51, 46, 49, 52, 49, 53, 57}},
    {"!!!!!!", {274, 274, 274}},
    {"...", {317}},
    {"( [ { } ] )", {40, 32, 91, 32, 123, 32, 125, 32, 93, 32, 41}},
    {"a\tb\tc", {97, 9, 98, 9, 99}},
    {"na\u00EFve caf\u00E9", {110, 97, 195, 175, 296, 32, 99, 97, 102, 195, 169}},
    {"\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440", {208, 159, 209, 128, 208, 184, 208,
         178, 208, 181, 209, 130, 44, 32, 208, 188, 208, 184, 209, 128}},
    {"\u0E2A\u0E27\u0E31\u0E2A\u0E14\u0E35", {224, 184, 170, 224, 184, 167, 224, 184, 177, 224, 184,
         170, 224, 184, 148, 224, 184, 181}},
    {"\u6211\u60F3\u5728\u82F9\u679C\u5DE5\u4F5C", {230, 136, 145, 230, 131, 179, 229, 156, 168,
         232, 139, 185, 230, 158, 156, 229, 183, 165, 228, 189, 156}},
    {"\U0001F999 llamas \U0001F680", {240, 159, 166, 153, 32, 262, 97, 109, 283, 32, 240, 159, 154,
         128}},
    {"\U0001F469\u200D\U0001F469\u200D\U0001F467", {240, 159, 145, 169, 226, 128, 141, 240, 159,
         145, 169, 226, 128, 141, 240, 159, 145, 167}},
    {"e\u0301", {101, 204, 129}},
    {"UPPER lower MiXeD", {85, 80, 80, 69, 82, 32, 108, 111, 119, 101, 114, 32, 77, 105, 88, 101,
         68}},
    {"<s> </s> <unk>", {60, 115, 62, 32, 60, 47, 115, 62, 32, 60, 117, 110, 107, 62}},
    {"\u2581already escaped", {226, 150, 129, 97, 108, 295, 97, 100, 121, 299, 115, 99, 97, 112,
         258}},
    {"The dog's ball was red. He liked to play with it every day!", {84, 256, 303, 275, 32, 98, 97,
         262, 307, 32, 114, 258, 46, 32, 267, 304, 306, 302, 308, 32, 269, 299, 296, 114, 121, 264,
         268, 33}},
    {"line one\n\n  line two\t\n", {260, 289, 32, 263, 101, 10, 10, 32, 305, 257, 119, 111, 9, 10}},
    {"HELLO, WORLD? 2024-05-17 12:30", {340, 44, 272, 348, 63, 32, 50, 48, 50, 52, 45, 48, 53, 45,
         49, 55, 32, 49, 50, 58, 51, 48}},
  };
  ExpectReferenceIds(*tok, vectors);
}

}  // namespace
}  // namespace tandem::engine
