// KVzip's replay attention: the host rule, the pieces and the twin; see replay_attention_block.h.
#include "core/decode/replay_attention_block.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/decode/window_attention_tiles.h"
#include "core/decode/window_attention_twin.h"

namespace kvevict {

namespace {

// The chunk and sinks lie as ReplayAttentionRequest describes (0 <= sinks <= first < end <= context).
bool well_formed(const ReplayAttentionRequest& r) {
  return r.enabled() && r.first >= 0 && r.first < r.end && r.end <= r.context && r.sinks >= 0 && r.sinks <= r.first;
}

}  // namespace

void check_replay_attention_request(const ReplayAttentionRequest& r) {
  if (!well_formed(r))
    throw std::invalid_argument("replay attention: context " + std::to_string(r.context) + ", chunk [" +
                                std::to_string(r.first) + ", " + std::to_string(r.end) + "), " +
                                std::to_string(r.sinks) + " sinks (want 0 <= sinks <= first < end <= context)");
}

std::vector<double> replay_row_factors(const ReplayAttentionRequest& request, const float* hidden, size_t hidden_floats,
                                       int rows) {
  if (!request.hidden_normalised) return {};
  const size_t dim = rows > 0 ? hidden_floats / static_cast<size_t>(rows) : 0;
  if (rows > 0 && (dim == 0 || hidden_floats != dim * static_cast<size_t>(rows) || !hidden))
    throw std::logic_error("replay attention: the replay's attention inputs were not handed over");
  std::vector<double> f(static_cast<size_t>(std::max(rows, 0)), 1.0);
  for (int i = 0; i < rows; ++i) {
    double ss = 0;
    for (size_t c = 0; c < dim; ++c) ss += double(hidden[i * dim + c]) * hidden[i * dim + c];
    f[i] = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;
  }
  return f;
}

BlockReplayAttention block_replay_attention(const ReplayAttentionRequest& request, const float* queries, int R,
                                            const std::vector<double>& factors, const KVCache& cache, int layer,
                                            int n_heads) {
  check_replay_attention_request(request);
  const int hd = cache.head_dim(), n_kv = cache.n_kv_heads();
  if (R < 0 || cache.unfolded() || n_kv < 1 || n_heads % n_kv != 0)
    throw std::invalid_argument("replay attention: " + std::to_string(R) + " replay rows, " + std::to_string(n_heads) +
                                " query heads over " + std::to_string(n_kv) + " KV heads");
  if (!factors.empty() && factors.size() != static_cast<size_t>(R))
    throw std::invalid_argument("replay attention: " + std::to_string(factors.size()) + " row factors for " +
                                std::to_string(R) + " rows");
  const int G = n_heads / n_kv, L = request.context, start = request.first, sink = request.sinks;
  const int chunk = request.chunk(), m = sink + chunk + R;
  BlockReplayAttention out{n_heads, start, chunk, std::vector<float>(static_cast<size_t>(n_heads) * chunk, 0.0f)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scratch, logits(static_cast<size_t>(m));
  for (int g = 0; g < n_kv; ++g) {
    if (cache.length(layer, g) != L + R)
      throw std::invalid_argument("replay attention: layer " + std::to_string(layer) + " KV head " + std::to_string(g) +
                                  " holds " + std::to_string(cache.length(layer, g)) + " entries, not the context's " +
                                  std::to_string(L) + " and the replay's " + std::to_string(R));
    const float* keys = cache.keys_or_reconstruct(layer, g, scratch);
    // The subset's entry j in cache order: sinks, then the chunk, then the replay tokens.
    auto entry = [&](int j) { return j < sink ? j : j < sink + chunk ? start + (j - sink) : L + (j - sink - chunk); };
    for (int h = g * G; h < (g + 1) * G; ++h) {
      float* best = out.values.data() + static_cast<size_t>(h) * chunk;
      for (int i = 0; i < R; ++i) {
        const float* q = queries + (static_cast<size_t>(i) * n_heads + h) * hd;
        const int visible = sink + chunk + i + 1;  // causal among the replay tokens
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
        const double norm = (factors.empty() ? 1.0 : factors[i]) / z;
        for (int u = 0; u < chunk; ++u) {
          const float p = static_cast<float>(std::exp(static_cast<double>(logits[sink + u] - mx)) * norm);
          best[u] = std::max(best[u], p);
        }
      }
    }
  }
  return out;
}

DeviceKvLayerView replay_gathered_view(const DeviceKvLayerView& view, int m, const void* keys,
                                       const int32_t* positions) {
  DeviceKvLayerView v = view;
  v.keys = keys;
  v.values = nullptr;
  v.positions = positions;
  for (int h = 0; h < v.n_heads; ++h) {
    v.base_row[h] = static_cast<int64_t>(h) * m;
    v.length[h] = m;
  }
  return v;
}

std::vector<ReplayPiece> plan_replay_attention(const ReplayAttentionRequest& request, int R, int n_heads,
                                               size_t max_piece_floats) {
  check_replay_attention_request(request);
  if (n_heads < 1 || R < 0)
    throw std::invalid_argument("replay attention: " + std::to_string(n_heads) + " query heads, " + std::to_string(R) +
                                " replay rows");
  const size_t per_row = static_cast<size_t>(n_heads) * static_cast<size_t>(replay_gathered_rows(request, R));
  const int rows = static_cast<int>(std::clamp<size_t>(max_piece_floats / per_row, 1, static_cast<size_t>(std::max(R, 1))));
  std::vector<ReplayPiece> pieces;
  for (int row = 0; row < R; row += rows) pieces.push_back({row, std::min(rows, R - row)});
  return pieces;
}

bool replay_attention_applies(const DeviceKvLayerView& view, const ReplayAttentionRequest& request, int R) {
  if (R < 1 || view.n_heads < 1 || view.n_heads > kDeviceKvMaxHeads || !view.positions || !view.keys) return false;
  if (view.head_dim < 1 || view.head_dim > kWindowMaxHeadDim) return false;
  if (!well_formed(request)) return false;
  for (int h = 0; h < view.n_heads; ++h)
    if (view.length[h] != static_cast<int64_t>(request.context) + R) return false;
  return true;
}

BlockReplayAttention replay_attention_twin(const DeviceKvLayerView& view, int group, const float* queries, int R,
                                           const ReplayAttentionRequest& request, const float* factors,
                                           size_t max_piece_floats) {
  if (group < 1 || !replay_attention_applies(view, request, R))
    throw std::invalid_argument("replay attention twin: the view is not a replay block of " + std::to_string(R) +
                                " rows after the request's context that the window attention kernel takes");
  const int n_heads = view.n_heads * group, chunk = request.chunk(), m = replay_gathered_rows(request, R);
  const size_t word = view.type == KvType::F32 ? sizeof(float) : sizeof(uint16_t);
  std::vector<unsigned char> keys(static_cast<size_t>(view.n_heads) * m * view.head_dim * word);
  std::vector<int32_t> positions(static_cast<size_t>(view.n_heads) * m);
  for (int kv = 0; kv < view.n_heads; ++kv)
    for (int j = 0; j < m; ++j)
      for (int i = -1; i < view.head_dim; ++i)
        replay_gather_element(view, request, m, kv, j, i, keys.data(), positions.data());
  const DeviceKvLayerView gathered = replay_gathered_view(view, m, keys.data(), positions.data());
  BlockReplayAttention out{n_heads, request.first, chunk, std::vector<float>(static_cast<size_t>(n_heads) * chunk, 0.0f)};
  const size_t row = static_cast<size_t>(n_heads) * view.head_dim;
  for (const ReplayPiece& piece : plan_replay_attention(request, R, n_heads, max_piece_floats)) {
    WindowPlanOptions options;
    options.query_position0 = request.context + piece.first_row;
    const WindowAttentionPlan plan = plan_window_attention(gathered, piece.rows, group, options);
    if (plan.max_len != m) throw std::logic_error("replay attention twin: a row stride past the gathered rows");
    const std::vector<float> window =
        window_attention_twin(gathered, plan, queries + static_cast<size_t>(piece.first_row) * row);
    for (int h = 0; h < n_heads; ++h)
      for (int u = 0; u < chunk; ++u)
        replay_max_piece_rows(window.data(), piece, group, m, request, factors, h, u, out.values.data());
  }
  return out;
}

}  // namespace kvevict
