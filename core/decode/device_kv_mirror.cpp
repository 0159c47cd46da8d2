// The device KV mirror: construction, the host cache's mutations recorded (appends, keeps, writes,
// re-assignments) and the flushes that apply them on the device. The host rows and their syncs are in
// device_kv_mirror_host_rows.cpp, merges, codebooks and released rows in their own files; contract in
// device_kv_mirror.h.
#include "core/decode/device_kv_mirror.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/util/stopwatch.h"

namespace kvevict {

namespace {

// Marked rows (dirty or placeholder) follow their entries to their new index j (ascending).
void follow_keep(std::vector<int>& marked, std::span<const int> indices) {
  if (marked.empty()) return;
  std::vector<char> was(static_cast<size_t>(*std::max_element(marked.begin(), marked.end())) + 1, 0);
  for (int t : marked) was[static_cast<size_t>(t)] = 1;
  marked.clear();
  for (size_t j = 0; j < indices.size(); ++j) {
    const size_t t = static_cast<size_t>(indices[j]);
    if (t < was.size() && was[t]) marked.push_back(static_cast<int>(j));
  }
}

}  // namespace

std::string DeviceKvMirror::where(int layer, int head) {
  return "layer " + std::to_string(layer) + " head " + std::to_string(head);
}

DeviceKvMirror::DeviceKvMirror(KVCache& cache, DeviceKvBackend& backend, MirrorAppends appends)
    : cache_(cache), backend_(backend), appends_(appends) {
  const DeviceKvGeometry& g = backend_.layout().geometry();
  n_layers_ = g.n_layers;
  n_heads_ = g.n_heads;
  head_dim_ = g.head_dim;
  check_geometry();
  heads_.resize(static_cast<size_t>(n_layers_) * n_heads_);
  layer_pending_.assign(static_cast<size_t>(n_layers_), 0);
  host_lag_.assign(static_cast<size_t>(n_layers_), 0);
  placeholders_.assign(static_cast<size_t>(n_layers_) * n_heads_, {});
  books_.resize(static_cast<size_t>(n_layers_));
  unfolded_ = cache_.unfolded();
  // The device cache starts empty: heads the host holds entries in are uploaded at the first flush.
  for (int l = 0; l < n_layers_ && !unfolded_; ++l)
    for (int h = 0; h < n_heads_; ++h)
      if (cache_.length(l, h) > 0) {
        state(l, h).resync = true;
        layer_pending_[static_cast<size_t>(l)] = 1;
      }
  cache_.set_listener(this);
}

DeviceKvMirror::~DeviceKvMirror() {
  if (cache_.listener() == this) cache_.set_listener(nullptr);
}

void DeviceKvMirror::check_geometry() const {
  const DeviceKvGeometry& g = backend_.layout().geometry();
  if (cache_.n_layers() != g.n_layers || cache_.n_kv_heads() != g.n_heads || cache_.head_dim() != g.head_dim ||
      cache_.kv_type() != g.type) {
    throw std::invalid_argument("device KV mirror: the host cache (" + std::to_string(cache_.n_layers()) + " layers, " +
                                std::to_string(cache_.n_kv_heads()) + " KV heads, head_dim " +
                                std::to_string(cache_.head_dim()) + ", " + kv_type_name(cache_.kv_type()) +
                                ") does not match the device cache (" + std::to_string(g.n_layers) + ", " +
                                std::to_string(g.n_heads) + ", " + std::to_string(g.head_dim) + ", " +
                                kv_type_name(g.type) + ")");
  }
}

void DeviceKvMirror::mark_all_for_resync() {
  for (HeadState& s : heads_) {
    s = HeadState{};
    s.resync = true;
  }
  std::fill(layer_pending_.begin(), layer_pending_.end(), 1);
  std::fill(host_lag_.begin(), host_lag_.end(), 0);  // every head is re-uploaded from the host
  for (std::vector<int>& rows : placeholders_) rows.clear();  // the host's rows are whole again (cleared or replaced)
  mark_codebooks_for_reload();
}

void DeviceKvMirror::mark_synced() {
  for (HeadState& s : heads_) s = HeadState{};
  std::fill(layer_pending_.begin(), layer_pending_.end(), 0);
  std::fill(host_lag_.begin(), host_lag_.end(), 0);
  // A restored position-only head needs no list: every row of it is on the device only.
  for (std::vector<int>& rows : placeholders_) rows.clear();
  unfolded_ = cache_.unfolded();
  mark_codebooks_for_reload();  // the restored host's codes, not the ones the device went on with
}

bool DeviceKvMirror::pending(int layer) const { return layer_pending_.at(static_cast<size_t>(layer)) != 0; }

void DeviceKvMirror::on_append(int layer, int head, int32_t position, const float* key, const float* value) {
  if (unfolded_ || filling_) return;  // filling: the host takes the device's own entries
  refuse_while_lagging(layer, head, "a host append");
  HeadState& s = state(layer, head);
  if (s.resync) return;  // the whole head is read from the host anyway
  if (!key || !value) {  // KVCache::append_position: the rows are held elsewhere, i.e. on the device
    if (appends_ != MirrorAppends::Decoder)
      throw std::logic_error("device KV mirror: a position-only append to " + where(layer, head) +
                             " in Host mode (the mirror copies host rows to the device; there are none)");
    if (s.keep_pending)
      throw std::logic_error("device KV mirror: " + where(layer, head) +
                             " was appended to before its pending keeps were flushed");
    return;
  }
  if (appends_ == MirrorAppends::Decoder) {
    // The device already holds the row at its end; a pending keep would have numbered the rows
    // without it, so the decoder must flush first (the contract).
    if (s.keep_pending)
      throw std::logic_error("device KV mirror: " + where(layer, head) +
                             " was appended to before its pending keeps were flushed");
  } else {
    layer_pending_[static_cast<size_t>(layer)] = 1;
    s.tail_keys.insert(s.tail_keys.end(), key, key + head_dim_);
    s.tail_values.insert(s.tail_values.end(), value, value + head_dim_);
    s.tail_positions.push_back(position);
    if (s.keep_pending) {
      const int64_t row = backend_.layout().length(layer, head) + static_cast<int64_t>(s.tail_positions.size()) - 1;
      s.map.push_back(static_cast<int>(row));
    }
  }
  // A codebook head stores the entry matched against its codes, not the row appended.
  if (cache_.is_codebook(layer, head)) {
    layer_pending_[static_cast<size_t>(layer)] = 1;
    s.dirty.push_back(cache_.length(layer, head) - 1);
  }
}

void DeviceKvMirror::on_keep(int layer, int head, std::span<const int> indices) {
  if (unfolded_) return;
  refuse_while_lagging(layer, head, "a keep");
  if (state(layer, head).reassign) apply_pending(layer);  // a keep does not compose with a pending re-assignment
  layer_pending_[static_cast<size_t>(layer)] = 1;
  if (cache_.is_codebook(layer, head)) books_[static_cast<size_t>(layer)].reload = true;  // codes renumbered
  follow_keep(placeholders_[static_cast<size_t>(layer) * n_heads_ + head], indices);
  HeadState& s = state(layer, head);
  if (s.resync) return;
  follow_keep(s.dirty, indices);
  if (!s.keep_pending) {  // host row j is device row j (tail rows numbered after the device's)
    s.map.assign(indices.begin(), indices.end());
    s.keep_pending = true;
    return;
  }
  std::vector<int> composed(indices.size());
  for (size_t j = 0; j < indices.size(); ++j) composed[j] = s.map[static_cast<size_t>(indices[j])];
  s.map = std::move(composed);
}

void DeviceKvMirror::on_write_entry(int layer, int head, int t) {
  if (unfolded_ || filling_) return;  // filling: the host takes the device's own words
  refuse_while_lagging(layer, head, "a written entry");
  refuse_placeholders(layer, head, "a written entry");
  layer_pending_[static_cast<size_t>(layer)] = 1;
  HeadState& s = state(layer, head);
  if (!s.resync) s.dirty.push_back(t);
}

void DeviceKvMirror::on_reassign(int layer, int head) {
  if (unfolded_) return;
  refuse_while_lagging(layer, head, "re-assigned positions");
  refuse_placeholders(layer, head, "re-assigned positions");
  if (cache_.rows_held_elsewhere(layer, head) && appends_ == MirrorAppends::Decoder) {
    // The rows are on the device only: re-assign them there, after the pending keeps. (Marked twice
    // without a keep between, the second is an identity; a keep between applies the first, on_keep.)
    layer_pending_[static_cast<size_t>(layer)] = 1;
    state(layer, head).reassign = true;
    return;
  }
  resync_head(layer, head);
}

void DeviceKvMirror::resync_head(int layer, int head) {
  layer_pending_[static_cast<size_t>(layer)] = 1;
  HeadState& s = state(layer, head);
  s = HeadState{};
  s.resync = true;
}

void DeviceKvMirror::on_codebook(int layer, int head) {
  if (unfolded_) return;
  const int first = head == kAllHeads ? 0 : head, last = head == kAllHeads ? n_heads_ : head + 1;
  books_[static_cast<size_t>(layer)].reload = true;
  for (int h = first; h < last; ++h) {
    refuse_while_lagging(layer, h, "a codebook");
    refuse_placeholders(layer, h, "a codebook");
    resync_head(layer, h);  // its rows are all new (KVCache refuses a codebook on a position-only head)
  }
}

void DeviceKvMirror::on_unfold() {
  for (int l = 0; l < n_layers_; ++l) refuse_while_lagging(l, 0, "an unfold");
  for (int l = 0; l < n_layers_; ++l)
    for (int h = 0; h < n_heads_; ++h) refuse_placeholders(l, h, "an unfold");
  unfolded_ = true;
}

void DeviceKvMirror::on_clear() {
  unfolded_ = false;
  mark_all_for_resync();
}

void DeviceKvMirror::on_replaced() {
  unfolded_ = cache_.unfolded();
  mark_all_for_resync();
}

void DeviceKvMirror::write_tail(int layer, int head, HeadState& s) {
  const int64_t rows = static_cast<int64_t>(s.tail_positions.size());
  if (rows == 0) return;
  backend_.write_rows(layer, head, backend_.layout().length(layer, head), rows, s.tail_keys.data(),
                      s.tail_values.data(), s.tail_positions.data());
  counts_.rows_written += rows;
  s.tail_keys.clear();
  s.tail_values.clear();
  s.tail_positions.clear();
}

// One compaction for the whole layer: composed lists, empty lists for heads about to be
// re-uploaded, the identity for the rest.
void DeviceKvMirror::compact_layer(int layer) {
  bool needed = false;  // decided first: building identity lists costs O(cache) host work
  for (int h = 0; h < n_heads_; ++h) {
    const HeadState& s = state(layer, h);
    needed = needed || s.keep_pending || (s.resync && backend_.layout().length(layer, h) > 0);
  }
  if (!needed) return;
  std::vector<std::vector<int>> lists(static_cast<size_t>(n_heads_));
  for (int h = 0; h < n_heads_; ++h) {
    HeadState& s = state(layer, h);
    std::vector<int>& list = lists[static_cast<size_t>(h)];
    if (s.keep_pending) {
      list = std::move(s.map);
    } else if (!s.resync) {
      list.resize(static_cast<size_t>(backend_.layout().length(layer, h)));
      std::iota(list.begin(), list.end(), 0);
    }
  }
  backend_.compact(layer, lists);
  ++counts_.compactions;
}

// The head's marked rows (or all of them) from the host's f32 view, in runs of consecutive rows.
void DeviceKvMirror::resync_rows(int layer, int head, HeadState& s) {
  std::vector<int> rows;
  if (s.resync) {
    rows.resize(static_cast<size_t>(cache_.length(layer, head)));
    std::iota(rows.begin(), rows.end(), 0);
    if (!rows.empty()) ++counts_.head_resyncs;
  } else {
    rows = std::move(s.dirty);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
  const int32_t* positions = cache_.positions(layer, head);
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    const int t0 = rows[i], t1 = rows[j - 1] + 1;
    const size_t count = static_cast<size_t>(t1 - t0) * head_dim_;
    keys_.resize(count);
    values_.resize(count);
    cache_.reconstruct_keys(layer, head, t0, t1, keys_.data());
    cache_.reconstruct_values(layer, head, t0, t1, values_.data());
    backend_.write_rows(layer, head, t0, t1 - t0, keys_.data(), values_.data(), positions + t0);
    counts_.rows_written += t1 - t0;
    i = j;
  }
}

void DeviceKvMirror::apply_pending(int layer) {
  if (!layer_pending_[static_cast<size_t>(layer)]) return;
  Stopwatch timed(&seconds_.flush);  // only where there is work (the decoder flushes each layer twice per call)
  check_geometry();
  for (int h = 0; h < n_heads_; ++h) write_tail(layer, h, state(layer, h));
  compact_layer(layer);
  reassign_on_device(layer);
  for (int h = 0; h < n_heads_; ++h) {
    HeadState& s = state(layer, h);
    if (s.resync || !s.dirty.empty()) resync_rows(layer, h, s);
    s = HeadState{};
  }
  send_codebooks(layer);
  // After the resyncs: a head emptied for a re-upload is written back first, so the room it needs
  // is not given back and taken again row run by row run.
  backend_.release_room(layer);
  layer_pending_[static_cast<size_t>(layer)] = 0;
}

// The layer's position-only heads marked for re-assignment, in one backend call, with the host
// cache's RoPE table (reserved by KVCache::reassign_positions for every old position and index).
void DeviceKvMirror::reassign_on_device(int layer) {
  std::vector<char> heads(static_cast<size_t>(n_heads_), 0);
  bool any = false;
  for (int h = 0; h < n_heads_; ++h) {
    heads[static_cast<size_t>(h)] = state(layer, h).reassign ? 1 : 0;
    any = any || state(layer, h).reassign;
  }
  if (!any) return;
  backend_.reassign_positions(layer, heads, cache_.rope_table());
  ++counts_.device_reassigns;
}

void DeviceKvMirror::flush(int layer) {
  if (layer < 0 || layer >= n_layers_) {
    throw std::invalid_argument("device KV mirror: layer " + std::to_string(layer) + " outside [0, " +
                                std::to_string(n_layers_) + ")");
  }
  if (unfolded_) {
    throw std::logic_error("device KV mirror: the host cache is unfolded (one stored head per query head); the "
                           "device cache holds one head per KV head");
  }
  if (!layer_pending_[static_cast<size_t>(layer)]) return;
  apply_pending(layer);
  for (int h = 0; h < n_heads_; ++h) {
    const int64_t device = backend_.layout().length(layer, h), host = cache_.length(layer, h);
    if (device != host) {  // a mutation the mirror did not see (or a bug): refuse to attend stale rows
      throw std::logic_error("device KV mirror: " + where(layer, h) + " holds " + std::to_string(device) +
                             " entries on the device, " + std::to_string(host) + " on the host");
    }
  }
}

void DeviceKvMirror::flush_all() {
  for (int l = 0; l < n_layers_; ++l) flush(l);
}

}  // namespace kvevict
