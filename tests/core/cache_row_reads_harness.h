#pragma once
// Test helpers for the engine's declaration that a call reads no cached row
// (core/engine/cache_row_reads.h), shared by the decode, prompt and position-only proofs:
//   * CacheRowPoison overwrites cached rows with NaN for the engine's turn and puts them back
//     afterwards (found by position: the engine may have moved or dropped them);
//   * CallTrace records the logits and the cache after each call of a run (a prompt, then greedy
//     decode steps), and expect_same_calls compares two runs call by call;
//   * key_reading_policy() is a policy whose indicators read the cached keys (rows), at the prompt
//     and while decoding, and HiddenDecodeReads a copy of a policy whose description hides its
//     decode reads: exactly the mistake the declaration must not make, for the controls;
//   * position_only_copy() is a cache holding the positions and row norms of another, no row (what
//     the CUDA decoder's host cache holds when every row lives on the device).
#include <algorithm>
#include <cstdint>
#include <span>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/decode/decoder.h"
#include "core/decode/kv_cache.h"
#include "core/decode/row_norms.h"
#include "core/engine/policy_program.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "window_attention_injection.h"

namespace kvevict::test {

class CacheRowPoison {
 public:
  // Poisons the rows of layers [first_layer, last_layer] whose position is >= min_position.
  void poison(KVCache& cache, int first_layer, int last_layer, int32_t min_position = 0) {
    const int d = cache.head_dim();
    const std::vector<float> nan(static_cast<size_t>(d), std::numeric_limits<float>::quiet_NaN());
    for (int l = first_layer; l <= last_layer; ++l)
      for (int h = 0; h < cache.n_stored_heads(); ++h)
        for (int t = 0; t < cache.length(l, h); ++t) {
          if (cache.positions(l, h)[t] < min_position) continue;
          Saved s{l, h, cache.positions(l, h)[t], std::vector<float>(static_cast<size_t>(d)),
                  std::vector<float>(static_cast<size_t>(d))};
          cache.reconstruct_keys(l, h, t, t + 1, s.key.data());
          cache.reconstruct_values(l, h, t, t + 1, s.value.data());
          saved_.push_back(std::move(s));
          cache.write_entry(l, h, t, nan.data(), nan.data());
        }
  }
  // Puts every poisoned row that is still in the cache back.
  void restore(KVCache& cache) {
    for (const Saved& s : saved_)
      for (int t = 0; t < cache.length(s.layer, s.head); ++t)
        if (cache.positions(s.layer, s.head)[t] == s.position)
          cache.write_entry(s.layer, s.head, t, s.key.data(), s.value.data());
    saved_.clear();
  }

