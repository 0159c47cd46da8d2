// The reference CPU decoder: a Llama-family forward pass. A block of tokens runs in one pass with
// matrix-matrix products (the prompt), a single token with matrix-vector products. Weights are f32
// or in their file format (Weights, LoadOptions::weights); cpu::matmul reads either.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/block_attention.h"
#include "core/decode/cpu_ops.h"
#include "core/decode/quant_dot.h"
#include "core/decode/decoder.h"
#include "core/decode/layer_observation.h"
#include "core/decode/rope.h"

namespace kvevict {

namespace {

// The projections and the feed-forward run over row chunks, so their scratch ([rows][dim] normed
// input and output, [rows][hidden_dim] gate/up) is sized to the chunk, not the prompt. Only the
// residual stream, the queries and the attention output are [n][...].
constexpr int kRowChunk = 512;

size_t rows_offset(int row, int width) { return static_cast<size_t>(row) * width; }

class CpuDecoder : public Decoder {
 public:
  CpuDecoder(const Model& model, const DecoderOptions& options)
      : model_(model), config_(model.config), cache_(model.config, options.kv_type), rope_(model.config) {
    cpu::set_threads(options.threads);
  }

  const std::vector<float>& forward(std::span<const int> tokens, ForwardObserver* observer,
                                    std::vector<float>* all_logits) override;
  KVCache& cache() override { return cache_; }
  int position() const override { return position_; }
  void set_position(int position) override {
    if (position < 0) throw std::invalid_argument("set_position: negative position");
    position_ = position;
  }
  void reset() override {
    cache_.clear();
    position_ = 0;
  }
  std::unique_ptr<DecoderSnapshot> snapshot() const override {
    return std::make_unique<DecoderSnapshot>(cache_, position_);
  }
  void restore(const DecoderSnapshot& snapshot) override {
    // Any snapshot of this model's geometry fits the CPU decoder; it copies the host cache.
    if (snapshot.cache().n_layers() != cache_.n_layers() || snapshot.cache().n_kv_heads() != cache_.n_kv_heads() ||
        snapshot.cache().head_dim() != cache_.head_dim())
      throw std::invalid_argument("restore: a snapshot of another model's cache");
    cache_ = snapshot.cache();
    position_ = snapshot.position();
  }
  std::string device_name() const override { return "cpu"; }
  const Model& model() const override { return model_; }

 private:
  void attention_layer(int layer, int n, const ObservationRequest& request, ForwardObserver* observer);
  void observe_layer(int layer, int n, int first, const ObservationRequest& request, const TypedMatrix& wo,
                     ForwardObserver& observer);
  void feed_forward_layer(int layer, int n);
  // The layer's native matrices, or an all-empty set (f32 weights).
  const NativeLayer& native(int layer) const {
    static const NativeLayer none;
    const auto& layers = model_.weights.native_layers;
    return layers.empty() ? none : layers[layer];
  }

  const Model& model_;
  const ModelConfig& config_;
  KVCache cache_;
  Rope rope_;
  BlockQueryStatistics query_statistics_;  // the current layer's, when asked (LayerSignals::query_statistics)
  BlockSegmentAttention segment_attention_;  // the current layer's, when asked (LayerSignals::segment_attention)
  BlockReplayAttention replay_attention_;    // the current layer's, when asked (LayerSignals::replay_attention)
  int position_ = 0;
  std::vector<float> logits_;
  // Activations of the current block, row-major [n][...].
  std::vector<float> x_, xn_, q_, k_, v_, att_, proj_, gate_, up_;
  std::vector<std::vector<float>> column_sums_;
  std::vector<int> rotary_first_;  // [n_kv_heads] RoPE position of the block's first token
  // Observation on request (ObservationRequest): the block's tokens, the layer inputs' norms, and
  // the output projection's Grams and slices (layer_observation.h).
  std::span<const int> tokens_;
  std::vector<float> hidden_norms_, hidden_states_;
  OutputProjectionSignals output_projection_;
};

const std::vector<float>& CpuDecoder::forward(std::span<const int> tokens, ForwardObserver* observer,
                                              std::vector<float>* all_logits) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) throw std::invalid_argument("forward: empty token block");
  const int dim = config_.dim;
  const int vocab = config_.vocab_size;
  for (int t : tokens) {
    if (t < 0 || t >= vocab) {
      throw std::out_of_range("forward: token id " + std::to_string(t) + " outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
    }
  }
  const int first = position_;
  rope_.reserve(first + n);  // grows the cos/sin table incrementally
  const ObservationRequest request = observer ? observer->request() : ObservationRequest{};
  tokens_ = tokens;

  x_.resize(static_cast<size_t>(n) * dim);
  const TypedMatrix embedding = model_.weights.embedding_matrix(vocab, dim);
  for (int i = 0; i < n; ++i) quant::dequantize_rows(embedding, tokens[i], tokens[i] + 1, x_.data() + static_cast<size_t>(i) * dim);

  for (int layer = 0; layer < config_.n_layers; ++layer) {
    attention_layer(layer, n, request, observer);
    feed_forward_layer(layer, n);
  }
  position_ += n;

  // Final norm and classifier: every row for teacher forcing, else only the last.
  const TypedMatrix output = model_.weights.classifier_matrix(vocab, dim);
  const int rows = all_logits ? n : 1;
  const float* last_rows = x_.data() + static_cast<size_t>(n - rows) * dim;
  xn_.resize(static_cast<size_t>(rows) * dim);
  cpu::rmsnorm(last_rows, model_.weights.final_norm.data(), rows, dim, config_.norm_eps, xn_.data());
  if (all_logits) {
    all_logits->resize(static_cast<size_t>(n) * vocab);
    cpu::matmul(xn_.data(), n, output, all_logits->data());
    logits_.assign(all_logits->end() - vocab, all_logits->end());
  } else {
    logits_.resize(vocab);
    cpu::matmul(xn_.data(), 1, output, logits_.data());
  }
  if (observer) observer->after_forward(n, cache_);
  return logits_;
}

void CpuDecoder::attention_layer(int layer, int n, const ObservationRequest& request, ForwardObserver* observer) {
  const LayerWeights& w = model_.weights.layers[layer];
  const NativeLayer& nat = native(layer);
  const int dim = config_.dim, hd = config_.head_dim;
  const int q_dim = config_.q_dim(), kv_dim = config_.kv_dim();
  const size_t rows = static_cast<size_t>(n);
  const int chunk = std::min(n, kRowChunk);
  if (observer && request.hidden_norms) {  // the layer's input, before the attention adds to it
    hidden_norms_.resize(rows);
    hidden_state_norms(x_.data(), n, dim, hidden_norms_.data());
  }
  if (observer && request.hidden_states) {  // the attention's input rows, normed as the projections read them
    hidden_states_.resize(rows * dim);
    cpu::rmsnorm(x_.data(), w.attn_norm.data(), n, dim, config_.norm_eps, hidden_states_.data());
  }
  xn_.resize(static_cast<size_t>(chunk) * dim);
  q_.resize(rows * q_dim);
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  att_.resize(rows * q_dim);
  proj_.resize(static_cast<size_t>(chunk) * dim);

  const TypedMatrix wq = Weights::matrix(w.wq, nat.wq, q_dim, dim), wk = Weights::matrix(w.wk, nat.wk, kv_dim, dim),
                    wv = Weights::matrix(w.wv, nat.wv, kv_dim, dim), wo = Weights::matrix(w.wo, nat.wo, dim, q_dim);
  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int count = std::min(chunk, n - r0);
    cpu::rmsnorm(x_.data() + rows_offset(r0, dim), w.attn_norm.data(), count, dim, config_.norm_eps, xn_.data());
    cpu::matmul_fused(xn_.data(), count,
                      {{wq, q_.data() + rows_offset(r0, q_dim)}, {wk, k_.data() + rows_offset(r0, kv_dim)},
                       {wv, v_.data() + rows_offset(r0, kv_dim)}});
  }
  if (config_.qkv_bias) {
    cpu::add_bias_rows(q_.data(), w.bq.data(), n, q_dim);
    cpu::add_bias_rows(k_.data(), w.bk.data(), n, kv_dim);
    cpu::add_bias_rows(v_.data(), w.bv.data(), n, kv_dim);
  }
  const int first = position_;
  // Rotary position of the block's first token per KV head: its index in the sequence, or the
  // head's cache length once the engine re-assigned the head's positions (KVCache::next_position).
  // Query heads take their KV head's position.
  rotary_first_.resize(config_.n_kv_heads);
  for (int h = 0; h < config_.n_kv_heads; ++h) rotary_first_[h] = cache_.next_position(layer, h, first);
  const int group = config_.group_size();
#pragma omp parallel for if (n > 8) schedule(static)
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < config_.n_heads; ++h)
      rope_.forward(q_.data() + rows_offset(i, q_dim) + h * hd, rotary_first_[h / group] + i);
    for (int h = 0; h < config_.n_kv_heads; ++h)
      rope_.forward(k_.data() + rows_offset(i, kv_dim) + h * hd, rotary_first_[h] + i);
  }
  for (int h = 0; h < config_.n_kv_heads; ++h) {
    for (int i = 0; i < n; ++i) {
      cache_.append(layer, h, rotary_first_[h] + i, k_.data() + rows_offset(i, kv_dim) + h * hd,
                    v_.data() + rows_offset(i, kv_dim) + h * hd);
    }
  }

  BlockAttentionArgs args;
  args.layer = layer;
  args.queries = q_.data();
  args.n = n;
  args.n_heads = config_.n_heads;
  args.group = config_.n_heads / cache_.n_stored_heads();  // 1 once the engine unfolded the cache
  args.out = att_.data();
  args.column_sums = request.accumulated_attention ? &column_sums_ : nullptr;
  block_attention(cache_, args);

  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int count = std::min(chunk, n - r0);
    cpu::matmul(att_.data() + rows_offset(r0, q_dim), count, wo, proj_.data());
    cpu::add_inplace(x_.data() + rows_offset(r0, dim), proj_.data(), static_cast<size_t>(count) * dim);
  }

  if (observer) observe_layer(layer, n, first, request, wo, *observer);
}

