// The real model runner on stories260K with a hand-written evictor (keep the most recent entries of
// every head): one prefill per sample, the snapshot restored for every (policy, budget), the full
// budget reproducing the full cache exactly, and eviction really shrinking the cache.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "core/decode/kv_cache.h"
#include "core/model/model.h"
#include "evals/config.h"
#include "evals/model_runner.h"
#include "evals/runner.h"
#include "../core/test_models.h"

using namespace kvevict;
using namespace kvevict::evals;

namespace {

class KeepRecentEvictor : public PrefillEvictor {
 public:
  void prepare(const std::vector<PolicyChoice>& policies, const Model& model) override {
    (void)policies;
    (void)model;
  }
  ForwardObserver* start_recording(int) override {
    ++recordings;
    return nullptr;
  }
  ForwardObserver* apply(const PolicyChoice& policy, const Budget& budget, KVCache& cache) override {
    (void)policy;
    ++applications;
    for (int layer = 0; layer < cache.n_layers(); ++layer) {
      for (int head = 0; head < cache.n_kv_heads(); ++head) {
        int length = cache.length(layer, head);
        int keep = budget.kind == Budget::Kind::Fraction ? static_cast<int>(budget.value * length)
                                                         : std::min(length, static_cast<int>(budget.value));
        std::vector<int> indices(keep);
        std::iota(indices.begin(), indices.end(), length - keep);
        cache.keep(layer, head, indices);
      }
    }
    return nullptr;
  }
  int recordings = 0, applications = 0;
};

std::string stories_config() {
  return "name: stories\n"
         "model: " + test::stories_checkpoint() + "\n"
         "tokenizer: " + test::stories_tokenizer() + "\n"
         "seed: 1\n"
         "threads: 1\n"
         "tasks:\n"
         "  passkey: {lengths: [150], depths: [50], samples: 2}\n"
         "  fidelity: {lengths: [200], continuation: 24, greedy: 8, samples: 1}\n"
         "policies: [recent]\n"
         "budgets: [\"25%\", \"64\", full]\n";
}

}  // namespace

TEST(ModelRunner, SweepsStories260KWithOnePrefillPerSample) {
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  EvalConfig config = parse_eval_config(stories_config(), "stories.yaml");
  auto evictor = std::make_unique<KeepRecentEvictor>();
  KeepRecentEvictor* probe = evictor.get();
  auto runner = make_decoder_runner(config, std::move(evictor));
  auto db = std::filesystem::temp_directory_path() / ("model_runner" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(db);
  {
    ResultsStore store(db.string());
    EvalSummary summary = run_eval(config, *runner, store, {});
    EXPECT_EQ(summary.samples, 3);
    EXPECT_EQ(summary.prefills, 3);
    EXPECT_EQ(probe->recordings, 3);
    // Fidelity evicts twice per budget (teacher forcing, then greedy from the context end).
    EXPECT_EQ(probe->applications, 2 * 2 + 1 * 2 * 2);

    for (const auto& row : store.results(summary.run_id)) {
      SCOPED_TRACE(row.task + " " + row.budget);
      auto extra = nlohmann::json::parse(row.extra_json);
      EXPECT_GT(row.kv_bytes_full, 0);
      EXPECT_GT(row.ttft_ms, 0);
      if (row.budget == "full") {
        EXPECT_DOUBLE_EQ(row.kept_ratio, 1.0);
        EXPECT_EQ(row.kv_bytes, row.kv_bytes_full);
      } else {
        EXPECT_LT(row.kv_bytes, row.kv_bytes_full);
        if (row.budget == "25%") {
          EXPECT_NEAR(row.kept_ratio, 0.25, 0.02);
        }
        if (row.budget == "64") {
          EXPECT_LT(row.kept_ratio, 64.0 / 150);
        }
      }
      if (row.task == "fidelity") {
        if (row.budget == "full") {
          // A restored copy of the full cache gives exactly the reference logits.
          EXPECT_NEAR(extra["kl"].get<double>(), 0.0, 1e-9);
          EXPECT_DOUBLE_EQ(extra["top1_agreement"].get<double>(), 1.0);
          EXPECT_DOUBLE_EQ(extra["greedy_agreement"].get<double>(), 1.0);
          EXPECT_DOUBLE_EQ(row.score, 100.0);
        } else {
          EXPECT_GT(extra["kl"].get<double>(), 0.0);
        }
      } else {
        EXPECT_FALSE(row.prediction.empty());
      }
    }
  }
  std::filesystem::remove(db);
}

// A decode-time policy (one whose apply returns an observer) must see every token appended after
// the compression: the question (asked after compression, `question: agnostic`) as one block, then
// each generated token. The question block once bypassed the observer, so per-step policies never
// saw the question and StreamingLLM's re-assigned positions broke its answers (docs/EVALUATION.md).
class CountingObserver : public ForwardObserver {
 public:
  ObservationRequest request() const override { return {}; }
  void after_layer(const LayerSignals&, KVCache&) override {}
  void after_forward(int n_tokens, KVCache&) override { blocks.push_back(n_tokens); }
  std::vector<int> blocks;
};

class ObservingEvictor : public KeepRecentEvictor {
 public:
  ForwardObserver* apply(const PolicyChoice& policy, const Budget& budget, KVCache& cache) override {
    KeepRecentEvictor::apply(policy, budget, cache);
    observers.push_back(std::make_unique<CountingObserver>());
    return observers.back().get();
  }
  std::vector<std::unique_ptr<CountingObserver>> observers;
};

TEST(ModelRunner, ADecodeObserverSeesTheQuestionBlockAndEveryGeneratedToken) {
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const std::string text = "name: stories\n"
                           "model: " + test::stories_checkpoint() + "\n"
                           "tokenizer: " + test::stories_tokenizer() + "\n"
                           "seed: 1\nthreads: 1\n"
                           "tasks:\n  passkey: {lengths: [150], depths: [50], samples: 1, question: agnostic}\n"
                           "policies: [recent]\nbudgets: [\"25%\", full]\n";
  EvalConfig config = parse_eval_config(text, "stories.yaml");
  auto evictor = std::make_unique<ObservingEvictor>();
  ObservingEvictor* probe = evictor.get();
  auto runner = make_decoder_runner(config, std::move(evictor));
  auto db = std::filesystem::temp_directory_path() / ("model_runner_obs" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(db);
  {
    ResultsStore store(db.string());
    run_eval(config, *runner, store, {});
  }
  std::filesystem::remove(db);
  ASSERT_EQ(probe->observers.size(), 1u);  // the compressed budget; the full cache has no observer
  const std::vector<int>& blocks = probe->observers[0]->blocks;
  ASSERT_FALSE(blocks.empty()) << "the observer saw nothing after compression";
  EXPECT_GT(blocks[0], 1) << "the question block is the first thing appended after compression";
  for (size_t i = 1; i < blocks.size(); ++i) EXPECT_EQ(blocks[i], 1) << "generated token " << i;
}

TEST(ModelRunner, CountsTokensWithTheModelTokenizer) {
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  EvalConfig config = parse_eval_config(stories_config(), "stories.yaml");
  auto runner = make_decoder_runner(config, std::make_unique<KeepRecentEvictor>());
  auto model = load_model(test::stories_checkpoint(), {test::stories_tokenizer()});
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  EXPECT_EQ(runner->count_tokens(text), static_cast<int>(model->tokenizer->encode(text, false).size()));
  EXPECT_EQ(runner->model_hash(), test::kStoriesSha256);
  EXPECT_EQ(runner->device().empty(), false);
}
