#pragma once
// The model's extents a policy's tables are checked against before a run
// (PolicyProgram::check_geometry, dsl::check_table_geometry).
namespace kvevict {

struct ModelGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;  // the selection's head count: KV heads, or query heads with select.unfold_gqa
  int head_dim = 0;
  int n_heads = 0;     // the model's query heads (tables along axis head)
  int n_embd = 0;      // the model dimension (tables along axis c); 0 = not checked
};

}  // namespace kvevict
