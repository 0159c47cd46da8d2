#pragma once
// Models with seeded random weights, for tests and benchmarks. Named geometries (spec
// "synthetic:NAME[:seed]"): smollm2-135m, llama-8b, llama3.1-8b (128K context), tiny. Weights are drawn uniformly with a
// 1/sqrt(fan-in) scale so activations stay O(1) through the layers; the tokenizer is byte-level
// (ids 0-255 are bytes, then BOS and EOS).
#include <cstdint>
#include <memory>
#include <string>

#include "core/model/model.h"

namespace kvevict {

// A model of any geometry (tests build GQA and odd-head-dim variants with this). Validates `config`.
std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed);

// The geometry of a named synthetic model; throws UsageError for an unknown name.
ModelConfig synthetic_config(const std::string& name);

}  // namespace kvevict
