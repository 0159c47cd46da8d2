#pragma once
// Bounds-checked reading of untrusted binary files (model checkpoints, GGUF, safetensors).
// MappedFile maps a whole file read-only; ByteReader walks a byte range and throws ModelError
// naming the file and the offset on any read past the end. No read can leave the mapping.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/util/error.h"

namespace kvevict {

class MappedFile {
 public:
  // Opens `path` by the rule of core/util/input_file.h: InputError (exit 2) naming the file when it
  // is missing, unreadable or not a regular file. `what` names the kind of file in that message.
  explicit MappedFile(const std::string& path, const char* what = "model or tokenizer file");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string file) : data_(data), size_(size), file_(std::move(file)) {}

  size_t offset() const { return offset_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - offset_; }
  const std::string& file() const { return file_; }
  void seek(size_t offset);  // throws if offset > size

  template <typename T>
  T read() {
    static_assert(std::is_trivially_copyable_v<T>);
    require(sizeof(T), "value");
    T v;
    std::memcpy(&v, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return v;
  }
  // A pointer to the next n bytes, advancing past them; throws if fewer remain.
  const uint8_t* take(size_t n, const char* what = "data");
  std::string read_string(size_t n, const char* what = "string");
  // Throws "<file>: truncated <what> at offset X (need N bytes, have M)".
  void require(size_t n, const char* what) const;
  [[noreturn]] void fail(const std::string& what) const;

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
  std::string file_;
};

// Multiplies sizes without overflow; throws ModelError(file, ...) on overflow or if the result exceeds `limit`.
size_t checked_mul(size_t a, size_t b, const std::string& file, size_t limit = SIZE_MAX);

}  // namespace kvevict
