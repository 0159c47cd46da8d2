// Bookkeeping of the device KV cache; contract in device_kv_layout.h.
#include "core/decode/device_kv_layout.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/decode/kept_list.h"

namespace kvevict {

void DeviceKvGeometry::validate() const {
  if (n_layers <= 0 || n_heads <= 0 || head_dim <= 0) {
    throw std::invalid_argument("device KV cache: layers, heads and head_dim must be positive (got " +
                                std::to_string(n_layers) + ", " + std::to_string(n_heads) + ", " +
                                std::to_string(head_dim) + ")");
  }
  if (n_heads > kDeviceKvMaxHeads) {
    throw std::invalid_argument("device KV cache: " + std::to_string(n_heads) + " heads per layer, at most " +
                                std::to_string(kDeviceKvMaxHeads) + " are supported");
  }
  if (row_words() > kDeviceKvMaxRowWords) {
    throw std::invalid_argument("device KV cache: a row of head_dim " + std::to_string(head_dim) + " " +
                                kv_type_name(type) + " elements exceeds one compaction chunk (" +
                                std::to_string(kDeviceKvMaxRowWords * 2) + " bytes)");
  }
}

int64_t DeviceKvLayerLayout::capacity_rows() const {
  int64_t rows = 0;
  for (const DeviceKvRegion& r : heads) rows += r.capacity;
  return rows;
}

int64_t DeviceKvLayerLayout::live_rows() const {
  int64_t rows = 0;
  for (const DeviceKvRegion& r : heads) rows += r.length;
  return rows;
}

DeviceKvLayerLayout packed_layout(std::span<const int64_t> capacities, std::span<const int64_t> lengths) {
  if (capacities.size() != lengths.size()) throw std::invalid_argument("packed_layout: one capacity per length");
  DeviceKvLayerLayout out;
  int64_t base = 0;
  for (size_t h = 0; h < capacities.size(); ++h) {
    if (lengths[h] < 0 || lengths[h] > capacities[h]) {
      throw std::invalid_argument("packed_layout: head " + std::to_string(h) + " length " + std::to_string(lengths[h]) +
                                  " outside capacity " + std::to_string(capacities[h]));
    }
    out.heads.push_back({base, capacities[h], lengths[h]});
    base += capacities[h];
  }
  return out;
}

int64_t rounded_capacity(int64_t rows, const DeviceKvGrowthPolicy& policy) {
  if (rows < 0 || rows > policy.max_rows_per_head) {
    throw std::length_error("device KV cache: " + std::to_string(rows) + " entries in one (layer, head) exceed the limit of " +
                            std::to_string(policy.max_rows_per_head));
  }
  const int64_t q = std::max<int64_t>(1, policy.row_quantum);
  const int64_t rounded = (rows + q - 1) / q * q;
  return std::min(rounded, std::max(rows, policy.max_rows_per_head));
}

namespace {

// ceil(growth x rows), clipped to the per-head limit: the room a head of `rows` rows is given when
// it grows (from its capacity) or when its layer gives room back (from its length).
int64_t geometric_step(int64_t rows, const DeviceKvGrowthPolicy& policy) {
  const double grown = std::ceil(policy.growth * static_cast<double>(rows));
  return std::min(policy.max_rows_per_head, static_cast<int64_t>(std::min(grown, 9.0e18)));
}

}  // namespace

std::optional<DeviceKvLayerLayout> reserved_layout(const DeviceKvLayerLayout& current, std::span<const int64_t> needed,
                                                   const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy) {
  if (needed.size() != current.heads.size()) throw std::invalid_argument("reserved_layout: one need per head");
  bool grows = false;
  std::vector<int64_t> capacities, lengths;
  for (size_t h = 0; h < needed.size(); ++h) {
    const DeviceKvRegion& r = current.heads[h];
    int64_t cap = r.capacity;
    if (needed[h] > cap) {
      grows = true;
      // A geometric step past the limit is clipped to it; only the need itself may be refused.
      cap = rounded_capacity(std::max(needed[h], geometric_step(cap, policy)), policy);
    }
    capacities.push_back(cap);
    lengths.push_back(r.length);
  }
  if (!grows) return std::nullopt;
  DeviceKvLayerLayout out = packed_layout(capacities, lengths);
  const uint64_t rows = static_cast<uint64_t>(out.capacity_rows());
  if (rows > policy.max_arena_bytes / geometry.row_bytes()) {
    throw std::length_error("device KV cache: a layer arena of " + std::to_string(rows) + " rows of " +
                            std::to_string(geometry.row_bytes()) + " bytes exceeds the limit of " +
                            std::to_string(policy.max_arena_bytes) + " bytes");
  }
  return out;
}

void plan_append(const DeviceKvLayerLayout& layout, int n, std::span<const int32_t> first_positions,
                 DeviceKvAppendArgs& args) {
  if (n <= 0) throw std::invalid_argument("plan_append: a block needs at least one token");
  if (first_positions.size() != layout.heads.size() || layout.heads.size() > size_t(kDeviceKvMaxHeads)) {
    throw std::invalid_argument("plan_append: one first position per head");
  }
  for (size_t h = 0; h < layout.heads.size(); ++h) {
    const DeviceKvRegion& r = layout.heads[h];
    if (r.length + n > r.capacity) {
      throw std::logic_error("plan_append: head " + std::to_string(h) + " has room for " +
                             std::to_string(r.capacity - r.length) + " rows, not " + std::to_string(n));
    }
    args.heads[h] = {r.base_row + r.length, first_positions[h]};
  }
  args.n = n;
  args.n_heads = static_cast<int>(layout.heads.size());
}

namespace {

// The list's shape after its range and duplicate checks (kept_list.h, as KVCache::keep checks it).
KeptListShape checked_keep_list(const std::vector<int>& list, int64_t length, size_t head) {
  const KeptListCheck c = check_kept_list(list, length);
  if (c.fault == KeptListCheck::Fault::OutOfRange) {
    throw std::invalid_argument("device KV compaction: head " + std::to_string(head) + " keeps entry " +
                                std::to_string(c.index) + ", outside [0, " + std::to_string(length) + ")");
  }
  if (c.fault == KeptListCheck::Fault::Twice) {
    throw std::invalid_argument("device KV compaction: head " + std::to_string(head) + " keeps entry " +
                                std::to_string(c.index) + " twice");
  }
  return c.shape;
}

void plan_in_place(const std::vector<int>& list, size_t first, int64_t base_row, int head,
                   DeviceKvCompactionPlan& plan) {
  DeviceKvCompactHead h;
  h.base_row = base_row;
  h.list_offset = static_cast<int64_t>(plan.src_rows.size());
  h.first = static_cast<int32_t>(first);
  h.moves = static_cast<int32_t>(list.size() - first);
  plan.heads.push_back(h);
  plan.listed.push_back(head);
  plan.src_rows.insert(plan.src_rows.end(), list.begin() + static_cast<std::ptrdiff_t>(first), list.end());
}

}  // namespace

DeviceKvCompactionPlan plan_compaction(const DeviceKvLayerLayout& layout, const std::vector<std::vector<int>>& keep,
                                       int64_t max_in_place_moves) {
  if (keep.size() != layout.heads.size()) {
    throw std::invalid_argument("device KV compaction: " + std::to_string(keep.size()) + " keep lists for " +
                                std::to_string(layout.heads.size()) + " heads");
  }
  std::vector<KeptListShape> shapes;  // every list checked before the plan changes anything
  for (size_t h = 0; h < keep.size(); ++h) shapes.push_back(checked_keep_list(keep[h], layout.heads[h].length, h));
  DeviceKvCompactionPlan plan;
  for (size_t h = 0; h < keep.size(); ++h) {
    const std::vector<int>& list = keep[h];
    const int64_t base = layout.heads[h].base_row;
    plan.new_lengths.push_back(static_cast<int64_t>(list.size()));
    const size_t first = shapes[h].in_place;  // the first entry not already in its row
    if (first == list.size()) continue;  // every kept entry is already in its row
    const int64_t moves = static_cast<int64_t>(list.size() - first);
    if (shapes[h].ascending && moves <= max_in_place_moves) {
      plan_in_place(list, first, base, static_cast<int>(h), plan);
      continue;
    }
    plan.gather_back.push_back({static_cast<int64_t>(plan.gather_src.size()), base + static_cast<int64_t>(first), moves});
    for (size_t j = first; j < list.size(); ++j) plan.gather_src.push_back(base + list[j]);
  }
  return plan;
}

std::vector<DeviceKvCopy> plan_copy(const DeviceKvLayerLayout& from, const DeviceKvLayerLayout& to) {
  if (from.heads.size() != to.heads.size()) throw std::invalid_argument("plan_copy: layouts of different head counts");
  std::vector<DeviceKvCopy> copies;
  for (size_t h = 0; h < from.heads.size(); ++h) {
    const DeviceKvRegion &src = from.heads[h], &dst = to.heads[h];
    if (dst.capacity < src.length) {
      throw std::logic_error("plan_copy: head " + std::to_string(h) + " holds " + std::to_string(src.length) +
                             " rows, the target only " + std::to_string(dst.capacity));
    }
    if (src.length == 0) continue;
    if (!copies.empty()) {
      DeviceKvCopy& last = copies.back();
      if (last.src_row + last.rows == src.base_row && last.dst_row + last.rows == dst.base_row) {
        last.rows += src.length;
        continue;
      }
    }
    copies.push_back({src.base_row, dst.base_row, src.length});
  }
  return copies;
}

DeviceKvLayout::DeviceKvLayout(const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy)
    : geometry_(geometry), policy_(policy) {
  geometry_.validate();
  if (policy_.row_quantum <= 0 || !(policy_.growth >= 1.0) || policy_.max_rows_per_head <= 0) {
    throw std::invalid_argument("device KV cache: growth policy needs a positive quantum, growth >= 1 and a positive limit");
  }
  const std::vector<int64_t> zeros(static_cast<size_t>(geometry_.n_heads), 0);
  layers_.assign(static_cast<size_t>(geometry_.n_layers), packed_layout(zeros, zeros));
}

const DeviceKvLayerLayout& DeviceKvLayout::layer(int layer) const {
  if (layer < 0 || layer >= geometry_.n_layers) {
    throw std::invalid_argument("device KV cache: layer " + std::to_string(layer) + " outside [0, " +
                                std::to_string(geometry_.n_layers) + ")");
  }
  return layers_[static_cast<size_t>(layer)];
}

std::optional<DeviceKvLayerLayout> DeviceKvLayout::layout_for_append(int layer, int n) const {
  const DeviceKvLayerLayout& current = this->layer(layer);
  std::vector<int64_t> needed;
  for (const DeviceKvRegion& r : current.heads) needed.push_back(r.length + std::max(n, 0));
  return reserved_layout(current, needed, geometry_, policy_);
}

std::optional<DeviceKvLayerLayout> DeviceKvLayout::layout_to_release(int layer) const {
  const DeviceKvLayerLayout& current = this->layer(layer);
  std::vector<int64_t> capacities, lengths;
  int64_t need = 0;
  for (const DeviceKvRegion& r : current.heads) {
    capacities.push_back(rounded_capacity(std::max(r.length, geometric_step(r.length, policy_)), policy_));
    lengths.push_back(r.length);
    need += capacities.back();
  }
  if (current.capacity_rows() <= kDeviceKvReleaseFactor * need) return std::nullopt;
  return packed_layout(capacities, lengths);
}

std::optional<DeviceKvLayerLayout> DeviceKvLayout::layout_for_lengths(int layer, std::span<const int64_t> lengths) const {
  return reserved_layout(this->layer(layer), lengths, geometry_, policy_);
}

void DeviceKvLayout::set_layer(int layer, DeviceKvLayerLayout layout) {
  this->layer(layer);  // range check
  if (layout.heads.size() != static_cast<size_t>(geometry_.n_heads)) {
    throw std::invalid_argument("device KV cache: a layer layout needs one region per head");
  }
  layers_[static_cast<size_t>(layer)] = std::move(layout);
}

void DeviceKvLayout::check_block(int n, int64_t src_stride) const {
  if (n <= 0) throw std::invalid_argument("device KV append: a block needs at least one token");
  if (src_stride < static_cast<int64_t>(geometry_.n_heads) * geometry_.head_dim) {
    throw std::invalid_argument("device KV append: source stride " + std::to_string(src_stride) +
                                " shorter than a token's heads");
  }
}

DeviceKvAppendArgs DeviceKvLayout::append_args(int layer, int n, const float* keys, const float* values,
                                               int64_t src_stride, std::span<const int32_t> first_positions) const {
  check_block(n, src_stride);
  DeviceKvAppendArgs args;
  plan_append(this->layer(layer), n, first_positions, args);
  args.keys = keys;
  args.values = values;
  args.src_stride = src_stride;
  args.head_dim = geometry_.head_dim;
  args.type = geometry_.type;
  return args;
}

DeviceKvCompactArgs DeviceKvLayout::compact_args(const DeviceKvCompactionPlan& plan, const int32_t* src_rows) const {
  DeviceKvCompactArgs args;
  args.src_rows = src_rows;
  args.row_words = geometry_.row_words();
  args.chunk_rows = device_kv_chunk_rows(args.row_words);
  args.n_heads = static_cast<int>(plan.heads.size());
  std::copy(plan.heads.begin(), plan.heads.end(), args.heads);
  return args;
}

DeviceKvGatherArgs DeviceKvLayout::gather_args(const DeviceKvCompactionPlan& plan, const int64_t* src_rows) const {
  DeviceKvGatherArgs args;
  args.src_rows = src_rows;
  args.rows = static_cast<int64_t>(plan.gather_src.size());
  args.row_words = geometry_.row_words();
  return args;
}

namespace {

void check_write(const DeviceKvLayerLayout& l, int head, int64_t first_row, int64_t rows) {
  if (head < 0 || head >= static_cast<int>(l.heads.size())) {
    throw std::invalid_argument("device KV write: no head " + std::to_string(head));
  }
  const int64_t length = l.heads[static_cast<size_t>(head)].length;
  if (rows < 0 || first_row < 0 || first_row > length) {
    throw std::invalid_argument("device KV write: rows [" + std::to_string(first_row) + ", +" + std::to_string(rows) +
                                ") of head " + std::to_string(head) + " leave a hole after its " +
                                std::to_string(length) + " entries");
  }
}

}  // namespace

std::optional<DeviceKvLayerLayout> DeviceKvLayout::layout_for_write(int layer, int head, int64_t first_row,
                                                                    int64_t rows) const {
  const DeviceKvLayerLayout& current = this->layer(layer);
  check_write(current, head, first_row, rows);
  std::vector<int64_t> needed;
  for (const DeviceKvRegion& r : current.heads) needed.push_back(r.length);
  int64_t& mine = needed[static_cast<size_t>(head)];
  mine = std::max(mine, first_row + rows);
  return reserved_layout(current, needed, geometry_, policy_);
}

DeviceKvWriteArgs DeviceKvLayout::write_args(int layer, int head, int64_t first_row, int64_t rows, const float* keys,
                                             const float* values, const int32_t* positions) const {
  const DeviceKvLayerLayout& l = this->layer(layer);
  check_write(l, head, first_row, rows);
  const DeviceKvRegion& r = l.heads[static_cast<size_t>(head)];
  if (first_row + rows > r.capacity) {
    throw std::logic_error("device KV write: head " + std::to_string(head) + " has room for " +
                           std::to_string(r.capacity) + " rows, not " + std::to_string(first_row + rows));
  }
  DeviceKvWriteArgs args;
  args.keys = keys;
  args.values = values;
  args.src_positions = positions;
  args.dst_row = r.base_row + first_row;
  args.rows = rows;
  args.head_dim = geometry_.head_dim;
  args.type = geometry_.type;
  return args;
}

void DeviceKvLayout::commit_write(int layer, int head, int64_t first_row, int64_t rows) {
  check_write(this->layer(layer), head, first_row, rows);
  DeviceKvRegion& r = layers_[static_cast<size_t>(layer)].heads[static_cast<size_t>(head)];
  if (first_row + rows > r.capacity) throw std::logic_error("commit_write: write beyond a head's capacity");
  r.length = std::max(r.length, first_row + rows);
}

void DeviceKvLayout::commit_append(int layer, int n) {
  this->layer(layer);
  for (DeviceKvRegion& r : layers_[static_cast<size_t>(layer)].heads) {
    if (r.length + n > r.capacity) throw std::logic_error("commit_append: append beyond a head's capacity");
    r.length += n;
  }
}

void DeviceKvLayout::commit_compaction(int layer, const DeviceKvCompactionPlan& plan) {
  this->layer(layer);
  DeviceKvLayerLayout& l = layers_[static_cast<size_t>(layer)];
  if (plan.new_lengths.size() != l.heads.size()) throw std::invalid_argument("commit_compaction: plan of another layer shape");
  for (size_t h = 0; h < l.heads.size(); ++h) l.heads[h].length = plan.new_lengths[h];
}

DeviceKvLayout DeviceKvLayout::packed() const {
  DeviceKvLayout out = *this;
  for (DeviceKvLayerLayout& l : out.layers_) {
    std::vector<int64_t> lengths;
    for (const DeviceKvRegion& r : l.heads) lengths.push_back(r.length);
    l = packed_layout(lengths, lengths);
  }
  return out;
}

size_t DeviceKvLayout::bytes_in_use() const {
  size_t rows = 0;
  for (const DeviceKvLayerLayout& l : layers_) rows += static_cast<size_t>(l.live_rows());
  return rows * geometry_.entry_bytes();
}

size_t DeviceKvLayout::bytes_reserved() const {
  size_t rows = 0;
  for (const DeviceKvLayerLayout& l : layers_) rows += static_cast<size_t>(l.capacity_rows());
  return rows * geometry_.entry_bytes();
}

}  // namespace kvevict
