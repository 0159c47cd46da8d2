#pragma once
// GPT-2 byte-level BPE (GGUF tokenizer.ggml.model = "gpt2", Hugging Face tokenizer.json "BPE"):
// pre-tokenize with the declared pre-tokenizer, map bytes to printable code points with the GPT-2
// byte-to-unicode table, apply merges by rank, look the results up in the vocabulary.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace kvevict {

// Pre-tokenizers supported. "smollm": every digit is its own chunk, then the GPT-2 regex.
enum class BpePreTokenizer { Gpt2, SmolLM, Llama3, Qwen2 };

struct BpeVocab {
  std::vector<std::string> tokens;                          // byte-level (GPT-2 unicode) strings
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<int> special_ids;                             // ids matched verbatim when parse_special
  BpePreTokenizer pre = BpePreTokenizer::Gpt2;
  int bos_id = -1;
  int eos_id = -1;
  bool add_bos = true;                                      // false: encode(add_bos=true) adds nothing
                                                            // (GGUF tokenizer.ggml.add_bos_token = false)
  std::vector<int> extra_stop_ids;                          // e.g. <|im_end|>
  std::string source;                                       // file name for error messages
};

// Throws ModelError(vocab.source, ...) when an id is out of range or the vocabulary is empty.
// Special tokens (special_ids) are matched verbatim in encode only when parse_special is true and
// decode to their text verbatim; every other token decodes through the byte table. Input bytes
// that the vocabulary has no byte symbol for are dropped (Hugging Face and llama.cpp do the same).
std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeVocab vocab);

}  // namespace kvevict
