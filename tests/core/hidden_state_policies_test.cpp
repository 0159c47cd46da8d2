// The hidden-state signal hidden[c, t] (core/engine/signals.h: the layer's attention input, after its
// input RMSNorm, over the model axis c) and the policy that reads it, policies/field/kvzap.yaml
// (KVzap linear inside DMSPress), on stories260K:
//   - the decoder hands over, and the engine gives a score program, exactly the attention inputs of
//     an independent double forward pass (tests/core/reference_forward.h), through evictions and
//     decode steps;
//   - kvzap.yaml with its shipped EXAMPLE tables keeps exactly the tokens of the double reference
//     (reference_hidden_state_policies.cpp: the tables read by its own parser, the linear scorer
//     from kvpress's formula, the DMSPress rule of reference_selection_policies.cpp), at prefill
//     (hidden states from the reference forward) and while decoding (from the decoder's recorded
//     hidden states, the engine's own values never used).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "core/engine/engine.h"
#include "core/engine/model_signals.h"
#include "core/util/error.h"
#include "decode_spy.h"
#include "dsl/policy_loader.h"
#include "hand_policies.h"
#include "policy_run_checks.h"
#include "reference_forward.h"
#include "reference_hidden_state_policies.h"
#include "reference_selection_policies.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

std::string table_path(const std::string& name) {
  return std::string(KVEVICT_TEST_SOURCE_DIR) + "/../policies/field/tables/" + name + ".example.tsv";
}

std::string number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// Records each layer's attention inputs as the decoder hands them over (LayerSignals::hidden_states),
// by original position, then passes everything on to the spy (and through it to the engine).
class HiddenTap : public ForwardObserver {
 public:
  HiddenTap(test::DecodeSpy& inner, const ModelConfig& c) : inner_(inner), c_(c), states_(c.n_layers) {}
  ObservationRequest request() const override { return inner_.request(); }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    EXPECT_EQ(s.hidden_states.size(), static_cast<size_t>(s.n_tokens) * c_.dim) << "layer " << s.layer;
    auto& rows = states_[s.layer];
    if (static_cast<int>(rows.size()) < s.first_position + s.n_tokens) rows.resize(s.first_position + s.n_tokens);
    for (int i = 0; i < s.n_tokens && s.hidden_states.size() == static_cast<size_t>(s.n_tokens) * c_.dim; ++i)
      rows[s.first_position + i].assign(s.hidden_states.begin() + static_cast<size_t>(i) * c_.dim,
                                        s.hidden_states.begin() + static_cast<size_t>(i + 1) * c_.dim);
    inner_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { inner_.after_forward(n, cache); }
  // [position][dim] of `layer`, in double.
  std::vector<double> state(int layer, int position) const {
    const auto& r = states_.at(layer).at(position);
    return std::vector<double>(r.begin(), r.end());
  }

 private:
  test::DecodeSpy& inner_;
  const ModelConfig& c_;
  std::vector<std::vector<std::vector<float>>> states_;  // [layer][position][dim]
};

class HiddenStatePolicies : public test::StoriesPromptTest {
 protected:
  static void SetUpTestSuite() {
    if (!load()) return;
    ref_ = new test::ReferenceResult(test::reference_forward(*model_, tokens_));
    weight_ = reference::read_table_numbers(table_path("kvzap_weight"));
    bias_ = reference::read_table_numbers(table_path("kvzap_bias"));
  }
  static void TearDownTestSuite() {
    delete ref_;
    ref_ = nullptr;
    unload();
  }
  static const ModelConfig& config() { return model_->config; }

  // KVzap's score of the prompt token at `position`, from the reference forward's attention input.
  static double prompt_score(int layer, int kv_head, int position) {
    return reference::kvzap_linear_score(weight_, bias_, config().n_kv_heads, config().dim, layer, kv_head,
                                         ref_->attention_inputs[layer][position]);
  }
  // A threshold between two neighbouring scores of the prompt tokens that leave a `window` (the
  // fraction q of them below), and the gap to the nearest score.
  static double threshold_between(int window, double q, double& margin) {
    std::vector<double> s;
    for (int l = 0; l < config().n_layers; ++l)
      for (int h = 0; h < config().n_kv_heads; ++h)
        for (int t = 0; t + window < S(); ++t) s.push_back(prompt_score(l, h, t));
    std::sort(s.begin(), s.end());
    size_t i = std::min(s.size() - 1, static_cast<size_t>(q * s.size()));
    while (i + 1 < s.size() && s[i + 1] - s[i] < 1e-3) ++i;  // a clear gap: float and double agree
    margin = (s[i + 1] - s[i]) / 2;
    return (s[i] + s[i + 1]) / 2;
  }

