// libFuzzer target: any byte string as a Hugging Face config.json. parse_hf_config must return a
// validated ModelConfig or throw a kvevict::Error.
#include <cstddef>
#include <cstdint>

#include "core/model/hf_config.h"
#include "core/util/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size);
  try {
    kvevict::ModelConfig c = kvevict::parse_hf_config(file.path());
    c.validate(file.path());
  } catch (const kvevict::Error&) {
  }
  return 0;
}
