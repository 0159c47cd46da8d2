// `kvevict inspect --chat` prefills exactly the token ids the eval's model runner prefills for the
// same user message (issue 12 item 5): the model's chat template, BOS, and special tokens such as
// <|im_start|> as one id each. On SmolLM2 (ChatML) when present, else stories260K (no template).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../core/test_models.h"
#include "cli_run.h"
#include "core/model/model.h"
#include "evals/config.h"
#include "evals/prompt_text.h"
#include "evals/sample_runner.h"

using kvevict::test::run_kvevict;

namespace {

struct Model {
  std::string path, tokenizer;
};

// SmolLM2 when present (its template is what --chat is for), else stories260K; empty when neither.
Model pick_model() {
  if (std::filesystem::exists(kvevict::test::smollm2_path())) return {kvevict::test::smollm2_path(), ""};
  if (kvevict::test::stories_missing_reason().empty()) {
    return {kvevict::test::stories_checkpoint(), kvevict::test::stories_tokenizer()};
  }
  return {};
}

std::vector<int> inspect_ids(const Model& model, const std::string& prompt_file, const std::string& flags) {
  auto r = run_kvevict("inspect -m " + model.path + (model.tokenizer.empty() ? "" : " --tokenizer " + model.tokenizer) +
                       " --prompt-file " + prompt_file + " --policy streamingllm --budget 16 --threads 1 --json " +
                       flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out)["prompt_ids"].get<std::vector<int>>();
}

}  // namespace

TEST(InspectChat, PrefillsTheEvalRunnersIdsForTheSameMessage) {
  const Model model = pick_model();
  if (model.path.empty()) GTEST_SKIP() << "neither SmolLM2 (" << kvevict::test::smollm2_path() << ") nor stories260K found";
  // A query-aware sample as kv_retrieval makes it: context, separator, question in one message.
  kvevict::evals::Sample sample;
  sample.context = "Extract the value for the key from the JSON object below.\n{\"a1\": \"x7\", \"b2\": \"q9\"}";
  sample.question = "Key: \"b2\"\nThe value associated with the key is:";
  sample.query_aware = true;
  const auto dir = std::filesystem::temp_directory_path() / ("kvevict_inspect_chat" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string prompt_file = (dir / "message.txt").string();
  std::ofstream(prompt_file) << sample.context + sample.separator + sample.question;

  // The eval's ids: the runner built from a config of that model, its prompt text, its tokenizer.
  auto config = kvevict::evals::parse_eval_config(
      "model: " + model.path + "\n" + (model.tokenizer.empty() ? "" : "tokenizer: " + model.tokenizer + "\n") +
          "threads: 1\ntasks:\n  passkey: {lengths: [64]}\npolicies: [streamingllm]\nbudgets: [full]\n",
      "chat.yaml");
  auto runner = kvevict::evals::make_sample_runner(config);
  auto loaded = kvevict::load_model(model.path, {model.tokenizer});
  const std::vector<int> eval_ids =
      kvevict::evals::encode_prompt_text(*loaded->tokenizer, runner->prompt_text(sample)).prefill;

  const std::vector<int> chat_ids = inspect_ids(model, prompt_file, "--chat");
  EXPECT_EQ(chat_ids, eval_ids);
  if (loaded->info.chat_template == "chatml") {
    const auto im_start = loaded->tokenizer->token_id("<|im_start|>");
    ASSERT_TRUE(im_start);
    EXPECT_EQ(std::count(chat_ids.begin(), chat_ids.end(), *im_start), 3);  // system, user, assistant
    // Without --chat the message is tokenized bare: other ids.
    EXPECT_NE(inspect_ids(model, prompt_file, ""), eval_ids);
  }
  // --parse-special on the already-templated text gives the same ids as --chat.
  const std::string templated = (dir / "templated.txt").string();
  std::ofstream(templated) << runner->prompt_text(sample).prefill;
  EXPECT_EQ(inspect_ids(model, templated, "--parse-special"), eval_ids);
  std::filesystem::remove_all(dir);
}

TEST(InspectChat, AMessageLongerThanTheContextIsAUsageError) {
  if (auto reason = kvevict::test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  std::string words;
  for (int i = 0; i < 700; ++i) words += "word ";
  auto r = run_kvevict("inspect -m " + kvevict::test::stories_checkpoint() + " --tokenizer " +
                       kvevict::test::stories_tokenizer() + " --chat -p '" + words +
                       "' --policy streamingllm --budget 16 --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("the model's context is 512"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}
