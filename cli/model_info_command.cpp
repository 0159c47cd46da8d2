// `kvevict model-info MODEL`: what a model file holds (geometry, tensor types, parameters).
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/model/model.h"

namespace kvevict::cli {
namespace {

nlohmann::json describe(const Model& m) {
  const ModelConfig& c = m.config;
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [type, count] : m.info.tensor_types) types[type] = count;
  return {
      {"path", m.info.path},
      {"format", m.info.format},
      {"architecture", c.architecture},
      {"name", c.name},
      {"layers", c.n_layers},
      {"hidden_size", c.dim},
      {"heads", c.n_heads},
      {"kv_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"feed_forward", c.hidden_dim},
      {"vocab", c.vocab_size},
      {"context_length", c.context_length},
      {"rope_theta", c.rope_theta},
      {"rope_style", c.rope_style == RopeStyle::AdjacentPairs ? "adjacent-pairs" : "half-split"},
      {"rope_scaling", c.rope_scaling.type},
      {"tied_embeddings", c.tied_embeddings},
      {"qkv_bias", c.qkv_bias},
      {"tensor_types", types},
      {"parameters", m.info.n_params},
      {"tokenizer", m.tokenizer ? m.tokenizer->kind() : "none"},
      {"chat_template", m.info.chat_template},
  };
}

std::function<int()> setup_model_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto tokenizer = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  app.add_option("model", *path, "Model: llama2.c .bin, GGUF file, Hugging Face folder or synthetic:NAME")->required();
  app.add_option("--tokenizer", *tokenizer, "llama2.c tokenizer.bin (default: next to the checkpoint)")
      ->check(CLI::ExistingFile);
  app.add_flag("--json", *json, "Print as JSON");
  return [path, tokenizer, json]() {
    LoadOptions options;
    options.tokenizer_path = *tokenizer;
    const auto model = load_model(*path, options);
    const nlohmann::json d = describe(*model);
    if (*json) {
      std::cout << d.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      return 0;
    }
    for (const auto& [key, value] : d.items()) {
      std::cout << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    }
    return 0;
  };
}

KVEVICT_COMMAND("model-info", "Describe a model: geometry, tensor types, parameter count", setup_model_info, 20);

}  // namespace
}  // namespace kvevict::cli
