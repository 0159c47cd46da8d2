// The production PrefillEvictor: policy files compiled by the DSL loader, applied by the eviction
// engine from one PrefillRecorder whose window and accumulated attention cover every policy.
#include <algorithm>
#include <map>

#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "evals/prefill_evictor.h"

namespace kvevict::evals {
namespace {

class EngineEvictor : public PrefillEvictor {
 public:
  explicit EngineEvictor(uint64_t seed) : seed_(seed) {}

  void prepare(const std::vector<PolicyChoice>& policies, const Model& model) override {
    config_ = model.config;
    for (const auto& choice : policies) {
      auto program = load_policy(choice.policy, choice.params);
      window_ = std::max(window_, program->description().window);
      accumulated_ = accumulated_ || program->description().needs_accumulated_attention;
      programs_[choice.label] = std::move(program);
    }
  }

  ForwardObserver* start_recording() override {
    engine_.reset();
    recorder_ = std::make_unique<PrefillRecorder>(window_, accumulated_);
    return recorder_.get();
  }

  ForwardObserver* apply(const PolicyChoice& policy, const Budget& budget, KVCache& cache) override {
    const PolicyProgram& program = *programs_.at(policy.label);
    EngineOptions options;
    options.budget = budget;
    options.seed = seed_;
    engine_ = std::make_unique<EvictionEngine>(program, config_, options);
    engine_->apply_after_prefill(*recorder_, cache);
    return program.description().run.decode_every > 0 ? engine_.get() : nullptr;
  }

 private:
  uint64_t seed_;
  ModelConfig config_;
  std::map<std::string, std::unique_ptr<PolicyProgram>> programs_;
  int window_ = 0;
  bool accumulated_ = false;
  std::unique_ptr<PrefillRecorder> recorder_;
  std::unique_ptr<EvictionEngine> engine_;
};

}  // namespace

std::unique_ptr<PrefillEvictor> make_engine_evictor(uint64_t seed) { return std::make_unique<EngineEvictor>(seed); }

}  // namespace kvevict::evals
