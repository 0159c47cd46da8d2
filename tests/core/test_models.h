#pragma once
// Locating the real models the tests use, with checksum verification. Tests call these and
// GTEST_SKIP() with the returned reason when a model is absent.
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

inline std::string smollm2_path() {
  const char* dir = std::getenv("KVEVICT_MODEL_DIR");
  const char* home = std::getenv("HOME");
  const std::string base = dir ? dir : std::string(home ? home : "") + "/.cache/kvevict/models";
  return base + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace kvevict::test
