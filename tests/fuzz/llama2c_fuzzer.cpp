// libFuzzer target: any byte string as a llama2.c checkpoint (stories260K's tokenizer beside it).
// load_llama2c must load it or throw a kvevict::Error.
#include <cstddef>
#include <cstdint>

#include "core/model/model.h"
#include "core/util/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size);
  try {
    auto model = kvevict::load_llama2c(file.path(), kvevict::fuzz::stories_dir() + "/tok512.bin");
    (void)model->tokenizer->encode("Once upon a time", true);
  } catch (const kvevict::Error&) {
  }
  return 0;
}
