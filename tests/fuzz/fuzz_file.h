#pragma once
// Helpers shared by the fuzz targets: the loaders take paths, so each run writes its input to a
// file. A memfd (an anonymous in-memory regular file) reached through /proc/self/fd/N costs no
// disk and passes the loaders' regular-file check; a target that needs a named file in a folder
// (tokenizer.json, <dataset>.jsonl) uses FuzzDir, one per process, rewritten each run.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvevict::fuzz {

class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("kvevict-fuzz", 0);
    if (fd_ < 0) std::abort();
    for (size_t done = 0; done < size;) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A private folder (under $TMPDIR) for the life of the process, removed at exit.
inline const std::filesystem::path& fuzz_dir() {
  static const std::filesystem::path* dir = [] {
    auto* d = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                        ("kvevict-fuzz-" + std::to_string(::getpid())));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(fuzz_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

inline std::string stories_dir() { return std::string(KVEVICT_SHARED_DIR) + "/models/stories260K"; }

}  // namespace kvevict::fuzz
