// `kvevict slurm CONFIG --shards N [--out DIR] [--db FILE] [--partition P] [--time T]
//  [--cpus-per-task C] [--set key=value ...] [--limit N]`: writes the SLURM scripts of a sharded run,
// submits nothing:
//   DIR/eval-array.sbatch  a job array --array=0-(N-1); task I runs
//                          kvevict eval -c CONFIG --shard I/N --db DIR/shard-I.db --resume
//   DIR/merge.sbatch       kvevict merge FILE DIR/shard-0.db ... DIR/shard-(N-1).db
//   DIR/submit.sh          sbatch the array, then the merge with --dependency=afterok:<array job>
//                          (it starts once every task succeeded); prints array_job=ID, merge_job=ID.
//                          Its own arguments go to both sbatch calls (bash submit.sh --account=A).
// The config is validated here first (exit 2, nothing written). Every path in the scripts is
// absolute and single-quoted; the tasks cd to the current directory first, so the config's relative
// paths (a model, a tokenizer) resolve as they did here and the run has the same identity. Logs go
// to DIR/logs/ (given to sbatch by submit.sh, not as #SBATCH lines, whose quoting SLURM does not
// promise); DIR may not hold '%' or '\' (SLURM's log-name patterns) or a newline.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "cli/command.h"
#include "core/util/error.h"
#include "evals/config.h"
#include "evals/sample_runner.h"
#include "evals/shard.h"
#include "kvevict_version.h"

