#include "evals/stored_content.h"

#include <initializer_list>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "evals/text_hash.h"

namespace kvevict::evals {

namespace {

// Length-prefixed parts under a tag: unambiguous for any bytes (a policy file's comments need not
// be valid UTF-8, which a JSON dump would refuse).
std::string framed(const char* tag, std::initializer_list<const std::string*> parts) {
  std::string bytes = tag;
  for (const std::string* part : parts) {
    bytes.append("\n").append(std::to_string(part->size())).append("\n").append(*part);
  }
  return bytes;
}

}  // namespace

std::string policy_content_hash(const std::string& text, const std::string& params_json) {
  return sha256_text(framed("kvevict policy v1", {&text, &params_json}));
}

PolicySource make_policy_source(const PolicyChoice& choice, std::string text, std::string params_json) {
  PolicySource source{choice.policy, choice.label, std::move(text), std::move(params_json), ""};
  source.hash = policy_content_hash(source.text, source.params_json);
  return source;
}

std::string params_json_as_written(const PolicyChoice& choice) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, value] : choice.params) params[name] = value;
  return params.dump();
}

namespace {

nlohmann::json sample_fields(const Sample& sample) {
  return {{"query_aware", sample.query_aware},   {"fidelity", sample.fidelity},
          {"first_line_only", sample.first_line_only}, {"metric", sample.metric},
          {"references", sample.references},     {"all_classes", sample.all_classes},
          {"max_new_tokens", sample.max_new_tokens}, {"greedy_tokens", sample.greedy_tokens}};
}

}  // namespace

std::string prompt_content_hash(const PromptText& text, const std::string& sample_json) {
  return sha256_text(framed("kvevict prompt v1", {&text.prefill, &text.tail, &text.continuation, &sample_json}));
}

StoredPrompt make_stored_prompt(const Sample& sample, const PromptText& text) {
  StoredPrompt prompt{"", text, sample_fields(sample).dump()};
  prompt.hash = prompt_content_hash(prompt.text, prompt.sample_json);
  return prompt;
}

Sample sample_from_stored(const StoredPrompt& prompt) {
  Sample sample;
  try {
    const nlohmann::json fields = nlohmann::json::parse(prompt.sample_json);
    sample.query_aware = fields.at("query_aware").get<bool>();
    sample.fidelity = fields.at("fidelity").get<bool>();
    sample.first_line_only = fields.at("first_line_only").get<bool>();
    sample.metric = fields.at("metric").get<std::string>();
    sample.references = fields.at("references").get<std::vector<std::string>>();
    sample.all_classes = fields.at("all_classes").get<std::vector<std::string>>();
    sample.max_new_tokens = fields.at("max_new_tokens").get<int>();
    sample.greedy_tokens = fields.at("greedy_tokens").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError("stored prompt " + prompt.hash + ": sample fields are unreadable (" + e.what() + ")");
  }
  sample.continuation = prompt.text.continuation;
  return sample;
}

}  // namespace kvevict::evals
