#include "core/decode/layer_observation.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/decode/quant_dot.h"

namespace kvevict {

void hidden_state_norms(const float* rows, int n, int width, float* out) {
  for (int i = 0; i < n; ++i) {
    const float* r = rows + static_cast<size_t>(i) * width;
    double s = 0;
    for (int c = 0; c < width; ++c) s += static_cast<double>(r[c]) * r[c];
    out[i] = static_cast<float>(std::sqrt(s));
  }
}

std::vector<float> output_projection_grams(const TypedMatrix& wo, int n_heads, int head_dim) {
  if (wo.empty() || wo.cols != n_heads * head_dim)
    throw std::invalid_argument("output_projection_grams: W_o must have n_heads * head_dim columns");
  const size_t per_head = static_cast<size_t>(head_dim) * head_dim;
  std::vector<double> acc(per_head * n_heads, 0.0);
  std::vector<float> row(wo.cols);
  for (int r = 0; r < wo.rows; ++r) {
    quant::dequantize_rows(wo, r, r + 1, row.data());
    for (int h = 0; h < n_heads; ++h) {
      const float* w = row.data() + static_cast<size_t>(h) * head_dim;
      double* g = acc.data() + per_head * h;
      for (int a = 0; a < head_dim; ++a) {
        const double wa = w[a];
        for (int b = 0; b < head_dim; ++b) g[static_cast<size_t>(a) * head_dim + b] += wa * w[b];
      }
    }
  }
  return std::vector<float>(acc.begin(), acc.end());
}

void OutputProjectionSignals::hand_over(const ObservationRequest& request, const TypedMatrix& wo, int layer,
                                        int n_layers, int n_heads, int head_dim, LayerSignals& signals) {
  if (request.output_grams) {
    grams_.resize(static_cast<size_t>(n_layers));
    std::vector<float>& grams = grams_.at(static_cast<size_t>(layer));
    if (grams.empty()) grams = output_projection_grams(wo, n_heads, head_dim);
    signals.output_grams = grams;
  }
  if (request.output_projection) {
    output_projection_slices(wo, n_heads, head_dim, slices_);
    signals.output_projection = slices_;
  }
}

void output_projection_slices(const TypedMatrix& wo, int n_heads, int head_dim, std::vector<float>& out) {
  if (wo.empty() || wo.cols != n_heads * head_dim)
    throw std::invalid_argument("output_projection_slices: W_o must have n_heads * head_dim columns");
  out.resize(static_cast<size_t>(wo.rows) * wo.cols);
  std::vector<float> row(wo.cols);
  for (int r = 0; r < wo.rows; ++r) {
    quant::dequantize_rows(wo, r, r + 1, row.data());
    for (int h = 0; h < n_heads; ++h)
      std::copy(row.begin() + static_cast<ptrdiff_t>(h) * head_dim, row.begin() + static_cast<ptrdiff_t>(h + 1) * head_dim,
                out.begin() + (static_cast<ptrdiff_t>(h) * wo.rows + r) * head_dim);
  }
}

}  // namespace kvevict
