// Planning and the CPU twin of the cached rows handed to device scoring; contract in
// cache_rows_signal.h.
#include "core/decode/cache_rows_signal.h"

#include <stdexcept>
#include <string>

namespace kvevict {

CacheRowsArgs plan_cache_rows(const DeviceKvLayerView& view, float* keys_out, float* values_out) {
  if (view.n_heads < 0 || view.n_heads > kDeviceKvMaxHeads)
    throw std::invalid_argument("cache rows: " + std::to_string(view.n_heads) + " heads; at most " +
                                std::to_string(kDeviceKvMaxHeads));
  if (view.head_dim < 1) throw std::invalid_argument("cache rows: head_dim " + std::to_string(view.head_dim));
  CacheRowsArgs a;
  a.keys = view.keys;
  a.values = view.values;
  a.type = view.type;
  a.head_dim = view.head_dim;
  a.ranges.n_heads = view.n_heads;
  for (int h = 0; h < view.n_heads; ++h) {
    if (view.length[h] < 0) throw std::invalid_argument("cache rows: head " + std::to_string(h) + " has a negative length");
    a.ranges.start_row[h] = view.base_row[h];
    a.ranges.out_offset[h + 1] = a.ranges.out_offset[h] + view.length[h];
  }
  a.keys_out = keys_out;
  a.values_out = values_out;
  return a;
}

CacheRowsSignal describe_cache_rows(const CacheRowsArgs& a, bool on_device) {
  CacheRowsSignal s;
  s.keys = a.keys_out;
  s.values = a.values_out;
  s.key_norms = a.key_norms_out;
  s.value_norms = a.value_norms_out;
  s.keys_pre_rope = a.keys_pre_rope_out;
  s.out_norms_l1 = a.out_norms_l1_out;
  s.group = a.projection.group;  // 0 unless planned (plan_cache_out_norms_l1)
  s.on_device = on_device;
  s.head_dim = a.head_dim;
  s.length.resize(static_cast<size_t>(a.ranges.n_heads));
  s.offset.resize(s.length.size());
  for (int h = 0; h < a.ranges.n_heads; ++h) {
    s.length[static_cast<size_t>(h)] = a.ranges.out_offset[h + 1] - a.ranges.out_offset[h];
    s.offset[static_cast<size_t>(h)] = static_cast<int64_t>(a.head_dim) * a.ranges.out_offset[h];
  }
  return s;
}

void plan_cache_keys_pre_rope(CacheRowsArgs& a, const DeviceKvLayerView& view, const RopeTableView& rope,
                              float* keys_pre_rope_out) {
  if (view.head_dim % 2 != 0)
    throw std::invalid_argument("cache rows: keys before RoPE need an even head_dim, got " + std::to_string(view.head_dim));
  if (rope.half != view.head_dim / 2 || !rope.cos || !rope.sin)
    throw std::invalid_argument("cache rows: a RoPE table of " + std::to_string(rope.half) + " pairs for head_dim " +
                                std::to_string(view.head_dim));
  bool rows = false;  // an empty layer may have no arenas at all
  for (int h = 0; h < view.n_heads; ++h) rows = rows || view.length[h] > 0;
  if (rows && !view.positions) throw std::invalid_argument("cache rows: keys before RoPE need the rows' positions");
  a.positions = view.positions;
  a.rope = rope;
  a.keys_pre_rope_out = keys_pre_rope_out;
}

void plan_cache_out_norms_l1(CacheRowsArgs& a, const OutputProjectionView& projection, float* out_norms_l1_out) {
  if (projection.group < 1)
    throw std::invalid_argument("cache rows: projected value norms for a group of " + std::to_string(projection.group));
  if (a.head_dim > kProjectedValueMaxHeadDim)
    throw std::invalid_argument("cache rows: projected value norms for head_dim " + std::to_string(a.head_dim) +
                                "; at most " + std::to_string(kProjectedValueMaxHeadDim));
  if (projection.dim < 1 || projection.row_stride < 1 || projection.head_stride < 1)
    throw std::invalid_argument("cache rows: an output projection of " + std::to_string(projection.dim) + " features");
  if (!projection.data && device_kv_range_rows(a.ranges) > 0)
    throw std::invalid_argument("cache rows: projected value norms need the layer's output projection");
  a.projection = projection;
  a.out_norms_l1_out = out_norms_l1_out;
}

CacheRowsSignal cache_rows_twin(const DeviceKvLayerView& view, CacheRowsWanted wanted, CacheRowsHost& out,
                                const RopeTableView& rope, const OutputProjectionView& projection) {
  CacheRowsArgs a = plan_cache_rows(view, nullptr, nullptr);
  const size_t n = cache_rows_floats(a), entries = cache_rows_entries(a);
  auto lay = [](std::vector<float>& v, bool want, size_t count) -> float* {
    v.clear();
    if (!want) return nullptr;
    v.resize(count);
    return v.data();
  };
  a.keys_out = lay(out.keys, wanted.keys, n);
  a.values_out = lay(out.values, wanted.values, n);
  a.key_norms_out = lay(out.key_norms, wanted.norms, entries);
  a.value_norms_out = lay(out.value_norms, wanted.norms, entries);
  float* pre = lay(out.keys_pre_rope, wanted.keys_pre_rope, n);
  if (wanted.keys_pre_rope) plan_cache_keys_pre_rope(a, view, rope, pre);  // checked even for an empty layer
  if (wanted.out_norms_l1) {
    plan_cache_out_norms_l1(a, projection, nullptr);
    a.out_norms_l1_out = lay(out.out_norms_l1, true, cache_rows_out_norms(a));
  } else {
    out.out_norms_l1.clear();
  }
  if (wanted.any_rows())
    for (size_t x = 0; x < n; ++x) cache_rows_element(a, x);
  if (wanted.norms)
    for (size_t e = 0; e < entries; ++e) cache_rows_norm_element(a, e);
  if (wanted.out_norms_l1) {
    std::vector<float> row(static_cast<size_t>(a.head_dim));
    for (size_t x = 0; x < cache_rows_out_norms(a); ++x) cache_rows_out_norm_element(a, x, row.data());
  }
  return describe_cache_rows(a, /*on_device=*/false);
}

}  // namespace kvevict
