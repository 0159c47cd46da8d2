#include "core/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "core/tokenizer/hf_tokenizer_json.h"
#include "core/util/error.h"
#include "core/util/quote.h"
#include "core/util/json_file.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using hf::flag;
using hf::type_of;
using hf::unsupported;

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
      if (!regex.empty()) unsupported(file, "Split pre-tokenizer regex '" + quote_input(regex) + "' is not one kvevict knows");
    }
  }
  if (type == "Metaspace") unsupported(file, "SentencePiece-style (Metaspace) pre-tokenizer");
  unsupported(file, "pre-tokenizer " + (pre.is_null() ? std::string("null") : quote_input(pre.dump())) +
                        " (supported: GPT-2 ByteLevel, SmolLM digits + ByteLevel, Llama-3 and Qwen2 Split + ByteLevel)");
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
  return hf::bpe_vocab_from_json(read_json_file(files.tokenizer_json), files);
}

BpeVocab hf::bpe_vocab_from_json(const json& tj, const HfTokenizerFiles& files) {
  const std::string& file = files.tokenizer_json;
  const JsonFields top(tj, file);
  const json* model_node = top.find("model");
  if (!model_node) top.fail("model", "is missing");
  const JsonFields model(*model_node, file, "model.");
  const std::string model_type = model.string_or("type", "BPE");
  if (model_type != "BPE") unsupported(file, "model type '" + quote_input(model_type) + "' (supported: BPE)");
  if (model.boolean_or("byte_fallback", false)) {
    unsupported(file, "SentencePiece-style BPE with byte_fallback (Llama-2/Mistral tokenizer.json)");
  }
  if (const json* norm = top.find("normalizer")) {
    if (type_of(*norm) != "NFC") unsupported(file, "normalizer " + quote_input(norm->dump()) + " (supported: none, NFC)");
  }

  BpeVocab vocab;
  vocab.source = file;
  const json* pre = top.find("pre_tokenizer");
  vocab.pre = detect_pre_tokenizer(pre ? *pre : json(), file);

  hf::TokenTable table = hf::read_token_table(tj, file);
  hf::SpecialTokens special = hf::resolve_special_tokens(table, tj, files);
  vocab.tokens = std::move(table.tokens);
  vocab.merges = std::move(table.merges);
  vocab.special_ids = std::move(table.special_ids);
  vocab.bos_id = special.bos_id;
  vocab.eos_id = special.eos_id;
  vocab.add_bos = special.add_bos;
  vocab.extra_stop_ids = special.extra_stop_ids;
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
