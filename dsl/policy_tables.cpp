#include "dsl/policy_tables.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include <yaml-cpp/yaml.h>

#include "core/util/error.h"
#include "core/util/input_file.h"
#include "dsl/policy_keys.h"

namespace kvevict::dsl {

std::string TableData::shape_text() const {
  std::string s;
  for (TableAxis a : kTableAxisOrder)
    if (has_axis(a))
      s += (s.empty() ? "" : ", ") + std::string(kTableAxisNames[static_cast<int>(a)]) + " " + std::to_string(extent_of(a));
  return "[" + s + "]";
}

namespace {

FilePos pos_of(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return {0, 0};
  return {m.line + 1, m.column + 1};
}

std::string allowed_keys() {
  std::string list;
  for (const auto& k : policy_table_keys()) list += (list.empty() ? "" : ", ") + k;
  return list;
}

bool valid_table_name(const std::string& n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// axes: [AXIS, ...] -> table.has; returns the axes in order, or an empty list after an error.
// AXIS = index | layer | kv_head | head | d | e | c, a subset in that order; not both kv_head and head.
std::vector<int> parse_axes(const YAML::Node& n, const std::string& name, Diagnostics& diag, TableData& table) {
  std::vector<int> axes;
  if (!n.IsSequence() || n.size() == 0 || n.size() > kNumTableAxes - 1) {
    diag.error(pos_of(n), std::string("table '") + name + "': 'axes' must be a list of 1 to 6 of " + kTableAxisOrderText +
                              " (in that order)");
    return {};
  }
  int last = -1;  // position in kTableAxisOrder
  for (const YAML::Node& a : n) {
    int found = -1;
    for (int k = 0; k < kNumTableAxes; ++k)
      if (a.IsScalar() && a.Scalar() == kTableAxisNames[static_cast<int>(kTableAxisOrder[k])]) found = k;
    if (found < 0) {
      diag.error(pos_of(a), "table '" + name + "': unknown axis '" + (a.IsScalar() ? a.Scalar() : "?") + "' (axes: " +
                                kTableAxisOrderText + ")");
      return {};
    }
    if (found <= last) {
      diag.error(pos_of(a), "table '" + name + "': axes must be listed once each, in the order " + kTableAxisOrderText);
      return {};
    }
    last = found;
    const int slot = static_cast<int>(kTableAxisOrder[found]);
    table.has[slot] = true;
    axes.push_back(slot);
  }
  if (table.has_axis(TableAxis::KvHead) && table.has_axis(TableAxis::Head)) {
    diag.error(pos_of(n), "table '" + name + "': a table is per KV head (kv_head) or per query head (head), not both");
    return {};
  }
  return axes;
}

// shape: [N, ...], one whole number per axis, product capped.
bool parse_shape(const YAML::Node& n, const std::vector<int>& axes, const std::string& name, Diagnostics& diag,
                 TableData& table) {
  if (!n.IsSequence() || n.size() != axes.size()) {
    diag.error(pos_of(n), "table '" + name + "': 'shape' must list one extent per axis (" + std::to_string(axes.size()) +
                              " numbers)");
    return false;
  }
  double elements = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const std::string text = n[i].IsScalar() ? n[i].Scalar() : "";
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < 1 || v > static_cast<long>(kMaxTableElements)) {
      diag.error(pos_of(n[i]), "table '" + name + "': extent '" + text + "' must be a whole number in 1.." +
                                   std::to_string(kMaxTableElements));
      return false;
    }
    table.extent[axes[i]] = static_cast<int>(v);
    elements *= static_cast<double>(v);
  }
  if (elements > static_cast<double>(kMaxTableElements)) {
    diag.error(pos_of(n), "table '" + name + "': " + table.shape_text() + " has " + std::to_string(static_cast<long long>(elements)) +
                              " elements, more than the limit of " + std::to_string(kMaxTableElements));
    return false;
  }
  return true;
}

// values: rank | share, applied once to the parsed numbers. Returns "" or an error.
std::string apply_transform(TableData& t) {
  if (t.transform == TableValues::Rank) {
    std::vector<size_t> order(t.values.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return t.values[a] < t.values[b]; });
    std::vector<float> rank(t.values.size());
    for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<float>(i);
    t.values.swap(rank);
  } else if (t.transform == TableValues::Share) {
    double sum = 0;
    for (float v : t.values) {
      if (v < 0) return "values: share needs numbers >= 0";
      sum += v;
    }
    if (!(sum > 0)) return "values: share needs a positive sum";
    for (float& v : t.values) v = static_cast<float>(v / sum);
  }
  return "";
}

}  // namespace

