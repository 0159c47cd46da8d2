#pragma once
// A small deterministic generator (SplitMix64). Task text must be identical on every platform for a
// seed, which std::uniform_*_distribution does not promise, so tasks draw only through this.
#include <cstdint>
#include <string>

namespace kvevict::evals {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0); the modulo bias is below 2^-40 for the small n used here.
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return (next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t state_;
};

// Seed for one (task, grid point, sample) so that adding a grid point never changes other samples.
inline uint64_t derive_seed(uint64_t seed, const std::string& label) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : label) h = (h ^ c) * 1099511628211ULL;
  return Rng(h).next();
}

}  // namespace kvevict::evals
