// The query and model signals (Q, Q_pre, O, Q_mean, token, hidden_norm, out_norm;
// core/engine/query_signals.h, model_signals.h) as the engine hands them to a policy on
// stories260K, against an independent double forward pass (reference_forward.h); and the field
// policies that read them (policies/field/expected_attention.yaml, finch.yaml, listed in
// field_policies_test.cpp) against the references of reference_query_policies.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <numeric>
#include <map>
#include <set>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "hand_policies.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "reference_forward.h"
#include "reference_query_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

using Params = std::map<std::string, std::string>;

class QuerySignals : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::stories_missing_reason().empty()) return;
    model_ = load_model(test::stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
    qkv_ = new reference::PromptQkv(reference::record_qkv(*model_, tokens_));
    ref_ = new test::ReferenceResult(test::reference_forward(*model_, tokens_));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete qkv_;
    delete model_;
    ref_ = nullptr;
    qkv_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  }
  static int S() { return static_cast<int>(tokens_.size()); }
  static const ModelConfig& config() { return model_->config; }

  // ||W_o,h v|| in double from the model's f32 W_o ([dim][q_dim]).
  static double out_norm(int layer, int h, const std::vector<double>& v) {
    const ModelConfig& c = config();
    const std::vector<float>& wo = model_->weights.layers[layer].wo;
    double s = 0;
    for (int r = 0; r < c.dim; ++r) {
      double x = 0;
      for (int a = 0; a < c.head_dim; ++a) x += wo[static_cast<size_t>(r) * c.q_dim() + h * c.head_dim + a] * v[a];
      s += x * x;
    }
    return std::sqrt(s);
  }

  static Model* model_;
  static std::vector<int> tokens_;
  static reference::PromptQkv* qkv_;
  static test::ReferenceResult* ref_;
};

Model* QuerySignals::model_ = nullptr;
std::vector<int> QuerySignals::tokens_;
reference::PromptQkv* QuerySignals::qkv_ = nullptr;
test::ReferenceResult* QuerySignals::ref_ = nullptr;

// |got - want| within float noise of a five-layer forward pass.
void expect_near(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 2e-4 * (1 + std::abs(want))) << what;
}

test::HandPolicy spy(std::initializer_list<TensorSignal> reads, int window,
                     std::function<void(const ScoreInputs&, bool)> check) {
  test::HandPolicy p;
  p.desc.name = "spy";
  p.desc.window = window;
  for (TensorSignal s : reads) p.desc.reads[signal_index(s)] = true;
  p.score_fn = [check](const ScoreInputs& in, bool decoding, float* out) {
    check(in, decoding);
    for (int t = 0; t < in.T; ++t) out[t] = static_cast<float>(in.position[t] % 7);  // evicts something
  };
  return p;
}

