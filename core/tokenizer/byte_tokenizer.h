#pragma once
// A trivial byte-level tokenizer for synthetic models: ids 0-255 are the bytes, 256 is BOS, 257 EOS;
// higher ids (up to vocab_size) exist for the model but decode to nothing.
#include <memory>

#include "core/tokenizer/tokenizer.h"

namespace kvevict {

std::unique_ptr<Tokenizer> make_byte_tokenizer(int vocab_size);  // vocab_size >= 258

}  // namespace kvevict