  static inline test::ReferenceResult* ref_ = nullptr;
  static inline std::vector<double> weight_, bias_;
};

// |got - want| within float noise of a five-layer forward pass.
void expect_near(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 2e-4 * (1 + std::abs(want))) << what;
}

TEST_F(HiddenStatePolicies, TheExampleTablesHaveTheModelsShape) {
  EXPECT_EQ(weight_.size(), static_cast<size_t>(config().n_layers) * config().n_kv_heads * config().dim);
  EXPECT_EQ(bias_.size(), static_cast<size_t>(config().n_layers) * config().n_kv_heads);
}

// The file's default threshold splits the example scorer's scores of the prompt (its `doc` says
// about half are kept).
TEST_F(HiddenStatePolicies, TheDefaultThresholdSplitsTheExampleScores) {
  int above = 0, all = 0;
  for (int l = 0; l < config().n_layers; ++l)
    for (int h = 0; h < config().n_kv_heads; ++h)
      for (int t = 0; t < S(); ++t) above += prompt_score(l, h, t) >= -1.5, ++all;
  EXPECT_GT(above, all / 4) << above << " of " << all;
  EXPECT_LT(above, 3 * all / 4) << above << " of " << all;
  const auto policy = load_policy("kvzap", {});
  EXPECT_EQ(policy->description().params.at("threshold"), "-1.5");
}

// The signal a score program reads, at prefill and at every decode step after evictions, is the
// reference forward's attention input of each entry's original position (the prompt's), and the
// decoder's record of every token (generated ones too) is what the engine hands on.
TEST_F(HiddenStatePolicies, HiddenIsTheLayersAttentionInputByOriginalPosition) {
  const ModelConfig& c = config();
  int calls = 0, generated_entries = 0;
  HiddenTap* tap_ptr = nullptr;
  test::HandPolicy p;
  p.desc.name = "spy";
  p.desc.reads[signal_index(TensorSignal::HiddenState)] = true;
  p.desc.run.decode_every = 1;
  p.score_fn = [&](const ScoreInputs& in, bool, float* out) {
    ++calls;
    EXPECT_EQ(in.n_embd, c.dim);
    const float* x = in.signal(TensorSignal::HiddenState);
    ASSERT_NE(x, nullptr);
    for (int t = 0; t < in.T; ++t) {
      const int pos = in.position[t];
      const std::string what = "layer " + std::to_string(in.layer) + " pos " + std::to_string(pos);
      if (pos < S()) {
        for (int ch = 0; ch < c.dim; ++ch)
          expect_near(x[static_cast<size_t>(ch) * in.T + t], ref_->attention_inputs[in.layer][pos][ch], what);
      } else {
        ++generated_entries;
        const std::vector<double> want = tap_ptr->state(in.layer, pos);
        for (int ch = 0; ch < c.dim; ++ch) EXPECT_EQ(x[static_cast<size_t>(ch) * in.T + t], want[ch]) << what;
      }
      out[t] = static_cast<float>(pos % 7);  // evicts something
    }
  };
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(p, c, {Budget::parse("40"), 0});
  test::DecodeSpy spy(engine, c, 1);
  HiddenTap tap(spy, c);
  tap_ptr = &tap;
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &tap);
  for (int l = 0; l < c.n_layers; ++l)
    for (int t = 0; t < S(); ++t) {
      const std::vector<double> got = tap.state(l, t);
      for (int ch = 0; ch < c.dim; ++ch) expect_near(got[ch], ref_->attention_inputs[l][t][ch], "decoder record");
    }
  for (int step = 0; step < 6; ++step) {
    const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    logits = &decoder->forward(std::span<const int>(&next, 1), &tap);
  }
  EXPECT_GT(calls, c.n_layers * c.n_kv_heads);
  EXPECT_GT(generated_entries, 0) << "no generated entry was scored";
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_LE(decoder->cache().length(l, h), 40);
}

