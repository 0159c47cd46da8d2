#pragma once
// The tokenizer a GGUF file declares in its metadata:
//   tokenizer.ggml.model = "gpt2"  -> byte-level BPE (tokens, merges, token_type, pre-tokenizer
//                                     from tokenizer.ggml.pre)
//   tokenizer.ggml.model = "llama" -> SentencePiece-style score BPE (tokens with U+2581 for spaces,
//                                     scores, token_type)
// BOS/EOS/UNK ids, add_bos_token and add_space_prefix come from the metadata too. Anything else is
// a ModelError naming the file.
#include <memory>
#include <string>

#include "core/model/gguf_reader.h"
#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/tokenizer.h"

namespace kvevict {

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& file);

// "smollm" -> SmolLM, "default"/"gpt2" -> Gpt2, "llama-bpe"/"llama3" -> Llama3, "qwen2" -> Qwen2;
// anything else throws ModelError(file, ...).
BpePreTokenizer bpe_pretokenizer_from_name(const std::string& name, const std::string& file);

}  // namespace kvevict
