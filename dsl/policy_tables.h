#pragma once
// The `tables:` section of a policy file and the table files it names (dsl/table_data.h has the
// layout). Grammar (YAML):
//   tables:
//     NAME: {file: PATH, axes: [AXIS, ...], shape: [N, ...], values: raw | rank | share}
//   AXIS = index | layer | kv_head | head | d | e | c   (a non-empty subset, in that order; kv_head
//          and head exclude each other; c is the model dimension; dsl/table_data.h says how each is read)
//   N    = a whole number >= 1        (one per axis; the product is at most kMaxTableElements, the
//          policy's tables together at most kMaxPolicyTableElements)
// PATH is relative to the policy file's directory (or absolute). `values` (default raw): see
// dsl/table_data.h.
//
// Table file format (plain numeric text, one table per file):
//   file    = { line } ;
//   line    = blank | comment | row ;          comment: first non-blank character '#'
//   row     = number { sep number } ;          sep: spaces, tabs or one comma between numbers
// Rows are the table in row-major order with the last axis along the row: there are
// (product of all extents but the last) rows of (last extent) numbers each. Every number must be
// finite. The file must be a regular file of at most max_table_file_bytes.
// Every error is reported at the `tables:` entry in the policy file, naming the table file and,
// for its content, the table file's line and column (e.g. "duo.tsv:3:7: 'x' is not a number").
#include <string>

#include "core/engine/model_geometry.h"
#include "dsl/diagnostics.h"
#include "dsl/table_data.h"

namespace YAML {
class Node;
}

namespace kvevict::dsl {

// Parses `node` (the value of `tables:`), loads every table file and appends the tables to `out`.
// Errors go to `diag` at the position of the offending YAML node.
void parse_tables_section(const YAML::Node& node, const std::string& policy_path, Diagnostics& diag, TableList& out);

// Parses the text of a table file against a declaration whose has/extent are set; fills
// `table.values`. Returns "" or the first error as "file:line:col: message".
std::string parse_table_text(const std::string& text, TableData& table);

// The largest table file accepted for a declaration: max(kMinTableFileBytes,
// kTableFileBytesPerNumber x its numbers), so a large declared table may have a large file and a
// small one cannot make the loader read much.
size_t max_table_file_bytes(const TableData& table);

// Whether a policy's tables fit a model: every table's layer / kv_head / head / d / e extent equals
// n_layers / n_kv_heads / n_heads (query heads) / head_dim / head_dim / n_embd (the index axis is
// not the model's; c is not checked when n_embd is 0). Returns "" or a message naming the table, its file and both shapes.
std::string check_table_geometry(const TableList& tables, const ModelGeometry& model);

}  // namespace kvevict::dsl
