// The device KV cache's host twin; contract in device_kv_twin.h.
#include "core/decode/device_kv_twin.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_merges.h"
#include "core/decode/device_kv_reassign.h"
#include "core/decode/device_kv_row_norms.h"
#include "core/decode/device_kv_row_range.h"

namespace kvevict {

std::vector<float> device_kv_words_to_f32(KvType type, std::span<const uint16_t> words) {
  if (type == KvType::F32) {
    std::vector<float> out(words.size() / 2);
    if (!out.empty()) std::memcpy(out.data(), words.data(), out.size() * sizeof(float));
    return out;
  }
  std::vector<float> out(words.size());
  kv_to_f32(type, words.data(), out.data(), words.size());
  return out;
}

DeviceKvTwin::DeviceKvTwin(const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy)
    : layout_(geometry, policy), arenas_(static_cast<size_t>(geometry.n_layers)) {}

DeviceKvTwin::Arenas DeviceKvTwin::allocate(const DeviceKvLayerLayout& layout) const {
  const size_t rows = static_cast<size_t>(layout.capacity_rows());
  const size_t words = rows * static_cast<size_t>(layout_.geometry().row_words());
  return Arenas{std::vector<uint16_t>(words), std::vector<uint16_t>(words), std::vector<int32_t>(rows)};
}

void DeviceKvTwin::copy_rows(const Arenas& from, Arenas& to, const std::vector<DeviceKvCopy>& copies) const {
  const size_t rw = static_cast<size_t>(layout_.geometry().row_words());
  for (const DeviceKvCopy& c : copies) {
    const size_t s = static_cast<size_t>(c.src_row), d = static_cast<size_t>(c.dst_row), n = static_cast<size_t>(c.rows);
    std::copy_n(from.keys.begin() + s * rw, n * rw, to.keys.begin() + d * rw);
    std::copy_n(from.values.begin() + s * rw, n * rw, to.values.begin() + d * rw);
    std::copy_n(from.positions.begin() + s, n, to.positions.begin() + d);
  }
}

void DeviceKvTwin::relocate(int layer, DeviceKvLayerLayout to) {
  Arenas fresh = allocate(to);
  copy_rows(arenas_[static_cast<size_t>(layer)], fresh, plan_copy(layout_.layer(layer), to));
  arenas_[static_cast<size_t>(layer)] = std::move(fresh);
  layout_.set_layer(layer, std::move(to));
}

void DeviceKvTwin::append(int layer, int n, const float* keys, const float* values, int64_t src_stride,
                          std::span<const int32_t> first_positions) {
  layout_.check_block(n, src_stride);
  if (auto grown = layout_.layout_for_append(layer, n)) relocate(layer, std::move(*grown));
  DeviceKvAppendArgs args = layout_.append_args(layer, n, keys, values, src_stride, first_positions);
  Arenas& a = arenas_[static_cast<size_t>(layer)];
  args.key_arena = a.keys.data();
  args.value_arena = a.values.data();
  args.positions = a.positions.data();
  const size_t count = device_kv_append_elements(args);
  for (size_t e = 0; e < count; ++e) device_kv_append_element(args, e);  // the kernel's 1-D grid
  layout_.commit_append(layer, n);
}

void DeviceKvTwin::write_rows(int layer, int head, int64_t first_row, int64_t rows, const float* keys,
                              const float* values, const int32_t* positions) {
  if (auto grown = layout_.layout_for_write(layer, head, first_row, rows)) relocate(layer, std::move(*grown));
  DeviceKvWriteArgs args = layout_.write_args(layer, head, first_row, rows, keys, values, positions);
  Arenas& a = arenas_[static_cast<size_t>(layer)];
  args.key_arena = a.keys.data();
  args.value_arena = a.values.data();
  args.positions = a.positions.data();
  for (size_t e = 0; e < device_kv_write_elements(args); ++e) device_kv_write_element(args, e);  // the kernel's grid
  layout_.commit_write(layer, head, first_row, rows);
}

void DeviceKvTwin::compact(int layer, const std::vector<std::vector<int>>& keep) {
  const DeviceKvCompactionPlan plan = plan_compaction(layout_.layer(layer), keep);
  Arenas& a = arenas_[static_cast<size_t>(layer)];
  DeviceKvCompactArgs args = layout_.compact_args(plan, plan.src_rows.data());
  args.key_arena = a.keys.data();
  args.value_arena = a.values.data();
  args.positions = a.positions.data();
  std::vector<DeviceKvCompactRegs> regs(kDeviceKvCompactThreads);
  for (int block = 0; block < args.n_heads; ++block) {
    const int chunks = device_kv_compact_chunks(args, block);
    for (int chunk = 0; chunk < chunks; ++chunk) {  // the kernel's loop, barrier between the halves
      for (int t = 0; t < kDeviceKvCompactThreads; ++t) device_kv_compact_load(args, block, chunk, t, regs[t]);
      for (int t = 0; t < kDeviceKvCompactThreads; ++t) device_kv_compact_store(args, block, chunk, t, regs[t]);
    }
  }
  if (!plan.gather_src.empty()) {  // heads in another order: through scratch rows and back
    const size_t rows = plan.gather_src.size(), words = rows * static_cast<size_t>(args.row_words);
    Arenas scratch{std::vector<uint16_t>(words), std::vector<uint16_t>(words), std::vector<int32_t>(rows)};
    DeviceKvGatherArgs g = layout_.gather_args(plan, plan.gather_src.data());
    g.key_arena = a.keys.data();
    g.value_arena = a.values.data();
    g.positions = a.positions.data();
    g.key_scratch = scratch.keys.data();
    g.value_scratch = scratch.values.data();
    g.position_scratch = scratch.positions.data();
    for (size_t e = 0; e < device_kv_gather_elements(g); ++e) device_kv_gather_element(g, e);
    copy_rows(scratch, a, plan.gather_back);
  }
  layout_.commit_compaction(layer, plan);
}

void DeviceKvTwin::release_room(int layer) {
  if (auto smaller = layout_.layout_to_release(layer)) relocate(layer, std::move(*smaller));
}

DeviceKvHeadContents DeviceKvTwin::read_head(int layer, int head) const {
  return read_rows(layer, head, 0, layout_.layer(layer).heads.at(static_cast<size_t>(head)).length);
}

DeviceKvHeadContents DeviceKvTwin::read_rows(int layer, int head, int64_t first_row, int64_t rows) const {
  const DeviceKvRegion& r = device_kv_row_range(layout_, layer, head, first_row, rows, "read_rows");
  const size_t rw = static_cast<size_t>(layout_.geometry().row_words());
  const Arenas& a = arenas_[static_cast<size_t>(layer)];
  const size_t b = static_cast<size_t>(r.base_row + first_row), n = static_cast<size_t>(rows);
  DeviceKvHeadContents out;
  out.keys.assign(a.keys.begin() + b * rw, a.keys.begin() + (b + n) * rw);
  out.values.assign(a.values.begin() + b * rw, a.values.begin() + (b + n) * rw);
  out.positions.assign(a.positions.begin() + b, a.positions.begin() + b + n);
  return out;
}

std::vector<int32_t> DeviceKvTwin::read_positions(int layer, int head, int64_t first_row, int64_t rows) const {
  const DeviceKvRegion& r = device_kv_row_range(layout_, layer, head, first_row, rows, "read_positions");
  const Arenas& a = arenas_[static_cast<size_t>(layer)];
  const size_t b = static_cast<size_t>(r.base_row + first_row), n = static_cast<size_t>(rows);
  return std::vector<int32_t>(a.positions.begin() + b, a.positions.begin() + b + n);
}

std::vector<RowNorms> DeviceKvTwin::row_norms(int layer, std::span<const int64_t> first_row,
                                              std::span<const int64_t> rows) const {
  const Arenas& a = arenas_.at(static_cast<size_t>(layer));
  DeviceKvRowNormArgs args = plan_row_norms(layout_, layer, first_row, rows, a.keys.data(), a.values.data(), nullptr,
                                            nullptr);
  const size_t n = device_kv_row_norm_elements(args);
  std::vector<float> key_norms(n), value_norms(n);
  args.key_norms = key_norms.data();
  args.value_norms = value_norms.data();
  for (size_t e = 0; e < n; ++e) device_kv_row_norm_element(args, e);
  std::vector<RowNorms> out(n);
  for (size_t e = 0; e < n; ++e) out[e] = {key_norms[e], value_norms[e]};
  return out;
}

void DeviceKvTwin::reassign_positions(int layer, std::span<const char> heads, const RopeTableView& rope) {
  layout_.layer(layer);  // std::invalid_argument for a layer outside the cache, as the CUDA cache
  Arenas& a = arenas_.at(static_cast<size_t>(layer));
  const DeviceKvReassignArgs args = plan_reassign(layout_, layer, heads, a.keys.data(), a.positions.data(), rope);
  const size_t n = device_kv_reassign_elements(args);
  for (size_t e = 0; e < n; ++e)
    if (!device_kv_reassign_element(args, e))
      throw std::logic_error("device KV reassign: an old position of layer " + std::to_string(layer) +
                             " lies outside the RoPE table (" + std::to_string(rope.positions) + " positions)");
}

std::vector<std::vector<KeptKeyMatch>> DeviceKvTwin::nearest_kept_keys(int layer,
                                                                       std::span<const KeptKeySearch> searches) const {
  DeviceKvNearestPlan p = plan_nearest_kept_keys(layout_, layer, arenas_.at(static_cast<size_t>(layer)).keys.data(), searches);
  DeviceKvNearestArgs& a = p.args;
  std::vector<double> norms(p.kept_rows.size());
  std::vector<KeptKeyMatch> out(p.evicted_rows.size());
  a.kept_rows = p.kept_rows.data();
  a.evicted_rows = p.evicted_rows.data();
  a.kept_begin = p.kept_begin.data();
  a.kept_end = p.kept_end.data();
  a.kept_norms = norms.data();
  a.matches = out.data();
  for (int32_t j = 0; j < a.n_kept; ++j) device_kv_kept_norm_element(a, j);
  for (int32_t e = 0; e < a.n_evicted; ++e) {
    const double norm_e = device_kv_evicted_norm(a, e);
    KeptKeyMatch best{-std::numeric_limits<double>::infinity(), 0};
    for (int32_t j = a.kept_begin[e]; j < a.kept_end[e]; ++j) {
      const double s = device_kv_key_cosine(a, e, norm_e, j);
      if (better_key_match(s, j - a.kept_begin[e], best.cosine, best.kept)) best = {s, j - a.kept_begin[e]};
    }
    a.matches[e] = best;
  }
  return p.split(out);
}

std::vector<double> DeviceKvTwin::value_norms(int layer, int head, std::span<const int> rows) const {
  DeviceKvValueNormArgs a =
      plan_value_norms(layout_, layer, head, arenas_.at(static_cast<size_t>(layer)).values.data(), rows);
  const std::vector<int32_t> listed(rows.begin(), rows.end());
  std::vector<double> out(rows.size());
  a.rows = listed.data();
  a.norms = out.data();
  for (int32_t i = 0; i < a.n; ++i) device_kv_value_norm_element(a, i);
  return out;
}

void DeviceKvTwin::fold_rows(int layer, int head, const RowFolds& folds) {
  Arenas& arenas = arenas_.at(static_cast<size_t>(layer));
  DeviceKvFoldArgs a = plan_fold_rows(layout_, layer, head, arenas.keys.data(), arenas.values.data(), folds);
  a.folds = folds.folds.data();
  a.terms = folds.terms.data();
  // Every element reads rows no element writes (the plan checked it): any order is the kernel's.
  const size_t n = device_kv_fold_elements(a);
  for (size_t e = 0; e < n; ++e) device_kv_fold_element(a, e);
}

DeviceKvLayerView DeviceKvTwin::layer_view(int layer) const {
  const Arenas& a = arenas_.at(static_cast<size_t>(layer));
  return make_layer_view(layout_.layer(layer), layout_.geometry(), a.keys.data(), a.values.data(), a.positions.data());
}

DeviceKvTwin::Snapshot DeviceKvTwin::snapshot() const {
  Snapshot s{layout_.packed(), {}};
  for (int l = 0; l < layout_.geometry().n_layers; ++l) {
    s.layers.push_back(allocate(s.layout.layer(l)));
    copy_rows(arenas_[static_cast<size_t>(l)], s.layers.back(), plan_copy(layout_.layer(l), s.layout.layer(l)));
  }
  return s;
}

void DeviceKvTwin::restore(const Snapshot& snapshot) {
  const DeviceKvGeometry& g = layout_.geometry();
  const DeviceKvGeometry& sg = snapshot.layout.geometry();
  if (sg.n_layers != g.n_layers || sg.n_heads != g.n_heads || sg.head_dim != g.head_dim || sg.type != g.type) {
    throw std::invalid_argument("device KV restore: snapshot of another cache geometry");
  }
  for (int l = 0; l < g.n_layers; ++l) {
    const DeviceKvLayerLayout& from = snapshot.layout.layer(l);
    std::vector<int64_t> lengths;
    for (const DeviceKvRegion& r : from.heads) lengths.push_back(r.length);
    DeviceKvLayerLayout target = layout_.layer(l);
    if (auto grown = layout_.layout_for_lengths(l, lengths)) {
      target = std::move(*grown);
      arenas_[static_cast<size_t>(l)] = allocate(target);  // old contents are overwritten anyway
    }
    for (size_t h = 0; h < target.heads.size(); ++h) target.heads[h].length = lengths[h];
    copy_rows(snapshot.layers[static_cast<size_t>(l)], arenas_[static_cast<size_t>(l)], plan_copy(from, target));
    layout_.set_layer(l, std::move(target));
  }
}

}  // namespace kvevict
