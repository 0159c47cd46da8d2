// `kvevict generate`: run a prompt through the reference decoder and print the continuation.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/option_checks.h"
#include "cli/policy_options.h"
#include "core/decode/decoder.h"
#include "core/decode/make_decoder.h"
#include "core/decode/sampler.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/tokenizer/chat_template.h"
#include "core/util/error.h"
#include "core/util/input_file.h"
#include "jit/device.h"

namespace kvevict::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  std::string prompt_file;
  bool chat = false;
  int max_tokens = 256;
  float temperature = 0.0f;
  uint64_t seed = 0;
  int threads = 2;
  WeightStorage weights = WeightStorage::Native;
  std::string kv_type = "f16";
  std::string prefill_attention = "own";
  std::string device = "auto";
  bool json = false;
  PolicyOptions policy;  // optional: evict with this policy (prefill and decode triggers)
};

struct Generation {
  std::vector<int> prompt_tokens;
  std::vector<int> tokens;
  std::string text;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

std::string read_prompt_text(const GenerateOptions& o) {
  if (o.prompt_file.empty()) return o.prompt;
  return read_input_file(o.prompt_file, InputLimits::kPromptFile, "prompt file");
}

// Plain prompts start with BOS (llama2.c generates from BOS alone); chat prompts follow the template.
std::vector<int> build_prompt(const Model& model, const GenerateOptions& o) {
  const std::string text = read_prompt_text(o);
  const Tokenizer& tok = *model.tokenizer;
  std::vector<int> ids;
  if (o.chat) {
    if (model.info.chat_template == "none") {
      throw UsageError(model.info.path + " declares no chat template; --chat needs one");
    }
    ids = tok.encode(apply_chat_template(model.info.chat_template, text), /*add_bos=*/false, /*parse_special=*/true);
  } else {
    ids = tok.encode(text, /*add_bos=*/true);
  }
  if (ids.empty()) throw UsageError("the prompt is empty and the vocabulary has no BOS token to start from");
  if (static_cast<int>(ids.size()) >= model.config.context_length) {
    throw UsageError("the prompt has " + std::to_string(ids.size()) + " tokens; the model's context is " +
                     std::to_string(model.config.context_length));
  }
  return ids;
}

bool is_stop(const Tokenizer& tok, int id) {
  if (id == tok.bos_id()) return true;  // llama2.c models end a story by starting the next one
  const std::vector<int> stops = tok.stop_ids();
  return std::find(stops.begin(), stops.end(), id) != stops.end();
}

// Prefill the prompt (in one block, or in the policy's prefill blocks), then decode token by token.
// `on_piece` streams the text.
Generation generate(Decoder& decoder, const GenerateOptions& o, std::vector<int> prompt,
                    const std::function<void(const std::string&)>& on_piece, EvictionEngine* engine = nullptr) {
  // The engine observes the prompt; while decoding only if its policy evicts then (without an
  // observer a device-resident decoder keeps the host cache out of the decode loop).
  ForwardObserver* observer = engine;
  ForwardObserver* decode_observer = engine && engine->observes_decode() ? engine : nullptr;
  using clock = std::chrono::steady_clock;
  const Model& model = decoder.model();
  const Tokenizer& tok = *model.tokenizer;
  Sampler sampler(o.temperature, o.seed);
  Generation g;
  g.prompt_tokens = std::move(prompt);
  auto t0 = clock::now();
  const std::vector<float>* logits = &prefill_prompt(decoder, g.prompt_tokens, engine, observer);
  auto t1 = clock::now();
  g.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  int prev = g.prompt_tokens.back();
  for (int i = 0; i < o.max_tokens; ++i) {
    const int next = sampler.sample(*logits);
    if (is_stop(tok, next)) break;
    g.tokens.push_back(next);
    const std::string piece = tok.decode_piece(prev, next);
    g.text += piece;
    if (on_piece) on_piece(piece);
    prev = next;
    if (i + 1 == o.max_tokens || decoder.position() >= model.config.context_length) break;
    logits = &decoder.forward(std::span<const int>(&next, 1), decode_observer);
  }
  g.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return g;
}

// The cache a policy left after a generation (generate --json's "cache"; its summary line).
nlohmann::json cache_summary(Decoder& decoder, const EvictionEngine& engine, jit::ScoringBackend scoring, int n_layers) {
  const KVCache& c = decoder.cache_layout();
  int lo = c.length(0, 0), hi = lo;
  int64_t entries = 0;
  for (int l = 0; l < n_layers; ++l)
    for (int h = 0; h < c.n_stored_heads(); ++h) {  // query heads when the policy unfolded GQA
      lo = std::min(lo, c.length(l, h));
      hi = std::max(hi, c.length(l, h));
      entries += c.length(l, h);
    }
  const EvictionReport& r = engine.report();
  nlohmann::json cache = {{"policy", r.policy},         {"budget", r.budget},          {"bytes", c.bytes_in_use()},
                          {"bytes_full", c.bytes_for_uniform_length(decoder.position())},
                          {"tokens_min", lo},           {"tokens_max", hi},            {"entries", entries},
                          {"applications", r.applications}, {"selection", mode_name(r.selection)},
                          {"scoring", mode_name(scoring)}};
  if (r.bytes_codebook > 0) cache["bytes_codebook"] = r.bytes_codebook;
  // What the device holds, beside the policy's accounting above (null without a device cache):
  // equal for a dense cache, larger where the device keeps more (codebook heads held dense).
  if (const std::optional<DeviceKvBytes> on_device = decoder.device_kv_bytes())
    cache["on_device"] = {{"bytes", on_device->in_use},
                          {"bytes_reserved", on_device->reserved},
                          {"bytes_codebooks", on_device->codebooks}};
  else
    cache["on_device"] = nullptr;
  // Where the device path read its signals and scores without a host round trip ((layer, head)
  // counts, docs/CUDA.md; codebook_rows: decoded rows of codebook heads matched on the device,
  // summed over heads): all 0 on the CPU, and a GPU run that reports 0 copied them instead.
  cache["in_place"] = {{"window_attention", r.window_attention_in_place},
                       {"current_attention", r.current_attention_in_place},
                       {"accumulated_attention", r.accumulated_attention_in_place},
                       {"cached_rows", r.cache_rows_in_place},
                       {"row_norms", r.row_norms_in_place},
                       {"positions", r.positions_in_place},
                       {"hidden_states", r.hidden_states_in_place},
                       {"selection_positions", r.selection_positions_in_place},
                       {"scores", r.scores_in_place},
                       {"prefill_scores", r.prefill_scores_in_place},
                       {"codebook_rows", decoder.device_kv_stats().counts.codebook_rows_on_device}};
  return cache;
}

// The generation as JSON on stdout, or (the text was streamed) its summary on stderr; `cache` is
// cache_summary's, null without a policy.
void print_generation(const Generation& g, const jit::DeviceChoice& device, const nlohmann::json& cache, bool json) {
  if (json) {
    nlohmann::json j = {{"prompt_tokens", g.prompt_tokens}, {"tokens", g.tokens}, {"text", g.text},
                        {"device", device.describe()}};
    if (!cache.is_null()) j["cache"] = cache;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  std::cout << "\n";
  std::cerr << "prompt: " << g.prompt_tokens.size() << " tokens in " << g.prefill_seconds << " s; generated "
            << g.tokens.size() << " tokens in " << g.decode_seconds << " s\n";
  if (cache.is_null()) return;
  std::cerr << "cache (" << cache["policy"].get<std::string>() << ", budget " << cache["budget"].get<std::string>()
            << "): " << cache["bytes"] << " bytes (full cache " << cache["bytes_full"] << "), " << cache["tokens_min"]
            << ".." << cache["tokens_max"] << " tokens per (layer, KV head), " << cache["applications"]
            << " evictions, scored by " << cache["scoring"].get<std::string>() << ", selected on "
            << cache["selection"].get<std::string>() << "\n";
}

std::function<int()> setup_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  app.add_option("-m,--model", o->model, "Model: llama2.c .bin, GGUF file, Hugging Face folder or synthetic:NAME")
      ->required();
  app.add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer.bin (default: next to the checkpoint)")
      ->check(CLI::ExistingFile);
  auto* prompt = app.add_option("-p,--prompt", o->prompt, "Prompt text (default: start from BOS)");
  app.add_option("--prompt-file", o->prompt_file, "Read the prompt from a file")->check(CLI::ExistingFile)->excludes(prompt);
  app.add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template (ChatML for SmolLM2)");
  app.add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate at most")->capture_default_str()->check(CLI::Range(0, 1 << 24));
  app.add_option("--temperature", o->temperature, "Sampling temperature; 0 is greedy")->check(finite_range(0.0, 100.0));
  app.add_option("--seed", o->seed, "Seed of the sampler");
  app.add_option("--threads", o->threads, "CPU threads (0: library default)")->capture_default_str()->check(thread_count());
  app.add_option("--weights", o->weights, "weight storage: native (file format, default) | f32 (reference)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, WeightStorage>{{"native", WeightStorage::Native}, {"f32", WeightStorage::F32}}));
  app.add_option("--kv-type", o->kv_type, "KV cache element type: f16, bf16 or f32 (the exact reference)")
      ->capture_default_str()->check(CLI::IsMember({"f16", "bf16", "f32"}));
  app.add_option("--device", o->device, "auto (CUDA when a GPU is usable, else the CPU), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--prefill-attention", o->prefill_attention,
                 "CUDA decoder's prefill attention: own (f32 reference kernel) or flashinfer (tensor cores; a build "
                 "with FlashInfer, f16/bf16 cache)")
      ->capture_default_str();  // checked by parse_prefill_attention (one list of names: ModeNames)
  app.add_flag("--json", o->json,
               "Print {\"prompt_tokens\", \"tokens\", \"text\", \"device\"} as JSON (plus \"cache\" with --policy)");
  o->policy.add_to(app);

  return [o]() {
    // Resolved before loading: a missing GPU for --device cuda fails fast, and a bad value is a usage error.
    const jit::DeviceChoice device = jit::resolve_device(o->device);
    const PrefillAttention prefill_attention = parse_prefill_attention(o->prefill_attention, "--prefill-attention");
    if (prefill_attention != PrefillAttention::Own && device.kind != jit::DeviceKind::Cuda)
      throw UsageError("--prefill-attention " + o->prefill_attention + " runs on the CUDA decoder (--device cuda)");
    LoadOptions load;
    load.tokenizer_path = o->tokenizer;
    load.weights = o->weights;
    std::unique_ptr<PolicyProgram> program;
    jit::ScoringBackend scoring = jit::ScoringBackend::Interpreter;
    if (o->policy.enabled() || !o->policy.set.empty() || !o->policy.budget.empty()) {
      if (!o->policy.enabled()) throw UsageError("--budget and --set need --policy");
      program = o->policy.load(device, &scoring);  // policy errors before the model loads
      if (program->description().select.unfold_gqa && device.kind == jit::DeviceKind::Cuda)
        throw UsageError("policy " + program->description().name +
                         ": gqa_mode unfold (one stored head per query head) runs on the CPU decoder only; use --device cpu");
      o->policy.parsed_budget(-1);
    }
    const auto model = load_model(o->model, load);
    std::vector<int> prompt = build_prompt(*model, *o);
    std::unique_ptr<EvictionEngine> engine;
    if (program) {
      const Budget budget = o->policy.parsed_budget(static_cast<int>(prompt.size()));
      engine = std::make_unique<EvictionEngine>(*program, model->config, EngineOptions{budget, o->seed});
    }
    auto decoder = make_decoder(*model, device.kind == jit::DeviceKind::Cuda ? DecoderDevice::Cuda : DecoderDevice::Cpu,
                                {.threads = o->threads, .device_ordinal = device.ordinal,
                                 .kv_type = parse_kv_type(o->kv_type, "--kv-type"),
                                 .prefill_attention = prefill_attention});
    auto stream = [&](const std::string& piece) { std::cout << piece << std::flush; };
    const Generation g =
        generate(*decoder, *o, std::move(prompt), o->json ? nullptr : std::function(stream), engine.get());
    const nlohmann::json cache = engine ? cache_summary(*decoder, *engine, scoring, model->config.n_layers) : nlohmann::json(nullptr);
    print_generation(g, device, cache, o->json);
    return 0;
  };
}

KVEVICT_COMMAND("generate", "Generate text from a prompt with the reference decoder", setup_generate, 10);

}  // namespace
}  // namespace kvevict::cli
