// TEMPORARY (decoder branch only): load_gguf and load_hf_folder are implemented on the gguf and hf
// branches. The integrator deletes this file when merging those branches.
#include "core/model/model.h"
#include "core/util/error.h"

namespace kvevict {

std::unique_ptr<Model> load_gguf(const std::string& path) {
  throw ModelError(path, "GGUF loading is not built in this branch");
}

std::unique_ptr<Model> load_hf_folder(const std::string& dir) {
  throw ModelError(dir, "Hugging Face folder loading is not built in this branch");
}

}  // namespace kvevict
