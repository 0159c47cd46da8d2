// libFuzzer target: any byte string as a llama2.c tokenizer.bin. The first 2 bytes choose the
// vocabulary size the checkpoint would declare; read_llama2c_tokenizer must read the rest or throw
// a kvevict::Error; a vocabulary that reads builds a tokenizer that encodes and decodes a text.
#include <cstddef>
#include <cstdint>

#include "core/tokenizer/spm_tokenizer.h"
#include "core/util/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int vocab_size = 1 + (data[0] | (data[1] << 8));
  kvevict::fuzz::MemFile file(data + 2, size - 2);
  try {
    kvevict::SpmVocab vocab = kvevict::read_llama2c_tokenizer(file.path(), vocab_size);
    auto tokenizer = kvevict::make_spm_tokenizer(std::move(vocab));
    auto ids = tokenizer->encode("Once upon a time, <s> a \xE2\x96\x81 \xff\xfe", true, true);
    (void)tokenizer->decode(ids);
  } catch (const kvevict::Error&) {
  }
  return 0;
}
