#pragma once
// A synthetic model (synthetic_model.h) written as a Hugging Face model folder, so that a benchmark
// can load a model of a real geometry from a file the way a user's checkpoint loads (mapped, its
// matrices kept in their 16-bit file format) and measure what loading costs: issue 10's host peak
// RSS against the weight file, on an accelerator machine that holds no real 8B checkpoint
// (bench/write_synthetic_model.cpp; scripts/device-check.sh).
//
// The folder holds config.json (hf_config_text), tokenizer.json (the synthetic byte tokenizer as a
// byte-level BPE vocabulary: ids 0-255 the bytes, 256 "<s>" and 257 "</s>" special, no merges) and
// model.safetensors, every tensor of synthetic_tensors() in its order, F16 or BF16 (rounded to
// nearest even from synthetic_values). Loaded, it is the synthetic model of the same config and
// seed with RopeStyle::HalfSplit (HF's pairing, which config.json implies) and its weights rounded
// to that type. Tensors are drawn and written one at a time: the writer holds one tensor in f32 and
// its 16-bit copy at once, never the model.
#include <cstdint>
#include <string>

#include "core/model/model_config.h"

namespace kvevict {

enum class SyntheticFolderType { F16, BF16 };

// Writes the folder `dir` (created when missing; an existing model.safetensors, config.json or
// tokenizer.json in it is replaced, the shard removed first). The shard is written as
// model.safetensors.partial and renamed when complete, so a cut or failed write leaves no shard.
// Returns the shard's size in bytes. Throws RuntimeError naming the file when a write fails,
// UsageError for a config it cannot write (validated as make_random_model does; an architecture
// without a Hugging Face class; q/k/v biases other than Qwen2's; a vocabulary without room for
// the tokenizer's BOS and EOS).
uint64_t write_synthetic_hf_folder(const ModelConfig& config, uint64_t seed, const std::string& dir,
                                   SyntheticFolderType type = SyntheticFolderType::F16);

}  // namespace kvevict
