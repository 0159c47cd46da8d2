#pragma once
// Policy tables too large to bake into the kernel text (more than dsl::kMaxBakedTableElements
// numbers: KVzap's linear scorer for an 8B model, 32 x 8 x 4096 numbers, or ExpectedAttentionStats'
// covariance, 2^24): the generator declares each as a zero-filled global array of the kernel's
// module (KVEVICT_LOADED_TABLE, kernel_abi.h) and names it here, and each runner fills it with the
// table's values once, right after it loads the module (a CUDA module per GPU runner, the shared
// object of the host backend). The kernel reads it exactly as a baked one (kv_load, bounded), so
// the values are the interpreter's float bits either way. The kernel text no longer holds the
// values, so the kernel cache keys on the table's shape, not its contents: tables of one shape share
// a compiled kernel.
#include <memory>
#include <string>
#include <vector>

#include "dsl/table_data.h"

namespace kvevict::jit {

class CudaModule;
class HostModule;

struct LoadedTable {
  std::string symbol;                             // the global's name in the module (kv_table_<index>)
  std::shared_ptr<const dsl::TableData> table;   // its values, shared with the compiled policy
};

// Fills every table's global in `module` (a RuntimeError names a table whose global is missing or of
// another size).
void load_tables(const CudaModule& module, const std::vector<LoadedTable>& tables);
void load_tables(const HostModule& module, const std::vector<LoadedTable>& tables);

}  // namespace kvevict::jit