namespace {

namespace fs = std::filesystem;
using kvevict::UsageError;

struct SlurmArgs {
  std::string config, out, db, partition, time;
  int shards = 0;
  int cpus_per_task = 0;
  std::vector<std::string> overrides;
  int limit = -1;
};

// One word for a POSIX shell, whatever it holds: single quotes, each ' written as '\''.
std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Absolute path of `path`; refuses characters the scripts or SLURM's log names cannot carry.
std::string script_path(const std::string& option, const std::string& path, const char* refused) {
  std::error_code no_working_folder;
  const std::string absolute = fs::absolute(path, no_working_folder).lexically_normal().string();
  if (no_working_folder) throw UsageError(option + " " + shell_quote(path) + ": " + no_working_folder.message());
  for (const char* c = refused; *c; ++c) {
    if (absolute.find(*c) != std::string::npos) {
      const std::string shown = *c == '\n' ? std::string("a newline") : std::string("'") + *c + "'";
      throw UsageError(option + " " + shell_quote(path) + ": the path holds " + shown +
                       ", which SLURM reads as part of a log-file pattern or a script line; choose another");
    }
  }
  return absolute;
}

// The job name: the config's name in the characters every SLURM tool prints as they are.
std::string job_name(const std::string& name) {
  std::string text = "kvevict-";
  for (char c : name) text += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return text;
}

std::string sbatch_common(const SlurmArgs& args) {
  std::string lines = "#SBATCH --ntasks=1\n";
  if (!args.partition.empty()) lines += "#SBATCH --partition=" + args.partition + "\n";
  if (!args.time.empty()) lines += "#SBATCH --time=" + args.time + "\n";
  return lines;
}

std::string array_script(const SlurmArgs& args, const kvevict::evals::EvalConfig& config, const std::string& kvevict,
                         const std::string& config_path, const std::string& workdir, const std::string& dir, int cpus) {
  const int n = args.shards;
  std::string eval_args;
  for (const std::string& assignment : args.overrides) eval_args += " --set " + shell_quote(assignment);
  if (args.limit >= 0) eval_args += " --limit " + std::to_string(args.limit);
  return "#!/usr/bin/env bash\n"
         "# kvevict job array (written by kvevict slurm, kvevict " KVEVICT_VERSION "): task I of 0.." +
         std::to_string(n - 1) + " runs shard I/" + std::to_string(n) +
         " of the config into its own database. Submit it with submit.sh\n"
         "# beside it: that gives the log paths and queues the merge after every task.\n"
         "#SBATCH --job-name=" + job_name(config.name) + "\n" +
         "#SBATCH --array=0-" + std::to_string(n - 1) + "\n" + sbatch_common(args) +
         "#SBATCH --cpus-per-task=" + std::to_string(cpus) + "\n" +
         "set -euo pipefail\n"
         "KVEVICT=" + shell_quote(kvevict) + "\n" +
         "CONFIG=" + shell_quote(config_path) + "\n" +
         "WORKDIR=" + shell_quote(workdir) + "  # the config's relative paths resolve from here\n" +
         "OUT_DIR=" + shell_quote(dir) + "\n" +
         "SHARDS=" + std::to_string(n) + "\n" +
         ": \"${SLURM_ARRAY_TASK_ID:?is not set: submit this script as a job array (sbatch --array=0-" +
         std::to_string(n - 1) + ")}\"\n"
         "cd \"$WORKDIR\"\n"
         "# --resume: a task requeued after a node failure continues its shard; a finished shard is skipped.\n"
         "exec \"$KVEVICT\" eval -c \"$CONFIG\" --shard \"$SLURM_ARRAY_TASK_ID/$SHARDS\" "
         "--db \"$OUT_DIR/shard-$SLURM_ARRAY_TASK_ID.db\" --resume" + eval_args + "\n";
}

std::string merge_script(const SlurmArgs& args, const kvevict::evals::EvalConfig& config, const std::string& kvevict,
                         const std::string& dir, const std::string& db) {
  return "#!/usr/bin/env bash\n"
         "# kvevict merge job (written by kvevict slurm): joins the " + std::to_string(args.shards) +
         " shard databases into one whole run; submit.sh queues it with --dependency=afterok on the array.\n"
         "#SBATCH --job-name=" + job_name(config.name) + "-merge\n" + sbatch_common(args) +
         "#SBATCH --cpus-per-task=1\n"
         "set -euo pipefail\n"
         "KVEVICT=" + shell_quote(kvevict) + "\n" +
         "OUT_DIR=" + shell_quote(dir) + "\n" +
         "MERGED_DB=" + shell_quote(db) + "\n" +
         "SHARDS=" + std::to_string(args.shards) + "\n" +
         "inputs=()\n"
         "for ((i = 0; i < SHARDS; i++)); do inputs+=(\"$OUT_DIR/shard-$i.db\"); done\n"
         "exec \"$KVEVICT\" merge \"$MERGED_DB\" \"${inputs[@]}\"\n";
}

std::string submit_script(const std::string& dir) {
  return "#!/usr/bin/env bash\n"
         "# Submits the job array, then the merge job with --dependency=afterok:<array job>: SLURM starts the\n"
         "# merge once every array task has succeeded. If a task fails the merge never starts (squeue shows\n"
         "# DependencyNeverSatisfied): cancel it, rerun that shard (sbatch --array=I eval-array.sbatch) and\n"
         "# run merge.sbatch. Arguments to this script go to both sbatch calls (e.g. --account=A).\n"
         "set -euo pipefail\n"
         "OUT_DIR=" + shell_quote(dir) + "\n" +
         "mkdir -p \"$OUT_DIR/logs\"\n"
         "array_job=$(sbatch --parsable --output=\"$OUT_DIR/logs/shard-%a.out\" \"$@\" \"$OUT_DIR/eval-array.sbatch\")\n"
         "array_job=${array_job%%;*}  # --parsable prints ID or ID;CLUSTER\n"
         "merge_job=$(sbatch --parsable --dependency=\"afterok:$array_job\" --output=\"$OUT_DIR/logs/merge.out\" \"$@\" "
         "\"$OUT_DIR/merge.sbatch\")\n"
         "merge_job=${merge_job%%;*}\n"
         "echo \"array_job=$array_job\"\n"
         "echo \"merge_job=$merge_job\"\n";
}

void write_script(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) throw kvevict::RuntimeError(path.string() + ": cannot write the script");
  std::error_code error;
  fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add,
                  error);
}

