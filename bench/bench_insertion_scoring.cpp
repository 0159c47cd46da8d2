// score_at insertion while decoding (dms, kvzap with decoding: true): the engine's time per decode
// step and the hidden-state records it holds, when each step scores its new entries alone (a decode
// indicator that scores each entry alone: dsl/entry_locality.h) against the same programs scoring
// whole heads at every step and recording every hidden state (PolicyWithDescription with
// decode_scores_each_entry_alone cleared: the engine's path before 2026-12-07, and still the path
// of an indicator that reads other entries).
//
//   bench_insertion_scoring [model] [prompt_tokens] [decode_steps]
//
// kvzap's shipped tables fit stories260K only; for another model this writes a kvzap file with
// random tables of the model's shape (weights N(0, 0.05), bias -1.5) into a temporary folder: the
// cost does not depend on the values. Figures: docs/PERFORMANCE.md.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/decode/blas_kernels.h"
#include "core/decode/decoder.h"
#include "core/decode/sampler.h"
#include "core/engine/engine.h"
#include "core/engine/policy_with_description.h"
#include "core/model/model.h"
#include "dsl/policy_loader.h"

using namespace kvevict;

namespace {

// A kvzap policy file with random tables of the model's shape; returns its path.
std::string write_kvzap_for(const ModelConfig& c, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(7);
  std::normal_distribution<float> w(0.0f, 0.05f);
  {
    std::ofstream f(dir / "w.tsv");
    for (int r = 0; r < c.n_layers * c.n_kv_heads; ++r) {
      for (int k = 0; k < c.dim; ++k) f << (k ? "\t" : "") << w(rng);
      f << "\n";
    }
    std::ofstream b(dir / "b.tsv");
    for (int l = 0; l < c.n_layers; ++l) {
      for (int h = 0; h < c.n_kv_heads; ++h) b << (h ? "\t" : "") << -1.5;
      b << "\n";
    }
  }
  const std::string shape = std::to_string(c.n_layers) + ", " + std::to_string(c.n_kv_heads);
  std::ofstream p(dir / "kvzap.yaml");
  p << "name: kvzap\nabout: kvzap with random tables (bench_insertion_scoring)\n"
    << "params:\n  threshold: {float: -1.5}\n  sliding_window_size: {int: 128}\n  decoding: {bool: true}\n"
    << "tables:\n  kvzap_w: {file: w.tsv, axes: [layer, kv_head, c], shape: [" << shape << ", " << c.dim << "]}\n"
    << "  kvzap_b: {file: b.tsv, axes: [layer, kv_head], shape: [" << shape << "]}\n"
    << "protect: {recent: sliding_window_size}\nrun: {prefill: true, decode_every: \"if(decoding, 1, 0)\"}\n"
    << "select: {threshold: threshold, score_at: insertion}\n"
    << "score: |\n  score[t] = sum(c: kvzap_w[layer, kv_head, c] * hidden[c, t]) + kvzap_b[layer, kv_head]\n";
  return (dir / "kvzap.yaml").string();
}

struct Run {
  double engine_decode_s = 0, decode_wall_s = 0;
  double scoring_s = 0;  // the engine's Signals and Scoring phases: what scoring the new entries costs
  double prefill_engine_s = 0, prefill_signals_s = 0;  // the prompt's engine time, and its Signals phase
  int64_t hidden_floats = 0, scored_alone = 0;
  double selection_s = 0, edit_s = 0, other_s = 0;  // the decode steps' Selection, CacheEdit and Other phases
  int64_t unchanged_keeps = 0;         // decode keeps that kept every entry in place (no edit)
  int64_t window_steps = 0;  // (layer, head) decode steps decided from the entries leaving the window
};

Run run(const Model& model, const std::vector<int>& prompt, const PolicyProgram& policy, int steps) {
  auto decoder = make_cpu_decoder(model);
  EvictionEngine engine(policy, model.config, {Budget::parse("100%"), 0});
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(prompt), &engine);
  const EnginePhaseSeconds prefill = engine.report().prefill_phases;
  const int64_t prompt_unchanged = engine.report().unchanged_keeps;
  const double w0 = bench::wall_seconds();
  for (int step = 0; step < steps; ++step) {
    const int next = argmax(*logits);
    logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
  }
  Run r;
  r.prefill_engine_s = prefill.total();
  r.prefill_signals_s = prefill[EnginePhase::Signals];
  r.decode_wall_s = bench::wall_seconds() - w0;
  const EnginePhaseSeconds& phases = engine.report().decode_phases;
  r.engine_decode_s = phases.total();
  r.scoring_s = phases[EnginePhase::Signals] + phases[EnginePhase::Scoring];
  r.hidden_floats = engine.report().hidden_state_floats_peak;
  r.scored_alone = engine.report().new_entries_scored_alone;
  r.selection_s = phases[EnginePhase::Selection];
  r.edit_s = phases[EnginePhase::CacheEdit];
  r.other_s = phases[EnginePhase::Other];  // the per-step report of every head's kept positions among it
  r.unchanged_keeps = engine.report().unchanged_keeps - prompt_unchanged;
  r.window_steps = engine.report().threshold_window_steps;
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  kvevict::use_matching_blas_kernels();
  const std::string path = argc > 1 ? argv[1] : bench::default_smollm2_path();
  const int n = argc > 2 ? bench::parse_int_option("prompt_tokens", argv[2]) : 2048;
  const int steps = argc > 3 ? bench::parse_int_option("decode_steps", argv[3]) : 32;
  auto model = load_model(path);
  const ModelConfig& c = model->config;
  std::vector<int> prompt;
  std::mt19937 rng(1);
  for (int i = 0; i < n; ++i) prompt.push_back(static_cast<int>(rng() % static_cast<unsigned>(c.vocab_size)));
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvevict_bench_insertion_" + std::to_string(::getpid()));
  std::printf("model %s: %d layers, %d KV heads, n_embd %d; prompt %d tokens, %d decode steps, budget 100%%\n",
              path.c_str(), c.n_layers, c.n_kv_heads, c.dim, n, steps);
  std::printf("%-6s %-22s %15s %14s %12s %14s %12s %16s %17s %17s %12s %13s %15s %12s\n", "policy",
              "decode steps score", "scoring ms/step", "engine ms/step", "wall ms/step", "hidden records", "scored alone",
              "prefill engine s", "prefill signals s", "selection ms/step", "edit ms/step", "other ms/step",
              "unchanged keeps", "window steps");
  for (const std::string name : {"dms", "kvzap"}) {
    const std::string file = name == "kvzap" && c.dim != 64 ? write_kvzap_for(c, dir) : name;
    const auto policy = load_policy(file, {{"decoding", "true"}});
    PolicyWithDescription whole_heads(*policy);
    whole_heads.edit().decode_scores_each_entry_alone = false;
    for (const bool alone : {true, false}) {
      const Run r = run(*model, prompt, alone ? static_cast<const PolicyProgram&>(*policy) : whole_heads, steps);
      std::printf("%-6s %-22s %15.3f %14.3f %12.3f %11.1f MB %12lld %16.3f %17.3f %17.3f %12.3f %13.3f %15lld %12lld\n",
                  name.c_str(), alone ? "the new entries alone" : "whole heads", 1e3 * r.scoring_s / steps,
                  1e3 * r.engine_decode_s / steps, 1e3 * r.decode_wall_s / steps,
                  4e-6 * static_cast<double>(r.hidden_floats), static_cast<long long>(r.scored_alone),
                  r.prefill_engine_s, r.prefill_signals_s, 1e3 * r.selection_s / steps, 1e3 * r.edit_s / steps,
                  1e3 * r.other_s / steps, static_cast<long long>(r.unchanged_keeps),
                  static_cast<long long>(r.window_steps));
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
} catch (const std::exception& e) {  // a missing model or a bad policy: say which, no abort
  std::fprintf(stderr, "bench_insertion_scoring: %s\n", e.what());
  return 1;
}
