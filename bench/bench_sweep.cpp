// bench_sweep: the cost of a P-policy x B-budget sweep (one full-cache prefill per sample, then
// every (policy, budget) restores the snapshot, evicts and decodes) against one full-cache run of
// the same samples, and against the naive sweep that prefills again for every (policy, budget)
// (measured on the first sample only, then scaled by the sample count).
//
//   bench_sweep [--model PATH] [--tokenizer PATH] [--length N] [--samples N] [--policies N]
//               [--threads N] [--max-new N]
// With the eviction engine linked, the policies are the first N built-ins; otherwise every
// "policy" is a keep-most-recent evictor (the sweep mechanics are measured, not policy cost),
// and the output says so.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include "core/decode/kv_cache.h"
#include "core/util/error.h"
#include "evals/config.h"
#include "evals/model_runner.h"
#include "evals/tasks/task.h"

using namespace kvevict;
using namespace kvevict::evals;

namespace {

// Process CPU seconds: on a shared machine wall time depends on other load; with --threads 1 the
// CPU time of this process is the work done. Both are printed.
struct Stamp {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  std::clock_t cpu = std::clock();
};
struct Span {
  double wall = 0, cpu = 0;
};
Span since(const Stamp& t) {
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t.wall).count(),
          static_cast<double>(std::clock() - t.cpu) / CLOCKS_PER_SEC};
}

class KeepRecentEvictor : public PrefillEvictor {
 public:
  void prepare(const std::vector<PolicyChoice>&, const Model&) override {}
  ForwardObserver* start_recording() override { return nullptr; }
  ForwardObserver* apply(const PolicyChoice&, const Budget& budget, KVCache& cache) override {
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
};

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) try {
  const char* home = std::getenv("HOME");
  const char* dir = std::getenv("KVEVICT_MODEL_DIR");
  std::string model = arg(argc, argv, "--model",
                          (dir ? std::string(dir) : std::string(home ? home : "") + "/.cache/kvevict/models") +
                              "/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string tokenizer = arg(argc, argv, "--tokenizer", "");
  const int length = std::atoi(arg(argc, argv, "--length", "1024").c_str());
  const int samples = std::atoi(arg(argc, argv, "--samples", "2").c_str());
  const int n_policies = std::atoi(arg(argc, argv, "--policies", "10").c_str());
  const int threads = std::atoi(arg(argc, argv, "--threads", "2").c_str());
  const std::string max_new = arg(argc, argv, "--max-new", "");

  const std::vector<std::string> builtins = {"streamingllm", "h2o",   "tova", "snapkv", "pyramidkv",
                                             "adakv",        "knorm", "random", "cake", "nacl", "spindlekv"};
  std::string yaml = "name: bench\nmodel: " + model + "\n" + (tokenizer.empty() ? "" : "tokenizer: " + tokenizer + "\n") +
                     "threads: " + std::to_string(threads) + "\ntasks:\n  needle: {lengths: [" + std::to_string(length) +
                     "], depths: [50], samples: " + std::to_string(samples) + "}\npolicies: [";
  for (int p = 0; p < n_policies; ++p) yaml += (p ? ", " : "") + builtins[p % builtins.size()] + (p >= 11 ? std::to_string(p) : "");
  yaml += "]\nbudgets: [\"128\", \"25%\", \"50%\"]\n";
  EvalConfig config = parse_eval_config(yaml, "bench.yaml");

  std::unique_ptr<PrefillEvictor> evictor;
  std::string evictor_name = "eviction engine with built-in policies";
  try {
    evictor = make_engine_evictor(config.seed);
  } catch (const Error& e) {
    evictor = std::make_unique<KeepRecentEvictor>();
    evictor_name = "keep-most-recent stand-in (eviction engine not in this build)";
  }
  auto runner = make_decoder_runner(config, std::move(evictor));
  runner->prepare(config.policies);

  TaskContext context;
  context.seed = config.seed;
  context.count_tokens = [&](std::string_view text) { return runner->count_tokens(text); };
  ConfigErrors errors("bench.yaml", {});
  MapReader reader(errors, config.tasks[0].options, "tasks.needle");
  auto samples_list = find_task_type("needle")->make(reader, "needle")->generate(context);
  if (!max_new.empty()) {
    for (auto& s : samples_list) s.max_new_tokens = std::atoi(max_new.c_str());
  }
  Budget full = config.budgets[0];
  full.kind = Budget::Kind::Full;
  full.text = "full";

  // One full-cache run of the same samples.
  Stamp t;
  for (const auto& sample : samples_list) {
    runner->begin_sample(sample);
    runner->run(config.policies[0], full);
  }
  const Span full_run = since(t);

  // The sweep.
  t = Stamp();
  double prefill_time = 0;
  for (const auto& sample : samples_list) {
    Stamp p;
    runner->begin_sample(sample);
    prefill_time += since(p).cpu;
    for (const auto& policy : config.policies) {
      for (const auto& budget : config.budgets) runner->run(policy, budget);
    }
  }
  const Span sweep = since(t);

  // The naive sweep on the first sample: a new prefill for every (policy, budget).
  t = Stamp();
  for (const auto& policy : config.policies) {
    for (const auto& budget : config.budgets) {
      runner->begin_sample(samples_list[0]);
      runner->run(policy, budget);
    }
  }
  const Span naive_one = since(t);

  const int combos = static_cast<int>(config.policies.size() * config.budgets.size());
  std::printf("bench_sweep: model %s, %d samples x %d tokens, %d policies x %zu budgets, %d threads\n", model.c_str(),
              static_cast<int>(samples_list.size()), length, static_cast<int>(config.policies.size()),
              config.budgets.size(), threads);
  std::printf("evictor: %s\n", evictor_name.c_str());
  const double n = static_cast<double>(samples_list.size());
  std::printf("                                    CPU s    wall s\n");
  std::printf("one full-cache run of the samples : %8.2f  %8.2f\n", full_run.cpu, full_run.wall);
  std::printf("sweep (1 prefill/sample, %2d runs) : %8.2f  %8.2f   %.2fx the full-cache run (CPU); prefills %.2f CPU s\n",
              combos, sweep.cpu, sweep.wall, sweep.cpu / full_run.cpu, prefill_time);
  std::printf("naive sweep (prefill per run)     : %8.2f  %8.2f   first sample only; x%.0f samples = %.2f CPU s, %.2fx the sweep\n",
              naive_one.cpu, naive_one.wall, n, naive_one.cpu * n, naive_one.cpu * n / sweep.cpu);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "bench_sweep: error: %s\n", e.what());
  return e.exit_code();
}
