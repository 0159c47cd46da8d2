#pragma once
// One head's selection as block stages (device_selection_block.h), run by one block per head on
// the GPU and by the CPU twin: select_head's result (core/engine/selection.h), and the per-head
// parts of select_layer_adaptive. Plain parameter structs shared by the kernels, the twin and the
// host planning (device_selection_twin.h).
//
// Entry flags (one byte per entry, workspace): which set an entry ended in.
//   kCandidate  not protected, not (yet) kept      kProtDropped  protected, beyond the budget
//   kProtKept   protected and kept                  kTop / kRandom  kept by top-k / by Gumbel sample
#include <cstdint>

#include "core/engine/counter_rng.h"
#include "core/engine/device_selection_block.h"

namespace kvevict::devsel {

enum : uint8_t { kCandidate = 0, kProtDropped = 1, kProtKept = 2, kTop = 3, kRandom = 4 };

// One head's selection rule: a HeadSelectionSpec (validated) or an Ada-KV head.
struct HeadParams {
  int64_t budget = 0;  // >= 0; counts the protected entries
  int32_t protect_first = 0, protect_recent = 0;
  double random_share = 0.0, temperature = 1.0;
  uint64_t seed = 0;
  int32_t layer = 0, kv_head = 0;
  int32_t score_order = 0;
  // -1: select_head's branches (keep all when budget >= length, protected only when they fill it,
  // else top + random). >= 0: Ada-KV's head step: exactly this many top-k candidates plus the
  // protected entries truncated to `budget`, no random share.
  int64_t ada_top = -1;
};

// Per-head results of the protection stage (workspace; read by the Ada-KV joint stage and host).
struct HeadState {
  int32_t n_sinks = 0, n_protected = 0, n_protected_kept = 0, n_candidates = 0;
  int32_t ada_free = 0;  // Ada-KV: clamp(budget - protected kept, 0, candidates)
  uint32_t ada_count = 0;  // Ada-KV: the head's share of the joint top-k
};

// One head's inputs, workspace and outputs (device pointers in a kernel, host ones in the twin).
struct HeadIo {
  const float* scores = nullptr;
  const int32_t* positions = nullptr;
  int32_t length = 0;
  uint8_t* flags = nullptr;
  double* gumbel = nullptr;
  int32_t *list_a = nullptr, *list_b = nullptr;
  unsigned* counts = nullptr;  // [kSelBins * kSelThreads]
  HeadState* state = nullptr;
  int32_t* kept = nullptr;  // capacity >= length
  int32_t* kept_count = nullptr;
};

// Flags the protected entries: sinks (position < protect_first) and the protect_recent newest;
// kept among them by selection.h's priority (sinks oldest first, then recent newest first) up to
// min(protected, budget). The recent window's non-sink part is the newest min(recent, non-sinks)
// entries, because sinks are the oldest ones; the same holds for its truncation.
KVEVICT_SEL_EXEC_CHECK
template <class Exec>
KVEVICT_HOST_DEVICE void stage_protect(Exec& ex, SelShared& sh, const HeadIo& io, const HeadParams& hp) {
  const int64_t n = io.length;
  const int32_t pf = hp.protect_first;
  ex.phase([&](int t) {
    for (int64_t i = t; i < n; i += kSelThreads) io.flags[i] = io.positions[i] < pf ? kProtDropped : kCandidate;
  });
  const unsigned n_sinks = count_if(ex, sh, n, [&](int64_t i) { return io.positions[i] < pf; });
  const int64_t recent = hp.protect_recent > 0 ? hp.protect_recent : 0;
  const int64_t n_recent = recent < n - n_sinks ? recent : n - n_sinks;
  auto is_cand = [&](int64_t i) { return io.flags[i] == kCandidate; };
  auto newest = [&](int64_t i) { return newest_key(io.positions[i]); };
  auto drop = [&](int64_t i) { io.flags[i] = kProtDropped; };
  select_mark(ex, sh, n, 4, n_recent, is_cand, newest, drop);
  const int64_t n_prot = n_sinks + n_recent;
  const int64_t keep = n_prot < hp.budget ? n_prot : hp.budget;
  auto keep_it = [&](int64_t i) { io.flags[i] = kProtKept; };
  auto dropped_sink = [&](int64_t i) { return io.flags[i] == kProtDropped && io.positions[i] < pf; };
  auto dropped_recent = [&](int64_t i) { return io.flags[i] == kProtDropped && io.positions[i] >= pf; };
  const int64_t from_sinks = keep < static_cast<int64_t>(n_sinks) ? keep : n_sinks;
  select_mark(ex, sh, n, 4, from_sinks, dropped_sink, [&](int64_t i) { return oldest_key(io.positions[i]); },
              keep_it);
  select_mark(ex, sh, n, 4, keep - from_sinks, dropped_recent, newest, keep_it);
  ex.phase([&](int t) {
    if (t != 0) return;
    io.state->n_sinks = static_cast<int32_t>(n_sinks);
    io.state->n_protected = static_cast<int32_t>(n_prot);
    io.state->n_protected_kept = static_cast<int32_t>(keep);
    io.state->n_candidates = static_cast<int32_t>(n - n_prot);
    const int64_t free = hp.budget - keep;
    io.state->ada_free = static_cast<int32_t>(free < n - n_prot ? free : n - n_prot);
    io.state->ada_count = 0;
  });
}

// Gathers the entries flagged `flag`, sorts them into the rank order of `key` and appends them to
// the kept list at `offset`; returns the new end.
KVEVICT_SEL_EXEC_CHECK
template <class Exec, class Pred, class Key>
KVEVICT_HOST_DEVICE unsigned append_sorted(Exec& ex, SelShared& sh, const HeadIo& io, unsigned offset, Pred pred,
                                           int n_digits, Key key) {
  const unsigned m = gather(ex, sh, io.length, pred, io.list_a);
  if (m == 0) return offset;  // block-uniform (the scan's total)
  // Already in rank order (the usual case for a positional kept list: a cache kept in position
  // order gathers its entries oldest first)? The stable sort would leave the list as it is, so one
  // pass over adjacent pairs replaces its digit passes.
  const unsigned out_of_order = count_if(ex, sh, int64_t{m} - 1, [&](int64_t j) {
    return key_greater(key(io.list_a[j + 1]), key(io.list_a[j]));
  });
  const int32_t* sorted =
      out_of_order == 0 ? io.list_a : radix_sort_ranked(ex, sh, io.list_a, io.list_b, m, n_digits, key, io.counts);
  ex.phase([&](int t) {
    for (unsigned j = t; j < m; j += kSelThreads) io.kept[offset + j] = sorted[j];
  });
  return offset + m;
}

// Writes the kept list: positional (ascending original position), or score order (top-k by rank,
// then the sampled entries by Gumbel key, then the protected ones by position).
KVEVICT_SEL_EXEC_CHECK
template <class Exec>
KVEVICT_HOST_DEVICE void stage_assemble(Exec& ex, SelShared& sh, const HeadIo& io, bool score_order) {
  auto oldest = [&](int64_t i) { return oldest_key(io.positions[i]); };
  unsigned end = 0;
  if (!score_order) {
    end = append_sorted(ex, sh, io, 0, [&](int64_t i) { return io.flags[i] >= kProtKept; }, 4, oldest);
  } else {
    end = append_sorted(ex, sh, io, end, [&](int64_t i) { return io.flags[i] == kTop; }, 8,
                        [&](int64_t i) { return score_key(io.scores[i], io.positions[i]); });
    end = append_sorted(ex, sh, io, end, [&](int64_t i) { return io.flags[i] == kRandom; }, 12,
                        [&](int64_t i) { return gumbel_rank_key(io.gumbel[i], io.positions[i]); });
    end = append_sorted(ex, sh, io, end, [&](int64_t i) { return io.flags[i] == kProtKept; }, 4, oldest);
  }
  ex.phase([&](int t) {
    if (t == 0) *io.kept_count = static_cast<int32_t>(end);
  });
}

// The budget >= length branch of select_head: every entry, in cache order (score order) or by
// position.
KVEVICT_SEL_EXEC_CHECK
template <class Exec>
KVEVICT_HOST_DEVICE void stage_keep_all(Exec& ex, SelShared& sh, const HeadIo& io, bool score_order) {
  const int64_t n = io.length;
  if (score_order) {
    ex.phase([&](int t) {
      for (int64_t i = t; i < n; i += kSelThreads) io.kept[i] = static_cast<int32_t>(i);
      if (t == 0) *io.kept_count = static_cast<int32_t>(n);
    });
    return;
  }
  ex.phase([&](int t) {
    for (int64_t i = t; i < n; i += kSelThreads) io.flags[i] = kProtKept;
  });
  stage_assemble(ex, sh, io, false);
}

// Top-k over the candidates (tie rule) and, for select_head, NACL's Gumbel sample over the rest.
KVEVICT_SEL_EXEC_CHECK
template <class Exec>
KVEVICT_HOST_DEVICE void stage_choose(Exec& ex, SelShared& sh, const HeadIo& io, const HeadParams& hp, int64_t n_top,
                                      int64_t n_random) {
  const int64_t n = io.length;
  auto is_cand = [&](int64_t i) { return io.flags[i] == kCandidate; };
  select_mark(ex, sh, n, 8, n_top, is_cand, [&](int64_t i) { return score_key(io.scores[i], io.positions[i]); },
              [&](int64_t i) { io.flags[i] = kTop; });
  if (n_random <= 0) return;
  ex.phase([&](int t) {
    for (int64_t i = t; i < n; i += kSelThreads) {
      if (io.flags[i] != kCandidate) continue;
      const float u = counter_uniform(hp.seed, hp.layer, hp.kv_head, io.positions[i], kSamplingStream);
      io.gumbel[i] = gumbel_value(io.scores[i], u, hp.temperature);
    }
  });
  select_mark(ex, sh, n, 12, n_random, is_cand,
              [&](int64_t i) { return gumbel_rank_key(io.gumbel[i], io.positions[i]); },
              [&](int64_t i) { io.flags[i] = kRandom; });
}

// select_head for one head (hp.ada_top < 0), or Ada-KV's per-head step after the joint stage
// (hp.ada_top >= 0; stage_protect must already have run on this head).
KVEVICT_SEL_EXEC_CHECK
template <class Exec>
KVEVICT_HOST_DEVICE void select_head_block(Exec& ex, SelShared& sh, const HeadIo& io, const HeadParams& hp) {
  const bool score_order = hp.score_order != 0;
  if (hp.ada_top >= 0) {
    stage_choose(ex, sh, io, hp, hp.ada_top, 0);
    stage_assemble(ex, sh, io, score_order);
    return;
  }
  if (hp.budget >= io.length) {
    stage_keep_all(ex, sh, io, score_order);
    return;
  }
  stage_protect(ex, sh, io, hp);
  const int64_t n_prot = io.state->n_protected;
  if (n_prot >= hp.budget) {
    stage_assemble(ex, sh, io, false);  // select_head returns the truncated protected set by position
    return;
  }
  const int64_t free = hp.budget - n_prot;
  // floor(random_share * free) in double, as select_head computes it (random_share in [0, 1]).
  int64_t n_random = static_cast<int64_t>(floor(hp.random_share * static_cast<double>(free)));
  n_random = n_random < 0 ? 0 : (n_random > free ? free : n_random);
  stage_choose(ex, sh, io, hp, free - n_random, n_random);
  stage_assemble(ex, sh, io, score_order);
}

// One layer's inputs: head h's scores at scores + score_offset[h] and its positions at
// positions + position_offset[h], length[h] entries each (ragged allowed).
inline constexpr int kSelMaxHeads = 128;  // = kDeviceKvMaxHeads; also bounds the joint key's head digit
struct SelLayerInput {
  const float* scores = nullptr;
  const int32_t* positions = nullptr;
  int n_heads = 0;
  int32_t max_length = 0;  // >= every length[h]
  int64_t score_offset[kSelMaxHeads] = {};
  int64_t position_offset[kSelMaxHeads] = {};
  int32_t length[kSelMaxHeads] = {};
};
// Kept lists: head h's at kept + h * kept_stride (kept_stride >= max_length), count in kept_count[h].
struct SelOutput {
  int32_t* kept = nullptr;
  int64_t kept_stride = 0;
  int32_t* kept_count = nullptr;
};
// Scratch of one layer: per head, flags [L] bytes, Gumbel keys [L] doubles, two index lists [L],
// sort counters [kSelBins * kSelThreads] and a HeadState, L = max_length (head_bytes apart).
struct SelWorkspace {
  unsigned char* base = nullptr;
  int64_t head_bytes = 0;
};
KVEVICT_HOST_DEVICE inline int64_t sel_align8(int64_t x) { return (x + 7) / 8 * 8; }
KVEVICT_HOST_DEVICE inline int64_t sel_head_bytes(int32_t max_length) {
  const int64_t L = max_length;
  return sel_align8(L) + 8 * L + 2 * sel_align8(4 * L) + 4 * int64_t{kSelBins} * kSelThreads +
         sel_align8(static_cast<int64_t>(sizeof(HeadState)));
}
KVEVICT_HOST_DEVICE inline HeadIo head_io(const SelLayerInput& in, const SelWorkspace& ws, const SelOutput& out,
                                          int h) {
  const int64_t L = in.max_length;
  unsigned char* p = ws.base + h * ws.head_bytes;
  HeadIo io;
  io.scores = in.scores + in.score_offset[h];
  io.positions = in.positions + in.position_offset[h];
  io.length = in.length[h];
  io.flags = p;
  p += sel_align8(L);
  io.gumbel = reinterpret_cast<double*>(p);
  p += 8 * L;
  io.list_a = reinterpret_cast<int32_t*>(p);
  p += sel_align8(4 * L);
  io.list_b = reinterpret_cast<int32_t*>(p);
  p += sel_align8(4 * L);
  io.counts = reinterpret_cast<unsigned*>(p);
  p += 4 * int64_t{kSelBins} * kSelThreads;
  io.state = reinterpret_cast<HeadState*>(p);
  io.kept = out.kept + h * out.kept_stride;
  io.kept_count = out.kept_count + h;
  return io;
}

// Ada-KV's joint ranking (one block over the whole layer, after stage_protect on every head):
// marks nothing, but counts into state->ada_count how many of the top sum(ada_free) candidates
// of the layer (tie rule, then lower head) each head holds.
KVEVICT_SEL_EXEC_CHECK
template <class Exec>
KVEVICT_HOST_DEVICE void stage_joint(Exec& ex, SelShared& sh, const SelLayerInput& in, const SelWorkspace& ws,
                                     const SelOutput& out) {
  int64_t k = 0;
  for (int h = 0; h < in.n_heads; ++h) k += head_io(in, ws, out, h).state->ada_free;
  // Entry i is entry i % L of head i / L. check_selection_input keeps n_heads * L below 2^31, so
  // the division is a 32-bit one: a 64-bit division is a long emulated sequence on a GPU, and these
  // run for every entry of every pass over the layer.
  const uint32_t L = static_cast<uint32_t>(in.max_length);
  auto elig = [&](int64_t i) {
    const uint32_t u = static_cast<uint32_t>(i);
    const HeadIo io = head_io(in, ws, out, static_cast<int>(u / L));
    const int64_t j = u % L;
    return j < io.length && io.flags[j] == kCandidate;
  };
  auto key = [&](int64_t i) {
    const uint32_t u = static_cast<uint32_t>(i);
    const int h = static_cast<int>(u / L);
    const HeadIo io = head_io(in, ws, out, h);
    const int64_t j = u % L;
    return joint_key(io.scores[j], io.positions[j], h);
  };
  auto count = [&](int64_t i) {
    sel_atomic_add(&head_io(in, ws, out, static_cast<int>(static_cast<uint32_t>(i) / L)).state->ada_count, 1u);
  };
  select_mark(ex, sh, int64_t{in.n_heads} * L, 9, k, elig, key, count);
}

}  // namespace kvevict::devsel
