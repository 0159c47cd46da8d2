#include "evals/prompt_text.h"

#include "core/tokenizer/chat_template.h"
#include "core/util/error.h"

namespace kvevict::evals {

PromptText build_prompt_text(const Sample& sample, const std::string& chat_template) {
  PromptText text;
  if (sample.fidelity) {
    text.prefill = sample.context;
    text.continuation = sample.continuation;
    return text;
  }
  const std::string message = sample.context + sample.separator + sample.question;
  const std::string prompt = apply_chat_template(chat_template, message);
  const size_t at = prompt.find(message);
  if (at == std::string::npos) throw RuntimeError("chat template '" + chat_template + "' does not contain the message");
  if (sample.query_aware) {
    text.prefill = prompt + sample.answer_prefix;
  } else {
    text.prefill = prompt.substr(0, at + sample.context.size());
    text.tail = prompt.substr(at + sample.context.size()) + sample.answer_prefix;
  }
  return text;
}

PromptIds encode_prompt_text(const Tokenizer& tokenizer, const PromptText& text) {
  PromptIds ids;
  ids.prefill = tokenizer.encode(text.prefill, /*add_bos=*/true, /*parse_special=*/true);
  if (!text.tail.empty()) ids.tail = tokenizer.encode(text.tail, false, true);
  if (!text.continuation.empty()) ids.continuation = tokenizer.encode(text.continuation, false);
  return ids;
}

}  // namespace kvevict::evals
