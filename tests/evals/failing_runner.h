#pragma once
// A fake runner that throws after `fail_after` runs, like a process killed mid-sweep: the tests of
// the runner, of stored content and of shard merging use it to leave a run failed half-way.
#include "core/util/error.h"
#include "evals/fake_runner.h"

namespace kvevict::evals::test {

class FailingRunner : public FakeRunner {
 public:
  explicit FailingRunner(int fail_after) : FakeRunner("fake:"), left_(fail_after) {}
  RunOutcome run(const PolicyChoice& policy, const kvevict::Budget& budget) override {
    if (left_-- <= 0) throw kvevict::RuntimeError("simulated crash");
    return FakeRunner::run(policy, budget);
  }

 private:
  int left_;
};

}  // namespace kvevict::evals::test
