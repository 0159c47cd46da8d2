#pragma once
// A results database path in the temp folder for one test: removed (with its -wal and -shm files,
// or a directory a test put there) before and after.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kvevict::evals::test {

struct TempDb {
  std::string path;
  explicit TempDb(const std::string& name)
      : path((std::filesystem::temp_directory_path() / (name + std::to_string(getpid()) + ".db")).string()) {
    remove();
  }
  ~TempDb() { remove(); }
  void remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove_all(path + suffix);
  }
};

}  // namespace kvevict::evals::test
