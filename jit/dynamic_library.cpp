// dlopen helpers; see dynamic_library.h.
#include "jit/dynamic_library.h"

#include <dlfcn.h>

#include <cstdlib>

namespace kvevict::jit {

OpenedLibrary open_first_library(const std::vector<std::string>& candidates) {
  OpenedLibrary result;
  for (const auto& candidate : candidates) {
    dlerror();
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      result.handle = handle;
      result.path = candidate;
      return result;
    }
    const char* why = dlerror();
    result.tried.push_back(candidate + ": " + (why ? why : "cannot open"));
  }
  return result;
}

void* find_symbol(void* handle, const char* name) { return handle ? dlsym(handle, name) : nullptr; }

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

}  // namespace kvevict::jit
