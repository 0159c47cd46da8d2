#pragma once
// Subcommand registry. Each cli/<name>.cpp defines one subcommand and registers it with
// KVEVICT_COMMAND; main.cpp builds the CLI11 app from the registry. Adding a command is one file.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kvevict::cli {

struct Command {
  std::string name;
  std::string description;
  // Declares the subcommand's options on `app` and returns the function that runs it (after
  // parsing). The runner returns the exit code; it may throw kvevict::Error.
  std::function<std::function<int()>(CLI::App& app)> setup;
  int order = 100;  // position in --help
};

std::vector<Command>& registry();

struct Registrar {
  explicit Registrar(Command command) { registry().push_back(std::move(command)); }
};

}  // namespace kvevict::cli

#define KVEVICT_CONCAT2(a, b) a##b
#define KVEVICT_CONCAT(a, b) KVEVICT_CONCAT2(a, b)
#define KVEVICT_COMMAND(...) \
  static ::kvevict::cli::Registrar KVEVICT_CONCAT(kvevict_command_, __LINE__){::kvevict::cli::Command{__VA_ARGS__}}
