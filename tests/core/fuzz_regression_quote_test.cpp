// Error messages quote at most ~80 bytes of any text read from a file (core/util/quote.h): a
// hostile tokenizer.json, GGUF, safetensors or config.json with a huge token, key or name must not
// produce an equally huge message (issue 13: a 50 MB token gave a 50 MB message). Each case puts
// 1 MB of text where the loader quotes it and checks the message is short and names the file.
#include <gtest/gtest.h>

#include "core/model/gguf_reader.h"
#include "core/model/gguf_tokenizer.h"
#include "core/model/hf_config.h"
#include "core/model/safetensors.h"
#include "core/tokenizer/hf_tokenizer.h"
#include "core/util/error.h"
#include "core/util/json_file.h"
#include "core/util/quote.h"
#include "gguf_writer.h"
#include "safetensors_writer.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kHuge(1 << 20, 'x');
constexpr size_t kMaxMessage = 600;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

#define EXPECT_SHORT_AND_NAMED(msg, file)                                  \
  do {                                                                     \
    const std::string m = (msg);                                           \
    EXPECT_LT(m.size(), kMaxMessage) << m.substr(0, 300);                  \
    EXPECT_EQ(m.rfind(file, 0), 0u) << m.substr(0, 300);                   \
    EXPECT_NE(m.find("(1048576 bytes)"), std::string::npos) << m.substr(0, 300); \
  } while (0)

TEST(QuoteInput, ShortTextUnchangedLongTextCutAtACodePoint) {
  EXPECT_EQ(quote_input("abc"), "abc");
  EXPECT_EQ(quote_input(std::string(80, 'a')), std::string(80, 'a'));
  EXPECT_EQ(quote_input(std::string(81, 'a')), std::string(80, 'a') + "... (81 bytes)");
  // "é" is 2 bytes; a cut inside it backs up to the code point's start.
  const std::string text = std::string(79, 'a') + "\xC3\xA9" + "zz";
  EXPECT_EQ(quote_input(text), std::string(79, 'a') + "... (83 bytes)");
}

fs::path write_tokenizer(const std::string& name, const json& tokenizer) {
  fs::path dir = test::fresh_dir("quote_" + name);
  test::write_bytes(dir / "tokenizer.json", tokenizer.dump());
  return dir;
}

TEST(FuzzRegressionQuote, HugeTokenWithABadIdInTokenizerJson) {
  json tok = test::tiny_tokenizer_json();
  tok["model"]["vocab"][kHuge] = -1;
  const fs::path dir = write_tokenizer("bad_id", tok);
  const std::string file = (dir / "tokenizer.json").string();
  EXPECT_SHORT_AND_NAMED(error_of([&] { load_hf_tokenizer(find_hf_tokenizer_files(dir.string())); }), file);
}

TEST(FuzzRegressionQuote, HugeTokenSharingAnIdInTokenizerJson) {
  json tok = test::tiny_tokenizer_json();
  tok["model"]["vocab"][kHuge] = 0;  // id 0 is also a byte token
  const fs::path dir = write_tokenizer("dup_id", tok);
  EXPECT_SHORT_AND_NAMED(error_of([&] { load_hf_tokenizer(find_hf_tokenizer_files(dir.string())); }),
                         (dir / "tokenizer.json").string());
}

TEST(FuzzRegressionQuote, HugeMergeAndModelTypeInTokenizerJson) {
  json tok = test::tiny_tokenizer_json();
  tok["model"]["merges"].push_back(kHuge);
  fs::path dir = write_tokenizer("merge", tok);
  EXPECT_SHORT_AND_NAMED(error_of([&] { load_hf_tokenizer(find_hf_tokenizer_files(dir.string())); }),
                         (dir / "tokenizer.json").string());
  tok = test::tiny_tokenizer_json();
  tok["model"]["type"] = kHuge;
  dir = write_tokenizer("type", tok);
  EXPECT_SHORT_AND_NAMED(error_of([&] { load_hf_tokenizer(find_hf_tokenizer_files(dir.string())); }),
                         (dir / "tokenizer.json").string());
}

TEST(FuzzRegressionQuote, HugeAddedTokenInTokenizerJson) {
  json tok = test::tiny_tokenizer_json();
  tok["added_tokens"].push_back({{"id", 0}, {"content", kHuge}, {"special", true}});
  const fs::path dir = write_tokenizer("added", tok);
  EXPECT_SHORT_AND_NAMED(error_of([&] { load_hf_tokenizer(find_hf_tokenizer_files(dir.string())); }),
                         (dir / "tokenizer.json").string());
}

TEST(FuzzRegressionQuote, HugeMetadataKeyInGguf) {
  test::GgufWriter w;
  const std::string key(60000, 'k');  // GGUF keys may be up to 65535 bytes
  w.add_raw(key, 99, {});             // invalid value type: the message names the key
  const fs::path path = test::fresh_dir("quote_gguf") / "bad.gguf";
  test::GgufWriter::write_bytes(path.string(), w.bytes());
  const std::string m = error_of([&] { GgufFile f(path.string()); });
  EXPECT_LT(m.size(), kMaxMessage) << m.substr(0, 300);
  EXPECT_NE(m.find("(60000 bytes)"), std::string::npos) << m.substr(0, 300);
}

TEST(FuzzRegressionQuote, HugeTokenizerModelNameInGguf) {
  test::GgufWriter w;
  w.add_string("tokenizer.ggml.model", kHuge);
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  const fs::path path = test::fresh_dir("quote_gguf_tok") / "tok.gguf";
  test::GgufWriter::write_bytes(path.string(), w.bytes());
  GgufFile f(path.string());
  EXPECT_SHORT_AND_NAMED(error_of([&] { tokenizer_from_gguf(f); }), path.string());
}

TEST(FuzzRegressionQuote, HugeTensorNameAndDtypeInSafetensors) {
  const fs::path dir = test::fresh_dir("quote_st");
  json header = {{kHuge, {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 8}}}}};
  test::write_bytes(dir / "a.safetensors", test::st_raw(header.dump(), std::string(8, '\0')));
  EXPECT_SHORT_AND_NAMED(error_of([&] { SafetensorsFile f((dir / "a.safetensors").string()); }),
                         (dir / "a.safetensors").string());
  header = {{"t", {{"dtype", kHuge}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  test::write_bytes(dir / "b.safetensors", test::st_raw(header.dump(), std::string(4, '\0')));
  EXPECT_SHORT_AND_NAMED(error_of([&] { SafetensorsFile f((dir / "b.safetensors").string()); }),
                         (dir / "b.safetensors").string());
}

TEST(FuzzRegressionQuote, HugeModelTypeInConfigJson) {
  const fs::path dir = test::fresh_dir("quote_cfg");
  json config = test::hf_config_json(test::tiny_config(4, 2, 6));
  config.erase("architectures");
  config["model_type"] = kHuge;
  test::write_bytes(dir / "config.json", config.dump());
  EXPECT_SHORT_AND_NAMED(error_of([&] { parse_hf_config((dir / "config.json").string()); }),
                         (dir / "config.json").string());
}

// nlohmann's parse error quotes "last read: '...'", the whole token read so far: a 1 MB string with
// a raw control character in it gave a 1 MB message before parse_json_text quoted it.
TEST(FuzzRegressionQuote, HugeStringInAJsonSyntaxError) {
  const std::string text = "{\"a\": \"" + kHuge + "\x01\"}";
  const std::string m = error_of([&] { parse_json_text(text, "x.json"); });
  EXPECT_LT(m.size(), kMaxMessage) << m.substr(0, 300);
}

}  // namespace
}  // namespace kvevict