void check_args(const SlurmArgs& args) {
  if (!args.partition.empty() && !std::regex_match(args.partition, std::regex("[A-Za-z0-9._,-]+"))) {
    throw UsageError("--partition " + shell_quote(args.partition) +
                     ": a partition name (or a comma-separated list) of letters, digits and . _ -");
  }
  if (!args.time.empty() && !std::regex_match(args.time, std::regex("[0-9]+([-:][0-9]+){0,3}|UNLIMITED|INFINITE"))) {
    throw UsageError("--time " + shell_quote(args.time) +
                     ": a SLURM time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS or UNLIMITED");
  }
}

std::function<int()> setup_slurm(CLI::App& app) {
  auto args = std::make_shared<SlurmArgs>();
  app.add_option("config", args->config, "Eval config (YAML)")->required();
  app.add_option("--shards", args->shards, "Number of shards N (array tasks 0..N-1)")
      ->required()
      ->check(CLI::Range(1, kvevict::evals::ShardSpec::kMaxShards));
  app.add_option("--out", args->out, "Folder for the scripts, logs and shard databases (default slurm-<config name>)");
  app.add_option("--db", args->db, "The merged results database (default OUT/merged.db)");
  app.add_option("--partition", args->partition, "SLURM partition of both jobs");
  app.add_option("--time", args->time, "SLURM time limit of each job (e.g. 02:00:00)");
  app.add_option("--cpus-per-task", args->cpus_per_task, "CPUs per array task (default: the config's threads, or 1)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--set", args->overrides, "Config override passed to every task (as kvevict eval --set)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--limit", args->limit, "At most N samples per grid point, passed to every task")
      ->check(CLI::NonNegativeNumber);
  return [args] {
    using namespace kvevict::evals;
    check_args(*args);
    LoadConfigOptions options;  // the tasks would refuse a bad config: refuse it now, before writing
    options.overrides = args->overrides;
    options.limit = args->limit;
    options.check_policy = check_policy_choice;
    const EvalConfig config = load_eval_config(args->config, options);
    const std::string dir = script_path("--out", args->out.empty() ? "slurm-" + config.name : args->out, "%\\\n");
    const std::string db = script_path("--db", args->db.empty() ? dir + "/merged.db" : args->db, "\n");
    const std::string config_path = script_path("config", args->config, "\n");
    const std::string workdir = script_path("the current directory", fs::current_path().string(), "\n");
    const std::string kvevict = fs::read_symlink("/proc/self/exe").string();
    const int cpus = args->cpus_per_task > 0 ? args->cpus_per_task : std::max(1, config.threads);

    std::error_code error;
    fs::create_directories(fs::path(dir) / "logs", error);
    if (error) throw kvevict::RuntimeError(dir + ": cannot create the folder: " + error.message());
    const fs::path folder(dir);
    write_script(folder / "eval-array.sbatch", array_script(*args, config, kvevict, config_path, workdir, dir, cpus));
    write_script(folder / "merge.sbatch", merge_script(*args, config, kvevict, dir, db));
    write_script(folder / "submit.sh", submit_script(dir));
    std::cout << "kvevict: wrote " << (folder / "eval-array.sbatch").string() << " (job array 0-" << args->shards - 1
              << ": kvevict eval --shard I/" << args->shards << " per task)\n"
              << "kvevict: wrote " << (folder / "merge.sbatch").string() << " (kvevict merge into " << db << ")\n"
              << "kvevict: wrote " << (folder / "submit.sh").string()
              << " (the merge runs after every task succeeded: --dependency=afterok)\n"
              << "submit with: bash " << shell_quote((folder / "submit.sh").string()) << "\n";
    return 0;
  };
}

KVEVICT_COMMAND("slurm", "Write SLURM job-array scripts for a sharded eval and its merge", setup_slurm, 14);

}  // namespace
