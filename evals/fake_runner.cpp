#include "evals/fake_runner.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "core/util/error.h"
#include "evals/metrics/metrics.h"
#include "evals/policy_source.h"
#include "evals/util/rng.h"
#include "evals/text_hash.h"

namespace kvevict::evals {
namespace {

std::string strip_punctuation(const std::string& word) {
  std::string out;
  for (char c : word) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

FakeRunner::FakeRunner(const std::string& spec, PrefillMode prefill)
    : spec_(spec), prefill_(resolve_prefill_mode(prefill, false)) {
  std::string options = spec.substr(spec.find(':') + 1);
  if (options.rfind("delay_ms=", 0) == 0) {
    delay_ms_ = std::atoi(options.c_str() + 9);
  } else if (!options.empty()) {
    throw UsageError("model '" + spec + "': the fake model accepts only 'fake:' or 'fake:delay_ms=N'");
  }
}

std::string FakeRunner::model_hash() { return sha256_text(spec_); }

int FakeRunner::count_tokens(std::string_view text) { return static_cast<int>(split_words(text).size()); }

void FakeRunner::prepare(const std::vector<PolicyChoice>& policies) {
  for (const auto& choice : policies) {
    sources_[choice.label] = make_policy_source(choice, policy_text_if_any(choice), params_json_as_written(choice));
  }
}

PromptText FakeRunner::prompt_text(const Sample& sample) {
  PromptText text;
  text.prefill = sample.context;
  if (sample.fidelity) text.continuation = sample.continuation;
  else if (sample.query_aware) text.prefill += sample.separator + sample.question;
  else text.tail = sample.separator + sample.question;
  return text;
}

void FakeRunner::begin_prompt(const Sample& sample, const PromptText& text) {
  sample_ = sample;
  words_ = split_words(text.prefill);
  evicted_ = false;
  ++prefills_;
}

void FakeRunner::record_report(const PolicyChoice& policy, const Budget& budget, const std::vector<bool>& kept,
                               int keep) {
  evicted_ = budget.kind != Budget::Kind::Full;
  report_ = EvictionReport{};
  report_.policy = policy.label;
  report_.budget = budget.text;
  report_.prompt_len = static_cast<int>(kept.size());
  report_.stored_heads = 1;
  HeadReport head;
  head.budget = keep;
  for (int i = 0; i < static_cast<int>(kept.size()); ++i) {
    if (kept[i]) head.kept_positions.push_back(i);
  }
  head.kept = static_cast<int>(head.kept_positions.size());
  report_.bytes_full = kept.size() * 64;  // as RunOutcome::kv_bytes_full
  report_.bytes_kept = static_cast<size_t>(head.kept) * 64;
  report_.layers = {{head}};
  report_.prefill_evicted = evicted_ && head.kept < report_.prompt_len;
}

RunOutcome FakeRunner::run(const PolicyChoice& policy, const Budget& budget) {
  if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
  if (prefill_ == PrefillMode::PerRun && budget.kind != Budget::Kind::Full) ++run_prefills_;
  const int n = static_cast<int>(words_.size());
  int keep = n;
  if (budget.kind == Budget::Kind::Fraction) keep = static_cast<int>(std::ceil(budget.value * n));
  if (budget.kind == Budget::Kind::TokensPerHead) keep = std::min(n, static_cast<int>(budget.value));
  std::vector<bool> kept(n, false);
  int count = 0;
  auto take = [&](int i) {
    if (i >= 0 && i < n && !kept[i] && count < keep) {
      kept[i] = true;
      ++count;
    }
  };
  for (int i = 0; i < 4; ++i) take(i);
  Rng rng(derive_seed(0, policy.label));
  const double random_share = rng.unit();  // each label keeps its own mix of recent and random words
  int random_quota = static_cast<int>((keep - count) * random_share);
  for (int drawn = 0, tries = 0; drawn < random_quota && tries < 4 * n; ++tries) {
    int i = static_cast<int>(rng.below(std::max(1, n)));
    if (!kept[i]) {
      take(i);
      ++drawn;
    }
  }
  for (int i = n - 1; i >= 0 && count < keep; --i) take(i);
  record_report(policy, budget, kept, keep);

  std::set<std::string> surviving;
  for (int i = 0; i < n; ++i) {
    if (kept[i]) surviving.insert(strip_punctuation(words_[i]));
  }
  RunOutcome outcome;
  std::string answer;
  for (const auto& reference : sample_.references) {
    bool all = true;
    for (const auto& word : split_words(reference)) all = all && surviving.count(strip_punctuation(word));
    if (all) answer += (answer.empty() ? "" : " and ") + reference;
  }
  outcome.prediction = answer.empty() ? "unknown" : answer;
  outcome.kept_ratio = n ? static_cast<double>(count) / n : 1.0;
  outcome.kv_bytes_full = static_cast<int64_t>(n) * 64;
  outcome.kv_bytes = static_cast<int64_t>(count) * 64;
  outcome.ttft_ms = 0.01 * n;
  outcome.decode_tok_s = 1000.0;
  if (sample_.fidelity) {
    outcome.top1_agreement = outcome.kept_ratio;
    outcome.kl = 1.0 - outcome.kept_ratio;
    outcome.greedy_agreement = outcome.kept_ratio;
  }
  return outcome;
}

}  // namespace kvevict::evals
