#pragma once
// A policy table: a small dense array of numbers a policy file loads from a file next to it
// (`tables:` key, dsl/policy_tables.h) and reads by indexing, e.g. `duo[layer, kv_head]` or
// `qf[layer, kv_head, d]` (docs/DSL.md §11). Tables are constants of the policy, not engine
// signals: the interpreter reads them from the lowered program and the CUDA generator bakes them
// into the kernel text.
//
// AXES AND LAYOUT. A table has one to six of the axes, in this order (a subset):
//   index    a leading axis read at an integer-valued SCALAR of the program (a parameter or a
//            scalar definition: `lukv[r, layer, kv_head]`, LUKV's curve row per compression ratio);
//            the scalar is rounded to the nearest integer (llround), and NaN reads 0
//   layer    the program's layer
//   kv_head  the program's KV head (in a layer_weight program: along axis g), or instead
//   head     the QUERY head: read along axis h as query head kv_head * G + h (ExpectedAttention's
//            per-query-head statistics; extent n_heads); kv_head and head exclude each other
//   d, e     channels (head_dim each), read along the program's d or e (`cov[layer, h, d, e]`)
//   c        the model dimension (n_embd, the axis of hidden[c, t]; KVzap's per-head weights
//            `w[layer, kv_head, c]`), read along the program's c
// It is stored densely, row-major in that order, the last axis innermost; an absent axis has
// extent 1 and index 0 (flat_index).
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

// The enum values are slots of TableData::has / extent (the first three are the original axes);
// the storage order is kTableAxisOrder.
enum class TableAxis : int { Layer = 0, KvHead = 1, D = 2, Index = 3, Head = 4, E = 5, C = 6 };
inline constexpr int kNumTableAxes = 7;
inline constexpr const char* kTableAxisNames[kNumTableAxes] = {"layer", "kv_head", "d", "index", "head", "e", "c"};
inline constexpr TableAxis kTableAxisOrder[kNumTableAxes] = {TableAxis::Index, TableAxis::Layer, TableAxis::KvHead,
                                                             TableAxis::Head,  TableAxis::D,     TableAxis::E,
                                                             TableAxis::C};
// "index, layer, kv_head, head, d, e, c": for messages.
inline constexpr const char* kTableAxisOrderText = "index, layer, kv_head, head, d, e, c";

// Hard caps: a policy must not make the process allocate without bound. One table may hold 2^24
// numbers (64 MiB as floats): ExpectedAttentionStats' covariance for Llama-3.1-8B, 32 layers x 32
// query heads x 128 x 128, is exactly that. All tables of a policy together hold at most 2^25
// (128 MiB). A table file may have at most max(4 MiB, 24 bytes per declared number) of text.
// The CUDA generator bakes a table of at most kMaxBakedTableElements numbers into the kernel text
// and loads a larger one into the kernel's module (jit/cuda_expressions.h, jit/loaded_tables.h).
inline constexpr size_t kMaxTableElements = size_t{1} << 24;
inline constexpr size_t kMaxPolicyTableElements = size_t{1} << 25;
inline constexpr size_t kMinTableFileBytes = size_t{4} << 20;  // 4 MiB of text whatever the shape
inline constexpr size_t kTableFileBytesPerNumber = 24;
inline constexpr int kMaxTables = 8;                           // per policy file
inline constexpr size_t kMaxBakedTableElements = size_t{1} << 17;  // 131072 numbers baked into kernel text

enum class TableValues : int { Raw = 0, Rank = 1, Share = 2 };
inline constexpr const char* kTableValuesNames[] = {"raw", "rank", "share"};

struct TableData {
  std::string name;                 // the name programs index
  std::string file;                 // resolved path of the table file (messages)
  std::array<bool, kNumTableAxes> has{};                 // which axes the table has (by TableAxis)
  std::array<int, kNumTableAxes> extent{1, 1, 1, 1, 1, 1, 1};  // declared extents (1 for an absent axis)
  std::vector<float> values;        // size() numbers, row-major in kTableAxisOrder
  TableValues transform = TableValues::Raw;  // applied to `values` once, when the file is read

  bool has_axis(TableAxis a) const { return has[static_cast<int>(a)]; }
  int extent_of(TableAxis a) const { return extent[static_cast<int>(a)]; }
  size_t size() const {
    size_t n = 1;
    for (int e : extent) n *= static_cast<size_t>(e);
    return n;
  }
  // The innermost axis the table has (its file rows run along it).
  TableAxis last_axis() const {
    TableAxis last = TableAxis::Index;
    for (TableAxis a : kTableAxisOrder)
      if (has_axis(a)) last = a;
    return last;
  }
  // Flat index of the element at coordinates idx (by TableAxis; ignored for absent axes), or -1
  // when one is outside its extent.
  long long flat_index(const std::array<long long, kNumTableAxes>& idx) const {
    long long flat = 0;
    for (TableAxis a : kTableAxisOrder) {
      const int i = static_cast<int>(a);
      const long long v = has[i] ? idx[i] : 0;
      if (v < 0 || v >= extent[i]) return -1;
      flat = flat * extent[i] + v;
    }
    return flat;
  }
  // The element at idx; 0 outside the table.
  float at(const std::array<long long, kNumTableAxes>& idx) const {
    const long long f = flat_index(idx);
    return f < 0 ? 0.0f : values[static_cast<size_t>(f)];
  }
  // The element at (layer, kv_head, c) of a table of the axes layer / kv_head / d only.
  float at(long long layer, long long kv_head, long long c) const { return at({layer, kv_head, c, 0, 0, 0, 0}); }
  // "[layer 5, kv_head 4]"
  std::string shape_text() const;
};

using TableList = std::vector<std::shared_ptr<const TableData>>;

}  // namespace kvevict::dsl