size_t max_table_file_bytes(const TableData& table) {
  return std::max(kMinTableFileBytes, kTableFileBytesPerNumber * table.size());
}

// row = number { sep number } ; sep = spaces / tabs / one comma.
std::string parse_table_text(const std::string& text, TableData& table) {
  const size_t columns = static_cast<size_t>(table.extent_of(table.last_axis()));
  const size_t rows = table.size() / columns;
  table.values.clear();
  table.values.reserve(table.size());
  size_t row = 0;
  int line_no = 0;
  auto at = [&](size_t col) { return table.file + ":" + std::to_string(line_no) + ":" + std::to_string(col + 1) + ": "; };
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    size_t i = line.find_first_not_of(" \t\r");
    if (i == std::string::npos || line[i] == '#') continue;
    if (row == rows)
      return at(i) + "more rows than the declared shape " + table.shape_text() + " has (" + std::to_string(rows) + ")";
    size_t count = 0;
    while (i < line.size()) {
      const size_t token_end = std::min(line.find_first_of(" \t\r,", i), line.size());
      const std::string token = line.substr(i, token_end - i);
      if (token.empty()) return at(i) + "expected a number";
      char* stop = nullptr;
      errno = 0;
      const double v = std::strtod(token.c_str(), &stop);
      // The whole token must be the number (an embedded NUL byte would end strtod early); a token
      // is echoed at most 32 characters long, non-printable bytes as '?'.
      std::string shown = "'" + (token.size() > 32 ? token.substr(0, 32) + "..." : token) + "'";
      for (char& ch : shown)
        if (!std::isprint(static_cast<unsigned char>(ch))) ch = '?';  // no NUL or control bytes in messages
      if (stop != token.c_str() + token.size()) return at(i) + shown + " is not a number";
      if (!std::isfinite(v) || errno == ERANGE || std::fabs(v) > 3.0e38) return at(i) + shown + " is not a finite float";
      if (++count > columns)
        return at(i) + "row " + std::to_string(row + 1) + " has more than " + std::to_string(columns) +
               " numbers (the last axis of " + table.shape_text() + ")";
      table.values.push_back(static_cast<float>(v));
      i = token_end;
      // One separator run: blanks, at most one comma, blanks.
      i = std::min(line.find_first_not_of(" \t\r", i), line.size());
      if (i < line.size() && line[i] == ',') {
        i = std::min(line.find_first_not_of(" \t\r", i + 1), line.size());
        if (i == line.size()) return at(line.size()) + "a row may not end with a comma";
      }
    }
    if (count != columns)
      return at(line.size()) + "row " + std::to_string(row + 1) + " has " + std::to_string(count) + " numbers, the last axis of " +
             table.shape_text() + " has " + std::to_string(columns);
    ++row;
  }
  if (row != rows)
    return table.file + ": " + std::to_string(row) + " rows, the declared shape " + table.shape_text() + " needs " +
           std::to_string(rows) + " rows of " + std::to_string(columns) + " numbers";
  return "";
}

