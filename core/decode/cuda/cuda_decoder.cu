// The CUDA decoder: construction, the forward call's frame, the queries held and snapshots;
// contract and design in cuda_decoder.h and docs/CUDA.md, the class in cuda_decoder_impl.h, one
// layer's work in cuda_decoder_layers.cu. The forward pass follows CpuDecoder step by step so the
// two can be compared operation by operation.
#include "core/decode/cuda/cuda_decoder_impl.h"

namespace kvevict {
namespace cuda_decoder_detail {

void CudaDecoder::upload_rope_table(int first, int n) {
  const int half = config_.head_dim / 2;
  std::vector<float> c(static_cast<size_t>(n) * half), s(c.size());
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < half; ++p) {
      // As Rope does: the angle in double, rounded to float once.
      const double angle = static_cast<double>(first + i) * rope_.inverse_frequency(p);
      c[static_cast<size_t>(i) * half + p] = static_cast<float>(std::cos(angle));
      s[static_cast<size_t>(i) * half + p] = static_cast<float>(std::sin(angle));
    }
  }
  cos_.upload(c);
  sin_.upload(s);
  table_first_ = first;
}

void CudaDecoder::decide_call(const ObservationRequest& request, int n, bool has_observer) {
  // No observer: no one reads the host cache during this call, so its rows go to the device only
  // and the host catches up when it is next asked for (cache(), snapshot(), a call with an observer).
  defer_host_ = mirror_ && !has_observer;
  // A call whose observer reads no cached row (a prompt block or a decode step, by its answer for
  // this kind of call): the host cache takes placeholder rows (positions only), no key or value
  // leaves the device (device_kv_mirror.h).
  // The newest queries are held through the calls that ask for the window attention (as many as
  // they ask for); a call that asks for none (a decode step of a policy that scores no A, a call
  // without an observer) forgets them, so such a decode loop copies nothing.
  query_capacity_ = mirror_ ? request.window_attention : 0;
  if (query_capacity_ == 0) query_ring_.forget();
  seed_queries(request, n);  // too few held for a window first asked for now: the observer's own
  // Decided once per call, before it (the rows' placement depends on it): attention_layer fills the
  // window attention only then, never a buffer the decision declined for want of memory.
  window_attention_served_ = serves_window_attention(request, n);
  segment_attention_served_ = serves_segment_attention(request, n);
  replay_attention_served_ = serves_replay_attention(request, n);
  const CacheRowReads reads = request.cache_row_reads.for_call(position_, n);
  placeholder_host_ = mirror_ && has_observer && rows_may_stay_on_device(reads, serves_asked_signals(request));
  // The cached rows go to the observer on the device only where they stay there and it said it
  // reads them only so (NoneGivenDecoderSignals); in any other call it reads the host's, or none.
  hand_cache_rows_ = placeholder_host_ && reads == CacheRowReads::NoneGivenDecoderSignals &&
                     cache_rows_wanted(request).any();
}

void CudaDecoder::compute_logits(int n, std::vector<float>* all_logits) {
  const int dim = config_.dim, vocab = config_.vocab_size;
  const int rows = all_logits ? n : 1;
  xn_.resize(static_cast<size_t>(rows) * dim);
  half_in_.resize(static_cast<size_t>(rows) * dim);
  cuda::rmsnorm(x_.data() + static_cast<size_t>(n - rows) * dim, final_norm_->data(), rows, dim, config_.norm_eps,
                xn_.data(), half_in_.data());
  logits_d_.resize(static_cast<size_t>(rows) * vocab);
  gemm(half_in_.data(), rows, dim, output_->data(), vocab, logits_d_.data());
  if (all_logits) {
    all_logits->resize(static_cast<size_t>(n) * vocab);
    logits_d_.download(all_logits->data(), all_logits->size());
    logits_.assign(all_logits->end() - vocab, all_logits->end());
  } else {
    logits_.resize(vocab);
    logits_d_.download(logits_.data(), vocab);
  }
}

