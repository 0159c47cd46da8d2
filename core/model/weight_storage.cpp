// The names of WeightStorage (model.h), for --weights and the eval config key.
#include "core/model/model.h"

namespace kvevict {

std::optional<WeightStorage> parse_weight_storage(const std::string& name) {
  if (name == "native") return WeightStorage::Native;
  if (name == "f32") return WeightStorage::F32;
  return std::nullopt;
}

const char* weight_storage_name(WeightStorage storage) { return storage == WeightStorage::F32 ? "f32" : "native"; }

}  // namespace kvevict
