#include "evals/leaderboard_pooled.h"

#include <map>
#include <set>
#include <tuple>

namespace kvevict::evals {
namespace {

bool same_cell(const AggregateRow& a, const AggregateRow& b) {
  return a.model == b.model && a.policy == b.policy && a.budget == b.budget;
}

}  // namespace

std::vector<AggregateRow> pooled_rows(const std::vector<AggregateRow>& rows) {
  std::map<std::string, std::set<std::string>> tasks_of_model;
  for (const auto& row : rows) tasks_of_model[row.model].insert(row.task);
  std::vector<AggregateRow> pooled;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  for (const auto& row : rows) {
    if (tasks_of_model[row.model].size() < 2 || row.samples <= 0) continue;
    auto [it, added] = index.emplace(std::make_tuple(row.model, row.policy, row.budget), pooled.size());
    if (added) {
      AggregateRow cell = row;
      cell.run_id = 0;
      cell.task = kPooledTask;
      cell.samples = 0;
      cell.score = cell.kept_ratio = cell.kv_bytes = cell.kv_bytes_full = cell.ttft_ms = cell.decode_tok_s =
          cell.device_kv_bytes = 0;
      pooled.push_back(cell);
    }
    AggregateRow& cell = pooled[it->second];
    if (cell.scoring != row.scoring) cell.scoring = "mixed";  // tasks scored by different backends
    if (cell.prefill_attention != row.prefill_attention) cell.prefill_attention = "mixed";
    if (cell.prefill != row.prefill) cell.prefill = "mixed";  // tasks of shared and per_run runs
    const double w = static_cast<double>(row.samples);
    cell.score += w * row.score;
    cell.kept_ratio += w * row.kept_ratio;
    cell.kv_bytes += w * row.kv_bytes;
    cell.kv_bytes_full += w * row.kv_bytes_full;
    cell.ttft_ms += w * row.ttft_ms;
    cell.decode_tok_s += w * row.decode_tok_s;
    cell.device_kv_bytes += w * row.device_kv_bytes;  // NaN from the first task that did not measure it
    cell.samples += row.samples;
  }
  for (auto& cell : pooled) {
    const double n = static_cast<double>(cell.samples);
    cell.score /= n;
    cell.kept_ratio /= n;
    cell.kv_bytes /= n;
    cell.kv_bytes_full /= n;
    cell.ttft_ms /= n;
    cell.decode_tok_s /= n;
    cell.device_kv_bytes /= n;
  }
  return pooled;
}

std::vector<const AggregateRow*> pooled_members(const std::vector<AggregateRow>& rows, const AggregateRow& pooled) {
  std::vector<const AggregateRow*> members;
  for (const auto& row : rows) {
    if (row.task != kPooledTask && same_cell(row, pooled)) members.push_back(&row);
  }
  return members;
}

}  // namespace kvevict::evals
