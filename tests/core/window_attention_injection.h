#pragma once
// Test helpers for the window attention a decoder hands the engine (LayerSignals::window_attention,
// core/engine/precomputed_window.h), shared by the CPU proof and the GPU tests:
//   * WindowAttentionInjector: wraps an EvictionEngine and, in each after_layer the engine asked
//     the window attention for, computes it with window_attention_twin over a DeviceKvTwin that a
//     DeviceKvMirror (MirrorAppends::Host) keeps equal to the decoder's host cache, puts it in the
//     signals as host memory (what the CUDA decoder does on the device), then forwards. Optionally
//     plants a wrong buffer (each row's entries reversed), the control that the engine reads it,
//     and forces one on an engine that did not ask (the causal one of its plan's window, from the
//     prompt's second layer on), to show that the engine's own checks refuse what it must not use;
//     the window attention asked for is causal or not as the request says; or marks its
//     buffer as device memory (mark_on_device) for the in-place scoring proof. It also hands over
//     the cached keys and values the engine asks for on the device (cache_rows_twin over the same
//     twin, marked as device memory; K_pre and the projected value norms too), where the CUDA decoder would, optionally planted wrong, and
//     the positions it asks for there (a copy of the twin's, likewise), and the block's attention
//     inputs it asks for there (hidden_states_twin of the host rows the CPU decoder handed over,
//     marked as device memory, the host rows then withheld as the CUDA decoder withholds them;
//     optionally planted wrong: each token's channels reversed).
//   * WithoutWindowAttention: forwards to the engine but asks for no window attention, so a
//     decoder that computes it (the CUDA decoder) leaves it out and the engine computes its own.
//   * twin_window_attention: the twin over one layer of a host cache, copied into a fresh twin
//     (for a decoder whose cache already has a listener: the CUDA decoder's mirror).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/decode/cache_rows_signal.h"
#include "core/decode/decoder.h"
#include "core/decode/device_kv_mirror.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/hidden_states_signal.h"
#include "core/decode/query_window_ring.h"
#include "core/decode/window_attention_twin.h"
#include "core/engine/engine.h"

namespace kvevict::test {

inline DeviceKvGeometry twin_geometry_of(const KVCache& cache) {
  return {cache.n_layers(), cache.n_kv_heads(), cache.head_dim(), cache.kv_type()};
}

// The twin's window attention of `view`'s layer for W query rows ([W][n_heads][head_dim]) at
// positions query_position0.., as the CUDA decoder plans it (causal, scaled, row stride = the
// longest head). `plan` receives the plan.
inline std::vector<float> twin_attention_of(const DeviceKvLayerView& view, const float* queries, int W,
                                            int query_position0, int group, WindowAttentionPlan& plan,
                                            bool causal = true) {
  WindowPlanOptions options;
  options.query_position0 = query_position0;
  options.causal = causal;
  plan = plan_window_attention(view, W, group, options);
  return window_attention_twin(view, plan, queries);
}

// ... for the block's last W window queries.
inline std::vector<float> twin_attention_of_block(const DeviceKvLayerView& view, const LayerSignals& s, int W, int group,
                                                  WindowAttentionPlan& plan) {
  const size_t row = static_cast<size_t>(view.n_heads) * group * view.head_dim;
  return twin_attention_of(view, s.window_queries.data() + static_cast<size_t>(s.window - W) * row, W,
                           s.first_position + s.n_tokens - W, group, plan);
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
        cache_(cache),
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
    hold_queries(signals);
    const int end = signals.first_position + signals.n_tokens;
    int W = std::min(request_.window_attention, end);
    bool causal = request_.window_attention_causal;
    if (force_ && W == 0 && signals.layer > 0) {  // the ordinary (causal) window attention, unasked
      W = std::min(engine_.plan().window, signals.n_tokens);
      causal = true;
    }
    LayerSignals with = signals;
    mirror_.flush(signals.layer);
    const DeviceKvLayerView view = twin_.layer_view(signals.layer);
    // The newest W queries of the sequence, as the CUDA decoder holds them (query_window_ring.h):
    // none unless the rows held end at the block's end and reach back W.
    if (W > 0 && !rings_.empty()) {
      const QueryWindowRing& ring = rings_[signals.layer];
      if (ring.end_position() == end && ring.rows() >= W) {
        const size_t row = held_[signals.layer].size() / static_cast<size_t>(ring.rows());
        const float* queries = held_[signals.layer].data() + static_cast<size_t>(ring.rows() - W) * row;
        WindowAttentionPlan plan;
        buffer_ = twin_attention_of(view, queries, W, end - W, group_, plan, causal);
        if (plant_ && (!plant_beyond_block_only_ || W > signals.n_tokens)) plant_reversed_rows(buffer_, plan, view);
        with.window_attention = describe_window_attention(plan, buffer_.data(), on_device_);
        ++injected_;
        if (W > signals.n_tokens) ++beyond_block_;
      }
    }
    inject_cache_rows(view, with);
    inject_positions(view, with);
    inject_hidden_states(with);
    with.cuda_device = 0;  // as the CUDA decoder on device 0 says of its signals
    return with;
  }
  void after_forward(int n_tokens, KVCache& cache) override { engine_.after_forward(n_tokens, cache); }

