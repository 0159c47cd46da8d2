#pragma once
// Pre-tokenizers of byte-level BPE vocabularies, written as hand scanners over code points (no
// std::regex: it is slow and has no Unicode categories). Each returns the input split into
// consecutive byte ranges that together cover the whole text; BPE merges never cross a range.
//
//   Gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   SmolLM: first every \p{N} alone, then Gpt2 on the text between the digits
//   Llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2:  as Llama3 but \p{N} one at a time
// \p{L}, \p{N}, \s follow classify_code_point (unicode_text.h).
#include <string_view>
#include <vector>

#include "core/tokenizer/bpe_tokenizer.h"

namespace kvevict {

std::vector<std::string_view> pretokenize(std::string_view text, BpePreTokenizer pre);

}  // namespace kvevict
