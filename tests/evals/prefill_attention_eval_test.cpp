// An eval config's `prefill_attention: own | flashinfer` (core/decode/decoder.h): read once into the
// enum with generate's names (ModeNames), hashed only when written so configs from before the key
// keep their hash, refused where it cannot run (off a CUDA device: exit 2; a build without FlashInfer:
// exit 1) instead of decoding with the own kernel, recorded per run (runs.prefill_attention, the
// leaderboard's JSON, CSV and titles, the report's provenance), and never mixed: a finished run of
// another prefill attention is not taken as done, --resume does not continue one, merge refuses one.
// No GPU is needed: the fake model records what its config asked for, and the refusals come before
// any decoder exists.
#include <gtest/gtest.h>

#include <filesystem>

#include "evals/config.h"
#include "evals/leaderboard.h"
#include "evals/leaderboard_stats.h"
#include "evals/report.h"
#include "evals/results_merge.h"
#include "evals/results_store.h"
#include "evals/sample_runner.h"
#include "fake_run_helpers.h"
#include "temp_db.h"

using namespace kvevict;
using namespace kvevict::evals;
using kvevict::evals::test::TempDb;

namespace {

using namespace kvevict::evals::test;

EvalConfig parse(const std::string& extra, const LoadConfigOptions& options = {}) { return parse_golden(extra, options); }

// A run of `config` as an earlier process left it, with `prefill_attention`.
int64_t plant_run(const EvalConfig& config, const std::string& db, const std::string& prefill_attention,
                  const std::string& status) {
  RunRecord run = fake_run_record(config);
  run.prefill_attention = prefill_attention;
  return kvevict::evals::test::plant_run(db, run, status);
}

int64_t run_fake_id(const EvalConfig& config, const std::string& db, const std::string& spec = "",
                 std::vector<std::string>* notes = nullptr, bool resume = false) {
  return kvevict::evals::test::run_fake(config, db, spec, notes, resume).run_id;
}

}  // namespace

TEST(PrefillAttentionConfig, IsReadIntoTheEnumAndHashedOnlyWhenWritten) {
  const EvalConfig absent = parse("");
  EXPECT_EQ(absent.prefill_attention, PrefillAttention::Own);
  EXPECT_EQ(absent.prefill_attention_where, "");
  EXPECT_EQ(absent.resolved_yaml.find("prefill_attention"), std::string::npos) << absent.resolved_yaml;
  EXPECT_EQ(absent.hash, kGoldenHash) << absent.resolved_yaml;

  const EvalConfig own = parse("prefill_attention: own\n");
  EXPECT_EQ(own.prefill_attention, PrefillAttention::Own);
  EXPECT_NE(own.resolved_yaml.find("prefill_attention: own\n"), std::string::npos) << own.resolved_yaml;
  EXPECT_NE(own.hash, absent.hash);  // as `scoring:`: written, it is part of the config

  const EvalConfig flash = parse("prefill_attention: flashinfer\n");
  EXPECT_EQ(flash.prefill_attention, PrefillAttention::FlashInfer);
  EXPECT_EQ(flash.prefill_attention_where, "golden.yaml:8:20");
  EXPECT_NE(flash.resolved_yaml.find("prefill_attention: flashinfer\n"), std::string::npos) << flash.resolved_yaml;
  EXPECT_NE(flash.hash, absent.hash);
  EXPECT_NE(flash.hash, own.hash);

  // From --set: the same resolved config, its refusals pointing at the override.
  LoadConfigOptions options;
  options.overrides = {"prefill_attention=flashinfer"};
  const EvalConfig set = parse("", options);
  EXPECT_EQ(set.prefill_attention, PrefillAttention::FlashInfer);
  EXPECT_EQ(set.prefill_attention_where, "--set prefill_attention");
  EXPECT_EQ(set.hash, flash.hash);
}

