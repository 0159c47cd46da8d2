// bench_gpu_agreement: issue 10's CPU-vs-GPU agreement figures on a real model (SmolLM2 by default).
// For the full cache and each policy it runs the same prompt through two decoders, A (the reference,
// the CPU by default) and B (the device, CUDA by default), and reports:
//   - greedy ids: B decodes with A's ids fed back (teacher forcing, so every step compares the same
//     context); a step agrees when B's argmax equals A's. A disagreement where A's top-2 margin is
//     within the logit tolerance below is a near tie (fp16 may flip it) and is counted apart;
//   - logits: max |B - A| over the prefill's and every step's logits, and that relative to the
//     logits' scale, against the tolerance 0.02 * (1 + max |A|) (tests/core/cuda_decoder_test.cpp
//     derives it: fp16 weights and GEMM inputs, u = 2^-11, about 7 rounded products per layer);
//   - kept sets per (layer, KV head) after the prefill and after the last step, and the first step
//     where they differ (KeptSetFork, core/engine/kept_set_comparison.h). Each differing entry is
//     classified with A's own selection scores (EngineOptions::trace_selection): a near tie when it
//     lies within `--score-tol` (relative to the head's largest |score|) of A's top-k boundary, real
//     otherwise, unclassified when A's latest selection did not rank it (evicted at an earlier
//     step). The default 1e-2 is the logit tolerance's order: scores are sums of softmax
//     probabilities whose exponents carry the logits' relative error. Only the first divergence
//     says anything about the backends: after it the caches differ, so later scores and logits do
//     too (CAKE's decode pooling along cache slots spreads one flip quickly);
//   - logits while the caches are the same ("same" steps: the prefill and the decode steps up to
//     the first divergence) against the tolerance, and over all steps for reference.
// The verdict `ok`: logits within the tolerance while the caches are the same, and the first
// divergence (if any) made of near ties only.
// Nothing is asserted: it prints a table (and JSON with --json) for docs/PERFORMANCE.md.
//   bench_gpu_agreement [--model PATH] [--prompt-tokens N] [--tokens 64] [--policies snapkv,cake,h2o]
//                       [--budget 10%] [--a cpu|cuda] [--b cuda|cpu] [--kv-a f16] [--kv-b f16]
//                       [--score-tol 1e-2] [--json FILE]
// Without a CUDA build or device (and --b cuda) it prints `skipped: <why>` and exits 0. `--b cpu
// --kv-b f32` checks the benchmark itself on a CPU (F16 vs F32 cache).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "core/decode/sampler.h"
#include "core/decode/decoder.h"
#include "core/decode/make_decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/engine/kept_set_comparison.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "jit/device.h"
#include "jit/scoring_backend.h"

using namespace kvevict;

