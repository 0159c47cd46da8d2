#include "core/model/model_config.h"

#include "core/util/error.h"

namespace kvevict {

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int v, const char* what, int64_t max) {
    if (v <= 0 || v > max) {
      throw ModelError(source, std::string("invalid ") + what + " = " + std::to_string(v) + " (expected 1.." +
                                   std::to_string(max) + ")");
    }
  };
  positive(n_layers, "layer count", 1024);
  positive(dim, "hidden size", 1 << 16);
  positive(n_heads, "query head count", 1024);
  positive(n_kv_heads, "KV head count", 1024);
  positive(head_dim, "head dim", 1024);
  positive(hidden_dim, "feed-forward size", 1 << 18);
  positive(vocab_size, "vocabulary size", 1 << 22);
  positive(context_length, "context length", 1 << 24);
  if (n_heads % n_kv_heads != 0) {
    throw ModelError(source, "query heads (" + std::to_string(n_heads) + ") are not a multiple of KV heads (" +
                                 std::to_string(n_kv_heads) + ")");
  }
  if (head_dim % 2 != 0) throw ModelError(source, "head dim " + std::to_string(head_dim) + " is odd; RoPE needs pairs");
  if (!(rope_theta > 0.0f)) throw ModelError(source, "rope theta must be positive");
  if (!(norm_eps > 0.0f) || norm_eps > 1.0f) throw ModelError(source, "RMSNorm epsilon out of range");
  if (rope_scaling.type != "none" && rope_scaling.type != "linear" && rope_scaling.type != "llama3") {
    throw ModelError(source, "unsupported rope scaling type '" + rope_scaling.type + "'");
  }
  if (!(rope_scaling.factor > 0.0f)) throw ModelError(source, "rope scaling factor must be positive");
}

}  // namespace kvevict