TEST(PrefillAttentionConfig, AnythingButItsNamesIsRefusedAtItsLine) {
  auto [message, code] = error_of([] { parse("prefill_attention: flash\n"); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("golden.yaml:8:20: error: prefill_attention: 'flash' is not one of own|flashinfer"),
            std::string::npos)
      << message;
  std::tie(message, code) = error_of([] { parse("prefill_attention: [own]\n"); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("golden.yaml:8:20: error: prefill_attention: expected a string"), std::string::npos) << message;
  LoadConfigOptions options;
  options.overrides = {"prefill_attention=FlashInfer"};  // names are exact, as on generate's command line
  std::tie(message, code) = error_of([&] { parse("", options); });
  EXPECT_NE(message.find("--set prefill_attention: error: prefill_attention: 'FlashInfer' is not one of"),
            std::string::npos)
      << message;
}

TEST(PrefillAttentionCheck, FlashInferOffACudaDeviceIsAUsageErrorAtTheKey) {
  const EvalConfig flash = parse("prefill_attention: flashinfer\n");
  for (bool built : {false, true}) {  // the config is wrong whatever the build holds
    auto [message, code] = error_of([&] { check_prefill_attention(flash, false, built); });
    EXPECT_EQ(code, 2) << message;
    EXPECT_NE(message.find("golden.yaml:8:20: error: prefill_attention: flashinfer runs on the CUDA decoder, but "
                           "this run's decoder runs on the cpu (device: auto found no usable CUDA device)"),
              std::string::npos)
        << message;
  }
  LoadConfigOptions options;
  options.overrides = {"prefill_attention=flashinfer", "device=cpu"};
  auto [message, code] = error_of([&] { check_prefill_attention(parse("", options), false, true); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("--set prefill_attention: error: prefill_attention: flashinfer runs on the CUDA decoder, "
                         "but this run's decoder runs on the cpu (device: cpu)"),
            std::string::npos)
      << message;
  // own runs on every decoder, whatever the build.
  EXPECT_NO_THROW(check_prefill_attention(parse(""), false, false));
  EXPECT_NO_THROW(check_prefill_attention(parse("prefill_attention: own\n"), false, false));
}

TEST(PrefillAttentionCheck, FlashInferOnACudaDeviceNeedsItInTheBuildAndA16BitCache) {
  const EvalConfig flash = parse("prefill_attention: flashinfer\n");
  auto [message, code] = error_of([&] { check_prefill_attention(flash, true, false); });
  EXPECT_EQ(code, 1) << message;  // a missing build feature: another build runs the same config
  EXPECT_NE(message.find("golden.yaml:8:20: error: prefill_attention: flashinfer is not in this kvevict: it was "
                         "built without FlashInfer"),
            std::string::npos)
      << message;
  EXPECT_NO_THROW(check_prefill_attention(flash, true, true));
  std::tie(message, code) =
      error_of([] { check_prefill_attention(parse("prefill_attention: flashinfer\nkv_type: f32\n"), true, true); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("golden.yaml:8:20: error: prefill_attention: flashinfer reads a 16-bit cache, but kv_type is f32"),
            std::string::npos)
      << message;
}

// The real runner checks against the device it resolved, before the model loads: the model here
// is not a model at all, so reaching the load would be a ModelError instead.
TEST(PrefillAttentionCheck, TheModelRunnerRefusesFlashInferOnTheCpuBeforeLoadingTheModel) {
  const std::string model = (std::filesystem::temp_directory_path() /
                             ("prefill_not_a_model" + std::to_string(::getpid()) + ".bin")).string();
  std::ofstream(model) << "not a model";
  const std::string text = "name: cpu\nmodel: " + model +
                           "\ndevice: cpu\ntasks:\n  passkey: {lengths: [60], samples: 1}\npolicies: [snapkv]\n"
                           "budgets: [\"20%\"]\n";
  auto [message, code] = error_of([&] {
    make_sample_runner(parse_eval_config(text + "prefill_attention: flashinfer\n", "cpu.yaml"));
  });
  EXPECT_EQ(code, 2) << message;
  EXPECT_NE(message.find("cpu.yaml:8:20: error: prefill_attention: flashinfer runs on the CUDA decoder, but this "
                         "run's decoder runs on the cpu (device: cpu)"),
            std::string::npos)
      << message;
  // The control: with own the same config gets as far as loading the (bad) model.
  std::tie(message, code) = error_of([&] { make_sample_runner(parse_eval_config(text, "cpu.yaml")); });
  EXPECT_EQ(message.find("prefill_attention"), std::string::npos) << message;
  EXPECT_NE(message, "");
  std::filesystem::remove(model);
}

TEST(PrefillAttentionEval, EachRunRecordsItsPrefillAttentionWhereResultsAreShown) {
  TempDb db("prefill_record");
  const int64_t own_id = run_fake_id(parse(""), db.path);
  const int64_t flash_id = run_fake_id(parse("prefill_attention: flashinfer\n"), db.path);
  ASSERT_NE(own_id, flash_id);  // another config hash: never taken for the own run
  ResultsStore store(db.path);
  EXPECT_EQ(store.run(own_id)->prefill_attention, "own");
  EXPECT_EQ(store.run(flash_id)->prefill_attention, "flashinfer");

  const auto rows = store.leaderboard("", "", flash_id);
  ASSERT_FALSE(rows.empty());
  for (const AggregateRow& row : rows) EXPECT_EQ(row.prefill_attention, "flashinfer");
  const auto groups = build_leaderboard(rows, store_sample_scores(store));
  for (const auto& record : nlohmann::json::parse(render_leaderboard(groups, LeaderboardFormat::Json)))
    EXPECT_EQ(record["prefill_attention"], "flashinfer") << record.dump();
  const std::string csv = render_leaderboard(groups, LeaderboardFormat::Csv);
  EXPECT_NE(csv.find(",scoring,prefill_attention,prefill,device_kv_bytes\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",flashinfer,shared,"), std::string::npos) << csv;
  EXPECT_NE(render_leaderboard(groups, LeaderboardFormat::Table).find("; prefill attention flashinfer)"),
            std::string::npos);
  // The default's titles stay as they were before the key.
  const auto own_groups = build_leaderboard(store.leaderboard("", "", own_id), store_sample_scores(store));
  EXPECT_EQ(render_leaderboard(own_groups, LeaderboardFormat::Table).find("prefill attention"), std::string::npos);
  EXPECT_NE(render_leaderboard(own_groups, LeaderboardFormat::Json).find("\"prefill_attention\": \"own\""),
            std::string::npos);

  const std::string out = db.path + ".report";
  std::filesystem::remove_all(out);
  write_report(store, out);
  const std::string html = file_text(out + "/index.html");
  EXPECT_NE(html.find("<th>prefill attention</th>"), std::string::npos);
  EXPECT_NE(html.find("<td>flashinfer</td><td>shared</td></tr>"), std::string::npos) << html.substr(0, 4000);
  std::filesystem::remove_all(out);
}

// The key is hashed when written, so runs of one config hash differ in it only in an edited
// database; planted runs stand for that case. A control run with the same prefill attention is
// taken, so what refuses the others is the prefill attention and nothing else.
TEST(PrefillAttentionEval, AFinishedOrUnfinishedRunOfAnotherPrefillAttentionIsNotTaken) {
  TempDb db("prefill_resume");
  const EvalConfig config = parse("");
  const int64_t planted_failed = plant_run(config, db.path, "flashinfer", "failed");
  std::vector<std::string> notes;
  const int64_t resumed = run_fake_id(config, db.path, "", &notes, true);
  EXPECT_NE(resumed, planted_failed);
  EXPECT_TRUE(any_contains(notes, "run #" + std::to_string(planted_failed) + " ran the flashinfer prefill attention, "
                                  "this one runs own; starting a new run instead of resuming it"));
  EXPECT_EQ(ResultsStore(db.path).run(resumed)->prefill_attention, "own");

  TempDb done("prefill_done");
  const int64_t planted_finished = plant_run(config, done.path, "flashinfer", "finished");
  notes.clear();
  const int64_t ran = run_fake_id(config, done.path, "", &notes);
  EXPECT_NE(ran, planted_finished);  // not skipped as done
  EXPECT_TRUE(any_contains(notes, "run #" + std::to_string(planted_finished) + " of this config ran the flashinfer "
                                  "prefill attention, this one runs own; running again"));

  TempDb control("prefill_control");
  const int64_t same = plant_run(config, control.path, "own", "failed");
  EXPECT_EQ(run_fake_id(config, control.path, "", nullptr, true), same);  // resumed
}

TEST(PrefillAttentionMerge, ShardsOfDifferentPrefillAttentionsAreRefused) {
  TempDb s0("prefill_merge0"), s1("prefill_merge1"), out("prefill_merge_out");
  const EvalConfig config = parse("");
  run_fake_id(config, s0.path, "0/2");
  run_fake_id(config, s1.path, "1/2");
  sql(s1.path, "UPDATE runs SET prefill_attention = 'flashinfer'");
  auto [message, code] = error_of([&] { merge_results(out.path, {s0.path, s1.path}); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find(s1.path + " run #1 ran the 'flashinfer' prefill attention but " + s0.path +
                         " run #1 'own': merge joins the shards of one config and one model and one prefill attention"),
            std::string::npos)
      << message;
  EXPECT_FALSE(std::filesystem::exists(out.path));
  // The control: the same shards, one prefill attention, merge.
  sql(s1.path, "UPDATE runs SET prefill_attention = 'own'");
  EXPECT_EQ(merge_results(out.path, {s0.path, s1.path}).shards, 2);
}
