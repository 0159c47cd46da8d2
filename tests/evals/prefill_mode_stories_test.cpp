// `prefill: per_run` against `prefill: shared` on stories260K, for every built-in policy file
// (policies/ and policies/field/, dsl/policy_loader.h builtin_policy_dirs): the two modes reach the
// same eviction by different roads (the engine evicting a restored copy from recorded signals, or
// observing the run's own prefill), so each policy must keep the same positions in every layer and
// head and give the same predictions and metrics, at two budgets, on a passkey sample (question in
// the prompt), a question-agnostic one (question after the eviction, through the decode observer)
// and a fidelity sample (teacher forcing and greedy). Also: the real runner's prefill accounting
// (one shared prefill per sample; per_run one more per evicting run, two for fidelity, which evicts
// twice) and auto on the CPU; a per_run run replays equal. GPU only (skipped without one): auto is
// per_run on cuda and its eviction reads the device's window attention. Skips, naming the file, when
// stories260K is absent.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "dsl/policy_loader.h"
#include "evals/config.h"
#include "evals/replay.h"
#include "evals/runner.h"
#include "evals/sample_runner.h"
#include "temp_db.h"
#include "../core/gpu_test_skip.h"
#include "../core/test_models.h"

using namespace kvevict;
using namespace kvevict::evals;

