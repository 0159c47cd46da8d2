// A full-size tokenizer.json: SmolLM2's vocabulary (49152 tokens, 48900 merges), taken from the
// GGUF and written in Hugging Face's format, must tokenise exactly as the GGUF's own tokenizer.
// This checks the tokenizer.json mapping (merge order, special tokens, BOS/EOS, stop ids) at the
// scale of a real model.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/model/gguf_reader.h"
#include "core/model/gguf_tokenizer.h"
#include "core/tokenizer/hf_tokenizer.h"
#include "gguf_test_util.h"
#include "safetensors_writer.h"

namespace kvevict {
namespace {

using nlohmann::json;

TEST(HfSmolLM2Tokenizer, TokenizerJsonMatchesTheGgufTokenizer) {
  KVEVICT_SKIP_WITHOUT_SMOLLM2();
  GgufFile gguf(test::smollm2_gguf_path());
  const auto gguf_tokenizer = tokenizer_from_gguf(gguf);
  const GgufValue* tokens = gguf.find("tokenizer.ggml.tokens");
  const GgufValue* merges = gguf.find("tokenizer.ggml.merges");
  const GgufValue* types = gguf.find("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens && merges && types);

  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < tokens->strings.size(); ++i) {
    vocab[tokens->strings[i]] = i;
    if (types->int_at(i) == 3) {  // control tokens are the special ones
      added.push_back({{"id", i}, {"content", tokens->strings[i]}, {"special", true}});
    }
  }
  json tokenizer = test::tiny_tokenizer_json();  // SmolLM pre-tokenizer, ByteLevel decoder
  tokenizer["model"]["vocab"] = vocab;
  tokenizer["model"]["merges"] = merges->strings;
  tokenizer["added_tokens"] = added;
  const auto dir = test::fresh_dir("hf_smollm2_tokenizer");
  test::write_bytes(dir / "tokenizer.json", tokenizer.dump());
  const json tokenizer_config = {{"bos_token", tokens->strings.at(gguf.get_int("tokenizer.ggml.bos_token_id"))},
                                 {"eos_token", tokens->strings.at(gguf.get_int("tokenizer.ggml.eos_token_id"))},
                                 {"add_bos_token", gguf.opt_bool("tokenizer.ggml.add_bos_token").value_or(true)},
                                 {"chat_template", gguf.get_string("tokenizer.chat_template")}};
  test::write_bytes(dir / "tokenizer_config.json", tokenizer_config.dump());
  const HfTokenizerFiles files = find_hf_tokenizer_files(dir.string());
  const auto hf = load_hf_tokenizer(files);

  EXPECT_EQ(hf->vocab_size(), gguf_tokenizer->vocab_size());
  EXPECT_EQ(hf->bos_id(), gguf_tokenizer->bos_id());
  EXPECT_EQ(hf->eos_id(), gguf_tokenizer->eos_id());
  EXPECT_EQ(hf_chat_template_name(files), "chatml");
  auto sorted = [](std::vector<int> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(hf->stop_ids()), sorted(gguf_tokenizer->stop_ids()));
  for (const std::string text :
       {"What is the capital of France?", "  leading spaces, 1234567 and 3.14159\n\n\tTabs", "naïve café Zürich 東京 😀",
        "I'm sure they'll say it's fine, don't you think?", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "def f(x):\n    return x ** 2  # square"}) {
    SCOPED_TRACE(text);
    for (bool special : {false, true}) {
      const auto want = gguf_tokenizer->encode(text, true, special);
      EXPECT_EQ(hf->encode(text, true, special), want);
      EXPECT_EQ(hf->decode(want), gguf_tokenizer->decode(want));
    }
  }
  const auto chat = hf->encode("<|im_start|>user", false, true);
  ASSERT_FALSE(chat.empty());
  EXPECT_EQ(chat[0], *gguf_tokenizer->token_id("<|im_start|>"));
  EXPECT_EQ(hf->token_id("<|im_end|>"), gguf_tokenizer->token_id("<|im_end|>"));
}

}  // namespace
}  // namespace kvevict
