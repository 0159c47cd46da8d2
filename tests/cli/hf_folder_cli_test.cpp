// `kvevict model-info` and `generate` on a Hugging Face folder written by the test, and the exit
// code and message for broken folders.
#include <gtest/gtest.h>

#include "cli_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../core/safetensors_writer.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

using CliResult = test::CliRun;
const auto& kvevict_cli = test::run_kvevict;

fs::path tiny_folder(const std::string& name) {
  ModelConfig c = test::tiny_config(6, 2, 4, "qwen2");
  c.tied_embeddings = false;
  fs::path dir = test::fresh_dir("cli_" + name);
  test::write_hf_folder(dir, c, test::random_weights(c, 5), {test::StDtype::BF16, 2, true});
  return dir;
}

TEST(HfFolderCli, ModelInfoDescribesTheFolder) {
  const fs::path dir = tiny_folder("info");
  const CliResult r = kvevict_cli("model-info " + dir.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("format"), "safetensors");
  EXPECT_EQ(j.at("architecture"), "qwen2");
  EXPECT_EQ(j.at("layers"), 2);
  EXPECT_EQ(j.at("heads"), 6);
  EXPECT_EQ(j.at("kv_heads"), 2);
  EXPECT_EQ(j.at("head_dim"), 4);
  EXPECT_EQ(j.at("vocab"), 270);
  EXPECT_EQ(j.at("tensor_types").at("BF16"), 1 + 2 * 12 + 1 + 1);  // embed, 12 per layer (3 biases), norm, lm_head
  EXPECT_EQ(j.at("chat_template"), "chatml");
}

TEST(HfFolderCli, GenerateRunsAndEncodesThePrompt) {
  const fs::path dir = tiny_folder("generate");
  const CliResult r = kvevict_cli("generate -m " + dir.string() + " -p \"the the\" -n 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // "the" -> t + he, " the" -> Ġthe; no BOS (the tiny tokenizer's post-processor adds none).
  EXPECT_EQ(j.at("prompt_tokens"), nlohmann::json::array({'t', 257, 258}));
  EXPECT_LE(j.at("tokens").size(), 3u);
}

TEST(HfFolderCli, BrokenFoldersExitTwoNamingTheFile) {
  fs::path dir = tiny_folder("truncated");
  const fs::path shard = dir / "model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  CliResult r = kvevict_cli("generate -m " + dir.string() + " -p hi -n 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(shard.string()), std::string::npos) << r.err;

  dir = tiny_folder("bad_config");
  test::write_bytes(dir / "config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "big"})");
  r = kvevict_cli("model-info " + dir.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find((dir / "config.json").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'hidden_size' must be an integer"), std::string::npos) << r.err;

  dir = tiny_folder("huge_header");
  std::string bytes(16, '\xff');
  test::write_bytes(dir / "model-00001-of-00002.safetensors", bytes);
  r = kvevict_cli("model-info " + dir.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model-00001-of-00002.safetensors: header length"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvevict
