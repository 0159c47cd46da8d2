// The CUDA decoder; contract and design in cuda_decoder.h and docs/CUDA.md. The forward pass
// follows CpuDecoder step by step so the two can be compared operation by operation.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/decode/cuda/cuda_decoder.h"
#include "core/decode/cuda/cuda_kernels.h"
#include "core/decode/cuda/flashinfer_prefill.h"
#include "core/decode/cuda/ragged_attention.h"
#include "core/decode/cuda/cache_rows.h"
#include "core/decode/cuda/window_attention.h"
#include "core/decode/query_window_ring.h"
#include "core/decode/window_attention_tiles.h"
#include "core/decode/ragged_attention_twin.h"
#include "core/decode/cuda/device_kv_cache.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/device_kv_mirror.h"
#include "core/decode/layer_observation.h"
#include "core/decode/quant_dot.h"
#include "core/decode/rope.h"
#include "core/util/stopwatch.h"
#include "core/util/thread_count.h"

namespace kvevict {

namespace {

using cuda::DeviceArray;

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw RuntimeError(std::string("CUDA decoder: ") + what + ": cuBLAS status " + std::to_string(int(status)));
  }
}

// Uploads a weight matrix in whatever storage it has (f32 or its file format, weights.h) as T,
// dequantised and converted on the host a batch of rows at a time: never an f32 copy of a whole
// tensor. A batch is cut into pieces of at most kUploadRows rows and kPieceElements elements, the
// pieces are dequantised and converted on all cores (std::thread: nvcc compiles this file without
// OpenMP's flags), then the batch is uploaded. Every element is converted alone
// (to_device_type, round to nearest even) and rows dequantise independently, so the bits uploaded
// do not depend on the number of threads or on the cuts (8e9 weights in an 8B model: on one core,
// each decoder took about a minute to make on the first H200 run).
constexpr int kUploadRows = 256;
constexpr size_t kPieceElements = size_t{1} << 20;  // scratch per piece: 4 + sizeof(T) bytes each
constexpr int kMaxUploadThreads = 32;  // bounds the batch's scratch (32 pieces: 192 MiB for fp16)

template <typename T>
T to_device_type(float v);
template <>
__half to_device_type<__half>(float v) { return __float2half(v); }
template <>
float to_device_type<float>(float v) { return v; }

