#pragma once
// Synthetic tasks whose samples form a grid: length x depth x index (passkey, kv_retrieval). The
// base walks the grid, names each sample (`len=L/depth=D/i=I`), seeds its generator from the run
// seed and that name, and fills the grid fields; a task only writes the one sample's text and
// answer. Without configured depths the axis has one point, -1: the task draws a depth per sample.
#include <cstdint>
#include <string>
#include <vector>

#include "evals/tasks/task.h"
#include "evals/util/rng.h"

namespace kvevict::evals {

class LengthDepthGridTask : public Task {
 public:
  LengthDepthGridTask(std::string name, std::vector<int64_t> lengths, std::vector<double> depths, CommonTaskOptions common);
  std::vector<Sample> generate(const TaskContext& context) const final;

 protected:
  // `sample` arrives with task, key, length, depth (the grid's; -1 = draw one with `rng`), index
  // and query_aware set; the task adds context, question, references, metric, limits and grid.
  virtual void fill_sample(const TaskContext& context, Rng& rng, Sample& sample) const = 0;

  const std::string& name() const { return name_; }
  const CommonTaskOptions& common() const { return common_; }
  // The depth a sample uses: the grid's, or one drawn uniformly from 0..100 percent.
  static double depth_or_draw(double grid_depth, Rng& rng) {
    return grid_depth >= 0 ? grid_depth : static_cast<double>(rng.below(101));
  }
  const char* question_mode() const { return common_.query_aware ? "query_aware" : "agnostic"; }

 private:
  std::string name_;
  std::vector<int64_t> lengths_;
  std::vector<double> depths_;
  CommonTaskOptions common_;
};

}  // namespace kvevict::evals
