#pragma once
// The `tables:` section of a policy file and the table files it names (dsl/table_data.h has the
// layout). Grammar (YAML):
//   tables:
//     NAME: {file: PATH, axes: [AXIS, ...], shape: [N, ...], values: raw | rank | share}
//   AXIS = layer | kv_head | d | c    (a non-empty subset, in that order; c: the model dimension)
//   N    = a whole number >= 1        (one per axis; the product is at most kMaxTableElements)
// PATH is relative to the policy file's directory (or absolute). `values` (default raw): see
// dsl/table_data.h.
//
// Table file format (plain numeric text, one table per file):
//   file    = { line } ;
//   line    = blank | comment | row ;          comment: first non-blank character '#'
//   row     = number { sep number } ;          sep: spaces, tabs or one comma between numbers
// Rows are the table in row-major order with the last axis along the row: there are
// (product of all extents but the last) rows of (last extent) numbers each. Every number must be
// finite. The file must be a regular file of at most kMaxTableFileBytes.
// Every error is reported at the `tables:` entry in the policy file, naming the table file and,
// for its content, the table file's line and column (e.g. "duo.tsv:3:7: 'x' is not a number").
#include <string>

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

// Whether a policy's tables fit a model: every table's layer / kv_head / d / c extent equals
// n_layers / n_kv_heads / head_dim / n_embd (c is not checked when n_embd is 0). Returns "" or a
// message naming the table, its file and both shapes.
std::string check_table_geometry(const TableList& tables, int n_layers, int n_kv_heads, int head_dim, int n_embd = 0);

}  // namespace kvevict::dsl
