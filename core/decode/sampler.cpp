#include "core/decode/sampler.h"

#include <cmath>
#include <stdexcept>

namespace kvevict {

int argmax(const std::vector<float>& logits) {
  if (logits.empty()) throw std::invalid_argument("argmax: empty logits");
  int best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int>(i);
  }
  return best;
}

Sampler::Sampler(float temperature, uint64_t seed) : temperature_(temperature), rng_(seed) {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    throw std::invalid_argument("temperature must be a finite number >= 0");
  }
}

int Sampler::sample(const std::vector<float>& logits) {
  const int best = argmax(logits);
  if (temperature_ == 0.0f) return best;
  probs_.resize(logits.size());
  const double max_logit = logits[best];
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs_[i] = std::exp((logits[i] - max_logit) / temperature_);
    total += probs_[i];
  }
  // Inverse-CDF draw; the uniform comes from the generator's raw bits so results do not depend on
  // the standard library's distribution implementation.
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * total;
  double acc = 0.0;
  for (size_t i = 0; i < probs_.size(); ++i) {
    acc += probs_[i];
    if (u < acc) return static_cast<int>(i);
  }
  return best;
}

}  // namespace kvevict
