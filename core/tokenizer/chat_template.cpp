#include "core/tokenizer/chat_template.h"

#include "core/util/error.h"

namespace kvevict {

namespace {
// SmolLM2-Instruct's template inserts this system message when the conversation has none.
constexpr const char* kSmolLMSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
}  // namespace

std::string apply_chat_template(const std::string& template_name, const std::string& user_message) {
  if (template_name == "none") return user_message;
  if (template_name == "chatml") {
    return std::string("<|im_start|>system\n") + kSmolLMSystem + "<|im_end|>\n<|im_start|>user\n" + user_message +
           "<|im_end|>\n<|im_start|>assistant\n";
  }
  throw UsageError("unknown chat template '" + template_name + "' (known: chatml, none)");
}

}  // namespace kvevict
