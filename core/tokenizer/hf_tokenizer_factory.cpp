// Kept apart from hf_tokenizer.cpp so that reading tokenizer.json does not depend on the BPE
// tokenizer's implementation.
#include "core/tokenizer/hf_tokenizer.h"

namespace kvevict {

std::unique_ptr<Tokenizer> load_hf_tokenizer(const HfTokenizerFiles& files) {
  return make_bpe_tokenizer(read_hf_bpe_vocab(files));
}

}  // namespace kvevict
