#pragma once
// `kvevict compare A B`: the paired difference of policy A against policy B per (model, task,
// budget), on the samples both were scored on (A - B per sample_key; evals/stats_paired.h). Each
// side's scores come from the run the leaderboard shows for that (model, task, policy, budget).
#include <string>
#include <vector>

#include "evals/leaderboard_stats.h"
#include "evals/results_store.h"
#include "evals/stats_paired.h"

namespace kvevict::evals {

struct PolicyComparison {
  std::string model, task, budget;
  double mean_a = 0, mean_b = 0;  // over the shared samples
  PairedDifference difference;    // a - b
};

// `a` and `b` are leaderboard names (AggregateRow::policy: "snapkv", or "snapkv@3f2a91" where one
// name has several contents). Throws UsageError naming the policy when `a` or `b` has no
// leaderboard row among `rows` (listing the policies there are, or the name@hash versions when the
// name has several contents), or when the two share no sample; (task, budget) cells without a
// shared sample are left out.
std::vector<PolicyComparison> compare_policies(const std::vector<AggregateRow>& rows, const SampleScoreSource& scores,
                                               const std::string& a, const std::string& b);
// "A better" | "B better" | "no significant difference" (the interval includes 0), with the names.
std::string comparison_verdict(const PolicyComparison& comparison, const std::string& a, const std::string& b);
std::string render_comparison_table(const std::vector<PolicyComparison>& comparisons, const std::string& a,
                                    const std::string& b);
std::string render_comparison_json(const std::vector<PolicyComparison>& comparisons, const std::string& a,
                                   const std::string& b);

}  // namespace kvevict::evals
