// Placeholder for make_model_runner until the decoder (core/decode), the eviction engine
// (core/engine) and the policy loader (dsl/) are merged: evals/model_runner.cpp is compiled against
// their contracts but not linked, because nothing references it yet. Once they land, this file is
// deleted and make_model_runner forwards to make_decoder_runner.
#include "core/util/error.h"
#include "evals/sample_runner.h"

namespace kvevict::evals {

std::unique_ptr<SampleRunner> make_model_runner(const EvalConfig& config) {
  throw RuntimeError("model '" + config.model + "': this build has no decoder yet (core/decode, core/engine and dsl/ "
                     "are not merged); only the test model 'fake:' can be evaluated");
}

}  // namespace kvevict::evals