EvictionReport run_prefill(const Model& m, const std::vector<int>& tokens, const PolicyProgram& p, const std::string& budget) {
  auto decoder = make_cpu_decoder(m, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(p, m.config, {Budget::parse(budget), 0});
  decoder->forward(std::span<const int>(tokens), &engine);
  return engine.report();
}

TEST_F(QuerySignals, WindowQueriesAndOutputsMatchTheReferenceForward) {
  const int W = 8, G = config().group_size(), d = config().head_dim;
  int checked = 0;
  auto p = spy({TensorSignal::WindowQueryRows, TensorSignal::WindowQueryRowsPreRope, TensorSignal::WindowOutputs}, W,
               [&](const ScoreInputs& in, bool) {
                 ASSERT_EQ(in.W, W);
                 ASSERT_EQ(in.group, G);
                 for (int g = 0; g < G; ++g)
                   for (int w = 0; w < W; ++w)
                     for (int c = 0; c < d; ++c) {
                       const size_t i = (static_cast<size_t>(g) * W + w) * d + c;
                       const int h = in.kv_head * G + g, row = S() - W + w;
                       const std::string at = "layer " + std::to_string(in.layer) + " head " + std::to_string(h);
                       expect_near(in.signal(TensorSignal::WindowQueryRows)[i], ref_->queries[in.layer][row][h * d + c], "Q " + at);
                       expect_near(in.signal(TensorSignal::WindowQueryRowsPreRope)[i],
                                   ref_->queries_pre_rope[in.layer][row][h * d + c], "Q_pre " + at);
                       expect_near(in.signal(TensorSignal::WindowOutputs)[i], ref_->outputs[in.layer][row][h * d + c], "O " + at);
                     }
                 ++checked;
               });
  run_prefill(*model_, tokens_, p, "full");
  EXPECT_EQ(checked, config().n_layers * config().n_kv_heads);
}

TEST_F(QuerySignals, QueryMeanAndCovarianceAreThePromptsRotatedByTheMeanFutureRope) {
  const int G = config().group_size(), d = config().head_dim;
  struct Case { int from; QueryRotation rotation; int future; };
  for (const Case& c : {Case{0, QueryRotation::None, 512}, Case{4, QueryRotation::FutureMean, 512},
                        Case{10, QueryRotation::FutureMean, 16}}) {
    int checked = 0;
    auto p = spy({TensorSignal::QueryMean, TensorSignal::QueryCovariance}, 0, [&](const ScoreInputs& in, bool) {
      std::vector<double> mean(static_cast<size_t>(config().n_heads) * d, 0.0);
      for (int i = c.from; i < S(); ++i)  // the double forward's own pre-RoPE queries
        for (size_t k = 0; k < mean.size(); ++k) mean[k] += ref_->queries_pre_rope[in.layer][i][k] / (S() - c.from);
      // Covariance / n, rotated: R C R^T.
      for (int g = 0; g < G; ++g) {
        const int h = in.kv_head * G + g;
        std::vector<double> C(static_cast<size_t>(d) * d, 0.0);
        for (int i = c.from; i < S(); ++i) {
          const std::vector<double>& q = ref_->queries_pre_rope[in.layer][i];
          for (int a = 0; a < d; ++a)
            for (int b = 0; b < d; ++b)
              C[a * d + b] += (q[h * d + a] - mean[h * d + a]) * (q[h * d + b] - mean[h * d + b]) / (S() - c.from);
        }
        if (c.rotation == QueryRotation::FutureMean) {
          const std::vector<double> R = reference::mean_rope_matrix(config(), S(), c.future);
          std::vector<double> RC(C.size(), 0.0), RCR(C.size(), 0.0);
          for (int a = 0; a < d; ++a)
            for (int b = 0; b < d; ++b)
              for (int k = 0; k < d; ++k) RC[a * d + b] += R[a * d + k] * C[k * d + b];
          for (int a = 0; a < d; ++a)
            for (int b = 0; b < d; ++b)
              for (int k = 0; k < d; ++k) RCR[a * d + b] += RC[a * d + k] * R[b * d + k];
          C.swap(RCR);
        }
        for (int a = 0; a < d * d; ++a)
          expect_near(in.signal(TensorSignal::QueryCovariance)[static_cast<size_t>(g) * d * d + a], C[a], "Q_cov");
      }
      const std::vector<double> R = c.rotation == QueryRotation::FutureMean
                                        ? reference::mean_rope_matrix(config(), S(), c.future)
                                        : std::vector<double>();
      for (int g = 0; g < G; ++g)
        for (int a = 0; a < d; ++a) {
          const int h = in.kv_head * G + g;
          double want = mean[h * d + a];
          if (!R.empty()) {
            want = 0;
            for (int b = 0; b < d; ++b) want += R[a * d + b] * mean[h * d + b];
          }
          expect_near(in.signal(TensorSignal::QueryMean)[g * d + a], want, "Q_mean from " + std::to_string(c.from));
        }
      ++checked;
    });
    p.desc.observe.query_stats_from = c.from;
    p.desc.observe.query_rotation = c.rotation;
    p.desc.observe.rope_future = c.future;
    run_prefill(*model_, tokens_, p, "full");
    EXPECT_EQ(checked, config().n_layers * config().n_kv_heads);
  }
}

TEST_F(QuerySignals, ModelSignalsMatchTheReferenceForward) {
  const int G = config().group_size();
  int checked = 0;
  auto p = spy({TensorSignal::Token, TensorSignal::HiddenNorm, TensorSignal::OutputNorm}, 0, [&](const ScoreInputs& in, bool) {
    for (int t = 0; t < in.T; ++t) {
      const int pos = in.position[t];
      EXPECT_EQ(in.signal(TensorSignal::Token)[t], tokens_[pos]);
      expect_near(in.signal(TensorSignal::HiddenNorm)[t], ref_->hidden_norms[in.layer][pos], "hidden_norm");
      for (int g = 0; g < G; ++g) {
        const int kv_dim = config().head_dim;
        const std::vector<double>& row = ref_->values[in.layer][pos];
        const std::vector<double> v(row.begin() + in.kv_head * kv_dim, row.begin() + (in.kv_head + 1) * kv_dim);
        expect_near(in.signal(TensorSignal::OutputNorm)[static_cast<size_t>(g) * in.T + t],
                    out_norm(in.layer, in.kv_head * G + g, v), "out_norm");
      }
    }
    ++checked;
  });
  run_prefill(*model_, tokens_, p, "full");
  EXPECT_EQ(checked, config().n_layers * config().n_kv_heads);
}

// The same signals replayed from a PrefillRecorder (the eval harness's path): it must have been
// asked for the model signals; without them apply_after_prefill refuses with the signal's name.
TEST_F(QuerySignals, ModelSignalsReplayFromARecorderThatRecordedThem) {
  auto p = spy({TensorSignal::Token, TensorSignal::HiddenNorm, TensorSignal::OutputNorm}, 0, [&](const ScoreInputs& in, bool) {
    for (int t = 0; t < in.T; ++t) {
      EXPECT_EQ(in.signal(TensorSignal::Token)[t], tokens_[in.position[t]]);
      expect_near(in.signal(TensorSignal::HiddenNorm)[t], ref_->hidden_norms[in.layer][in.position[t]], "hidden_norm");
    }
  });
  EXPECT_EQ(recorded_window_for(p, S()), 0);
  for (bool model_signals : {true, false}) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    PrefillRecorder rec(recorded_window_for(p, S()), false);
    if (model_signals) rec.request_model_signals({.hidden_norms = true, .output_grams = true});
    decoder->forward(std::span<const int>(tokens_), &rec);
    EvictionEngine engine(p, config(), {Budget::parse("40"), 0});
    if (model_signals) {
      engine.apply_after_prefill(rec, decoder->cache());
      EXPECT_TRUE(engine.report().prefill_evicted);
    } else {
      EXPECT_THROW(engine.apply_after_prefill(rec, decoder->cache()), std::invalid_argument);
    }
  }
  EXPECT_EQ(recorded_window_for(*load_policy("expected_attention"), S()), S()) << "every prompt query";
  EXPECT_EQ(recorded_window_for(*load_policy("finch"), S()), S());
}

