#include "reference_nacl.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>
#include <span>
#include <stdexcept>

#include "core/decode/decoder.h"
#include "core/engine/counter_rng.h"
#include "core/engine/engine.h"

namespace kvevict::reference {
namespace {

// One head's NACL decision over its entries (`pos` ascending, `score` aligned). Returns the kept
// entry indices, ascending. `tail` = protected newest entries (recent, or the proxy span if longer).
std::vector<int> select_entries(const std::vector<int>& pos, const std::vector<double>& score, const NaclVariant& v,
                                int tail, uint64_t seed, int layer, int kv) {
  const int n = static_cast<int>(pos.size());
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  if (v.budget >= n) return all;
  std::vector<bool> keep(n, false);
  int n_protected = 0;
  for (int i = 0; i < n; ++i)
    if (pos[i] < v.sinks || i >= n - tail) keep[i] = true, ++n_protected;
  if (n_protected > v.budget) throw std::invalid_argument("reference nacl: protected entries exceed the budget");
  const int free = v.budget - n_protected;
  const int n_random = static_cast<int>(std::floor(v.random_share * free));
  const int n_top = free - n_random;
  auto rank = [&](const std::vector<double>& key) {
    std::vector<int> c;
    for (int i = 0; i < n; ++i)
      if (!keep[i]) c.push_back(i);
    std::stable_sort(c.begin(), c.end(), [&](int a, int b) { return key[a] != key[b] ? key[a] > key[b] : pos[a] < pos[b]; });
    return c;
  };
  const auto by_score = rank(score);
  for (int k = 0; k < n_top && k < static_cast<int>(by_score.size()); ++k) keep[by_score[k]] = true;
  // Sampling without replacement from softmax(score / T) = the n_random largest Gumbel keys.
  std::vector<double> gumbel(n);
  for (int i = 0; i < n; ++i) {
    const double u = counter_uniform(seed, layer, kv, pos[i], kSamplingStream);
    gumbel[i] = score[i] / v.temperature - std::log(-std::log(u));
  }
  const auto by_key = rank(gumbel);
  for (int k = 0; k < n_random && k < static_cast<int>(by_key.size()); ++k) keep[by_key[k]] = true;
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    if (keep[i]) out.push_back(i);
  return out;
}

double window_value(const HeadData& h, int g, int w, int n) {
  return h.window_attention[(static_cast<size_t>(g) * h.W + w) * h.S + n];
}

// Softmax in double of one query row over `keys` ([n][d]); entries with position > qpos get 0
// when causal.
std::vector<double> attention_row(const float* q, const float* keys, const int32_t* positions, int n, int d, int qpos,
                                  bool causal) {
  std::vector<double> a(n, 0.0);
  double mx = -INFINITY;
  for (int t = 0; t < n; ++t) {
    if (causal && positions[t] > qpos) continue;
    double dot = 0;
    for (int e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * keys[static_cast<size_t>(t) * d + e];
    a[t] = dot / std::sqrt(static_cast<double>(d));
    mx = std::max(mx, a[t]);
  }
  double z = 0;
  for (int t = 0; t < n; ++t) {
    a[t] = causal && positions[t] > qpos ? 0.0 : std::exp(a[t] - mx);
    z += a[t];
  }
  for (double& x : a) x /= z;
  return a;
}

// NACL applied by a ForwardObserver of its own: at prefill (layer by layer; the layer's attention
// is complete when it is called) and every `interval` decode steps.
class DecodeReference : public ForwardObserver {
 public:
  DecodeReference(const ModelConfig& c, const NaclDecodeParams& p) : c_(c), p_(p), rows_(c.n_layers) {}

  ObservationRequest request() const override { return {p_.proxy, false}; }

  void after_layer(const LayerSignals& s, KVCache& cache) override {
    const size_t row = static_cast<size_t>(c_.n_heads) * c_.head_dim;
    auto& rows = rows_[s.layer];
    for (int i = 0; i < s.window; ++i) {
      const int position = s.first_position + s.n_tokens - s.window + i;
      rows.push_back({position, std::vector<float>(s.window_queries.begin() + i * row, s.window_queries.begin() + (i + 1) * row)});
    }
    while (static_cast<int>(rows.size()) > p_.proxy) rows.pop_front();
    const bool decoding = prefill_done_;
    const int step = steps_ + 1;
    if (decoding && step % p_.interval != 0) return;
    const uint64_t seed = p_.v.seed + static_cast<uint64_t>(decoding ? step : 0) * 0x9E3779B97F4A7C15ull;
    // Every head is scored on the layer as it is now, before any of them shrinks (a code_head_map
    // head reads another head's entries).
    std::vector<std::vector<double>> score(c_.n_kv_heads);
    for (int kv = 0; kv < c_.n_kv_heads; ++kv) score[kv] = scores(cache, s.layer, kv);
    for (int kv = 0; kv < c_.n_kv_heads; ++kv) {
      const int n = cache.length(s.layer, kv);
      if (n <= p_.v.budget) continue;
      const std::vector<int> pos(cache.positions(s.layer, kv), cache.positions(s.layer, kv) + n);
      const int tail = std::max(p_.v.recent, p_.v.keep_all_proxy ? p_.proxy : 0);
      cache.keep(s.layer, kv, select_entries(pos, score[kv], p_.v, tail, seed, s.layer, kv));
    }
  }

  void after_forward(int, KVCache&) override {
    if (prefill_done_) ++steps_;
    prefill_done_ = true;
  }

 private:
  struct Row { int position; std::vector<float> q; };

  // Column sums of the proxy rows' attention, mean over the scoring query heads, per entry of kv.
  std::vector<double> scores(const KVCache& cache, int layer, int kv) const {
    const int G = c_.group_size(), d = c_.head_dim, n = cache.length(layer, kv);
    std::vector<int> heads;
    if (p_.v.code_head_map) heads = {kv};
    else for (int g = 0; g < G; ++g) heads.push_back(kv * G + g);
    std::vector<double> out(n, 0.0);
    for (int qh : heads) {
      const int src = qh / G;  // the KV head whose keys query head qh attends over
      const int ns = cache.length(layer, src);
      const int32_t* sp = cache.positions(layer, src);
      for (const Row& r : rows_[layer]) {
        const auto a = attention_row(r.q.data() + static_cast<size_t>(qh) * d, cache.keys(layer, src), sp, ns, d,
                                     r.position, p_.causal);
        for (int t = 0; t < n; ++t) {  // match by original position (src == kv unless code_head_map)
          const int32_t want = cache.positions(layer, kv)[t];
          const int32_t* hit = std::find(sp, sp + ns, want);
          if (hit != sp + ns) out[t] += a[hit - sp] / static_cast<double>(heads.size());
        }
      }
    }
    return out;
  }

  ModelConfig c_;
  NaclDecodeParams p_;
  std::vector<std::deque<Row>> rows_;
  bool prefill_done_ = false;
  int steps_ = 0;
};

}  // namespace

KeptSets nacl_variant(const PromptData& p, const NaclVariant& v) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l) {
    for (size_t kv = 0; kv < p[l].size(); ++kv) {
      const HeadData& own = p[l][kv];
      const int S = own.S, G = own.G;
      std::vector<double> score(S, 0.0);
      if (v.code_head_map) {  // query head kv = row g = kv % G of KV head kv / G
        const HeadData& src = p[l][kv / G];
        for (int w = 0; w < src.W; ++w)
          for (int n = 0; n < S; ++n) score[n] += window_value(src, static_cast<int>(kv) % G, w, n);
      } else {
        for (int g = 0; g < G; ++g)
          for (int w = 0; w < own.W; ++w)
            for (int n = 0; n < S; ++n) score[n] += window_value(own, g, w, n) / G;
      }
      std::vector<int> pos(S);
      std::iota(pos.begin(), pos.end(), 0);
      const int tail = std::max(v.recent, v.keep_all_proxy ? own.W : 0);
      out[l].push_back(select_entries(pos, score, v, tail, v.seed, static_cast<int>(l), static_cast<int>(kv)));
    }
  }
  return out;
}

KeptSets nacl_with_decode(const Model& model, const std::vector<int>& prompt, const std::vector<int>& forced,
                          const NaclDecodeParams& params) {
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  DecodeReference ref(model.config, params);
  decoder->forward(std::span<const int>(prompt), &ref);
  for (int token : forced) decoder->forward(std::span<const int>(&token, 1), &ref);
  KeptSets out(model.config.n_layers);
  for (int l = 0; l < model.config.n_layers; ++l)
    for (int kv = 0; kv < model.config.n_kv_heads; ++kv) {
      std::vector<int> pos(decoder->cache().positions(l, kv), decoder->cache().positions(l, kv) + decoder->cache().length(l, kv));
      std::sort(pos.begin(), pos.end());
      out[l].push_back(pos);
    }
  return out;
}

}  // namespace kvevict::reference
