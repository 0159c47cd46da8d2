#include "evals/results_merge.h"

#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "core/util/error.h"
#include "evals/results_merge_copy.h"
#include "evals/results_store.h"
#include "evals/shard.h"
#include "evals/sqlite_statement.h"
#include "evals/text_hash.h"

namespace kvevict::evals {
namespace {

namespace fs = std::filesystem;
using Note = std::function<void(const std::string&)>;
// ResultsStore::result_key -> digest of the compared columns of that result.
using Digests = std::map<std::string, std::string>;

std::string exact(double value) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value);  // round-trips every double
  return text;
}

// Every compared column, each length-prefixed so no field's content can imitate a boundary.
std::string row_digest(const SampleResult& row) {
  std::string text;
  auto add = [&text](const std::string& field) { text += std::to_string(field.size()) + ':' + field; };
  add(std::to_string(row.length));
  add(exact(row.depth));
  add(std::to_string(row.sample_index));
  add(row.grid_json);
  add(row.query_aware ? "1" : "0");
  add(row.prediction);
  add(row.reference);
  add(exact(row.score));
  add(exact(row.kept_ratio));
  add(std::to_string(row.kv_bytes));
  add(std::to_string(row.kv_bytes_full));
  return sha256_text(text);
}

Digests run_digests(ResultsStore& store, int64_t run_id) {
  Digests digests;
  for (const SampleResult& row : store.results(run_id)) {
    digests[ResultsStore::result_key(row.task, row.sample_key, row.policy, row.budget)] = row_digest(row);
  }
  return digests;
}

std::string describe_key(std::string key) {
  for (char& c : key) {
    if (c == '\x1f') c = ' ';
  }
  return "'" + key + "'";
}

// "" when equal, else where the two first differ (for messages).
std::string first_difference(const Digests& a, const Digests& b) {
  for (const auto& [key, digest] : a) {
    auto other = b.find(key);
    if (other == b.end()) return "result " + describe_key(key) + " is only in the first";
    if (other->second != digest) return "result " + describe_key(key) + " differs";
  }
  for (const auto& [key, digest] : b) {
    if (!a.count(key)) return "result " + describe_key(key) + " is only in the second";
  }
  return "";
}

struct SourceRun {
  std::string path;
  RunRecord run;
  ShardSpec shard;  // a whole run is 0/1
};

std::string run_name(const SourceRun& source) { return source.path + " run #" + std::to_string(source.run.id); }
std::string shard_label(const SourceRun& source) {
  return source.run.shard.empty() ? "0/1 (a whole run)" : source.shard.text();
}

// What to copy: for shard i, chosen[i]; every distinct input, for its content tables.
struct Plan {
  std::vector<std::string> inputs;
  std::vector<SourceRun> chosen;
  Digests results;  // the union over the shards
  std::string started_at;
};

// Reads every input and decides what the merge copies, or throws UsageError listing what is wrong.
class Planner {
 public:
  explicit Planner(const Note& note) : note_(note) {}

  void add_input(const std::string& path) {
    ResultsStore store(path);  // migrates: every input then has this build's tables
    const std::vector<RunRecord> runs = store.runs();
    if (runs.empty()) throw UsageError(path + ": holds no runs (nothing to merge)");
    for (const RunRecord& run : runs) {
      SourceRun source{path, run, {}};
      if (!run.shard.empty()) source.shard = parse_shard(run.shard, path + ": run #" + std::to_string(run.id) + ": shard");
      check_identity(source);
      if (run.status == "finished") {
        add_finished(store, source);
      } else {
        unfinished_[source.shard.index].push_back(source);
      }
    }
    plan_.inputs.push_back(path);
  }

  Plan finish() {
    std::vector<std::string> missing;
    for (int i = 0; i < count_; ++i) {
      if (finished_[i]) {
        for (const SourceRun& stale : unfinished_[i]) {
          note(run_name(stale) + " (shard " + shard_label(stale) + ", " + stale.run.status + ") is superseded by " +
               run_name(*finished_[i]) + "; not copied");
        }
      } else if (unfinished_[i].empty()) {
        missing.push_back(ShardSpec{i, count_}.text());
      } else {
        for (const SourceRun& stale : unfinished_[i]) problems_.push_back(unfinished_problem(stale));
      }
    }
    if (!missing.empty()) problems_.push_back(missing_problem(missing));
    if (!problems_.empty()) throw UsageError(join_problems());
    build_union();
    if (!problems_.empty()) throw UsageError(join_problems());
    return std::move(plan_);
  }

