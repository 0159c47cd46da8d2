#include "evals/stats_compare.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "evals/budget_text.h"
#include "evals/leaderboard.h"

namespace kvevict::evals {
namespace {

double mean_over(const std::map<std::string, double>& scores, const std::map<std::string, double>& other) {
  double sum = 0;
  int count = 0;
  for (const auto& [key, score] : scores) {
    if (other.count(key)) {
      sum += score;
      ++count;
    }
  }
  return count ? sum / count : 0;
}

}  // namespace

std::vector<PolicyComparison> compare_policies(const std::vector<AggregateRow>& rows, const SampleScoreSource& scores,
                                               const std::string& a, const std::string& b) {
  using Cell = std::tuple<std::string, std::string, std::string>;  // model, task, budget
  std::map<Cell, const AggregateRow*> side_a, side_b;
  std::set<std::string> policies;
  for (const auto& row : rows) {
    policies.insert(row.policy);
    if (row.policy == a) side_a[{row.model, row.task, row.budget}] = &row;
    if (row.policy == b) side_b[{row.model, row.task, row.budget}] = &row;
  }
  std::string known;
  for (const auto& policy : policies) known += (known.empty() ? "" : ", ") + policy;
  if (known.empty()) known = "none";
  for (const auto& [name, side] : {std::pair{a, &side_a}, std::pair{b, &side_b}}) {
    if (!side->empty()) continue;
    // A name shared by several contents is shown as name@hash-prefix (evals/policy_labels.h).
    std::set<std::string> versions;
    for (const auto& row : rows) {
      if (row.policy_name == name) versions.insert(row.policy);
    }
    std::string choices;
    for (const auto& version : versions) choices += (choices.empty() ? "" : ", ") + version;
    if (!versions.empty()) {
      throw UsageError(name + ": several policies of different content have this name; give one of " + choices);
    }
    throw UsageError(name + ": no such policy on the leaderboard (policies: " + known + ")");
  }
  std::vector<PolicyComparison> comparisons;
  for (const auto& [cell, row_a] : side_a) {
    auto row_b = side_b.find(cell);
    if (row_b == side_b.end()) continue;
    auto scores_a = scores(*row_a);
    auto scores_b = scores(*row_b->second);
    PolicyComparison comparison{std::get<0>(cell), std::get<1>(cell), std::get<2>(cell), 0, 0, {}};
    comparison.difference = paired_difference(scores_a, scores_b);
    if (comparison.difference.n == 0) continue;
    comparison.mean_a = mean_over(scores_a, scores_b);
    comparison.mean_b = mean_over(scores_b, scores_a);
    comparisons.push_back(comparison);
  }
  if (comparisons.empty()) throw UsageError(a + " and " + b + ": no sample scored with both policies at the same budget");
  std::stable_sort(comparisons.begin(), comparisons.end(), [](const PolicyComparison& x, const PolicyComparison& y) {
    if (x.model != y.model) return x.model < y.model;
    if (x.task != y.task) return x.task < y.task;
    return budget_sort_key(x.budget) < budget_sort_key(y.budget);
  });
  return comparisons;
}

std::string comparison_verdict(const PolicyComparison& comparison, const std::string& a, const std::string& b) {
  if (!comparison.difference.significant()) return "no significant difference";
  return (comparison.difference.mean > 0 ? a : b) + " better";
}

std::string render_comparison_table(const std::vector<PolicyComparison>& comparisons, const std::string& a,
                                    const std::string& b) {
  std::set<std::string> models;
  for (const auto& c : comparisons) models.insert(c.model);
  const bool model_column = models.size() > 1;
  std::vector<std::string> header{"task", "budget", "n", a, b, a + " - " + b + " [95% interval]", "verdict"};
  if (model_column) header.insert(header.begin(), "model");
  std::vector<std::vector<std::string>> grid{header};
  for (const auto& c : comparisons) {
    char mean_a[32], mean_b[32];
    std::snprintf(mean_a, sizeof(mean_a), "%.1f", c.mean_a);
    std::snprintf(mean_b, sizeof(mean_b), "%.1f", c.mean_b);
    grid.push_back({c.task, c.budget, std::to_string(c.difference.n), mean_a, mean_b,
                    format_with_interval(c.difference.mean, c.difference.interval), comparison_verdict(c, a, b)});
    if (model_column) grid.back().insert(grid.back().begin(), c.model);
  }
  std::vector<size_t> widths(grid[0].size(), 0);
  for (const auto& line : grid) {
    for (size_t i = 0; i < line.size(); ++i) widths[i] = std::max(widths[i], line[i].size());
  }
  std::ostringstream out;
  out << a << " vs " << b << (model_column ? "" : " on " + *models.begin())
      << ": paired difference per sample (score 0-100), percentile bootstrap 95% interval\n";
  for (const auto& line : grid) {
    for (size_t i = 0; i < line.size(); ++i) {
      std::string pad(widths[i] - line[i].size(), ' ');
      const bool left = i + 1 == line.size() || (i == 0) || (model_column && i == 1);
      out << (i == 0 ? "" : "  ") << (left ? line[i] + (i + 1 == line.size() ? "" : pad) : pad + line[i]);
    }
    out << "\n";
  }
  return out.str();
}

std::string render_comparison_json(const std::vector<PolicyComparison>& comparisons, const std::string& a,
                                   const std::string& b) {
  nlohmann::json records = nlohmann::json::array();
  for (const auto& c : comparisons) {
    records.push_back({{"model", c.model},
                       {"task", c.task},
                       {"budget", c.budget},
                       {"policy_a", a},
                       {"policy_b", b},
                       {"n", c.difference.n},
                       {"mean_a", c.mean_a},
                       {"mean_b", c.mean_b},
                       {"difference", c.difference.mean},
                       {"low", c.difference.interval.low},
                       {"high", c.difference.interval.high},
                       {"significant", c.difference.significant()},
                       {"verdict", comparison_verdict(c, a, b)}});
  }
  return records.dump(2) + "\n";
}

}  // namespace kvevict::evals