  int64_t injected() const { return injected_; }  // layers handed a window attention
  // Layers handed a window attention of more rows than the block has tokens (previous calls' queries).
  int64_t injected_beyond_block() const { return beyond_block_; }
  // Describe the (host) buffer as device memory: for a stand-in of device scoring that reads it
  // where it is (the engine must then never download it).
  void mark_on_device() { on_device_ = true; }
  // Plant the wrong buffer only where it covers more queries than the call's own (the rolling
  // window of decode steps), so that what changes is the decode steps' reading.
  void plant_beyond_block_only() { plant_beyond_block_only_ = true; }
  // Plant wrong cached rows and norms (each head's entries in reverse order) where they are handed over.
  void plant_wrong_cache_rows() { plant_rows_ = true; }
  // Plant wrong positions (each head's in reverse order) where they are handed over.
  void plant_wrong_positions() { plant_positions_ = true; }
  // Plant wrong attention inputs (each token's channels in reverse order) where they are handed over.
  void plant_wrong_hidden_states() { plant_hidden_ = true; }
  int64_t hidden_states_injected() const { return hidden_injected_; }  // layers handed hidden states
  int64_t cache_rows_injected() const { return rows_injected_; }  // layers handed K, V or norms
  int64_t positions_injected() const { return positions_injected_; }  // layers handed positions
  int64_t row_norms_injected() const { return norms_injected_; }   // layers handed norms
  int64_t seeded_layers() const { return seeded_; }  // layers whose held queries started from the observer's

 private:
  // The cached keys and values the engine asked for on the device (ObservationRequest::
  // cache_keys_on_device), from the twin as the CUDA decoder copies them out: only in a call the
  // engine declared NoneGivenDecoderSignals and whose window attention, when asked, was handed over
  // (the calls whose rows stay on the device); marked as device memory (the stand-in's).
  void inject_cache_rows(const DeviceKvLayerView& view, LayerSignals& with) {
    const CacheRowsWanted wanted = cache_rows_wanted(request_);
    const CacheRowReads reads = request_.cache_row_reads.for_call(with.first_position, with.n_tokens);
    if (!wanted.any() || reads != CacheRowReads::NoneGivenDecoderSignals) return;
    if (request_.window_attention > 0 && with.window_attention.empty()) return;
    // K_pre rotates back with the host cache's RoPE table, as the CUDA decoder's does on the device.
    RopeTableView rope;
    if (wanted.keys_pre_rope) {
      cache_.reserve_rope_table(with.first_position + with.n_tokens - 1);
      rope = cache_.rope_table();
    }
    // The projected value norms from the layer's W_o slices the CPU decoder handed over (the engine
    // asks for them beside); the CUDA decoder then hands no slices, and neither does this.
    OutputProjectionView projection;
    if (wanted.out_norms_l1) {
      const int n_query = view.n_heads * group_;
      const int dim = static_cast<int>(with.output_projection.size() / (static_cast<size_t>(n_query) * view.head_dim));
      projection = {with.output_projection.data(), KvType::F32, dim, group_, view.head_dim,
                    static_cast<int64_t>(dim) * view.head_dim};
    }
    with.cache_rows = cache_rows_twin(view, wanted, rows_, rope, projection);
    with.cache_rows.on_device = true;
    if (wanted.out_norms_l1) with.output_projection = {};
    if (plant_rows_) {
      const CacheRowsSignal& c = with.cache_rows;
      for (std::vector<float>* side : {&rows_.keys, &rows_.values, &rows_.keys_pre_rope}) {
        if (side->empty()) continue;
        for (int h = 0; h < c.n_heads(); ++h)
          for (int i = 0; i < c.head_dim; ++i) {
            float* row = side->data() + c.offset[h] + static_cast<int64_t>(i) * c.length[h];
            std::reverse(row, row + c.length[h]);
          }
      }
      for (std::vector<float>* norms : {&rows_.key_norms, &rows_.value_norms}) {
        if (norms->empty()) continue;
        for (int h = 0; h < c.n_heads(); ++h)
          std::reverse(norms->data() + c.norm_offset(h), norms->data() + c.norm_offset(h) + c.length[h]);
      }
      if (!rows_.out_norms_l1.empty())
        for (int h = 0; h < c.n_heads(); ++h)
          for (int g = 0; g < c.group; ++g) {
            float* head = rows_.out_norms_l1.data() + c.out_norm_offset(h) + static_cast<int64_t>(g) * c.length[h];
            std::reverse(head, head + c.length[h]);
          }
    }
    ++rows_injected_;
    if (wanted.norms) ++norms_injected_;
  }