// Runs work(p) for p in [0, n) on up to `workers` threads, this one included; rethrows the first
// exception a piece threw once every thread has stopped.
template <typename Work>
void run_pieces(int n, int workers, const Work& work) {
  std::atomic<int> next{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max(1, workers)));
  auto loop = [&](size_t w) {
    try {
      for (int p = next.fetch_add(1); p < n; p = next.fetch_add(1)) work(p);
    } catch (...) {
      errors[w] = std::current_exception();
      next.store(n);  // the others stop after their current piece
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < std::min(workers, n); ++w) {
    try {
      threads.emplace_back(loop, static_cast<size_t>(w));
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) do the rest
    }
  }
  loop(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

template <typename T>
DeviceArray<T>* upload_matrix(const TypedMatrix& m, std::vector<std::unique_ptr<DeviceArray<T>>>& owner) {
  owner.push_back(std::make_unique<DeviceArray<T>>());
  DeviceArray<T>& dev = *owner.back();
  const size_t cols = static_cast<size_t>(m.cols);
  dev.resize(static_cast<size_t>(m.rows) * cols);
  if (m.rows <= 0 || cols == 0) return &dev;
  const int piece_rows =
      static_cast<int>(std::clamp<size_t>(kPieceElements / cols, 1, static_cast<size_t>(kUploadRows)));
  const int pieces = (m.rows + piece_rows - 1) / piece_rows;
  const int workers = std::min({max_threads(), kMaxUploadThreads, pieces});
  const int batch_rows = static_cast<int>(std::min<int64_t>(m.rows, int64_t{piece_rows} * workers));
  std::vector<float> rows(static_cast<size_t>(batch_rows) * cols);
  std::vector<T> converted(rows.size());
  for (int b0 = 0; b0 < m.rows; b0 += batch_rows) {
    const int b1 = std::min(m.rows, b0 + batch_rows);
    run_pieces((b1 - b0 + piece_rows - 1) / piece_rows, workers, [&](int p) {
      const int r0 = b0 + p * piece_rows, r1 = std::min(b1, r0 + piece_rows);
      const size_t at = static_cast<size_t>(r0 - b0) * cols, count = static_cast<size_t>(r1 - r0) * cols;
      quant::dequantize_rows(m, r0, r1, rows.data() + at);
      for (size_t i = at; i < at + count; ++i) converted[i] = to_device_type<T>(rows[i]);
    });
    dev.upload(converted.data(), static_cast<size_t>(b1 - b0) * cols, static_cast<size_t>(b0) * cols);
  }
  return &dev;
}

DeviceArray<float>* upload_float(const std::vector<float>& host, std::vector<std::unique_ptr<DeviceArray<float>>>& owner) {
  owner.push_back(std::make_unique<DeviceArray<float>>());
  owner.back()->upload(host);
  return owner.back().get();
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

DeviceKvGeometry device_kv_geometry(const ModelConfig& c, KvType type) {
  return {c.n_layers, c.n_kv_heads, c.head_dim, type};
}

class CudaDecoder : public Decoder {
 public:
  CudaDecoder(const Model& model, const DecoderOptions& options)
      : model_(model), config_(model.config), cache_(model.config, options.kv_type), rope_(model.config),
        ordinal_(options.device_ordinal), kv_mode_(options.device_kv), prefill_attention_(options.prefill_attention) {
    if (prefill_attention_ == PrefillAttention::FlashInfer) refuse_flashinfer_unless_usable(options);
    cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice");
    check_blas(cublasCreate(&blas_), "cublasCreate");
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
    cudaSetDevice(ordinal_);  // frees below run on this decoder's device; no throwing here
    cublasDestroy(blas_);
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
    check_blas(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, w, CUDA_R_16F, in, x, CUDA_R_16F, in,
                            &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  }
  void upload_rope_table(int first, int n);
  // Whether attention_layer hands the observer every signal it asked for in place of rows at every
  // layer of the call (NoneGivenDecoderSignals needs it): the window attention (as forward decided:
  // window_attention_served_) and the cached rows on the device (the resident cache).
  bool serves_asked_signals(const ObservationRequest& request) const;
  bool serves_window_attention(const ObservationRequest& request, int n) const;
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
  cublasHandle_t blas_ = nullptr;
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
  bool hand_cache_rows_ = false;                     // this call hands them over (forward decides)
  bool window_attention_served_ = false;             // this call fills window_attention_ (serves_window_attention)
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
  // No observer: no one reads the host cache during this call, so its rows go to the device only
  // and the host catches up when it is next asked for (cache(), snapshot(), a call with an observer).
  defer_host_ = mirror_ && !observer;
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
  const CacheRowReads reads = request.cache_row_reads.for_call(position_, n);
  placeholder_host_ = mirror_ && observer && rows_may_stay_on_device(reads, serves_asked_signals(request));
  // The cached rows go to the observer on the device only where they stay there and it said it
  // reads them only so (NoneGivenDecoderSignals); in any other call it reads the host's, or none.
  hand_cache_rows_ = placeholder_host_ && reads == CacheRowReads::NoneGivenDecoderSignals &&
                     cache_rows_wanted(request).any();
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
  position_ += n;

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
  if (observer) observer->after_forward(n, cache_);
  // The observer reads no row in the calls to come: the host's copy of the device's rows goes (only
  // after a call whose rows came to the host: a placeholder call brought none).
  if (mirror_ && observer && request.host_rows_not_read_later && !placeholder_host_) mirror_->release_host_rows();
  return logits_;
}

bool CudaDecoder::serves_asked_signals(const ObservationRequest& request) const {
  // The cached rows come from the device-resident cache (attention_layer makes them at every layer).
  // Nothing asked: a declaration that stands on signals nobody asked for is taken as Reads.
  // The row merges run on the device cache through the mirror (device_kv_mirror.h).
  const bool rows = cache_rows_wanted(request).any() || request.cached_row_merges;
  if (!rows && request.window_attention <= 0) return false;
  if (rows && !mirror_) return false;
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
  // The longest head after the call: the device's lengths now (deferred appends included; pending
  // keeps only shorten them) plus the block; not position + n, which after an eviction overstates
  // it many times over (NACL's decode steps at 1% would have been declined for memory they never use).
  int64_t longest = 0;
  const DeviceKvLayout& layout = device_kv_->layout();
  for (int layer = 0; layer < config_.n_layers; ++layer)
    for (int h = 0; h < config_.n_kv_heads; ++h) longest = std::max(longest, layout.length(layer, h));
  if (!window_attention_.can_hold(size_t(config_.n_heads) * size_t(request.window_attention) * size_t(longest + n)))
    return false;
  for (int layer = 0; layer < config_.n_layers; ++layer)
    for (int h = 0; h < config_.n_kv_heads; ++h)
      if (cache_.next_position(layer, h, position_) != position_) return false;
  return true;
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
  if (observer && request.hidden_states) {  // the attention's input rows, as the projections read them
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

void CudaDecoder::observe_layer(int layer, int n, int first, int rotary_first, const DeviceKvLayerView& view,
                                const ColumnSumsSignal& device_columns, const ObservationRequest& request,
                                ForwardObserver& observer) {
  const int q_dim = config_.q_dim();
  LayerSignals signals;
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
  // The cached keys and values for device scoring (K, V, their norms), as the block's append left them.
  if (hand_cache_rows_) {
    Stopwatch timed(&own_seconds_.observation);
    signals.cache_rows = cache_rows_.fill(view, cache_rows_wanted(request));
  }
  signals.tokens = host_tokens_;
  if (request.hidden_norms) signals.hidden_norms = hidden_norms_;
  if (request.hidden_states) signals.hidden_states = hidden_states_;
  // W_o's Grams (out_norm) and slices (out_norm_l1) from the host copy of W_o, as the CPU decoder
  // makes them (f32).
  if (OutputProjectionSignals::requested(request)) {
    static const NativeLayer none;
    const auto& natives = model_.weights.native_layers;
    const TypedMatrix wo = Weights::matrix(model_.weights.layers[layer].wo, natives.empty() ? none.wo : natives[layer].wo,
                                           config_.dim, q_dim);
    output_projection_.hand_over(request, wo, layer, config_.n_layers, config_.n_heads, config_.head_dim, signals);
  }
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

}  // namespace

std::unique_ptr<Decoder> make_cuda_decoder(const Model& model, const DecoderOptions& options) {
  return std::make_unique<CudaDecoder>(model, options);
}

const cuda::DeviceKvCache* synced_device_kv_cache(Decoder& decoder) {
  auto* cuda_decoder = dynamic_cast<CudaDecoder*>(&decoder);
  return cuda_decoder ? cuda_decoder->synced_device_kv() : nullptr;
}

}  // namespace kvevict
