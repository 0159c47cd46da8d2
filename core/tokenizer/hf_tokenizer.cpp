#include "core/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "core/util/error.h"
#include "core/util/json_file.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kMaxTokens = 1 << 22;

// The two Split regexes known to kvevict's BPE pre-tokenizers, as tokenizer.json stores them
// (after JSON unescaping). They differ only in how digits group: Llama 3 by threes, Qwen2 one by one.
const std::string kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Some exporters spell the case-insensitive contractions out: (?:'[sS]|'[tT]|...).
std::string spelled_out_contractions(const std::string& regex) {
  const std::string from = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const std::string to = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  return to + regex.substr(from.size());
}

bool is_regex(const std::string& pattern, const std::string& known) {
  return pattern == known || pattern == spelled_out_contractions(known);
}

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

// ByteLevel step: add_prefix_space must be false (kvevict never prepends a space).
void check_byte_level(const json& node, const std::string& file, bool expect_regex) {
  if (flag(node, "add_prefix_space", true)) unsupported(file, "ByteLevel pre-tokenizer with add_prefix_space = true");
  if (flag(node, "use_regex", true) != expect_regex) {
    unsupported(file, std::string("ByteLevel pre-tokenizer with use_regex = ") + (expect_regex ? "false" : "true") +
                          " in this position");
  }
}

std::string split_regex(const json& node) {
  if (type_of(node) != "Split") return "";
  auto pattern = node.find("pattern");
  auto behavior = node.find("behavior");
  if (pattern == node.end() || !pattern->is_object() || behavior == node.end() || *behavior != "Isolated" ||
      flag(node, "invert", false)) {
    return "";
  }
  auto regex = pattern->find("Regex");
  return regex != pattern->end() && regex->is_string() ? regex->get<std::string>() : "";
}

bool splits_single_digits(const json& node) {
  if (type_of(node) == "Digits") return flag(node, "individual_digits", false);
  const std::string regex = split_regex(node);
  return regex == R"(\p{N})" || regex == R"(\d)" || regex == "[0-9]";
}

// pre_tokenizer := ByteLevel | Sequence[digits, ByteLevel] | Sequence[Split(regex), ByteLevel]
BpePreTokenizer detect_pre_tokenizer(const json& pre, const std::string& file) {
  const std::string type = type_of(pre);
  if (type == "ByteLevel") {
    check_byte_level(pre, file, true);
    return BpePreTokenizer::Gpt2;
  }
  if (type == "Sequence") {
    auto steps = pre.find("pretokenizers");
    if (steps != pre.end() && steps->is_array() && steps->size() == 2 && type_of((*steps)[1]) == "ByteLevel") {
      const json& first = (*steps)[0];
      if (splits_single_digits(first)) {
        check_byte_level((*steps)[1], file, true);
        return BpePreTokenizer::SmolLM;
      }
      const std::string regex = split_regex(first);
      if (is_regex(regex, kLlama3Regex) || is_regex(regex, kQwen2Regex)) {
        check_byte_level((*steps)[1], file, false);
        return is_regex(regex, kLlama3Regex) ? BpePreTokenizer::Llama3 : BpePreTokenizer::Qwen2;
      }
      if (!regex.empty()) unsupported(file, "Split pre-tokenizer regex '" + regex + "' is not one kvevict knows");
    }
  }
  if (type == "Metaspace") unsupported(file, "SentencePiece-style (Metaspace) pre-tokenizer");
  unsupported(file, "pre-tokenizer " + (pre.is_null() ? std::string("null") : pre.dump()) +
                        " (supported: GPT-2 ByteLevel, SmolLM digits + ByteLevel, Llama-3 and Qwen2 Split + ByteLevel)");
}

