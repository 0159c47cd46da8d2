#pragma once
// Independent references for the policies that read the model's hidden states (hidden[c, t], the
// layer's attention input; policies/field/kvzap.yaml), written from each method's formula in double
// from hidden states computed by tests/core/reference_forward.h or recorded from the decoder, NOT
// from the DSL, the engine or the policy-table loader.
#include <string>
#include <vector>

namespace kvevict::reference {

// The numbers of a table file (docs/DSL.md section 11: '#' comment lines, numbers separated by
// blanks or commas), in file order (row-major). Parsed here with its own few lines, not by
// dsl/policy_tables.cpp. Throws std::runtime_error when the file cannot be read or holds a
// non-number.
std::vector<double> read_table_numbers(const std::string& path);

// kvpress KVzapModel with hidden_dim None: layer `layer`'s nn.Linear(dim -> n_kv_heads) applied to
// one attention input x ([dim]), output kv_head:
//   weight[(layer * n_kv_heads + kv_head) * dim + c] * x[c] summed over c, + bias[layer * n_kv_heads + kv_head].
double kvzap_linear_score(const std::vector<double>& weight, const std::vector<double>& bias, int n_kv_heads, int dim,
                          int layer, int kv_head, const std::vector<double>& x);

}  // namespace kvevict::reference
