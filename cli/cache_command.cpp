// `kvevict cache list|clear`: shows and empties the on-disk kernel cache ($KVEVICT_CACHE_DIR,
// default ~/.cache/kvevict/kernels).
#include <ctime>
#include <iomanip>
#include <iostream>

#include "cli/command.h"
#include "jit/kernel_cache.h"

namespace {

using namespace kvevict;

std::string format_time(int64_t unix_seconds) {
  std::time_t t = std::time_t(unix_seconds);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &utc);
  return text;
}

int run_list() {
  jit::KernelCache cache;
  const auto files = cache.list();
  std::cout << "kernel cache: " << cache.dir() << " (" << files.size() << " entr" << (files.size() == 1 ? "y" : "ies") << ")\n";
  if (files.empty()) return 0;
  std::cout << std::left << std::setw(18) << "KEY" << std::setw(28) << "LABEL" << std::setw(13) << "ARCH" << std::setw(7)
            << "KIND" << std::right << std::setw(10) << "BYTES" << "  " << std::left << std::setw(21) << "CREATED (UTC)"
            << "NVRTC\n";
  uint64_t total = 0;
  for (const auto& f : files) {
    total += f.file_bytes;
    const std::string key = f.key_hex.substr(0, 16);
    if (!f.valid) {
      std::cout << std::left << std::setw(18) << key << "INVALID: " << f.problem << " (rebuilt on next use)\n";
      continue;
    }
    std::cout << std::left << std::setw(18) << key << std::setw(28) << f.entry.label.substr(0, 27) << std::setw(13)
              << f.entry.arch << std::setw(7) << jit::binary_kind_name(f.entry.kind) << std::right << std::setw(10)
              << f.file_bytes << "  " << std::left << std::setw(21) << format_time(f.entry.created_unix)
              << f.entry.nvrtc_version << "\n";
  }
  std::cout << "total " << total << " bytes\n";
  return 0;
}

int run_clear() {
  jit::KernelCache cache;
  const size_t removed = cache.clear();
  std::cout << "removed " << removed << " file" << (removed == 1 ? "" : "s") << " from " << cache.dir() << "\n";
  return 0;
}

std::function<int()> setup_cache(CLI::App& app) {
  auto action = std::make_shared<std::string>();
  app.require_subcommand(1);
  app.add_subcommand("list", "List the compiled kernels in the cache")->callback([action] { *action = "list"; });
  app.add_subcommand("clear", "Delete every cached kernel")->callback([action] { *action = "clear"; });
  return [action] { return *action == "clear" ? run_clear() : run_list(); };
}

KVEVICT_COMMAND("cache", "Show or empty the JIT kernel cache (list | clear)", setup_cache, 61);

}  // namespace
