#pragma once
// The CUDA decoder's class, shared by its two source files: cuda_decoder.cu (construction, the
// forward call's frame, the queries held, snapshots) and cuda_decoder_layers.cu (one layer's
// attention and feed-forward halves, the block's store and the observer's signals). Nothing else
// includes it: the decoder's contract is cuda_decoder.h, its design docs/CUDA.md.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/decode/cuda/cuda_decoder.h"
#include "core/decode/cuda/cuda_kernels.h"
#include "core/decode/cuda/flashinfer_prefill.h"
#include "core/decode/cuda/ragged_attention.h"
#include "core/decode/cuda/cache_rows.h"
#include "core/decode/cuda/hidden_states_buffer.h"
#include "core/decode/cuda/window_attention.h"
#include "core/decode/query_window_ring.h"
#include "core/decode/window_attention_tiles.h"
#include "core/decode/ragged_attention_twin.h"
#include "core/decode/cuda/device_kv_cache.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/query_statistics.h"
#include "core/decode/cuda/replay_attention.h"
#include "core/decode/cuda/segment_attention.h"
#include "core/decode/device_kv_mirror.h"
#include "core/decode/layer_observation.h"
#include "core/decode/quant_dot.h"
#include "core/decode/rope.h"
#include "core/util/stopwatch.h"
#include "core/util/thread_count.h"
#include "core/decode/cuda/weight_upload.h"

namespace kvevict::cuda_decoder_detail {

using cuda::DeviceArray;
using cuda::upload_float;
using cuda::upload_matrix;

inline void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw RuntimeError(std::string("CUDA decoder: ") + what + ": cuBLAS status " + std::to_string(int(status)));
  }
}

// The decoder's cuBLAS handle, destroyed with it, and also when its constructor throws after
// creating it (a model too large for the card, a malformed weight): the handle and its workspace
// are not leaked.
struct BlasDestroy {
  void operator()(cublasHandle_t handle) const { cublasDestroy(handle); }
};
using BlasHandle = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, BlasDestroy>;

inline BlasHandle make_blas_handle() {
  cublasHandle_t handle = nullptr;
  check_blas(cublasCreate(&handle), "cublasCreate");
  return BlasHandle(handle);
}

struct DeviceLayer {
  DeviceArray<__half>*wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
  DeviceArray<float>*attn_norm, *ffn_norm, *bq = nullptr, *bk = nullptr, *bv = nullptr;
};

// The host cache and position, plus (device-resident mode) a device-to-device copy of the device
// cache, so a restore uploads nothing. `owner` ties it to the decoder that made it.
class CudaDecoderSnapshot final : public DecoderSnapshot {
 public:
  CudaDecoderSnapshot(KVCache cache, int position, const void* owner)
      : DecoderSnapshot(std::move(cache), position), owner(owner) {}
  const void* owner;
  std::optional<cuda::DeviceKvSnapshot> device;
  // The decoder's newest queries (query_window_ring.h), so that a decode step after a restore reads
  // the window attention of the same W queries as before: the ring and a device copy per layer.
  QueryWindowRing query_ring;
  std::vector<std::unique_ptr<DeviceArray<float>>> query_rows;
};

// One layer's newest queries on the device, [rows][q_dim] oldest first: two buffers, the current
// one and the next call's (a shift of the rows may not copy within one buffer: cudaMemcpy forbids
// overlap).
struct DeviceQueryRows {
  DeviceArray<float> rows[2];
  int current = 0;
};

// Rows of a feed-forward pass (feed_forward_layer): 4096 rows of the 8B geometry's 14336 hidden
// units hold 0.44 GiB of f32 gate and up activations.
constexpr int kFfnPassRows = 4096;

inline DeviceKvGeometry device_kv_geometry(const ModelConfig& c, KvType type) {
  return {c.n_layers, c.n_kv_heads, c.head_dim, type};
}

