#pragma once
// CUDA C++ text of the lowered form's scalar operations (dsl/lowered.h), one expression each. The
// spelling follows dsl/elementwise.h operation for operation (float functions, the same operand
// order in min/max, comparisons as 1/0), so generated code rounds like the interpreter.
#include <string>

#include "dsl/lowered.h"

namespace kvevict::jit {

// A float constant by its exact bits (no decimal round trip), with the value as a comment.
std::string cuda_float_literal(float value);
// The scalar signal read from `const KvScoreArgs& a` (a layer scalar, `budget`, is set only in a
// layer_weight kernel's arguments; the generator refuses it elsewhere).
std::string cuda_scalar(dsl::ScalarSignal s);
// The tensor signal at indices (h, q, t) of `a`; empty for an unknown signal.
std::string cuda_load(dsl::TensorSignal s);
// The same buffer seen along one of its axes (a reduction's loop over `axis`, a bit): element r of
// the row is pointer[base + r * stride], where base is cuda_load's index with that axis at 0 and
// stride is the product of the extents after it; extent bounds the whole buffer as in cuda_load.
// A caller that checked base >= 0, stride >= 0 and base + (m - 1) * stride < extent for a loop of
// m elements reads the row unchecked (cuda_codegen.cpp: a row reduction). Every field is empty
// when the signal has no such axis (and for Position, an index rather than a buffer).
struct CudaLoadRow {
  std::string pointer, base, stride, extent;
};
CudaLoadRow cuda_load_row(dsl::TensorSignal s, unsigned axis);
// fn(x) / fn(x, y) over already-evaluated operands (names of locals); empty for an unknown fn.
std::string cuda_unary(dsl::UnaryFn f, const std::string& x);
std::string cuda_binary(dsl::BinaryFn f, const std::string& x, const std::string& y);

// A policy table (dsl/table_data.h) in the kernel text. Up to dsl::kMaxBakedTableElements numbers,
// baked: "KVEVICT_TABLE kv_table_I[N] = {...};" with every value as an exact hexadecimal float
// literal (bit-identical to the interpreter's float). A larger one is declared only,
// "KVEVICT_LOADED_TABLE(kv_table_I, N);", a global of the module that its runner fills with the
// values after loading it (table_loaded_into_module, loaded_tables.h).
std::string cuda_table_definition(int index, const dsl::TableData& table);
// Whether table `table` is loaded into the module rather than baked, and the global's name.
bool table_loaded_into_module(const dsl::TableData& table);
std::string cuda_table_symbol(int index);
// A read of table `index` at the kernel's (layer, kv_head), query head h of the group, channels c
// (d) and e, and the row given by the float local `row` (the index axis; unused without one),
// through the bounded kv_load: an index outside the table reads 0, as in the interpreter.
std::string cuda_table_read(int index, const dsl::TableData& table, const std::string& row);

}  // namespace kvevict::jit
