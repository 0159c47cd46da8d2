// The signals a head's scoring reads (EvictionEngine::State, engine_state.h): gathered per head
// from the decoder's hand-over, the engine's records (engine_records.cpp) and the cache.
#include <atomic>

#include "core/engine/engine_state.h"

namespace kvevict {
namespace {

// rows [T][d] (the cache's layout) -> out [d][T] (the signal layout: t innermost, signals.h).
void transpose_rows(const float* rows, int T, int d, std::vector<float>& out) {
  out.resize(static_cast<size_t>(T) * d);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < d; ++c) out[static_cast<size_t>(c) * T + t] = rows[static_cast<size_t>(t) * d + c];
}

// One more of a report's counters, from gather_tensor_signal: the prompt gathers a layer's heads on
// OpenMP threads (score_layer_at_prefill), so a plain ++ would race.
void count_in_gather(int64_t& counter) { std::atomic_ref<int64_t>(counter).fetch_add(1, std::memory_order_relaxed); }

}  // namespace

void EvictionEngine::State::query_statistic(TensorSignal id, int layer, int kv_head, std::vector<float>& out) const {
  std::vector<double> R;
  if (desc.observe.query_rotation == QueryRotation::FutureMean)
    R = average_rope_rotation(config, plan.prompt_len, desc.observe.rope_future);
  std::vector<float> mean(static_cast<size_t>(Gs) * d);
  const bool cov = id == TensorSignal::QueryCovariance;
  if (cov) out.resize(static_cast<size_t>(Gs) * d * d);
  query_stats.head_statistics(layer, kv_head, Gs, R.empty() ? nullptr : R.data(), mean.data(),
                              cov ? out.data() : nullptr);
  if (!cov) out.swap(mean);
}

EvictionEngine::State::WindowRows EvictionEngine::State::window_rows(int layer) const {
  const int rows = recent.rows(layer);
  if (plan.window <= 0 || rows == 0) return {};
  const int W = std::min(plan.window, rows), skip = rows - W;
  return {recent.data(layer) + static_cast<size_t>(skip) * Hq * d, W, recent.first_position(layer) + skip};
}

void EvictionEngine::State::copy_decoder_current_attention(int kv_head, int T, float* out) {
  if (!decoder_current_attention) {
    const ColumnSumsSignal& c = decoder_current_device;
    if (T > c.row_stride || (kv_head + 1) * Gs > c.n_heads)
      throw std::logic_error("engine: the decoder's device column sums do not cover head " + std::to_string(kv_head) +
                             " of " + std::to_string(T) + " entries");
    if (current_host.empty()) {
      download_column_sums(c, current_host);
      ++report.current_attention_downloads;
    }
    for (int g = 0; g < Gs; ++g)
      std::copy_n(current_host.data() + static_cast<size_t>(kv_head * Gs + g) * c.row_stride, T,
                  out + static_cast<size_t>(g) * T);
    return;
  }
  for (int g = 0; g < Gs; ++g) {
    const std::vector<float>& row = decoder_current_attention->at(static_cast<size_t>(kv_head * Gs + g));
    if (static_cast<int>(row.size()) != T)  // the decoder's row covers the head as it attended it
      throw std::logic_error("engine: the decoder's current attention has " + std::to_string(row.size()) +
                             " entries for a head of " + std::to_string(T));
    std::copy_n(row.data(), T, out + static_cast<size_t>(g) * T);
  }
}

EvictionEngine::State::HeadSignals EvictionEngine::State::signals_for(int layer, int kv_head, const KVCache& cache,
                                                                      bool decoding, const SignalSet* only,
                                                                      int first_slot) {
  PhaseScope timed(clock, EnginePhase::Signals);
  return gather_signals(layer, kv_head, cache, decoding, nullptr, only, first_slot);
}

void EvictionEngine::State::refuse_placeholder_read(int layer, const std::string& what) const {
  if (!placeholder_rows) return;
  throw std::logic_error("engine: policy " + desc.name + " needs " + what + " of layer " + std::to_string(layer) +
                         " on the host, but the decoder left this call's rows on the device (placeholder rows): "
                         "the policy declared that it reads no cached row here (cache_row_reads.h)");
}

const SignalSet& EvictionEngine::State::phase_reads(bool decoding) const {
  if (decoding) return desc.decode_reads_known ? desc.decode_reads : desc.reads;
  return prompt_signals(desc);
}

