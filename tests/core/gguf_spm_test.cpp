// A tiny llama GGUF with a SentencePiece-style ("llama") vocabulary: the loader turns the
// metadata (U+2581 spaces, scores, byte pieces, special ids) into a working tokenizer.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/model/model.h"
#include "gguf_test_util.h"
#include "gguf_writer.h"

namespace kvevict {
namespace {

TEST(GgufSpmTokenizer, LoadsFromMetadata) {
  test::TinyLlama spec;
  spec.spm_tokenizer = true;
  const std::string path = test::temp_file_path("spm.gguf");
  spec.writer().write(path);
  const auto m = load_gguf(path);
  std::filesystem::remove(path);
  const Tokenizer& tok = *m->tokenizer;
  EXPECT_EQ(tok.kind(), "spm");
  EXPECT_EQ(m->config.vocab_size, spec.vocab());
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  const int hello = *tok.token_id(" hello"), world = *tok.token_id(" world");
  EXPECT_EQ(hello, 3 + 256 + 12);  // the piece "▁hello" is stored with U+2581 and read as " hello"
  EXPECT_EQ(tok.encode("hello world", true), (std::vector<int>{1, hello, world}));
  EXPECT_EQ(tok.decode(tok.encode("hello world", true)), "hello world");
  // Characters without a piece fall back to byte pieces <0xNN> (id 3 + byte).
  const std::vector<int> ids = tok.encode("hé", false);
  EXPECT_EQ(tok.decode(ids), "hé");  // the dummy-prefix space is dropped at the start
  EXPECT_NE(std::find(ids.begin(), ids.end(), 3 + 0xC3), ids.end());
}

}  // namespace
}  // namespace kvevict