const std::vector<float>& CudaDecoder::forward(std::span<const int> tokens, ForwardObserver* observer,
                                               std::vector<float>* all_logits) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) throw std::invalid_argument("forward: empty token block");
  const int dim = config_.dim, vocab = config_.vocab_size;
  for (int t : tokens) {
    if (t < 0 || t >= vocab) {
      throw std::out_of_range("forward: token id " + std::to_string(t) + " outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
    }
  }
  cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
  const ObservationRequest request = observer ? observer->request() : ObservationRequest{};
  decide_call(request, n, observer != nullptr);
  // A call that throws before every layer has held its queries (hold_queries) leaves the ring
  // claiming rows that some layers' copies lack: the ring then holds none, so no later call reads
  // rows never copied (a later window is seeded from the observer's rows again, seed_queries).
  struct ForgetHeldQueriesUnlessDone {
    QueryWindowRing& ring;
    bool done = false;
    ~ForgetHeldQueriesUnlessDone() {
      if (!done) ring.forget();
    }
  } held_queries_guard{query_ring_};
  if (query_capacity_ > 0) query_update_ = query_ring_.append(position_, n, query_capacity_);
  if (mirror_ && !defer_host_) {
    if (placeholder_host_) mirror_->sync_host_appends();  // rows deferred by earlier calls come first
    else mirror_->sync_host();
  }
  // An observer that reads key or value norms: position-only host heads hold their rows' norms in
  // this call (the device computes them; device_kv_mirror.h), and those that lack them get them.
  // Otherwise no norm is read back (a call without an observer, or one that reads none).
  if (mirror_) mirror_->hold_row_norms(observer && request.row_norms);
  host_tokens_ = tokens;
  tokens_.resize(n);
  tokens_.upload(tokens.data(), n);
  x_.resize(static_cast<size_t>(n) * dim);
  cuda::embed(embedding_->data(), tokens_.data(), n, dim, x_.data());
  upload_rope_table(position_, n);

  for (int layer = 0; layer < config_.n_layers; ++layer) {
    attention_layer(layer, n, request, observer);
    feed_forward_layer(layer, n);
  }
  held_queries_guard.done = true;
  position_ += n;

  compute_logits(n, all_logits);
  // The observer edits the kept rows at the end of this prompt (a codebook stage): the rows left on
  // the device come to the host now, after every layer's keeps reached the device (observe_layer's
  // flushes), so only the kept rows cross.
  if (observer && mirror_ && request.host_rows_at_prompt_end > 0 && position_ == request.host_rows_at_prompt_end)
    mirror_->sync_host();
  if (observer) {
    observer->after_forward(n, cache_);
    // It may have scored on another GPU (as after_layer may: observe_layer); the flushes below
    // launch on this decoder's.
    cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
  }
  // The observer reads no row in the calls to come: the host's copy of the device's rows goes (only
  // after a call whose rows came to the host: a placeholder call brought none).
  if (mirror_ && observer && request.host_rows_not_read_later && !placeholder_host_) mirror_->release_host_rows();
  return logits_;
}

bool CudaDecoder::serves_asked_signals(const ObservationRequest& request) const {
  // The cached rows come from the device-resident cache (attention_layer makes them at every layer).
  // Nothing asked: a declaration that stands on signals nobody asked for is taken as Reads.
  // The row merges run on the device cache through the mirror (device_kv_mirror.h). The prompt
  // query statistics are made in every call that asks (observe_layer); the segment attention on the
  // device where forward decided so (segment_attention_served_), else from the host's rows; the
  // replay attention likewise (replay_attention_served_).
  const bool rows = cache_rows_wanted(request).any() || request.cached_row_merges;
  const bool segments = request.segment_attention.enabled(), replay = request.replay_attention.enabled();
  if (!rows && !request.query_statistics.enabled && !segments && !replay && request.window_attention <= 0)
    return false;
  if (rows && !mirror_) return false;
  // The projected value norms' kernel holds one W_o slice's staged rows per block (cache_rows.h).
  if (request.out_norms_l1_on_device && config_.head_dim > kProjectedValueMaxHeadDim) return false;
  if (segments && !segment_attention_served_) return false;
  if (replay && !replay_attention_served_) return false;
  return request.window_attention <= 0 || window_attention_served_;
}

bool CudaDecoder::serves_window_attention(const ObservationRequest& request, int n) const {
  // attention_layer's condition, known before the call: the device-resident view (positions), a
  // head_dim the kernel takes, the newest min(W, position + n) queries held after the call's own
  // (forward raised query_capacity_ to W first), and the true positions (re-assigned ones would
  // put the block's rotary positions elsewhere).
  if (request.window_attention <= 0 || !mirror_ || config_.head_dim > kWindowMaxHeadDim) return false;
  if (!query_ring_.covers_after(request.window_attention, position_, n, query_capacity_)) return false;
  // The output, n_heads x W x the longest head (at most position + n entries after the call), must
  // fit the device: NACL's proxy window is a share of the prompt (1%: 22 GB at 128K on the 8B
  // geometry; its paper splits 18-20%: 25 GB at 32K). Otherwise the rows come to the host, where
  // the engine attends its window queries itself, instead of a failed allocation mid-call.
  // The longest head after the call: the longer of the device's length now (deferred appends
  // included; pending keeps only shorten it) and the host cache's (a host cache assigned anew reaches
  // the device at the next flush), plus the block; not position + n, which after an eviction
  // overstates it many times over (NACL's decode steps at 1% would have been declined for memory
  // they never use).
  int64_t longest = 0;
  const DeviceKvLayout& layout = device_kv_->layout();
  for (int layer = 0; layer < config_.n_layers; ++layer)
    for (int h = 0; h < config_.n_kv_heads; ++h)
      longest = std::max({longest, layout.length(layer, h), int64_t{cache_.length(layer, h)}});
  if (!window_attention_.can_hold(size_t(config_.n_heads) * size_t(request.window_attention) * size_t(longest + n)))
    return false;
  for (int layer = 0; layer < config_.n_layers; ++layer)
    for (int h = 0; h < config_.n_kv_heads; ++h)
      if (cache_.next_position(layer, h, position_) != position_) return false;
  return true;
}

