#pragma once
// Hugging Face model folders: config.json -> ModelConfig.
// Supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (model_type llama, mistral,
// qwen2). HF checkpoints keep q_proj/k_proj rows in the `rotate_half` order, so the config says
// RopeStyle::HalfSplit and the weights are used as stored (no permutation).
#include <string>

#include "core/model/model_config.h"

namespace kvevict {

// Parses config.json (the file at `config_path`). Throws ModelError(config_path, ...) naming the
// key on a missing or ill-typed field, and on unsupported features (architecture, rope scaling
// type, activation, attention/MLP biases outside Qwen2's q/k/v). The result is validated.
ModelConfig parse_hf_config(const std::string& config_path);

// The config.json text that parse_hf_config reads back as `c` (its geometry, RoPE base and
// scaling, norm epsilon, tied embeddings; the RoPE style is HalfSplit whatever `c` says, as for
// every HF checkpoint), naming `bos_id` / `eos_id` and `torch_dtype` (F32 -> "float32",
// F16 -> "float16", BF16 -> "bfloat16": what the shards hold). For writers of model folders
// (synthetic_folder.h) and tests.
std::string hf_config_text(const ModelConfig& c, int bos_id, int eos_id, const std::string& torch_dtype);

}  // namespace kvevict
