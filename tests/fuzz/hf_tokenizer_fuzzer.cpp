// libFuzzer target: any byte string as a tokenizer.json (byte-level BPE or SentencePiece-style).
// load_hf_tokenizer must build a tokenizer or throw a kvevict::Error; a tokenizer that builds
// encodes and decodes a fixed text (special tokens parsed and not).
#include <cstddef>
#include <cstdint>

#include "core/tokenizer/hf_tokenizer.h"
#include "core/util/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size);
  kvevict::HfTokenizerFiles files;
  files.tokenizer_json = file.path();
  try {
    auto tokenizer = kvevict::load_hf_tokenizer(files);
    for (bool special : {false, true}) {
      auto ids = tokenizer->encode("Hello world 12345 <|im_start|>user\n\xE2\x96\x81x\xc3\xa9\xff", true, special);
      (void)tokenizer->decode(ids);
    }
    (void)tokenizer->decode({-1, 0, tokenizer->vocab_size() - 1, tokenizer->vocab_size(), 1 << 30});
  } catch (const kvevict::Error&) {
  }
  return 0;
}
