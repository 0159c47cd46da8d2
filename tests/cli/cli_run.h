#pragma once
// Runs the built kvevict binary as a user would and captures its exit code, stdout and stderr.
// Each call gets its own stderr file (pid + counter): ctest runs a file's tests as parallel processes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace kvevict::test {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline CliRun run_kvevict(const std::string& args) {
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "/kvevict_cli_stderr_" + std::to_string(::getpid()) + "_" +
                               std::to_string(calls++) + ".txt";
  const std::string command = std::string(KVEVICT_BINARY) + " " + args + " 2>" + err_file;
  CliRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  r.err.assign(std::istreambuf_iterator<char>(err), {});
  std::remove(err_file.c_str());
  return r;
}

}  // namespace kvevict::test
