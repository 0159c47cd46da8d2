#pragma once
// The one rule for opening a file a user names (model, tokenizer, policy, config, prompt, dataset):
//   1. it is opened without blocking (a FIFO or a device never hangs the open),
//   2. it must be a regular file (a directory, FIFO, socket or device such as /dev/zero is refused
//      before a byte is read),
//   3. it is read with a size limit suited to its kind (a file above the limit is refused up front,
//      and a file that grows while being read is cut off at the limit, never read without bound).
// Every error is an InputError (exit 2) whose message starts with the file's path.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvevict {

// Size limits by kind of file (bytes). One table, so a reader never invents its own number.
struct InputLimits {
  static constexpr size_t kPolicyFile = 4u << 20;        // policy YAML
  static constexpr size_t kConfigFile = 4u << 20;        // eval config YAML
  static constexpr size_t kPromptFile = 64u << 20;       // --prompt-file text
  static constexpr size_t kJsonFile = 256u << 20;        // config.json, tokenizer.json
  static constexpr size_t kDatasetFile = 1u << 30;       // LongBench JSONL
  static constexpr size_t kTokenizerFile = 256u << 20;   // llama2.c tokenizer.bin
};

// An open, regular, read-only file descriptor (closed on destruction).
class InputFile {
 public:
  // `what` names the kind of file in messages ("policy file", "model"). Throws InputError when the
  // path is missing, unreadable or not a regular file.
  InputFile(const std::string& path, const char* what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // st_size at open time
  const std::string& path() const { return path_; }

  // The whole file; throws InputError when it is larger than max_bytes (checked before reading and
  // again while reading), RuntimeError on a read error.
  std::string read_all(size_t max_bytes) const;

 private:
  std::string path_;
  std::string what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// InputFile(path, what).read_all(max_bytes).
std::string read_input_file(const std::string& path, size_t max_bytes, const char* what);

// Throws InputError unless `path` names an existing directory ("<path>: not a directory").
void require_input_directory(const std::string& path, const char* what);

}  // namespace kvevict
