// Sniffs what `path` is and hands it to the matching loader.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/model/model.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace kvevict {

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  if (path.rfind("synthetic:", 0) == 0) return make_synthetic_model(path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_hf_folder(path, options.weights);
  // Anything else must be a regular file (a FIFO or /dev/zero is refused here, before a byte is read).
  char magic[4] = {};
  ssize_t got = 0;
  {
    const InputFile file(path, "model file");
    do got = ::read(file.fd(), magic, sizeof magic);
    while (got < 0 && errno == EINTR);
    if (got < 0) throw RuntimeError(path + ": cannot read the model file: " + std::strerror(errno));
  }
  if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf(path, options.weights);
  return load_llama2c(path, options.tokenizer_path);
}

}  // namespace kvevict
