#include "core/util/byte_reader.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/util/input_file.h"

namespace kvevict {

MappedFile::MappedFile(const std::string& path, const char* what) : path_(path) {
  // The one file-opening rule: no blocking open, regular files only (a FIFO or /dev/zero is refused
  // before anything is mapped). mmap reads nothing up front, so no size limit applies here.
  const InputFile file(path, what);
  size_ = static_cast<size_t>(file.size());
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      throw RuntimeError(path + ": cannot map the " + what + ": " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void ByteReader::seek(size_t offset) {
  if (offset > size_) fail("offset " + std::to_string(offset) + " is past the end of the file (" + std::to_string(size_) + " bytes)");
  offset_ = offset;
}

void ByteReader::require(size_t n, const char* what) const {
  if (n > size_ - offset_) {
    fail(std::string("truncated ") + what + " at offset " + std::to_string(offset_) + " (need " + std::to_string(n) +
         " bytes, " + std::to_string(size_ - offset_) + " left)");
  }
}

const uint8_t* ByteReader::take(size_t n, const char* what) {
  require(n, what);
  const uint8_t* p = data_ + offset_;
  offset_ += n;
  return p;
}

std::string ByteReader::read_string(size_t n, const char* what) {
  const uint8_t* p = take(n, what);
  return std::string(reinterpret_cast<const char*>(p), n);
}

void ByteReader::fail(const std::string& what) const { throw ModelError(file_, what); }

size_t checked_mul(size_t a, size_t b, const std::string& file, size_t limit) {
  if (a != 0 && b > limit / a) throw ModelError(file, "size overflow (" + std::to_string(a) + " x " + std::to_string(b) + ")");
  return a * b;
}

}  // namespace kvevict
