#pragma once
// Helpers of the GGUF tests: whether SmolLM2 is there, a skip macro, temporary file paths.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "test_models.h"

namespace kvevict::test {

// SmolLM2's location is test_models.h's smollm2_path() (scripts/fetch-smollm2.sh puts it there);
// smollm2_gguf_path() is the same, kept for the tests that already use it.
inline std::string smollm2_gguf_path() { return smollm2_path(); }
inline bool smollm2_gguf_present() { return std::filesystem::is_regular_file(smollm2_path()); }

#define KVEVICT_SKIP_WITHOUT_SMOLLM2()                                                  \
  do {                                                                                  \
    if (!::kvevict::test::smollm2_gguf_present())                                       \
      GTEST_SKIP() << "SmolLM2 GGUF not found at " << ::kvevict::test::smollm2_path()   \
                   << " (run scripts/fetch-smollm2.sh or set KVEVICT_MODEL_DIR)";        \
  } while (0)

// A fresh path under the system temp folder, unique per process and name.
inline std::string temp_file_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kvevict_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace kvevict::test
