#include "core/tokenizer/tokenizer.h"

namespace kvevict {

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  int prev = -1;
  for (int id : ids) {
    out += decode_piece(prev, id);
    prev = id;
  }
  return out;
}

}  // namespace kvevict