bool CudaDecoder::serves_segment_attention(const ObservationRequest& request, int n) const {
  // observe_layer's device path, known before the call: a prompt's call (position 0: every head then
  // holds the block's positions 0 .. n - 1 in order) over the resident cache, a head_dim the window
  // attention kernel takes, and device memory for the scratch (else the host rule: the call then
  // keeps its host rows, serves_asked_signals).
  return request.segment_attention.enabled() && mirror_ && position_ == 0 && n > 0 && !cache_.unfolded() &&
         config_.head_dim <= kWindowMaxHeadDim && config_.n_kv_heads <= kDeviceKvMaxHeads &&
         segment_attention_buffer_.can_hold(request.segment_attention, n, config_.n_heads);
}

bool CudaDecoder::serves_replay_attention(const ObservationRequest& request, int n) const {
  // add_replay_attention's device path, known before the call: the replay's call (at the context's
  // end, where every head holds the context: the replay pass checked it) over the resident cache at
  // its true positions, a head_dim the window attention kernel takes, and device memory for the
  // scratch (else the host rule: the call then keeps its host rows, serves_asked_signals).
  const ReplayAttentionRequest& r = request.replay_attention;
  if (!r.enabled() || !mirror_ || position_ != r.context || n < 1 || cache_.unfolded()) return false;
  if (config_.head_dim > kWindowMaxHeadDim || config_.n_kv_heads > kDeviceKvMaxHeads) return false;
  for (int layer = 0; layer < config_.n_layers; ++layer)
    for (int h = 0; h < config_.n_kv_heads; ++h)
      if (cache_.length(layer, h) != r.context || cache_.next_position(layer, h, position_) != position_) return false;
  return replay_attention_buffer_.can_hold(r, n, config_.n_kv_heads, config_.n_heads, config_.head_dim,
                                           kv_type_size(cache_.kv_type()));
}

void CudaDecoder::refuse_unfolded() const {
  // The device layouts and the kernels index KV heads by h / G; a per-query-head cache would be
  // read wrongly, so refuse it rather than compute silently wrong attention.
  if (cache_.unfolded())
    throw UsageError("the CUDA decoder does not support an unfolded KV cache (gqa_mode = unfold: one stored head "
                     "per query head); use --device cpu");
}

void CudaDecoder::hold_queries(int layer) {
  if (query_capacity_ == 0) return;
  if (query_rows_.empty())
    for (int l = 0; l < config_.n_layers; ++l) query_rows_.push_back(std::make_unique<DeviceQueryRows>());
  DeviceQueryRows& held = *query_rows_[static_cast<size_t>(layer)];
  const QueryWindowUpdate& u = query_update_;
  const size_t row = static_cast<size_t>(config_.q_dim());
  DeviceArray<float>& from = held.rows[held.current];
  DeviceArray<float>& to = held.rows[1 - held.current];
  to.resize(static_cast<size_t>(query_capacity_) * row);
  if (u.old_rows > 0)
    cuda::check(cudaMemcpy(to.data(), from.data() + static_cast<size_t>(u.old_first) * row,
                           static_cast<size_t>(u.old_rows) * row * sizeof(float), cudaMemcpyDeviceToDevice),
                "copy of the held queries");
  if (u.block_rows > 0)
    cuda::check(cudaMemcpy(to.data() + static_cast<size_t>(u.old_rows) * row,
                           q_.data() + static_cast<size_t>(u.block_first) * row,
                           static_cast<size_t>(u.block_rows) * row * sizeof(float), cudaMemcpyDeviceToDevice),
                "copy of the call's queries");
  held.current = 1 - held.current;
}

