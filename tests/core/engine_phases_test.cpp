// EvictionReport's phase times (EnginePhase; prefill_phases / decode_phases) are accounting, not
// speed: for policies that evict while decoding (CAKE's decode indicator, H2O, TOVA) on the
// synthetic tiny model (random weights, always present), after the prefill every phase the policy
// ran was timed, the decode phases are still exactly zero, and after decode steps they are not;
// and the phases never sum to more than the engine's clock (`seconds`: each interval is charged to
// one phase only) nor to much less (every entry into the engine is covered). A second test wraps
// the policy program and the cache's listener in timers of their own: the scoring phase holds at
// least the program's time, and the cache-edit phase at least the keeps' (work charged to the
// wrong phase, or not timed, fails it). Only sums, signs and nesting are asserted, never a speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/util/stopwatch.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

constexpr int kPromptTokens = 200;
constexpr int kDecodeSteps = 6;
// Rounding of sums of doubles only: the phases of one call are nested inside its own clock.
constexpr double kRoundingSeconds = 1e-9;

int greedy(const std::vector<float>& logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::string phase_list(const EnginePhaseSeconds& p) {
  std::string out;
  for (size_t i = 0; i < kNumEnginePhases; ++i)
    out += std::string(mode_name(static_cast<EnginePhase>(i))) + "=" + std::to_string(p.seconds[i]) + " ";
  return out;
}

// Every phase of `p` is > 0 (each policy here runs all of them: signals, scores, a selection and a
// cache edit, and the engine's own bookkeeping as Other).
void expect_every_phase_timed(const EnginePhaseSeconds& p, const std::string& what) {
  for (size_t i = 0; i < kNumEnginePhases; ++i)
    EXPECT_GT(p.seconds[i], 0.0) << what << ": phase " << mode_name(static_cast<EnginePhase>(i)) << " was not timed ("
                                 << phase_list(p) << ")";
}

// The phases cover the engine's clock: no interval counted twice (sum <= seconds) and none lost to
// an untimed entry point (sum >= half of it; the gap is a few clock reads per call).
void expect_phases_cover_seconds(const EvictionReport& r, const std::string& what) {
  const double sum = r.prefill_phases.total() + r.decode_phases.total();
  EXPECT_LE(sum, r.seconds + kRoundingSeconds) << what << ": prefill " << phase_list(r.prefill_phases) << "decode "
                                               << phase_list(r.decode_phases) << "seconds=" << r.seconds;
  EXPECT_GE(sum, 0.5 * r.seconds) << what << ": prefill " << phase_list(r.prefill_phases) << "decode "
                                  << phase_list(r.decode_phases) << "seconds=" << r.seconds;
}

std::vector<int> test_prompt(const Model& model) {
  std::vector<int> prompt(kPromptTokens);
  for (int i = 0; i < kPromptTokens; ++i) prompt[i] = 1 + (i * 37) % (model.config.vocab_size - 1);
  return prompt;
}

// Holds the calling thread for `seconds` of wall time: work of a known share inside a phase, so
// that the phase's time is dominated by it whatever the machine's speed.
void hold(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

constexpr double kHoldSeconds = 20e-6;

// A policy program that times its own Scoring calls (score, stage_score, head_plan, layer_weight:
// what the engine charges to EnginePhase::Scoring) and forwards everything to `inner`.
class TimedProgram final : public PolicyProgram {
 public:
  explicit TimedProgram(const PolicyProgram& inner) : inner_(inner) {}
  mutable double seconds = 0;

  const PolicyDescription& description() const override { return inner_.description(); }
  void score(const ScoreInputs& in, bool decoding, float* out) const override {
    Stopwatch timed(&seconds);
    hold(kHoldSeconds);
    inner_.score(in, decoding, out);
  }
  double layer_weight(const LayerWeightInputs& in) const override {
    Stopwatch timed(&seconds);
    return inner_.layer_weight(in);
  }
  int window_for(int prompt_len) const override { return inner_.window_for(prompt_len); }
  PolicyProtect protect_for(int prompt_len) const override { return inner_.protect_for(prompt_len); }
  double decode_budget_for(int prompt_len, int decode_step, double budget) const override {
    return inner_.decode_budget_for(prompt_len, decode_step, budget);
  }
  void stage_score(int program, const ScoreInputs& in, float* out) const override {
    Stopwatch timed(&seconds);
    inner_.stage_score(program, in, out);
  }
  HeadPlan head_plan(const ScoreInputs& in) const override {
    Stopwatch timed(&seconds);
    return inner_.head_plan(in);
  }
  void channel_score(const ScoreInputs& in, float* out) const override { inner_.channel_score(in, out); }
  SelectionDevice selection_device() const override { return inner_.selection_device(); }
  std::string check_geometry(const ModelGeometry& model) const override { return inner_.check_geometry(model); }

 private:
  const PolicyProgram& inner_;
};

// A cache listener that times the keeps it hears (the engine's keeps run it inside
// EnginePhase::CacheEdit, as the CUDA decoder's device mirror is run).
class TimedKeeps final : public KvCacheListener {
 public:
  double seconds = 0;
  void on_keep(int, int, std::span<const int>) override {
    Stopwatch timed(&seconds);
    hold(kHoldSeconds);
  }
  void on_append(int, int, int32_t, const float*, const float*) override {}
  void on_write_entry(int, int, int) override {}
  void on_reassign(int, int) override {}
  void on_codebook(int, int) override {}
  void on_unfold() override {}
  void on_clear() override {}
  void on_replaced() override {}
};

TEST(EnginePhases, PrefillAndDecodeEvictionsTimeEveryPhaseWithinTheEngineClock) {
  const auto model = load_model("synthetic:tiny");
  const std::vector<int> prompt = test_prompt(*model);
  for (const char* name : {"cake", "h2o", "tova"}) {
    SCOPED_TRACE(name);
    const auto policy = load_policy(name);
    auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, model->config, {Budget::parse("25%"), 0});
    ASSERT_TRUE(engine.observes_decode()) << name << " must evict while decoding for this test";
    int next = greedy(decoder->forward(std::span<const int>(prompt), &engine));

    const EvictionReport after_prefill = engine.report();
    ASSERT_TRUE(after_prefill.prefill_evicted) << name << " must evict at prefill for this test";
    expect_every_phase_timed(after_prefill.prefill_phases, std::string(name) + " prefill");
    for (size_t i = 0; i < kNumEnginePhases; ++i)
      EXPECT_EQ(after_prefill.decode_phases.seconds[i], 0.0) << name << ": decode phase "
                                                             << mode_name(static_cast<EnginePhase>(i))
                                                             << " timed before any decode step";
    expect_phases_cover_seconds(after_prefill, std::string(name) + " after prefill");

    for (int step = 0; step < kDecodeSteps; ++step)
      next = greedy(decoder->forward(std::span<const int>(&next, 1), &engine));
    const EvictionReport& r = engine.report();
    ASSERT_GT(r.applications, after_prefill.applications) << name << " must evict while decoding for this test";
    expect_every_phase_timed(r.decode_phases, std::string(name) + " decode");
    // Decode calls charge the decode phases only.
    EXPECT_EQ(r.prefill_phases.seconds, after_prefill.prefill_phases.seconds) << name;
    expect_phases_cover_seconds(r, std::string(name) + " after decoding");
  }
}

// The work a phase encloses is charged to it: CAKE's program calls (scores, layer weights) to
// scoring, the cache's keeps (their listener) to cache_edit, at prefill and while decoding.
TEST(EnginePhases, ScoringAndCacheEditHoldTheWorkTheyEnclose) {
  const auto model = load_model("synthetic:tiny");
  const std::vector<int> prompt = test_prompt(*model);
  const auto cake = load_policy("cake");
  const TimedProgram program(*cake);
  auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  TimedKeeps keeps;
  decoder->cache().set_listener(&keeps);
  EvictionEngine engine(program, model->config, {Budget::parse("25%"), 0});
  int next = greedy(decoder->forward(std::span<const int>(prompt), &engine));
  const EvictionReport after_prefill = engine.report();
  ASSERT_GT(program.seconds, 0.0);
  ASSERT_GT(keeps.seconds, 0.0) << "CAKE must evict at prefill for this test";
  EXPECT_GE(after_prefill.prefill_phases[EnginePhase::Scoring], program.seconds)
      << phase_list(after_prefill.prefill_phases);
  EXPECT_GE(after_prefill.prefill_phases[EnginePhase::CacheEdit], keeps.seconds)
      << phase_list(after_prefill.prefill_phases);

  const double program_at_prefill = program.seconds, keeps_at_prefill = keeps.seconds;
  for (int step = 0; step < kDecodeSteps; ++step)
    next = greedy(decoder->forward(std::span<const int>(&next, 1), &engine));
  const EvictionReport& r = engine.report();
  ASSERT_GT(keeps.seconds, keeps_at_prefill) << "CAKE must evict while decoding for this test";
  EXPECT_GE(r.decode_phases[EnginePhase::Scoring], program.seconds - program_at_prefill) << phase_list(r.decode_phases);
  EXPECT_GE(r.decode_phases[EnginePhase::CacheEdit], keeps.seconds - keeps_at_prefill) << phase_list(r.decode_phases);
  decoder->cache().set_listener(nullptr);
}

}  // namespace
}  // namespace kvevict
