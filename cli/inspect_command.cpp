// `kvevict inspect`: runs a prompt's prefill with a policy applied and shows what it kept: per layer
// and KV head the budget and the original positions of the kept tokens (ascending), plus the
// cache bytes before and after. --json prints one object:
// {"policy","budget","prompt_tokens","gqa_mode","layers":[{"layer","heads":[{"kv_head","budget","kept"}]}],
//  "bytes_full","bytes_kept"} (and, for a codebook policy, "bytes_codebook").
// "kv_head" is the index of the stored head: the KV head ("gqa_mode": "kv_head"), or, for a policy
// that unfolds GQA ("gqa_mode": "unfold"), the query head, which then also has "query_head" (the
// same index) and "source_kv_head" (query_head / G, the KV head its entries were copied from).
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/option_checks.h"
#include "cli/policy_options.h"
#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace kvevict::cli {
namespace {

struct InspectOptions {
  std::string model, tokenizer, prompt, prompt_file;
  PolicyOptions policy;
  uint64_t seed = 0;
  int threads = 2;
  WeightStorage weights = WeightStorage::Native;
  std::string kv_type = "f16";
  bool json = false;
};

std::vector<int> encode_prompt(const Model& model, const InspectOptions& o) {
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) text = read_input_file(o.prompt_file, InputLimits::kPromptFile, "prompt file");
  std::vector<int> ids = model.tokenizer->encode(text, /*add_bos=*/true);
  if (ids.empty()) throw UsageError("the prompt is empty and the vocabulary has no BOS token to start from");
  if (static_cast<int>(ids.size()) > model.config.context_length)
    throw UsageError("the prompt has " + std::to_string(ids.size()) + " tokens; the model's context is " +
                     std::to_string(model.config.context_length));
  return ids;
}

nlohmann::json to_json(const EvictionReport& r, int group) {
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < r.layers.size(); ++l) {
    nlohmann::json heads = nlohmann::json::array();
    for (size_t h = 0; h < r.layers[l].size(); ++h) {
      nlohmann::json head = {{"kv_head", h}, {"budget", r.layers[l][h].budget}, {"kept", r.layers[l][h].kept_positions}};
      if (r.gqa_unfolded) {
        head["query_head"] = h;
        head["source_kv_head"] = h / group;
      }
      heads.push_back(head);
    }
    layers.push_back({{"layer", l}, {"heads", heads}});
  }
  nlohmann::json j = {{"policy", r.policy},          {"budget", r.budget},       {"prompt_tokens", r.prompt_len},
                      {"layers", layers},            {"bytes_full", r.bytes_full}, {"bytes_kept", r.bytes_kept},
                      {"gqa_mode", r.gqa_unfolded ? "unfold" : "kv_head"}};
  if (r.bytes_codebook > 0) j["bytes_codebook"] = r.bytes_codebook;
  return j;
}

void print_text(const EvictionReport& r, int group) {
  std::cout << "policy " << r.policy << ", budget " << r.budget << ", prompt " << r.prompt_len << " tokens"
            << (r.prefill_evicted ? "" : " (no prefill eviction: the prompt fits the budget or the policy has none)")
            << "\n";
  for (size_t l = 0; l < r.layers.size(); ++l) {
    for (size_t h = 0; h < r.layers[l].size(); ++h) {
      const HeadReport& head = r.layers[l][h];
      if (r.gqa_unfolded) std::cout << "layer " << l << " query_head " << h << " (KV head " << h / group << ")";
      else std::cout << "layer " << l << " kv_head " << h;
      std::cout << " budget " << head.budget << " kept "
                << head.kept_positions.size() << ":";
      for (int32_t p : head.kept_positions) std::cout << ' ' << p;
      std::cout << "\n";
    }
  }
  const double pct = r.bytes_full ? 100.0 * static_cast<double>(r.bytes_kept) / static_cast<double>(r.bytes_full) : 0;
  std::cout << "cache bytes: full " << r.bytes_full << ", kept " << r.bytes_kept << " (" << pct << "%)";
  if (r.bytes_codebook > 0) std::cout << ", as codebook " << r.bytes_codebook;
  std::cout << "\n";
}

std::function<int()> setup_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  app.add_option("-m,--model", o->model, "Model: llama2.c .bin, GGUF file, Hugging Face folder or synthetic:NAME")->required();
  app.add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer.bin (default: next to the checkpoint)")
      ->check(CLI::ExistingFile);
  auto* prompt = app.add_option("-p,--prompt", o->prompt, "Prompt text");
  auto* file = app.add_option("--prompt-file", o->prompt_file, "Read the prompt from a file")
                   ->check(CLI::ExistingFile)->excludes(prompt);
  prompt->excludes(file);
  o->policy.add_to(app);
  app.get_option("--policy")->required();
  app.get_option("--budget")->required();
  app.add_option("--seed", o->seed, "Seed of the policy's random draws (random, NACL)");
  app.add_option("--threads", o->threads, "CPU threads (0: library default)")->capture_default_str()->check(thread_count());
  app.add_option("--weights", o->weights, "weight storage: native (file format, default) | f32 (reference)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, WeightStorage>{{"native", WeightStorage::Native}, {"f32", WeightStorage::F32}}));
  app.add_option("--kv-type", o->kv_type, "KV cache element type: f16, bf16 or f32 (the exact reference)")
      ->capture_default_str()->check(CLI::IsMember({"f16", "bf16", "f32"}));
  app.add_flag("--json", o->json, "Print one JSON object");

  return [o]() {
    if (o->prompt.empty() && o->prompt_file.empty()) throw UsageError("inspect needs a prompt: -p TEXT or --prompt-file FILE");
    // Policy problems are reported before the model is loaded (cheap, and exit 2 either way).
    const auto program = o->policy.load();
    o->policy.parsed_budget(-1);
    LoadOptions load;
    load.tokenizer_path = o->tokenizer;
    load.weights = o->weights;
    const auto model = load_model(o->model, load);
    const std::vector<int> tokens = encode_prompt(*model, *o);
    const Budget budget = o->policy.parsed_budget(static_cast<int>(tokens.size()));
    auto decoder = make_cpu_decoder(*model, {.threads = o->threads, .kv_type = parse_kv_type(o->kv_type, "--kv-type")});
    EvictionEngine engine(*program, model->config, {budget, o->seed});
    decoder->forward(tokens, &engine);
    const EvictionReport& r = engine.report();
    if (o->json) {
      std::cout << to_json(r, model->config.group_size()).dump() << "\n";
    } else {
      print_text(r, model->config.group_size());
    }
    return 0;
  };
}

KVEVICT_COMMAND("inspect", "Run a prompt's prefill with a policy and show the kept tokens per layer and KV head",
                setup_inspect, 45);

}  // namespace
}  // namespace kvevict::cli
