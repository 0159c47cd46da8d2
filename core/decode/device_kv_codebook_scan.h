#pragma once
// The device's codebook append split in three steps, so that the scan of a long book runs on the
// whole device (core/decode/cuda/device_kv_codebook.cu) instead of one block per book: at 128K on
// the 8B geometry a book holds about 64K codes, and one block scanning them for every decoded row
// kept 8 of an H100's 132 SMs busy (a shared book: one). DeviceKvTwin runs the same three steps
// (device_kv_twin_codebook.cpp) with short chunks, so the CPU tests prove the split against the
// host's in-order scan (KVCache::append).
//   1. units: every query, (head h, row r, key or value), is made a unit vector once
//      (device_codebook_row_unit), into DeviceCodebookScan::units / norms;
//   2. chunks: every (query, chunk of chunk_codes codes below the book's count when the append
//      began) keeps its best match (codebook_scan), all in parallel;
//   3. per book, in the order of device_kv_codebook.h (heads, rows, key then value): a query's
//      match is the best of its chunks' and of the codes this append added before it (earlier rows
//      of the block, or earlier heads of a shared book), then committed and stored as before.
// Which code wins (the highest cosine above theta, then the lowest index; a NaN never) is one strict
// order over the candidates, so any grouping of the scan picks the in-order scan's code, and each
// cosine is the same codebook_dot: the same entries, bit for bit, for any chunk length.
#include <cstddef>
#include <cstdint>

#include "core/decode/device_kv_codebook.h"