 private:
  void note(const std::string& text) const {
    if (note_) note_(text);
  }

  void check_identity(const SourceRun& source) {
    if (!first_) {
      first_ = source;
      count_ = source.shard.count;
      finished_.assign(count_, std::nullopt);
      digests_.assign(count_, {});
      unfinished_.assign(count_, {});
      return;
    }
    const RunRecord& a = first_->run;
    const RunRecord& b = source.run;
    const std::string tail = ": merge joins the shards of one config and one model";
    if (a.config_hash != b.config_hash) {
      throw UsageError(run_name(source) + " is of another config than " + run_name(*first_) + " ('" + b.name + "' vs '" +
                       a.name + "', config_hash " + b.config_hash.substr(0, 12) + " vs " + a.config_hash.substr(0, 12) +
                       ")" + tail);
    }
    if (a.model_hash != b.model_hash) {
      throw UsageError(run_name(source) + " is of another model than " + run_name(*first_) + " (" + b.model + " vs " +
                       a.model + ", model_hash " + b.model_hash.substr(0, 12) + " vs " + a.model_hash.substr(0, 12) + ")" +
                       tail);
    }
    if (a.scoring != b.scoring) {
      throw UsageError(run_name(source) + " was scored by '" + b.scoring + "' but " + run_name(*first_) + " by '" +
                       a.scoring + "'" + tail + " and one scoring backend");
    }
    if (a.prefill_attention != b.prefill_attention) {  // hashed when written: only an edited database
      throw UsageError(run_name(source) + " ran the '" + b.prefill_attention + "' prefill attention but " +
                       run_name(*first_) + " '" + a.prefill_attention + "'" + tail + " and one prefill attention");
    }
    if (a.prefill != b.prefill) {  // auto resolves by device: shards run on a GPU and a CPU differ here
      throw UsageError(run_name(source) + " ran the '" + b.prefill + "' prefill but " + run_name(*first_) + " '" +
                       a.prefill + "'" + tail + " and one prefill mode");
    }
    if (source.shard.count != count_) {
      throw UsageError(run_name(source) + " is shard " + shard_label(source) + " but " + run_name(*first_) + " is shard " +
                       shard_label(*first_) + ": shards of different counts cannot be merged");
    }
  }

  void add_finished(ResultsStore& store, const SourceRun& source) {
    const int i = source.shard.index;
    Digests digests = run_digests(store, source.run.id);
    if (!finished_[i]) {
      finished_[i] = source;
      digests_[i] = std::move(digests);
      return;
    }
    const std::string difference = first_difference(digests_[i], digests);
    if (difference.empty()) {
      note(run_name(source) + " repeats shard " + shard_label(source) + " of " + run_name(*finished_[i]) +
           " with the same results; copied once");
    } else {
      problems_.push_back("shard " + shard_label(source) + " finished twice with different results: " +
                          run_name(*finished_[i]) + " and " + run_name(source) + " (" + difference + ")");
    }
  }

  static std::string unfinished_problem(const SourceRun& stale) {
    std::string text = "shard " + shard_label(stale) + " is not finished: " + run_name(stale);
    if (stale.run.status == "failed") {
      text += " failed" + (stale.run.reason.empty() ? std::string() : " (" + stale.run.reason + ")");
    } else {
      text += " is still running (or its process was killed)";
    }
    return text + "; continue it with kvevict eval --resume" +
           (stale.run.shard.empty() ? std::string() : " --shard " + stale.run.shard) + " --db " + stale.path;
  }

  std::string missing_problem(const std::vector<std::string>& missing) const {
    constexpr size_t kNamed = 20;  // a 10000-shard array with every task lost stays readable
    std::string text = std::to_string(missing.size()) + " of " + std::to_string(count_) + " shards missing: ";
    for (size_t i = 0; i < missing.size() && i < kNamed; ++i) text += (i ? ", " : "") + missing[i];
    if (missing.size() > kNamed) text += ", ... and " + std::to_string(missing.size() - kNamed) + " more";
    return text + " (the merge needs a finished run of every shard 0/" + std::to_string(count_) + " .. " +
           std::to_string(count_ - 1) + "/" + std::to_string(count_) + ")";
  }

