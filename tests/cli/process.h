#pragma once
// Running the kvevict binary from tests: capture output and exit code, or spawn and kill.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace kvevict::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell; stderr is merged into the captured output.
inline CommandResult run_shell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Starts the kvevict binary with `args` (stdout/stderr to /dev/null); returns its pid.
inline pid_t spawn_kvevict(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* null = freopen("/dev/null", "w", stdout);
    null = freopen("/dev/null", "w", stderr);
    (void)null;
    std::vector<char*> argv;
    static std::string binary = KVEVICT_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copies = args;
    for (auto& arg : copies) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

inline int wait_exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

}  // namespace kvevict::test
