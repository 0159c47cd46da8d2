// The real SampleRunner (contract in evals/model_runner.h).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "core/decode/decoder.h"
#include "core/decode/make_decoder.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "evals/metrics/metrics.h"
#include "evals/model_runner.h"
#include "evals/prompt_text.h"
#include "core/util/sha256.h"
#include "evals/text_hash.h"
#include "jit/device.h"

namespace kvevict::evals {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int argmax(const std::vector<float>& logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

class ModelRunner : public SampleRunner {
 public:
  ModelRunner(const EvalConfig& config, std::unique_ptr<PrefillEvictor> evictor)
      : config_(config), evictor_(std::move(evictor)) {
    // auto falls back to the CPU with one note; cuda without a usable GPU is a RuntimeError (exit 1).
    const jit::DeviceChoice device = jit::resolve_device(config.device);
    // Against the resolved device, before the model loads: a config asking for FlashInfer is never
    // run with the own kernel instead.
    check_prefill_attention(config, device.kind == jit::DeviceKind::Cuda, flashinfer_prefill_built());
    LoadOptions load_options;
    load_options.tokenizer_path = config.tokenizer;
    load_options.weights = config.weights;
    model_ = load_model(config.model, load_options);
    DecoderOptions options;
    options.threads = config.threads;
    options.kv_type = config.kv_type;
    options.device_ordinal = device.ordinal;
    options.prefill_attention = config.prefill_attention;  // recorded with the run (runs.prefill_attention)
    decoder_ = make_decoder(*model_, device.kind == jit::DeviceKind::Cuda ? DecoderDevice::Cuda : DecoderDevice::Cpu,
                            options);
    template_ = config.chat_template == "auto" ? model_->info.chat_template : config.chat_template;
    // Against the device the decoder runs on: auto is per_run on a GPU, where the engine observing
    // a prefill scores on the device and the shared path would score from a host copy of the cache.
    prefill_mode_ = resolve_prefill_mode(config.prefill, device.kind == jit::DeviceKind::Cuda);
  }

  std::string device() const override { return decoder_->device_name(); }
  std::string scoring() const override { return evictor_->scoring(); }
  PrefillMode prefill_mode() const override { return prefill_mode_; }

  std::string model_hash() override {
    if (model_hash_.empty()) {
      std::error_code unreadable;
      model_hash_ = std::filesystem::is_regular_file(config_.model, unreadable) ? sha256_file(config_.model)
                                                                                : sha256_text(config_.model);
    }
    return model_hash_;
  }

  int context_length() const override { return model_->config.context_length; }

  int count_tokens(std::string_view text) override {
    return static_cast<int>(model_->tokenizer->encode(text, false).size());
  }

  void prepare(const std::vector<PolicyChoice>& policies) override {
    evictor_->prepare(policies, *model_);
  }

  PolicySource policy_source(const PolicyChoice& policy) const override { return evictor_->source(policy); }

  PromptText prompt_text(const Sample& sample) override { return build_prompt_text(sample, template_); }

  const EvictionReport* eviction_report() const override { return evicted_ ? evictor_->report() : nullptr; }
  int gqa_group() const override { return model_->config.group_size(); }

  int positions_needed(const Sample& sample) override {
    tokenize(prompt_text(sample));
    const int prompt = static_cast<int>(prompt_tokens_.size());
    if (sample.fidelity) {
      return prompt + std::max(static_cast<int>(continuation_tokens_.size()), sample.greedy_tokens - 1);
    }
    return prompt + static_cast<int>(tail_tokens_.size()) + std::max(0, sample.max_new_tokens - 1);
  }

  void begin_prompt(const Sample& sample, const PromptText& text) override {
    sample_ = sample;
    evicted_ = false;
    tokenize(text);
    decoder_->reset();
    // In per_run no (policy, budget) evicts this prefill's cache, so nothing is recorded (no window
    // queries copied, no KVzip replay): it serves only the full cache and the fidelity references.
    const bool record = prefill_mode_ == PrefillMode::Shared;
    ForwardObserver* recorder = record ? evictor_->start_recording(static_cast<int>(prompt_tokens_.size())) : nullptr;
    auto start = Clock::now();
    prefill_logits_ = decoder_->forward(prompt_tokens_, recorder);
    if (record) evictor_->after_recording(*decoder_);  // e.g. KVzip's replay, shared by every (policy, budget)
    prefill_seconds_ = seconds_since(start);
    ++prefills_;
    snapshot_ = decoder_->snapshot();

    if (sample.fidelity) {
      // The full cache's teacher-forced distributions and greedy tokens are the reference.
      decoder_->forward(continuation_tokens_, nullptr, &reference_logits_);
      restore();
      reference_greedy_ = greedy(nullptr, sample.greedy_tokens, prefill_logits_, nullptr, nullptr);
    }
  }

  RunOutcome run(const PolicyChoice& policy, const Budget& budget) override {
    RunOutcome outcome;
    outcome.kv_bytes_full = static_cast<int64_t>(snapshot_->cache().bytes_in_use());
    const int64_t entries_full = snapshot_->cache().total_entries();
    auto start = Clock::now();
    ForwardObserver* decode_observer = evict(policy, budget);
    const double evict_seconds = seconds_since(start);
    const KVCache& kept = decoder_->cache_layout();  // counts only: no row comes to the host
    outcome.kept_ratio = entries_full ? static_cast<double>(kept.total_entries()) / entries_full : 1.0;
    outcome.kv_bytes = static_cast<int64_t>(kept.bytes_in_use());
    // What a device-resident cache holds beside that accounting (Decoder::device_kv_bytes): equal
    // for a dense cache; SpindleKV's codebook heads are held dense there beside the books.
    if (const std::optional<DeviceKvBytes> on_device = decoder_->device_kv_bytes()) {
      outcome.extra["kv_bytes_on_device"] = on_device->in_use;
      outcome.extra["codebook_bytes_on_device"] = on_device->codebooks;
    }
    outcome.extra["evict_ms"] = evict_seconds * 1e3;
    outcome.extra["prompt_tokens"] = prompt_tokens_.size();

    if (sample_.fidelity) {
      std::vector<float> logits;
      decoder_->forward(continuation_tokens_, decode_observer, &logits);
      const int vocab = model_->config.vocab_size;
      const size_t rows = continuation_tokens_.size();
      double kl = 0, agree = 0;
      for (size_t r = 0; r < rows; ++r) {
        kl += kl_divergence(&reference_logits_[r * vocab], &logits[r * vocab], vocab);
        agree += top1_agrees(&reference_logits_[r * vocab], &logits[r * vocab], vocab) ? 1 : 0;
      }
      outcome.kl = rows ? kl / rows : 0;
      outcome.top1_agreement = rows ? agree / rows : 1;
      decode_observer = evict(policy, budget);  // restores the snapshot, or prefills again (per_run)
      std::vector<int> tokens = greedy(decode_observer, sample_.greedy_tokens, prompt_logits(), nullptr, nullptr);
      outcome.greedy_agreement = sequence_agreement(reference_greedy_, tokens);
      outcome.prediction = model_->tokenizer->decode(tokens);
      outcome.ttft_ms = (shared_prefill_seconds() + evict_seconds) * 1e3;
      return outcome;
    }

    auto tail_start = Clock::now();
    // The question (asked after compression) goes through the decode observer like every token
    // after it: a per-step policy must see it (and may evict while it is appended).
    std::vector<float> first_logits =
        tail_tokens_.empty() ? prompt_logits() : decoder_->forward(tail_tokens_, decode_observer);
    double first_token_seconds = 0, decode_seconds = 0;
    std::vector<int> tokens = greedy(decode_observer, sample_.max_new_tokens, first_logits, &first_token_seconds,
                                     &decode_seconds);
    outcome.ttft_ms = (shared_prefill_seconds() + evict_seconds + seconds_since(tail_start) - decode_seconds) * 1e3;
    (void)first_token_seconds;
    outcome.decode_tok_s = tokens.size() > 1 && decode_seconds > 0 ? (tokens.size() - 1) / decode_seconds : 0;
    outcome.prediction = model_->tokenizer->decode(tokens);
    return outcome;
  }

  int64_t prefill_count() const override { return prefills_; }
  int64_t run_prefill_count() const override { return run_prefills_; }

 private:
  // Fills prompt_tokens_ (compressed part), tail_tokens_ (run after eviction) and
  // continuation_tokens_ (fidelity) from the prompt's text.
  void tokenize(const PromptText& text) {
    PromptIds ids = encode_prompt_text(*model_->tokenizer, text);
    prompt_tokens_ = std::move(ids.prefill);
    tail_tokens_ = std::move(ids.tail);
    continuation_tokens_ = std::move(ids.continuation);
  }

  // Back to the shared prefill's state (the CUDA decoder restores its device cache device-to-device).
  void restore() { decoder_->restore(*snapshot_); }

  // Restores the snapshot and applies one (policy, budget); returns the observer for decode steps
  // (null for the full cache or a prefill-only policy). An evicting run whose policy prefills by
  // itself (in blocks), or any evicting run in per_run mode, runs its own prefill with the engine
  // observing instead of restoring the snapshot; its logits are then its own.
  ForwardObserver* evict(const PolicyChoice& policy, const Budget& budget) {
    own_prefill_ = false;
    evicted_ = budget.kind != Budget::Kind::Full;
    if (evicted_ && (prefill_mode_ == PrefillMode::PerRun || evictor_->prefills_itself(policy))) {
      own_prefill_ = true;
      ++run_prefills_;
      decoder_->reset();  // the snapshot is not restored: this run's prefill replaces it
      return evictor_->prefill_and_apply(policy, budget, *decoder_, prompt_tokens_, own_logits_);
    }
    restore();
    if (!evicted_) return nullptr;
    return evictor_->apply(policy, budget, decoder_->cache());
  }

  // The logits after the prompt for the (policy, budget) evict() set up.
  const std::vector<float>& prompt_logits() const { return own_prefill_ ? own_logits_ : prefill_logits_; }
  // The shared prefill's time, when the (policy, budget) used it (its own prefill is in evict's time).
  double shared_prefill_seconds() const { return own_prefill_ ? 0.0 : prefill_seconds_; }

  // Greedy tokens from `logits` (the first is argmax(logits)); stops at a stop id (not included).
  // `decode_seconds` receives the time spent after the first token.
  std::vector<int> greedy(ForwardObserver* observer, int max_tokens, std::vector<float> logits, double* first_seconds,
                          double* decode_seconds) {
    std::vector<int> tokens;
    const auto stops = model_->tokenizer->stop_ids();
    auto start = Clock::now();
    for (int i = 0; i < max_tokens; ++i) {
      int next = argmax(logits);
      if (i == 0 && first_seconds) *first_seconds = seconds_since(start);
      if (std::find(stops.begin(), stops.end(), next) != stops.end()) break;
      tokens.push_back(next);
      if (i == 0) start = Clock::now();
      if (i + 1 < max_tokens) logits = decoder_->forward(std::vector<int>{next}, observer);
    }
    if (decode_seconds) *decode_seconds = tokens.size() > 1 ? seconds_since(start) : 0;
    return tokens;
  }

  EvalConfig config_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Decoder> decoder_;
  std::string template_;
  std::string model_hash_;
  std::unique_ptr<PrefillEvictor> evictor_;

  Sample sample_;
  std::vector<int> prompt_tokens_, tail_tokens_, continuation_tokens_;
  std::vector<float> prefill_logits_;
  double prefill_seconds_ = 0;
  bool own_prefill_ = false;        // the current (policy, budget) prefilled by itself (blocks, per_run)
  std::vector<float> own_logits_;  // its prompt logits
  std::unique_ptr<DecoderSnapshot> snapshot_;
  std::vector<float> reference_logits_;
  std::vector<int> reference_greedy_;
  int64_t prefills_ = 0, run_prefills_ = 0;  // shared full-cache prefills; runs' own prefills
  PrefillMode prefill_mode_ = PrefillMode::Shared;  // resolved (never Auto)
  bool evicted_ = false;  // the latest run() applied a policy (not the full budget)
};

}  // namespace

std::unique_ptr<SampleRunner> make_decoder_runner(const EvalConfig& config, std::unique_ptr<PrefillEvictor> evictor) {
  return std::make_unique<ModelRunner>(config, std::move(evictor));
}

std::unique_ptr<SampleRunner> make_model_runner(const EvalConfig& config) {
  // The engine first: without it there is nothing to evaluate, and the model need not be loaded.
  // The scoring backend is chosen here, once per run, for the device the decoder will use.
  const jit::DeviceChoice device = jit::resolve_device(config.device);
  auto evictor = make_engine_evictor(config.seed, jit::resolve_scoring(config.scoring, device, "scoring"), device);
  return make_decoder_runner(config, std::move(evictor));
}

}  // namespace kvevict::evals
