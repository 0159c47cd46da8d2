// Hand-written reference kernels; see reference_kernels.h.
#include "jit/reference_kernels.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "jit/kernel_abi.h"

namespace kvevict::jit {

std::string cake_indicator_functions(float gamma, int kernel, const std::string& name) {
  std::ostringstream constants;
  constants.precision(9);
  constants << std::scientific << gamma << "f";
  std::string body = R"(
// Mean + gamma * unbiased variance of one query head's window column t (0 outside [0, T)).
KVEVICT_FN float NAME_column(const KvScoreArgs& a, int h, int t) {
  if (t < 0 || t >= a.T) return 0.0f;
  const float* column = a.tensor[WINDOW_SLOT] + (size_t)h * a.W * a.T + t;
  float sum = 0.0f;
  for (int q = 0; q < a.W; ++q) sum += column[(size_t)q * a.T];
  const float mean = sum / (float)a.W;
  float squares = 0.0f;
  for (int q = 0; q < a.W; ++q) {
    const float d = column[(size_t)q * a.T] - mean;
    squares += d * d;
  }
  const float variance = a.W > 1 ? squares / (float)(a.W - 1) : 0.0f;
  return mean + GAMMA * variance;
}

KVEVICT_FN float NAME_token(const KvScoreArgs& a, int t) {
  float total = 0.0f;
  for (int h = 0; h < a.group; ++h) {
    float pooled = 0.0f;
    for (int k = -(KERNEL / 2); k <= KERNEL / 2; ++k) pooled += NAME_column(a, h, t + k);
    total += pooled / (float)KERNEL;
  }
  return total / (float)a.group;
}
)";
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = body.find(from); at != std::string::npos; at = body.find(from, at + to.size()))
      body.replace(at, from.size(), to);
  };
  replace_all("NAME", name);
  replace_all("GAMMA", constants.str());
  replace_all("KERNEL", std::to_string(kernel));
  replace_all("WINDOW_SLOT", std::to_string(signal_index(TensorSignal::WindowAttention)));
  return body;
}

std::string cake_indicator_source(float gamma, int kernel) {
  return kernel_prelude() + cake_indicator_functions(gamma, kernel, "cake") +
         "KVEVICT_SCORE_ENTRY(" + kCakeIndicatorEntry + ", cake_token)\n";
}

void cake_indicator_reference(const ScoreInputs& in, float gamma, int kernel, float* out) {
  const int T = in.T, W = in.W;
  std::vector<float> indicator(size_t(in.group) * T);
  const float* window_attention = in.signal(TensorSignal::WindowAttention);
  for (int h = 0; h < in.group; ++h) {
    for (int t = 0; t < T; ++t) {
      float sum = 0.0f;
      for (int q = 0; q < W; ++q) sum += window_attention[(size_t(h) * W + q) * T + t];
      const float mean = sum / float(W);
      float squares = 0.0f;
      for (int q = 0; q < W; ++q) {
        const float d = window_attention[(size_t(h) * W + q) * T + t] - mean;
        squares += d * d;
      }
      indicator[size_t(h) * T + t] = mean + gamma * (W > 1 ? squares / float(W - 1) : 0.0f);
    }
  }
  for (int t = 0; t < T; ++t) {
    float total = 0.0f;
    for (int h = 0; h < in.group; ++h) {
      float pooled = 0.0f;
      for (int k = -(kernel / 2); k <= kernel / 2; ++k) {
        const int s = t + k;
        pooled += (s >= 0 && s < T) ? indicator[size_t(h) * T + s] : 0.0f;
      }
      total += pooled / float(kernel);
    }
    out[t] = total / float(in.group);
  }
}

}  // namespace kvevict::jit