namespace kvevict {

// A best match so far: code -1 is none (nothing above theta).
struct CodebookMatch {
  float dot = 0.0f;
  int32_t code = -1;
};

// The better of two matches by codebook_match_beats (either may be none).
KVEVICT_HOST_DEVICE inline CodebookMatch codebook_better(CodebookMatch best, CodebookMatch other, double theta) {
  return other.code >= 0 && codebook_match_beats(other.dot, other.code, theta, best.dot, best.code) ? other : best;
}

// The best match of `unit` among codes first, first + step, ... below end of `codes` ([n][d]).
KVEVICT_HOST_DEVICE inline CodebookMatch codebook_scan(const float* codes, int d, const float* unit, double theta,
                                                       int32_t first, int32_t end, int32_t step) {
  CodebookMatch best;
  for (int32_t c = first; c < end; c += step) {
    const float dot = codebook_dot(codes + static_cast<size_t>(c) * d, unit, d);
    if (codebook_match_beats(dot, c, theta, best.dot, best.code)) {
      best.dot = dot;
      best.code = c;
    }
  }
  return best;
}

// The split's scratch, sized by the host for the append (device memory on the device).
struct DeviceCodebookScan {
  float* pre = nullptr;                 // [queries][head_dim]: a key's RoPE^-1 on its way to its unit
  float* units = nullptr;               // [queries][head_dim]
  float* norms = nullptr;               // [queries]
  CodebookMatch* chunk_best = nullptr;  // [queries][chunks]
  int32_t chunk_codes = 0;              // codes per chunk (> 0)
  int chunks = 0;                       // chunks per query: they cover the code capacity
};

// Queries of an append: q = (h * rows + r) * 2 + (key ? 0 : 1).
KVEVICT_HOST_DEVICE inline int device_codebook_queries(const DeviceCodebookAppendArgs& a) {
  return a.n_heads * a.rows * 2;
}
KVEVICT_HOST_DEVICE inline int device_codebook_query(const DeviceCodebookAppendArgs& a, int h, int r, bool key) {
  return (h * a.rows + r) * 2 + (key ? 0 : 1);
}
KVEVICT_HOST_DEVICE inline int device_codebook_query_head(const DeviceCodebookAppendArgs& a, int q) {
  return q / (2 * a.rows);
}
KVEVICT_HOST_DEVICE inline bool device_codebook_query_key(int q) { return q % 2 == 0; }
KVEVICT_HOST_DEVICE inline int device_codebook_book_of(const DeviceCodebookAppendArgs& a, int h) {
  return a.shared ? 0 : h;
}
KVEVICT_HOST_DEVICE inline double device_codebook_theta(const DeviceCodebookAppendArgs& a, int h, bool key) {
  return key ? a.theta_key[h] : a.theta_value[h];
}

// Chunks that cover `capacity` codes.
KVEVICT_HOST_DEVICE inline int device_codebook_chunks(int64_t capacity, int32_t chunk_codes) {
  return static_cast<int>((capacity + chunk_codes - 1) / chunk_codes);
}

// Step 1 for query q (one thread's work).
KVEVICT_HOST_DEVICE inline void device_codebook_query_unit(const DeviceCodebookAppendArgs& a,
                                                          const DeviceCodebookScan& s, int q) {
  const int h = device_codebook_query_head(a, q), r = (q / 2) % a.rows;
  const size_t at = static_cast<size_t>(q) * a.head_dim;
  s.norms[q] = device_codebook_row_unit(a, h, r, device_codebook_query_key(q), s.pre + at, s.units + at);
}

// Step 2's codes for chunk k of a book holding `count` codes: [first, end), empty past the count.
KVEVICT_HOST_DEVICE inline void device_codebook_chunk_range(const DeviceCodebookScan& s, int k, int32_t count,
                                                           int32_t* first, int32_t* end) {
  const int64_t f = static_cast<int64_t>(k) * s.chunk_codes, e = f + s.chunk_codes;
  *first = f < count ? static_cast<int32_t>(f) : count;
  *end = e < count ? static_cast<int32_t>(e) : count;
}

// Step 2 for (query q, chunk k), from `lane` stepping by `lanes` (a thread's share; lane 0 of 1:
// the whole chunk in order): the best among the chunk's codes of the query's book, which holds
// `count` codes when the append begins.
KVEVICT_HOST_DEVICE inline CodebookMatch device_codebook_chunk_match(const DeviceCodebookAppendArgs& a,
                                                                    const DeviceCodebookScan& s, int q, int k,
                                                                    int32_t count, int lane, int lanes) {
  const int h = device_codebook_query_head(a, q);
  const bool key = device_codebook_query_key(q);
  int32_t first = 0, end = 0;
  device_codebook_chunk_range(s, k, count, &first, &end);
  return codebook_scan(device_codebook_codes(a, key, device_codebook_book_of(a, h)), a.head_dim,
                       s.units + static_cast<size_t>(q) * a.head_dim, device_codebook_theta(a, h, key), first + lane,
                       end, lanes);
}

// Step 3's part over the chunks (codes below the count when the append began): the best of query
// q's chunk matches k = lane, lane + lanes, ...
KVEVICT_HOST_DEVICE inline CodebookMatch device_codebook_chunks_best(const DeviceCodebookAppendArgs& a,
                                                                    const DeviceCodebookScan& s, int q, int lane,
                                                                    int lanes) {
  const int h = device_codebook_query_head(a, q);
  const double theta = device_codebook_theta(a, h, device_codebook_query_key(q));
  CodebookMatch best;
  for (int k = lane; k < s.chunks; k += lanes)
    best = codebook_better(best, s.chunk_best[static_cast<size_t>(q) * s.chunks + k], theta);
  return best;
}

// Step 3's part over the codes this append added so far (from `launch_count`, the book's count when
// the append began, to `count`, its count now), from `lane` stepping by `lanes`.
KVEVICT_HOST_DEVICE inline CodebookMatch device_codebook_new_codes_match(const DeviceCodebookAppendArgs& a,
                                                                        const DeviceCodebookScan& s, int q,
                                                                        int32_t launch_count, int32_t count, int lane,
                                                                        int lanes) {
  const int h = device_codebook_query_head(a, q);
  const bool key = device_codebook_query_key(q);
  return codebook_scan(device_codebook_codes(a, key, device_codebook_book_of(a, h)), a.head_dim,
                       s.units + static_cast<size_t>(q) * a.head_dim, device_codebook_theta(a, h, key),
                       launch_count + lane, count, lanes);
}

}  // namespace kvevict
