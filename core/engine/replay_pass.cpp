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
// (Read from the decoder's cache_layout: a device-resident cache's rows stay where they are.)
void check_cache(Decoder& decoder, int context_length) {
  const KVCache& cache = decoder.cache_layout();
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

// Every layer of the decoder's cache truncated back to `length` entries where the replay left more
// (its observer truncates each layer in the call; a failed call may leave some). The rows come to the
// host (Decoder::cache) only when some head is longer.
void truncate_replay(Decoder& decoder, int length) {
  const KVCache& layout = decoder.cache_layout();
  bool longer = false;
  for (int l = 0; l < layout.n_layers() && !longer; ++l)
    for (int g = 0; g < layout.n_kv_heads(); ++g) longer = longer || layout.length(l, g) > length;
  if (!longer) return;
  KVCache& cache = decoder.cache();
  for (int l = 0; l < cache.n_layers(); ++l) truncate_layer(cache, l, length);
}

// Scores one chunk [start, end) during the replay forward from the decoder's replay attention
// (replay_attention_block.h: the host rule on the CPU, the device's on a resident CUDA cache) and
// drops the replay entries per layer. It reads no cached row on the host itself.
class ReplayObserver final : public ForwardObserver {
 public:
  ReplayObserver(int context_length, int start, int end, const ReplayOptions& o, ReplayScores& out)
      : request_{context_length, start, end, std::min(o.n_sink, start), o.hidden_normalised}, out_(out) {}

  ObservationRequest request() const override {
    ObservationRequest r;
    r.replay_attention = request_;
    r.hidden_states = request_.hidden_normalised;  // KVzip+'s row factors
    const CacheRowReads given = CacheRowReads::NoneGivenDecoderSignals;
    r.cache_row_reads = {given, given, given};
    return r;
  }

  void after_layer(const LayerSignals& s, KVCache& cache) override {
    const BlockReplayAttention* a = s.replay_attention;
    if (!a || a->n_heads != out_.n_heads || a->first != request_.first || a->length != request_.chunk())
      throw std::logic_error("replay_scores: the decoder did not hand over the replay attention of layer " +
                             std::to_string(s.layer));
    for (int h = 0; h < a->n_heads; ++h)
      std::copy_n(a->head(h), a->length,
                  out_.scores.begin() + (static_cast<size_t>(s.layer) * out_.n_heads + h) * out_.length + a->first);
    truncate_layer(cache, s.layer, request_.context);  // later layers never read this layer's cache
  }

 private:
  ReplayAttentionRequest request_;
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
  const KVCache& cache = decoder.cache_layout();
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
    ReplayObserver observer(L, start, end, options, out);
    try {
      decoder.forward(tokens, &observer);
    } catch (...) {
      truncate_replay(decoder, L);
      decoder.set_position(L);
      throw;
    }
    truncate_replay(decoder, L);  // the observer did; defensive
    decoder.set_position(L);
  }
  return out;
}

}  // namespace kvevict
