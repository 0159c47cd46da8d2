#include "evals/leaderboard_stats.h"

#include <cmath>
#include <memory>

#include "evals/budget_text.h"
#include "evals/leaderboard_pooled.h"

namespace kvevict::evals {
namespace {

std::vector<double> values_of(const std::map<std::string, double>& scores) {
  std::vector<double> values;
  for (const auto& [key, score] : scores) values.push_back(score);
  return values;
}

void fill_group(LeaderboardGroup& group, const std::vector<const AggregateRow*>& rows, const SampleScoreSource& source,
                double iso_threshold) {
  std::map<std::string, std::map<std::string, std::map<std::string, double>>> samples;  // policy -> budget -> scores
  std::map<std::string, LeaderboardRow> by_policy;
  for (const AggregateRow* aggregate : rows) {
    auto scores = source ? source(*aggregate) : std::map<std::string, double>{};
    LeaderboardCell cell;
    cell.aggregate = *aggregate;
    cell.score = summarize_scores(values_of(scores));
    if (scores.empty()) cell.score.n = aggregate->samples;  // no per-sample rows: n from the aggregate
    samples[aggregate->policy][aggregate->budget] = std::move(scores);
    by_policy[aggregate->policy].policy = aggregate->policy;
    by_policy[aggregate->policy].cells[aggregate->budget] = std::move(cell);
  }
  const std::map<std::string, double>* shared_full = nullptr;
  double shared_full_score = std::nan("");
  for (auto& [policy, row] : by_policy) {
    auto full = row.cells.find("full");
    if (full != row.cells.end() && !shared_full) {
      shared_full = &samples[policy]["full"];
      shared_full_score = full->second.aggregate.score;
    }
  }
  for (auto& [policy, row] : by_policy) {
    auto own = row.cells.find("full");
    const std::map<std::string, double>* reference = own != row.cells.end() ? &samples[policy]["full"] : shared_full;
    const double full_score = own != row.cells.end() ? own->second.aggregate.score : shared_full_score;
    std::vector<BudgetPoint> points;
    for (auto& [budget, cell] : row.cells) {
      if (reference) cell.vs_full = paired_difference(samples[policy][budget], *reference);
      if (budget != "full") points.push_back({cell.aggregate.kept_ratio, cell.aggregate.score});
    }
    row.iso = iso_quality_budget(points, full_score, iso_threshold);
    group.rows.push_back(std::move(row));
  }
}

}  // namespace

SampleScoreSource store_sample_scores(ResultsStore& store) {
  auto cache = std::make_shared<std::map<int64_t, std::vector<SampleResult>>>();
  return [&store, cache](const AggregateRow& aggregate) {
    auto it = cache->find(aggregate.run_id);
    if (it == cache->end()) it = cache->emplace(aggregate.run_id, store.results(aggregate.run_id)).first;
    std::map<std::string, double> scores;
    for (const auto& result : it->second) {
      // Within one run a label has one content: the stored label finds the aggregate's rows.
      if (result.task == aggregate.task && result.policy == aggregate.policy_name && result.budget == aggregate.budget)
        scores[result.sample_key] = result.score;
    }
    return scores;
  };
}

std::vector<LeaderboardGroup> build_leaderboard(const std::vector<AggregateRow>& task_rows, const SampleScoreSource& scores,
                                                double iso_threshold) {
  // The pooled "all tasks" groups follow the tasks' (evals/leaderboard_pooled.h); their per-sample
  // scores are the union of their members', keyed by task and sample.
  std::vector<AggregateRow> rows = task_rows;
  for (auto& pooled : pooled_rows(task_rows)) rows.push_back(std::move(pooled));
  SampleScoreSource source = scores;
  if (scores) {
    source = [&task_rows, scores](const AggregateRow& aggregate) {
      if (aggregate.task != kPooledTask) return scores(aggregate);
      std::map<std::string, double> all;
      for (const AggregateRow* member : pooled_members(task_rows, aggregate)) {
        for (const auto& [key, score] : scores(*member)) all[member->task + '\x1f' + key] = score;
      }
      return all;
    };
  }
  std::vector<LeaderboardGroup> groups;
  std::vector<std::vector<const AggregateRow*>> members;
  for (const auto& row : rows) {
    size_t at = 0;
    while (at < groups.size() && !(groups[at].model == row.model && groups[at].task == row.task)) ++at;
    if (at == groups.size()) {
      groups.push_back({row.model, row.task, {}, {}});
      members.emplace_back();
    }
    members[at].push_back(&row);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<AggregateRow> copies;
    for (const auto* row : members[g]) copies.push_back(*row);
    groups[g].budgets = ordered_budgets(copies);
    fill_group(groups[g], members[g], source, iso_threshold);
  }
  return groups;
}

double compressed_mean(const LeaderboardRow& row, LeaderboardMetric metric) {
  double sum = 0;
  int count = 0;
  for (const auto& [budget, cell] : row.cells) {
    if (budget == "full") continue;
    sum += metric_value(cell.aggregate, metric);
    ++count;
  }
  if (count == 0) {
    for (const auto& [budget, cell] : row.cells) {
      sum += metric_value(cell.aggregate, metric);
      ++count;
    }
  }
  return count ? sum / count : std::nan("");
}

}  // namespace kvevict::evals
