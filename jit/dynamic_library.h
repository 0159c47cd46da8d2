#pragma once
// A small wrapper over dlopen/dlsym for the libraries kvevict opens at run time (NVRTC, the CUDA
// driver). Handles are never closed: the libraries stay loaded for the life of the process, which
// avoids unload-order problems with driver threads.
#include <string>
#include <vector>

namespace kvevict::jit {

struct OpenedLibrary {
  void* handle = nullptr;
  std::string path;                 // the candidate that opened
  std::vector<std::string> tried;   // "candidate: dlerror text" for each failure, in order
};

// Tries each candidate (a path or a bare soname for the loader's search) in order.
OpenedLibrary open_first_library(const std::vector<std::string>& candidates);

// dlsym; nullptr when missing.
void* find_symbol(void* handle, const char* name);

// The value of an environment variable, or "" when unset.
std::string environment(const char* name);

}  // namespace kvevict::jit
