// tokenizer.json -> BpeVocab: vocabulary, merges in both forms, special tokens, pre-tokenizer
// detection, BOS/EOS/stop ids and add_bos, the chat template name, and malformed files.
#include "core/tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include "core/util/error.h"
#include "safetensors_writer.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

template <class F>
std::string model_error(F&& f) {
  try {
    f();
  } catch (const ModelError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ModelError";
  return "";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const std::string G = test::gpt2_byte_char(' ');  // "Ġ"

// A folder holding tokenizer.json (+ tokenizer_config.json / config.json when given).
HfTokenizerFiles write_tokenizer(const std::string& name, const json& tokenizer, const json& tokenizer_config = json(),
                                 const json& config = json()) {
  fs::path dir = test::fresh_dir("tok_" + name);
  test::write_bytes(dir / "tokenizer.json", tokenizer.dump());
  if (!tokenizer_config.is_null()) test::write_bytes(dir / "tokenizer_config.json", tokenizer_config.dump());
  if (!config.is_null()) test::write_bytes(dir / "config.json", config.dump());
  return find_hf_tokenizer_files(dir.string());
}

json chatml_config() { return {{"bos_token", "<|im_start|>"}, {"eos_token", {{"content", "<|im_end|>"}}}}; }

TEST(HfTokenizer, VocabMergesAndSpecialsMapToBpeVocab) {
  for (bool arrays : {false, true}) {
    SCOPED_TRACE(arrays ? "merges as arrays" : "merges as strings");
    HfTokenizerFiles files = write_tokenizer(arrays ? "map_arrays" : "map_strings", test::tiny_tokenizer_json(arrays),
                                             chatml_config());
    BpeVocab v = read_hf_bpe_vocab(files);
    ASSERT_EQ(v.tokens.size(), 262u);
    EXPECT_EQ(v.tokens[0], test::gpt2_byte_char(0));
    EXPECT_EQ(v.tokens['A'], "A");
    EXPECT_EQ(v.tokens[' '], G);
    EXPECT_EQ(v.tokens[258], G + "the");
    EXPECT_EQ(v.tokens[260], "<|im_start|>");
    using Merge = std::pair<std::string, std::string>;
    EXPECT_EQ(v.merges, (std::vector<Merge>{{G, "t"}, {"h", "e"}, {G + "t", "he"}}));
    EXPECT_EQ(v.special_ids, (std::vector<int>{259, 260, 261}));
    EXPECT_EQ(v.pre, BpePreTokenizer::SmolLM);
    EXPECT_EQ(v.bos_id, 260);
    EXPECT_EQ(v.eos_id, 261);
    EXPECT_EQ(v.extra_stop_ids, (std::vector<int>{259}));  // <|endoftext|>; <|im_end|> is the EOS itself
    EXPECT_EQ(v.source, files.tokenizer_json);
  }
}

TEST(HfTokenizer, EncodesThroughTheBpeTokenizer) {
  auto tok = load_hf_tokenizer(write_tokenizer("encode", test::tiny_tokenizer_json(), chatml_config()));
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->encode(" the", false), (std::vector<int>{258}));
  EXPECT_EQ(tok->encode("the", false), (std::vector<int>{'t', 257}));
  EXPECT_EQ(tok->encode("<|im_start|>the", false, true), (std::vector<int>{260, 't', 257}));
  const std::string text = "Zürich 2024: naïve café, 東京 😀\n\tdone";
  EXPECT_EQ(tok->decode(tok->encode(text, false)), text);
  // Digits stand alone under the SmolLM pre-tokenizer (the tiny vocabulary has no digit merges
  // either, so this checks the ids are the raw byte tokens).
  EXPECT_EQ(tok->encode("12", false), (std::vector<int>{'1', '2'}));
  EXPECT_EQ(tok->stop_ids().size(), 2u);
}

json split_then_byte_level(const std::string& regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TEST(HfTokenizer, PreTokenizerKindIsDetected) {
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const std::vector<std::pair<json, BpePreTokenizer>> cases = {
      {byte_level, BpePreTokenizer::Gpt2},
      {json(), BpePreTokenizer::SmolLM},  // tiny_tokenizer_json's default: Digits(individual) + ByteLevel
      {{{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", R"(\p{N})"}}}, {"behavior", "Isolated"}, {"invert", false}},
          byte_level}}},
       BpePreTokenizer::SmolLM},
      {split_then_byte_level(kLlama3), BpePreTokenizer::Llama3},
      {split_then_byte_level("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])" + kLlama3.substr(28)),
       BpePreTokenizer::Llama3},
      {split_then_byte_level(kQwen2), BpePreTokenizer::Qwen2},
  };
  int i = 0;
  for (const auto& [pre, kind] : cases) {
    SCOPED_TRACE(i);
    auto files = write_tokenizer("pre" + std::to_string(i++), test::tiny_tokenizer_json(false, pre));
    EXPECT_EQ(read_hf_bpe_vocab(files).pre, kind);
  }
}

TEST(HfTokenizer, BosEosAndAddBosFollowTheConfigs) {
  json t = test::tiny_tokenizer_json();
  // No tokenizer_config.json: ids from config.json (a list of EOS ids: the rest become stop ids).
  BpeVocab v = read_hf_bpe_vocab(write_tokenizer("ids_config", t, json(), {{"bos_token_id", 259}, {"eos_token_id", {261, 260}}}));
  EXPECT_EQ(v.bos_id, 259);
  EXPECT_EQ(v.eos_id, 261);
  EXPECT_EQ(v.extra_stop_ids, (std::vector<int>{260, 259}));
  EXPECT_FALSE(v.add_bos);  // the post-processor is plain ByteLevel

  // bos_token: null in tokenizer_config.json wins over config.json (Qwen2 has no BOS).
  v = read_hf_bpe_vocab(write_tokenizer("bos_null", t, {{"bos_token", nullptr}, {"eos_token", "<|endoftext|>"}},
                                        {{"bos_token_id", 259}}));
  EXPECT_EQ(v.bos_id, -1);
  EXPECT_EQ(v.eos_id, 259);

  // A TemplateProcessing post-processor that inserts BOS (Llama 3) means add_bos.
  t["post_processor"] = {{"type", "Sequence"},
                         {"processors",
                          {{{"type", "ByteLevel"}},
                           {{"type", "TemplateProcessing"},
                            {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}}}};
  v = read_hf_bpe_vocab(write_tokenizer("bos_template", t, {{"bos_token", "<|endoftext|>"}}));
  EXPECT_TRUE(v.add_bos);
  EXPECT_EQ(load_hf_tokenizer(write_tokenizer("bos_template2", t, {{"bos_token", "<|endoftext|>"}}))->encode("A", true),
            (std::vector<int>{259, 'A'}));
  // ... unless tokenizer_config.json says otherwise.
  v = read_hf_bpe_vocab(write_tokenizer("bos_flag", t, {{"bos_token", "<|endoftext|>"}, {"add_bos_token", false}}));
  EXPECT_FALSE(v.add_bos);
}

TEST(HfTokenizer, ChatTemplateName) {
  json t = test::tiny_tokenizer_json();
  EXPECT_EQ(hf_chat_template_name(write_tokenizer("chat_none_file", t)), "none");
  EXPECT_EQ(hf_chat_template_name(write_tokenizer("chat_chatml", t, {{"chat_template", "{{'<|im_start|>' + m}}"}})),
            "chatml");
  EXPECT_EQ(hf_chat_template_name(write_tokenizer("chat_other", t, {{"chat_template", "[INST] {{m}} [/INST]"}})), "none");
  EXPECT_EQ(hf_chat_template_name(write_tokenizer(
                "chat_list", t, {{"chat_template", {{{"name", "default"}, {"template", "<|im_start|>{{m}}"}}}}})),
            "chatml");
}

struct BadTokenizer {
  const char* name;
  std::function<void(json&)> edit;
  const char* expected;
};

TEST(HfTokenizer, BadTokenizerJsonNamesTheFileAndProblem) {
  const std::vector<BadTokenizer> cases = {
      {"not_object", [](json& t) { t = json::array(); }, "must be a JSON object"},
      {"no_model", [](json& t) { t.erase("model"); }, "'model' is missing"},
      {"wordpiece", [](json& t) { t["model"]["type"] = "WordPiece"; }, "unsupported tokenizer: model type 'WordPiece'"},
      {"byte_fallback", [](json& t) { t["model"]["byte_fallback"] = true; }, "unsupported tokenizer: SentencePiece-style"},
      {"metaspace", [](json& t) { t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}}; },
       "unsupported tokenizer: SentencePiece-style (Metaspace)"},
      {"prefix_space", [](json& t) { t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}}; },
       "add_prefix_space = true"},
      {"unknown_regex", [](json& t) { t["pre_tokenizer"] = split_then_byte_level("\\w+"); }, "regex '\\w+'"},
      {"lowercase", [](json& t) { t["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer"},
      {"negative_id", [](json& t) { t["model"]["vocab"]["x"] = -1; }, "the id -1"},
      {"duplicate_id", [](json& t) { t["model"]["vocab"]["xyz"] = 5; }, "gives id 5 to both"},
      {"hole", [](json& t) { t["model"]["vocab"]["far"] = 300; }, "token id 262 is missing"},
      {"huge_id", [](json& t) { t["model"]["vocab"]["far"] = 1ull << 40; }, "the id"},
      {"merge_one_part", [](json& t) { t["model"]["merges"][1] = "he"; }, "model.merges[1] = \"he\""},
      {"merge_three", [](json& t) { t["model"]["merges"][0] = json::array({"a", "b", "c"}); }, "model.merges[0]"},
      {"merges_object", [](json& t) { t["model"]["merges"] = json::object(); }, "'model.merges' must be an array"},
      {"added_conflict", [](json& t) { t["added_tokens"][0]["id"] = 65; }, "already \"A\""},
      {"added_no_content", [](json& t) { t["added_tokens"][0].erase("content"); }, "'added_tokens[0].content' is missing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    json t = test::tiny_tokenizer_json();
    c.edit(t);
    HfTokenizerFiles files = write_tokenizer(std::string("bad_") + c.name, t);
    std::string msg = model_error([&] { read_hf_bpe_vocab(files); });
    EXPECT_HAS(msg, files.tokenizer_json);
    EXPECT_HAS(msg, c.expected);
  }
}

TEST(HfTokenizer, BadBosEosNameTheirFile) {
  json t = test::tiny_tokenizer_json();
  HfTokenizerFiles files = write_tokenizer("bad_bos_text", t, {{"bos_token", "<s>"}});
  std::string msg = model_error([&] { read_hf_bpe_vocab(files); });
  EXPECT_HAS(msg, files.tokenizer_config_json);
  EXPECT_HAS(msg, "'bos_token' names \"<s>\"");

  files = write_tokenizer("bad_eos_id", t, json(), {{"eos_token_id", 5000}});
  msg = model_error([&] { read_hf_bpe_vocab(files); });
  EXPECT_HAS(msg, files.config_json);
  EXPECT_HAS(msg, "'eos_token_id' holds 5000");

  fs::path dir = test::fresh_dir("tok_syntax");
  test::write_bytes(dir / "tokenizer.json", "{\"model\": {\"vocab\": {\"a\": 0,}}}");
  msg = model_error([&] { read_hf_bpe_vocab(find_hf_tokenizer_files(dir.string())); });
  EXPECT_HAS(msg, (dir / "tokenizer.json").string());
  EXPECT_HAS(msg, "line 1:");
}

// ---- SentencePiece-style tokenizer.json (Llama 2) --------------------------------------------

namespace spm {

const std::string U = "\u2581";  // SentencePiece's space

// <unk> <s> </s>, 256 byte pieces, then ▁ t h e ▁t he ▁the with merges (▁ t) (h e) (▁t he).
json llama2_style_tokenizer(json pre_tokenizer = json(), json normalizer = json()) {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const std::string& p : {U, std::string("t"), std::string("h"), std::string("e"), U + "t", std::string("he"), U + "the"}) {
    vocab[p] = id++;
  }
  if (normalizer.is_null() && pre_tokenizer.is_null()) {
    normalizer = {{"type", "Sequence"},
                  {"normalizers",
                   {{{"type", "Prepend"}, {"prepend", U}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", U}}}}};
  }
  json added = json::array();
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i}, {"content", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>"}, {"special", true}});
  }
  return {{"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre_tokenizer},
          {"model",
           {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}, {"vocab", vocab},
            {"merges", {U + " t", "h e", U + "t he"}}}}};
}

TEST(HfSpmTokenizer, Llama2StyleMapsToSpmVocab) {
  auto files = write_tokenizer("spm_llama2", llama2_style_tokenizer(), {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  SpmVocab v = read_hf_spm_vocab(files);
  ASSERT_EQ(v.pieces.size(), 266u);
  EXPECT_EQ(v.pieces[265], U + "the");
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_TRUE(v.add_dummy_prefix);
  // Scores: minus the rank of the merge yielding the piece; unmerged pieces far below.
  EXPECT_EQ(v.scores[263], 0.0f);
  EXPECT_EQ(v.scores[264], -1.0f);
  EXPECT_EQ(v.scores[265], -2.0f);
  EXPECT_LT(v.scores[259], -1e8f);
  EXPECT_EQ(v.types[0], 2);
  EXPECT_EQ(v.types[1], 3);
  EXPECT_EQ(v.types[3 + 'A'], 6);
  EXPECT_EQ(v.types[262], 1);
  EXPECT_EQ(v.source, files.tokenizer_json);
  // The byte-level reader refuses it, naming the kind.
  EXPECT_HAS(model_error([&] { read_hf_bpe_vocab(files); }), "SentencePiece-style");
}

TEST(HfSpmTokenizer, MetaspacePrependSchemeSetsTheDummyPrefix) {
  json never = llama2_style_tokenizer({{"type", "Metaspace"}, {"replacement", U}, {"prepend_scheme", "never"}}, json());
  EXPECT_FALSE(read_hf_spm_vocab(write_tokenizer("spm_never", never)).add_dummy_prefix);
  json first = llama2_style_tokenizer({{"type", "Metaspace"}, {"replacement", U}, {"prepend_scheme", "first"}}, json());
  EXPECT_TRUE(read_hf_spm_vocab(write_tokenizer("spm_first", first)).add_dummy_prefix);
}

TEST(HfSpmTokenizer, ByteLevelFileIsNotSentencePiece) {
  auto files = write_tokenizer("spm_not", test::tiny_tokenizer_json());
  EXPECT_HAS(model_error([&] { read_hf_spm_vocab(files); }), "unsupported tokenizer: not a SentencePiece-style");
}

}  // namespace spm

}  // namespace
}  // namespace kvevict
