// libFuzzer target: any byte string as an eval config (YAML). parse_eval_config must resolve it
// or throw a kvevict::Error (UsageError listing the problems); never crash, hang or run work.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/util/error.h"
#include "evals/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)kvevict::evals::parse_eval_config(text, "fuzz.yaml");
  } catch (const kvevict::Error&) {
  }
  return 0;
}
