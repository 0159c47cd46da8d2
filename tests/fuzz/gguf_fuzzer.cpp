// libFuzzer target: any byte string as a GGUF file. GgufFile must parse it or throw a
// kvevict::Error; a file that parses is walked (every metadata value and tensor, typed getters),
// its tokenizer built and used, and the whole loader (load_gguf: geometry, weights, tokenizer) run.
#include <cstddef>
#include <cstdint>

#include "core/model/gguf_reader.h"
#include "core/model/gguf_tokenizer.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "fuzz_file.h"

namespace {

volatile uint64_t sink;

void walk(const kvevict::GgufFile& file) {
  for (const auto& [key, value] : file.metadata()) {
    if (value.is_array() && value.element_type != kvevict::GgufValueType::STRING &&
        value.element_type != kvevict::GgufValueType::ARRAY) {
      const bool is_float = value.element_type == kvevict::GgufValueType::F32 || value.element_type == kvevict::GgufValueType::F64;
      for (uint64_t i = 0; i < value.count; ++i) sink += is_float ? static_cast<uint64_t>(value.float_at(i) != 0) : value.int_at(i);
    }
    try {
      (void)file.opt_string(key);
    } catch (const kvevict::Error&) {
    }
  }
  for (const auto& tensor : file.tensors()) {
    const uint8_t* p = file.tensor_data(tensor);
    if (tensor.n_bytes > 0) sink += p[0] + p[tensor.n_bytes - 1];  // ASan checks both ends are mapped
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size);
  try {
    kvevict::GgufFile gguf(file.path());
    walk(gguf);
    try {
      auto tokenizer = kvevict::tokenizer_from_gguf(gguf);
      auto ids = tokenizer->encode("Hello world, 123 <|im_start|> \xE2\x96\x81 \xff", true, true);
      (void)tokenizer->decode(ids);
    } catch (const kvevict::Error&) {
    }
    (void)kvevict::load_gguf(file.path());
  } catch (const kvevict::Error&) {
  }
  return 0;
}