class CudaDecoder : public Decoder {
 public:
  CudaDecoder(const Model& model, const DecoderOptions& options)
      : model_(model), config_(model.config), cache_(model.config, options.kv_type), rope_(model.config),
        ordinal_(options.device_ordinal), kv_mode_(options.device_kv), prefill_attention_(options.prefill_attention) {
    if (prefill_attention_ == PrefillAttention::FlashInfer) refuse_flashinfer_unless_usable(options);
    cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
    blas_ = make_blas_handle();
    if (kv_mode_ == DeviceKvMode::Resident) {
      device_kv_ = std::make_unique<cuda::DeviceKvCache>(device_kv_geometry(config_, options.kv_type));
      backend_ = std::make_unique<DeviceKvBackendFor<cuda::DeviceKvCache>>(*device_kv_);
      mirror_ = std::make_unique<DeviceKvMirror>(cache_, *backend_, MirrorAppends::Decoder);
    }
    const Weights& w = model.weights;
    const int dim = config_.dim, hidden = config_.hidden_dim, q_dim = config_.q_dim(), kv_dim = config_.kv_dim();
    embedding_ = upload_matrix<float>(w.embedding_matrix(config_.vocab_size, dim), floats_);
    final_norm_ = upload_float(w.final_norm, floats_);
    output_ = upload_matrix<__half>(w.classifier_matrix(config_.vocab_size, dim), halves_);
    static const NativeLayer none;
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const LayerWeights& l = w.layers[i];
      const NativeLayer& nat = w.native_layers.empty() ? none : w.native_layers[i];
      DeviceLayer d{};
      d.wq = upload_matrix<__half>(Weights::matrix(l.wq, nat.wq, q_dim, dim), halves_);
      d.wk = upload_matrix<__half>(Weights::matrix(l.wk, nat.wk, kv_dim, dim), halves_);
      d.wv = upload_matrix<__half>(Weights::matrix(l.wv, nat.wv, kv_dim, dim), halves_);
      d.wo = upload_matrix<__half>(Weights::matrix(l.wo, nat.wo, dim, q_dim), halves_);
      d.w_gate = upload_matrix<__half>(Weights::matrix(l.w_gate, nat.w_gate, hidden, dim), halves_);
      d.w_up = upload_matrix<__half>(Weights::matrix(l.w_up, nat.w_up, hidden, dim), halves_);
      d.w_down = upload_matrix<__half>(Weights::matrix(l.w_down, nat.w_down, dim, hidden), halves_);
      d.attn_norm = upload_float(l.attn_norm, floats_);
      d.ffn_norm = upload_float(l.ffn_norm, floats_);
      if (config_.qkv_bias) {
        d.bq = upload_float(l.bq, floats_);
        d.bk = upload_float(l.bk, floats_);
        d.bv = upload_float(l.bv, floats_);
      }
      layers_.push_back(d);
    }
  }
  // PrefillAttention::FlashInfer when it cannot run on this decoder: a UsageError naming why, never
  // a silent fall-back to the own kernel.
  void refuse_flashinfer_unless_usable(const DecoderOptions& options) const {
    if (!cuda::flashinfer_prefill_built())
      throw UsageError("the FlashInfer prefill attention is not in this build (scripts/fetch-flashinfer.sh, then "
                       "cmake -DKVEVICT_FLASHINFER_DIR=<the folder it prints>)");
    if (options.device_kv != DeviceKvMode::Resident)
      throw UsageError("the FlashInfer prefill attention reads the device-resident cache (DeviceKvMode::Resident)");
    if (!cuda::flashinfer_prefill_supports(options.kv_type, config_.head_dim))
      throw UsageError("the FlashInfer prefill attention takes an f16 or bf16 cache with head_dim 64 or 128, not " +
                       std::string(kv_type_name(options.kv_type)) + " with head_dim " + std::to_string(config_.head_dim));
  }
  ~CudaDecoder() override {
    cudaSetDevice(ordinal_);  // the members' frees (cuBLAS's too) run on this decoder's device; no throwing here
  }

  const std::vector<float>& forward(std::span<const int> tokens, ForwardObserver* observer,
                                    std::vector<float>* all_logits) override;
  // The host cache is brought up to date first: during calls without an observer it lags the
  // device (the rows appended then live on the device only; DeviceKvMirror::defer_host_append).
  // On this decoder's device: its downloads are ordered after its launches by that device's legacy
  // stream (another decoder may have made another device current).
  KVCache& cache() override {
    if (mirror_) {
      cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
      mirror_->sync_host();
    }
    return cache_;
  }
  const KVCache& cache_layout() override {
    if (mirror_) {
      cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
      mirror_->sync_host_appends();  // lengths exact; placeholders and device-only rows stay
    }
    return cache_;
  }
  KVCache& cache_for_keeps() override {
    cache_layout();
    return cache_;
  }
  int position() const override { return position_; }
  void set_position(int position) override {
    if (position < 0) throw std::invalid_argument("set_position: negative position");
    position_ = position;
    query_ring_.forget();  // the queries held may not be this sequence's
  }
  void reset() override {
    cache_.clear();
    // The device cache empties now (its arenas given back) rather than at the next flush.
    (void)synced_device_kv();
    position_ = 0;
    query_ring_.forget();
  }
  std::unique_ptr<DecoderSnapshot> snapshot() const override;
  void restore(const DecoderSnapshot& snapshot) override;
  std::string device_name() const override { return "cuda:" + std::to_string(ordinal_); }
  const Model& model() const override { return model_; }
  DeviceKvStats device_kv_stats() const override {
    if (!mirror_) return {};
    DeviceKvStats stats{mirror_->counts(), mirror_->seconds()};
    stats.seconds.host_append = own_seconds_.host_append;
    stats.seconds.observation = own_seconds_.observation;
    return stats;
  }
  std::optional<DeviceKvBytes> device_kv_bytes() override {
    const cuda::DeviceKvCache* kv = synced_device_kv();
    if (!kv) return std::nullopt;
    return DeviceKvBytes{kv->layout().bytes_in_use(), kv->layout().bytes_reserved(), kv->codebook_bytes()};
  }
  const cuda::DeviceKvCache* synced_device_kv() {
    if (!mirror_) return nullptr;
    refuse_unfolded();
    cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
    mirror_->flush_all();
    return device_kv_.get();
  }

 private:
  // y[n][out] = x[n][in] · W^T, W stored [out][in] row-major (= column-major [in][out], op T).
  void gemm(const __half* x, int n, int in, const __half* w, int out, float* y) {
    const float alpha = 1.0f, beta = 0.0f;
    check_blas(cublasGemmEx(blas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, w, CUDA_R_16F, in, x, CUDA_R_16F, in,
                            &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  }
  void upload_rope_table(int first, int n);
  // forward's decisions for the call, made once before its first layer (the rows' placement depends
  // on them): deferred host appends, the held queries' capacity, which asked signals the device
  // serves, placeholder host rows, the cached rows handed over on the device.
  void decide_call(const ObservationRequest& request, int n, bool has_observer);
  // The final norm and the output projection of the call's last row (every row's into all_logits
  // when given), into logits_.
  void compute_logits(int n, std::vector<float>* all_logits);
  // Whether attention_layer hands the observer every signal it asked for in place of rows at every
  // layer of the call (NoneGivenDecoderSignals needs it): the window attention (as forward decided:
  // window_attention_served_) and the cached rows on the device (the resident cache).
  bool serves_asked_signals(const ObservationRequest& request) const;
  bool serves_window_attention(const ObservationRequest& request, int n) const;
  bool serves_segment_attention(const ObservationRequest& request, int n) const;
  bool serves_replay_attention(const ObservationRequest& request, int n) const;
  // The call's queries into the layer's device copy of the newest queries (query_update_).
  void hold_queries(int layer);
  // Starts the queries held from the observer's own (ObservationRequest::observer_queries) when
  // those held would not reach back the window after a call of n tokens and the observer's do.
  void seed_queries(const ObservationRequest& request, int n);
  // The layer's newest min(W, held) queries on the device, the first at position *first.
  const float* held_queries(int layer, int W, int* first) const;
  // One layer's attention half: project_block (norm, Q/K/V, RoPE; returns the block's rotary
  // position), store_block, attend_block (attention, and the column sums when asked: returned where
  // the kernel left them), the output projection, then observe_layer when there is an observer.
  void attention_layer(int layer, int n, const ObservationRequest& request, ForwardObserver* observer);
  int project_block(int layer, int n, const ObservationRequest& request, ForwardObserver* observer);
  ColumnSumsSignal attend_block(int layer, int n, const DeviceKvLayerView& view, const ObservationRequest& request);
  // The layer's signals as asked (over the cache as the block's append left it), the observer's
  // after_layer, and its keeps flushed to the device.
  void observe_layer(int layer, int n, int first, int rotary_first, const DeviceKvLayerView& view,
                     const ColumnSumsSignal& device_columns, const ObservationRequest& request,
                     ForwardObserver& observer);
  // observe_layer's signals made from the block's queries: the prompt query statistics and the
  // prompt's segment attention, on the device where it can, else by the host rule.
  void add_query_signals(int layer, int n, int first, int rotary_first, const DeviceKvLayerView& view,
                         const ObservationRequest& request, LayerSignals& signals);
  // observe_layer's replay attention (KVzip's replay call): on the device where forward decided so,
  // else by the host rule over the downloaded queries and the host's rows.
  void add_replay_attention(int layer, int n, int first, int rotary_first, const DeviceKvLayerView& view,
                            const ObservationRequest& request, LayerSignals& signals);
  // observe_layer's signals of the cache and the model: the cached rows handed to device scoring
  // (K, V, norms, K_pre, the projected value norms), the positions, tokens, hidden norms and states,
  // and W_o's Grams and slices (from the host copy of W_o).
  void add_cache_row_signals(int layer, int n, int first, const DeviceKvLayerView& view,
                             const ObservationRequest& request, LayerSignals& signals);
  void feed_forward_layer(int layer, int n);
  void refuse_unfolded() const;
  // The block's post-RoPE K/V (k_, v_) into the cache(s) at rotary position `rotary_first`, and
  // the view attention reads: the device-resident layer, or the packed upload of the host cache.
  DeviceKvLayerView store_block(int layer, int n, int rotary_first);
  void append_to_host(int layer, int n, int rotary_first);
  DeviceKvLayerView pack_layer(int layer);

  const Model& model_;
  const ModelConfig& config_;
  KVCache cache_;
  Rope rope_;
  int ordinal_ = 0;
  DeviceKvMode kv_mode_ = DeviceKvMode::Resident;
  // Device-resident mode: the device cache and the mirror that keeps it equal to cache_ (declared
  // after cache_, so the mirror detaches before the cache goes).
  std::unique_ptr<cuda::DeviceKvCache> device_kv_;
  std::unique_ptr<DeviceKvBackend> backend_;
  std::unique_ptr<DeviceKvMirror> mirror_;
  bool defer_host_ = false;  // this forward call appends to the device only (no observer)
  bool placeholder_host_ = false;  // ... or to the device and placeholder rows to the host
  DeviceKvSeconds own_seconds_;  // host_append and observation (device_kv_stats.h): this decoder's side
  int position_ = 0;
  int table_first_ = -1;  // position of row 0 of the uploaded RoPE table
  BlasHandle blas_;
  std::vector<std::unique_ptr<DeviceArray<__half>>> halves_;
  std::vector<std::unique_ptr<DeviceArray<float>>> floats_;
  DeviceArray<float>*embedding_ = nullptr, *final_norm_ = nullptr;
  DeviceArray<__half>* output_ = nullptr;
  std::vector<DeviceLayer> layers_;

  // Activations of the current block ([n][...]).
  DeviceArray<int> tokens_;
  DeviceArray<float> x_, xn_, q_, k_, v_, att_, proj_, gate_, up_, logits_d_, cos_, sin_, row_max_, row_sum_, column_d_;
  DeviceArray<__half> half_in_;
  DeviceArray<float> attention_workspace_;  // split-K partials (RaggedAttentionPlan::workspace_floats)
  PrefillAttention prefill_attention_ = PrefillAttention::Own;
  DeviceArray<uint16_t> flashinfer_staging_;  // 16-bit queries and outputs of cuda::flashinfer_prefill
  DeviceArray<float> packed_keys_, packed_values_;  // the reference path's packed upload
  cuda::WindowAttentionBuffer window_attention_;     // ObservationRequest::window_attention, one layer at a time
  cuda::CacheRowsBuffer cache_rows_;                 // ObservationRequest::cache_keys_on_device (values), ditto
  cuda::HiddenStatesBuffer hidden_states_buffer_;    // ObservationRequest::hidden_states_on_device
  HiddenStatesSignal hidden_on_device_;              // this call's layer's, in hidden_states_buffer_; empty if not made
  bool hand_cache_rows_ = false;                     // this call hands them over (forward decides)
  // ObservationRequest::query_statistics: the current layer's block statistics, made on the device
  // (or on the host from the block's queries where the positions were re-assigned).
  cuda::QueryStatisticsBuffer query_statistics_buffer_;
  BlockQueryStatistics query_statistics_;
  // The block's queries on the host for the host rules: the statistics where positions were
  // re-assigned, the segment attention off the device.
  std::vector<float> statistics_queries_;
  bool window_attention_served_ = false;             // this call fills window_attention_ (serves_window_attention)
  // ObservationRequest::segment_attention: the current layer's, made on the device when this call
  // serves it (serves_segment_attention), else by the host rule from the queries downloaded.
  cuda::SegmentAttentionBuffer segment_attention_buffer_;
  BlockSegmentAttention segment_attention_;
  bool segment_attention_served_ = false;
  // ObservationRequest::replay_attention: the current layer's, made on the device when this call
  // serves it (serves_replay_attention), else by the host rule from the queries downloaded.
  cuda::ReplayAttentionBuffer replay_attention_buffer_;
  BlockReplayAttention replay_attention_;
  bool replay_attention_served_ = false;
  // The newest post-RoPE queries of the sequence (query_window_ring.h), as many as this call's
  // observer asks the window attention of (query_capacity_; 0: none held, the ring forgotten): the
  // window attention of a call with fewer tokens than W (a decode step, a short later block) reads
  // the previous calls' queries from here. Device-resident mode only.
  QueryWindowRing query_ring_;
  int query_capacity_ = 0;
  QueryWindowUpdate query_update_;  // this call's, carried out at every layer
  std::vector<std::unique_ptr<DeviceQueryRows>> query_rows_;  // [layer]
  std::vector<float> upload_scratch_;  // one head's keys or values as f32, on their way to the device
  std::vector<float> host_k_, host_v_, window_queries_, host_columns_, logits_;
  std::vector<std::vector<float>> column_sums_;
  // Observation on request, computed on the host as the CPU decoder does (layer_observation.h).
  std::span<const int> host_tokens_;
  std::vector<float> host_x_, hidden_norms_, hidden_states_;
  OutputProjectionSignals output_projection_;
};

}  // namespace kvevict::cuda_decoder_detail
