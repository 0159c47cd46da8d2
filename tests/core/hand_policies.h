#pragma once
// Hand-written PolicyPrograms for engine tests, standing in for compiled policy files until the DSL
// lands. Each mirrors one built-in policy's formula over the engine's ScoreInputs; the tests compare
// what the engine keeps with them against tests/core/reference_policies (written independently).
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/engine/counter_rng.h"
#include "core/engine/policy_program.h"

namespace kvevict::test {

class HandPolicy : public PolicyProgram {
 public:
  PolicyDescription desc;
  std::function<void(const ScoreInputs&, bool, float*)> score_fn;
  std::function<double(const LayerWeightInputs&)> weight_fn;

  const PolicyDescription& description() const override { return desc; }
  void score(const ScoreInputs& in, bool decoding, float* out) const override { score_fn(in, decoding, out); }
  double layer_weight(const LayerWeightInputs& in) const override { return weight_fn ? weight_fn(in) : 1.0; }
};

inline float window_at(const ScoreInputs& in, int g, int w, int t) {
  return in.signal(TensorSignal::WindowAttention)[(static_cast<size_t>(g) * in.W + w) * in.T + t];
}

// 1-D pooling over x[0..n), stride 1, same padding; avg counts the zero padding, max ignores it.
inline std::vector<float> pool1d(const std::vector<float>& x, int kernel, bool max_pool) {
  const int n = static_cast<int>(x.size()), r = kernel / 2;
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) {
    float acc = max_pool ? -std::numeric_limits<float>::infinity() : 0.0f;
    for (int j = std::max(0, i - r); j <= std::min(n - 1, i + r); ++j) acc = max_pool ? std::max(acc, x[j]) : acc + x[j];
    y[i] = max_pool ? acc : acc / kernel;
  }
  return y;
}

// Non-window entries are the first T - W of the cache at prefill (positional order).
inline void write_non_window(const ScoreInputs& in, const std::vector<float>& s, float* out) {
  for (int t = 0; t < in.T; ++t) out[t] = t < static_cast<int>(s.size()) ? s[t] : std::numeric_limits<float>::infinity();
}

inline HandPolicy snap_policy(int window, int kernel, bool max_pool, bool mean_rows) {
  HandPolicy p;
  p.desc.name = "hand-snapkv";
  p.desc.window = window;
  p.desc.protect.recent = window;
  p.score_fn = [=](const ScoreInputs& in, bool, float* out) {
    const int n = in.T - window;
    std::vector<float> acc(n, 0.0f);
    for (int g = 0; g < in.group; ++g) {
      std::vector<float> s(n, 0.0f);
      for (int w = 0; w < in.W; ++w)
        for (int t = 0; t < n; ++t) s[t] += window_at(in, g, w, t);
      if (mean_rows)
        for (float& v : s) v /= in.W;
      s = pool1d(s, kernel, max_pool);
      for (int t = 0; t < n; ++t) acc[t] += s[t] / in.group;
    }
    write_non_window(in, acc, out);
  };
  return p;
}

// CAKE indicator (mean + gamma * unbiased variance over the window rows, avg pool 5, group mean)
// and layer preference (entropy^(1/tau1) * variance^(1/tau2) over non-window keys).
inline HandPolicy cake_policy(int window, double gamma, bool cascading) {
  HandPolicy p;
  p.desc.name = "hand-cake";
  p.desc.window = window;
  p.desc.protect.recent = window;
  p.desc.has_layer_weight = true;
  p.desc.run.cascading = cascading;
  p.desc.run.skip_margin_includes_window = true;
  p.score_fn = [=](const ScoreInputs& in, bool, float* out) {
    const int n = in.T - window;
    std::vector<float> acc(n, 0.0f);
    for (int g = 0; g < in.group; ++g) {
      std::vector<float> I(n);
      for (int t = 0; t < n; ++t) {
        double mean = 0, var = 0;
        for (int w = 0; w < in.W; ++w) mean += window_at(in, g, w, t) / static_cast<double>(in.W);
        for (int w = 0; w < in.W; ++w) var += (window_at(in, g, w, t) - mean) * (window_at(in, g, w, t) - mean);
        I[t] = static_cast<float>(mean + gamma * var / (in.W - 1));
      }
      I = pool1d(I, 5, false);
      for (int t = 0; t < n; ++t) acc[t] += I[t] / in.group;
    }
    write_non_window(in, acc, out);
  };
  p.weight_fn = [=](const LayerWeightInputs& lw) {
    double H = 0, V = 0;
    for (const ScoreInputs& in : lw.heads) {
      const int n = in.T - window;
      for (int g = 0; g < in.group; ++g)
        for (int t = 0; t < n; ++t) {
          double mean = 0, var = 0;
          for (int w = 0; w < in.W; ++w) {
            const double a = window_at(in, g, w, t);
            H -= a * std::log(a + 1e-10);
            mean += a / in.W;
          }
          for (int w = 0; w < in.W; ++w) var += (window_at(in, g, w, t) - mean) * (window_at(in, g, w, t) - mean);
          V += var / (in.W - 1);
        }
    }
    return H * V;  // tau1 = tau2 = 1
  };
  return p;
}

