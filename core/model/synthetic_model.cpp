#include "core/model/synthetic_model.h"

#include <algorithm>
#include <cmath>

#include "core/tokenizer/byte_tokenizer.h"
#include "core/util/error.h"

namespace kvevict {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-scale, scale) * sqrt(3) (unit variance times scale); each tensor has its own stream
// so tensors fill in parallel and the result does not depend on the thread count.
std::vector<float> random_tensor(size_t count, float scale, uint64_t seed, uint64_t tensor_id) {
  std::vector<float> out(count);
  const float a = scale * std::sqrt(3.0f);
  constexpr size_t kBlock = 1 << 16;
  const size_t blocks = (count + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; ++b) {
    uint64_t state = seed * 0x100000001B3ull ^ (tensor_id << 40) ^ b;
    const size_t end = std::min(count, (b + 1) * kBlock);
    for (size_t i = b * kBlock; i < end; ++i) {
      const double u = static_cast<double>(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
      out[i] = static_cast<float>((2.0 * u - 1.0) * a);
    }
  }
  return out;
}

}  // namespace

ModelConfig synthetic_config(const std::string& name) {
  ModelConfig c;
  c.architecture = "llama";
  c.name = "synthetic:" + name;
  if (name == "smollm2-135m") {
    c.n_layers = 30, c.dim = 576, c.n_heads = 9, c.n_kv_heads = 3, c.head_dim = 64, c.hidden_dim = 1536;
    c.vocab_size = 49152, c.context_length = 8192, c.rope_theta = 100000.0f;
  } else if (name == "llama-8b") {
    c.n_layers = 32, c.dim = 4096, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128, c.hidden_dim = 14336;
    c.vocab_size = 128256, c.context_length = 8192, c.rope_theta = 500000.0f;
    c.tied_embeddings = false;
  } else if (name == "llama3.1-8b") {
    // Llama-3.1-8B: llama-8b's geometry with a 128K context through llama3 RoPE scaling (factor 8,
    // as its config.json declares); the geometry CAKE's and issue 10's 128K figures use.
    c = synthetic_config("llama-8b");
    c.name = "synthetic:" + name;
    c.context_length = 131072;
    c.rope_scaling = {.type = "llama3", .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                      .original_max_position = 8192};
  } else if (name == "tiny") {
    c.n_layers = 2, c.dim = 64, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.hidden_dim = 96;
    c.vocab_size = 320, c.context_length = 1024, c.rope_theta = 10000.0f;
  } else {
    throw UsageError("unknown synthetic model '" + name + "' (known: smollm2-135m, llama-8b, llama3.1-8b, tiny)");
  }
  return c;
}

