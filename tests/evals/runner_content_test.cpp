// The sweep records what it ran by content (issue 12 item 5): every result names its policy (the
// file's exact text with its resolved parameters) and its prompt (the exact text the model saw)
// by SHA-256, both stored once. Two files of one name are two leaderboard rows; a policy file
// edited since a run is a reason to run again, not to skip or to resume into one mixed run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/fake_runner.h"
#include "failing_runner.h"
#include "evals/report.h"
#include "evals/results_store.h"
#include "evals/runner.h"
#include "evals/text_hash.h"

using namespace kvevict::evals;
using kvevict::evals::test::FailingRunner;

namespace {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string db() const { return (path / "kvevict.db").string(); }
  // Writes `text` to <dir>/<folder>/snap.yaml and returns the path.
  std::string policy(const std::string& folder, const std::string& text) const {
    std::filesystem::create_directories(path / folder);
    const auto file = path / folder / "snap.yaml";
    std::ofstream(file) << text;
    return file.string();
  }
};

EvalConfig config_with(const std::string& policy_path) {
  return parse_eval_config("name: content\nmodel: \"fake:\"\nseed: 3\ntasks:\n  passkey: {lengths: [60], samples: 2}\n"
                           "policies: [" + policy_path + "]\nbudgets: [\"20%\", full]\n",
                           "content.yaml");
}

}  // namespace

TEST(RunnerContent, ResultsNameTheirPolicyAndPromptByContent) {
  TempDir dir("content_names");
  const std::string text = "name: snap\n# version A\n";
  EvalConfig config = config_with(dir.policy("a", text));
  ResultsStore store(dir.db());
  FakeRunner runner("fake:");
  EvalSummary summary = run_eval(config, runner, store, {});
  const std::string policy_hash = policy_content_hash(text, "{}");
  std::set<std::string> prompts;
  for (const auto& row : store.results(summary.run_id)) {
    EXPECT_EQ(row.policy_hash, policy_hash);
    ASSERT_FALSE(row.prompt_hash.empty());
    prompts.insert(row.prompt_hash);
    auto prompt = store.prompt(row.prompt_hash);
    ASSERT_TRUE(prompt) << row.prompt_hash;
    EXPECT_EQ(prompt_content_hash(prompt->text, prompt->sample_json), row.prompt_hash);
    EXPECT_FALSE(prompt->text.prefill.empty());
    EXPECT_EQ(sample_from_stored(*prompt).references, nlohmann::json::parse(row.reference).get<std::vector<std::string>>());
  }
  EXPECT_EQ(prompts.size(), 2u);  // one per sample, shared by its (policy, budget) results
  auto policy = store.policy(policy_hash);
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->text, text);  // the file's exact text
  EXPECT_EQ(policy->label, "snap");
}

TEST(RunnerContent, TwoFilesOfOneNameAreTwoRowsAndTheSameContentIsOne) {
  TempDir dir("content_collision");
  const std::string a = dir.policy("a", "name: snap\n# version A\n");
  const std::string b = dir.policy("b", "name: snap\n# version B\n");
  const std::string c = dir.policy("c", "name: snap\n# version A\n");  // a's text, another path
  ResultsStore store(dir.db());
  FakeRunner runner("fake:");
  run_eval(config_with(a), runner, store, {});
  const int64_t run_b = run_eval(config_with(b), runner, store, {}).run_id;
  const int64_t run_c = run_eval(config_with(c), runner, store, {}).run_id;
  const std::string hash_a = policy_content_hash("name: snap\n# version A\n", "{}");
  const std::string hash_b = policy_content_hash("name: snap\n# version B\n", "{}");
  std::map<std::string, int64_t> run_of;
  for (const auto& row : store.leaderboard()) run_of[row.policy] = row.run_id;
  EXPECT_EQ(run_of, (std::map<std::string, int64_t>{{"snap@" + hash_a.substr(0, 6), run_c},
                                                     {"snap@" + hash_b.substr(0, 6), run_b}}));
  // The report's policies table names each by its file and full hash.
  const ReportFiles files = write_report(store, (dir.path / "report").string());
  std::ifstream in(files.index);
  const std::string html((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(html.find("id=\"policies\""), std::string::npos);
  EXPECT_NE(html.find("<td>snap@" + hash_b.substr(0, 6) + "</td><td>" + b + "</td><td class=\"hash\">" + hash_b),
            std::string::npos);
}

TEST(RunnerContent, AnEditedPolicyFileIsRunAgainNotSkipped) {
  TempDir dir("content_edit");
  const std::string path = dir.policy("a", "name: snap\n# version A\n");
  EvalConfig config = config_with(path);
  ResultsStore store(dir.db());
  FakeRunner runner("fake:");
  const int64_t first = run_eval(config, runner, store, {}).run_id;
  EXPECT_TRUE(run_eval(config, runner, store, {}).skipped);  // same config, same content
  dir.policy("a", "name: snap\n# version B\n");
  std::vector<std::string> notes;
  EvalOptions options;
  options.note = [&](const std::string& text) { notes.push_back(text); };
  FakeRunner again("fake:");  // a new process reads the file anew
  EvalSummary second = run_eval(config, again, store, options);
  EXPECT_FALSE(second.skipped);
  EXPECT_NE(second.run_id, first);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("another version of policy 'snap'"), std::string::npos) << notes[0];
  EXPECT_EQ(store.leaderboard().size(), 4u);  // two contents x two budgets
}

TEST(RunnerContent, ResumeAfterAPolicyEditStartsANewRun) {
  TempDir dir("content_resume");
  const std::string path = dir.policy("a", "name: snap\n# version A\n");
  EvalConfig config = config_with(path);
  ResultsStore store(dir.db());
  FailingRunner crashing(3);  // the first sample (2 results) is committed, the second fails
  EXPECT_THROW(run_eval(config, crashing, store, {}), kvevict::RuntimeError);
  auto failed = store.find_run(config.hash, crashing.model_hash(), "failed");
  ASSERT_TRUE(failed);
  EXPECT_EQ(store.count_results(failed->id), 2);

  dir.policy("a", "name: snap\n# version B\n");
  FakeRunner runner("fake:");
  EvalOptions options;
  options.resume = true;
  std::vector<std::string> notes;
  options.note = [&](const std::string& text) { notes.push_back(text); };
  EvalSummary summary = run_eval(config, runner, store, options);
  EXPECT_FALSE(summary.resumed);
  EXPECT_NE(summary.run_id, failed->id);
  EXPECT_EQ(summary.results_written, summary.results_total);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("starting a new run instead of resuming"), std::string::npos) << notes[0];
  for (const auto& row : store.results(summary.run_id)) {
    EXPECT_EQ(row.policy_hash, policy_content_hash("name: snap\n# version B\n", "{}"));
  }
}
