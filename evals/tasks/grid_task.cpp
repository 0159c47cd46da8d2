#include "evals/tasks/grid_task.h"

#include <algorithm>

#include "evals/tasks/task_types.h"

namespace kvevict::evals {

LengthDepthGridTask::LengthDepthGridTask(std::string name, std::vector<int64_t> lengths, std::vector<double> depths,
                                         CommonTaskOptions common)
    : name_(std::move(name)), lengths_(std::move(lengths)), depths_(std::move(depths)), common_(common) {}

std::vector<Sample> LengthDepthGridTask::generate(const TaskContext& context) const {
  std::vector<Sample> samples;
  const int per_point = context.limit > 0 ? std::min(context.limit, common_.samples) : common_.samples;
  const std::vector<double> depth_axis = depths_.empty() ? std::vector<double>{-1} : depths_;
  for (int64_t length : lengths_) {
    for (double grid_depth : depth_axis) {
      for (int i = 0; i < per_point; ++i) {
        Sample sample;
        sample.task = name_;
        sample.key = "len=" + std::to_string(length) + "/depth=" + format_depth(grid_depth) + "/i=" + std::to_string(i);
        sample.length = static_cast<int>(length);
        sample.depth = grid_depth;  // -1 when drawn at random (the drawn depth is in `grid`)
        sample.index = i;
        sample.query_aware = common_.query_aware;
        Rng rng(derive_seed(context.seed, name_ + "/" + sample.key));
        fill_sample(context, rng, sample);
        samples.push_back(std::move(sample));
      }
    }
  }
  return samples;
}

}  // namespace kvevict::evals
