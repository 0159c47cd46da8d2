#include "cli/eviction_report_output.h"

namespace kvevict::cli {

nlohmann::json eviction_report_json(const EvictionReport& r, int group) {
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
  // Zeroed key channels (channel_score) are still stored: bytes_kept already counts them.
  if (r.pruned_key_channels > 0) j["pruned_key_channels"] = r.pruned_key_channels;
  return j;
}

void print_eviction_report(std::ostream& out, const EvictionReport& r, int group) {
  out << "policy " << r.policy << ", budget " << r.budget << ", prompt " << r.prompt_len << " tokens"
      << (r.prefill_evicted ? "" : " (no prefill eviction: the prompt fits the budget or the policy has none)") << "\n";
  for (size_t l = 0; l < r.layers.size(); ++l) {
    for (size_t h = 0; h < r.layers[l].size(); ++h) {
      const HeadReport& head = r.layers[l][h];
      if (r.gqa_unfolded) out << "layer " << l << " query_head " << h << " (KV head " << h / group << ")";
      else out << "layer " << l << " kv_head " << h;
      out << " budget " << head.budget << " kept " << head.kept_positions.size() << ":";
      for (int32_t p : head.kept_positions) out << ' ' << p;
      out << "\n";
    }
  }
  const double pct = r.bytes_full ? 100.0 * static_cast<double>(r.bytes_kept) / static_cast<double>(r.bytes_full) : 0;
  out << "cache bytes: full " << r.bytes_full << ", kept " << r.bytes_kept << " (" << pct << "%)";
  if (r.bytes_codebook > 0) out << ", as codebook " << r.bytes_codebook;
  out << "\n";
  if (r.pruned_key_channels > 0)
    out << "key channels zeroed: " << r.pruned_key_channels << " (over layers and KV heads; still stored, bytes unchanged)\n";
}

}  // namespace kvevict::cli