  // The block's attention inputs the engine asked for on the device (ObservationRequest::
  // hidden_states_on_device), in every call that asks, as the CUDA decoder transposes them there:
  // [dim][n_tokens], marked as device memory (the stand-in's), the host rows withheld.
  void inject_hidden_states(LayerSignals& with) {
    if (!request_.hidden_states_on_device || with.hidden_states.empty()) return;
    std::vector<float> rows(with.hidden_states.begin(), with.hidden_states.end());
    const int dim = static_cast<int>(rows.size() / static_cast<size_t>(with.n_tokens));
    if (plant_hidden_)
      for (int i = 0; i < with.n_tokens; ++i)
        std::reverse(rows.begin() + static_cast<ptrdiff_t>(i) * dim, rows.begin() + static_cast<ptrdiff_t>(i + 1) * dim);
    with.hidden_states_on_device = hidden_states_twin(rows.data(), with.n_tokens, dim, hidden_);
    with.hidden_states_on_device.on_device = true;
    with.hidden_states = {};
    ++hidden_injected_;
  }

  // The positions the engine asked for on the device (ObservationRequest::positions_on_device), in
  // every call, as the CUDA decoder describes its cache's arena: the twin's, copied out (so that a
  // planted copy leaves the twin alone) with other values before each head (as in an arena, so a
  // reader that took the packed offsets of the scores would read those), marked as device memory
  // (the stand-in's).
  void inject_positions(const DeviceKvLayerView& view, LayerSignals& with) {
    if (!request_.positions_on_device || !view.positions) return;
    positions_.clear();
    DeviceKvLayerView packed = view;
    for (int h = 0; h < view.n_heads; ++h) {
      positions_.insert(positions_.end(), 3, -1000);
      packed.base_row[h] = static_cast<int64_t>(positions_.size());
      const int32_t* head = view.positions + view.base_row[h];
      positions_.insert(positions_.end(), head, head + view.length[h]);
      if (plant_positions_) std::reverse(positions_.end() - view.length[h], positions_.end());
    }
    packed.positions = positions_.data();
    with.cached_positions = describe_cached_positions(packed, /*on_device=*/true);
    ++positions_injected_;
  }

