#include "dsl/sort_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kvevict::dsl {
namespace {

#define KVEVICT_HOST_FN static inline
KVEVICT_DEFINE_SORT_BEFORE(KVEVICT_HOST_FN)
#undef KVEVICT_HOST_FN

// One slice: x[k * inner] for k < n. `order` and `values` are the caller's work space.
void sort_slice(SortFn f, const float* x, int64_t n, int64_t inner, float level, float* out,
                std::vector<int64_t>& order, std::vector<float>& values) {
  values.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) values[static_cast<size_t>(k)] = x[k * inner];
  if (f == SortFn::Quantile) {
    if (n == 0) { out[0] = 0.0f; return; }
    const bool nan = std::any_of(values.begin(), values.end(), [](float v) { return std::isnan(v); });
    if (nan || std::isnan(level)) { out[0] = std::numeric_limits<float>::quiet_NaN(); return; }
    std::sort(values.begin(), values.end());
    const double p = std::clamp(static_cast<double>(level), 0.0, 1.0);
    const double pos = p * static_cast<double>(n - 1);
    const auto lo = static_cast<int64_t>(std::floor(pos));
    const int64_t hi = std::min(lo + 1, n - 1);
    const double vlo = values[static_cast<size_t>(lo)], vhi = values[static_cast<size_t>(hi)];
    out[0] = static_cast<float>(vlo + (pos - static_cast<double>(lo)) * (vhi - vlo));
    return;
  }
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  // kv_sort_before is a strict weak order (index breaks every tie), so any sort gives one result.
  std::sort(order.begin(), order.end(), [&](int64_t j, int64_t i) {
    return kv_sort_before(values[static_cast<size_t>(j)], j, values[static_cast<size_t>(i)], i) != 0;
  });
  double mass = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t k = order[static_cast<size_t>(r)];
    if (f == SortFn::Rank) {
      out[k * inner] = static_cast<float>(r);
    } else {
      out[k * inner] = static_cast<float>(mass);
      mass += static_cast<double>(values[static_cast<size_t>(k)]);
    }
  }
}

}  // namespace

bool sort_fn(const std::string& name, SortFn& out) {
  if (name == "rank") out = SortFn::Rank;
  else if (name == "sorted_cumsum") out = SortFn::SortedCumsum;
  else if (name == "quantile") out = SortFn::Quantile;
  else return false;
  return true;
}

const char* sort_name(SortFn f) {
  switch (f) {
    case SortFn::Rank: return "rank";
    case SortFn::SortedCumsum: return "sorted_cumsum";
    case SortFn::Quantile: return "quantile";
  }
  return "?";
}

std::string sort_operand_error(SortFn f, unsigned axis, unsigned operand) {
  const std::string name = sort_name(f);
  if (!(operand & axis))
    return "'" + name + "' along " + shape_name(axis) + ", but the operand does not depend on that axis";
  if (is_token_pair(operand))
    return "'" + name + "' of a token-pair value (axes s and t) is not available: pair values are never materialised; "
           "reduce one token axis first";
  return "";
}

void evaluate_sort(SortFn f, const float* a, int64_t outer, int64_t n, int64_t inner, float level, float* out) {
  const int64_t slices = outer * inner;
  const int64_t out_slice = f == SortFn::Quantile ? 1 : n;
#pragma omp parallel if (slices > 1 && slices * n >= (1 << 16))
  {
    std::vector<int64_t> order;
    std::vector<float> values;
#pragma omp for schedule(static)
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t o = s / inner, i = s % inner;
      // Quantile writes out[o][i]; the scans write out[o][k][i] (stride inner inside the slice).
      float* dst = f == SortFn::Quantile ? out + o * inner + i : out + o * out_slice * inner + i;
      sort_slice(f, a + o * n * inner + i, n, inner, level, dst, order, values);
    }
  }
}

}  // namespace kvevict::dsl
