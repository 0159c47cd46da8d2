// KVzip's replay pass; see replay_pass.h.
#include "core/engine/replay_pass.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/model/model.h"

namespace kvevict {
namespace {

void check_options(const ReplayOptions& o, const ReplayPrompt& p, int context_length) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("replay_scores: " + what); };
  if (o.chunk < 1 || o.chunk > kMaxReplayChunk) fail("chunk must be in [1, " + std::to_string(kMaxReplayChunk) + "]");
  if (o.previous_tail < 0 || o.previous_tail > o.chunk) fail("previous_tail must be in [0, chunk]");
  if (o.n_sink < 0) fail("n_sink must be >= 0");
  if (o.context_start < 0 || o.context_start > context_length) fail("context_start must be in [0, context length]");
  const size_t prompt = std::max(p.first.size(), p.later.size() + static_cast<size_t>(o.previous_tail)) + p.suffix.size();
  if (prompt > static_cast<size_t>(kMaxReplayPromptTokens)) {
    fail("the replay prompt has more than " + std::to_string(kMaxReplayPromptTokens) + " tokens");
  }
}

// The cache must hold the context unevicted: cache index = position, every head of length L.
void check_cache(const Decoder& decoder, int context_length) {
  const KVCache& cache = const_cast<Decoder&>(decoder).cache();
  auto fail = [](const std::string& what) { throw std::invalid_argument("replay_scores: " + what); };
  if (decoder.position() != context_length) fail("the decoder's position is not the context length");
  if (cache.unfolded() || cache.any_positions_reassigned()) fail("the cache is unfolded or its positions reassigned");
  for (int l = 0; l < cache.n_layers(); ++l) {
    for (int g = 0; g < cache.n_kv_heads(); ++g) {
      if (cache.is_codebook(l, g)) fail("the cache holds codebook heads");
      if (cache.length(l, g) != context_length) fail("the cache does not hold the whole context (evicted?)");
    }
  }
}

// Truncates every head of `layer` back to its first `length` entries (the replay's K/V dropped).
void truncate_layer(KVCache& cache, int layer, int length) {
  std::vector<int> first(static_cast<size_t>(length));
  std::iota(first.begin(), first.end(), 0);
  for (int g = 0; g < cache.n_kv_heads(); ++g) {
    if (cache.length(layer, g) > length) cache.keep(layer, g, first);
  }
}

// Scores one chunk [start, end) during the replay forward and drops the replay entries per layer.
class ReplayObserver final : public ForwardObserver {
 public:
  ReplayObserver(int context_length, int start, int end, const ReplayOptions& o, int replay_length, ReplayScores& out)
      : L_(context_length), start_(start), end_(end), sink_(std::min(o.n_sink, start)), R_(replay_length),
        hidden_normalised_(o.hidden_normalised), out_(out) {}

  ObservationRequest request() const override {
    ObservationRequest r;
    r.window = R_;  // every replay query, post-RoPE
    r.hidden_states = hidden_normalised_;
    return r;
  }

  void after_layer(const LayerSignals& s, KVCache& cache) override {
    const int hd = cache.head_dim(), n_kv = cache.n_kv_heads();
    if (s.window != R_) throw std::logic_error("replay_scores: the decoder returned fewer replay queries");
    const int n_heads = static_cast<int>(s.window_queries.size() / (static_cast<size_t>(R_) * hd));
    if (n_heads != out_.n_heads) throw std::logic_error("replay_scores: the decoder returned another head count");
    const int G = n_heads / n_kv;
    const int chunk = end_ - start_, m = sink_ + chunk + R_;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> scratch, logits(static_cast<size_t>(m));
    const std::vector<double> factor = row_factors(s);
    for (int g = 0; g < n_kv; ++g) {
      if (cache.length(s.layer, g) != L_ + R_) throw std::logic_error("replay_scores: unexpected cache length");
      const float* keys = cache.keys_or_reconstruct(s.layer, g, scratch);
      // The subset's entry j in cache order: sinks, then the chunk, then the replay tokens.
      auto entry = [&](int j) { return j < sink_ ? j : j < sink_ + chunk ? start_ + (j - sink_) : L_ + (j - sink_ - chunk); };
      for (int h = g * G; h < (g + 1) * G; ++h) {
        float* best = out_.scores.data() + (static_cast<size_t>(s.layer) * n_heads + h) * out_.length + start_;
        std::fill_n(best, chunk, 0.0f);
        for (int i = 0; i < R_; ++i) {
          const float* q = s.window_queries.data() + (static_cast<size_t>(i) * n_heads + h) * hd;
          const int visible = sink_ + chunk + i + 1;  // causal among the replay tokens
          float mx = -INFINITY;
          for (int j = 0; j < visible; ++j) {
            const float* k = keys + static_cast<size_t>(entry(j)) * hd;
            float dot = 0;
            for (int c = 0; c < hd; ++c) dot += q[c] * k[c];
            logits[j] = dot * scale;
            mx = std::max(mx, logits[j]);
          }
          double z = 0;
          for (int j = 0; j < visible; ++j) z += std::exp(static_cast<double>(logits[j] - mx));
          const double norm = factor[i] / z;
          for (int u = 0; u < chunk; ++u) {
            const float p = static_cast<float>(std::exp(static_cast<double>(logits[sink_ + u] - mx)) * norm);
            best[u] = std::max(best[u], p);
          }
        }
      }
    }
    truncate_layer(cache, s.layer, L_);  // later layers never read this layer's cache
  }

