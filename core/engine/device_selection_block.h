#pragma once
// Block algorithms of device-side selection over an index domain [0, n), written once for the
// kernel and the CPU twin (execution model and keys: device_selection_elements.h):
//   block_exclusive_scan  sh.own[t] -> sh.scan[0][t] (exclusive prefix), sh.total
//   count_if              how many i satisfy pred
//   select_mark           marks exactly min(k, #eligible) eligible entries: the k largest keys
//   gather                stable (ascending i) compaction of the i satisfying pred
//   radix_sort_ranked     LSD radix sort of an index list into rank order (largest key first)
// Determinism: every result is independent of thread scheduling, except which of several
// eligible entries with the SAME key select_mark claims; the key kinds make the keys of one
// head's entries distinct as long as the head's positions are distinct (the cache's invariant).
#include "core/engine/device_selection_elements.h"

#if defined(__CUDACC__)
#define KVEVICT_SEL_EXEC_CHECK _Pragma("nv_exec_check_disable")
#else
#define KVEVICT_SEL_EXEC_CHECK
#endif

namespace kvevict::devsel {

KVEVICT_SEL_EXEC_CHECK
template <class Exec>
KVEVICT_HOST_DEVICE void block_exclusive_scan(Exec& ex, SelShared& sh) {
  ex.phase([&](int t) { sh.scan[0][t] = sh.own[t]; });
  int p = 0;
  // Hillis-Steele inclusive scan, ping-ponging between the two rows.
  for (int off = 1; off < kSelThreads; off *= 2) {
    ex.phase([&](int t) {
      const unsigned* src = sh.scan[p];
      sh.scan[1 - p][t] = src[t] + (t >= off ? src[t - off] : 0u);
    });
    p = 1 - p;
  }
  ex.phase([&](int t) {
    // Each thread touches only its own element of both rows, so in-place is safe.
    const unsigned inclusive = sh.scan[p][t];
    if (t == kSelThreads - 1) sh.total = inclusive;
    sh.scan[0][t] = inclusive - sh.own[t];
  });
}

KVEVICT_SEL_EXEC_CHECK
template <class Exec, class Pred>
KVEVICT_HOST_DEVICE unsigned count_if(Exec& ex, SelShared& sh, int64_t n, Pred pred) {
  ex.phase([&](int t) {
    if (t == 0) sh.count = 0;
  });
  ex.phase([&](int t) {
    unsigned c = 0;
    for (int64_t i = t; i < n; i += kSelThreads) c += pred(i) ? 1u : 0u;
    if (c) sel_atomic_add(&sh.count, c);
  });
  return sh.count;
}

// Radix select of the k-th largest key among eligible entries, digit by digit from the most
// significant: the histogram of the next digit over the entries matching the fixed prefix says
// which bucket holds rank `remaining`. Afterwards sh.prefix is the threshold key and
// sh.remaining how many entries EQUAL to it belong to the top k (1 when keys are distinct).
KVEVICT_SEL_EXEC_CHECK
template <class Exec, class Elig, class Key>
KVEVICT_HOST_DEVICE void radix_threshold(Exec& ex, SelShared& sh, int64_t n, int n_digits, unsigned k, Elig elig,
                                         Key key) {
  ex.phase([&](int t) {
    if (t == 0) {
      sh.prefix = SelKey{};
      sh.remaining = k;
      sh.claim = 0;
    }
  });
  for (int d = 0; d < n_digits; ++d) {
    ex.phase([&](int t) {
      for (int b = t; b < kSelBins; b += kSelThreads) sh.hist[b] = 0;
    });
    ex.phase([&](int t) {
      // Runs of equal digits are added at once: heavily tied scores would otherwise serialise
      // every thread of the block on one shared counter.
      unsigned run_bin = 0, run = 0;
      for (int64_t i = t; i < n; i += kSelThreads) {
        if (!elig(i)) continue;
        const SelKey kk = key(i);
        if (!key_equal(key_top(kk, d), sh.prefix)) continue;
        const unsigned bin = key_digit(kk, d);
        if (run != 0 && bin != run_bin) {
          sel_atomic_add(&sh.hist[run_bin], run);
          run = 0;
        }
        run_bin = bin;
        ++run;
      }
      if (run != 0) sel_atomic_add(&sh.hist[run_bin], run);
    });
    ex.phase([&](int t) {
      if (t != 0) return;
      unsigned above = 0;
      for (int b = kSelBins - 1; b >= 0; --b) {
        if (above + sh.hist[b] >= sh.remaining) {
          sh.prefix = key_with_digit(sh.prefix, d, static_cast<unsigned>(b));
          sh.remaining -= above;
          return;
        }
        above += sh.hist[b];
      }
    });
  }
}

// Marks the min(k, #eligible) eligible entries with the largest keys (mark(i) is called once for
// each; it may make i ineligible). Returns how many were marked.
KVEVICT_SEL_EXEC_CHECK
template <class Exec, class Elig, class Key, class Mark>
KVEVICT_HOST_DEVICE unsigned select_mark(Exec& ex, SelShared& sh, int64_t n, int n_digits, int64_t k, Elig elig,
                                         Key key, Mark mark) {
  if (k <= 0) return 0;
  const unsigned n_eligible = count_if(ex, sh, n, elig);
  if (k >= n_eligible) {
    ex.phase([&](int t) {
      for (int64_t i = t; i < n; i += kSelThreads)
        if (elig(i)) mark(i);
    });
    return n_eligible;
  }
  radix_threshold(ex, sh, n, n_digits, static_cast<unsigned>(k), elig, key);
  ex.phase([&](int t) {
    for (int64_t i = t; i < n; i += kSelThreads) {
      if (!elig(i)) continue;
      const SelKey kk = key(i);
      if (key_greater(kk, sh.prefix) || (key_equal(kk, sh.prefix) && sel_atomic_add(&sh.claim, 1u) < sh.remaining))
        mark(i);
    }
  });
  return static_cast<unsigned>(k);
}

// Writes the i in [0, n) satisfying pred to out in ascending order; returns their number.
KVEVICT_SEL_EXEC_CHECK
template <class Exec, class Pred>
KVEVICT_HOST_DEVICE unsigned gather(Exec& ex, SelShared& sh, int64_t n, Pred pred, int32_t* out) {
  ex.phase([&](int t) {
    int64_t b, e;
    thread_chunk(n, t, b, e);
    unsigned c = 0;
    for (int64_t i = b; i < e; ++i) c += pred(i) ? 1u : 0u;
    sh.own[t] = c;
  });
  block_exclusive_scan(ex, sh);
  ex.phase([&](int t) {
    int64_t b, e;
    thread_chunk(n, t, b, e);
    unsigned w = sh.scan[0][t];
    for (int64_t i = b; i < e; ++i)
      if (pred(i)) out[w++] = static_cast<int32_t>(i);
  });
  return sh.total;
}

// Sorts the n indices in `a` into rank order of key(index) (largest first; stable), using `b` and
// `counts` ([kSelBins * kSelThreads]) as scratch; returns the buffer holding the result. LSD: one
// stable counting pass per digit from the least significant; thread t scatters its contiguous
// chunk through its own column of per-(digit, thread) offsets, laid out digit-major so that one
// exclusive scan over them yields every thread's stable start for every digit.
KVEVICT_SEL_EXEC_CHECK
template <class Exec, class Key>
KVEVICT_HOST_DEVICE int32_t* radix_sort_ranked(Exec& ex, SelShared& sh, int32_t* a, int32_t* b, unsigned n,
                                               int n_digits, Key key, unsigned* counts) {
  // Nothing to order (n is block-uniform: every thread leaves together). Without this an empty
  // group (score order's sampled entries when there is no random share) paid every digit pass.
  if (n <= 1) return a;
  int32_t* src = a;
  int32_t* dst = b;
  // The kSelBins * kSelThreads counters are scanned in kSelThreads equal segments, one per thread.
  constexpr int kPerThread = kSelBins;
  for (int d = n_digits - 1; d >= 0; --d) {
    ex.phase([&](int t) {
      for (int bin = 0; bin < kSelBins; ++bin) counts[bin * kSelThreads + t] = 0;
      int64_t lo, hi;
      thread_chunk(n, t, lo, hi);
      for (int64_t j = lo; j < hi; ++j) ++counts[(255u - key_digit(key(src[j]), d)) * kSelThreads + t];
    });
    ex.phase([&](int t) {
      unsigned s = 0;
      for (int j = 0; j < kPerThread; ++j) s += counts[t * kPerThread + j];
      sh.own[t] = s;
    });
    block_exclusive_scan(ex, sh);
    ex.phase([&](int t) {
      unsigned run = sh.scan[0][t];
      for (int j = 0; j < kPerThread; ++j) {
        const unsigned v = counts[t * kPerThread + j];
        counts[t * kPerThread + j] = run;
        run += v;
      }
    });
    ex.phase([&](int t) {
      int64_t lo, hi;
      thread_chunk(n, t, lo, hi);
      for (int64_t j = lo; j < hi; ++j) dst[counts[(255u - key_digit(key(src[j]), d)) * kSelThreads + t]++] = src[j];
    });
    int32_t* tmp = src;
    src = dst;
    dst = tmp;
  }
  return src;
}

}  // namespace kvevict::devsel
