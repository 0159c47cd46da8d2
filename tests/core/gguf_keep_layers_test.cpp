// scripts/gguf_keep_layers.py (the device check's cut SmolLM2): a tiny 3-block GGUF written by the
// test, cut to its first 2 blocks, loads as a 2-block model whose every kept tensor holds exactly
// the values written; bad arguments and files exit 2 and write nothing. Skips without python3.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/model/gguf_reader.h"
#include "core/model/model.h"
#include "gguf_test_util.h"
#include "gguf_writer.h"

namespace kvevict {
namespace {

const std::string kScript = std::string(KVEVICT_TEST_SOURCE_DIR) + "/../scripts/gguf_keep_layers.py";

// The script's exit status, or -1 when it could not be run.
int cut(const std::string& in, const std::string& out, const std::string& layers) {
  const std::string command =
      "python3 '" + kScript + "' '" + in + "' '" + out + "' --layers " + layers + " > /dev/null 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class GgufKeepLayers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("python3 -c 'import sys' > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
    spec_.n_layers = 3;
    spec_.tied = false;
    spec_.writer().write(in_);
  }
  void TearDown() override {
    std::filesystem::remove(in_);
    std::filesystem::remove(out_);
  }
  test::TinyLlama spec_;
  const std::string in_ = test::temp_file_path("keep_layers_in.gguf");
  const std::string out_ = test::temp_file_path("keep_layers_out.gguf");
};

TEST_F(GgufKeepLayers, KeepsTheFirstBlocksByteForByte) {
  ASSERT_EQ(cut(in_, out_, "2"), 0);
  {  // block 2's tensors are gone, every other tensor is there
    const GgufFile in(in_), out(out_);
    size_t expected = 0;
    for (const GgufTensorInfo& t : in.tensors()) {
      const bool dropped = t.name.rfind("blk.2.", 0) == 0;
      EXPECT_EQ(out.find_tensor(t.name) != nullptr, !dropped) << t.name;
      expected += dropped ? 0 : 1;
    }
    EXPECT_EQ(out.tensors().size(), expected);
  }
  const auto m = load_gguf(out_, WeightStorage::F32);
  EXPECT_EQ(m->config.n_layers, 2);
  EXPECT_EQ(m->config.dim, spec_.dim);
  EXPECT_EQ(m->config.vocab_size, spec_.vocab());
  const Weights& w = m->weights;
  EXPECT_EQ(w.token_embedding, spec_.tensor("token_embd.weight"));
  EXPECT_EQ(w.output, spec_.tensor("output.weight"));
  EXPECT_EQ(w.final_norm, spec_.tensor("output_norm.weight"));
  ASSERT_EQ(w.layers.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(w.layers[l].wq, spec_.tensor(p + "attn_q.weight")) << l;
    EXPECT_EQ(w.layers[l].wo, spec_.tensor(p + "attn_output.weight")) << l;
    EXPECT_EQ(w.layers[l].w_down, spec_.tensor(p + "ffn_down.weight")) << l;
    EXPECT_EQ(w.layers[l].ffn_norm, spec_.tensor(p + "ffn_norm.weight")) << l;
  }
}

TEST_F(GgufKeepLayers, BadArgumentsAndFilesExitTwoAndWriteNothing) {
  EXPECT_EQ(cut(in_, out_, "4"), 2);  // more blocks than the model has
  EXPECT_EQ(cut(in_, out_, "0"), 2);
  EXPECT_EQ(cut(in_, out_, "two"), 2);  // argparse's usage error
  EXPECT_EQ(cut(std::filesystem::temp_directory_path().string(), out_, "1"), 2);  // not a regular file
  const std::string truncated = test::temp_file_path("keep_layers_truncated.gguf");
  {
    std::ifstream src(in_, std::ios::binary);
    std::string head(300, '\0');
    src.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary).write(head.data(), src.gcount());
  }
  EXPECT_EQ(cut(truncated, out_, "1"), 2);
  std::filesystem::remove(truncated);
  EXPECT_FALSE(std::filesystem::exists(out_));
}

}  // namespace
}  // namespace kvevict
