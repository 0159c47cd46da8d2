#pragma once
// Hugging Face tokenizer.json (the `tokenizers` library's serialisation) -> kvevict tokenizers.
//
// Supported: model.type "BPE" with a byte-level pre-tokenizer (GPT-2 style), recognised by shape:
//   {"type":"ByteLevel", add_prefix_space false, use_regex true}                       -> Gpt2
//   Sequence[Digits{individual_digits:true} | Split{\p{N} or \d, Isolated}, ByteLevel{use_regex:true}]
//                                                                                       -> SmolLM
//   Sequence[Split{Llama-3 regex, Isolated}, ByteLevel{use_regex:false}]                -> Llama3
//   Sequence[Split{Qwen2 regex, Isolated}, ByteLevel{use_regex:false}]                  -> Qwen2
// The normalizer must be null, or NFC (accepted but not applied: it only changes text that is
// not already NFC).
//
// Also supported: SentencePiece-style tokenizer.json (Llama 2, Mistral: model.type "BPE" with
// byte_fallback, and a Metaspace pre-tokenizer or the Prepend/Replace U+2581 normalizer), mapped
// to SpmVocab: each piece scores minus the rank of the best merge that yields it, so the score-
// driven SentencePiece merge order equals the HF merge order. Every other kind raises
// ModelError("unsupported tokenizer: ...").
//
// Special tokens: added_tokens with "special": true. BOS/EOS come from tokenizer_config.json
// (bos_token / eos_token: a string, an {"content": ...} object, or null meaning none), else from
// config.json (bos_token_id / eos_token_id). Extra stop ids: further eos_token_id entries of
// config.json and generation_config.json, and <|im_end|>, <|eot_id|>, <|end_of_text|>,
// <|endoftext|> when they are special tokens. add_bos: tokenizer_config.json's add_bos_token, else
// whether tokenizer.json's post_processor (TemplateProcessing) inserts the BOS token.
#include <memory>
#include <string>

#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/spm_tokenizer.h"
#include "core/tokenizer/tokenizer.h"

namespace kvevict {

struct HfTokenizerFiles {
  std::string tokenizer_json;          // required
  std::string tokenizer_config_json;   // "" when absent
  std::string config_json;             // "" when absent
  std::string generation_config_json;  // "" when absent
};

// The tokenizer files of a model folder; throws ModelError(dir, ...) when tokenizer.json is missing.
HfTokenizerFiles find_hf_tokenizer_files(const std::string& dir);

// tokenizer.json (+ the config files) -> BpeVocab. Throws ModelError naming the file and the
// problem: malformed JSON, a non-byte-level or unknown tokenizer, ids out of range or duplicated,
// holes in the id space, malformed merges, a BOS/EOS token that is not in the vocabulary.
BpeVocab read_hf_bpe_vocab(const HfTokenizerFiles& files);

// SentencePiece-style tokenizer.json -> SpmVocab (pieces keep U+2581; types: unk 2, special 3,
// <0xNN> 6, else 1). Throws ModelError("unsupported tokenizer: ...") for other kinds.
SpmVocab read_hf_spm_vocab(const HfTokenizerFiles& files);

// Picks the kind from tokenizer.json, then read_hf_*_vocab + make_*_tokenizer.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const HfTokenizerFiles& files);

// "chatml" when tokenizer_config.json's chat_template uses <|im_start|>, else "none".
std::string hf_chat_template_name(const HfTokenizerFiles& files);

}  // namespace kvevict
