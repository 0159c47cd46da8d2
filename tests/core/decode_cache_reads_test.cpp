// The engine's declaration that a one-token decode step reads no cached key or value
// (ObservationRequest::decode_step_reads_cache_rows, core/engine/decode_cache_reads.h), which lets
// the CUDA decoder hand it a host cache whose decoded rows are placeholders. Proof on the CPU: for
// every built-in policy that evicts while decoding and declares it (H2O's column sums), a run whose observer sees
// every decoded row poisoned (NaN keys and values, restored after the engine's turn) keeps the
// same caches and logits as the plain run. Control: a policy that reads key norms while decoding
// declares that it reads rows, and poisoning its rows changes what it keeps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/engine/decode_cache_reads.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

// Hands the engine a host cache whose rows of decoded tokens (position >= the prompt's length)
// hold NaN during its turn in the calls where it declared it reads no cached row, and puts the
// rows back afterwards (found by position: the engine may have moved or dropped them).
class PoisonDecodedRows : public ForwardObserver {
 public:
  PoisonDecodedRows(EvictionEngine& engine, int prompt_len) : engine_(engine), prompt_len_(prompt_len) {}
  ObservationRequest request() const override {
    const ObservationRequest r = engine_.request();
    poison_ = !r.decode_step_reads_cache_rows;
    return r;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override {
    const bool poison = poison_ && signals.n_tokens == 1 && signals.first_position > 0;
    if (poison) poisoned_calls += save_and_poison(cache, signals.layer, signals.layer);
    engine_.after_layer(signals, cache);
    if (poison) restore(cache);
  }
  void after_forward(int n_tokens, KVCache& cache) override {
    const bool poison = poison_ && n_tokens == 1;
    if (poison) save_and_poison(cache, 0, cache.n_layers() - 1);
    engine_.after_forward(n_tokens, cache);
    if (poison) restore(cache);
  }
  int64_t poisoned_calls = 0;

 private:
  struct Saved {
    int layer, head;
    int32_t position;
    std::vector<float> key, value;
  };
  int save_and_poison(KVCache& cache, int first_layer, int last_layer) {
    const int d = cache.head_dim();
    const std::vector<float> nan(static_cast<size_t>(d), std::numeric_limits<float>::quiet_NaN());
    for (int l = first_layer; l <= last_layer; ++l)
      for (int h = 0; h < cache.n_stored_heads(); ++h)
        for (int t = 0; t < cache.length(l, h); ++t) {
          if (cache.positions(l, h)[t] < prompt_len_) continue;
          Saved s{l, h, cache.positions(l, h)[t], std::vector<float>(static_cast<size_t>(d)), std::vector<float>(static_cast<size_t>(d))};
          cache.reconstruct_keys(l, h, t, t + 1, s.key.data());
          cache.reconstruct_values(l, h, t, t + 1, s.value.data());
          saved_.push_back(std::move(s));
          cache.write_entry(l, h, t, nan.data(), nan.data());
        }
    return 1;
  }
  void restore(KVCache& cache) {
    for (const Saved& s : saved_)
      for (int t = 0; t < cache.length(s.layer, s.head); ++t)
        if (cache.positions(s.layer, s.head)[t] == s.position) cache.write_entry(s.layer, s.head, t, s.key.data(), s.value.data());
    saved_.clear();
  }

  EvictionEngine& engine_;
  const int prompt_len_;
  mutable bool poison_ = false;
  std::vector<Saved> saved_;
};

struct DecodeRun {
  std::vector<test::CacheLayout> layouts;
  std::vector<std::vector<float>> logits;
  int64_t poisoned_calls = 0;
  // Decode calls after which some head holds fewer entries than before plus the new one: the
  // engine evicted while decoding (so the comparison is not vacuous).
  int decode_evictions() const {
    int n = 0;
    for (size_t i = 1; i < layouts.size(); ++i) {
      bool evicted = false;
      for (size_t l = 0; l < layouts[i].size(); ++l)
        for (size_t h = 0; h < layouts[i][l].size(); ++h)
          evicted = evicted || layouts[i][l][h].size() < layouts[i - 1][l][h].size() + 1;
      n += evicted;
    }
    return n;
  }
};

class DecodeCacheReadsTest : public test::StoriesPromptTest {
 protected:
  static DecodeRun run(const PolicyProgram& policy, bool poison, int steps = 12) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(policy, model_->config, {Budget::parse("40"), 3});
    PoisonDecodedRows poisoned(engine, S());
    ForwardObserver* observer = poison ? static_cast<ForwardObserver*>(&poisoned) : &engine;
    DecodeRun r;
    auto step = [&](std::span<const int> block) {
      r.logits.push_back(decoder->forward(block, observer));
      r.layouts.push_back(test::cache_layout_of(decoder->cache()));
    };
    step(tokens_);
    for (int s = 0; s < steps; ++s) {
      const auto& last = r.logits.back();
      const int next = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
      step(std::span<const int>(&next, 1));
    }
    r.poisoned_calls = poisoned.poisoned_calls;
    return r;
  }
  static void expect_same(const DecodeRun& a, const DecodeRun& b, const std::string& what) {
    ASSERT_EQ(a.layouts.size(), b.layouts.size());
    for (size_t i = 0; i < a.layouts.size(); ++i) {
      EXPECT_EQ(a.layouts[i], b.layouts[i]) << what << ": cache after call " << i;
      EXPECT_EQ(a.logits[i], b.logits[i]) << what << ": logits of call " << i;
    }
  }
};

