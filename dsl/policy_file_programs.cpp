// A policy file's programs (FileCompiler, policy_file_compiler.h): each program key parsed, checked
// and lowered, what the description records of the signals they read, and the checks that depend
// on which programs the file has.
#include <string>
#include <vector>

#include "core/engine/signals.h"
#include "dsl/entry_locality.h"
#include "dsl/parser.h"
#include "dsl/policy_file_compiler.h"

namespace kvevict::dsl::policy_file_detail {

LoweredProgram FileCompiler::program(const YAML::Node& root, const char* key, ProgramContext ctx) {
  return program_node(root[key], key, ctx);
}

LoweredProgram FileCompiler::program_node(const YAML::Node& n, const char* key, ProgramContext ctx) {
  if (!n) return {};
  if (!n.IsScalar()) { diag_.error(pos_of(n), std::string("'") + key + "' must be a program (a literal block: " + key + ": |)"); return {}; }
  TextOrigin o;
  if (!origin_of(n, o)) return {};
  size_t before = diag_.count();
  Program ast = parse_program(n.Scalar(), o, diag_);
  CheckOptions opt = opts_;
  opt.had_syntax_errors = diag_.count() != before;
  opt.context = ctx;
  return check_program(ast, opt, pos_of(n), diag_);
}

void FileCompiler::programs(const YAML::Node& root) {
  PolicyDescription& d = out_.desc;
  out_.score = program(root, "score", ProgramContext::Score);
  out_.decode_score = program(root, "decode_score", ProgramContext::Score);
  out_.layer_weight = program(root, "layer_weight", ProgramContext::LayerWeight);
  out_.head_mode = program(root, "head_mode", ProgramContext::HeadMode);
  out_.head_weight = program(root, "head_weight", ProgramContext::HeadWeight);
  channel_settings(root);
  d.has_decode_score = root["decode_score"].IsDefined();
  d.has_layer_weight = root["layer_weight"].IsDefined();
  d.has_head_plan = check_head_programs(root);
  stage_score_programs(root);
  for (PolicySelect::Stage& stage : d.select.stages) {
    const size_t i = static_cast<size_t>(stage.program);
    const LoweredProgram* p = i == 0 ? &out_.score : i <= out_.stage_scores.size() ? &out_.stage_scores[i - 1] : nullptr;
    if (!p) continue;  // named no program (an error reported above)
    for (int s = 0; s < kNumTensorSignals; ++s) stage.reads[s] = p->uses[s];
    stage.reads_known = true;
  }
  std::vector<const LoweredProgram*> all = {&out_.score,     &out_.decode_score, &out_.layer_weight,
                                            &out_.head_mode, &out_.head_weight,  &out_.channel_score};
  for (const LoweredProgram& p : out_.stage_scores) all.push_back(&p);
  for (const LoweredProgram* p : all) {
    for (int s = 0; s < kNumTensorSignals; ++s) d.reads[s] = d.reads[s] || p->uses[s];
  }
  // The engine computes the window attention while decoding only if the decode indicator reads it.
  d.decode_reads = (d.has_decode_score ? out_.decode_score : out_.score).uses;
  d.decode_reads_known = true;
  d.decode_scores_each_entry_alone = scores_each_entry_alone(d.has_decode_score ? out_.decode_score : out_.score);
  // The channel program runs once the prompt is done, over the kept rows (cache_row_reads.h,
  // prompt_end_edits_rows): not among the prompt's calls' reads.
  for (const LoweredProgram* p : all)
    if (p != &out_.decode_score && p != &out_.channel_score)
      for (int s = 0; s < kNumTensorSignals; ++s) d.prompt_reads[s] = d.prompt_reads[s] || p->uses[s];
  d.prompt_reads_known = true;
  for (int s = 0; s < kNumTensorSignals; ++s) d.head_plan_reads[s] = out_.head_mode.uses[s] || out_.head_weight.uses[s];
  d.head_plan_reads_known = true;
  d.run.decode_uses_window_attention = d.decode_reads[static_cast<int>(TensorSignal::WindowAttention)];
  const char* keys[] = {"score", "decode_score", "layer_weight", "head_mode", "head_weight", "channel_score"};
  const LoweredProgram* progs[] = {&out_.score,     &out_.decode_score, &out_.layer_weight,
                                   &out_.head_mode, &out_.head_weight,  &out_.channel_score};
  // Signals made from the window queries (the signal table's source) need an observation window.
  for (int i = 0; i < 6; ++i)
    for (const kvevict::TensorSignalInfo& info : kvevict::kTensorSignalTable)
      if (kvevict::source_reads_window_queries(info.source) && progs[i]->uses[kvevict::signal_index(info.id)] &&
          !root["observe"])
        diag_.error(pos_of(root[keys[i]]), std::string("'") + keys[i] + "' reads the " + std::string(info.description) +
                                               " " + std::string(info.dsl_name) +
                                               ", but the file has no 'observe: {window: ...}'");
}

// Key-channel pruning (core/engine/channel_selection.h; ThinK):
//   channel_score: PROGRAM           defines channel_score[d], per (layer, KV head)
//   channels: "{" "prune" ":" EXPR "}"   EXPR over parameters: the fraction of key channels zeroed,
//                                    in [0, 1) (default 0, kvpress ThinKPress's); needs channel_score
// The combinations the stage refuses are core/engine/channel_checks.h's (reported in run()).
void FileCompiler::channel_settings(const YAML::Node& root) {
  PolicyDescription& d = out_.desc;
  out_.channel_score = program(root, "channel_score", ProgramContext::ChannelScore);
  d.channels.enabled = root["channel_score"].IsDefined();
  const YAML::Node channels = section(root, "channels");
  if (root["channels"] && !d.channels.enabled)
    diag_.error(pos_of(root["channels"]), "'channels' configures the channel_score stage, but the file has no 'channel_score' program");
  double v;
  if (constant_setting(channels, "prune", false, v)) {
    if (!(v >= 0 && v < 1)) diag_.error(pos_of(channels["prune"]), "'prune' is the fraction of key channels zeroed, in [0, 1), got " + fmt(v));
    else d.channels.prune = v;
  }
}

// scores_section = "scores:" "{" NAME ":" PROGRAM { "," NAME ":" PROGRAM } "}" ;  each PROGRAM
// defines score[t] like `score`; select.stages names them (core/engine/staged_selection.h). A
// program no stage names is an error (it would never run), as is a window signal without observe.
void FileCompiler::stage_score_programs(const YAML::Node& root) {
  const YAML::Node scores = root["scores"];
  if (!scores) return;
  if (!scores.IsMap() || scores.size() == 0 || scores.size() > kMaxStages) {
    diag_.error(pos_of(scores), "'scores' must be a mapping of 1 to " + std::to_string(kMaxStages) + " NAME: PROGRAM entries");
    return;
  }
  int i = 1;
  for (auto it = scores.begin(); it != scores.end(); ++it, ++i) {
    const std::string name = it->first.IsScalar() ? it->first.Scalar() : "";
    if (!valid_name(name) || name == "score") {
      diag_.error(pos_of(it->first), "a score program's name must be a plain name other than 'score'");
      continue;
    }
    bool used = false;
    for (const PolicySelect::Stage& st : out_.desc.select.stages) used = used || st.program == i;
    if (!used) diag_.error(pos_of(it->first), "score program '" + name + "' is named by no stage of select.stages");
    out_.stage_scores.push_back(program_node(it->second, name.c_str(), ProgramContext::Score));
    for (const kvevict::TensorSignalInfo& info : kvevict::kTensorSignalTable)
      if (kvevict::source_reads_window_queries(info.source) &&
          out_.stage_scores.back().uses[kvevict::signal_index(info.id)] &&
          !root["observe"])
        diag_.error(pos_of(it->first), "'" + name + "' reads the " + std::string(info.description) + " " +
                                           std::string(info.dsl_name) + ", but the file has no 'observe: {window: ...}'");
  }
}

// head_mode / head_weight (core/engine/head_budgets.h) split a layer's budget per KV head: only
// the kv_head scope selects per head with its own budget, and only a one-shot split (no
// cascading re-split, no unfolded GQA) keeps the plans of a layer valid. Returns whether the
// file has either program.
bool FileCompiler::check_head_programs(const YAML::Node& root) {
  bool any = false;
  for (const char* key : {"head_mode", "head_weight"}) {
    if (!root[key]) continue;
    any = true;
    const PolicyDescription& d = out_.desc;
    if (d.select.scope != SelectScope::KvHead)
      diag_.error(pos_of(root[key]), std::string("'") + key + "' needs select scope kv_head (scope " +
                                         std::string(ModeNames<SelectScope>::names[static_cast<int>(d.select.scope)]) +
                                         " decides the heads' budgets itself)");
    if (d.run.cascading) diag_.error(pos_of(root[key]), std::string("'") + key + "' cannot be combined with run.cascading");
    if (d.select.unfold_gqa) diag_.error(pos_of(root[key]), std::string("'") + key + "' cannot be combined with select.unfold_gqa");
  }
  return any;
}

}  // namespace kvevict::dsl::policy_file_detail
