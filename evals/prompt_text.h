#pragma once
// The exact text the model sees for one sample, and its token ids: one mechanism shared by the
// eval's model runner, `kvevict inspect --chat` and `kvevict replay`, so all three feed the model
// the same ids.
//
// Layout (evals/model_runner.h): the user message is `context + separator + question` inside the
// chat template. Query-aware samples prefill the whole templated prompt plus the answer prefix;
// question-agnostic samples prefill the templated prompt up to the end of the context and run the
// rest (question, assistant header, answer prefix) after eviction. Fidelity samples prefill the bare
// context (no template) and teacher-force the continuation.
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "evals/tasks/sample.h"

namespace kvevict::evals {

struct PromptText {
  std::string prefill;       // prefilled with the full cache, then compressed
  std::string tail;          // run after eviction ("" for query-aware and fidelity samples)
  std::string continuation;  // fidelity only: the teacher-forced continuation
  bool operator==(const PromptText&) const = default;
};

struct PromptIds {
  std::vector<int> prefill, tail, continuation;
};

// `chat_template` is a resolved name (chatml | none; core/tokenizer/chat_template.h). Throws
// RuntimeError when the template does not contain the message verbatim.
PromptText build_prompt_text(const Sample& sample, const std::string& chat_template);

// The prefill gets BOS; prefill and tail parse special tokens (<|im_start|> is one id, as the
// template means it); the continuation is plain text.
PromptIds encode_prompt_text(const Tokenizer& tokenizer, const PromptText& text);

}  // namespace kvevict::evals
