// `--device` on `generate` and the eval config's `device` key, on a machine without a usable GPU.
// KVEVICT_CUDA_DRIVER points at a missing library so the behaviour is the no-GPU one even when the
// test runs on a machine that has a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "process.h"

using kvevict::test::run_shell;

namespace {

const std::string kNoDriver = "KVEVICT_CUDA_DRIVER=/nonexistent/libcuda.so.1 ";

std::string kvevict_cli(const std::string& args) { return kNoDriver + KVEVICT_BINARY + " " + args; }

size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

}  // namespace

TEST(DeviceCli, AutoFallsBackToTheCpuAndSaysSoOnce) {
  const auto r = run_shell(kvevict_cli("generate -m synthetic:tiny -n 3 --device auto"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "running on the CPU"), 1u) << r.output;
  // auto is the default.
  const auto d = run_shell(kvevict_cli("generate -m synthetic:tiny -n 3"));
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_EQ(count_of(d.output, "running on the CPU"), 1u) << d.output;
}

TEST(DeviceCli, CpuNeverOpensTheDriverAndSaysNothing) {
  const auto r = run_shell(kvevict_cli("generate -m synthetic:tiny -n 3 --device cpu"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("CUDA"), std::string::npos) << r.output;
}

TEST(DeviceCli, CudaWithoutAGpuIsARuntimeErrorNamingWhy) {
  const auto r = run_shell(kvevict_cli("generate -m synthetic:tiny -n 3 --device cuda"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--device cuda requested, but no usable CUDA device"), std::string::npos) << r.output;
  const auto one = run_shell(kvevict_cli("generate -m synthetic:tiny -n 3 --device cuda:1"));
  EXPECT_EQ(one.exit_code, 1) << one.output;
}

TEST(DeviceCli, UnknownDeviceIsAUsageError) {
  const auto r = run_shell(kvevict_cli("generate -m synthetic:tiny -n 3 --device tpu"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("invalid --device 'tpu'"), std::string::npos) << r.output;
  EXPECT_EQ(run_shell(kvevict_cli("generate -m synthetic:tiny --device cuda:x")).exit_code, 2);
}

TEST(DeviceCli, EvalConfigDeviceCudaWithoutAGpuExitsOne) {
  const std::string models = std::string(KVEVICT_SHARED_DIR) + "/models/stories260K";
  if (!std::filesystem::exists(models + "/stories260K.bin")) GTEST_SKIP() << "stories260K not found in " << models;
  const auto dir = std::filesystem::temp_directory_path() / ("kvevict_device_cli_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string config = std::string(KVEVICT_TEST_SOURCE_DIR) + "/../configs/stories260k-smoke.yaml";
  const auto r = run_shell(kvevict_cli("eval -c " + config + " --db " + (dir / "k.db").string() + " --set model=" +
                                       models + "/stories260K.bin --set tokenizer=" + models +
                                       "/tok512.bin --set device=cuda"));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no usable CUDA device"), std::string::npos) << r.output;
}
