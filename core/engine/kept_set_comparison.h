#pragma once
// Kept-set agreement between two runs of one policy (CPU vs GPU, f16 vs f32 cache): which kept
// entries differ, and whether each difference is a near tie that the two runs' rounding may flip.
//
// Why near ties: two backends compute the same scores to within rounding (fp16 keys from different
// GEMMs, sums in another order), so an entry whose score lies within that rounding of a top-k
// boundary may be kept by one run and not the other. That is not a bug; a difference elsewhere is.
//
// Why slot order: a policy that keeps its survivors in score order (CAKE's kept_order: score) and
// pools along cache slots at decode time makes the order part of the state. Two entries with
// near-equal scores may be ordered either way; the next decode step's pooled scores then differ
// although the sets are equal. So the order is compared too, and a swap classified the same way.
//
// Why a fork: once the two caches differ, every later step attends over different entries, so the
// runs part for good (CAKE's decode pooling runs along cache slots, which spreads one flip to the
// neighbouring slots' scores). Only the first divergence says anything about the backends;
// KeptSetFork finds it from per-step reports.
#include <cstdint>
#include <string>
#include <vector>

#include "core/engine/engine.h"

namespace kvevict {

// Relative score band of a near tie: scores are sums of softmax probabilities whose exponents carry
// the logits' relative error, and the CPU/GPU logit tolerance is 0.02 * (1 + max |logit|)
// (tests/core/cuda_decoder_test.cpp derives it), so a band of 1e-2 of the head's largest |score|
// is of that order.
inline constexpr double kNearTieScoreTolerance = 1e-2;

struct KeptSetComparison {
  int heads = 0;                  // (layer, stored head) pairs compared
  int heads_identical = 0;        // with the same kept positions
  int heads_untraced = 0;         // differing heads without A's selection trace (layer-wide rules)
  int64_t entries_kept_a = 0;     // kept entries in A, all heads
  int64_t kept_count_shift = 0;   // sum over heads of |kept_a - kept_b| (jointly ranked heads: per layer)
  int64_t kept_count_moved = 0;   // sum over jointly ranked heads of |kept_a - kept_b| (not a budget)
  int64_t entries_differing = 0;  // positions kept by exactly one of the two runs
  int64_t differing_near_ties = 0;    // ... within the band of A's top-k boundary
  int64_t differing_unclassified = 0;  // ... not ranked by A's latest selection of that head
  // With slot orders: heads holding the same set in another order, and the slots that differ there.
  int heads_reordered = 0;
  int64_t slots_differing = 0;
  int64_t slots_near_ties = 0;      // ... holding two entries whose A scores lie within the band
  int64_t slots_unclassified = 0;   // ... holding an entry A's latest selection did not rank
  std::string first_real;  // "layer L head H position P" (or "... slot S") of the first real difference
  int64_t differing_real() const { return entries_differing - differing_near_ties - differing_unclassified; }
  int64_t slots_real() const { return slots_differing - slots_near_ties - slots_unclassified; }
  bool identical() const { return entries_differing == 0 && kept_count_shift == 0 && slots_differing == 0; }
  // Every difference is a near tie and no head moved budget: rounding, not a bug.
  bool only_near_ties() const {
    return kept_count_shift == 0 && differing_near_ties == entries_differing && slots_near_ties == slots_differing;
  }
};

// Positions in cache slot order, [layer][stored head]: what a decode step's slot-wise signals see.
using CacheOrder = std::vector<std::vector<std::vector<int32_t>>>;
CacheOrder cache_order(const KVCache& cache);

// Compares A's and B's kept positions per (layer, stored head) and classifies each differing entry
// with A's traced selection (EngineOptions::trace_selection on A): a near tie when it lies within
// `tol` x (the head's largest |score|) of A's boundary on its own side (an entry A kept and B
// dropped scores at most A's best evicted score + band; one A dropped and B kept at least that
// score - band), so a swap of two such entries is a score gap of at most 2 band. A differing entry
// A's latest selection did not rank (evicted at an earlier step) is unclassified. Heads ranked
// jointly (HeadReport::selection_layer_wide: Ada-KV) share the layer's boundary and band, and only
// their layer total is a budget: entries moving between them are classified like any other (an
// entry kept by the floor of a head below the joint boundary would be called real: conservative).
// With both slot
// orders, a head holding the same set in another order counts each slot that differs: a near tie
// when A scored its two entries within the band of each other.
KeptSetComparison compare_kept_sets(const EvictionReport& a, const EvictionReport& b,
                                    double tol = kNearTieScoreTolerance, const CacheOrder* order_a = nullptr,
                                    const CacheOrder* order_b = nullptr);

// Follows two runs of one policy fed the same tokens, step by step (step 0: the prefill; step s:
// after the s-th decode call), and records the first step where their kept sets differ, classified
// as above with the reports of that step.
class KeptSetFork {
 public:
  explicit KeptSetFork(double tol = kNearTieScoreTolerance) : tol_(tol) {}
  // Compares the reports (and slot orders, when given) after `step`; returns true while the runs
  // still hold the same caches. After the fork it compares nothing more and returns false.
  bool observe(int step, const EvictionReport& a, const EvictionReport& b, const CacheOrder* order_a = nullptr,
               const CacheOrder* order_b = nullptr);
  bool parted() const { return step_ >= 0; }
  int step() const { return step_; }                      // -1 while not parted
  const KeptSetComparison& at_fork() const { return at_fork_; }
  std::string describe() const;  // "none" or "step S: N entries (n near ties, r real, ...)..."

 private:
  double tol_;
  int step_ = -1;
  KeptSetComparison at_fork_;
};

}  // namespace kvevict