// merge := "left right" | ["left", "right"]
std::pair<std::string, std::string> parse_merge(const json& m, size_t index, const std::string& file) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos) {
      throw ModelError(file, "model.merges[" + std::to_string(index) + "] = \"" + s + "\" is not \"left right\"");
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
      throw ModelError(file, "key '" + key + "' holds " + item.dump() + ", which is not a token id (vocabulary has " +
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

HfTokenizerFiles find_hf_tokenizer_files(const std::string& dir) {
  HfTokenizerFiles files;
  std::error_code ec;
  auto present = [&](const char* name) {
    fs::path p = fs::path(dir) / name;
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
  };
  files.tokenizer_json = present("tokenizer.json");
  if (files.tokenizer_json.empty()) {
    if (!present("tokenizer.model").empty()) {
      throw ModelError(dir, "unsupported tokenizer: only tokenizer.model (SentencePiece protobuf) is present; "
                            "kvevict reads tokenizer.json");
    }
    throw ModelError(dir, "no tokenizer.json in the folder");
  }
  files.tokenizer_config_json = present("tokenizer_config.json");
  files.config_json = present("config.json");
  files.generation_config_json = present("generation_config.json");
  return files;
}

BpeVocab read_hf_bpe_vocab(const HfTokenizerFiles& files) {
  const std::string& file = files.tokenizer_json;
  const json tj = read_json_file(file);
  const JsonFields top(tj, file);
  const json* model_node = top.find("model");
  if (!model_node) top.fail("model", "is missing");
  const JsonFields model(*model_node, file, "model.");
  const std::string model_type = model.string_or("type", "BPE");
  if (model_type != "BPE") unsupported(file, "model type '" + model_type + "' (supported: BPE)");
  if (model.boolean_or("byte_fallback", false)) {
    unsupported(file, "SentencePiece-style BPE with byte_fallback (Llama-2/Mistral tokenizer.json)");
  }
  if (const json* norm = top.find("normalizer")) {
    if (type_of(*norm) != "NFC") unsupported(file, "normalizer " + norm->dump() + " (supported: none, NFC)");
  }

  BpeVocab vocab;
  vocab.source = file;
  const json* pre = top.find("pre_tokenizer");
  vocab.pre = detect_pre_tokenizer(pre ? *pre : json(), file);

  std::vector<bool> filled;
  const json* vocab_node = model.find("vocab");
  if (!vocab_node || !vocab_node->is_object() || vocab_node->empty()) {
    model.fail("vocab", "must be a non-empty object {token: id}");
  }
  for (const auto& [text, id] : vocab_node->items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= static_cast<uint64_t>(kMaxTokens)) {
      model.fail("vocab", "gives token \"" + text + "\" the id " + id.dump() + " (expected 0.." +
                              std::to_string(kMaxTokens - 1) + ")");
    }
    int64_t i = static_cast<int64_t>(id.get<uint64_t>());
    if (static_cast<size_t>(i) < filled.size() && filled[i]) {
      model.fail("vocab", "gives id " + std::to_string(i) + " to both \"" + vocab.tokens[i] + "\" and \"" + text + "\"");
    }
    put_token(vocab.tokens, filled, i, text);
  }

  // added_tokens := [{ "id": u32, "content": string, "special": bool, ... }]; they may repeat a
  // vocabulary entry (same id, same text) or extend the id space.
  std::set<std::string> special_texts;
  if (const json* added = top.find("added_tokens")) {
    if (!added->is_array()) top.fail("added_tokens", "must be an array");
    for (size_t k = 0; k < added->size(); ++k) {
      const JsonFields t((*added)[k], file, "added_tokens[" + std::to_string(k) + "].");
      int64_t id = t.integer("id", 0, kMaxTokens - 1);
      std::string content = t.string("content");
      if (content.empty()) t.fail("content", "is empty");
      if (static_cast<size_t>(id) < filled.size() && filled[id] && vocab.tokens[id] != content) {
        t.fail("id", "= " + std::to_string(id) + " is already \"" + vocab.tokens[id] + "\" in the vocabulary, not \"" +
                         content + "\"");
      }
      put_token(vocab.tokens, filled, id, content);
      if (t.boolean_or("special", false)) {
        vocab.special_ids.push_back(static_cast<int>(id));
        special_texts.insert(content);
      }
    }
  }
  for (size_t i = 0; i < filled.size(); ++i) {
    if (!filled[i]) throw ModelError(file, "token id " + std::to_string(i) + " is missing (ids must be 0..N-1 without holes)");
  }

  const json* merges = model.find("merges");
  if (!merges || !merges->is_array()) model.fail("merges", "must be an array");
  vocab.merges.reserve(merges->size());
  for (size_t k = 0; k < merges->size(); ++k) vocab.merges.push_back(parse_merge((*merges)[k], k, file));

  // BOS / EOS: tokenizer_config.json names the token text; config.json gives the id.
  std::map<std::string, int> id_of;
  for (size_t i = 0; i < vocab.tokens.size(); ++i) id_of.emplace(vocab.tokens[i], static_cast<int>(i));
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
                         std::string("key '") + token_key + "' names \"" + *text + "\", which is not in tokenizer.json");
      }
      return found->second;
    }
    std::vector<int> ids = config_token_ids(files.config_json, id_key, vocab.tokens.size());
    return ids.empty() ? -1 : ids[0];
  };
  vocab.bos_id = resolve("bos_token", "bos_token_id");
  vocab.eos_id = resolve("eos_token", "eos_token_id");
  // Whether encode(add_bos=true) really adds BOS: tokenizer_config.json's add_bos_token, else
  // whether tokenizer.json's post-processor inserts it (Llama 3 does; SmolLM2 and Qwen2 do not).
  if (auto it = tokenizer_config.find("add_bos_token"); it != tokenizer_config.end() && it->is_boolean()) {
    vocab.add_bos = it->get<bool>();
  } else {
    const json* post = top.find("post_processor");
    vocab.add_bos = vocab.bos_id >= 0 && post && post_processor_adds(*post, vocab.tokens[vocab.bos_id]);
  }

  std::vector<int> stops = config_token_ids(files.config_json, "eos_token_id", vocab.tokens.size());
  for (int id : config_token_ids(files.generation_config_json, "eos_token_id", vocab.tokens.size())) stops.push_back(id);
  for (const char* text : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"}) {
    if (special_texts.count(text)) stops.push_back(id_of.at(text));
  }
  for (int id : stops) {
    if (id != vocab.eos_id && std::find(vocab.extra_stop_ids.begin(), vocab.extra_stop_ids.end(), id) ==
                                  vocab.extra_stop_ids.end()) {
      vocab.extra_stop_ids.push_back(id);
    }
  }
  return vocab;
}

std::string hf_chat_template_name(const HfTokenizerFiles& files) {
  if (files.tokenizer_config_json.empty()) return "none";
  const json config = read_json_file(files.tokenizer_config_json, 64u << 20);
  if (!config.is_object()) return "none";
  auto it = config.find("chat_template");
  if (it == config.end()) return "none";
  // chat_template := string | [{ "name": string, "template": string }]
  auto mentions_chatml = [](const json& t) {
    return t.is_string() && t.get<std::string>().find("<|im_start|>") != std::string::npos;
  };
  if (mentions_chatml(*it)) return "chatml";
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.contains("name") && entry["name"] == "default" && entry.contains("template") &&
          mentions_chatml(entry["template"])) {
        return "chatml";
      }
    }
  }
  return "none";
}

}  // namespace kvevict
