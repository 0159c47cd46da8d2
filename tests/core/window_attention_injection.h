#pragma once
// Test helpers for the window attention a decoder hands the engine (LayerSignals::window_attention,
// core/engine/precomputed_window.h), shared by the CPU proof and the GPU tests:
//   * WindowAttentionInjector: wraps an EvictionEngine and, in each after_layer the engine asked
//     the window attention for, computes it with window_attention_twin over a DeviceKvTwin that a
//     DeviceKvMirror (MirrorAppends::Host) keeps equal to the decoder's host cache, puts it in the
//     signals as host memory (what the CUDA decoder does on the device), then forwards. Optionally
//     plants a wrong buffer (each row's entries reversed), the control that the engine reads it,
//     and forces one on an engine that did not ask (its plan's window, from the prompt's second
//     layer on), to show that the engine's own checks refuse what it must not use; or marks its
//     buffer as device memory (mark_on_device) for the in-place scoring proof.
//   * WithoutWindowAttention: forwards to the engine but asks for no window attention, so a
//     decoder that computes it (the CUDA decoder) leaves it out and the engine computes its own.
//   * twin_window_attention: the twin over one layer of a host cache, copied into a fresh twin
//     (for a decoder whose cache already has a listener: the CUDA decoder's mirror).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/decode/decoder.h"
#include "core/decode/device_kv_mirror.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/window_attention_twin.h"
#include "core/engine/engine.h"

namespace kvevict::test {

inline DeviceKvGeometry twin_geometry_of(const KVCache& cache) {
  return {cache.n_layers(), cache.n_kv_heads(), cache.head_dim(), cache.kv_type()};
}

// The twin's window attention of `view`'s layer for the block's last W window queries, as the
// CUDA decoder plans it (causal, scaled, row stride = the longest head). `plan` receives the plan.
inline std::vector<float> twin_attention_of_block(const DeviceKvLayerView& view, const LayerSignals& s, int W, int group,
                                                  WindowAttentionPlan& plan) {
  WindowPlanOptions options;
  options.query_position0 = s.first_position + s.n_tokens - W;
  plan = plan_window_attention(view, W, group, options);
  const size_t row = static_cast<size_t>(view.n_heads) * group * view.head_dim;
  return window_attention_twin(view, plan, s.window_queries.data() + static_cast<size_t>(s.window - W) * row);
}

// Reverses each row's first `length` entries in place (a wrong buffer of the right shape).
inline void plant_reversed_rows(std::vector<float>& a, const WindowAttentionPlan& p, const DeviceKvLayerView& view) {
  for (int kv = 0; kv < p.n_kv; ++kv)
    for (int r = 0; r < p.group * p.W; ++r) {
      float* row = a.data() + window_out_row(p, kv, r);
      std::reverse(row, row + view.length[kv]);
    }
}

class WindowAttentionInjector : public ForwardObserver {
 public:
  // `cache`: the decoder's host cache, still empty (the mirror starts from an empty twin).
  WindowAttentionInjector(EvictionEngine& engine, KVCache& cache, int group, bool plant_wrong = false,
                          bool force = false)
      : engine_(engine),
        group_(group),
        plant_(plant_wrong),
        force_(force),
        twin_(twin_geometry_of(cache)),
        backend_(twin_),
        mirror_(cache, backend_, MirrorAppends::Host) {}

  ObservationRequest request() const override {
    request_ = engine_.request();
    return request_;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override { engine_.after_layer(inject(signals), cache); }
  // `signals` with the window attention the engine asked for in this call (request()), computed
  // over the twin as the cache is now (before anyone edits it), or unchanged when none is due.
  // The buffer stays valid until the next inject. For a wrapper that acts between the decoder's
  // window attention and the engine's turn (the prompt's placeholder-row proof).
  LayerSignals inject(const LayerSignals& signals) {
    int W = std::min(request_.window_attention, signals.n_tokens);
    if (force_ && W == 0 && signals.layer > 0) W = std::min(engine_.plan().window, signals.n_tokens);
    if (W <= 0 || signals.window < W) return signals;
    mirror_.flush(signals.layer);
    const DeviceKvLayerView view = twin_.layer_view(signals.layer);
    WindowAttentionPlan plan;
    buffer_ = twin_attention_of_block(view, signals, W, group_, plan);
    if (plant_) plant_reversed_rows(buffer_, plan, view);
    LayerSignals with = signals;
    with.window_attention = describe_window_attention(plan, buffer_.data(), on_device_);
    ++injected_;
    return with;
  }
  void after_forward(int n_tokens, KVCache& cache) override { engine_.after_forward(n_tokens, cache); }

  int64_t injected() const { return injected_; }  // layers handed a window attention
  // Describe the (host) buffer as device memory: for a stand-in of device scoring that reads it
  // where it is (the engine must then never download it).
  void mark_on_device() { on_device_ = true; }

 private:
  EvictionEngine& engine_;
  int group_;
  bool plant_, force_;
  bool on_device_ = false;
  mutable ObservationRequest request_;
  DeviceKvTwin twin_;
  DeviceKvBackendFor<DeviceKvTwin> backend_;
  DeviceKvMirror mirror_;
  std::vector<float> buffer_;
  int64_t injected_ = 0;
};

class WithoutWindowAttention : public ForwardObserver {
 public:
  explicit WithoutWindowAttention(EvictionEngine& engine) : engine_(engine) {}
  ObservationRequest request() const override {
    ObservationRequest r = engine_.request();
    r.window_attention = 0;
    return r;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override { engine_.after_layer(signals, cache); }
  void after_forward(int n_tokens, KVCache& cache) override { engine_.after_forward(n_tokens, cache); }

 private:
  EvictionEngine& engine_;
};

// The twin's window attention over layer `layer` of `cache` (its heads copied into a fresh twin
// through write_rows, which stores the words the cache holds) for the block's last W queries.
inline std::vector<float> twin_window_attention(const KVCache& cache, const LayerSignals& s, int W, int group,
                                                WindowAttentionPlan& plan) {
  DeviceKvTwin twin(twin_geometry_of(cache));
  const int d = cache.head_dim();
  for (int h = 0; h < cache.n_kv_heads(); ++h) {
    const int len = cache.length(s.layer, h);
    if (len == 0) continue;
    std::vector<float> keys(static_cast<size_t>(len) * d), values(keys.size());
    cache.reconstruct_keys(s.layer, h, 0, len, keys.data());
    cache.reconstruct_values(s.layer, h, 0, len, values.data());
    twin.write_rows(s.layer, h, 0, len, keys.data(), values.data(), cache.positions(s.layer, h));
  }
  return twin_attention_of_block(twin.layer_view(s.layer), s, W, group, plan);
}

// The cache as the engine left it: per (layer, stored head) its positions in cache order.
using CacheLayout = std::vector<std::vector<std::vector<int32_t>>>;
inline CacheLayout cache_layout_of(const KVCache& cache) {
  CacheLayout out(cache.n_layers());
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_stored_heads(); ++h)
      out[l].emplace_back(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h));
  return out;
}

}  // namespace kvevict::test