// The head's cached keys and values for one gather_signals, read from the cache on first use (the
// keys once); a read in a call whose host rows are placeholders is refused (refuse_placeholder_read).
// The rows from cache slot `first` on: the entries the signals are gathered for.
struct EvictionEngine::State::HeadRows {
  const State& st;
  const KVCache& cache;
  const int layer, src;  // src: the cache head holding the stored head's entries (cache_head)
  HeadSignals& hs;
  const int first = 0;   // gather_signals' first_slot
  const float* cached_keys = nullptr;

  size_t skipped() const { return static_cast<size_t>(first) * st.d; }
  const float* keys(const char* why) {
    if (!cached_keys) {
      st.refuse_placeholder_read(layer, std::string("the cached keys (") + why + ")");
      cached_keys = cache.keys_or_reconstruct(layer, src, hs.key_scratch);
    }
    return cached_keys + skipped();
  }
  const float* values(const char* why) {
    st.refuse_placeholder_read(layer, std::string("the cached values (") + why + ")");
    return cache.values_or_reconstruct(layer, src, hs.value_scratch) + skipped();
  }
};

EvictionEngine::State::HeadSignals EvictionEngine::State::gather_signals(int layer, int kv_head, const KVCache& cache,
                                                                         bool decoding, float* window_out,
                                                                         const SignalSet* only, int first_slot) {
  HeadSignals hs;
  const int src = cache_head(kv_head, cache);
  const int length = cache.length(layer, src);
  if (first_slot < 0 || first_slot > length)
    throw std::logic_error("engine: signals from cache slot " + std::to_string(first_slot) + " of a head of " +
                           std::to_string(length) + " entries");
  ScoreInputs& in = hs.in;
  in.layer = layer;
  in.kv_head = kv_head;
  in.n_layers = L;
  in.n_kv_heads = Hs;
  in.group = Gs;
  in.head_dim = d;
  in.n_embd = config.dim;
  in.T = length - first_slot;
  in.prompt_len = plan.prompt_len;
  in.decode_step = decoding ? decode_step + 1 : 0;
  in.seed = options.seed;
  in.position = positions(cache, layer, src) + first_slot;
  // The same positions where the decoder's device cache holds them, for a device program of this
  // phase that reads them (counted only then: the selection's own reading is counted apart).
  if (device_reads.positions_in_place && phase_reads(decoding)[signal_index(TensorSignal::Position)])
    if (const int32_t* held = decoder_copies.positions_of(layer, src, length, original.active()))
      in.device_position = held + first_slot;
  if (in.device_position) count_in_gather(report.positions_in_place);
  HeadRows cached{*this, cache, layer, src, hs, first_slot};
  if (first_slot == 0) gather_window_attention(cached, decoding, window_out, hs, only);
  // Every other signal the policy reads, by its row in the signal table.
  for (const TensorSignalInfo& info : kTensorSignalTable) {
    if (!makes_signal(info.id, decoding, only)) continue;
    if (first_slot > 0 && !source_made_per_entry(info.source))
      throw std::logic_error("engine: " + signal_label(info.id) + " is made for a whole head, not from cache slot " +
                             std::to_string(first_slot) + " on");
    std::vector<float>& out = hs.buffer[signal_index(info.id)];
    if (gather_tensor_signal(info.id, cached, hs, out)) in.set_signal(info.id, out.data());
  }
  return hs;
}