TEST_F(HiddenStatePolicies, KvzapAtPrefillKeepsTheReferenceSets) {
  const ModelConfig& c = config();
  for (int window : {16, 48})
    for (double q : {0.3, 0.7}) {
      double margin = 0;
      const double th = threshold_between(window, q, margin);
      ASSERT_GT(margin, 1e-4) << "no clear gap for the threshold";
      for (const std::string budget : {"100%", "64"}) {
        const std::string what = "kvzap window " + std::to_string(window) + " threshold " + number(th) + " budget " + budget;
        const int cap = budget == "64" ? 64 : S();
        const EvictionReport r = test::prefill_report(
            *model_, tokens_, "kvzap", {{"threshold", number(th)}, {"sliding_window_size", std::to_string(window)}}, budget);
        reference::KeptSets want(c.n_layers);
        reference::CachedHead prompt;
        prompt.T = S();
        prompt.pos.resize(S());
        std::iota(prompt.pos.begin(), prompt.pos.end(), 0);
        std::set<int> counts;
        for (int l = 0; l < c.n_layers; ++l)
          for (int h = 0; h < c.n_kv_heads; ++h) {
            std::vector<double> score(S());
            for (int t = 0; t < S(); ++t) score[t] = prompt_score(l, h, t);
            const auto kept = reference::dms_keep(prompt, score, cap, window, th);
            want[l].emplace_back(kept.begin(), kept.end());
            counts.insert(static_cast<int>(kept.size()));
          }
        EXPECT_GT(test::expect_same_kept(r, want, S(), what), 0) << what;
        for (const auto& layer : r.layers)
          for (const HeadReport& h : layer) EXPECT_EQ(h.budget, h.kept) << what << ": the kept count is the head's budget";
        if (budget == "100%") {
          EXPECT_GT(counts.size(), 1u) << what << ": the threshold gives every head the same count";
        }
      }
    }
}

// While decoding, each token is judged by its own hidden state once it leaves the window; the
// reference scores every held entry from the decoder's record of its attention input.
TEST_F(HiddenStatePolicies, KvzapWhileDecodingJudgesEachTokenByItsHiddenState) {
  const ModelConfig& c = config();
  const int window = 16, steps = 24;
  double margin = 0;
  const double th = threshold_between(window, 0.5, margin);
  ASSERT_GT(margin, 1e-4);
  for (const std::string budget : {"100%", "40"}) {
    const int cap = budget == "40" ? 40 : S();
    const auto policy = load_policy("kvzap", {{"threshold", number(th)}, {"sliding_window_size", std::to_string(window)},
                                              {"decoding", "true"}});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, c, {Budget::parse(budget), 0});
    test::DecodeSpy spy(engine, c, 1);
    HiddenTap tap(spy, c);
    const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &tap);
    int evicting = 0, capped = 0;
    double closest = 1e9;
    for (int step = 0; step <= steps; ++step) {
      if (step > 0) {
        const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
        logits = &decoder->forward(std::span<const int>(&next, 1), &tap);
      }
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const reference::CachedHead& before = spy.before(l, h);
          std::vector<double> score(before.T);
          for (int t = 0; t < before.T; ++t) {
            score[t] = reference::kvzap_linear_score(weight_, bias_, c.n_kv_heads, c.dim, l, h, tap.state(l, before.pos[t]));
            closest = std::min(closest, std::fabs(score[t] - th));
          }
          const auto want = reference::dms_keep(before, score, cap, window, th);
          EXPECT_EQ(test::held_positions(decoder->cache(), l, h), want)
              << "budget " << budget << " step " << step << " layer " << l << " head " << h;
          evicting += static_cast<int>(want.size()) < before.T;
          capped += static_cast<int>(want.size()) == cap;
        }
    }
    EXPECT_GT(evicting, c.n_layers * c.n_kv_heads) << "decode steps must evict too";
    if (budget == "40") {
      EXPECT_GT(capped, 0) << "the cap never bound";
    }
    EXPECT_GT(closest, 1e-5) << "a score within float noise of the threshold";
  }
}

// At the prompt every head of a layer holds the same positions, so the layer's hidden states are
// gathered once for all of them (the kept sets are KvzapAtPrefillKeepsTheReferenceSets').
TEST_F(HiddenStatePolicies, APromptLayersHeadsReadOneGatherOfItsHiddenStates) {
  const EvictionReport r = test::prefill_report(*model_, tokens_, "kvzap", {{"sliding_window_size", "8"}}, "50%");
  EXPECT_EQ(r.hidden_state_layer_gathers, config().n_layers);
  EXPECT_EQ(test::prefill_report(*model_, tokens_, "knorm", {}, "50%").hidden_state_layer_gathers, 0)
      << "knorm reads no hidden state";
}

// The engine refuses a table over c whose extent is not the model's n_embd before anything runs.
TEST_F(HiddenStatePolicies, ATableOverCOfAnotherWidthIsRefused) {
  const auto policy = load_policy("kvzap", {});
  EXPECT_EQ(policy->check_geometry({.n_layers = 5, .n_kv_heads = 4, .head_dim = 8, .n_embd = 64}), "");
  const std::string why = policy->check_geometry({.n_layers = 5, .n_kv_heads = 4, .head_dim = 8, .n_embd = 32});
  EXPECT_NE(why.find("has shape [layer 5, kv_head 4, c 64], but the model has n_embd = 32"), std::string::npos) << why;
}

