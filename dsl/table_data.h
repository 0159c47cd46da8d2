#pragma once
// A policy table: a small dense array of numbers a policy file loads from a file next to it
// (`tables:` key, dsl/policy_tables.h) and reads by indexing, e.g. `duo[layer, kv_head]` or
// `qf[layer, kv_head, d]` (docs/DSL.md §11). Tables are constants of the policy, not engine
// signals: the interpreter reads them from the lowered program and the CUDA generator bakes them
// into the kernel text.
//
// AXES AND LAYOUT. A table has one to four of the axes layer, kv_head, d, c, in that order (a
// subset: [layer], [kv_head], [layer, kv_head], [layer, kv_head, d], [d], [layer, kv_head, c],
// ...; c is the model dimension n_embd, the axis of hidden[c, t]). It is stored densely,
// row-major, the last axis innermost; an absent axis has extent 1 and index 0:
//   flat(l, k, d, c) = ((l * n[KvHead] + k) * n[D] + d) * n[C] + c
// In a layer_weight program the kv_head axis is read along the program's axis g (`t[layer, g]`).
//
// VALUES. `values: raw` (default) keeps the file's numbers; `values: rank` replaces each by its
// 0-based position in ascending order over the whole table (ties by flat index: a stable sort),
// so "the lowest fraction r of all heads" is `t[layer, kv_head] < round(r * n)` (DuoAttention);
// `values: share` divides each by the sum of all (HeadKV's normalised head scores; the sum must
// be positive).
//
// A read whose index is outside the table yields 0 in the interpreter and in generated code alike;
// the engine refuses a policy whose table extents differ from the model's before anything runs
// (PolicyProgram::check_geometry), so that never happens in a run.
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace kvevict::dsl {

enum class TableAxis : int { Layer = 0, KvHead = 1, D = 2, C = 3 };
inline constexpr int kNumTableAxes = 4;
inline constexpr const char* kTableAxisNames[kNumTableAxes] = {"layer", "kv_head", "d", "c"};

// Hard caps: a policy must not make the process allocate without bound.
inline constexpr size_t kMaxTableElements = size_t{1} << 17;  // 131072 numbers (80 layers x 8 heads x 128 fits in 2)
inline constexpr size_t kMaxTableFileBytes = size_t{4} << 20;  // 4 MiB of text
inline constexpr int kMaxTables = 8;                           // per policy file

enum class TableValues : int { Raw = 0, Rank = 1, Share = 2 };
inline constexpr const char* kTableValuesNames[] = {"raw", "rank", "share"};

struct TableData {
  std::string name;                 // the name programs index
  std::string file;                 // resolved path of the table file (messages)
  std::array<bool, kNumTableAxes> has{};        // which axes the table has
  std::array<int, kNumTableAxes> extent{1, 1, 1, 1};  // declared extents (1 for an absent axis)
  std::vector<float> values;        // the product of the extents, row-major
  TableValues transform = TableValues::Raw;  // applied to `values` once, when the file is read

  size_t size() const { return static_cast<size_t>(extent[0]) * extent[1] * extent[2] * extent[3]; }
  // The element at (layer, kv_head, d, c) (indices of absent axes are ignored); 0 outside the table.
  float at(long long layer, long long kv_head, long long d_index, long long c_index = 0) const {
    const long long l = has[0] ? layer : 0, k = has[1] ? kv_head : 0, d = has[2] ? d_index : 0, c = has[3] ? c_index : 0;
    if (l < 0 || l >= extent[0] || k < 0 || k >= extent[1] || d < 0 || d >= extent[2] || c < 0 || c >= extent[3]) return 0.0f;
    return values[static_cast<size_t>(((l * extent[1] + k) * extent[2] + d) * extent[3] + c)];
  }
  // "[layer 5, kv_head 4]"
  std::string shape_text() const;
};

using TableList = std::vector<std::shared_ptr<const TableData>>;

}  // namespace kvevict::dsl