// The layer's signals for the observer (what `request` asked for) over the block's queries and the
// cache as its append left it, then observer.after_layer.
void CpuDecoder::observe_layer(int layer, int n, int first, const ObservationRequest& request, const TypedMatrix& wo,
                               ForwardObserver& observer) {
  const int q_dim = config_.q_dim(), hd = config_.head_dim;
  LayerSignals signals;
  signals.layer = layer;
  signals.first_position = first;
  signals.n_tokens = n;
  const int window = std::min(request.window, n);
  if (window > 0) {
    signals.window = window;
    signals.window_queries = std::span<const float>(q_.data() + rows_offset(n - window, q_dim),
                                                    static_cast<size_t>(window) * q_dim);
  }
  if (request.accumulated_attention) signals.accumulated_attention = &column_sums_;
  if (request.query_statistics.enabled) {
    query_statistics_ = block_query_statistics(q_.data(), n, first, request.query_statistics, config_.n_heads, hd,
                                               rope_);
    signals.query_statistics = &query_statistics_;
  }
  // A prompt's segment attention, by the host rule over the block's queries and the cache as
  // its append left it (the engine's own computation: the same bits).
  if (request.segment_attention.enabled() && first == 0 && !cache_.unfolded()) {
    segment_attention_ = block_segment_attention(request.segment_attention, q_.data(), n, cache_, layer,
                                                 config_.n_heads);
    signals.segment_attention = &segment_attention_;
  }
  // A replay chunk's attention, by the host rule over the block's queries and the cache as its
  // append left it (the replay observer's own computation before: the same bits).
  if (request.replay_attention.enabled() && first == request.replay_attention.context) {
    const std::vector<double> factors = replay_row_factors(
        request.replay_attention, hidden_states_.data(), request.hidden_states ? hidden_states_.size() : 0, n);
    replay_attention_ =
        block_replay_attention(request.replay_attention, q_.data(), n, factors, cache_, layer, config_.n_heads);
    signals.replay_attention = &replay_attention_;
  }
  signals.tokens = tokens_;
  if (request.hidden_norms) signals.hidden_norms = hidden_norms_;
  if (request.hidden_states) signals.hidden_states = hidden_states_;
  if (OutputProjectionSignals::requested(request))
    output_projection_.hand_over(request, wo, layer, config_.n_layers, config_.n_heads, hd, signals);
  observer.after_layer(signals, cache_);
}

void CpuDecoder::feed_forward_layer(int layer, int n) {
  const LayerWeights& w = model_.weights.layers[layer];
  const NativeLayer& nat = native(layer);
  const int dim = config_.dim, hidden = config_.hidden_dim;
  const TypedMatrix gate = Weights::matrix(w.w_gate, nat.w_gate, hidden, dim);
  const TypedMatrix up = Weights::matrix(w.w_up, nat.w_up, hidden, dim);
  const TypedMatrix down = Weights::matrix(w.w_down, nat.w_down, dim, hidden);
  const int chunk = std::min(n, kRowChunk);
  xn_.resize(static_cast<size_t>(chunk) * dim);
  proj_.resize(static_cast<size_t>(chunk) * dim);
  gate_.resize(static_cast<size_t>(chunk) * hidden);
  up_.resize(static_cast<size_t>(chunk) * hidden);
  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int rows = std::min(chunk, n - r0);
    float* x = x_.data() + rows_offset(r0, dim);
    cpu::rmsnorm(x, w.ffn_norm.data(), rows, dim, config_.norm_eps, xn_.data());
    cpu::matmul_fused(xn_.data(), rows, {{gate, gate_.data()}, {up, up_.data()}});
    cpu::swiglu(gate_.data(), up_.data(), static_cast<size_t>(rows) * hidden);
    cpu::matmul(gate_.data(), rows, down, proj_.data());
    cpu::add_inplace(x, proj_.data(), static_cast<size_t>(rows) * dim);
  }
}

}  // namespace

std::unique_ptr<Decoder> make_cpu_decoder(const Model& model, const DecoderOptions& options) {
  return std::make_unique<CpuDecoder>(model, options);
}

}  // namespace kvevict
