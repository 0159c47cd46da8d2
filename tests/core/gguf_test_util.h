#pragma once
// Helpers of the GGUF tests: where SmolLM2 is, a skip macro, temporary file paths.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace kvevict::test {

// ${KVEVICT_MODEL_DIR:-$HOME/.cache/kvevict/models}/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-smollm2.sh).
inline std::string smollm2_gguf_path() {
  std::string dir;
  if (const char* d = std::getenv("KVEVICT_MODEL_DIR"); d && *d) dir = d;
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/kvevict/models";
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline bool smollm2_gguf_present() { return std::filesystem::is_regular_file(smollm2_gguf_path()); }

#define KVEVICT_SKIP_WITHOUT_SMOLLM2()                                                                       \
  do {                                                                                                       \
    if (!::kvevict::test::smollm2_gguf_present())                                                                 \
      GTEST_SKIP() << "SmolLM2 GGUF not found at " << ::kvevict::test::smollm2_gguf_path()                        \
                   << " (run scripts/fetch-smollm2.sh or set KVEVICT_MODEL_DIR)";                             \
  } while (0)

// A fresh path under the system temp folder, unique per process and name.
inline std::string temp_file_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kvevict_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace kvevict::test
