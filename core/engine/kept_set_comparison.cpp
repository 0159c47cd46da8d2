#include "core/engine/kept_set_comparison.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace kvevict {
namespace {

// A's latest selection of one head: its scores by position, and where its boundary lies: the
// best evicted score and the near-tie band, over the head's own ranking, or over the layer's when
// the heads were ranked jointly (Ada-KV).
struct HeadTrace {
  const HeadReport& report;
  double top_evicted = -INFINITY;
  double band = 0;
  HeadTrace(const HeadReport& r, const std::vector<HeadReport>& layer, double tol) : report(r) {
    double scale = 0;
    auto include = [&](const HeadReport& h) {
      for (size_t i = 0; i < h.selection_scores.size(); ++i) {
        const double s = h.selection_scores[i];
        if (!std::isfinite(s)) continue;
        scale = std::max(scale, std::abs(s));
        if (!kept_by(h, h.selection_positions[i])) top_evicted = std::max(top_evicted, s);
      }
    };
    if (r.selection_layer_wide) {
      for (const HeadReport& h : layer)
        if (h.selection_layer_wide) include(h);
    } else {
      include(r);
    }
    band = tol * std::max(scale, 1e-30);
  }
  static bool kept_by(const HeadReport& h, int32_t p) {
    return std::binary_search(h.kept_positions.begin(), h.kept_positions.end(), p);
  }
  // The score A's selection gave position p, or nullopt when it did not rank p.
  std::optional<double> score(int32_t p) const {
    const auto& pos = report.selection_positions;
    const auto it = std::find(pos.begin(), pos.end(), p);
    if (it == pos.end()) return std::nullopt;
    return report.selection_scores[static_cast<size_t>(it - pos.begin())];
  }
  bool kept(int32_t p) const { return kept_by(report, p); }
};

// Classifies one head's differing entries with A's trace; returns the first real one, or -1.
int64_t classify_entries(const HeadTrace& a, const std::vector<int32_t>& diff, KeptSetComparison& out) {
  int64_t first_real = -1;
  for (int32_t p : diff) {
    const std::optional<double> s = a.score(p);
    if (!s) {
      ++out.differing_unclassified;
      continue;
    }
    if (a.kept(p) ? *s <= a.top_evicted + a.band : *s >= a.top_evicted - a.band)
      ++out.differing_near_ties;
    else if (first_real < 0)
      first_real = p;
  }
  return first_real;
}

// Classifies the slots where one head's two orders (same set) differ; returns the first real slot, or -1.
int64_t classify_slots(const HeadTrace& a, const std::vector<int32_t>& oa, const std::vector<int32_t>& ob,
                       KeptSetComparison& out) {
  int64_t first_real = -1;
  for (size_t i = 0; i < oa.size() && i < ob.size(); ++i) {
    if (oa[i] == ob[i]) continue;
    ++out.slots_differing;
    const std::optional<double> sa = a.score(oa[i]), sb = a.score(ob[i]);
    if (!sa || !sb)
      ++out.slots_unclassified;
    else if (std::abs(*sa - *sb) <= a.band)
      ++out.slots_near_ties;
    else if (first_real < 0)
      first_real = static_cast<int64_t>(i);
  }
  return first_real;
}

std::string where(size_t l, size_t h) { return "layer " + std::to_string(l) + " head " + std::to_string(h); }

}  // namespace

CacheOrder cache_order(const KVCache& cache) {
  CacheOrder order(static_cast<size_t>(cache.n_layers()));
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      order[static_cast<size_t>(l)].emplace_back(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h));
  return order;
}