std::vector<std::string> builtin_policy_files() {
  std::vector<std::string> files;
  for (const std::string& dir : builtin_policy_dirs())
    for (const auto& item : std::filesystem::directory_iterator(dir))
      if (item.path().extension() == ".yaml") files.push_back(item.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// Every built-in policy that evicts while decoding and declares it reads no cached row keeps the
// plain run's caches and logits with its decoded rows poisoned. CAKE and H2O are among them.
TEST_F(DecodeCacheReadsTest, PoliciesThatDeclareNoRowReadsIgnorePoisonedRows) {
  std::vector<std::string> checked;
  for (const std::string& file : builtin_policy_files()) {
    std::unique_ptr<PolicyProgram> policy;
    try {
      policy = load_policy(file, {});
    } catch (const UsageError&) {
      continue;  // a policy that needs a setting or a model this test does not give it
    }
    const PolicyDescription& d = policy->description();
    if (d.run.decode_every <= 0 || decode_step_reads_cache_rows(d)) continue;
    DecodeRun plain, poisoned;
    try {
      plain = run(*policy, false);
    } catch (const UsageError&) {
      continue;  // refused on this model and budget
    }
    poisoned = run(*policy, true);
    EXPECT_GT(poisoned.poisoned_calls, 0) << file;
    EXPECT_GT(plain.decode_evictions(), 0) << file << " never evicted while decoding";
    expect_same(plain, poisoned, file);
    checked.push_back(std::filesystem::path(file).stem().string());
  }
  std::string names;
  for (const std::string& n : checked) names += n + " ";
  RecordProperty("checked", names);
  std::printf("policies checked with poisoned rows: %s\n", names.c_str());
  const auto has = [&](const char* name) { return std::find(checked.begin(), checked.end(), name) != checked.end(); };
  EXPECT_TRUE(has("h2o")) << "H2O's decode indicator reads the decoder's column sums, no cached row";
  EXPECT_FALSE(has("cake")) << "CAKE's A_now is computed on the host from the cached keys";
  EXPECT_FALSE(has("tova"));
}

// Controls: a decode indicator over key norms, and TOVA's over A_now (computed on the host from the
// cached keys), read cached rows: they say so, and poisoning the rows (as if a decoder had left
// placeholders) changes what they keep.
TEST_F(DecodeCacheReadsTest, ControlARowReaderDeclaresItAndPoisonChangesItsCache) {
  const std::string file = (std::filesystem::temp_directory_path() / "kvevict_decode_reads_control.yaml").string();
  std::ofstream(file) << "name: decode_key_norms\nabout: H2O's prefill, key norms while decoding\n"
                         "protect: {recent: 4}\nrun:\n  prefill: true\n  decode_every: 1\n"
                         "score: |\n  score[t] = sum(h: A_acc[h, t])\n"
                         "decode_score: |\n  score[t] = -key_norm[t]\n";
  const auto policy = load_policy(file, {});
  std::filesystem::remove(file);
  EXPECT_TRUE(decode_step_reads_cache_rows(policy->description()));
  // The harness poisons only when the engine declares no reads: force it through a copy of the
  // description that hides key_norm, which is exactly the mistake the declaration must not make.
  struct Hide : PolicyProgram {
    explicit Hide(const PolicyProgram& p) : p_(p), d_(p.description()) { d_.decode_reads = SignalSet{}; }
    int window_for(int prompt_len) const override { return p_.window_for(prompt_len); }
    PolicyProtect protect_for(int prompt_len) const override { return p_.protect_for(prompt_len); }
    const PolicyDescription& description() const override { return d_; }
    void score(const ScoreInputs& in, bool decoding, float* out) const override { p_.score(in, decoding, out); }
    double layer_weight(const LayerWeightInputs& in) const override { return p_.layer_weight(in); }
    const PolicyProgram& p_;
    PolicyDescription d_;
  } hidden(*policy);
  ASSERT_FALSE(decode_step_reads_cache_rows(hidden.description()));
  const DecodeRun plain = run(hidden, false), poisoned = run(hidden, true);
  EXPECT_GT(poisoned.poisoned_calls, 0);
  EXPECT_NE(plain.layouts.back(), poisoned.layouts.back()) << "the poisoned key norms were not read";
  const auto tova = load_policy("tova", {});
  EXPECT_TRUE(decode_step_reads_cache_rows(tova->description()));
  const Hide tova_hidden(*tova);
  const DecodeRun tova_plain = run(tova_hidden, false), tova_poisoned = run(tova_hidden, true);
  EXPECT_NE(tova_plain.layouts.back(), tova_poisoned.layouts.back()) << "TOVA's A_now did not read the poisoned keys";
}

TEST(DecodeCacheReads, SourcesAndFeaturesThatReadRows) {
  EXPECT_TRUE(signal_source_reads_cache_rows(SignalSource::LatestQuery));
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::ColumnSums));
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::Positions));
  EXPECT_TRUE(signal_source_reads_cache_rows(SignalSource::CachedKeys));
  EXPECT_TRUE(signal_source_reads_cache_rows(SignalSource::WindowQueries));
  PolicyDescription d;  // hand-made: decode_reads unknown, decode window attention assumed
  EXPECT_TRUE(decode_step_reads_cache_rows(d));
  d.decode_reads_known = true;
  d.run.decode_uses_window_attention = false;
  d.decode_reads[signal_index(TensorSignal::AccumulatedAttention)] = true;
  EXPECT_FALSE(decode_step_reads_cache_rows(d));
  PolicyDescription merged = d;
  merged.merge.enabled = true;
  EXPECT_TRUE(decode_step_reads_cache_rows(merged));
  PolicyDescription reassigned = d;
  reassigned.run.reassign_positions = true;
  EXPECT_TRUE(decode_step_reads_cache_rows(reassigned));
  d.decode_reads[signal_index(TensorSignal::Values)] = true;
  EXPECT_TRUE(decode_step_reads_cache_rows(d));
}

}  // namespace
}  // namespace kvevict
