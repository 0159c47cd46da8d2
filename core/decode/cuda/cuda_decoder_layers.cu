// The CUDA decoder's layers: the block's store, one layer's attention half (projections, RoPE,
// attention over the ragged cache, the observer's signals) and its feed-forward half; the class in
// cuda_decoder_impl.h.
#include "core/decode/cuda/cuda_decoder_impl.h"

namespace kvevict::cuda_decoder_detail {

// Reference path: copies the layer's host cache (possibly compacted by eviction since the last
// call) into one packed f32 device buffer: O(layer cache bytes) host->device per call.
DeviceKvLayerView CudaDecoder::pack_layer(int layer) {
  const int heads = config_.n_kv_heads, hd = config_.head_dim;
  if (heads > kDeviceKvMaxHeads)
    throw UsageError("the CUDA decoder supports at most " + std::to_string(kDeviceKvMaxHeads) + " KV heads per layer");
  DeviceKvLayerView view;
  view.n_heads = heads;
  view.head_dim = hd;
  view.type = KvType::F32;
  int64_t total = 0;
  for (int h = 0; h < heads; ++h) {
    view.base_row[h] = total;
    view.length[h] = cache_.length(layer, h);
    total += view.length[h];
  }
  packed_keys_.resize(static_cast<size_t>(total) * hd);
  packed_values_.resize(static_cast<size_t>(total) * hd);
  // The packed layout is f32; the host cache may hold F16/BF16 (or codebook heads), so each head
  // is converted into host scratch first (reconstruct_* is the one f32 view of every head).
  for (int h = 0; h < heads; ++h) {
    const int len = static_cast<int>(view.length[h]);
    const size_t count = static_cast<size_t>(len) * hd, at = static_cast<size_t>(view.base_row[h]) * hd;
    if (count == 0) continue;
    upload_scratch_.resize(count);
    cache_.reconstruct_keys(layer, h, 0, len, upload_scratch_.data());
    packed_keys_.upload(upload_scratch_.data(), count, at);
    cache_.reconstruct_values(layer, h, 0, len, upload_scratch_.data());
    packed_values_.upload(upload_scratch_.data(), count, at);
  }
  view.keys = packed_keys_.data();
  view.values = packed_values_.data();
  return view;
}

// The host cache is appended from a download of just the block's rows: O(new tokens).
void CudaDecoder::append_to_host(int layer, int n, int rotary_first) {
  const int hd = config_.head_dim, kv_dim = config_.kv_dim();
  host_k_.resize(static_cast<size_t>(n) * kv_dim);
  host_v_.resize(static_cast<size_t>(n) * kv_dim);
  k_.download(host_k_.data(), host_k_.size());
  v_.download(host_v_.data(), host_v_.size());
  for (int h = 0; h < config_.n_kv_heads; ++h) {
    for (int i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(i) * kv_dim + static_cast<size_t>(h) * hd;
      cache_.append(layer, h, rotary_first + i, host_k_.data() + at, host_v_.data() + at);
    }
  }
}

DeviceKvLayerView CudaDecoder::store_block(int layer, int n, int rotary_first) {
  refuse_unfolded();
  if (!mirror_) {
    append_to_host(layer, n, rotary_first);
    return pack_layer(layer);
  }
  // (The packed path above is the reference, not timed: its stats are all zero.)
  // Pending keeps and resyncs first: the mirror numbers the device rows without the new block.
  mirror_->flush(layer);
  const std::vector<int32_t> first(static_cast<size_t>(config_.n_kv_heads), rotary_first);
  device_kv_->append(layer, n, k_.data(), v_.data(), config_.kv_dim(), first);
  // (A codebook layer's block is matched against the device's books from the projection's rows.)
  if (!(defer_host_ && mirror_->defer_host_append(layer, n, rotary_first, k_.data(), v_.data(), config_.kv_dim())) &&
      !(placeholder_host_ && mirror_->append_placeholders(layer, n, rotary_first))) {
    Stopwatch timed(&own_seconds_.host_append);
    append_to_host(layer, n, rotary_first);
  }
  mirror_->flush(layer);  // a codebook head's rows the host took: their reconstruction (no-op otherwise)
  const DeviceKvLayout& layout = device_kv_->layout();
  return make_layer_view(layout.layer(layer), layout.geometry(), device_kv_->keys(layer), device_kv_->values(layer),
                         device_kv_->positions(layer));
}

void CudaDecoder::attention_layer(int layer, int n, const ObservationRequest& request, ForwardObserver* observer) {
  const DeviceLayer& w = layers_[layer];
  const int dim = config_.dim, q_dim = config_.q_dim();
  const size_t rows = static_cast<size_t>(n);
  const int rotary_first = project_block(layer, n, request, observer);
  const int first = position_;
  const DeviceKvLayerView view = store_block(layer, n, rotary_first);
  const ColumnSumsSignal device_columns = attend_block(layer, n, view, request);
  cuda::to_half(att_.data(), rows * q_dim, half_in_.data());
  gemm(half_in_.data(), n, q_dim, w.wo->data(), dim, proj_.data());
  cuda::add_inplace(x_.data(), proj_.data(), rows * dim);
  if (observer) observe_layer(layer, n, first, rotary_first, view, device_columns, request, *observer);
}

int CudaDecoder::project_block(int layer, int n, const ObservationRequest& request, ForwardObserver* observer) {
  const DeviceLayer& w = layers_[layer];
  const int dim = config_.dim, hd = config_.head_dim;
  const int q_dim = config_.q_dim(), kv_dim = config_.kv_dim();
  const size_t rows = static_cast<size_t>(n);
  if (observer && request.hidden_norms) {  // the layer's input, before the attention adds to it
    Stopwatch timed(&own_seconds_.observation);
    host_x_.resize(rows * dim);
    x_.download(host_x_.data(), host_x_.size());
    hidden_norms_.resize(rows);
    hidden_state_norms(host_x_.data(), n, dim, hidden_norms_.data());
  }
  xn_.resize(rows * dim);
  half_in_.resize(rows * std::max(dim, q_dim));
  q_.resize(rows * q_dim);
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  att_.resize(rows * q_dim);
  proj_.resize(rows * dim);

  cuda::rmsnorm(x_.data(), w.attn_norm->data(), n, dim, config_.norm_eps, xn_.data(), half_in_.data());
  // The attention's input rows, as the projections read them: transposed on the device for an
  // observer that reads them there, else brought to the host.
  hidden_on_device_ = {};
  if (observer && request.hidden_states && request.hidden_states_on_device) {
    hidden_on_device_ = hidden_states_buffer_.fill(xn_.data(), n, dim);
  } else if (observer && request.hidden_states) {
    Stopwatch timed(&own_seconds_.observation);
    hidden_states_.resize(rows * dim);
    xn_.download(hidden_states_.data(), hidden_states_.size());
  }
  gemm(half_in_.data(), n, dim, w.wq->data(), q_dim, q_.data());
  gemm(half_in_.data(), n, dim, w.wk->data(), kv_dim, k_.data());
  gemm(half_in_.data(), n, dim, w.wv->data(), kv_dim, v_.data());
  if (config_.qkv_bias) {
    cuda::add_bias_rows(q_.data(), w.bq->data(), n, q_dim);
    cuda::add_bias_rows(k_.data(), w.bk->data(), n, kv_dim);
    cuda::add_bias_rows(v_.data(), w.bv->data(), n, kv_dim);
  }
  // Re-assigned positions (KVCache::next_position, StreamingLLM's reassign_in_cache): the RoPE table
  // holds one run of positions for all heads, so every KV head of the layer must continue at the
  // same position (StreamingLLM's heads all hold the same count); otherwise this backend refuses.
  const int rotary_first = cache_.next_position(layer, 0, position_);
  for (int h = 1; h < config_.n_kv_heads; ++h) {
    if (cache_.next_position(layer, h, position_) != rotary_first)
      throw UsageError("the CUDA decoder re-assigns positions (position_mode=reassign_in_cache) only when all KV heads "
                       "of a layer hold the same number of entries; use --device cpu");
  }
  if (rotary_first != table_first_) upload_rope_table(rotary_first, n);
  const bool adjacent = config_.rope_style == RopeStyle::AdjacentPairs;
  cuda::rope(q_.data(), n, config_.n_heads, hd, cos_.data(), sin_.data(), adjacent);
  cuda::rope(k_.data(), n, config_.n_kv_heads, hd, cos_.data(), sin_.data(), adjacent);
  hold_queries(layer);
  return rotary_first;
}

ColumnSumsSignal CudaDecoder::attend_block(int layer, int n, const DeviceKvLayerView& view,
                                           const ObservationRequest& request) {
  const size_t rows = static_cast<size_t>(n);
  const bool want_columns = request.accumulated_attention;
  ColumnSumsSignal device_columns;  // the column sums where the kernel left them (want_columns)
  if (want_columns) {
    row_max_.resize(rows * config_.n_heads);
    row_sum_.resize(rows * config_.n_heads);
  }
  // Split-K over the ragged heads for a few queries, tiles of queries x entries for a prompt
  // (core/decode/ragged_attention_tiles.h): planned here per call from the view's lengths.
  // FlashInfer (when chosen) takes prefill blocks that need no row statistics.
  if (prefill_attention_ == PrefillAttention::FlashInfer && n > 1 && !want_columns &&
      cuda::flashinfer_prefill_applies(view, n)) {
    flashinfer_staging_.resize(2 * cuda::flashinfer_prefill_staging_elements(view, n, config_.group_size()));
    cuda::flashinfer_prefill(view, n, config_.group_size(), q_.data(), att_.data(), flashinfer_staging_.data(),
                             flashinfer_staging_.size());
  } else {
    const RaggedAttentionPlan plan = plan_ragged_attention(view, n, config_.group_size());
    if (plan.split()) attention_workspace_.grow(plan.workspace_floats);
    cuda::ragged_attention(view, plan, q_.data(), att_.data(), want_columns ? row_max_.data() : nullptr,
                           want_columns ? row_sum_.data() : nullptr,
                           plan.split() ? attention_workspace_.data() : nullptr,
                           plan.split() ? plan.workspace_floats : 0);
  }
  if (!want_columns) return device_columns;
  int max_len = 0;
  for (int h = 0; h < config_.n_kv_heads; ++h) max_len = std::max(max_len, cache_.length(layer, h));
  column_d_.grow(static_cast<size_t>(config_.n_heads) * max_len);
  const RaggedColumnPlan columns = plan_ragged_column_sums(view, n, config_.group_size(), max_len);
  cuda::ragged_column_sums(view, columns, q_.data(), row_max_.data(), row_sum_.data(), column_d_.data());
  device_columns = {column_d_.data(), config_.n_heads, max_len};
  if (!request.column_sums_on_device_only) {  // the observer reads them on the host too
    Stopwatch timed(&own_seconds_.observation);
    host_columns_.resize(column_d_.size());
    column_d_.download(host_columns_.data(), host_columns_.size());
    column_sums_.resize(config_.n_heads);
    for (int h = 0; h < config_.n_heads; ++h) {
      const int len = cache_.length(layer, h / config_.group_size());
      const float* row = host_columns_.data() + static_cast<size_t>(h) * max_len;
      column_sums_[h].assign(row, row + len);
    }
  }
  return device_columns;
}

void CudaDecoder::add_query_signals(int layer, int n, int first, int rotary_first, const DeviceKvLayerView& view,
                                    const ObservationRequest& request, LayerSignals& signals) {
  const int q_dim = config_.q_dim();
  // The prompt query statistics of the block's queries: made on the device from the block's RoPE
  // table, so no query row comes over. The table is at the rotary positions; where they were
  // re-assigned the host rule runs instead, rotating back from the block's true positions as the
  // CPU decoder does (and the engine always did), so that both decoders hand the same statistics.
  if (request.query_statistics.enabled) {
    Stopwatch timed(&own_seconds_.observation);
    if (rotary_first == first && table_first_ == first) {
      query_statistics_ =
          query_statistics_buffer_.compute(q_.data(), n, first, request.query_statistics, config_.n_heads,
                                           config_.head_dim, config_.rope_style, cos_.data(), sin_.data(), blas_.get());
    } else {
      statistics_queries_.resize(static_cast<size_t>(n) * q_dim);
      q_.download(statistics_queries_.data(), statistics_queries_.size());
      query_statistics_ = block_query_statistics(statistics_queries_.data(), n, first, request.query_statistics,
                                                 config_.n_heads, config_.head_dim, rope_);
    }
    signals.query_statistics = &query_statistics_;
  }
  // A prompt's segment attention: on the device where forward decided so (the rows may then be
  // placeholders on the host), else by the host rule over the downloaded queries and the host's
  // rows, which such a call brought there (serves_asked_signals said not served).
  if (request.segment_attention.enabled() && first == 0 && !cache_.unfolded()) {
    Stopwatch timed(&own_seconds_.observation);
    if (segment_attention_served_) {
      if (!view.positions || rotary_first != first || !segment_attention_applies(view, n))
        throw std::logic_error("CUDA decoder: the segment attention was to be made on the device, but layer " +
                               std::to_string(layer) + "'s cache is not the prompt's");
      segment_attention_ = segment_attention_buffer_.compute(view, config_.group_size(), q_.data(), n,
                                                             request.segment_attention);
    } else {
      if (mirror_ && mirror_->has_placeholders(layer))
        throw std::logic_error("CUDA decoder: the segment attention of layer " + std::to_string(layer) +
                               " over placeholder rows");
      statistics_queries_.resize(static_cast<size_t>(n) * q_dim);
      q_.download(statistics_queries_.data(), statistics_queries_.size());
      segment_attention_ = block_segment_attention(request.segment_attention, statistics_queries_.data(), n, cache_,
                                                   layer, config_.n_heads);
    }
    signals.segment_attention = &segment_attention_;
  }
}

void CudaDecoder::add_replay_attention(int layer, int n, int first, int rotary_first, const DeviceKvLayerView& view,
                                       const ObservationRequest& request, LayerSignals& signals) {
  const ReplayAttentionRequest& replay = request.replay_attention;
  if (!replay.enabled() || first != replay.context) return;
  Stopwatch timed(&own_seconds_.observation);
  // KVzip+'s row factors from the replay's attention inputs (project_block downloaded them).
  const std::vector<double> factors =
      replay_row_factors(replay, hidden_states_.data(),
                         request.hidden_states && hidden_on_device_.empty() ? hidden_states_.size() : 0, n);
  if (replay_attention_served_) {
    if (rotary_first != first || !replay_attention_applies(view, replay, n))
      throw std::logic_error("CUDA decoder: the replay attention was to be made on the device, but layer " +
                             std::to_string(layer) + "'s cache is not the context and the replay's");
    replay_attention_ = replay_attention_buffer_.compute(view, config_.group_size(), q_.data(), n, replay, factors);
  } else {
    if (mirror_ && mirror_->has_placeholders(layer))
      throw std::logic_error("CUDA decoder: the replay attention of layer " + std::to_string(layer) +
                             " over placeholder rows");
    statistics_queries_.resize(static_cast<size_t>(n) * config_.q_dim());
    q_.download(statistics_queries_.data(), statistics_queries_.size());
    replay_attention_ = block_replay_attention(replay, statistics_queries_.data(), n, factors, cache_, layer,
                                               config_.n_heads);
  }
  signals.replay_attention = &replay_attention_;
}

void CudaDecoder::add_cache_row_signals(int layer, int n, int first, const DeviceKvLayerView& view,
                                        const ObservationRequest& request, LayerSignals& signals) {
  const int q_dim = config_.q_dim();
  // The cached keys and values for device scoring (K, V, their norms, K_pre, the projected value
  // norms), as the block's append left them. K_pre rotates each key back by its arena position
  // (re-assigned ones included: the keys were rotated to them) with the host cache's RoPE table on
  // the device, covering every position up to the block's last.
  if (hand_cache_rows_) {
    Stopwatch timed(&own_seconds_.observation);
    const CacheRowsWanted wanted = cache_rows_wanted(request);
    RopeTableView rope;
    if (wanted.keys_pre_rope) {
      cache_.reserve_rope_table(first + n - 1);
      rope = device_kv_->device_rope(cache_.rope_table());
    }
    // The projected value norms read W_o as the decoder holds it: F16, [dim][q_dim].
    OutputProjectionView projection;
    if (wanted.out_norms_l1)
      projection = {layers_[layer].wo->data(), KvType::F16, config_.dim, config_.group_size(), q_dim, config_.head_dim};
    signals.cache_rows = cache_rows_.fill(view, wanted, rope, projection);
  }
  // Their positions: the device cache's own arena, in every call that asks (the mirror keeps them
  // equal to the host's), not over the packed upload (no positions on the device).
  if (request.positions_on_device) signals.cached_positions = describe_cached_positions(view, true);
  signals.tokens = host_tokens_;
  if (request.hidden_norms) signals.hidden_norms = hidden_norms_;
  if (!hidden_on_device_.empty()) {
    signals.hidden_states_on_device = hidden_on_device_;
  } else if (request.hidden_states) {
    signals.hidden_states = hidden_states_;
  }
  // W_o's Grams (out_norm) and slices (out_norm_l1) from the host copy of W_o, as the CPU decoder
  // makes them (f32); no slices where the projected value norms were made on the device above (the
  // observer reads those: ObservationRequest::out_norms_l1_on_device).
  ObservationRequest host_projection = request;
  if (signals.cache_rows.out_norms_l1) host_projection.output_projection = false;
  if (OutputProjectionSignals::requested(host_projection)) {
    static const NativeLayer none;
    const auto& natives = model_.weights.native_layers;
    const TypedMatrix wo = Weights::matrix(model_.weights.layers[layer].wo, natives.empty() ? none.wo : natives[layer].wo,
                                           config_.dim, q_dim);
    output_projection_.hand_over(host_projection, wo, layer, config_.n_layers, config_.n_heads, config_.head_dim,
                                 signals);
  }
}

void CudaDecoder::observe_layer(int layer, int n, int first, int rotary_first, const DeviceKvLayerView& view,
                                const ColumnSumsSignal& device_columns, const ObservationRequest& request,
                                ForwardObserver& observer) {
  const int q_dim = config_.q_dim();
  LayerSignals signals;
  signals.cuda_device = ordinal_;
  signals.layer = layer;
  signals.first_position = first;
  signals.n_tokens = n;
  const int window = std::min(request.window, n);
  if (window > 0) {
    Stopwatch timed(&own_seconds_.observation);
    signals.window = window;
    window_queries_.resize(static_cast<size_t>(window) * q_dim);
    q_.download(window_queries_.data(), window_queries_.size(), static_cast<size_t>(n - window) * q_dim);
    signals.window_queries = std::span<const float>(window_queries_);
  }
  if (request.accumulated_attention && !request.column_sums_on_device_only) signals.accumulated_attention = &column_sums_;
  signals.column_sums_on_device = device_columns;
  signals.cache_rows_are_placeholders = mirror_ && mirror_->has_placeholders(layer);
  // Merges of rows left on the device run there (the mirror applies the pending keeps first).
  if (placeholder_host_ && request.cached_row_merges) signals.cached_row_merges = mirror_.get();
  // The window attention on request, over the cache as the block's append left it, before the
  // observer changes it. Not over the packed upload (no positions) nor re-assigned positions
  // (the device holds those; the observer's causal mask reads the original ones).
  // The queries are the newest min(W, position) of the sequence: the block's, and before them
  // the previous calls' (held on the device) when the block is shorter than W; none when the
  // held ones do not reach back that far (serves_window_attention said so before the call).
  if (window_attention_served_ && view.positions && rotary_first == first) {
    const int wa = std::min(request.window_attention, first + n);
    int query_first = first + n - wa;
    const float* queries =
        wa <= n ? q_.data() + static_cast<size_t>(n - wa) * q_dim : held_queries(layer, wa, &query_first);
    if (queries)
      signals.window_attention = window_attention_.fill(view, config_.group_size(), queries, wa, query_first,
                                                        request.window_attention_causal);
  }
  add_query_signals(layer, n, first, rotary_first, view, request, signals);
  add_replay_attention(layer, n, first, rotary_first, view, request, signals);
  add_cache_row_signals(layer, n, first, view, request, signals);
  observer.after_layer(signals, cache_);
  // The observer may have scored on another GPU (jit::use_cuda_device switches the thread's
  // device): the next layer's kernels and cuBLAS calls must run on this decoder's again.
  cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
  // Its keeps (of this layer or any earlier one: CAKE's cascading stages) reach the device now
  // rather than at the next call's store_block: a prompt's evictions then shrink the device
  // arenas while the prompt runs (DeviceKvLayout::layout_to_release), so the device holds what
  // the policy keeps, a full layer only while it is being scored. A flush with nothing pending
  // returns at once.
  if (mirror_ && !cache_.unfolded())
    for (int l = 0; l <= layer; ++l) mirror_->flush(l);
}

void CudaDecoder::feed_forward_layer(int layer, int n) {
  const DeviceLayer& w = layers_[layer];
  const int dim = config_.dim, hidden = config_.hidden_dim;
  // Passes of at most kFfnPassRows rows: the [rows][hidden] buffers stay bounded however long the
  // prompt (a whole 128K prompt of the 8B geometry would hold 18 GiB of them). Each row's result
  // depends on its own row only; cuBLAS may sum in another order for another row count.
  const int pass = std::min(n, kFfnPassRows);
  const size_t rows = static_cast<size_t>(pass);
  xn_.resize(rows * dim);
  half_in_.resize(rows * std::max(dim, hidden));
  gate_.resize(rows * hidden);
  up_.resize(rows * hidden);
  proj_.resize(rows * dim);
  for (int first = 0; first < n; first += pass) {
    const int m = std::min(pass, n - first);
    float* x = x_.data() + static_cast<size_t>(first) * dim;
    cuda::rmsnorm(x, w.ffn_norm->data(), m, dim, config_.norm_eps, xn_.data(), half_in_.data());
    gemm(half_in_.data(), m, dim, w.w_gate->data(), hidden, gate_.data());
    gemm(half_in_.data(), m, dim, w.w_up->data(), hidden, up_.data());
    cuda::swiglu(gate_.data(), up_.data(), static_cast<size_t>(m) * hidden, half_in_.data());
    gemm(half_in_.data(), m, hidden, w.w_down->data(), dim, proj_.data());
    cuda::add_inplace(x, proj_.data(), static_cast<size_t>(m) * dim);
  }
}

}  // namespace kvevict::cuda_decoder_detail
