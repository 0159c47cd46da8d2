#pragma once
// How KVCache's messages name a head: "(layer L, stored head H)". Internal to kv_cache*.cpp.
#include <string>

namespace kvevict {

inline std::string kv_cache_head_where(int layer, int stored_head) {
  return "(layer " + std::to_string(layer) + ", stored head " + std::to_string(stored_head) + ")";
}

}  // namespace kvevict