  void build_union() {
    std::map<std::string, int> owner;
    for (int i = 0; i < count_; ++i) {
      const SourceRun& source = *finished_[i];
      for (auto& [key, digest] : digests_[i]) {
        auto [at, fresh] = owner.emplace(key, i);
        if (!fresh) {
          problems_.push_back("result " + describe_key(key) + " is in shard " + ShardSpec{at->second, count_}.text() +
                              " and in shard " + source.shard.text() + " (" + run_name(source) +
                              "): these runs are not one partition of the samples");
          return;
        }
        plan_.results.emplace(key, std::move(digest));
      }
      if (plan_.started_at.empty() || source.run.started_at < plan_.started_at) plan_.started_at = source.run.started_at;
      plan_.chosen.push_back(source);
    }
  }

  std::string join_problems() const {
    std::string text = "cannot merge:";
    for (const std::string& problem : problems_) text += "\n  " + problem;
    return text;
  }

  Note note_;
  Plan plan_;
  std::optional<SourceRun> first_;
  int count_ = 0;
  std::vector<std::optional<SourceRun>> finished_;
  std::vector<Digests> digests_;
  std::vector<std::vector<SourceRun>> unfinished_;
  std::vector<std::string> problems_;
};

// Inputs that exist, are not OUT, each once (a repeated file is noted and read once).
std::vector<std::string> checked_inputs(const std::string& out, const std::vector<std::string>& inputs, const Note& note) {
  if (inputs.empty()) throw UsageError("merge: name at least one input database after OUT.db");
  std::vector<std::string> distinct;
  std::error_code error;
  for (const std::string& path : inputs) {
    if (!fs::is_regular_file(path, error)) {
      throw InputError(path, fs::exists(path, error) ? "not a regular file (a results database is a file)"
                                                     : "no such results database");
    }
    if (fs::exists(out, error) && fs::equivalent(path, out, error)) {
      throw UsageError(path + ": is also the output database; merge into another file");
    }
    bool repeated = false;
    for (const std::string& earlier : distinct) repeated = repeated || fs::equivalent(path, earlier, error);
    if (repeated) {
      if (note) note(path + " is named twice; read once");
      continue;
    }
    distinct.push_back(path);
  }
  return distinct;
}

}  // namespace

MergeSummary merge_results(const std::string& out, const std::vector<std::string>& inputs, const Note& note) {
  Planner planner(note);
  for (const std::string& path : checked_inputs(out, inputs, note)) planner.add_input(path);
  const Plan plan = planner.finish();  // every refusal happens before OUT is opened

  MergeSummary summary;
  summary.shards = static_cast<int>(plan.chosen.size());
  summary.results = static_cast<int64_t>(plan.results.size());
  summary.name = plan.chosen[0].run.name;
  const RunRecord& identity = plan.chosen[0].run;
  ResultsStore store(out);
  if (auto done = store.find_run(identity.config_hash, identity.model_hash, "finished", "")) {
    const std::string difference = first_difference(run_digests(store, done->id), plan.results);
    if (!difference.empty()) {
      throw UsageError(out + ": already holds run #" + std::to_string(done->id) + " of this config and model (finished " +
                       done->finished_at + ") with other results (" + difference +
                       "); merge into another file");
    }
    summary.outcome = MergeSummary::Outcome::Unchanged;
    summary.run_id = done->id;
    return summary;
  }
  auto partial = store.find_run(identity.config_hash, identity.model_hash, "unfinished", "");
  if (partial && !plan.results.empty() && first_difference(run_digests(store, partial->id), plan.results).empty()) {
    summary.outcome = MergeSummary::Outcome::Completed;  // an interrupted merge: only the last steps are missing
    summary.run_id = partial->id;
  } else {
    std::vector<RunSource> runs;
    for (const SourceRun& source : plan.chosen) runs.push_back({source.path, source.run.id});
    summary.run_id = write_merged_run(out, plan.inputs, runs, plan.started_at);
  }
  store.claim_run(summary.run_id);  // refused when a live process is writing that run
  store.update_aggregates(summary.run_id);
  const int64_t stored = store.count_results(summary.run_id);
  if (stored != summary.results) {  // the copy and the plan disagree: never mark such a run finished
    const std::string reason = "merged run #" + std::to_string(summary.run_id) + " holds " + std::to_string(stored) +
                               " results, the shards " + std::to_string(summary.results);
    store.finish_run(summary.run_id, "failed", reason);
    throw RuntimeError(out + ": " + reason);
  }
  store.finish_run(summary.run_id, "finished");
  return summary;
}

}  // namespace kvevict::evals
