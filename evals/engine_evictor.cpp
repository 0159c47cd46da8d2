// The production PrefillEvictor: policy files compiled by the DSL loader, applied by the eviction
// engine from one PrefillRecorder whose window and accumulated attention cover every policy (and
// which holds KVzip's replay scores for each observe.replay setting, recorded once per sample).
#include <algorithm>
#include <map>

#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/engine/query_checks.h"
#include "evals/policy_source.h"
#include "evals/prefill_evictor.h"

namespace kvevict::evals {
namespace {

class EngineEvictor : public PrefillEvictor {
 public:
  EngineEvictor(uint64_t seed, jit::ScoringBackend backend, jit::DeviceChoice device)
      : seed_(seed), backend_(backend), device_(std::move(device)) {}

  void prepare(const std::vector<PolicyChoice>& policies, const Model& model) override {
    config_ = model.config;
    for (const auto& choice : policies) {
      LoadedPolicy loaded = load_policy_choice(choice, backend_, device_);  // the text read once is the text compiled and stored
      const PolicyDescription& d = loaded.program->description();
      accumulated_ = accumulated_ || d.needs(TensorSignal::AccumulatedAttention);
      hidden_norms_ = hidden_norms_ || d.needs(TensorSignal::HiddenNorm);
      hidden_states_ = hidden_states_ || d.needs(TensorSignal::HiddenState);
      output_grams_ = output_grams_ || d.needs(TensorSignal::OutputNorm);
      output_projection_ = output_projection_ || d.needs(TensorSignal::OutputNormL1);
      if (d.observe.replay.enabled && std::find(replays_.begin(), replays_.end(), d.observe.replay) == replays_.end())
        replays_.push_back(d.observe.replay);
      // (A policy that prefills itself, run.prefill_block, takes nothing from the recording.)
      if (reads_query_statistics(d) && d.run.prefill_block == 0) {
        bool& covariance = statistics_[d.observe.query_stats_from];
        covariance = covariance || d.needs(TensorSignal::QueryCovariance);
      }
      programs_[choice.label] = std::move(loaded.program);
      sources_[choice.label] = std::move(loaded.source);
    }
  }

  ForwardObserver* start_recording(int prompt_len) override {
    engine_.reset();
    // The prompt query statistics instead of every query: one request per position the sweep's
    // policies that read them count from.
    std::vector<QueryStatisticsRequest> statistics;
    for (const auto& [from, covariance] : statistics_) statistics.push_back({true, from, covariance});
    // Each distinct segment-local attention the sweep's policies read (A_seg: ChunkPress,
    // NonCausalAttnPress, Compactor), recorded as such instead of every query.
    std::vector<SegmentAttentionRequest> segments;
    for (const auto& [label, program] : programs_) {
      const SegmentAttentionRequest r = segment_attention_request_for(*program, prompt_len);
      if (r.enabled() && program->description().run.prefill_block == 0 &&
          std::find(segments.begin(), segments.end(), r) == segments.end())
        segments.push_back(r);
    }
    // Windows found from the prompt's tokens (FINCH) are known once the recording sees them.
    std::vector<const PolicyProgram*> token_windows;
    int window = 0;
    for (const auto& [label, program] : programs_) {
      if (program->description().observe.window_after_token >= 0) token_windows.push_back(program.get());
      else window = std::max(window, recorded_window_for(*program, prompt_len, statistics, segments));
    }
    recorder_ = std::make_unique<PrefillRecorder>(window, accumulated_);
    recorder_->request_query_statistics(std::move(statistics), config_, prompt_len);
    recorder_->request_segment_attention(std::move(segments), prompt_len);
    recorder_->keep_windows_found_from_tokens(std::move(token_windows), prompt_len);
    recorder_->request_model_signals({.hidden_norms = hidden_norms_,
                                      .output_grams = output_grams_,
                                      .output_projection = output_projection_,
                                      .hidden_states = hidden_states_});
    return recorder_.get();
  }

  void after_recording(Decoder& decoder) override {
    for (const PolicyObserve::Replay& settings : replays_) recorder_->record_replay(decoder, settings);
  }

  ForwardObserver* apply(const PolicyChoice& policy, const Budget& budget, KVCache& cache) override {
    const PolicyProgram& program = *programs_.at(policy.label);
    EngineOptions options;
    options.budget = budget;
    options.seed = seed_;
    engine_ = std::make_unique<EvictionEngine>(program, config_, options);
    engine_->apply_after_prefill(*recorder_, cache);
    return engine_->observes_decode() ? engine_.get() : nullptr;
  }

  bool prefills_itself(const PolicyChoice& policy) const override {
    return programs_.at(policy.label)->description().run.prefill_block > 0;
  }

  ForwardObserver* prefill_and_apply(const PolicyChoice& policy, const Budget& budget, Decoder& decoder,
                                     std::span<const int> prompt, std::vector<float>& logits) override {
    const PolicyProgram& program = *programs_.at(policy.label);
    engine_ = std::make_unique<EvictionEngine>(program, config_, EngineOptions{budget, seed_});
    logits = prefill_prompt(decoder, prompt, engine_.get(), engine_.get());
    return engine_->observes_decode() ? engine_.get() : nullptr;
  }

  PolicySource source(const PolicyChoice& choice) const override { return sources_.at(choice.label); }
  const EvictionReport* report() const override { return engine_ ? &engine_->report() : nullptr; }
  std::string scoring() const override { return std::string(mode_name(backend_)); }

 private:
  uint64_t seed_;
  jit::ScoringBackend backend_;
  jit::DeviceChoice device_;
  ModelConfig config_;
  std::map<std::string, std::unique_ptr<PolicyProgram>> programs_;
  std::map<std::string, PolicySource> sources_;  // by label
  bool accumulated_ = false, hidden_norms_ = false, output_grams_ = false, output_projection_ = false,
       hidden_states_ = false;
  std::vector<PolicyObserve::Replay> replays_;  // the distinct observe.replay settings (KVzip)
  std::map<int, bool> statistics_;  // the query_stats_from of the policies reading Q_mean / Q_cov: whether one reads Q_cov
  std::unique_ptr<PrefillRecorder> recorder_;
  std::unique_ptr<EvictionEngine> engine_;
};

}  // namespace

std::unique_ptr<PrefillEvictor> make_engine_evictor(uint64_t seed, jit::ScoringBackend backend, jit::DeviceChoice device) {
  return std::make_unique<EngineEvictor>(seed, backend, std::move(device));
}

}  // namespace kvevict::evals