void EvictionEngine::State::gather_window_attention(HeadRows& cached, bool decoding, float* window_out,
                                                    HeadSignals& hs, const SignalSet* only) {
  const int layer = cached.layer, src = cached.src, kv_head = hs.in.kv_head, T = hs.in.T;
  const KVCache& cache = cached.cache;
  ScoreInputs& in = hs.in;
  // Made whenever there is a window that something reads (O reads it too; window_attention_read),
  // but with placeholder rows only for programs of this phase that read it, and for a program
  // gathered alone (`only`) only when it reads A or O.
  const bool in_scope = !only || (*only)[signal_index(TensorSignal::WindowAttention)] ||
                        (*only)[signal_index(TensorSignal::WindowOutputs)];
  const bool want_window = plan.window > 0 && window_attention_read() && (!decoding || plan.decode.uses_window_attention) &&
                           in_scope &&
                           (!placeholder_rows || phase_reads(decoding)[signal_index(TensorSignal::WindowAttention)]);
  if (const WindowRows wr = window_rows(layer); want_window && wr.W > 0) {
    const int W = wr.W, first = wr.first;
    std::vector<float>& own = hs.buffer[signal_index(TensorSignal::WindowAttention)];
    // The decoder's, in place on the device for a program that reads it there (no download, no
    // upload: scores_signals_in_place), where its rows are exactly the head's: at a prefill, and
    // at a decode step over the rolling window when the layer's heads are equally long.
    const float* device_rows = device_reads.window_in_place && !unfold ? window_in.in_place(layer, src, W, first, T) : nullptr;
    if (device_rows) {
      in.W = W;
      in.set_device_signal(TensorSignal::WindowAttention, device_rows);
    } else if (!desc.observe.same_index_head) {
      if (!window_out) {  // no layer-shared buffer: the head's own
        own.resize(static_cast<size_t>(Gs) * W * T);
        window_out = own.data();
      }
      // The decoder's, copied out when it is exactly this (precomputed_window.h); else the host's.
      if (!window_in.copy(layer, src, kv_head * Gs, Gs, W, first, T, window_out))
        compute_window_attention(wr.rows, W, Hq, first, kv_head, Gs, cached.keys("the window attention"), in.position,
                                 T, d, window_out, desc.observe.causal);
    } else {  // never with unfold_gqa (rejected), so kv_head is a KV head and the cache is its own
      in.group = observe_same_index_head(desc.observe.causal, WindowQueries{wr.rows, W, Hq, first}, cache, layer,
                                         kv_head, G, cached.keys("the same-index head's attention"), own);
      window_out = own.data();
    }
    if (!device_rows) {
      in.W = W;
      in.set_signal(TensorSignal::WindowAttention, window_out);
    }
  }
}

bool EvictionEngine::State::gather_tensor_signal(TensorSignal id, HeadRows& cached, HeadSignals& hs,
                                                 std::vector<float>& out) {
  const int layer = cached.layer, kv_head = hs.in.kv_head, T = hs.in.T;
  ScoreInputs& in = hs.in;
  switch (id) {
    case TensorSignal::WindowAttention:  // produced above (it may share a layer buffer)
    case TensorSignal::Position:         // in.position
      return false;
    case TensorSignal::CurrentAttention:
    case TensorSignal::AccumulatedAttention:
      if (!gather_column_attention(id, cached, hs, out)) return false;
      break;
    case TensorSignal::KeyNorm:
    case TensorSignal::ValueNorm:
    case TensorSignal::Keys:
    case TensorSignal::Values:
    case TensorSignal::KeysPreRope:
    case TensorSignal::OutputNormL1:
      if (!gather_cached_row_signal(id, cached, hs, out)) return false;
      break;
    case TensorSignal::SegmentAttention:  // prefill only (checked): segment_observation.h
      out.resize(static_cast<size_t>(Gs) * T);
      segment_attention(layer, kv_head, cached, in.position, T, out.data());
      break;
    case TensorSignal::WindowQueryRows:
    case TensorSignal::WindowQueryRowsPreRope:
    case TensorSignal::WindowOutputs:
      if (!window_rows_signal(id, layer, kv_head, cached, in, out)) return false;
      break;
    case TensorSignal::QueryMean:
    case TensorSignal::QueryCovariance:
      query_statistic(id, layer, kv_head, out);
      break;
    case TensorSignal::RopeFuture: {  // [d][d]: R x = mean of rope(x, p), p = prompt_len ..
      const std::vector<double> R = average_rope_rotation(config, plan.prompt_len, desc.observe.rope_future);
      out.assign(R.begin(), R.end());
      break;
    }
    case TensorSignal::Token:
      out.resize(T);
      records.tokens(in.position, T, out.data());
      break;
    case TensorSignal::HiddenNorm:
      out.resize(T);
      records.hidden_norms(layer, in.position, T, out.data());
      break;
    case TensorSignal::HiddenState:
      // The block's, in place where the decoder made them, for entries that are exactly its tokens.
      if (const float* device = decoder_copies.hidden_states_of(layer, in.position, T)) {
        in.set_device_signal(id, device);
        count_in_gather(report.hidden_states_in_place);
        return false;
      }
      if (layer_hidden.layer == layer && layer_hidden.T == T && cached.first == 0) {  // the layer's, gathered once
        in.set_signal(id, layer_hidden.data.data());
        return false;
      }
      out.resize(static_cast<size_t>(config.dim) * T);
      records.hidden_states(layer, in.position, T, out.data());
      break;
    case TensorSignal::OutputNorm:
      if (output_grams.size() != static_cast<size_t>(Hq) * d * d)
        throw UsageError("policy " + desc.name +
                         " reads out_norm, but the decoder did not hand over the layer's "
                         "output projection");
      out.resize(static_cast<size_t>(Gs) * T);
      output_norms(output_grams.data(), kv_head, Gs, d, cached.values("out_norm"), T, out.data());
      break;
    case TensorSignal::ReplayAttention:  // [Gs][T] by original position (the replay's cache index)
      if (!replay) throw std::logic_error("engine: A_replay read outside the completion of a replay prefill");
      out.resize(static_cast<size_t>(Gs) * T);
      for (int g = 0; g < Gs; ++g)
        for (int t = 0; t < T; ++t) {
          const int p = in.position[t];
          out[static_cast<size_t>(g) * T + t] =
              p >= 0 && p < replay->length ? replay->at(layer, kv_head * Gs + g, p) : 0.0f;
        }
      break;
  }
  return true;
}

