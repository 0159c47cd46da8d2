// KVzip's replay reads no cached row on the host (core/engine/replay_pass.h): its observer declares
// NoneGivenDecoderSignals for the replay's calls and reads only the replay attention the decoder
// hands it (ObservationRequest::replay_attention, replay_attention_block.h), and the prompt before
// them reads nothing (PromptCacheReadsTest pins kvzip among the None). On the CUDA decoder that is
// what lets the rows stay on the device through the whole prompt and its replay. Proof on the CPU
// with stories260K: a decoder wrapper hands the replay's observer a layer whose rows are all NaN
// (poisoned after the decoder made its signal, put back afterwards), the engine evicts after the
// replay on a cache whose rows are all NaN (Decoder::cache_for_keeps, poisoned likewise), and
//   * with the decoder's own replay attention (the host rule) the caches and logits after the
//     prompt are the plain run's, bit for bit;
//   * with the device algorithm's (replay_attention_twin over a copy of the layer, what the CUDA
//     decoder makes on its device) handed instead, the same kept sets (its scores agree with the
//     host rule's to the window attention twin's tolerance; kvzip's model-wide top-k on this prompt
//     has no tie that close);
//   * a planted replay attention (each head's maxima reversed) changes them: the observer reads it;
//     so does the host rule over the poisoned rows: the poison bites a reader of the rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/replay_attention_block.h"
#include "core/engine/block_prefill.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "cache_row_reads_harness.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

// Host: the decoder's own; Twin: the device algorithm's; Planted: each head reversed; FromPoisonedRows:
// the host rule over the poisoned layer, what an observer that read the rows itself would get (the
// control that the poison bites).
enum class Given { Host, Twin, Planted, FromPoisonedRows };

// Wraps the replay's observer: the replay attention the decoder made (or the twin's, or a planted
// one) handed over with the layer's rows poisoned, every replay call's declaration recorded.
class PoisonedReplay final : public ForwardObserver {
 public:
  PoisonedReplay(ForwardObserver& inner, Given given, int group) : inner_(inner), given_(given), group_(group) {}

  ObservationRequest request() const override {
    ObservationRequest r = inner_.request();
    if (given_ == Given::Twin || given_ == Given::FromPoisonedRows) r.window = 1 << 20;  // the block's queries
    return r;
  }

  void after_layer(const LayerSignals& s, KVCache& cache) override {
    const ObservationRequest asked = inner_.request();
    declared_none = declared_none && asked.cache_row_reads.for_call(s.first_position, s.n_tokens) ==
                                         CacheRowReads::NoneGivenDecoderSignals;
    if (!s.replay_attention) throw std::logic_error("the decoder handed no replay attention");
    BlockReplayAttention handed = *s.replay_attention;
    if (given_ == Given::Twin) handed = twin_of(s, cache, asked.replay_attention);
    if (given_ == Given::Planted)
      for (int h = 0; h < handed.n_heads; ++h) {
        float* head = handed.values.data() + static_cast<size_t>(h) * handed.length;
        std::reverse(head, head + handed.length);
      }
    LayerSignals signals = s;
    signals.replay_attention = &handed;
    signals.window_queries = {};
    signals.window = 0;
    test::CacheRowPoison poison;
    poison.poison(cache, s.layer, s.layer);
    if (given_ == Given::FromPoisonedRows)
      handed = block_replay_attention(asked.replay_attention, s.window_queries.data(), s.n_tokens, {}, cache, s.layer,
                                      handed.n_heads);
    inner_.after_layer(signals, cache);
    poison.restore(cache);
  }

  void after_forward(int n, KVCache& cache) override { inner_.after_forward(n, cache); }

  bool declared_none = true;

 private:
  // The device algorithm over a copy of the layer as the block's append left it.
  BlockReplayAttention twin_of(const LayerSignals& s, const KVCache& cache, const ReplayAttentionRequest& r) const {
    DeviceKvTwin twin(test::twin_geometry_of(cache));
    const int d = cache.head_dim();
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const int len = cache.length(s.layer, h);
      std::vector<float> keys(static_cast<size_t>(len) * d), values(keys.size());
      cache.reconstruct_keys(s.layer, h, 0, len, keys.data());
      cache.reconstruct_values(s.layer, h, 0, len, values.data());
      twin.write_rows(s.layer, h, 0, len, keys.data(), values.data(), cache.positions(s.layer, h));
    }
    if (s.window != s.n_tokens) throw std::logic_error("the twin needs every replay query");
    const std::vector<double> f = replay_row_factors(r, s.hidden_states.data(), s.hidden_states.size(), s.n_tokens);
    const std::vector<float> factors(f.begin(), f.end());
    return replay_attention_twin(twin.layer_view(s.layer), group_, s.window_queries.data(), s.n_tokens, r,
                                 factors.empty() ? nullptr : factors.data());
  }

  ForwardObserver& inner_;
  Given given_;
  int group_;
};

