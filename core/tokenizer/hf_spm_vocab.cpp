// SentencePiece-style tokenizer.json (Llama 2, Mistral) -> SpmVocab; see hf_tokenizer.h.
#include <map>

#include "core/tokenizer/hf_tokenizer.h"
#include "core/tokenizer/hf_tokenizer_json.h"
#include "core/util/error.h"
#include "core/util/quote.h"
#include "core/util/json_file.h"

namespace kvevict {

namespace {

constexpr int kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeByte = 6;
constexpr float kNoMergeScore = -1e9f;  // pieces that no merge yields: only ever single characters

bool is_byte_piece(const std::string& p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

// Metaspace {prepend_scheme: "always"|"first"|"never"} or the legacy {add_prefix_space: bool};
// a normalizer that prepends U+2581 (Llama 2) also means a dummy prefix.
bool adds_dummy_prefix(const nlohmann::json& tokenizer) {
  if (tokenizer.contains("pre_tokenizer") && hf::type_of(tokenizer["pre_tokenizer"]) == "Metaspace") {
    const auto& m = tokenizer["pre_tokenizer"];
    if (m.contains("prepend_scheme") && m["prepend_scheme"].is_string()) return m["prepend_scheme"] != "never";
    return hf::flag(m, "add_prefix_space", true);
  }
  return tokenizer.contains("normalizer") && tokenizer["normalizer"].dump().find("Prepend") != std::string::npos;
}

}  // namespace

SpmVocab read_hf_spm_vocab(const HfTokenizerFiles& files) {
  return hf::spm_vocab_from_json(read_json_file(files.tokenizer_json), files);
}

SpmVocab hf::spm_vocab_from_json(const nlohmann::json& tj, const HfTokenizerFiles& files) {
  const std::string& file = files.tokenizer_json;
  if (!is_sentencepiece_style(tj)) {
    unsupported(file, "not a SentencePiece-style tokenizer.json (BPE with byte_fallback and Metaspace or a U+2581 "
                      "normalizer)");
  }
  const JsonFields model(tj["model"], file, "model.");
  if (model.string_or("type", "BPE") != "BPE") unsupported(file, "model type '" + quote_input(model.string("type")) + "'");
  TokenTable table = read_token_table(tj, file);
  SpecialTokens special = resolve_special_tokens(table, tj, files);

  SpmVocab v;
  v.source = file;
  v.bos_id = special.bos_id;
  v.eos_id = special.eos_id;
  v.add_dummy_prefix = adds_dummy_prefix(tj);
  std::map<std::string, int> id_of;
  for (size_t i = 0; i < table.tokens.size(); ++i) id_of.emplace(table.tokens[i], static_cast<int>(i));
  v.unk_id = -1;
  if (model.has("unk_token")) {
    auto it = id_of.find(model.string("unk_token"));
    if (it == id_of.end()) model.fail("unk_token", "names \"" + quote_input(model.string("unk_token")) + "\", which is not in the vocabulary");
    v.unk_id = it->second;
  }

  // HF applies merges by rank; SentencePiece merges the adjacent pair whose result scores best.
  // Scoring each piece by minus the best rank that yields it makes the two agree.
  v.scores.assign(table.tokens.size(), kNoMergeScore);
  for (size_t rank = 0; rank < table.merges.size(); ++rank) {
    auto it = id_of.find(table.merges[rank].first + table.merges[rank].second);
    if (it != id_of.end() && v.scores[it->second] == kNoMergeScore) v.scores[it->second] = -static_cast<float>(rank);
  }
  v.types.assign(table.tokens.size(), kTypeNormal);
  for (size_t i = 0; i < table.tokens.size(); ++i) {
    if (is_byte_piece(table.tokens[i])) v.types[i] = kTypeByte;
  }
  for (int id : table.special_ids) v.types[id] = kTypeControl;
  if (v.unk_id >= 0) v.types[v.unk_id] = kTypeUnknown;
  v.pieces = std::move(table.tokens);
  return v;
}

}  // namespace kvevict
