#pragma once
// SentencePiece-style BPE driven by piece scores (llama2.c `encode`, GGUF tokenizer.ggml.model = "llama"):
// prepend the dummy-prefix space for non-empty text, map each UTF-8 code point to its piece or to
// byte-fallback pieces <0xNN>, then repeatedly merge the adjacent pair whose concatenation is in the
// vocabulary with the highest score (ties: leftmost).
#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace kvevict {

struct SpmVocab {
  std::vector<std::string> pieces;  // raw bytes of each piece
  std::vector<float> scores;
  std::vector<int> types;           // GGUF token types (1 normal, 2 unknown, 3 control, 6 byte); empty if unknown
  int bos_id = 1;
  int eos_id = 2;
  int unk_id = 0;
  bool add_dummy_prefix = true;
  std::string source;               // file name for error messages
};

std::unique_ptr<Tokenizer> make_spm_tokenizer(SpmVocab vocab);

// Reads llama2.c's tokenizer.bin (int32 max_len, then {f32 score, i32 len, bytes} per token).
SpmVocab read_llama2c_tokenizer(const std::string& path, int vocab_size);

}  // namespace kvevict