// PositionRecords' hidden states (core/engine/model_signals.h) without a model: by original
// position, in the signal layout [c][t], 0 for a position never handed over, and a decoder that
// did not hand them over is a usage error, not a silent zero.
TEST(HiddenStateRecords, ByOriginalPositionInTheSignalLayout) {
  PositionRecords rec;
  rec.reset(2, false, false, 3);
  const std::vector<float> block = {1, 2, 3, 4, 5, 6};  // [2 tokens][3 channels] at positions 5, 6
  LayerSignals s;
  s.layer = 1;
  s.first_position = 5;
  s.n_tokens = 2;
  s.hidden_states = block;
  rec.record(s);
  const std::vector<int32_t> pos = {6, 0, 5, 9};
  std::vector<float> out(3 * pos.size(), -1.0f);
  rec.hidden_states(1, pos.data(), 4, out.data());
  EXPECT_EQ(out, (std::vector<float>{4, 0, 1, 0, 5, 0, 2, 0, 6, 0, 3, 0}));
  rec.hidden_states(0, pos.data(), 4, out.data());
  EXPECT_EQ(out, std::vector<float>(12, 0.0f)) << "layer 0 recorded nothing";
  s.hidden_states = std::span<const float>(block.data(), 5);
  EXPECT_THROW(rec.record(s), UsageError);
  s.hidden_states = {};
  EXPECT_THROW(rec.record(s), UsageError);
  rec.reset(2, false, false, 0);  // not read: nothing is required or kept
  EXPECT_NO_THROW(rec.record(s));
}

// The same layout from a gather in tiles (64 tokens x 64 channels) over sizes that cross the tiles'
// bounds, positions shuffled, repeated and some never handed over, in both record modes.
TEST(HiddenStateRecords, TiledGatherGivesThePlainLayoutAcrossTileBounds) {
  const int width = 70, n = 150, first = 3;
  std::vector<float> block(static_cast<size_t>(n) * width);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(i % 9973) * 0.5f + 1.0f;
  LayerSignals s;
  s.layer = 1;
  s.first_position = first;
  s.n_tokens = n;
  s.hidden_states = block;
  for (const bool current_call : {false, true}) {
    PositionRecords rec;
    rec.reset(2, false, false, width, current_call);
    rec.record(s);
    std::vector<int32_t> pos;
    for (int t = 0; t < 131; ++t) pos.push_back(first + (t * 37) % n);
    if (!current_call) pos.insert(pos.end(), {0, 1, 500});  // never handed over: 0
    const int T = static_cast<int>(pos.size());
    std::vector<float> got(static_cast<size_t>(width) * T, -1.0f);
    rec.hidden_states(1, pos.data(), T, got.data());
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < width; ++c) {
        const int p = pos[t] - first;
        const float want = p >= 0 && p < n ? block[static_cast<size_t>(p) * width + c] : 0.0f;
        ASSERT_EQ(got[static_cast<size_t>(c) * T + t], want) << "t " << t << " c " << c << " current call " << current_call;
      }
  }
}

// A recorder that did not record the hidden states cannot be applied to a policy that reads them.
TEST_F(HiddenStatePolicies, ARecorderWithoutHiddenStatesIsRefused) {
  const auto policy = load_policy("kvzap", {{"sliding_window_size", "8"}});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder recorder(recorded_window_for(*policy, S()), false);
  decoder->forward(std::span<const int>(tokens_), &recorder);
  EvictionEngine engine(*policy, config(), {Budget::parse("50%"), 0});
  try {
    engine.apply_after_prefill(recorder, decoder->cache());
    ADD_FAILURE() << "applied without hidden states";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the policy needs hidden; the recorder has no hidden states"), std::string::npos)
        << e.what();
  }
  // With the request, the recorded prefill keeps what the live one keeps.
  auto decoder2 = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder full(recorded_window_for(*policy, S()), false);
  full.request_model_signals({.hidden_states = true});
  decoder2->forward(std::span<const int>(tokens_), &full);
  EvictionEngine applied(*policy, config(), {Budget::parse("50%"), 0});
  applied.apply_after_prefill(full, decoder2->cache());
  const EvictionReport live = test::prefill_report(*model_, tokens_, "kvzap", {{"sliding_window_size", "8"}}, "50%");
  for (int l = 0; l < config().n_layers; ++l)
    for (int h = 0; h < config().n_kv_heads; ++h)
      EXPECT_EQ(applied.report().layers[l][h].kept_positions, live.layers[l][h].kept_positions) << l << " " << h;
}

}  // namespace
}  // namespace kvevict