bool EvictionEngine::State::gather_column_attention(TensorSignal id, HeadRows& cached, HeadSignals& hs,
                                                    std::vector<float>& out) {
  const int layer = cached.layer, kv_head = hs.in.kv_head, T = hs.in.T;
  ScoreInputs& in = hs.in;
  const int rows = recent.rows(layer);
  const float* q = recent.data(layer);
  switch (id) {
    case TensorSignal::CurrentAttention:
      if (rows == 0) return false;
      // In place on the device when the head's rows are exactly [G][T] there (a layer whose
      // heads are equally long: CAKE's, TOVA's): no download, no upload.
      if (device_reads.current_in_place && !decoder_current_device.empty() && T == decoder_current_device.row_stride) {
        in.set_device_signal(id, decoder_current_device.data + static_cast<size_t>(kv_head) * Gs * T);
        count_in_gather(report.current_attention_in_place);
        return false;
      }
      out.resize(static_cast<size_t>(Gs) * T);
      if (decoder_current_attention || !decoder_current_device.empty()) {
        copy_decoder_current_attention(kv_head, T, out.data());
        break;
      }
      compute_window_attention(q + static_cast<size_t>(rows - 1) * Hq * d, 1, Hq,
                               recent.first_position(layer) + rows - 1, kv_head, Gs, cached.keys("A_now"), in.position,
                               T, d, out.data());
      break;
    case TensorSignal::AccumulatedAttention:
      if (device_reads.accumulated_in_place) {  // [Gs][T] on the scoring device, in place
        in.set_device_signal(id, accumulated_device->head(layer, stored_lengths(cached.cache, layer), kv_head));
        count_in_gather(report.accumulated_attention_in_place);
        return false;
      }
      out.resize(static_cast<size_t>(Gs) * T);
      for (int g = 0; g < Gs; ++g)
        std::copy_n(accumulated[layer][kv_head * Gs + g].data(), T, out.data() + static_cast<size_t>(g) * T);
      break;
    default:
      throw std::logic_error("engine: gather_column_attention asked for another signal");
  }
  return true;
}

