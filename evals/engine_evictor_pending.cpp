// Placeholder until the eviction engine (core/engine) and the policy loader (dsl/) are merged:
// evals/engine_evictor.cpp is compiled against their contracts but not linked, because nothing
// references it yet. When they land this file goes and make_engine_evictor forwards to
// make_engine_evictor_impl.
#include "core/util/error.h"
#include "evals/prefill_evictor.h"

namespace kvevict::evals {

std::unique_ptr<PrefillEvictor> make_engine_evictor(uint64_t seed) {
  (void)seed;
  throw RuntimeError("this build has no eviction engine or policy loader yet (core/engine and dsl/ are not merged); "
                     "only the test model 'fake:' can be evaluated");
}

}  // namespace kvevict::evals
