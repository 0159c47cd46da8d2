#include "core/engine/budget_allocator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace kvevict {
namespace {

double clean_weight(double w) { return (std::isfinite(w) && w > 0) ? w : 0.0; }

// Water filling of `total` over items proportionally to w under caps: an item whose proportional
// share reaches its cap is fixed at it (out[i] = cap[i], active[i] = 0) and the rest is shared again.
// On return, share[i] is the real-valued share of each item still active. Zero weights all round
// are shared uniformly.
void water_fill(std::vector<double>& w, const std::vector<int64_t>& cap, int64_t total, std::vector<char>& active,
                std::vector<int64_t>& out, std::vector<double>& share) {
  const size_t n = w.size();
  int64_t remaining = total;
  for (;;) {
    double wsum = 0;
    for (size_t i = 0; i < n; ++i)
      if (active[i]) wsum += w[i];
    if (wsum <= 0) {  // only zero-weight items left: uniform over them
      size_t count = 0;
      for (size_t i = 0; i < n; ++i) count += active[i] ? 1 : 0;
      if (count == 0) return;
      for (size_t i = 0; i < n; ++i)
        if (active[i]) w[i] = 1.0;
      continue;
    }
    bool clamped = false;
    for (size_t i = 0; i < n; ++i) {
      if (!active[i]) continue;
      const double s = static_cast<double>(remaining) * w[i] / wsum;
      if (s >= static_cast<double>(cap[i])) {
        out[i] = cap[i];
        active[i] = 0;
        clamped = true;
      }
    }
    if (clamped) {
      remaining = total;
      for (size_t i = 0; i < n; ++i)
        if (!active[i]) remaining -= out[i];
      if (remaining <= 0) return;
      continue;
    }
    for (size_t i = 0; i < n; ++i)
      if (active[i]) share[i] = static_cast<double>(remaining) * w[i] / wsum;
    return;
  }
}

// Rounds the active items' shares to integers so that out sums to `total` exactly: floors, then one
// more unit each by largest remainder (lower index first on ties), never above a cap. Shares and
// remainders equal up to a millionth of a token count as equal (e.g. Ada-KV's 0.2 * 32 + 0.8 * n,
// with floor_alpha evaluated in float by the DSL), so the documented tie rule decides, not rounding
// noise.
void round_largest_remainder(const std::vector<double>& share, const std::vector<int64_t>& cap, int64_t total,
                             const std::vector<char>& active, std::vector<int64_t>& out) {
  const size_t n = share.size();
  auto slack = [&](size_t i) { return 1e-6 * std::max(1.0, std::abs(share[i])); };
  int64_t assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    if (active[i]) out[i] = std::min<int64_t>(cap[i], static_cast<int64_t>(std::floor(share[i] + slack(i))));
    assigned += out[i];
  }
  int64_t left = total - assigned;
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (active[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ra = share[a] - std::floor(share[a] + slack(a)), rb = share[b] - std::floor(share[b] + slack(b));
    return ra > rb + std::max(slack(a), slack(b));
  });
  // Rounding can leave more than one unit per item only through float error; loop until exact.
  while (left > 0) {
    bool progressed = false;
    for (size_t i : order) {
      if (left == 0) break;
      if (out[i] < cap[i]) {
        ++out[i];
        --left;
        progressed = true;
      }
    }
    if (!progressed) break;
  }
  while (left < 0) {  // float error the other way: take back from the largest
    size_t best = n;
    for (size_t i = 0; i < n; ++i)
      if (out[i] > 0 && (best == n || out[i] > out[best])) best = i;
    if (best == n) break;
    --out[best];
    ++left;
  }
}

// Splits `total` (<= sum(cap)) over items proportionally to w with caps; exact integer sum.
std::vector<int64_t> split_capped(const std::vector<double>& w_in, const std::vector<int64_t>& cap, int64_t total) {
  const size_t n = w_in.size();
  std::vector<int64_t> out(n, 0);
  if (n == 0 || total <= 0) return out;
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = cap[i] > 0 ? clean_weight(w_in[i]) : 0.0;
  std::vector<char> active(n, 0);
  for (size_t i = 0; i < n; ++i) active[i] = cap[i] > 0;
  // If no active item has positive weight, split uniformly among the active ones.
  bool any_positive = false;
  for (size_t i = 0; i < n; ++i) any_positive = any_positive || (active[i] && w[i] > 0);
  if (!any_positive)
    for (size_t i = 0; i < n; ++i) w[i] = active[i] ? 1.0 : 0.0;
  std::vector<double> share(n, 0.0);
  water_fill(w, cap, total, active, out, share);
  round_largest_remainder(share, cap, total, active, out);
  return out;
}

}  // namespace

std::vector<int64_t> allocate_budgets(const std::vector<double>& weight, const std::vector<int64_t>& lower,
                                      const std::vector<int64_t>& upper, int64_t total) {
  const size_t n = weight.size();
  if (lower.size() != n || upper.size() != n) throw std::invalid_argument("allocate_budgets: size mismatch");
  std::vector<int64_t> up(n), lo(n);
  int64_t sum_up = 0, sum_lo = 0;
  for (size_t i = 0; i < n; ++i) {
    up[i] = std::max<int64_t>(0, upper[i]);
    lo[i] = std::clamp<int64_t>(lower[i], 0, up[i]);
    sum_up += up[i];
    sum_lo += lo[i];
  }
  if (total >= sum_up) return up;
  if (total < sum_lo) std::fill(lo.begin(), lo.end(), 0);
  int64_t rest = total;
  std::vector<int64_t> room(n);
  for (size_t i = 0; i < n; ++i) {
    rest -= lo[i];
    room[i] = up[i] - lo[i];
  }
  std::vector<int64_t> extra = split_capped(weight, room, std::max<int64_t>(0, rest));
  for (size_t i = 0; i < n; ++i) extra[i] += lo[i];
  return extra;
}

std::vector<int64_t> allocate_budgets(const std::vector<double>& weight, const std::vector<int64_t>& upper,
                                      int64_t total) {
  return allocate_budgets(weight, std::vector<int64_t>(weight.size(), 0), upper, total);
}

}  // namespace kvevict