// After evictions (prefill and every decode step), with and without re-assigned positions, every
// entry's token, hidden norm and out_norm are still its own: read through original positions.
TEST_F(QuerySignals, ModelSignalsStayAlignedThroughEvictionAndDecoding) {
  const int G = config().group_size(), d = config().head_dim;
  for (bool reassign : {false, true}) {
    std::vector<int> all = tokens_;
    int decode_checks = 0;
    std::map<std::pair<int, int>, float> hidden_at;  // (layer, position) -> the first value seen
    auto p = spy({TensorSignal::Token, TensorSignal::HiddenNorm, TensorSignal::OutputNorm, TensorSignal::Values}, 0,
                 [&](const ScoreInputs& in, bool) {
                   const float* V = in.signal(TensorSignal::Values);
                   for (int t = 0; t < in.T; ++t) {
                     const int pos = in.position[t];
                     ASSERT_LT(pos, static_cast<int>(all.size()));
                     EXPECT_EQ(in.signal(TensorSignal::Token)[t], all[pos]);
                     const float hn = in.signal(TensorSignal::HiddenNorm)[t];
                     if (pos < S()) expect_near(hn, ref_->hidden_norms[in.layer][pos], "hidden_norm of a prompt entry");
                     const auto [it, fresh] = hidden_at.emplace(std::make_pair(in.layer, pos), hn);
                     if (!fresh) {
                       EXPECT_EQ(it->second, hn) << "a recorded norm never changes";
                     }
                     std::vector<double> v(d);
                     for (int c = 0; c < d; ++c) v[c] = V[static_cast<size_t>(c) * in.T + t];
                     for (int g = 0; g < G; ++g)
                       expect_near(in.signal(TensorSignal::OutputNorm)[static_cast<size_t>(g) * in.T + t],
                                   out_norm(in.layer, in.kv_head * G + g, v), "out_norm");
                   }
                   decode_checks += in.decode_step > 0;
                 });
    p.desc.run.decode_every = 1;
    p.desc.run.reassign_positions = reassign;
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(p, config(), {Budget::parse("40"), 0});
    decoder->forward(std::span<const int>(tokens_), &engine);
    ASSERT_TRUE(engine.report().prefill_evicted);
    for (int step = 0; step < 4; ++step) {
      const int next = 100 + step * 37;
      all.push_back(next);
      decoder->forward(std::span<const int>(&all.back(), 1), &engine);
    }
    EXPECT_GT(decode_checks, 0) << "reassign " << reassign;
  }
}

