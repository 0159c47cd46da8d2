// Sniffs what `path` is and hands it to the matching loader.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/model/model.h"
#include "core/util/error.h"

namespace kvevict {

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  if (path.rfind("synthetic:", 0) == 0) return make_synthetic_model(path);
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw ModelError(path, "no such file or directory");
  if (std::filesystem::is_directory(status)) return load_hf_folder(path, options.weights);
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path, "cannot open");
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf(path, options.weights);
  return load_llama2c(path, options.tokenizer_path);
}

}  // namespace kvevict
