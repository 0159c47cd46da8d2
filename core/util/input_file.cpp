#include "core/util/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "core/util/error.h"

namespace kvevict {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";  // unreachable for the kinds POSIX defines
}

}  // namespace

InputFile::InputFile(const std::string& path, const char* what) : path_(path), what_(what) {
  if (path.empty()) throw InputError("(empty path)", std::string("no ") + what + " file named");
  // O_NONBLOCK: opening a FIFO with no writer would otherwise block forever.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    throw InputError(path, std::string("cannot open ") + what + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw InputError(path, std::string("cannot stat ") + what + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    const std::string kind = kind_of(st.st_mode);
    ::close(fd_);
    throw InputError(path, std::string("the ") + what + " must be a regular file; this is " + kind);
  }
  // Regular files never block; clear the flag so reads behave normally.
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::read_all(size_t max_bytes) const {
  auto too_large = [&](uint64_t n) {
    return InputError(path_, "the " + what_ + " is " + std::to_string(n) + " bytes; at most " +
                                 std::to_string(max_bytes) + " are allowed for this kind of file");
  };
  if (size_ > max_bytes) throw too_large(size_);
  std::string text;
  text.resize(static_cast<size_t>(size_));
  size_t have = 0;
  // Read until EOF, but never past max_bytes + 1 (a file that grows while being read).
  for (;;) {
    if (have == text.size()) {
      if (text.size() > max_bytes) throw too_large(text.size());
      text.resize(std::min(max_bytes + 1, text.size() + (64u << 10)));
      if (have == text.size()) throw too_large(have);
    }
    const ssize_t got = ::read(fd_, text.data() + have, text.size() - have);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw RuntimeError(path_ + ": cannot read " + what_ + ": " + std::strerror(err));
    }
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  if (have > max_bytes) throw too_large(have);
  text.resize(have);
  return text;
}

std::string read_input_file(const std::string& path, size_t max_bytes, const char* what) {
  return InputFile(path, what).read_all(max_bytes);
}

void require_input_directory(const std::string& path, const char* what) {
  if (path.empty()) throw InputError("(empty path)", std::string("no ") + what + " named");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw InputError(path, std::string("cannot open ") + what + ": " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) throw InputError(path, std::string("the ") + what + " must be a directory");
}

}  // namespace kvevict
