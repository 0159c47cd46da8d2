// Kept apart from the tokenizer.json readers so that reading a vocabulary does not depend on the
// tokenizer implementations.
#include "core/tokenizer/hf_tokenizer.h"
#include "core/tokenizer/hf_tokenizer_json.h"
#include "core/util/json_file.h"

namespace kvevict {

std::unique_ptr<Tokenizer> load_hf_tokenizer(const HfTokenizerFiles& files) {
  const nlohmann::json tokenizer = read_json_file(files.tokenizer_json);
  if (hf::is_sentencepiece_style(tokenizer)) return make_spm_tokenizer(hf::spm_vocab_from_json(tokenizer, files));
  return make_bpe_tokenizer(hf::bpe_vocab_from_json(tokenizer, files));
}

}  // namespace kvevict
