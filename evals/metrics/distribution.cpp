// Distribution metrics for the fidelity task, computed in double precision with the max-shift
// log-sum-exp so large logits do not overflow.
#include <algorithm>
#include <cmath>

#include "evals/metrics/metrics.h"

namespace kvevict::evals {
namespace {

double log_sum_exp(const float* logits, int n, double max_logit) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  return max_logit + std::log(sum);
}

int argmax(const float* logits, int n) {
  return static_cast<int>(std::max_element(logits, logits + n) - logits);
}

}  // namespace

double kl_divergence(const float* reference_logits, const float* test_logits, int vocab) {
  double lse_p = log_sum_exp(reference_logits, vocab, reference_logits[argmax(reference_logits, vocab)]);
  double lse_q = log_sum_exp(test_logits, vocab, test_logits[argmax(test_logits, vocab)]);
  double kl = 0;
  for (int i = 0; i < vocab; ++i) {
    double log_p = reference_logits[i] - lse_p;
    double log_q = test_logits[i] - lse_q;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(0.0, kl);
}

bool top1_agrees(const float* reference_logits, const float* test_logits, int vocab) {
  return argmax(reference_logits, vocab) == argmax(test_logits, vocab);
}

double sequence_agreement(const std::vector<int>& reference, const std::vector<int>& test) {
  size_t longest = std::max(reference.size(), test.size());
  if (longest == 0) return 1.0;
  size_t same = 0;
  for (size_t i = 0; i < std::min(reference.size(), test.size()); ++i) same += reference[i] == test[i];
  return static_cast<double>(same) / longest;
}

}  // namespace kvevict::evals
