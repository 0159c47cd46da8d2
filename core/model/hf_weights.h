#pragma once
// Hugging Face safetensors tensors -> Weights. `load_hf_folder` (core/model/model.h,
// core/model/hf_loader.cpp) puts together parse_hf_config, load_hf_weights and load_hf_tokenizer.
#include "core/model/model.h"
#include "core/model/safetensors.h"

namespace kvevict {

// HF tensor names, per layer N: model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj}.weight, plus model.embed_tokens.weight,
// model.norm.weight and lm_head.weight (ignored when tied). Shapes are checked against `config`.
// Fills `info` (tensor types, parameter count) for the tensors it reads. With native storage the
// F16/BF16 matrices stay in the mapped shards (Weights::native_*, f32 vectors empty): the caller
// must then keep `tensors` alive in Weights::storage. F32 matrices and all vectors are f32.
Weights load_hf_weights(const SafetensorsModel& tensors, const ModelConfig& config, ModelInfo& info,
                        WeightStorage storage = WeightStorage::F32);

}  // namespace kvevict