namespace {

std::string config_text(const std::string& policy, const std::string& mode) {
  return "name: modes\n"
         "model: " + kvevict::test::stories_checkpoint() + "\n"
         "tokenizer: " + kvevict::test::stories_tokenizer() + "\n"
         "device: cpu\n"
         "seed: 3\n"
         "threads: 1\n"
         "prefill: " + mode + "\n"
         "tasks:\n"
         "  passkey: {lengths: [150], depths: [50], samples: 1, question: query_aware}\n"
         "  agnostic: {type: passkey, lengths: [150], depths: [30], samples: 1, question: agnostic}\n"
         "  fidelity: {lengths: [160], continuation: 12, greedy: 6, samples: 1}\n"
         "policies: [" + policy + "]\n"
         "budgets: [\"30%\", \"40\"]\n";
}

// What one (sample, budget) gave: the outcome's numbers and the kept positions per layer and head.
struct Cell {
  std::string prediction;
  double kept_ratio = 0, kl = 0, top1 = 0, greedy = 0;
  int64_t kv_bytes = 0;
  std::vector<std::vector<std::vector<int32_t>>> kept;  // [layer][head] original positions
};

struct Sweep {
  std::map<std::string, Cell> cells;  // by "task/sample budget"
  int64_t prefills = 0, run_prefills = 0;
};

Sweep sweep(const std::string& policy, const std::string& mode) {
  const EvalConfig config = parse_eval_config(config_text(policy, mode), "modes.yaml");
  auto runner = make_sample_runner(config);
  Sweep out;
  for (const Sample& sample : plan_samples(config, *runner)) {
    runner->begin_sample(sample);
    for (const Budget& budget : config.budgets) {
      const RunOutcome outcome = runner->run(config.policies.front(), budget);
      Cell cell{outcome.prediction, outcome.kept_ratio, outcome.kl, outcome.top1_agreement,
                outcome.greedy_agreement, outcome.kv_bytes, {}};
      if (const EvictionReport* report = runner->eviction_report()) {
        for (const auto& layer : report->layers) {
          cell.kept.emplace_back();
          for (const HeadReport& head : layer) cell.kept.back().push_back(head.kept_positions);
        }
      }
      out.cells[sample.task + "/" + sample.key + " " + budget.text] = std::move(cell);
    }
  }
  out.prefills = runner->prefill_count();
  out.run_prefills = runner->run_prefill_count();
  return out;
}

// Built-in policy names (list_policies' built-ins: policies/ and policies/field/).
std::vector<std::string> builtin_policies() {
  std::vector<std::string> names;
  for (const PolicyListing& listing : list_policies())
    if (listing.builtin) names.push_back(listing.name);
  return names;
}

class PrefillModeEquivalence : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(PrefillModeEquivalence, PerRunKeepsAndPredictsWhatSharedDoes) {
  if (auto reason = kvevict::test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const std::string policy = GetParam();
  const bool blocks = load_policy(policy)->description().run.prefill_block > 0;
  const Sweep shared = sweep(policy, "shared");
  const Sweep per_run = sweep(policy, "per_run");
  ASSERT_EQ(shared.cells.size(), 6u);
  // 3 samples; per_run prefills each of the 2 x 2 evicting runs of passkey and agnostic once and
  // the 2 of fidelity twice (teacher forcing, then greedy). Block policies prefill so in both modes.
  EXPECT_EQ(shared.prefills, 3);
  EXPECT_EQ(per_run.prefills, 3);
  EXPECT_EQ(per_run.run_prefills, 2 * 2 + 2 * 2);
  EXPECT_EQ(shared.run_prefills, blocks ? per_run.run_prefills : 0);
  for (const auto& [key, a] : shared.cells) {
    SCOPED_TRACE(policy + " " + key);
    const Cell& b = per_run.cells.at(key);
    ASSERT_FALSE(a.kept.empty());  // an evicting run reports what it kept
    ASSERT_EQ(a.kept.size(), b.kept.size());
    for (size_t layer = 0; layer < a.kept.size(); ++layer) {
      ASSERT_EQ(a.kept[layer].size(), b.kept[layer].size()) << "layer " << layer;
      for (size_t head = 0; head < a.kept[layer].size(); ++head)
        EXPECT_EQ(a.kept[layer][head], b.kept[layer][head]) << "layer " << layer << " head " << head;
    }
    EXPECT_EQ(a.prediction, b.prediction);
    EXPECT_EQ(a.kept_ratio, b.kept_ratio);
    EXPECT_EQ(a.kv_bytes, b.kv_bytes);
    EXPECT_EQ(a.kl, b.kl);
    EXPECT_EQ(a.top1, b.top1);
    EXPECT_EQ(a.greedy, b.greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(BuiltinPolicies, PrefillModeEquivalence, ::testing::ValuesIn(builtin_policies()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// run_eval's summary: the full budget never prefills by itself; auto on the CPU is shared.
TEST(PrefillModeStories, TheSweepCountsSamplesTimesOnePlusEvictingRunsPrefills) {
  if (auto reason = kvevict::test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const std::string grid = "name: count\nmodel: " + kvevict::test::stories_checkpoint() + "\ntokenizer: " +
                           kvevict::test::stories_tokenizer() + "\ndevice: cpu\nthreads: 1\n"
                           "tasks:\n  passkey: {lengths: [120], samples: 2}\n"
                           "policies: [snapkv, streamingllm]\nbudgets: [\"25%\", \"32\", full]\n";
  for (const std::string mode : {"per_run", "shared", "auto"}) {
    SCOPED_TRACE(mode);
    const EvalConfig config = parse_eval_config(grid + "prefill: " + mode + "\n", "count.yaml");
    auto runner = make_sample_runner(config);
    EXPECT_EQ(runner->prefill_mode(), mode == "per_run" ? PrefillMode::PerRun : PrefillMode::Shared);
    kvevict::evals::test::TempDb db("prefill_mode_stories_count");
    ResultsStore store(db.path);
    const EvalSummary summary = run_eval(config, *runner, store, {});
    EXPECT_EQ(summary.prefills, 2);
    EXPECT_EQ(summary.prefills + summary.run_prefills, mode == "per_run" ? 2 * (1 + 2 * 2) : 2);
    EXPECT_EQ(store.run(summary.run_id)->prefill, mode == "per_run" ? "per_run" : "shared");
    for (const SampleResult& row : store.results(summary.run_id)) {
      if (row.budget == "25%") {
        EXPECT_LT(row.kept_ratio, 0.3) << row.policy;  // the runs did evict
      }
      if (row.budget == "full") {
        EXPECT_EQ(row.kept_ratio, 1.0) << row.policy;
      }
    }
  }
}

// A per_run run replays equal with the real runner: replay takes runs.prefill (per_run) although
// the stored config (rewritten to the one without the key, as a GPU's auto run stores it) would
// resolve to shared on this CPU.
TEST(PrefillModeStories, APerRunResultReplaysEqualThroughItsOwnPrefill) {
  if (auto reason = kvevict::test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const std::string text = "name: replay\nmodel: " + kvevict::test::stories_checkpoint() + "\ntokenizer: " +
                           kvevict::test::stories_tokenizer() + "\ndevice: cpu\nthreads: 1\n"
                           "tasks:\n  passkey: {lengths: [120], samples: 1}\npolicies: [snapkv]\nbudgets: [\"25%\"]\n";
  kvevict::evals::test::TempDb db("prefill_mode_stories_replay");
  int64_t run = 0;
  {
    LoadConfigOptions options;
    options.overrides = {"prefill=per_run"};
    const EvalConfig config = parse_eval_config(text, "replay.yaml", options);
    auto runner = make_sample_runner(config);
    ResultsStore store(db.path);
    run = run_eval(config, *runner, store, {}).run_id;
  }
  // As a GPU run of the config without the key stores it: the config's auto, per_run recorded.
  const EvalConfig plain = parse_eval_config(text, "replay.yaml");
  ASSERT_EQ(plain.prefill, PrefillMode::Auto);
  {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db.path.c_str(), &handle), SQLITE_OK);
    sqlite3_stmt* update = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(handle, "UPDATE runs SET config_yaml = ?1", -1, &update, nullptr), SQLITE_OK);
    sqlite3_bind_text(update, 1, plain.resolved_yaml.c_str(), -1, SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(update), SQLITE_DONE);
    sqlite3_finalize(update);
    sqlite3_close(handle);
    ASSERT_EQ(ResultsStore(db.path).run(run)->prefill, "per_run");
  }
  PrefillMode asked = PrefillMode::Auto;
  RunnerFactory factory = [&](const EvalConfig& config) {
    asked = config.prefill;
    return make_sample_runner(config);
  };
  ResultsStore store(db.path, ResultsStore::Access::ReadOnly);
  for (const SampleResult& row : store.results(run)) {
    const ReplayReport report = replay_result(store, row.id, factory);
    EXPECT_TRUE(report.equal()) << row.id;
    EXPECT_EQ(asked, PrefillMode::PerRun);
  }
}

// GPU only (the device check): on `device: cuda`, auto is per_run, and per_run's eviction reads the
// window attention the decoder computed on the device (in place or downloaded once per layer) where
// shared computes it on the host from the recorded queries. Budget sizes do not depend on scores,
// so both keep as many entries; kept positions may differ where the two kernels' f32 sums meet a
// near tie: counted and printed, not asserted.
TEST(PrefillModeGpu, AutoIsPerRunOnCudaAndItsEvictionReadsTheDevicesWindowAttention) {
  SKIP_WITHOUT_GPU();
  if (auto reason = kvevict::test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const std::string text = "name: gpu\nmodel: " + kvevict::test::stories_checkpoint() + "\ntokenizer: " +
                           kvevict::test::stories_tokenizer() + "\ndevice: cuda\n"
                           "tasks:\n  passkey: {lengths: [150], samples: 1, question: query_aware}\n"
                           "policies: [snapkv]\nbudgets: [\"30%\"]\n";
  EXPECT_EQ(make_sample_runner(parse_eval_config(text, "gpu.yaml"))->prefill_mode(), PrefillMode::PerRun);
  std::map<std::string, EvictionReport> reports;
  std::map<std::string, double> kept;
  for (const std::string mode : {"shared", "per_run"}) {
    const EvalConfig config = parse_eval_config(text + "prefill: " + mode + "\n", "gpu.yaml");
    auto runner = make_sample_runner(config);
    const std::vector<Sample> samples = plan_samples(config, *runner);
    runner->begin_sample(samples.front());
    kept[mode] = runner->run(config.policies.front(), config.budgets.front()).kept_ratio;
    ASSERT_NE(runner->eviction_report(), nullptr);
    reports[mode] = *runner->eviction_report();
  }
  const auto device_reads = [](const EvictionReport& r) {
    return r.window_attention_in_place + r.window_attention_reused + r.window_attention_downloads;
  };
  std::printf("per_run window attention: %lld in place, %lld reused, %lld downloads\n",
              static_cast<long long>(reports["per_run"].window_attention_in_place),
              static_cast<long long>(reports["per_run"].window_attention_reused),
              static_cast<long long>(reports["per_run"].window_attention_downloads));
  EXPECT_GT(device_reads(reports["per_run"]), 0);
  EXPECT_EQ(device_reads(reports["shared"]), 0);
  EXPECT_EQ(kept["per_run"], kept["shared"]);
  int same = 0, heads = 0;
  for (size_t l = 0; l < reports["shared"].layers.size(); ++l)
    for (size_t h = 0; h < reports["shared"].layers[l].size(); ++h, ++heads)
      same += reports["shared"].layers[l][h].kept_positions == reports["per_run"].layers[l][h].kept_positions;
  std::printf("cuda: per_run keeps the shared path's positions in %d of %d heads\n", same, heads);
}
