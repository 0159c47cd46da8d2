// The decoder's window attention held for one after_layer; contracts in precomputed_window.h.
#include "core/engine/precomputed_window.h"

namespace kvevict {

void PrecomputedWindow::offer(const LayerSignals& s, int W, int first, int group, bool causal, const KVCache& cache) {
  drop();
  const WindowAttentionSignal& a = s.window_attention;
  if (a.empty() || a.W != W || a.query_position0 != first || W <= 0 || a.causal != causal) return;
  if (cache.unfolded() || a.n_kv != cache.n_kv_heads() || a.group != group) return;
  std::vector<int64_t> lengths(static_cast<size_t>(a.n_kv));
  for (int h = 0; h < a.n_kv; ++h) {
    lengths[h] = cache.length(s.layer, h);
    if (lengths[h] > a.max_len) return;  // not the cache it was computed over
  }
  signal_ = a;
  layer_ = s.layer;
  first_ = first;
  lengths_ = std::move(lengths);
}

void PrecomputedWindow::drop() {
  signal_ = {};
  layer_ = -1;
  lengths_.clear();
  downloaded_ = false;  // host_ keeps its capacity for the next layer
}

const float* PrecomputedWindow::host_data() {
  if (layer_ < 0 || !signal_.on_device) return signal_.data;
  std::lock_guard<std::mutex> lock(download_mutex_);
  if (!downloaded_) {
    download_window_attention(signal_, host_);
    downloaded_ = true;
    ++downloads_;
  }
  return host_.data();
}

bool PrecomputedWindow::serves(int layer, int cache_head, int W, int first, int T) const {
  return layer_ >= 0 && layer == layer_ && W == signal_.W && first == first_ && cache_head >= 0 &&
         cache_head < signal_.n_kv && T == lengths_[static_cast<size_t>(cache_head)];
}

// The head's rows are the kernels' [G][W][T] only when no row is padded past T.
bool PrecomputedWindow::kernels_layout(int W, int64_t T) const {
  return signal_.on_device && signal_.row_stride == T && signal_.group_stride == static_cast<int64_t>(W) * T;
}

const float* PrecomputedWindow::in_place(int layer, int cache_head, int W, int first, int T) {
  if (!serves(layer, cache_head, W, first, T) || !kernels_layout(W, T)) return nullptr;
  ++in_place_;
  return signal_.data + static_cast<size_t>(cache_head) * static_cast<size_t>(signal_.kv_stride);
}

bool PrecomputedWindow::in_place_for_every_head(int layer, int W, int first) const {
  if (layer_ < 0) return false;
  for (int h = 0; h < signal_.n_kv; ++h) {
    const int64_t T = lengths_[static_cast<size_t>(h)];
    if (!serves(layer, h, W, first, static_cast<int>(T)) || !kernels_layout(W, T)) return false;
  }
  return true;
}

bool PrecomputedWindow::copy(int layer, int cache_head, int first_query_head, int n_query_heads, int W, int first,
                             int T, float* out) {
  if (!serves(layer, cache_head, W, first, T)) return false;
  if (first_query_head / signal_.group != cache_head ||
      (first_query_head + n_query_heads - 1) / signal_.group != cache_head)
    return false;
  window_attention_rows(signal_, host_data(), first_query_head, n_query_heads, T, out);
  ++copied_;
  return true;
}

}  // namespace kvevict
