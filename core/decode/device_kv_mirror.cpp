// The device KV mirror; contract in device_kv_mirror.h.
#include "core/decode/device_kv_mirror.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/util/stopwatch.h"

namespace kvevict {

namespace {

std::string where(int layer, int head) {
  return "layer " + std::to_string(layer) + " head " + std::to_string(head);
}

// The norms of `rows` rows of head_dim `d` read from the device, as the device computes them
// (row_norms.h).
std::vector<RowNorms> row_norms_of(KvType type, const DeviceKvHeadContents& c, int rows, int d) {
  const std::vector<float> keys = device_kv_words_to_f32(type, c.keys), values = device_kv_words_to_f32(type, c.values);
  std::vector<float> key_norms(static_cast<size_t>(rows)), value_norms(static_cast<size_t>(rows));
  compute_row_norms(keys.data(), rows, d, key_norms.data());
  compute_row_norms(values.data(), rows, d, value_norms.data());
  std::vector<RowNorms> out(static_cast<size_t>(rows));
  for (size_t i = 0; i < out.size(); ++i) out[i] = {key_norms[i], value_norms[i]};
  return out;
}

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

void DeviceKvMirror::refuse_placeholders(int layer, int head, const char* what) const {
  const std::vector<int>& rows = placeholders_[static_cast<size_t>(layer) * n_heads_ + head];
  if (!rows.empty())
    throw std::logic_error(std::string("device KV mirror: ") + what + " on " + where(layer, head) + ", whose host copy holds " +
                           std::to_string(rows.size()) +
                           " placeholder rows (the observer declared it reads no cached rows; sync_host first)");
}

void DeviceKvMirror::refuse_while_lagging(int layer, int head, const char* what) const {
  if (host_lag_[static_cast<size_t>(layer)] > 0)
    throw std::logic_error(std::string("device KV mirror: ") + what + " on " + where(layer, head) +
                           " while the host cache lags the device by " +
                           std::to_string(host_lag_[static_cast<size_t>(layer)]) + " rows (sync_host first)");
}

// Whether the host must take a block's real rows now (defer_host_append and append_placeholders
// decline): Host mode, an unfolded cache, pending work on the layer, or a head whose host rows are
// not the device's words (codebook) or whose next position is the host's length (re-assigned).
bool DeviceKvMirror::host_takes_rows_now(const char* what, int layer, int rows) const {
  if (layer < 0 || layer >= n_layers_ || rows < 0)
    throw std::invalid_argument(std::string("device KV mirror: ") + what + "(" + std::to_string(layer) + ", " +
                                std::to_string(rows) + ")");
  if (appends_ != MirrorAppends::Decoder || unfolded_ || layer_pending_[static_cast<size_t>(layer)]) return true;
  bool reassigned = false, rows_here = false;
  for (int h = 0; h < n_heads_; ++h) {
    if (cache_.is_codebook(layer, h)) return true;
    reassigned = reassigned || cache_.positions_reassigned(layer, h);
    rows_here = rows_here || !host_head_holds_no_row(layer, h);
  }
  // Re-assigned positions: the next position is the host's length, exact only while nothing lags
  // (position-only heads take their positions at once).
  return reassigned && rows_here;
}

bool DeviceKvMirror::host_head_holds_no_row(int layer, int head) const {
  return cache_.length(layer, head) == 0 || cache_.rows_held_elsewhere(layer, head);
}

bool DeviceKvMirror::defer_host_append(int layer, int rows, int32_t first_position, const float* keys,
                                       const float* values, int64_t src_stride) {
  if (keys && values && appends_ == MirrorAppends::Decoder && !unfolded_ && rows > 0 && codebooks_current(layer)) {
    cache_.reserve_rope_table(first_position + rows - 1);
    backend_.codebook_append(layer, rows, keys, values, src_stride, first_position, cache_.rope_table());
    host_lag_[static_cast<size_t>(layer)] += rows;
    counts_.rows_deferred += static_cast<int64_t>(rows) * n_heads_;
    counts_.codebook_rows_on_device += static_cast<int64_t>(rows) * n_heads_;
    return true;
  }
  if (host_takes_rows_now("defer_host_append", layer, rows)) return false;
  // Where no head of the layer holds a real row on the host, the rows become position-only
  // placeholders: nothing lags (lengths and positions stay exact) and the host holds no row.
  bool positions_only = host_lag_[static_cast<size_t>(layer)] == 0;
  for (int h = 0; h < n_heads_ && positions_only; ++h)
    positions_only = host_head_holds_no_row(layer, h);
  if (positions_only) {
    add_placeholders(layer, rows, first_position);
    return true;
  }
  host_lag_[static_cast<size_t>(layer)] += rows;
  counts_.rows_deferred += static_cast<int64_t>(rows) * n_heads_;
  return true;
}

bool DeviceKvMirror::append_placeholders(int layer, int rows, int32_t first_position) {
  if (host_takes_rows_now("append_placeholders", layer, rows) || host_lag_[static_cast<size_t>(layer)] > 0)
    return false;
  // Zero rows would give wrong norms: with row norms held, a layer holding real rows takes real rows.
  if (row_norms_)
    for (int h = 0; h < n_heads_; ++h)
      if (!host_head_holds_no_row(layer, h)) return false;
  add_placeholders(layer, rows, first_position);
  return true;
}

std::vector<RowNorms> DeviceKvMirror::appended_row_norms(int layer, int rows) const {
  if (!row_norms_ || rows == 0) return {};
  std::vector<int64_t> first(static_cast<size_t>(n_heads_), 0), count(static_cast<size_t>(n_heads_), 0);
  for (int h = 0; h < n_heads_; ++h) {
    if (!host_head_holds_no_row(layer, h)) continue;
    first[static_cast<size_t>(h)] = cache_.length(layer, h);  // the device holds them at its end
    count[static_cast<size_t>(h)] = rows;
  }
  return backend_.row_norms(layer, first, count);
}

void DeviceKvMirror::add_placeholders(int layer, int rows, int32_t first_position) {
  const std::vector<float> zeros(static_cast<size_t>(head_dim_), 0.0f);
  const std::vector<RowNorms> norms = appended_row_norms(layer, rows);
  size_t next_norm = 0;
  for (int h = 0; h < n_heads_; ++h) {
    std::vector<int>& placeholders = placeholders_[static_cast<size_t>(layer) * n_heads_ + h];
    // A head with no row of its own on the host keeps none (positions only); one holding real rows
    // (a prompt the observer read) takes zero rows, since a head holds every row or none.
    const bool positions_only = host_head_holds_no_row(layer, h);
    for (int i = 0; i < rows; ++i) {
      if (positions_only) {  // every row of the head is on the device only: no list needed
        cache_.append_position(layer, h, first_position + i, norms.empty() ? nullptr : &norms[next_norm++]);
        continue;
      }
      placeholders.push_back(cache_.length(layer, h));
      cache_.append(layer, h, first_position + i, zeros.data(), zeros.data());  // bookkeeping only (Decoder mode)
    }
  }
  counts_.rows_placeholder += static_cast<int64_t>(rows) * n_heads_;
}

// The layer's placeholder rows overwritten with the device's words, run by run, after its pending
// keeps reached the device (so host row j is device row j); position-only heads take their rows
// too when `position_only_heads`.
void DeviceKvMirror::fill_placeholders(int layer, bool position_only_heads) {
  bool any = false;
  for (int h = 0; h < n_heads_; ++h)
    any = any || (cache_.rows_held_elsewhere(layer, h) ? position_only_heads
                                                      : !placeholders_[static_cast<size_t>(layer) * n_heads_ + h].empty());
  if (!any) return;
  flush(layer);
  const KvType type = backend_.layout().geometry().type;
  filling_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{filling_};
  for (int h = 0; h < n_heads_; ++h) {
    std::vector<int>& rows = placeholders_[static_cast<size_t>(layer) * n_heads_ + h];
    if (cache_.rows_held_elsewhere(layer, h)) {  // every row is on the device only: one read, one hand-over
      if (position_only_heads) fill_head(layer, h, type);
      continue;
    }
    for (size_t i = 0; i < rows.size();) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
      const int t0 = rows[i], n = rows[j - 1] + 1 - t0;
      const DeviceKvHeadContents c = backend_.read_rows(layer, h, t0, n);
      const std::vector<float> keys = device_kv_words_to_f32(type, c.keys), values = device_kv_words_to_f32(type, c.values);
      for (int r = 0; r < n; ++r) {
        if (c.positions[static_cast<size_t>(r)] != cache_.positions(layer, h)[t0 + r])
          throw std::logic_error("device KV mirror: " + where(layer, h) + " row " + std::to_string(t0 + r) +
                                 " holds position " + std::to_string(c.positions[static_cast<size_t>(r)]) +
                                 " on the device and " + std::to_string(cache_.positions(layer, h)[t0 + r]) +
                                 " on the host");
        cache_.write_entry(layer, h, t0 + r, keys.data() + static_cast<size_t>(r) * head_dim_,
                           values.data() + static_cast<size_t>(r) * head_dim_);
      }
      counts_.rows_read += n;
      i = j;
    }
    rows.clear();
  }
}

// A head whose rows were all held on the device takes them in one read.
void DeviceKvMirror::fill_head(int layer, int head, KvType type) {
  const int len = cache_.length(layer, head);
  const DeviceKvHeadContents c = backend_.read_rows(layer, head, 0, len);
  const int32_t* host = cache_.positions(layer, head);
  if (!std::equal(c.positions.begin(), c.positions.end(), host, host + len))
    throw std::logic_error("device KV mirror: " + where(layer, head) +
                           " holds other positions on the device than on the host");
  const std::vector<float> keys = device_kv_words_to_f32(type, c.keys), values = device_kv_words_to_f32(type, c.values);
  cache_.take_rows(layer, head, keys.data(), values.data());
  counts_.rows_read += len;
}

void DeviceKvMirror::sync_host() {
  Stopwatch timed(&seconds_.sync_host);
  for (int l = 0; l < n_layers_; ++l) fill_placeholders(l, true);
  append_lagging_rows();
}

void DeviceKvMirror::sync_host_for_copy() {
  Stopwatch timed(&seconds_.sync_host);
  for (int l = 0; l < n_layers_; ++l) fill_placeholders(l, false);
  append_lagging_rows();
}

void DeviceKvMirror::sync_host_appends() {
  Stopwatch timed(&seconds_.sync_host);
  append_lagging_rows();
}

void DeviceKvMirror::append_lagging_rows() {
  for (int l = 0; l < n_layers_; ++l) {
    const int lag = host_lag_[static_cast<size_t>(l)];
    if (lag == 0) continue;
    if (all_heads_codebook(l)) {  // only a codebook append defers such a layer
      append_lagging_codebook_entries(l, lag);
      continue;
    }
    std::vector<DeviceKvHeadContents> rows(static_cast<size_t>(n_heads_));
    for (int h = 0; h < n_heads_; ++h) {
      const int64_t host = cache_.length(l, h), device = backend_.layout().length(l, h);
      if (device != host + lag)
        throw std::logic_error("device KV mirror: " + where(l, h) + " holds " + std::to_string(device) +
                               " entries on the device, " + std::to_string(host) + " on the host, lagging " +
                               std::to_string(lag));
      rows[static_cast<size_t>(h)] = backend_.read_rows(l, h, host, lag);
    }
    host_lag_[static_cast<size_t>(l)] = 0;  // the appends below are the catch-up, not new work
    const KvType type = backend_.layout().geometry().type;
    for (int h = 0; h < n_heads_; ++h) {
      const DeviceKvHeadContents& c = rows[static_cast<size_t>(h)];
      if (cache_.rows_held_elsewhere(l, h)) {  // a head holds every row or none: positions only
        std::vector<RowNorms> norms;
        if (row_norms_) norms = row_norms_of(type, c, lag, head_dim_);  // from the words read anyway
        for (int i = 0; i < lag; ++i)
          cache_.append_position(l, h, c.positions[static_cast<size_t>(i)],
                                 norms.empty() ? nullptr : &norms[static_cast<size_t>(i)]);
        counts_.rows_read += lag;
        continue;
      }
      const std::vector<float> keys = device_kv_words_to_f32(type, c.keys), values = device_kv_words_to_f32(type, c.values);
      for (int i = 0; i < lag; ++i)
        cache_.append(l, h, c.positions[static_cast<size_t>(i)], keys.data() + static_cast<size_t>(i) * head_dim_,
                      values.data() + static_cast<size_t>(i) * head_dim_);
      counts_.rows_read += lag;
    }
  }
}

void DeviceKvMirror::hold_row_norms(bool hold) {
  row_norms_ = hold;
  if (!hold) return;
  for (int l = 0; l < n_layers_; ++l) {
    const auto lacks_norms = [&](int h) { return cache_.rows_held_elsewhere(l, h) && !cache_.holds_row_norms(l, h); };
    bool any = false;  // decided first: this runs at every call whose observer reads norms
    for (int h = 0; h < n_heads_ && !any; ++h) any = lacks_norms(h);
    if (!any) continue;
    std::vector<int64_t> first(static_cast<size_t>(n_heads_), 0), count(static_cast<size_t>(n_heads_), 0);
    for (int h = 0; h < n_heads_; ++h)
      if (lacks_norms(h)) count[static_cast<size_t>(h)] = cache_.length(l, h);
    flush(l);  // pending keeps first: host row j is then device row j
    const std::vector<RowNorms> norms = backend_.row_norms(l, first, count);
    size_t at = 0;
    for (int h = 0; h < n_heads_; ++h) {
      const size_t n = static_cast<size_t>(count[static_cast<size_t>(h)]);
      if (n == 0) continue;
      cache_.set_held_row_norms(l, h, std::span<const RowNorms>(norms.data() + at, n));
      at += n;
    }
  }
}

bool DeviceKvMirror::has_placeholders(int layer) const {
  for (int h = 0; h < n_heads_; ++h)
    if (!placeholders_.at(static_cast<size_t>(layer) * n_heads_ + h).empty() || cache_.rows_held_elsewhere(layer, h))
      return true;
  return false;
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
