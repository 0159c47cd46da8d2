#pragma once
// Pieces of tokenizer.json shared by the byte-level and the SentencePiece-style readers
// (hf_tokenizer.cpp, hf_spm_vocab.cpp): the token table, merges, and the BOS/EOS/stop ids.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/hf_tokenizer.h"
#include "core/tokenizer/spm_tokenizer.h"

namespace kvevict::hf {

// "type" of a tokenizer.json node, "" when absent.
std::string type_of(const nlohmann::json& node);
// A boolean member, `fallback` when absent or not a boolean.
bool flag(const nlohmann::json& node, const char* key, bool fallback);
[[noreturn]] void unsupported(const std::string& file, const std::string& what);

struct TokenTable {
  std::vector<std::string> tokens;                          // id -> text as stored (no holes)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<int> special_ids;                             // added_tokens with "special": true
  std::set<std::string> special_texts;
};

// model.vocab {text: id}, added_tokens [{id, content, special}], model.merges ("a b" | [a, b]).
// Throws ModelError(file, ...) on ids out of range, duplicated or missing, and malformed merges.
TokenTable read_token_table(const nlohmann::json& tokenizer, const std::string& file);

struct SpecialTokens {
  int bos_id = -1;
  int eos_id = -1;
  bool add_bos = false;
  std::vector<int> extra_stop_ids;
};

// BOS/EOS/add_bos/stop ids from tokenizer_config.json, config.json and generation_config.json
// (see hf_tokenizer.h). `tokenizer` is the parsed tokenizer.json (for its post_processor).
SpecialTokens resolve_special_tokens(const TokenTable& table, const nlohmann::json& tokenizer,
                                     const HfTokenizerFiles& files);

// True for a SentencePiece-style tokenizer.json (Llama 2, Mistral): BPE with byte_fallback and a
// Metaspace pre-tokenizer or a normalizer that turns spaces into U+2581.
bool is_sentencepiece_style(const nlohmann::json& tokenizer);

// read_hf_bpe_vocab / read_hf_spm_vocab on an already parsed tokenizer.json.
BpeVocab bpe_vocab_from_json(const nlohmann::json& tokenizer, const HfTokenizerFiles& files);
SpmVocab spm_vocab_from_json(const nlohmann::json& tokenizer, const HfTokenizerFiles& files);

}  // namespace kvevict::hf
