#pragma once
// The real SampleRunner: a loaded model, the reference decoder and an eviction backend.
// Prompt layout (built by evals/prompt_text.h, shared with inspect --chat and replay): the user message is `context + separator + question` inside the model's chat
// template. Query-aware samples compress the whole prompt (question included); question-agnostic
// samples compress the prompt up to the end of the context, and the rest (question, assistant
// header, answer prefix) runs after eviction. A query-aware sample's first token therefore comes
// from the prefill's own logits (full attention, as in kvpress's query-aware setting); every later
// token attends to the evicted cache. Fidelity samples compress the bare text (no template). TTFT = the shared full-cache prefill + eviction +
// the post-eviction tail + the first token, so it is comparable across policies.
#include <memory>

#include "evals/prefill_evictor.h"
#include "evals/sample_runner.h"

namespace kvevict::evals {

std::unique_ptr<SampleRunner> make_decoder_runner(const EvalConfig& config, std::unique_ptr<PrefillEvictor> evictor);

}  // namespace kvevict::evals
