#include "dsl/policy_keys.h"

namespace kvevict::dsl {

const std::set<std::string>& policy_top_level_keys() {
  static const std::set<std::string> keys = {"name", "about",  "params",       "observe",      "protect", "run",
                                             "score", "decode_score", "layer_weight", "select", "merge",
                                             "tables", "head_weight", "head_mode", "scores",
                                             "channel_score", "channels"};
  return keys;
}

const std::map<std::string, std::set<std::string>>& policy_section_keys() {
  static const std::map<std::string, std::set<std::string>> sections = {
      {"observe", {"window", "causal", "same_index_head", "segment", "scaled", "query_stats_from", "query_rotation",
                   "rope_future", "window_after_token", "replay"}},
      {"protect", {"first", "recent", "decode_first", "decode_recent"}},
      {"run", {"prefill", "cascading", "decode_every", "decode_slack", "skip_margin_includes_window", "reassign_positions",
               "decode_budget", "prefill_block"}},
      {"select", {"random_share", "temperature", "scope", "floor_alpha", "kept_order", "unfold_gqa", "layer_allocation", "head_allocation", "unit", "chunk",
                  "chunk_score", "quota", "gate", "rescue", "threshold", "score_at", "stages", "mass"}},
      {"channels", {"prune"}},
      {"merge", {"enabled", "method", "similarity_threshold", "merge_budget", "ema_alpha", "ema_beta", "theta_key", "theta_value", "scope", "first_layer", "last_layer"}},
  };
  return sections;
}

const std::set<std::string>& policy_parameter_keys() {
  static const std::set<std::string> keys = {"int", "float", "bool", "fraction", "enum", "default", "min", "max", "doc"};
  return keys;
}

const std::set<std::string>& policy_table_keys() {
  static const std::set<std::string> keys = {"file", "axes", "shape", "values"};
  return keys;
}

const std::set<std::string>& policy_replay_keys() {
  static const std::set<std::string> keys = {"chunk", "previous_tail", "n_sink", "normalise"};
  return keys;
}

const std::set<std::string>& policy_stage_keys() {
  static const std::set<std::string> keys = {"score", "keep", "share"};
  return keys;
}

}  // namespace kvevict::dsl
