#pragma once
// Locating the real models the tests use, with checksum verification, and a helper for temporary
// files. Tests call these and GTEST_SKIP() with the returned reason when a model is absent.
// (Union of the decoder and gguf branches' versions.)
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/util/sha256.h"

namespace kvevict::test {

inline std::string shared_dir() { return KVEVICT_SHARED_DIR; }
inline std::string stories_dir() { return shared_dir() + "/models/stories260K"; }
inline std::string stories_checkpoint() { return stories_dir() + "/stories260K.bin"; }
inline std::string stories_tokenizer() { return stories_dir() + "/tok512.bin"; }
inline std::string stories_reference() { return stories_dir() + "/reference_greedy_256.json"; }

inline constexpr const char* kStoriesSha256 = "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696";
inline constexpr const char* kTok512Sha256 = "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312";
inline constexpr const char* kSmolLM2Sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

// Empty when stories260K is present; otherwise why it is not usable (missing file -> skip).
inline std::string stories_missing_reason() {
  for (const std::string& f : {stories_checkpoint(), stories_tokenizer(), stories_reference()}) {
    if (!std::filesystem::exists(f)) return "stories260K not found (" + f + "); the shared models folder is absent";
  }
  return "";
}

// ${KVEVICT_MODEL_DIR:-$HOME/.cache/kvevict/models}/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-smollm2.sh).
inline std::string smollm2_path() {
  std::string dir;
  if (const char* d = std::getenv("KVEVICT_MODEL_DIR"); d && *d) {
    dir = d;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/kvevict/models";
  }
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline bool smollm2_present() { return std::filesystem::is_regular_file(smollm2_path()); }

#define KVEVICT_SKIP_WITHOUT_SMOLLM2()                                                                       \
  do {                                                                                                       \
    if (!::kvevict::test::smollm2_present())                                                                 \
      GTEST_SKIP() << "SmolLM2 GGUF not found at " << ::kvevict::test::smollm2_path()                        \
                   << " (run scripts/fetch-smollm2.sh or set KVEVICT_MODEL_DIR)";                             \
  } while (0)

// A fresh path under the system temp folder, unique per process and name.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kvevict_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace kvevict::test
