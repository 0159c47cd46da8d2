// llama2.c tokenizer.bin: a vocabulary size the file cannot hold is refused with a ModelError
// naming the file, before anything is reserved for it (found by spm_tokenizer_bin_fuzzer's
// review: a negative size reserved SIZE_MAX entries, std::length_error; a huge one reserved
// 64 GB of strings).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/tokenizer/spm_tokenizer.h"
#include "core/util/error.h"
#include "safetensors_writer.h"

namespace kvevict {
namespace {

std::string tiny_tokenizer_bin() {  // max_len 4, then two tokens "a" and "bc"
  std::string b;
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  const int32_t max_len = 4;
  put(&max_len, 4);
  for (const std::string& text : {std::string("a"), std::string("bc")}) {
    const float score = 0.5f;
    const int32_t len = static_cast<int32_t>(text.size());
    put(&score, 4);
    put(&len, 4);
    put(text.data(), text.size());
  }
  return b;
}

TEST(FuzzRegressionTokenizerBin, ReadsAVocabularyTheFileHolds) {
  const auto path = test::fresh_dir("tokbin_ok") / "tokenizer.bin";
  test::write_bytes(path, tiny_tokenizer_bin());
  SpmVocab v = read_llama2c_tokenizer(path.string(), 2);
  ASSERT_EQ(v.pieces.size(), 2u);
  EXPECT_EQ(v.pieces[1], "bc");
}

TEST(FuzzRegressionTokenizerBin, RefusesVocabularySizesTheFileCannotHold) {
  const auto path = test::fresh_dir("tokbin_huge") / "tokenizer.bin";
  test::write_bytes(path, tiny_tokenizer_bin());
  for (int vocab_size : {-1, 0, 3, INT32_MAX}) {
    try {
      read_llama2c_tokenizer(path.string(), vocab_size);
      ADD_FAILURE() << "vocab_size " << vocab_size << " accepted";
    } catch (const ModelError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path.string(), 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvevict
