#include "core/tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <map>
#include <optional>

#include "core/util/error.h"
#include "core/util/quote.h"
#include "core/util/json_file.h"

namespace kvevict::hf {

using nlohmann::json;

namespace {

constexpr int64_t kMaxTokens = 1 << 22;

// merge := "left right" | ["left", "right"]
std::pair<std::string, std::string> parse_merge(const json& m, size_t index, const std::string& file) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos) {
      throw ModelError(file, "model.merges[" + std::to_string(index) + "] = \"" + quote_input(s) + "\" is not \"left right\"");
    }
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  }
  throw ModelError(file, "model.merges[" + std::to_string(index) + "] must be \"left right\" or [left, right]");
}

void put_token(std::vector<std::string>& tokens, std::vector<bool>& filled, int64_t id, const std::string& text) {
  if (static_cast<size_t>(id) >= tokens.size()) {
    tokens.resize(id + 1);
    filled.resize(id + 1, false);
  }
  tokens[id] = text;
  filled[id] = true;
}

// Grows the table to at least n ids (new ones unfilled).
void tokens_cover(std::vector<std::string>& tokens, std::vector<bool>& filled, size_t n) {
  if (tokens.size() < n) {
    tokens.resize(n);
    filled.resize(n, false);
  }
}

// A token named in tokenizer_config.json: "text" | {"content": "text", ...} | null.
std::optional<std::string> config_token_text(const json& v, const std::string& file, const std::string& key) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw ModelError(file, "key '" + key + "' must be a string, an object with 'content', or null");
}

// config.json / generation_config.json: "<key>": id | [id, ...] | null.
std::vector<int> config_token_ids(const std::string& file, const std::string& key, size_t n_tokens) {
  if (file.empty()) return {};
  json j = read_json_file(file, 16u << 20);
  if (!j.is_object()) return {};
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  std::vector<json> items = it->is_array() ? std::vector<json>(it->begin(), it->end()) : std::vector<json>{*it};
  std::vector<int> ids;
  for (const auto& item : items) {
    if (!item.is_number_unsigned() || item.get<uint64_t>() >= n_tokens) {
      throw ModelError(file, "key '" + key + "' holds " + quote_input(item.dump()) + ", which is not a token id (vocabulary has " +
                                 std::to_string(n_tokens) + " tokens)");
    }
    ids.push_back(static_cast<int>(item.get<uint64_t>()));
  }
  return ids;
}

// post_processor := TemplateProcessing{ "single": [{"SpecialToken": {"id": text}} | {"Sequence": ...}] }
//                 | Sequence{ "processors": [post_processor...] } | other
bool post_processor_adds(const json& node, const std::string& text) {
  const std::string type = type_of(node);
  if (type == "Sequence" && node.contains("processors") && node["processors"].is_array()) {
    for (const auto& p : node["processors"]) {
      if (post_processor_adds(p, text)) return true;
    }
    return false;
  }
  if (type != "TemplateProcessing" || !node.contains("single") || !node["single"].is_array()) return false;
  for (const auto& piece : node["single"]) {
    if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
        piece["SpecialToken"].value("id", json()) == text) {
      return true;
    }
  }
  return false;
}
}  // namespace

std::string type_of(const json& node) {
  if (!node.is_object()) return "";
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : "";
}

bool flag(const json& node, const char* key, bool fallback) {
  auto it = node.find(key);
  return it != node.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

[[noreturn]] void unsupported(const std::string& file, const std::string& what) {
  throw ModelError(file, "unsupported tokenizer: " + what);
}

TokenTable read_token_table(const json& tokenizer, const std::string& file) {
  const JsonFields top(tokenizer, file);
  const json* model_node = top.find("model");
  if (!model_node) top.fail("model", "is missing");
  const JsonFields model(*model_node, file, "model.");
  TokenTable table;
  std::vector<bool> filled;
  const json* vocab_node = model.find("vocab");
  if (!vocab_node || !vocab_node->is_object() || vocab_node->empty()) {
    model.fail("vocab", "must be a non-empty object {token: id}");
  }
  // Ids are 0..N-1 without holes, so none can reach the number of entries (vocab + added_tokens).
  // Such an id is not stored (a 40-byte file could otherwise grow the table to 4M tokens): the
  // table is sized to the entries instead, and the hole it leaves is reported below.
  const json* added_node = top.find("added_tokens");
  const uint64_t entries = vocab_node->size() + (added_node && added_node->is_array() ? added_node->size() : 0);
  auto fits = [&](uint64_t id) {
    if (id < entries) return true;
    tokens_cover(table.tokens, filled, entries);
    return false;
  };
  for (const auto& [text, id] : vocab_node->items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= static_cast<uint64_t>(kMaxTokens)) {
      model.fail("vocab", "gives token \"" + quote_input(text) + "\" the id " + quote_input(id.dump()) + " (expected 0.." +
                              std::to_string(kMaxTokens - 1) + ")");
    }
    if (!fits(id.get<uint64_t>())) continue;
    int64_t i = static_cast<int64_t>(id.get<uint64_t>());
    if (static_cast<size_t>(i) < filled.size() && filled[i]) {
      model.fail("vocab", "gives id " + std::to_string(i) + " to both \"" + quote_input(table.tokens[i]) + "\" and \"" + quote_input(text) + "\"");
    }
    put_token(table.tokens, filled, i, text);
  }

  // added_tokens := [{ "id": u32, "content": string, "special": bool, ... }]; they may repeat a
  // vocabulary entry (same id, same text) or extend the id space.
  if (const json* added = top.find("added_tokens")) {
    if (!added->is_array()) top.fail("added_tokens", "must be an array");
    for (size_t k = 0; k < added->size(); ++k) {
      const JsonFields t((*added)[k], file, "added_tokens[" + std::to_string(k) + "].");
      int64_t id = t.integer("id", 0, kMaxTokens - 1);
      if (!fits(static_cast<uint64_t>(id))) continue;
      std::string content = t.string("content");
      if (content.empty()) t.fail("content", "is empty");
      if (static_cast<size_t>(id) < filled.size() && filled[id] && table.tokens[id] != content) {
        t.fail("id", "= " + std::to_string(id) + " is already \"" + quote_input(table.tokens[id]) + "\" in the vocabulary, not \"" +
                         quote_input(content) + "\"");
      }
      put_token(table.tokens, filled, id, content);
      if (t.boolean_or("special", false)) {
        table.special_ids.push_back(static_cast<int>(id));
        table.special_texts.insert(content);
      }
    }
  }
  for (size_t i = 0; i < filled.size(); ++i) {
    if (!filled[i]) throw ModelError(file, "token id " + std::to_string(i) + " is missing (ids must be 0..N-1 without holes)");
  }

  const json* merges = model.find("merges");
  if (!merges || !merges->is_array()) model.fail("merges", "must be an array");
  table.merges.reserve(merges->size());
  for (size_t k = 0; k < merges->size(); ++k) table.merges.push_back(parse_merge((*merges)[k], k, file));
  return table;
}

SpecialTokens resolve_special_tokens(const TokenTable& table, const json& tokenizer, const HfTokenizerFiles& files) {
  SpecialTokens special;
  // BOS / EOS: tokenizer_config.json names the token text; config.json gives the id.
  std::map<std::string, int> id_of;
  for (size_t i = 0; i < table.tokens.size(); ++i) id_of.emplace(table.tokens[i], static_cast<int>(i));
  json tokenizer_config = files.tokenizer_config_json.empty() ? json::object()
                                                               : read_json_file(files.tokenizer_config_json, 64u << 20);
  if (!tokenizer_config.is_object()) {
    throw ModelError(files.tokenizer_config_json, "top level must be a JSON object");
  }
  auto resolve = [&](const char* token_key, const char* id_key) -> int {
    auto it = tokenizer_config.find(token_key);
    if (it != tokenizer_config.end()) {
      std::optional<std::string> text = config_token_text(*it, files.tokenizer_config_json, token_key);
      if (!text) return -1;
      auto found = id_of.find(*text);
      if (found == id_of.end()) {
        throw ModelError(files.tokenizer_config_json,
                         std::string("key '") + token_key + "' names \"" + quote_input(*text) + "\", which is not in tokenizer.json");
      }
      return found->second;
    }
    std::vector<int> ids = config_token_ids(files.config_json, id_key, table.tokens.size());
    return ids.empty() ? -1 : ids[0];
  };
  special.bos_id = resolve("bos_token", "bos_token_id");
  special.eos_id = resolve("eos_token", "eos_token_id");
  // Whether encode(add_bos=true) really adds BOS: tokenizer_config.json's add_bos_token, else
  // whether tokenizer.json's post-processor inserts it (Llama 3 does; SmolLM2 and Qwen2 do not).
  if (auto it = tokenizer_config.find("add_bos_token"); it != tokenizer_config.end() && it->is_boolean()) {
    special.add_bos = it->get<bool>();
  } else {
    const json* post = (tokenizer.is_object() && tokenizer.contains("post_processor") ? &tokenizer["post_processor"] : nullptr);
    special.add_bos = special.bos_id >= 0 && post && post_processor_adds(*post, table.tokens[special.bos_id]);
  }

  std::vector<int> stops = config_token_ids(files.config_json, "eos_token_id", table.tokens.size());
  for (int id : config_token_ids(files.generation_config_json, "eos_token_id", table.tokens.size())) stops.push_back(id);
  for (const char* text : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"}) {
    if (table.special_texts.count(text)) stops.push_back(id_of.at(text));
  }
  for (int id : stops) {
    if (id != special.eos_id && std::find(special.extra_stop_ids.begin(), special.extra_stop_ids.end(), id) ==
                                  special.extra_stop_ids.end()) {
      special.extra_stop_ids.push_back(id);
    }
  }
  return special;
}

bool is_sentencepiece_style(const json& tokenizer) {
  if (!tokenizer.is_object() || !tokenizer.contains("model") || !flag(tokenizer["model"], "byte_fallback", false)) {
    return false;
  }
  if (tokenizer.contains("pre_tokenizer") && type_of(tokenizer["pre_tokenizer"]) == "Metaspace") return true;
  // Llama 2's normalizer: Sequence[Prepend("▁"), Replace(" " -> "▁")].
  return tokenizer.contains("normalizer") && tokenizer["normalizer"].dump().find("\u2581") != std::string::npos;
}

}  // namespace kvevict::hf