// The DSL path (checker, interpreter) over the new signals: each program's kept sets equal the
// top-k of its formula computed from the double forward (ties: smaller position first).
TEST_F(QuerySignals, PolicyProgramsReadTheNewSignals) {
  const int G = config().group_size(), d = config().head_dim, budget = 40, W = 4;
  struct Case {
    std::string program;
    std::function<double(int layer, int kv, int t)> want;
  };
  auto value = [&](int l, int kv, int t) {
    const std::vector<double>& row = ref_->values[l][t];
    return std::vector<double>(row.begin() + kv * d, row.begin() + (kv + 1) * d);
  };
  const std::vector<Case> cases = {
      {"score[t] = hidden_norm[t]", [&](int l, int, int t) { return ref_->hidden_norms[l][t]; }},
      {"score[t] = mean(h: out_norm[h, t])",
       [&](int l, int kv, int t) {
         double s = 0;
         for (int g = 0; g < G; ++g) s += out_norm(l, kv * G + g, value(l, kv, t)) / G;
         return s;
       }},
      {"score[t] = -abs(token[t] - 100)", [&](int, int, int t) { return -std::abs(tokens_[t] - 100.0); }},
      {"score[t] = sum(h, q, d: O[h, q, d] * V[d, t])",
       [&](int l, int kv, int t) {
         double s = 0;
         const std::vector<double> v = value(l, kv, t);
         for (int g = 0; g < G; ++g)
           for (int w = 0; w < W; ++w)
             for (int c = 0; c < d; ++c) s += ref_->outputs[l][S() - W + w][(kv * G + g) * d + c] * v[c];
         return s;
       }},
  };
  int swaps = 0;
  for (const Case& c : cases) {
    const std::string path = ::testing::TempDir() + "/signal_program.yaml";
    {
      std::ofstream out(path);
      out << "name: signal_program\nabout: x\nobserve: {window: " << W << "}\nscore: |\n  " << c.program << "\n";
    }
    const auto policy = load_policy(path);
    reference::KeptSets want(config().n_layers);
    for (int l = 0; l < config().n_layers; ++l)
      for (int kv = 0; kv < config().n_kv_heads; ++kv) {
        std::vector<int> order(S());
        std::iota(order.begin(), order.end(), 0);
        std::vector<double> score(S());
        for (int t = 0; t < S(); ++t) score[t] = c.want(l, kv, t);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
        order.resize(budget);
        std::sort(order.begin(), order.end());
        want[l].push_back(order);
      }
    // Near-ties only (test::expect_same_kept_up_to_ties): at layer 0 equal tokens have equal values.
    auto scores = [&](int l, int kv) {
      std::vector<double> s(S());
      for (int t = 0; t < S(); ++t) s[t] = c.want(l, kv, t);
      return s;
    };
    EXPECT_GT(test::expect_same_kept_up_to_ties(run_prefill(*model_, tokens_, *policy, std::to_string(budget)), want, S(), scores,
                                                1e-5, c.program, &swaps),
              0);
  }
  RecordProperty("near_tie_swaps", swaps);
}

// ---- The field policies -------------------------------------------------------------------

