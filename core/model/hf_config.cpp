#include "core/model/hf_config.h"

#include <filesystem>
#include <map>

#include "core/util/error.h"
#include "core/util/quote.h"
#include "core/util/json_file.h"

namespace kvevict {
namespace {

constexpr int64_t kMaxInt = 1 << 30;

// Architecture from `architectures[0]`, else from `model_type`.
std::string hf_architecture(const JsonFields& fields) {
  static const std::pair<const char*, const char*> kSupported[] = {
      {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"}, {"Qwen2ForCausalLM", "qwen2"}};
  if (const nlohmann::json* archs = fields.find("architectures")) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      fields.fail("architectures", "must be a non-empty array of strings");
    }
    const std::string arch = (*archs)[0].get<std::string>();
    for (const auto& [class_name, type] : kSupported) {
      if (arch == class_name) return type;
    }
    fields.fail("architectures", "names '" + quote_input(arch) +
                                     "', which is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                                     "Qwen2ForCausalLM)");
  }
  const std::string model_type = fields.string("model_type");
  for (const auto& [class_name, type] : kSupported) {
    if (model_type == type) return type;
  }
  fields.fail("model_type", "is '" + quote_input(model_type) + "', which is not supported (supported: llama, mistral, qwen2)");
}

// rope_scaling := null | { "type"|"rope_type": "default"|"linear"|"llama3", "factor": number,
//                          "low_freq_factor", "high_freq_factor", "original_max_position_embeddings" (llama3) }
RopeScaling hf_rope_scaling(const JsonFields& config) {
  RopeScaling scaling;
  const nlohmann::json* node = config.find("rope_scaling");
  if (!node) return scaling;
  JsonFields fields(*node, config.file(), "rope_scaling.");
  std::string type = fields.has("rope_type") ? fields.string("rope_type") : fields.string("type");
  if (type == "default") return scaling;
  if (type != "linear" && type != "llama3") {
    fields.fail(fields.has("rope_type") ? "rope_type" : "type",
                "is '" + quote_input(type) + "', which is not supported (supported: default, linear, llama3)");
  }
  scaling.type = type;
  scaling.factor = static_cast<float>(fields.number("factor"));
  if (!(scaling.factor >= 1.0f) || scaling.factor > 1024.0f) fields.fail("factor", "must be in 1..1024");
  if (type == "llama3") {
    scaling.low_freq_factor = static_cast<float>(fields.number("low_freq_factor"));
    scaling.high_freq_factor = static_cast<float>(fields.number("high_freq_factor"));
    scaling.original_max_position = static_cast<int>(fields.integer("original_max_position_embeddings", 1, kMaxInt));
    if (!(scaling.low_freq_factor > 0.0f) || !(scaling.high_freq_factor > scaling.low_freq_factor)) {
      fields.fail("high_freq_factor", "must be greater than low_freq_factor (both positive)");
    }
  }
  return scaling;
}

}  // namespace

ModelConfig parse_hf_config(const std::string& config_path) {
  const nlohmann::json json = read_json_file(config_path, 16u << 20);
  const JsonFields fields(json, config_path);
  ModelConfig c;
  c.architecture = hf_architecture(fields);
  c.name = fields.string_or("_name_or_path", std::filesystem::path(config_path).parent_path().filename().string());

  c.dim = static_cast<int>(fields.integer("hidden_size", 1, kMaxInt));
  c.hidden_dim = static_cast<int>(fields.integer("intermediate_size", 1, kMaxInt));
  c.n_layers = static_cast<int>(fields.integer("num_hidden_layers", 1, kMaxInt));
  c.n_heads = static_cast<int>(fields.integer("num_attention_heads", 1, kMaxInt));
  c.n_kv_heads = static_cast<int>(fields.integer_or("num_key_value_heads", c.n_heads, 1, kMaxInt));
  if (fields.has("head_dim")) {
    c.head_dim = static_cast<int>(fields.integer("head_dim", 1, kMaxInt));
  } else {
    if (c.dim % c.n_heads != 0) {
      fields.fail("head_dim", "is missing and hidden_size (" + std::to_string(c.dim) +
                                  ") is not a multiple of num_attention_heads (" + std::to_string(c.n_heads) + ")");
    }
    c.head_dim = c.dim / c.n_heads;
  }
  c.vocab_size = static_cast<int>(fields.integer("vocab_size", 1, kMaxInt));
  c.context_length = static_cast<int>(fields.integer("max_position_embeddings", 1, kMaxInt));
  c.rope_theta = static_cast<float>(fields.number_or("rope_theta", 10000.0));
  c.norm_eps = static_cast<float>(fields.number_or("rms_norm_eps", 1e-6));
  c.rope_style = RopeStyle::HalfSplit;
  c.rope_scaling = hf_rope_scaling(fields);
  c.tied_embeddings = fields.boolean_or("tie_word_embeddings", false);  // the HF default for all three classes

  const std::string act = fields.string_or("hidden_act", "silu");
  if (act != "silu") fields.fail("hidden_act", "is '" + quote_input(act) + "'; only 'silu' (SwiGLU) is supported");
  if (c.architecture == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention always has q/k/v biases and none on o_proj
  } else {
    if (fields.boolean_or("attention_bias", false)) fields.fail("attention_bias", "= true is not supported");
  }
  if (fields.boolean_or("mlp_bias", false)) fields.fail("mlp_bias", "= true is not supported");

  // The decoder attends over the whole cache. Where a sliding window is active, cap the context
  // at the window so that every supported position gets exactly the attention the model defines.
  bool sliding = c.architecture == "mistral" ? fields.has("sliding_window")
                 : c.architecture == "qwen2" ? fields.boolean_or("use_sliding_window", false)
                                             : false;
  if (sliding) {
    int window = static_cast<int>(fields.integer("sliding_window", 1, kMaxInt));
    if (window < c.context_length) c.context_length = window;
  }

  c.validate(config_path);
  return c;
}

std::string hf_config_text(const ModelConfig& c, int bos_id, int eos_id, const std::string& torch_dtype) {
  static const std::map<std::string, std::string> classes = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}};
  const auto cls = classes.find(c.architecture);
  if (cls == classes.end()) throw UsageError("no Hugging Face class for architecture '" + c.architecture + "'");
  nlohmann::json j = {{"architectures", {cls->second}},
                      {"model_type", c.architecture},
                      {"_name_or_path", c.name},
                      {"hidden_size", c.dim},
                      {"intermediate_size", c.hidden_dim},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.context_length},
                      {"rope_theta", c.rope_theta},
                      {"rms_norm_eps", c.norm_eps},
                      {"hidden_act", "silu"},
                      {"tie_word_embeddings", c.tied_embeddings},
                      {"torch_dtype", torch_dtype},
                      {"bos_token_id", bos_id},
                      {"eos_token_id", eos_id}};
  if (c.head_dim * c.n_heads != c.dim) j["head_dim"] = c.head_dim;
  if (c.rope_scaling.type != "none") {
    j["rope_scaling"] = {{"rope_type", c.rope_scaling.type}, {"factor", c.rope_scaling.factor}};
    if (c.rope_scaling.type == "llama3") {
      j["rope_scaling"]["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      j["rope_scaling"]["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      j["rope_scaling"]["original_max_position_embeddings"] = c.rope_scaling.original_max_position;
    }
  }
  return j.dump(2);
}

}  // namespace kvevict
