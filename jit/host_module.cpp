// Host compilation of kernel text; see host_module.h.
#include "jit/host_module.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/util/error.h"
#include "jit/dynamic_library.h"

namespace kvevict::jit {

std::string host_compiler() {
  std::string cxx = environment("KVEVICT_HOST_CXX");
  if (!cxx.empty()) return cxx;
#ifdef KVEVICT_HOST_CXX_DEFAULT
  return KVEVICT_HOST_CXX_DEFAULT;
#else
  return "c++";
#endif
}

std::string host_compiler_flags() {
  if (const char* flags = std::getenv("KVEVICT_HOST_CXXFLAGS")) return flags;
#ifdef KVEVICT_HOST_CXXFLAGS_DEFAULT
  return KVEVICT_HOST_CXXFLAGS_DEFAULT;
#else
  return "";
#endif
}

namespace {

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

HostModule::HostModule(const std::string& source, const std::string& work_dir, const std::string& name) {
  static std::atomic<int> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(work_dir, ec);
  const std::string stem = work_dir + "/" + name + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const std::string source_path = stem + ".cpp";
  library_path_ = stem + ".so";
  {
    std::ofstream out(source_path);
    out << source;
    if (!out) throw RuntimeError(source_path + ": cannot write");
  }
  const std::string log_path = stem + ".log";
  const std::string command = shell_quote(host_compiler()) + " -std=c++17 -O2 -ffp-contract=off -fPIC -shared " +
                              host_compiler_flags() + " -o " +
                              shell_quote(library_path_) + " " + shell_quote(source_path) + " > " +
                              shell_quote(log_path) + " 2>&1";
  const int status = std::system(command.c_str());
  if (status != 0) {
    std::ifstream log(log_path);
    std::stringstream text;
    text << log.rdbuf();
    throw RuntimeError(source_path + ": host compilation failed (" + host_compiler() + "):\n" + text.str());
  }
  handle_ = dlopen(library_path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = dlerror();
    throw RuntimeError(library_path_ + ": cannot open: " + (why ? why : "unknown error"));
  }
}

HostModule::~HostModule() {
  if (handle_) dlclose(handle_);
}

void* HostModule::symbol(const std::string& name) const {
  void* address = dlsym(handle_, name.c_str());
  if (!address) throw RuntimeError(library_path_ + ": no symbol '" + name + "'");
  return address;
}

}  // namespace kvevict::jit