KeptSetComparison compare_kept_sets(const EvictionReport& a, const EvictionReport& b, double tol,
                                    const CacheOrder* order_a, const CacheOrder* order_b) {
  KeptSetComparison out;
  // The slot orders of head (l, h), when both were given and hold it.
  auto orders = [&](size_t l, size_t h) -> std::pair<const std::vector<int32_t>*, const std::vector<int32_t>*> {
    if (!order_a || !order_b || l >= order_a->size() || l >= order_b->size() || h >= (*order_a)[l].size() ||
        h >= (*order_b)[l].size())
      return {nullptr, nullptr};
    return {&(*order_a)[l][h], &(*order_b)[l][h]};
  };
  for (size_t l = 0; l < a.layers.size() && l < b.layers.size(); ++l) {
    int64_t joint_kept_a = 0, joint_kept_b = 0;  // heads ranked jointly: only their total is a budget
    for (size_t h = 0; h < a.layers[l].size() && h < b.layers[l].size(); ++h) {
      const HeadReport &ha = a.layers[l][h], &hb = b.layers[l][h];
      ++out.heads;
      out.entries_kept_a += ha.kept;
      if (ha.selection_layer_wide) {
        joint_kept_a += ha.kept, joint_kept_b += hb.kept;
        out.kept_count_moved += std::abs(ha.kept - hb.kept);
      } else {
        out.kept_count_shift += std::abs(ha.kept - hb.kept);
      }
      std::vector<int32_t> diff;
      std::set_symmetric_difference(ha.kept_positions.begin(), ha.kept_positions.end(), hb.kept_positions.begin(),
                                    hb.kept_positions.end(), std::back_inserter(diff));
      if (diff.empty()) {
        const auto [oa, ob] = orders(l, h);
        if (!oa || *oa == *ob) {
          ++out.heads_identical;
          continue;
        }
        ++out.heads_reordered;
        const int64_t slot = classify_slots(HeadTrace(ha, a.layers[l], tol), *oa, *ob, out);
        if (slot >= 0 && out.first_real.empty()) out.first_real = where(l, h) + " slot " + std::to_string(slot);
        continue;
      }
      out.entries_differing += static_cast<int64_t>(diff.size());
      if (ha.selection_scores.empty()) {
        ++out.heads_untraced;
        out.differing_unclassified += static_cast<int64_t>(diff.size());
        continue;
      }
      const int64_t real = classify_entries(HeadTrace(ha, a.layers[l], tol), diff, out);
      if (real >= 0 && out.first_real.empty()) out.first_real = where(l, h) + " position " + std::to_string(real);
    }
    out.kept_count_shift += std::abs(joint_kept_a - joint_kept_b);
  }
  return out;
}

bool KeptSetFork::observe(int step, const EvictionReport& a, const EvictionReport& b, const CacheOrder* order_a,
                          const CacheOrder* order_b) {
  if (parted()) return false;
  KeptSetComparison c = compare_kept_sets(a, b, tol_, order_a, order_b);
  if (c.identical()) return true;
  step_ = step;
  at_fork_ = std::move(c);
  return false;
}

std::string KeptSetFork::describe() const {
  if (!parted()) return "none";
  const KeptSetComparison& c = at_fork_;
  std::string s = "step " + std::to_string(step_) + ": " + std::to_string(c.entries_differing) + " entries (" +
                  std::to_string(c.differing_near_ties) + " near ties, " + std::to_string(c.differing_real()) +
                  " real, " + std::to_string(c.differing_unclassified) + " unclassified), kept counts shifted by " +
                  std::to_string(c.kept_count_shift);
  if (c.kept_count_moved > 0) s += ", " + std::to_string(c.kept_count_moved) + " kept moved between jointly ranked heads";
  if (c.heads_reordered > 0)
    s += ", " + std::to_string(c.slots_differing) + " slots reordered in " + std::to_string(c.heads_reordered) +
         " heads (" + std::to_string(c.slots_near_ties) + " near ties, " + std::to_string(c.slots_real()) + " real, " +
         std::to_string(c.slots_unclassified) + " unclassified)";
  if (!c.first_real.empty()) s += "; first real difference at " + c.first_real;
  return s;
}

}  // namespace kvevict