inline HandPolicy nacl_policy(int proxy_window, int sinks, int recent, double random_share, double temperature) {
  HandPolicy p;
  p.desc.name = "hand-nacl";
  p.desc.window = proxy_window;
  p.desc.protect.first = sinks;
  p.desc.protect.recent = recent;
  p.desc.select.random_share = random_share;
  p.desc.select.temperature = temperature;
  p.score_fn = [](const ScoreInputs& in, bool, float* out) {
    for (int t = 0; t < in.T; ++t) {
      float s = 0;
      for (int g = 0; g < in.group; ++g)
        for (int w = 0; w < in.W; ++w) s += window_at(in, g, w, t) / in.group;
      out[t] = s;
    }
  };
  return p;
}

inline HandPolicy h2o_policy(int recent, int decode_every, int slack) {
  HandPolicy p;
  p.desc.name = "hand-h2o";
  p.desc.reads[signal_index(TensorSignal::AccumulatedAttention)] = true;
  p.desc.protect.recent = recent;
  p.desc.run.decode_every = decode_every;
  p.desc.run.decode_slack = slack;
  p.score_fn = [](const ScoreInputs& in, bool, float* out) {
    for (int t = 0; t < in.T; ++t) {
      float s = 0;
      for (int g = 0; g < in.group; ++g) s += in.signal(TensorSignal::AccumulatedAttention)[static_cast<size_t>(g) * in.T + t] / in.group;
      out[t] = s;
    }
  };
  return p;
}

inline HandPolicy knorm_policy() {
  HandPolicy p;
  p.desc.name = "hand-knorm";
  p.desc.reads[signal_index(TensorSignal::KeyNorm)] = true;
  p.score_fn = [](const ScoreInputs& in, bool, float* out) {
    for (int t = 0; t < in.T; ++t) out[t] = -in.signal(TensorSignal::KeyNorm)[t];
  };
  return p;
}

inline HandPolicy streaming_policy(int n_sink) {
  HandPolicy p;
  p.desc.name = "hand-streamingllm";
  p.desc.protect.first = n_sink;
  p.score_fn = [](const ScoreInputs& in, bool, float* out) {
    for (int t = 0; t < in.T; ++t) out[t] = static_cast<float>(in.position[t]);
  };
  return p;
}

inline HandPolicy random_policy() {
  HandPolicy p;
  p.desc.name = "hand-random";
  p.score_fn = [](const ScoreInputs& in, bool, float* out) {
    for (int t = 0; t < in.T; ++t) out[t] = counter_uniform(in.seed, in.layer, in.kv_head, in.position[t], kScoreStream);
  };
  return p;
}

// CAKE-style decode: current attention, group mean (window entries protected).
inline HandPolicy current_attention_policy(int recent, int decode_every, int slack) {
  HandPolicy p;
  p.desc.name = "hand-current";
  p.desc.reads[signal_index(TensorSignal::CurrentAttention)] = true;
  p.desc.protect.recent = recent;
  p.desc.run.decode_every = decode_every;
  p.desc.run.decode_slack = slack;
  p.score_fn = [](const ScoreInputs& in, bool, float* out) {
    for (int t = 0; t < in.T; ++t) {
      float s = 0;
      for (int g = 0; g < in.group; ++g) s += in.signal(TensorSignal::CurrentAttention)[static_cast<size_t>(g) * in.T + t] / in.group;
      out[t] = s;
    }
  };
  return p;
}

}  // namespace kvevict::test
