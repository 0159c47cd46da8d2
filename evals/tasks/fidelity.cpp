// fidelity: no question. The context is generated essay text of `length` tokens; after eviction the
// model is teacher-forced through a continuation of `continuation` tokens and its next-token
// distributions are compared with the full cache's (mean KL(full || evicted), top-1 agreement), then
// `greedy` tokens are generated from the context end and compared with the full cache's greedy tokens.
// The score is top-1 agreement in percent; KL and greedy agreement are stored alongside.
// Options: lengths, continuation, greedy, samples.
#include "evals/tasks/filler.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

class FidelityTask : public Task {
 public:
  FidelityTask(std::string name, std::vector<int64_t> lengths, int continuation, int greedy, int samples)
      : name_(std::move(name)), lengths_(std::move(lengths)), continuation_(continuation), greedy_(greedy),
        samples_(samples) {}

  std::vector<Sample> generate(const TaskContext& context) const override {
    std::vector<Sample> samples;
    const int per_point = context.limit > 0 ? std::min(context.limit, samples_) : samples_;
    for (int64_t length : lengths_) {
      for (int i = 0; i < per_point; ++i) {
        std::string key = "len=" + std::to_string(length) + "/i=" + std::to_string(i);
        Rng rng(derive_seed(context.seed, name_ + "/" + key));
        Haystack body = build_haystack(FillerStyle::Essay, rng, context.count_tokens, static_cast<int>(length));
        Haystack tail = build_haystack(FillerStyle::Essay, rng, context.count_tokens, continuation_);
        PlacedText placed = fit_to_length(body, {}, {}, context.count_tokens, static_cast<int>(length));
        std::string continuation;
        for (const auto& sentence : tail.sentences) continuation += (continuation.empty() ? " " : "") + sentence;
        if (!continuation.empty() && continuation[0] != ' ') continuation = " " + continuation;

        Sample sample;
        sample.task = name_;
        sample.key = key;
        sample.length = static_cast<int>(length);
        sample.index = i;
        sample.context = placed.text;
        sample.query_aware = false;
        sample.metric = "fidelity";
        sample.fidelity = true;
        sample.continuation = continuation;
        sample.greedy_tokens = greedy_;
        sample.max_new_tokens = greedy_;
        sample.grid = {{"length", length},
                       {"context_tokens", placed.total_tokens},
                       {"continuation_tokens", context.count_tokens(continuation)},
                       {"greedy", greedy_}};
        samples.push_back(std::move(sample));
      }
    }
    return samples;
  }

 private:
  std::string name_;
  std::vector<int64_t> lengths_;
  int continuation_, greedy_, samples_;
};

}  // namespace

std::unique_ptr<Task> make_fidelity_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {1024}, 32);
  // Both run after the context, so each must fit beside the longest length in the model's context.
  int continuation = static_cast<int>(reader.get_extra_tokens("continuation", 64, 1, lengths));
  int greedy = static_cast<int>(reader.get_extra_tokens("greedy", 32, 0, lengths));
  int samples = static_cast<int>(reader.get_int("samples", 2, 1, 1000000));
  return std::make_unique<FidelityTask>(instance, lengths, continuation, greedy, samples);
}

}  // namespace kvevict::evals