bool EvictionEngine::State::gather_cached_row_signal(TensorSignal id, HeadRows& cached, HeadSignals& hs,
                                                     std::vector<float>& out) {
  const int layer = cached.layer, src = cached.src, T = hs.in.T;
  const KVCache& cache = cached.cache;
  ScoreInputs& in = hs.in;
  switch (id) {
    case TensorSignal::KeyNorm:
    case TensorSignal::ValueNorm: {
      // In place on the decoder's device (no norm on the host, no upload), else the host's.
      if (const float* device = T > 0 ? decoder_copies.rows_of(id, layer, src, cached.first + T) : nullptr) {
        in.set_device_signal(id, device + cached.first);
        count_in_gather(report.row_norms_in_place);
        return false;
      }
      out.resize(T);
      if (T == 0) break;
      const bool key = id == TensorSignal::KeyNorm;
      // A head whose rows are on a device holds their norms (KVCache::held_row_norms, the same
      // bits as from the rows: row_norms.h); any other head computes them from its rows.
      if (cache.rows_held_elsewhere(layer, src)) {
        const std::span<const RowNorms> held = cache.held_row_norms(layer, src);
        for (int t = 0; t < T; ++t) out[t] = key ? held[cached.first + t].key : held[cached.first + t].value;
      } else {
        compute_row_norms(key ? cached.keys("key_norm") : cached.values("value_norm"), T, d, out.data());
      }
      break;
    }
    case TensorSignal::Keys:
    case TensorSignal::Values:
      // In place on the decoder's device (no row on the host, no upload), else the host's rows.
      if (const float* device = decoder_copies.rows_of(id, layer, src, T)) {
        in.set_device_signal(id, device);
        return false;
      }
      if (id == TensorSignal::Keys)
        transpose_rows(cached.keys("K"), T, d, out);
      else
        transpose_rows(cached.values("V"), T, d, out);
      break;
    case TensorSignal::KeysPreRope:
      // In place on the decoder's device (rotated back there), else from the host's rows.
      if (const float* device = decoder_copies.rows_of(id, layer, src, T)) {
        in.set_device_signal(id, device);
        return false;
      }
      refuse_placeholder_read(layer, "the cached keys (K_pre)");
      transpose_rows(cache.keys_pre_rope(layer, src).data(), T, d, out);
      break;
    case TensorSignal::OutputNormL1:
      // In place on the decoder's device (made there from its values and W_o), else from the host's
      // values and the layer's W_o slices.
      if (const float* device = T > 0 ? decoder_copies.rows_of(id, layer, src, T) : nullptr) {
        in.set_device_signal(id, device);
        return false;
      }
      if (output_projection.empty() || output_projection.size() % (static_cast<size_t>(Hq) * d) != 0)
        throw UsageError("policy " + desc.name +
                         " reads out_norm_l1, but the decoder did not hand over the layer's "
                         "output projection");
      out.resize(static_cast<size_t>(Gs) * T);
      output_norms_l1(output_projection.data(),
                      static_cast<int>(output_projection.size() / (static_cast<size_t>(Hq) * d)), in.kv_head, Gs, d,
                      cached.values("out_norm_l1"), T, out.data());
      break;
    default:
      throw std::logic_error("engine: gather_cached_row_signal asked for another signal");
  }
  return true;
}

bool EvictionEngine::State::window_rows_signal(TensorSignal id, int layer, int kv_head, HeadRows& cached,
                                               ScoreInputs& in, std::vector<float>& out) const {
  const WindowRows wr = window_rows(layer);
  if (wr.W == 0) return false;
  const int W = wr.W;
  const WindowQueries q{wr.rows, W, Hq, wr.first};
  // Q and Q_pre are the queries alone; O attends them over the cached values, with the window
  // attention the head already has, or its own over the cached keys.
  const float* A = in.signal(TensorSignal::WindowAttention);
  const bool outputs = id == TensorSignal::WindowOutputs;
  const float* keys = outputs && !A ? cached.keys("O") : nullptr;
  const float* values = outputs ? cached.values("O") : nullptr;
  in.W = W;
  window_query_signal(id, q, kv_head, Gs, rope, A, keys, values, in.position, in.T, d, desc.observe.causal, out);
  return true;
}

std::vector<float> EvictionEngine::State::score(const HeadSignals& hs, bool decoding) {
  PhaseScope timed(clock, EnginePhase::Scoring);
  std::vector<float> out(hs.in.T, 0.0f);
  if (reads_rows_in_place(hs.in)) ++report.cache_rows_in_place;
  policy.score(hs.in, decoding && plan.decode.own_score, out.data());
  return out;
}

void EvictionEngine::State::segment_attention(int layer, int kv_head, HeadRows& cached, const int32_t* positions, int T,
                                              float* out) const {
  if (segment_given && segment_given_layer == layer) {
    const BlockSegmentAttention& given = *segment_given;
    if (given.length != plan.prompt_len || given.n_heads != Hq)
      throw std::logic_error("engine: the decoder's A_seg covers " + std::to_string(given.length) +
                             " positions of " + std::to_string(given.n_heads) + " heads, the prompt has " +
                             std::to_string(plan.prompt_len) + " of " + std::to_string(Hq));
    // By original position: an entry past the prompt belongs to no segment with queries (0).
    for (int g = 0; g < Gs; ++g) {
      const float* row = given.head(kv_head * Gs + g);
      for (int t = 0; t < T; ++t)
        out[static_cast<size_t>(g) * T + t] = positions[t] >= 0 && positions[t] < given.length ? row[positions[t]] : 0.0f;
    }
    return;
  }
  if (segments.rows(layer) == 0)
    throw std::logic_error("engine: layer " + std::to_string(layer) +
                           " has neither the decoder's A_seg (made in a prompt's call at position 0 only) nor the "
                           "prompt's queries to make it from");
  segments.attention(layer, kv_head, Gs, Hq, cached.keys("A_seg"), positions, T, d, desc.observe.causal,
                     desc.observe.scaled, out);
}

}  // namespace kvevict
