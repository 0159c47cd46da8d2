// kvevict: entry point. Builds the command line from the registered subcommands, maps errors to
// exit codes (0 ok, 1 runtime failure, 2 usage or input error) and prints one-line reasons.
#include <algorithm>
#include <iostream>

#include "cli/command.h"
#include "core/decode/blas_kernels.h"
#include "core/util/error.h"
#include "kvevict_version.h"

namespace kvevict::cli {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace kvevict::cli

int main(int argc, char** argv) {
  using namespace kvevict;
  use_matching_blas_kernels();  // may restart the program once (core/decode/blas_kernels.h)
  CLI::App app{"kvevict: KV-cache eviction policies for LLM inference, written as files"};
  app.set_version_flag("--version", std::string("kvevict ") + KVEVICT_VERSION + " (" + KVEVICT_GIT_COMMIT + ")");
  app.require_subcommand(1);
  app.failure_message(CLI::FailureMessage::simple);

  auto& commands = cli::registry();
  std::stable_sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  std::function<int()> runner;
  for (auto& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    auto run = command.setup(*sub);
    sub->callback([&runner, run]() { runner = run; });
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "kvevict: error: " << e.what() << "\n";
    std::cerr << "Run with --help for more information.\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "kvevict: error: " << e.what() << "\n";
    return e.exit_code();
  }

  try {
    return runner ? runner() : 0;
  } catch (const Error& e) {
    std::cerr << "kvevict: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::cerr << "kvevict: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kvevict: error: " << e.what() << "\n";
    return 1;
  }
}
