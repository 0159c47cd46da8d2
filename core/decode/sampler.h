#pragma once
// Picks the next token from logits: argmax at temperature 0 (ties: lowest id), otherwise a draw
// from softmax(logits / temperature) with a seeded generator, so runs are reproducible.
#include <cstdint>
#include <random>
#include <vector>

namespace kvevict {

class Sampler {
 public:
  explicit Sampler(float temperature = 0.0f, uint64_t seed = 0);  // throws std::invalid_argument if temperature < 0
  int sample(const std::vector<float>& logits);
  float temperature() const { return temperature_; }

 private:
  float temperature_;
  std::mt19937_64 rng_;
  std::vector<double> probs_;
};

int argmax(const std::vector<float>& logits);

}  // namespace kvevict
