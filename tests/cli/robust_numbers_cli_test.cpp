// Numbers that cannot be trusted are refused before work starts, exit 2, naming where they came
// from: NaN/inf weights in a llama2.c checkpoint, NaN/inf temperatures and policy parameters,
// budgets that round to zero tokens, thread counts above the machine's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "../core/llama2c_writer.h"
#include "core/model/synthetic_model.h"
#include "process.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;

CommandResult kvevict_cli(const std::string& args) {
  return test::run_shell("timeout -k 5 120 " + std::string(KVEVICT_BINARY) + " " + args + " </dev/null");
}

void expect_usage_error(const std::string& args, const std::string& fragment) {
  const CommandResult r = kvevict_cli(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
}

// Overwrites float `index` of the checkpoint (counted after the 7 x int32 header) with `value`.
void poke_float(const std::string& path, size_t index, float value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(7 * sizeof(int32_t) + index * sizeof(float)));
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
}

TEST(RobustNumbersCli, ALlama2cCheckpointWithANonFiniteWeightIsRefusedNamingFileAndTensor) {
  const ModelConfig c = test::llama2c_config();
  const auto model = make_random_model(c, 11);
  const std::string name = "kvevict_robust_nan_" + std::to_string(::getpid());
  const std::string path = test::write_llama2c(*model, name, false);
  // Tensor order: token embedding [V][D], attention norms [L][D], wq [L][Q][D], ...
  const size_t D = c.dim, L = c.n_layers, V = c.vocab_size, Q = c.q_dim();
  const size_t wq_layer1 = V * D + L * D + Q * D;  // first element of layer 1's wq
  poke_float(path, wq_layer1 + 5, std::numeric_limits<float>::quiet_NaN());
  for (const std::string command : {"model-info ", "generate -n 2 -m "}) {
    const CommandResult r = kvevict_cli(command + path);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(path + ": tensor wq (layer 1) holds a non-finite value (NaN) at element 5"), std::string::npos)
        << r.output;
  }
  poke_float(path, wq_layer1 + 5, 0.0f);
  poke_float(path, 3, -std::numeric_limits<float>::infinity());  // the embedding
  const CommandResult inf = kvevict_cli("model-info " + path);
  EXPECT_EQ(inf.exit_code, 2) << inf.output;
  EXPECT_NE(inf.output.find("tensor token embedding holds a non-finite value (inf) at element 3"), std::string::npos)
      << inf.output;
  poke_float(path, 3, 0.5f);
  EXPECT_EQ(kvevict_cli("model-info " + path).exit_code, 0);  // the same file, finite again, loads
  fs::remove_all(fs::path(path).parent_path());
}

TEST(RobustNumbersCli, NonFiniteTemperatureIsAUsageError) {
  for (const char* t : {"nan", "NaN", "-nan", "inf", "-inf", "1e999"})
    expect_usage_error(std::string("generate -m synthetic:tiny -n 1 --temperature ") + t, "--temperature");
  EXPECT_EQ(kvevict_cli("generate -m synthetic:tiny -n 1 --temperature 0.7").exit_code, 0);
}

TEST(RobustNumbersCli, NonFinitePolicyParametersAreUsageErrors) {
  for (const char* v : {"nan", "NaN", "inf", "-inf", "1e999", "0x1p99999"})
    expect_usage_error(std::string("inspect -m synthetic:tiny -p 'a b c d e f g h' --policy streamingllm --budget 4 --set window=") + v,
                       "window");
}

TEST(RobustNumbersCli, BudgetsThatRoundToZeroTokensAreRefused) {
  const std::string inspect = "inspect -m synthetic:tiny -p 'one two three four five six seven eight' --policy streamingllm ";
  expect_usage_error(inspect + "--budget 0.5", "rounds to zero");
  expect_usage_error(inspect + "--budget 0.999", "rounds to zero");
  expect_usage_error(inspect + "--budget 1%", "rounds to zero");  // 1% of a short prompt
  expect_usage_error(inspect + "--budget 0", "--budget");          // refused before, still refused
  expect_usage_error(inspect + "--budget total:2", "rounds to zero");  // synthetic:tiny: 2 layers x 2 KV heads
  expect_usage_error("generate -m synthetic:tiny -n 1 -p 'a b c' --policy streamingllm --budget 0.5", "rounds to zero");
  EXPECT_EQ(kvevict_cli(inspect + "--budget 1").exit_code, 0);
}

TEST(RobustNumbersCli, ThreadCountsAboveTheMachinesAreRefusedInEveryCommand) {
  const int cap = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::string> too_many = {std::to_string(cap + 1), "100000"};
  if (cap < 1024) too_many.push_back("1024");  // the count of the report (a libgomp failure)
  for (const std::string& n : too_many) {
    expect_usage_error("generate -m synthetic:tiny -n 1 --threads " + n, "hardware threads");
    expect_usage_error("inspect -m synthetic:tiny -p 'a b c d' --policy streamingllm --budget 2 --threads " + n,
                       "hardware threads");
  }
  expect_usage_error("generate -m synthetic:tiny -n 1 --threads -1", "--threads");
  EXPECT_EQ(kvevict_cli("generate -m synthetic:tiny -n 1 --threads " + std::to_string(cap)).exit_code, 0);
  EXPECT_EQ(kvevict_cli("generate -m synthetic:tiny -n 1 --threads 0").exit_code, 0);
}

}  // namespace
}  // namespace kvevict