namespace {

struct Options {
  std::string model, budget = "10%", a = "cpu", b = "cuda", kv_a = "f16", kv_b = "f16", json;
  std::vector<std::string> policies = {"snapkv", "cake", "h2o"};  // h2o: the column sums' path
  int prompt_tokens = 512, tokens = 64;
  double score_tol = 1e-2;
};

Options parse_options(int argc, char** argv) {
  Options o;
  o.model = bench::default_smollm2_path();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw UsageError("bench_gpu_agreement: " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--prompt-tokens") o.prompt_tokens = std::max(8, bench::parse_int_option(a, v));
    else if (a == "--tokens") o.tokens = std::max(1, bench::parse_int_option(a, v));
    else if (a == "--budget") o.budget = v;
    else if (a == "--a") o.a = v;
    else if (a == "--b") o.b = v;
    else if (a == "--kv-a") o.kv_a = v;
    else if (a == "--kv-b") o.kv_b = v;
    else if (a == "--score-tol") o.score_tol = bench::parse_double_option(a, v);
    else if (a == "--json") o.json = v;
    else if (a == "--policies") {
      o.policies.clear();
      std::stringstream in(v);
      for (std::string p; std::getline(in, p, ',');)
        if (!p.empty()) o.policies.push_back(p);
    } else {
      throw UsageError("bench_gpu_agreement: unknown option " + a);
    }
  }
  return o;
}

// A long, ordinary English prompt (a story told several times with variations), tokenized by the
// model and cut to `n` tokens: real text gives the attention patterns eviction sees in practice.
std::vector<int> make_prompt(const Model& model, int n) {
  static const char* kSentences[] = {
      "The lighthouse keeper counted the ships that passed each night and wrote their names in a book. ",
      "One winter a storm broke the lamp, and the village sent a boy with oil and a new glass. ",
      "He climbed the stairs, three hundred and twelve of them, while the wind tore at the shutters. ",
      "When the light turned again, a fishing boat found the harbour and its crew sang on the quay. ",
      "Years later the boy kept the lighthouse himself and still counted the ships in the old book. ",
  };
  std::string text;
  std::vector<int> ids;
  for (int round = 0; static_cast<int>(ids.size()) < n && round < 1000; ++round) {
    text += kSentences[round % 5];
    if (round % 7 == 3) text += "In the margin someone had written the number " + std::to_string(round * 37) + ". ";
    ids = model.tokenizer->encode(text, true);
  }
  if (static_cast<int>(ids.size()) < n) throw RuntimeError("bench_gpu_agreement: the prompt text is too short");
  ids.resize(static_cast<size_t>(n));
  return ids;
}

struct DeviceSide {
  jit::DeviceChoice device;
  KvType kv_type = KvType::F16;
};

// One decoder run: the prompt's prefill (with the policy), then `forced` fed one token at a time.
struct Run {
  std::vector<int> ids;                    // the ids fed after the prompt
  std::vector<std::vector<float>> logits;  // after the prefill, then after each fed id
  // The engine's report right after the prefill's eviction, then after each fed id (decode-time
  // evictions): the kept sets of every step, for the first divergence (KeptSetFork).
  std::vector<EvictionReport> reports;
  std::vector<CacheOrder> orders;  // the cache's slot orders at the same moments
};

// `forced` null: greedy, each step feeding the previous logits' argmax (A). Otherwise those ids
// are fed (B, teacher-forced on A's). Either way `ids` holds the o.tokens ids fed.
Run run(const Model& model, const DeviceSide& side, const std::string& policy, const Options& o,
        const std::vector<int>& prompt, const std::vector<int>* forced) {
  std::unique_ptr<PolicyProgram> program;
  std::unique_ptr<EvictionEngine> engine;
  if (policy != "full") {
    const auto backend = jit::resolve_scoring("auto", side.device, "--scoring");
    program = jit::load_scored_policy(policy, {}, {}, backend, side.device);
    EngineOptions options{Budget::parse(o.budget), 0};
    options.trace_selection = true;
    engine = std::make_unique<EvictionEngine>(*program, model.config, options);
  }
  const DecoderDevice kind = side.device.kind == jit::DeviceKind::Cuda ? DecoderDevice::Cuda : DecoderDevice::Cpu;
  auto decoder = make_decoder(model, kind, {.device_ordinal = side.device.ordinal, .kv_type = side.kv_type});
  Run r;
  r.logits.push_back(prefill_prompt(*decoder, prompt, engine.get(), engine.get()));
  if (engine) r.reports.push_back(engine->report()), r.orders.push_back(cache_order(decoder->cache()));
  for (int i = 0; i < o.tokens; ++i) {
    r.ids.push_back(forced ? (*forced)[static_cast<size_t>(i)] : argmax(r.logits.back()));
    r.logits.push_back(decoder->forward(std::span<const int>(&r.ids.back(), 1), engine.get()));
    if (engine) r.reports.push_back(engine->report()), r.orders.push_back(cache_order(decoder->cache()));
  }
  return r;
}

double top2_margin(const std::vector<float>& v) {
  std::vector<float> c(v);
  std::partial_sort(c.begin(), c.begin() + 2, c.end(), std::greater<float>());
  return static_cast<double>(c[0]) - c[1];
}

nlohmann::json kept_json(const KeptSetComparison& c) {
  return {{"heads", c.heads},
          {"heads_identical", c.heads_identical},
          {"entries_kept_a", c.entries_kept_a},
          {"kept_count_shift", c.kept_count_shift},
          {"kept_count_moved", c.kept_count_moved},
          {"entries_differing", c.entries_differing},
          {"differing_near_ties", c.differing_near_ties},
          {"differing_real", c.differing_real()},
          {"differing_unclassified", c.differing_unclassified},
          {"heads_untraced", c.heads_untraced},
          {"heads_reordered", c.heads_reordered},
          {"slots_differing", c.slots_differing},
          {"slots_near_ties", c.slots_near_ties},
          {"slots_real", c.slots_real()},
          {"slots_unclassified", c.slots_unclassified}};
}

nlohmann::json compare_policy(const Model& model, const DeviceSide& a, const DeviceSide& b, const std::string& policy,
                              const Options& o, const std::vector<int>& prompt) {
  const Run ra = run(model, a, policy, o, prompt, nullptr);
  const Run rb = run(model, b, policy, o, prompt, &ra.ids);
  const std::vector<int>& ids = ra.ids;
  // The first step whose kept sets differ (step 0: the prefill). Logits up to and including that
  // step were computed on identical caches (a layer's eviction runs after its attention and only
  // touches its own cache); later ones on caches that have parted, so they say nothing about the
  // backends and are reported apart.
  KeptSetFork fork(o.score_tol);
  for (size_t s = 0; s < ra.reports.size() && s < rb.reports.size(); ++s)
    if (!fork.observe(static_cast<int>(s), ra.reports[s], rb.reports[s], &ra.orders[s], &rb.orders[s])) break;
  const size_t same_cache_steps = fork.parted() ? static_cast<size_t>(fork.step()) + 1 : ra.logits.size();
  double max_abs = 0, max_logit = 0, prefill_abs = 0, same_cache_abs = 0, same_cache_logit = 0;
  int agree = 0, near_tie_flips = 0, first_disagreement = -1;
  for (size_t s = 0; s < ra.logits.size(); ++s) {
    const auto &la = ra.logits[s], &lb = rb.logits[s];
    double step_max = 0, step_scale = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      step_max = std::max(step_max, std::abs(static_cast<double>(lb[i]) - la[i]));
      step_scale = std::max(step_scale, std::abs(static_cast<double>(la[i])));
    }
    max_abs = std::max(max_abs, step_max);
    if (s == 0) prefill_abs = step_max;
    max_logit = std::max(max_logit, step_scale);
    if (s < same_cache_steps) {
      same_cache_abs = std::max(same_cache_abs, step_max);
      same_cache_logit = std::max(same_cache_logit, step_scale);
    }
    if (s + 1 == ra.logits.size()) break;  // the last logits have no greedy step to compare
    const double tolerance = 0.02 * (1 + step_scale);
    if (argmax(la) == argmax(lb)) {
      ++agree;
    } else {
      if (first_disagreement < 0) first_disagreement = static_cast<int>(s);
      if (top2_margin(la) <= tolerance) ++near_tie_flips;
    }
  }
  const double same_cache_tol = 0.02 * (1 + same_cache_logit);
  nlohmann::json r{{"policy", policy},
                   {"steps", static_cast<int>(ids.size())},
                   {"greedy_ids_agree", agree},
                   {"first_disagreement", first_disagreement},
                   {"disagreements_near_tie", near_tie_flips},
                   {"logits_max_abs_diff", max_abs},
                   {"prefill_logits_max_abs_diff", prefill_abs},
                   {"logits_max_abs", max_logit},
                   {"logits_tolerance", 0.02 * (1 + max_logit)},
                   {"logits_within_tolerance", max_abs <= 0.02 * (1 + max_logit)},
                   {"same_cache_steps", static_cast<int>(same_cache_steps)},
                   {"same_cache_logits_max_abs_diff", same_cache_abs},
                   {"same_cache_logits_tolerance", same_cache_tol},
                   {"same_cache_logits_within_tolerance", same_cache_abs <= same_cache_tol}};
  if (policy != "full" && !ra.reports.empty() && !rb.reports.empty()) {
    r["kept"] = kept_json(compare_kept_sets(ra.reports.front(), rb.reports.front(), o.score_tol));
    r["kept_after_decode"] = kept_json(compare_kept_sets(ra.reports.back(), rb.reports.back(), o.score_tol));
    r["kept_fork"] = {{"parted", fork.parted()},
                      {"step", fork.step()},
                      {"only_near_ties", !fork.parted() || fork.at_fork().only_near_ties()},
                      {"at_fork", kept_json(fork.at_fork())},
                      {"describe", fork.describe()}};
  }
  // The verdict: the logits agree while the caches are the same, and the caches part (if they do)
  // on near ties only.
  r["ok"] = same_cache_abs <= same_cache_tol && (!r.contains("kept_fork") || r["kept_fork"]["only_near_ties"].get<bool>());
  return r;
}

void print_row(const nlohmann::json& r) {
  std::printf("%-10s %5d/%-3d %6d %11.4f %5d %9.4f %9.4f %9.4f %5s\n", r["policy"].get<std::string>().c_str(),
              r["greedy_ids_agree"].get<int>(), r["steps"].get<int>(), r["first_disagreement"].get<int>(),
              r["prefill_logits_max_abs_diff"].get<double>(), r["same_cache_steps"].get<int>(),
              r["same_cache_logits_max_abs_diff"].get<double>(), r["same_cache_logits_tolerance"].get<double>(),
              r["logits_max_abs_diff"].get<double>(), r["ok"].get<bool>() ? "yes" : "NO");
  for (const char* when : {"kept", "kept_after_decode"}) {
    if (!r.contains(when)) continue;
    const auto& k = r[when];
    std::printf("    %-18s heads %d/%d identical, %lld entries differ (%lld near ties, %lld real, %lld unclassified), "
                "kept counts shifted by %lld\n",
                when, k["heads_identical"].get<int>(), k["heads"].get<int>(), k["entries_differing"].get<long long>(),
                k["differing_near_ties"].get<long long>(), k["differing_real"].get<long long>(),
                k["differing_unclassified"].get<long long>(), k["kept_count_shift"].get<long long>());
  }
  if (r.contains("kept_fork"))
    std::printf("    %-18s %s\n", "first divergence", r["kept_fork"]["describe"].get<std::string>().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  DeviceSide a, b;
  a.kv_type = parse_kv_type(o.kv_a, "--kv-a");
  b.kv_type = parse_kv_type(o.kv_b, "--kv-b");
  for (const auto& [name, side] : {std::pair{o.a, &a}, std::pair{o.b, &b}}) {
    if (name != "cpu" && !cuda_decoder_built()) {
      std::printf("bench_gpu_agreement: skipped: this build has no CUDA decoder (no CUDA toolkit at build time)\n");
      return 0;
    }
    try {
      side->device = jit::resolve_device(name);
    } catch (const std::exception& e) {
      std::printf("bench_gpu_agreement: skipped: no usable device '%s': %s\n", name.c_str(), e.what());
      return 0;
    }
  }
  if (!std::filesystem::is_regular_file(o.model)) {
    std::printf("bench_gpu_agreement: skipped: model %s not found (scripts/setup.sh fetches SmolLM2)\n", o.model.c_str());
    return 0;
  }
  const auto model = load_model(o.model);
  if (o.prompt_tokens + o.tokens + 1 > model->config.context_length)
    throw UsageError("bench_gpu_agreement: --prompt-tokens + --tokens exceed the model's context");
  const std::vector<int> prompt = make_prompt(*model, o.prompt_tokens);
  std::printf("bench_gpu_agreement: %s, %d prompt tokens, %d greedy steps, budget %s; A = %s (%s), B = %s (%s)\n",
              o.model.c_str(), o.prompt_tokens, o.tokens, o.budget.c_str(), a.device.describe().c_str(),
              o.kv_a.c_str(), b.device.describe().c_str(), o.kv_b.c_str());
  std::printf("%-10s %9s %6s %11s %5s %9s %9s %9s %5s\n", "policy", "ids_agree", "first", "prefill|dl|", "same",
              "same|dl|", "tol", "max|dl|",
              "ok");
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::string> policies = {"full"};
  policies.insert(policies.end(), o.policies.begin(), o.policies.end());
  for (const std::string& policy : policies) {
    nlohmann::json r = compare_policy(*model, a, b, policy, o, prompt);
    print_row(r);
    rows.push_back(std::move(r));
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << nlohmann::json{{"model", o.model}, {"a", a.device.describe()}, {"b", b.device.describe()},
                          {"prompt_tokens", o.prompt_tokens}, {"budget", o.budget}, {"runs", rows}}
               .dump(2)
        << "\n";
    if (!out) throw RuntimeError("bench_gpu_agreement: cannot write " + o.json);
  }
  return 0;
} catch (const UsageError& e) {
  std::fprintf(stderr, "bench_gpu_agreement: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_agreement: %s\n", e.what());
  return 1;
}
