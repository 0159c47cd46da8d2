// The device KV mirror's host rows: what the host cache holds of rows the device holds (deferred
// appends that lag, placeholder rows, position-only heads, held row norms) and the syncs that
// bring the device's rows to the host when someone asks for them. Contract in device_kv_mirror.h.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_mirror.h"
#include "core/util/stopwatch.h"

namespace kvevict {

namespace {

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

}  // namespace

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

}  // namespace kvevict