  // The block's window queries into the layer's newest queries held, as the CUDA decoder holds
  // them: as many as this call asks the window attention of, none (forgotten) when it asks for none
  // (per layer: a forced window is known only once the engine planned the prompt at its first
  // layer), started from the observer's own rows when those held fall short (seed_from_observer).
  // The block's rows are its last signals.window ones; those before them are missing, so a block
  // that holds fewer than its tokens starts the rows over (QueryWindowRing's rule).
  void hold_queries(const LayerSignals& s) {
    int capacity = request_.window_attention;
    if (force_) capacity = std::max(capacity, engine_.plan().window);
    if (held_.empty()) {
      held_.resize(static_cast<size_t>(twin_.layout().geometry().n_layers));
      rings_.resize(held_.size());
    }
    if (capacity == 0 || s.window == 0) {
      rings_[s.layer].forget();
      held_[s.layer].clear();
      return;
    }
    const int first = s.first_position + s.n_tokens - s.window;
    const size_t row = s.window_queries.size() / static_cast<size_t>(s.window);
    seed_from_observer(s.layer, capacity, s.first_position, s.n_tokens, row);
    apply_query_window_update(rings_[s.layer].append(first, s.window, capacity), held_[s.layer],
                              s.window_queries.data(), row);
  }
  // As the CUDA decoder's seed_queries: when the rows held would not reach back the window after
  // this call and the observer's own rows (ObservationRequest::observer_queries) end where it
  // begins and would, start from the newest of those.
  void seed_from_observer(int layer, int capacity, int position, int n, size_t row) {
    if (request_.observer_queries.size() != held_.size()) return;
    const ObserverQueryRows& r = request_.observer_queries[static_cast<size_t>(layer)];
    if (!r.data) return;
    const int keep = rings_[layer].seed(request_.window_attention, position, n, capacity, r.first_position, r.rows);
    if (keep == 0) return;
    held_[layer].assign(r.data + static_cast<size_t>(r.rows - keep) * row, r.data + static_cast<size_t>(r.rows) * row);
    ++seeded_;
  }

  EvictionEngine& engine_;
  KVCache& cache_;  // the decoder's host cache (its RoPE table, for K_pre)
  int group_;
  bool plant_, force_;
  bool on_device_ = false;
  bool plant_beyond_block_only_ = false;
  mutable ObservationRequest request_;
  std::vector<QueryWindowRing> rings_;    // [layer]
  std::vector<std::vector<float>> held_;  // [layer][rows][n_heads * head_dim]
  int64_t beyond_block_ = 0;
  DeviceKvTwin twin_;
  DeviceKvBackendFor<DeviceKvTwin> backend_;
  DeviceKvMirror mirror_;
  std::vector<float> buffer_;
  int64_t injected_ = 0;
  bool plant_rows_ = false;
  CacheRowsHost rows_;  // the cached rows and norms handed over, [head][d][T] and [head][T]
  int64_t rows_injected_ = 0, norms_injected_ = 0;
  bool plant_positions_ = false;
  std::vector<int32_t> positions_;  // the positions handed over, head after head
  int64_t positions_injected_ = 0;
  int64_t seeded_ = 0;
  bool plant_hidden_ = false;
  std::vector<float> hidden_;  // the attention inputs handed over, [dim][n_tokens]
  int64_t hidden_injected_ = 0;
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
// through write_rows, which stores the words the cache holds) for W query rows at positions
// query_position0..
inline std::vector<float> twin_window_attention(const KVCache& cache, int layer, const float* queries, int W,
                                                int query_position0, int group, WindowAttentionPlan& plan) {
  DeviceKvTwin twin(twin_geometry_of(cache));
  const int d = cache.head_dim();
  for (int h = 0; h < cache.n_kv_heads(); ++h) {
    const int len = cache.length(layer, h);
    if (len == 0) continue;
    std::vector<float> keys(static_cast<size_t>(len) * d), values(keys.size());
    cache.reconstruct_keys(layer, h, 0, len, keys.data());
    cache.reconstruct_values(layer, h, 0, len, values.data());
    twin.write_rows(layer, h, 0, len, keys.data(), values.data(), cache.positions(layer, h));
  }
  return twin_attention_of(twin.layer_view(layer), queries, W, query_position0, group, plan);
}

// ... for the block's last W queries.
inline std::vector<float> twin_window_attention(const KVCache& cache, const LayerSignals& s, int W, int group,
                                                WindowAttentionPlan& plan) {
  const size_t row = s.window_queries.size() / static_cast<size_t>(s.window);
  return twin_window_attention(cache, s.layer, s.window_queries.data() + static_cast<size_t>(s.window - W) * row, W,
                               s.first_position + s.n_tokens - W, group, plan);
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