TEST_F(QuerySignals, ExpectedAttentionKeepsTheReferenceSets) {
  struct Case { int budget, n_sink, future; bool cov, vnorm; double eps; };
  for (const Case& c : {Case{40, 4, 512, true, true, 0}, Case{100, 4, 512, true, true, 0}, Case{60, 0, 16, true, true, 0},
                        Case{50, 4, 512, false, true, 0}, Case{50, 4, 512, true, false, 0},
                        Case{50, 2, 100, false, true, 0.001}}) {
    const Params params = {{"n_sink", std::to_string(c.n_sink)}, {"n_future_positions", std::to_string(c.future)},
                           {"use_covariance", c.cov ? "true" : "false"}, {"use_vnorm", c.vnorm ? "true" : "false"},
                           {"epsilon", std::to_string(c.eps)}};
    reference::ExpectedAttentionParams ep;
    ep.n_future = c.future;
    ep.n_sink = c.n_sink;
    ep.covariance = c.cov;
    ep.vnorm = c.vnorm;
    ep.epsilon = c.eps;
    const std::string what = "expected_attention budget " + std::to_string(c.budget) + " sink " + std::to_string(c.n_sink) +
                             " future " + std::to_string(c.future) + (c.cov ? " cov" : "");
    const auto want = reference::expected_attention(*qkv_, config(), c.budget, ep);
    EXPECT_GT(test::expect_same_kept(test::prefill_report(*model_, tokens_, "expected_attention", params,
                                                          std::to_string(c.budget)),
                                     want, S(), what),
              0);
    // The same decision replayed from a recorder that holds every prompt query.
    const auto policy = load_policy("expected_attention", params);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    PrefillRecorder rec(S(), false);
    decoder->forward(std::span<const int>(tokens_), &rec);
    EvictionEngine engine(*policy, config(), {Budget::parse(std::to_string(c.budget)), 0});
    engine.apply_after_prefill(rec, decoder->cache());
    test::expect_same_kept(engine.report(), want, S(), what + " (recorded)");
  }
}

TEST_F(QuerySignals, ExpectedAttentionRotationMatters) {
  // A short and a long future average rotate differently: the kept sets must differ somewhere,
  // so the rotation is not a no-op the references could agree on by accident.
  const auto a = reference::expected_attention(*qkv_, config(), 40, {.n_future = 1});
  const auto b = reference::expected_attention(*qkv_, config(), 40, {.n_future = 512});
  EXPECT_NE(a, b);
  // The covariance term changes the decision too (it is not negligible on this model).
  EXPECT_NE(reference::expected_attention(*qkv_, config(), 40, {.covariance = true}),
            reference::expected_attention(*qkv_, config(), 40, {.covariance = false}));
}

TEST_F(QuerySignals, FinchKeepsTheReferenceSets) {
  // context + delimiter + question: the question is the window.
  const int delimiter = 13;
  std::vector<int> prompt = tokens_;
  prompt.push_back(delimiter);
  for (int t : model_->tokenizer->encode(" Where did the ball land?", false)) prompt.push_back(t);
  const reference::PromptQkv qkv = reference::record_qkv(*model_, prompt);
  const int n = static_cast<int>(prompt.size());
  for (int budget : {30, 80})
    for (bool normalize : {true, false}) {
      const Params params = {{"delimiter", std::to_string(delimiter)}, {"normalize_scores", normalize ? "true" : "false"}};
      const std::string what = "finch budget " + std::to_string(budget) + (normalize ? " normalized" : "");
      EXPECT_GT(test::expect_same_kept(test::prefill_report(*model_, prompt, "finch", params, std::to_string(budget)),
                                       reference::finch(qkv, prompt, budget, delimiter, normalize), n, what),
                0);
    }
}

TEST_F(QuerySignals, FinchWithoutTheDelimiterTakesTheFallbackWindowOrIsAUsageError) {
  int absent = 300;
  while (std::find(tokens_.begin(), tokens_.end(), absent) != tokens_.end()) ++absent;
  // The default fallback: the last 32 tokens are the window.
  EXPECT_GT(test::expect_same_kept(test::prefill_report(*model_, tokens_, "finch", {{"delimiter", std::to_string(absent)}}, "60"),
                                   reference::finch(*qkv_, tokens_, 60, absent, true, 32), S(), "finch fallback window"),
            0);
  try {
    test::prefill_report(*model_, tokens_, "finch", {{"delimiter", std::to_string(absent)}, {"fallback_window", "0"}}, "30");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("policy finch: observe.window_after_token: the prompt has no delimiter token " + std::to_string(absent)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvevict
