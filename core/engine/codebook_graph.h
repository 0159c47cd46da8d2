#pragma once
// SpindleKV's similarity graph (codebook.h), written once as a KVEVICT_HOST_DEVICE element body:
// over n unit vectors ([n][dim]), row a holds bit b (word b / 64, bit b % 64) iff a == b or
// cos(u_a, u_b) > theta, where the cosine is codebook_dot (core/decode/device_kv_codebook.h: an f32
// fma chain in element order; fmaf(x, y, z) == fmaf(y, x, z), so the graph is symmetric bit for
// bit). The host's 16-lane loop (codebook.cpp) computes the same chains; the twin builder (the
// engine's twin selector) and the CUDA builder (core/engine/cuda/codebook_graph.cu, one thread per
// word) run this body: every builder gives the same bits, so the same codebook.
#include <cstddef>
#include <cstdint>

#include "core/decode/device_kv_codebook.h"
#include "core/util/host_device.h"

namespace kvevict {

// Words of one row of the graph over n vectors.
KVEVICT_HOST_DEVICE inline size_t codebook_graph_words(int n) { return (static_cast<size_t>(n) + 63) / 64; }

// Word w of row a: bit j for vector b = 64 w + j below n. One thread's work on a device.
KVEVICT_HOST_DEVICE inline uint64_t codebook_graph_word(const float* unit, int n, int dim, double theta, int a,
                                                        int64_t w) {
  const float* ua = unit + static_cast<size_t>(a) * dim;
  const int64_t first = w * 64;
  const int64_t end = first + 64 < n ? first + 64 : n;
  uint64_t word = 0;
  for (int64_t b = first; b < end; ++b)
    if (b == a || codebook_dot(unit + static_cast<size_t>(b) * dim, ua, dim) > theta)
      word |= uint64_t{1} << (b - first);
  return word;
}

}  // namespace kvevict