// A CPU decoder whose replay calls (an observer asking replay_attention) go through PoisonedReplay,
// and whose cache for keeps (where the engine evicts after the replay, finish_replay) holds poisoned
// rows until the cache is next asked for or a call comes.
class ReplayRowGuard final : public Decoder {
 public:
  ReplayRowGuard(const Model& model, Given given)
      : inner_(make_cpu_decoder(model, {.threads = 1})), given_(given), group_(model.config.group_size()) {}
  ~ReplayRowGuard() override { unpoison(); }
  const std::vector<float>& forward(std::span<const int> tokens, ForwardObserver* observer,
                                    std::vector<float>* all_logits) override {
    unpoison();
    if (!observer || !observer->request().replay_attention.enabled()) return inner_->forward(tokens, observer, all_logits);
    PoisonedReplay guard(*observer, given_, group_);
    const std::vector<float>& logits = inner_->forward(tokens, &guard, all_logits);
    ++replay_calls;
    all_declared_none = all_declared_none && guard.declared_none;
    return logits;
  }
  KVCache& cache() override {
    unpoison();
    return inner_->cache();
  }
  KVCache& cache_for_keeps() override {
    unpoison();
    KVCache& cache = inner_->cache();
    keeps_poison_.poison(cache, 0, cache.n_layers() - 1);
    poisoned_ = true;
    ++keeps_asked;
    return cache;
  }
  int position() const override { return inner_->position(); }
  void set_position(int position) override { inner_->set_position(position); }
  void reset() override { inner_->reset(); }
  std::unique_ptr<DecoderSnapshot> snapshot() const override { return inner_->snapshot(); }
  void restore(const DecoderSnapshot& snapshot) override { inner_->restore(snapshot); }
  std::string device_name() const override { return "cpu (replay rows poisoned)"; }
  const Model& model() const override { return inner_->model(); }

  int replay_calls = 0, keeps_asked = 0;
  bool all_declared_none = true;

 private:
  void unpoison() {
    if (poisoned_) keeps_poison_.restore(inner_->cache());
    poisoned_ = false;
  }
  test::CacheRowPoison keeps_poison_;
  bool poisoned_ = false;
  std::unique_ptr<Decoder> inner_;
  Given given_;
  int group_;
};

class ReplayAttentionEngineTest : public test::StoriesPromptTest {
 protected:
  struct Run {
    test::CacheLayout layout;
    std::vector<float> logits;
    int replay_calls = 0, keeps_asked = 0;
    bool declared_none = true;
  };
  static Run run(const std::map<std::string, std::string>& params, int budget, std::optional<Given> given) {
    return run(*load_policy("kvzip", params), budget, given);
  }
  static Run run(const PolicyProgram& policy, int budget, std::optional<Given> given) {
    std::unique_ptr<Decoder> decoder =
        given ? std::make_unique<ReplayRowGuard>(*model_, *given) : make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(policy, model_->config, {Budget::parse(std::to_string(budget)), 0});
    Run r;
    r.logits = prefill_prompt(*decoder, tokens_, &engine, &engine);
    r.layout = test::cache_layout_of(decoder->cache());
    if (auto* guard = dynamic_cast<ReplayRowGuard*>(decoder.get())) {
      r.replay_calls = guard->replay_calls;
      r.keeps_asked = guard->keeps_asked;
      r.declared_none = guard->all_declared_none;
    }
    return r;
  }
};

TEST_F(ReplayAttentionEngineTest, TheReplayReadsOnlyTheDecodersReplayAttention) {
  using Params = std::map<std::string, std::string>;
  for (const Params& params : {Params{}, Params{{"chunk", "48"}}, Params{{"chunk", "40"}, {"n_sink", "2"}, {"scope", "layer"}}}) {
    const std::string what = "kvzip" + (params.empty() ? std::string() : " chunk " + params.at("chunk"));
    for (int budget : {S() / 4, S() / 2}) {
      const Run plain = run(params, budget, std::nullopt);
      const Run host = run(params, budget, Given::Host);
      EXPECT_GT(host.replay_calls, 0) << what;
      EXPECT_EQ(host.keeps_asked, 1) << what << ": the eviction after the replay";
      EXPECT_TRUE(host.declared_none) << what << ": the replay's calls declared row reads";
      EXPECT_EQ(host.layout, plain.layout) << what << " " << budget << ": poisoned rows changed the kept sets";
      EXPECT_EQ(host.logits, plain.logits) << what << " " << budget;
      const Run twin = run(params, budget, Given::Twin);
      EXPECT_EQ(twin.layout, plain.layout) << what << " " << budget << ": the device algorithm's replay attention";
      EXPECT_EQ(twin.logits, plain.logits) << what << " " << budget;
      const Run planted = run(params, budget, Given::Planted);
      EXPECT_NE(planted.layout, plain.layout) << what << " " << budget << ": a planted replay attention went unread";
      EXPECT_NE(run(params, budget, Given::FromPoisonedRows).layout, plain.layout)
          << what << " " << budget << ": the poison went unnoticed by a reader of the rows";
    }
  }
}

// The control for the eviction after the replay: KVzip+ multiplies in out_norm, which the engine
// reads from the cached values then (its prompt declares Reads: the rows stay on the host), so the
// poisoned cache for keeps changes what it keeps; its replay calls still read no row.
TEST_F(ReplayAttentionEngineTest, AReaderOfRowsAfterTheReplayMeetsThePoison) {
  const auto plus = test::policy_from_text(
      "kvzip_plus", "name: kvzip_plus\nabout: KVzip+\nobserve:\n  replay: {chunk: 64, normalise: true}\n"
                    "select: {scope: model}\nscore: |\n  score[t] = max(h: A_replay[h, t] * out_norm[h, t])\n");
  ASSERT_EQ(prompt_cache_row_reads(plus->description()), CacheRowReads::Reads);
  const Run plain = run(*plus, S() / 4, std::nullopt);
  const Run guarded = run(*plus, S() / 4, Given::Host);
  EXPECT_TRUE(guarded.declared_none);
  EXPECT_EQ(guarded.keeps_asked, 1);
  EXPECT_NE(guarded.layout, plain.layout) << "out_norm read from poisoned values went unnoticed";
}

}  // namespace
}  // namespace kvevict