 private:
  // 1 / ||attention input|| of each replay token (KVzip+), or 1.
  std::vector<double> row_factors(const LayerSignals& s) const {
    std::vector<double> f(static_cast<size_t>(R_), 1.0);
    if (!hidden_normalised_) return f;
    const size_t dim = s.hidden_states.size() / static_cast<size_t>(R_);
    if (s.hidden_states.size() != dim * R_ || dim == 0)
      throw std::logic_error("replay_scores: the decoder did not hand over the replay's attention inputs");
    for (int i = 0; i < R_; ++i) {
      double ss = 0;
      for (size_t c = 0; c < dim; ++c) ss += double(s.hidden_states[i * dim + c]) * s.hidden_states[i * dim + c];
      f[i] = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;
    }
    return f;
  }

  int L_, start_, end_, sink_, R_;
  bool hidden_normalised_;
  ReplayScores& out_;
};

}  // namespace

float ReplayScores::group_max(int layer, int kv_head, int t) const {
  const int G = n_heads / n_kv_heads;
  float best = at(layer, kv_head * G, t);
  for (int h = kv_head * G + 1; h < (kv_head + 1) * G; ++h) best = std::max(best, at(layer, h, t));
  return best;
}

int replay_chunk_count(int context_length, const ReplayOptions& o) {
  const int n = context_length - o.context_start;
  return n <= 0 ? 0 : (n - 1) / o.chunk + 1;
}

std::vector<int> replay_tokens(std::span<const int> context, const ReplayPrompt& p, const ReplayOptions& o, int index) {
  const int L = static_cast<int>(context.size());
  const int start = o.context_start + index * o.chunk, end = std::min(L, start + o.chunk);
  std::vector<int> out(index == 0 ? p.first : p.later);
  if (index > 0) {
    const int tail = std::min(o.previous_tail, o.chunk);  // the previous chunk is a full chunk
    out.insert(out.end(), context.begin() + (start - tail), context.begin() + start);
  }
  out.insert(out.end(), p.suffix.begin(), p.suffix.end());
  out.insert(out.end(), context.begin() + start, context.begin() + end);
  return out;
}

ReplayScores replay_scores(Decoder& decoder, std::span<const int> context, const ReplayPrompt& prompt,
                           const ReplayOptions& options) {
  const int L = static_cast<int>(context.size());
  check_options(options, prompt, L);
  check_cache(decoder, L);
  KVCache& cache = decoder.cache();
  ReplayScores out;
  out.n_layers = cache.n_layers();
  out.n_heads = decoder.model().config.n_heads;
  out.n_kv_heads = cache.n_kv_heads();
  out.length = L;
  out.scores.assign(static_cast<size_t>(out.n_layers) * out.n_heads * L, 0.0f);
  for (size_t row = 0; row < static_cast<size_t>(out.n_layers) * out.n_heads; ++row) {
    std::fill_n(out.scores.begin() + row * L, std::min(options.n_sink, L), 1.0f);
  }
  const int chunks = replay_chunk_count(L, options);
  for (int c = 0; c < chunks; ++c) {
    const int start = options.context_start + c * options.chunk, end = std::min(L, start + options.chunk);
    const std::vector<int> tokens = replay_tokens(context, prompt, options, c);
    ReplayObserver observer(L, start, end, options, static_cast<int>(tokens.size()), out);
    try {
      decoder.forward(tokens, &observer);
    } catch (...) {
      for (int l = 0; l < cache.n_layers(); ++l) truncate_layer(cache, l, L);
      decoder.set_position(L);
      throw;
    }
    for (int l = 0; l < cache.n_layers(); ++l) truncate_layer(cache, l, L);  // the observer did; defensive
    decoder.set_position(L);
  }
  return out;
}

}  // namespace kvevict
