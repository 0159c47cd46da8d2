#pragma once
// A loaded model: geometry, weights (f32 or in their file format, see weights.h), tokenizer and provenance. `load_model` accepts
//   - a llama2.c legacy checkpoint (.bin) with tokenizer.bin next to it or given explicitly,
//   - a GGUF v2/v3 file of the llama architecture (tokenizer from its metadata),
//   - a Hugging Face folder: config.json + *.safetensors + tokenizer.json,
//   - "synthetic:NAME[:seed]" (a named geometry with seeded random weights, for tests/benchmarks).
// A malformed, truncated or hostile file raises ModelError naming the file and the problem.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/model/model_config.h"
#include "core/model/weights.h"
#include "core/tokenizer/tokenizer.h"

namespace kvevict {

struct ModelInfo {
  std::string format;                         // "llama2c" | "gguf" | "safetensors" | "synthetic"
  std::string path;                           // file or folder it came from
  std::map<std::string, int64_t> tensor_types;  // stored tensor type -> number of tensors ("F32", "Q4_1", ...)
  int64_t n_params = 0;                       // parameters in the stored tensors
  std::string chat_template = "none";         // "chatml" when the model declares ChatML, else "none"
};

struct Model {
  ModelConfig config;
  Weights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  ModelInfo info;
};

// How weight matrices are kept in memory (weights.h). Native keeps GGUF matrices in their file
// format, mapped from the file (no f32 copy); F32 dequantises everything (the reference path).
// Formats that are f32 on disk (llama2.c, synthetic, F32 GGUF/safetensors) are f32 either way.
enum class WeightStorage { Native, F32 };

// Parses "native" | "f32"; nullopt otherwise.
std::optional<WeightStorage> parse_weight_storage(const std::string& name);
const char* weight_storage_name(WeightStorage storage);

struct LoadOptions {
  std::string tokenizer_path;  // llama2.c: overrides tokenizer.bin next to the checkpoint
  WeightStorage weights = WeightStorage::Native;
};

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options = {});

// Format-specific loaders, called by load_model after it sniffs the file.
std::unique_ptr<Model> load_llama2c(const std::string& checkpoint, const std::string& tokenizer_path);
std::unique_ptr<Model> load_gguf(const std::string& path, WeightStorage weights = WeightStorage::Native);
std::unique_ptr<Model> load_hf_folder(const std::string& dir, WeightStorage weights = WeightStorage::Native);
std::unique_ptr<Model> make_synthetic_model(const std::string& spec);  // "synthetic:NAME[:seed]"

}  // namespace kvevict
