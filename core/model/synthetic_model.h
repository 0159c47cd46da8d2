#pragma once
// Models with seeded random weights, for tests and benchmarks. Named geometries (spec
// "synthetic:NAME[:seed]"): smollm2-135m, llama-8b, llama3.1-8b (128K context), tiny. Weights are drawn uniformly with a
// 1/sqrt(fan-in) scale so activations stay O(1) through the layers; the tokenizer is byte-level
// (ids 0-255 are bytes, then BOS and EOS).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace kvevict {

// One tensor of a synthetic model: its name in a Hugging Face Llama checkpoint, where it goes in
// Weights (model_member for layer < 0, else layers[layer].*layer_member), its shape (row-major, as
// both Weights and the checkpoint hold it) and how it is drawn: uniform with unit variance times
// `scale` from the random stream (seed, id), or every value 1 (scale 0: the norm weights).
struct SyntheticTensor {
  std::string hf_name;
  int layer = -1;
  std::vector<float> Weights::*model_member = nullptr;
  std::vector<float> LayerWeights::*layer_member = nullptr;
  std::vector<int64_t> shape;
  float scale = 0.0f;
  uint64_t id = 0;
  size_t count() const;
};

// Every tensor of the synthetic model of `config`, in checkpoint order: the one list that both
// make_random_model and write_synthetic_hf_folder (synthetic_folder.h) draw from.
std::vector<SyntheticTensor> synthetic_tensors(const ModelConfig& config);

// A tensor's values for `seed` (the same on every call and thread count).
std::vector<float> synthetic_values(const SyntheticTensor& tensor, uint64_t seed);

// A model of any geometry (tests build GQA and odd-head-dim variants with this). Validates `config`.
std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed);

// The geometry of a named synthetic model; throws UsageError for an unknown name.
ModelConfig synthetic_config(const std::string& name);

// "synthetic:NAME[:seed]" (seed 1 when absent): the geometry and the seed make_synthetic_model
// (model.h) draws; UsageError for another prefix, an unknown name or a bad seed.
struct SyntheticSpec {
  ModelConfig config;
  uint64_t seed = 1;
};
SyntheticSpec parse_synthetic_spec(const std::string& spec);

}  // namespace kvevict