void CudaDecoder::seed_queries(const ObservationRequest& request, int n) {
  const size_t layers = static_cast<size_t>(config_.n_layers);
  if (query_capacity_ == 0 || request.observer_queries.size() != layers) return;
  // The observer's rows: the same positions at every layer (the ring is one for all layers).
  const ObserverQueryRows& first = request.observer_queries[0];
  for (const ObserverQueryRows& r : request.observer_queries)
    if (!r.data || r.rows != first.rows || r.first_position != first.first_position) return;
  const int keep = query_ring_.seed(request.window_attention, position_, n, query_capacity_, first.first_position,
                                    first.rows);
  if (keep == 0) return;
  if (query_rows_.empty())
    for (size_t l = 0; l < layers; ++l) query_rows_.push_back(std::make_unique<DeviceQueryRows>());
  const size_t row = static_cast<size_t>(config_.q_dim());
  for (size_t l = 0; l < layers; ++l) {
    const ObserverQueryRows& r = request.observer_queries[l];
    DeviceQueryRows& held = *query_rows_[l];
    DeviceArray<float>& to = held.rows[held.current];
    to.resize(static_cast<size_t>(query_capacity_) * row);
    to.upload(r.data + static_cast<size_t>(r.rows - keep) * row, static_cast<size_t>(keep) * row);
  }
}

const float* CudaDecoder::held_queries(int layer, int W, int* first) const {
  const int rows = query_ring_.rows();
  if (query_capacity_ == 0 || query_rows_.empty() || rows < W) return nullptr;
  const DeviceQueryRows& held = *query_rows_[static_cast<size_t>(layer)];
  *first = query_ring_.end_position() - W;
  return held.rows[held.current].data() + static_cast<size_t>(rows - W) * config_.q_dim();
}

std::unique_ptr<DecoderSnapshot> CudaDecoder::snapshot() const {
  cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");  // the snapshot's arenas belong on this device
  // The host copy catches up with lagging rows and fills the placeholders of heads holding real
  // rows; position-only heads stay so (their rows are in the device copy below, and a restored
  // position-only head says by itself that they are on the device), so no such row moves here.
  if (mirror_) mirror_->sync_host_for_copy();
  auto s = std::make_unique<CudaDecoderSnapshot>(cache_, position_, this);
  // An unfolded cache has no device copy (the next forward refuses it); its restore re-uploads.
  if (mirror_ && !cache_.unfolded()) {
    mirror_->flush_all();  // the device copy must hold what the host copy holds
    s->device = device_kv_->snapshot();
  }
  s->query_ring = query_ring_;
  const size_t floats = static_cast<size_t>(query_ring_.rows()) * config_.q_dim();
  for (size_t l = 0; l < query_rows_.size() && floats > 0; ++l) {
    s->query_rows.push_back(std::make_unique<DeviceArray<float>>(floats));
    const DeviceQueryRows& held = *query_rows_[l];
    cuda::check(cudaMemcpy(s->query_rows.back()->data(), held.rows[held.current].data(), floats * sizeof(float),
                           cudaMemcpyDeviceToDevice),
                "snapshot of the held queries");
  }
  return s;
}

void CudaDecoder::restore(const DecoderSnapshot& snapshot) {
  const auto* mine = dynamic_cast<const CudaDecoderSnapshot*>(&snapshot);
  if (!mine || mine->owner != this) throw std::invalid_argument("restore: a snapshot made by another decoder");
  cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
  cache_ = snapshot.cache();  // the mirror hears on_replaced and would re-upload everything ...
  position_ = snapshot.position();
  if (mirror_ && mine->device) {
    device_kv_->restore(*mine->device);  // ... but the device copy is restored device-to-device
    mirror_->mark_synced();
  }
  // The newest queries as they were (a snapshot that holds none leaves none held). The next call
  // keeps as many of them as it asks for.
  query_ring_.forget();
  const size_t floats = static_cast<size_t>(mine->query_ring.rows()) * config_.q_dim();
  if (floats > 0 && mine->query_rows.size() == query_rows_.size()) {
    for (size_t l = 0; l < query_rows_.size(); ++l) {
      DeviceQueryRows& held = *query_rows_[l];
      held.rows[held.current].resize(floats);
      cuda::check(cudaMemcpy(held.rows[held.current].data(), mine->query_rows[l]->data(), floats * sizeof(float),
                             cudaMemcpyDeviceToDevice),
                  "restore of the held queries");
    }
    query_ring_ = mine->query_ring;
  }
}


}  // namespace cuda_decoder_detail

using cuda_decoder_detail::CudaDecoder;

std::unique_ptr<Decoder> make_cuda_decoder(const Model& model, const DecoderOptions& options) {
  return std::make_unique<CudaDecoder>(model, options);
}

const cuda::DeviceKvCache* synced_device_kv_cache(Decoder& decoder) {
  auto* cuda_decoder = dynamic_cast<CudaDecoder*>(&decoder);
  return cuda_decoder ? cuda_decoder->synced_device_kv() : nullptr;
}

}  // namespace kvevict
