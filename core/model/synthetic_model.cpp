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

std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed) {
  config.validate(config.name.empty() ? "synthetic model" : config.name);
  auto model = std::make_unique<Model>();
  model->config = config;
  const ModelConfig& c = model->config;
  const size_t D = c.dim, Q = c.q_dim(), KV = c.kv_dim(), H = c.hidden_dim, V = c.vocab_size;
  Weights& w = model->weights;
  uint64_t id = 0;
  // Logits = embedding · x with |x| ~ sqrt(D) after the final norm: 3/sqrt(D) keeps them O(few units).
  const float embedding_scale = 3.0f / std::sqrt(float(D));
  w.token_embedding = random_tensor(V * D, embedding_scale, seed, id++);
  w.layers.resize(c.n_layers);
  for (LayerWeights& l : w.layers) {
    l.attn_norm.assign(D, 1.0f);
    l.ffn_norm.assign(D, 1.0f);
    l.wq = random_tensor(Q * D, 1.0f / std::sqrt(float(D)), seed, id++);
    l.wk = random_tensor(KV * D, 1.0f / std::sqrt(float(D)), seed, id++);
    l.wv = random_tensor(KV * D, 1.0f / std::sqrt(float(D)), seed, id++);
    // Residual branches are damped so the stream does not grow with depth.
    const float branch = 1.0f / std::sqrt(2.0f * c.n_layers);
    l.wo = random_tensor(D * Q, branch / std::sqrt(float(Q)), seed, id++);
    l.w_gate = random_tensor(H * D, 1.0f / std::sqrt(float(D)), seed, id++);
    l.w_up = random_tensor(H * D, 1.0f / std::sqrt(float(D)), seed, id++);
    l.w_down = random_tensor(D * H, branch / std::sqrt(float(H)), seed, id++);
    if (c.qkv_bias) {
      l.bq = random_tensor(Q, 0.1f, seed, id++);
      l.bk = random_tensor(KV, 0.1f, seed, id++);
      l.bv = random_tensor(KV, 0.1f, seed, id++);
    }
  }
  w.final_norm.assign(D, 1.0f);
  if (!c.tied_embeddings) w.output = random_tensor(V * D, embedding_scale, seed, id++);
  model->tokenizer = make_byte_tokenizer(c.vocab_size);
  ModelInfo& info = model->info;
  info.format = "synthetic";
  info.path = c.name;
  int64_t tensors = 1 + 9 * static_cast<int64_t>(c.n_layers) + 1 + (c.tied_embeddings ? 0 : 1) + (c.qkv_bias ? 3 * c.n_layers : 0);
  info.tensor_types["F32"] = tensors;
  int64_t params = static_cast<int64_t>(V * D) * (c.tied_embeddings ? 1 : 2) + static_cast<int64_t>(D);
  params += static_cast<int64_t>(c.n_layers) * static_cast<int64_t>(2 * D + Q * D + 2 * KV * D + D * Q + 3 * H * D +
                                                                    (c.qkv_bias ? Q + 2 * KV : 0));
  info.n_params = params;
  return model;
}

std::unique_ptr<Model> make_synthetic_model(const std::string& spec) {
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
  ModelConfig config = synthetic_config(name);
  return make_random_model(config, seed);
}

}  // namespace kvevict
