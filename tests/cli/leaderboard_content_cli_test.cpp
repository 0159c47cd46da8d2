// The leaderboard keys policies by content, as a user sees it (issue 12 item 5): two different
// policy files with the same name, evaluated in two runs, are two rows labelled name@hash-prefix in
// `leaderboard`, `compare` takes the labels and refuses the shared bare name, and the same file
// evaluated again stays one row.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_run.h"

using kvevict::test::run_kvevict;

namespace {

struct Workdir {
  std::filesystem::path path;
  explicit Workdir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("kvevict_content_" + name + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Workdir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& content) const {
    std::filesystem::create_directories((path / name).parent_path());
    std::ofstream(path / name) << content;
    return (path / name).string();
  }
  std::string db() const { return (path / "kvevict.db").string(); }
};

// A fake-model config evaluating `policy` (a path) and the name `alpha`.
std::string config(const std::string& policy) {
  return "name: content\nmodel: \"fake:\"\nseed: 1" 
         "\ntasks:\n  passkey: {lengths: [60], samples: 4}\npolicies: [" + policy + ", alpha]\nbudgets: [\"20%\", full]\n";
}

std::set<std::string> policies_on(const std::string& db) {
  auto r = run_kvevict("leaderboard --format json --db " + db);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  for (const auto& record : nlohmann::json::parse(r.out)) names.insert(record["policy"].get<std::string>());
  return names;
}

}  // namespace

TEST(LeaderboardContentCli, TwoFilesOfOneNameAreTwoLabelledRows) {
  Workdir dir("collide");
  const std::string a = dir.file("a/snap.yaml", "name: snap\n# tuned by A\n");
  const std::string b = dir.file("b/snap.yaml", "name: snap\n# tuned by B\n");
  ASSERT_EQ(run_kvevict("eval -q --db " + dir.db() + " -c " + dir.file("one.yaml", config(a))).exit_code, 0);
  EXPECT_EQ(policies_on(dir.db()), (std::set<std::string>{"alpha", "snap"}));
  // The same file run again: still one row for it.
  ASSERT_EQ(run_kvevict("eval -q --force --db " + dir.db() + " -c " + dir.path.string() + "/one.yaml").exit_code, 0);
  EXPECT_EQ(policies_on(dir.db()), (std::set<std::string>{"alpha", "snap"}));
  ASSERT_EQ(run_kvevict("eval -q --db " + dir.db() + " -c " + dir.file("three.yaml", config(b))).exit_code, 0);
  const auto names = policies_on(dir.db());
  ASSERT_EQ(names.size(), 3u);
  std::vector<std::string> labelled;
  for (const auto& name : names) {
    if (name.rfind("snap@", 0) == 0) labelled.push_back(name);
  }
  ASSERT_EQ(labelled.size(), 2u) << "snap is labelled by content";
  EXPECT_EQ(labelled[0].size(), std::string("snap@").size() + 6);

  auto table = run_kvevict("leaderboard --db " + dir.db());
  EXPECT_NE(table.out.find(labelled[0]), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(labelled[1]), std::string::npos) << table.out;
  auto ambiguous = run_kvevict("compare snap alpha --db " + dir.db());
  EXPECT_EQ(ambiguous.exit_code, 2);
  EXPECT_NE(ambiguous.err.find("several policies of different content have this name; give one of " + labelled[0]),
            std::string::npos)
      << ambiguous.err;
  auto labelled_compare = run_kvevict("compare " + labelled[0] + " " + labelled[1] + " --db " + dir.db());
  EXPECT_EQ(labelled_compare.exit_code, 0) << labelled_compare.err;
}
