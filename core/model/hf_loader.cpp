// load_hf_folder: a Hugging Face model folder -> Model (see core/model/hf_config.h, hf_weights.h,
// core/tokenizer/hf_tokenizer.h for what is read and checked).
#include <filesystem>

#include "core/model/hf_config.h"
#include "core/model/hf_weights.h"
#include "core/model/model.h"
#include "core/tokenizer/hf_tokenizer.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace kvevict {

std::unique_ptr<Model> load_hf_folder(const std::string& dir, WeightStorage storage) {
  namespace fs = std::filesystem;
  const fs::path folder(dir);
  require_input_directory(dir, "Hugging Face model folder");
  const fs::path config_path = folder / "config.json";
  // Only absence is reported here; a config.json that is a FIFO or a directory is refused by name
  // when it is opened (core/util/input_file.h).
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(config_path, ec))) throw ModelError(dir, "no config.json in the folder");

  auto model = std::make_unique<Model>();
  model->config = parse_hf_config(config_path.string());
  model->info.format = "safetensors";
  model->info.path = dir;

  {
    auto tensors = std::make_shared<const SafetensorsModel>(SafetensorsModel::open_folder(dir));
    model->weights = load_hf_weights(*tensors, model->config, model->info, storage);
    // Native F16/BF16 matrices point into the shards: keep them mapped. Otherwise they are unmapped
    // here, once the f32 copies exist.
    if (model->weights.has_native()) model->weights.storage = tensors;
  }

  HfTokenizerFiles files = find_hf_tokenizer_files(dir);
  model->tokenizer = load_hf_tokenizer(files);
  if (model->tokenizer->vocab_size() > model->config.vocab_size) {
    throw ModelError(files.tokenizer_json, "tokenizer has " + std::to_string(model->tokenizer->vocab_size()) +
                                               " tokens but the model's vocab_size is " +
                                               std::to_string(model->config.vocab_size));
  }
  model->info.chat_template = hf_chat_template_name(files);
  return model;
}

}  // namespace kvevict