 private:
  struct Saved {
    int layer, head;
    int32_t position;
    std::vector<float> key, value;
  };
  std::vector<Saved> saved_;
};

struct CallTrace {
  std::vector<CacheLayout> layouts;  // after each call: the prompt, then each decode step
  std::vector<std::vector<float>> logits;
  void record(const std::vector<float>& call_logits, const KVCache& cache) {
    logits.push_back(call_logits);
    layouts.push_back(cache_layout_of(cache));
  }
  // `steps` one-token calls, each feeding the argmax of the latest logits (recorded before).
  void decode_greedily(Decoder& decoder, ForwardObserver* observer, int steps) {
    for (int s = 0; s < steps; ++s) {
      const std::vector<float>& last = logits.back();
      const int next = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
      record(decoder.forward(std::span<const int>(&next, 1), observer), decoder.cache());
    }
  }
};

// The same caches and logits after every call.
inline void expect_same_calls(const CallTrace& a, const CallTrace& b, const std::string& what) {
  ASSERT_EQ(a.layouts.size(), b.layouts.size()) << what;
  for (size_t i = 0; i < a.layouts.size(); ++i) {
    EXPECT_EQ(a.layouts[i], b.layouts[i]) << what << ": cache after call " << i;
    EXPECT_EQ(a.logits[i], b.logits[i]) << what << ": logits of call " << i;
  }
}

// The policy file `text` (written to a temporary file named after `name`, removed once loaded).
inline std::unique_ptr<PolicyProgram> policy_from_text(const std::string& name, const std::string& text) {
  const std::string file = (std::filesystem::temp_directory_path() / ("kvevict_" + name + ".yaml")).string();
  std::ofstream(file) << text;
  auto policy = load_policy(file, {});
  std::filesystem::remove(file);
  return policy;
}

// The squared norms of the cached keys, summed from the keys themselves (rows, not the held norms),
// as the indicator at the prompt and while decoding, evicting every step.
inline std::unique_ptr<PolicyProgram> key_reading_policy() {
  return policy_from_text("key_reading_control",
                          "name: key_reading_control\nabout: squared key norms from the cached keys\n"
                          "protect: {recent: 4}\nrun:\n  prefill: true\n  decode_every: 1\n"
                          "score: |\n  score[t] = -sum(d: K[d, t] * K[d, t])\n");
}

// Random scores (keyed on each entry's original position) at the prompt and every `decode_every`
// decode steps, the cache's positions re-assigned after each eviction when `reassign`: scores that
// do not follow the cache order, so reading another head's positions, the slots, or the
// re-assigned positions instead of the original ones keeps other entries.
// Its text, for a test that loads it through another loader (a scoring backend's).
inline std::string random_decoding_policy_text(int decode_every, bool reassign) {
  return std::string("name: ") + (reassign ? "random_reassigned" : "random_decoding") +
         "\nabout: random scores while decoding\nrun:\n  prefill: true\n  decode_every: " +
         std::to_string(decode_every) + "\n  reassign_positions: " + (reassign ? "true" : "false") +
         "\nscore: |\n  score[t] = random[t]\n";
}
inline std::unique_ptr<PolicyProgram> random_decoding_policy(int decode_every, bool reassign) {
  return policy_from_text(reassign ? "random_reassigned" : "random_decoding",
                          random_decoding_policy_text(decode_every, reassign));
}

// A cache of `cache`'s geometry whose heads hold `cache`'s positions and, with `with_norms`, the norms of
// its rows (computed as the device computes them, row_norms.h), and no row.
inline KVCache position_only_copy(const KVCache& cache, const ModelConfig& config, bool with_norms = true) {
  KVCache rowless(config, cache.kv_type());
  std::vector<float> scratch, key_norms, value_norms;
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_stored_heads(); ++h) {
      const int T = cache.length(l, h), d = cache.head_dim();
      key_norms.resize(static_cast<size_t>(T));
      value_norms.resize(static_cast<size_t>(T));
      compute_row_norms(cache.keys_or_reconstruct(l, h, scratch), T, d, key_norms.data());
      compute_row_norms(cache.values_or_reconstruct(l, h, scratch), T, d, value_norms.data());
      for (int t = 0; t < T; ++t) {
        const RowNorms norms{key_norms[static_cast<size_t>(t)], value_norms[static_cast<size_t>(t)]};
        rowless.append_position(l, h, cache.positions(l, h)[t], with_norms ? &norms : nullptr);
      }
    }
  return rowless;
}

// The policy `file` (a built-in's path or name), or nullptr when it needs a setting or a model these
// tests do not give it (load_policy's UsageError).
inline std::unique_ptr<PolicyProgram> load_or_null(const std::string& file,
                                                   const std::map<std::string, std::string>& params = {}) {
  try {
    return load_policy(file, params);
  } catch (const UsageError&) {
    return nullptr;
  }
}

// Settings that let a built-in evict on these tests' short stories260K prompt (none for most):
// DuoAttention's and RLKV's streaming heads keep 128 sinks and 256 recent tokens by default, more
// than the prompt holds.
inline std::map<std::string, std::string> short_prompt_settings(const std::string& file) {
  const std::string stem = std::filesystem::path(file).stem().string();
  if (stem == "duo_attention" || stem == "rlkv") return {{"sinks", "4"}, {"recent", "16"}};
  return {};
}

// `p` with its decode reads hidden from the description (p must outlive it).
struct HiddenDecodeReads : PolicyProgram {
  explicit HiddenDecodeReads(const PolicyProgram& p) : p_(p), d_(p.description()) { d_.decode_reads = SignalSet{}; }
  int window_for(int prompt_len) const override { return p_.window_for(prompt_len); }
  PolicyProtect protect_for(int prompt_len) const override { return p_.protect_for(prompt_len); }
  const PolicyDescription& description() const override { return d_; }
  void score(const ScoreInputs& in, bool decoding, float* out) const override { p_.score(in, decoding, out); }
  double layer_weight(const LayerWeightInputs& in) const override { return p_.layer_weight(in); }
  const PolicyProgram& p_;
  PolicyDescription d_;
};

}  // namespace kvevict::test