// tables: NAME: {file: PATH, axes: [...], shape: [...]}
void parse_tables_section(const YAML::Node& node, const std::string& policy_path, Diagnostics& diag, TableList& out) {
  if (!node || node.IsNull()) return;
  size_t total = 0;  // numbers of the tables so far (kMaxPolicyTableElements)
  if (!node.IsMap()) {
    diag.error(pos_of(node), "'tables' must be a mapping NAME: {file: PATH, axes: [layer, kv_head], shape: [N, M]}");
    return;
  }
  if (node.size() > static_cast<size_t>(kMaxTables)) {
    diag.error(pos_of(node), "a policy may declare at most " + std::to_string(kMaxTables) + " tables");
    return;
  }
  const std::filesystem::path dir = std::filesystem::path(policy_path).parent_path();
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string name = it->first.IsScalar() ? it->first.Scalar() : "";
    const YAML::Node spec = it->second;
    if (!valid_table_name(name)) { diag.error(pos_of(it->first), "invalid table name '" + name + "'"); continue; }
    if (!spec.IsMap()) { diag.error(pos_of(spec), "table '" + name + "' must be a mapping {file: PATH, axes: [...], shape: [...]}"); continue; }
    bool ok = true;
    for (auto k = spec.begin(); k != spec.end(); ++k)
      if (!k->first.IsScalar() || !policy_table_keys().count(k->first.Scalar())) {
        diag.error(pos_of(k->first), "unknown key '" + (k->first.IsScalar() ? k->first.Scalar() : "?") +
                                         "' in the declaration of table '" + name + "' (allowed: " + allowed_keys() + ")");
        ok = false;
      }
    for (const char* req : {"file", "axes", "shape"})
      if (!spec[req]) { diag.error(pos_of(it->first), "table '" + name + "' needs '" + req + "'"); ok = false; }
    if (!ok) continue;
    auto table = std::make_shared<TableData>();
    table->name = name;
    const std::vector<int> axes = parse_axes(spec["axes"], name, diag, *table);
    if (axes.empty() || !parse_shape(spec["shape"], axes, name, diag, *table)) continue;
    if (total + table->size() > kMaxPolicyTableElements) {
      diag.error(pos_of(spec["shape"]), "table '" + name + "': the policy's tables would hold " + std::to_string(total + table->size()) +
                                            " numbers, more than the limit of " + std::to_string(kMaxPolicyTableElements));
      continue;
    }
    total += table->size();
    const YAML::Node file = spec["file"];
    if (!file.IsScalar() || file.Scalar().empty()) { diag.error(pos_of(file), "table '" + name + "': 'file' must be a path"); continue; }
    const std::filesystem::path p(file.Scalar());
    table->file = (p.is_absolute() ? p : dir / p).lexically_normal().string();
    std::string text;
    try {
      text = read_input_file(table->file, max_table_file_bytes(*table), "table file");
    } catch (const Error& e) {
      diag.error(pos_of(file), "table '" + name + "': " + e.what());
      continue;
    }
    if (std::string err = parse_table_text(text, *table); !err.empty()) {
      diag.error(pos_of(file), "table '" + name + "': " + err);
      continue;
    }
    if (const YAML::Node v = spec["values"]) {
      bool known = false;
      for (int k = 0; k < 3; ++k)
        if (v.IsScalar() && v.Scalar() == kTableValuesNames[k]) table->transform = static_cast<TableValues>(k), known = true;
      if (!known) { diag.error(pos_of(v), "table '" + name + "': 'values' must be one of raw, rank, share"); continue; }
      if (std::string err = apply_transform(*table); !err.empty()) {
        diag.error(pos_of(v), "table '" + name + "' (" + table->file + "): " + err);
        continue;
      }
    }
    out.push_back(std::move(table));
  }
}

std::string check_table_geometry(const TableList& tables, const ModelGeometry& model) {
  struct Rule {
    TableAxis axis;
    int model;
    const char* what;
  };
  const Rule rules[] = {{TableAxis::Layer, model.n_layers, "n_layers"}, {TableAxis::KvHead, model.n_kv_heads, "n_kv_heads"},
                        {TableAxis::Head, model.n_heads, "n_heads"},   {TableAxis::D, model.head_dim, "head_dim"},
                        {TableAxis::E, model.head_dim, "head_dim"},    {TableAxis::C, model.n_embd, "n_embd"}};
  // (the index axis is the policy's own; c is not checked when n_embd is 0)
  for (const auto& t : tables)
    for (const Rule& r : rules)
      if (t->has_axis(r.axis) && t->extent_of(r.axis) != r.model && !(r.axis == TableAxis::C && model.n_embd == 0))
        return "table '" + t->name + "' (" + t->file + ") has shape " + t->shape_text() + ", but the model has " + r.what +
               " = " + std::to_string(r.model);
  return "";
}

}  // namespace kvevict::dsl