std::vector<SyntheticTensor> synthetic_tensors(const ModelConfig& c) {
  const int64_t D = c.dim, Q = c.q_dim(), KV = c.kv_dim(), H = c.hidden_dim, V = c.vocab_size;
  std::vector<SyntheticTensor> out;
  uint64_t id = 0;
  // Random tensors take the next stream id in this order; norm weights (scale 0) take none.
  auto add = [&](std::string name, int layer, std::vector<float> Weights::*model_member,
                 std::vector<float> LayerWeights::*layer_member, std::vector<int64_t> shape, float scale) {
    out.push_back({std::move(name), layer, model_member, layer_member, std::move(shape), scale, scale > 0 ? id++ : 0});
  };
  // Logits = embedding · x with |x| ~ sqrt(D) after the final norm: 3/sqrt(D) keeps them O(few units).
  const float embedding_scale = 3.0f / std::sqrt(float(D));
  const float fan_in_dim = 1.0f / std::sqrt(float(D));
  // Residual branches are damped so the stream does not grow with depth.
  const float branch = 1.0f / std::sqrt(2.0f * c.n_layers);
  add("model.embed_tokens.weight", -1, &Weights::token_embedding, nullptr, {V, D}, embedding_scale);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", l, nullptr, &LayerWeights::attn_norm, {D}, 0.0f);
    add(p + "post_attention_layernorm.weight", l, nullptr, &LayerWeights::ffn_norm, {D}, 0.0f);
    add(p + "self_attn.q_proj.weight", l, nullptr, &LayerWeights::wq, {Q, D}, fan_in_dim);
    add(p + "self_attn.k_proj.weight", l, nullptr, &LayerWeights::wk, {KV, D}, fan_in_dim);
    add(p + "self_attn.v_proj.weight", l, nullptr, &LayerWeights::wv, {KV, D}, fan_in_dim);
    add(p + "self_attn.o_proj.weight", l, nullptr, &LayerWeights::wo, {D, Q}, branch / std::sqrt(float(Q)));
    add(p + "mlp.gate_proj.weight", l, nullptr, &LayerWeights::w_gate, {H, D}, fan_in_dim);
    add(p + "mlp.up_proj.weight", l, nullptr, &LayerWeights::w_up, {H, D}, fan_in_dim);
    add(p + "mlp.down_proj.weight", l, nullptr, &LayerWeights::w_down, {D, H}, branch / std::sqrt(float(H)));
    if (c.qkv_bias) {
      add(p + "self_attn.q_proj.bias", l, nullptr, &LayerWeights::bq, {Q}, 0.1f);
      add(p + "self_attn.k_proj.bias", l, nullptr, &LayerWeights::bk, {KV}, 0.1f);
      add(p + "self_attn.v_proj.bias", l, nullptr, &LayerWeights::bv, {KV}, 0.1f);
    }
  }
  add("model.norm.weight", -1, &Weights::final_norm, nullptr, {D}, 0.0f);
  if (!c.tied_embeddings) add("lm_head.weight", -1, &Weights::output, nullptr, {V, D}, embedding_scale);
  return out;
}

size_t SyntheticTensor::count() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<float> synthetic_values(const SyntheticTensor& t, uint64_t seed) {
  if (t.scale <= 0) return std::vector<float>(t.count(), 1.0f);
  return random_tensor(t.count(), t.scale, seed, t.id);
}

std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed) {
  config.validate(config.name.empty() ? "synthetic model" : config.name);
  auto model = std::make_unique<Model>();
  model->config = config;
  const ModelConfig& c = model->config;
  Weights& w = model->weights;
  w.layers.resize(c.n_layers);
  const std::vector<SyntheticTensor> tensors = synthetic_tensors(c);
  int64_t params = 0;
  for (const SyntheticTensor& t : tensors) {
    std::vector<float>& into = t.layer < 0 ? w.*t.model_member : w.layers[static_cast<size_t>(t.layer)].*t.layer_member;
    into = synthetic_values(t, seed);
    params += static_cast<int64_t>(t.count());
  }
  model->tokenizer = make_byte_tokenizer(c.vocab_size);
  ModelInfo& info = model->info;
  info.format = "synthetic";
  info.path = c.name;
  info.tensor_types["F32"] = static_cast<int64_t>(tensors.size());
  info.n_params = params;
  return model;
}

SyntheticSpec parse_synthetic_spec(const std::string& spec) {
  const std::string prefix = "synthetic:";
  if (spec.rfind(prefix, 0) != 0) throw UsageError("not a synthetic model spec: '" + spec + "'");
  std::string name = spec.substr(prefix.size());
  uint64_t seed = 1;
  if (const size_t colon = name.find(':'); colon != std::string::npos) {
    const std::string seed_text = name.substr(colon + 1);
    name = name.substr(0, colon);
    size_t used = 0;
    try {
      seed = std::stoull(seed_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != seed_text.size()) throw UsageError("bad seed '" + seed_text + "' in '" + spec + "'");
  }
  return {synthetic_config(name), seed};
}

std::unique_ptr<Model> make_synthetic_model(const std::string& spec) {
  const SyntheticSpec parsed = parse_synthetic_spec(spec);
  return make_random_model(parsed.config, parsed.seed);
}

}  // namespace kvevict
