// `kvevict inspect`: runs a prompt's prefill with a policy applied and shows what it kept: per layer
// and KV head the budget and the original positions of the kept tokens (ascending), plus the
// cache bytes before and after (cli/eviction_report_output.h; --json prints that object plus
// "prompt_ids", the token ids prefilled).
// --chat wraps the prompt in the model's chat template as the eval does for a query-aware sample
// (evals/prompt_text.h: BOS, the template, special tokens such as <|im_start|> as one id each), so
// inspect prefills exactly the ids `kvevict eval` prefills for that user message.
// --parse-special keeps the text as given but maps special-token strings to their ids (a prompt
// that is already templated, e.g. a stored prompt from the results database).
// --plan prints the eviction plan (core/engine/eviction_plan.h; cli/eviction_plan_output.h) as one
// JSON object instead: what is decided before any score, for this prompt's length; nothing runs.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/eviction_plan_output.h"
#include "cli/eviction_report_output.h"
#include "cli/option_checks.h"
#include "cli/policy_options.h"
#include "core/decode/decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/engine/eviction_plan.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "core/util/input_file.h"
#include "evals/prompt_text.h"

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
  bool plan = false;
  bool chat = false;
  bool parse_special = false;
};

std::vector<int> encode_prompt(const Model& model, const InspectOptions& o) {
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) text = read_input_file(o.prompt_file, InputLimits::kPromptFile, "prompt file");
  std::vector<int> ids;
  if (o.chat) {
    // The eval's query-aware layout with the whole text as the user message: the same function
    // builds the eval's prompt, so the ids cannot drift apart.
    evals::Sample message;
    message.context = text;
    message.separator.clear();
    message.query_aware = true;
    ids = evals::encode_prompt_text(*model.tokenizer, evals::build_prompt_text(message, model.info.chat_template)).prefill;
  } else {
    ids = model.tokenizer->encode(text, /*add_bos=*/true, o.parse_special);
  }
  if (ids.empty()) throw UsageError("the prompt is empty and the vocabulary has no BOS token to start from");
  if (static_cast<int>(ids.size()) > model.config.context_length)
    throw UsageError("the prompt has " + std::to_string(ids.size()) + " tokens; the model's context is " +
                     std::to_string(model.config.context_length));
  return ids;
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
  app.add_flag("--json", o->json, "Print one JSON object (with the prompt's token ids)");
  app.add_flag("--plan", o->plan,
               "Print the eviction plan for this prompt as one JSON object (window, protected sets, budgets "
               "when static, skip verdict, selection, triggers) without running the model");
  app.add_flag("--chat", o->chat,
                            "Wrap the prompt in the model's chat template and parse special tokens, as kvevict eval "
                            "does (the prompt is the user message)");
  app.add_flag("--parse-special", o->parse_special,
               "Map special-token text such as <|im_start|> to its id (the prompt is already templated; "
               "--chat implies it)");

  return [o]() {
    if (o->prompt.empty() && o->prompt_file.empty()) throw UsageError("inspect needs a prompt: -p TEXT or --prompt-file FILE");
    // Policy problems are reported before the model is loaded (cheap, and exit 2 either way).
    const auto program = o->policy.load(jit::DeviceChoice{});  // inspect decodes on the CPU
    o->policy.parsed_budget(-1);
    LoadOptions load;
    load.tokenizer_path = o->tokenizer;
    load.weights = o->weights;
    const auto model = load_model(o->model, load);
    const std::vector<int> tokens = encode_prompt(*model, *o);
    const Budget budget = o->policy.parsed_budget(static_cast<int>(tokens.size()));
    if (o->plan) {
      const EvictionPlan plan = make_eviction_plan(*program, model->config, budget, static_cast<int>(tokens.size()), tokens);
      std::cout << eviction_plan_json(plan, program->description().name, budget.text).dump() << "\n";
      return 0;
    }
    auto decoder = make_cpu_decoder(*model, {.threads = o->threads, .kv_type = parse_kv_type(o->kv_type, "--kv-type")});
    EvictionEngine engine(*program, model->config, {budget, o->seed});
    prefill_prompt(*decoder, tokens, &engine, &engine);
    const EvictionReport& r = engine.report();
    if (o->json) {
      nlohmann::json out = eviction_report_json(r, model->config.group_size());
      out["prompt_ids"] = tokens;
      std::cout << out.dump() << "\n";
    } else {
      print_eviction_report(std::cout, r, model->config.group_size());
    }
    return 0;
  };
}

KVEVICT_COMMAND("inspect", "Run a prompt's prefill with a policy and show the kept tokens per layer and KV head",
                setup_inspect, 45);

}  // namespace
}  // namespace kvevict::cli
