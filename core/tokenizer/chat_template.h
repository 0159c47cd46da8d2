#pragma once
// Chat templates: turn a single user message into the prompt text the model was trained on.
#include <string>

namespace kvevict {

// ChatML as SmolLM2-Instruct uses it (with its default system message):
//   <|im_start|>system\n...<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n
// `template_name` "none" returns the message unchanged. Unknown names throw UsageError.
std::string apply_chat_template(const std::string& template_name, const std::string& user_message);

}  // namespace kvevict
