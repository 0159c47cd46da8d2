// Loading the tables the generator does not bake; see loaded_tables.h.
#include "jit/loaded_tables.h"

#include <cstring>

#include "core/util/error.h"
#include "jit/cuda_driver.h"
#include "jit/host_module.h"

namespace kvevict::jit {

void load_tables(const CudaModule& module, const std::vector<LoadedTable>& tables) {
  for (const LoadedTable& t : tables)
    module.upload_global(t.symbol, t.table->values.data(), t.table->values.size() * sizeof(float));
}

void load_tables(const HostModule& module, const std::vector<LoadedTable>& tables) {
  // The host module's array is as long as the generator declared it, which is the table's size
  // (cuda_table_definition): the copy cannot pass its end.
  for (const LoadedTable& t : tables)
    std::memcpy(module.symbol(t.symbol), t.table->values.data(), t.table->values.size() * sizeof(float));
}

}  // namespace kvevict::jit
