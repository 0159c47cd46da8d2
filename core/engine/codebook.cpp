#include "core/engine/codebook.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "core/engine/codebook_graph.h"
#include "core/util/error.h"

namespace kvevict {

namespace {

// Bytes of adjacency bits a codebook over n vectors may take (the graph is n x n bits).
constexpr double kMaxAdjacencyBytes = 4.0 * (1ull << 30);

uint64_t bit(int t) { return uint64_t{1} << (t % 64); }

// kLanes cosines side by side in the graph's rows, each its own explicit fma chain in element order
// (codebook_graph.h: the chain codebook_dot makes, which a device's builder runs too): one vector
// fma per element where the target has them (AVX-512, or AVX2 with FMA), else std::fma per lane
// (the same bits, slower). The compiler is not left to contract `dot += a * b` as it chooses.
constexpr int kLanes = 16;

// dot[j] = the fma chain of ua with column b + j of unit_t ([dim][n]), j < kLanes.
void lane_dots(const float* ua, const float* unit_t, int n, int b, int dim, float* dot) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < dim; ++i)
    acc = _mm512_fmadd_ps(_mm512_set1_ps(ua[i]), _mm512_loadu_ps(unit_t + static_cast<size_t>(i) * n + b), acc);
  _mm512_storeu_ps(dot, acc);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int i = 0; i < dim; ++i) {
    const float* column = unit_t + static_cast<size_t>(i) * n + b;
    const __m256 x = _mm256_set1_ps(ua[i]);
    lo = _mm256_fmadd_ps(x, _mm256_loadu_ps(column), lo);
    hi = _mm256_fmadd_ps(x, _mm256_loadu_ps(column + 8), hi);
  }
  _mm256_storeu_ps(dot, lo);
  _mm256_storeu_ps(dot + 8, hi);
#else
  for (int j = 0; j < kLanes; ++j) dot[j] = 0.0f;
  for (int i = 0; i < dim; ++i) {
    const float* column = unit_t + static_cast<size_t>(i) * n + b;
    for (int j = 0; j < kLanes; ++j) dot[j] = std::fma(ua[i], column[j], dot[j]);
  }
#endif
}

}  // namespace

// The graph's rows: row a holds every b with cos(u_a, u_b) > theta, and a itself. The upper
// triangle is filled in parallel, a row per task (each pair's cosine computed once, a < b, kLanes
// pairs side by side), then mirrored into the lower triangle.
std::vector<uint64_t> host_similarity_graph(const float* unit, int n, int dim, double theta) {
  const size_t words = codebook_graph_words(n);
  std::vector<uint64_t> adj(static_cast<size_t>(n) * words, 0);
  std::vector<float> unit_t(static_cast<size_t>(n) * dim);  // [dim][n]: kLanes vectors' element i side by side
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < dim; ++i) unit_t[static_cast<size_t>(i) * n + t] = unit[static_cast<size_t>(t) * dim + i];
  const double work = 0.5 * n * static_cast<double>(n) * dim;
#pragma omp parallel for schedule(dynamic, 16) if (work > (1 << 22))
  for (int a = 0; a < n; ++a) {
    uint64_t* row = adj.data() + static_cast<size_t>(a) * words;
    row[a / 64] |= bit(a);
    const float* ua = unit + static_cast<size_t>(a) * dim;
    int b = a + 1;
    // kLanes pairs at once: each its own chain, in element order, as independent chains the core
    // overlaps instead of waiting on one.
    for (; b + kLanes <= n; b += kLanes) {
      float dot[kLanes];
      lane_dots(ua, unit_t.data(), n, b, dim, dot);
      for (int j = 0; j < kLanes; ++j)
        if (dot[j] > theta) row[(b + j) / 64] |= bit(b + j);
    }
    for (; b < n; ++b)
      if (codebook_dot(unit + static_cast<size_t>(b) * dim, ua, dim) > theta) row[b / 64] |= bit(b);
  }
  for (int a = 0; a < n; ++a) {
    const uint64_t* row = adj.data() + static_cast<size_t>(a) * words;
    for (size_t w = static_cast<size_t>(a) / 64; w < words; ++w) {
      uint64_t bits = row[w];
      if (w == static_cast<size_t>(a) / 64) bits &= ~((bit(a) << 1) - 1);  // only b > a
      for (; bits; bits &= bits - 1) {
        const int b = static_cast<int>(w * 64) + std::countr_zero(bits);
        adj[static_cast<size_t>(b) * words + static_cast<size_t>(a) / 64] |= bit(a);
      }
    }
  }
  return adj;
}

void Codebook::reconstruct(float* out) const {
  for (int t = 0; t < n_vectors(); ++t) {
    const float* c = codes.data() + static_cast<size_t>(index[t]) * dim;
    for (int i = 0; i < dim; ++i) out[static_cast<size_t>(t) * dim + i] = c[i] * norm[t];
  }
}

Codebook build_codebook(const float* vectors, int n, int dim, double theta, const SimilarityGraphBuilder* graph) {
  if (n < 0 || dim <= 0) throw std::invalid_argument("build_codebook: bad shape");
  const size_t words = codebook_graph_words(n);
  const double bytes = static_cast<double>(n) * static_cast<double>(words) * sizeof(uint64_t);
  if (bytes > kMaxAdjacencyBytes)
    throw UsageError("SpindleKV's codebook over " + std::to_string(n) + " vectors needs " +
                     std::to_string(bytes / (1ull << 30)) + " GiB for its similarity graph, over the limit of " +
                     std::to_string(kMaxAdjacencyBytes / (1ull << 30)) +
                     " GiB (codebook_scope per_layer_across_heads joins every head of a layer; per_head or a smaller "
                     "budget needs less)");
  Codebook cb;
  cb.dim = dim;
  cb.index.assign(n, -1);
  cb.norm.assign(n, 0.0f);
  std::vector<float> unit(static_cast<size_t>(n) * dim, 0.0f);
  for (int t = 0; t < n; ++t) {
    const float* x = vectors + static_cast<size_t>(t) * dim;
    double s = 0;
    for (int i = 0; i < dim; ++i) s += static_cast<double>(x[i]) * x[i];
    const double m = std::sqrt(s);
    cb.norm[t] = static_cast<float>(m);
    if (m > 0)
      for (int i = 0; i < dim; ++i) unit[static_cast<size_t>(t) * dim + i] = static_cast<float>(x[i] / m);
  }
  const std::vector<uint64_t> adj =
      graph ? graph->build(unit.data(), n, dim, theta) : host_similarity_graph(unit.data(), n, dim, theta);
  if (adj.size() != static_cast<size_t>(n) * words)
    throw std::logic_error("build_codebook: a similarity graph of " + std::to_string(adj.size()) + " words for " +
                           std::to_string(n) + " vectors");
  std::vector<int> degree(n, 0);  // the diagonal included
  for (int a = 0; a < n; ++a)
    for (size_t w = 0; w < words; ++w) degree[a] += std::popcount(adj[static_cast<size_t>(a) * words + w]);
  // The remaining node of highest degree, ties to the lowest index: a max-heap of (degree, -index)
  // whose entries go stale as degrees fall (each fall pushes the new one).
  std::priority_queue<std::pair<int, int>> heap;
  for (int t = 0; t < n; ++t) heap.push({degree[t], -t});
  std::vector<char> alive(n, 1);
  std::vector<int> removed;
  int remaining = n;
  while (remaining > 0) {
    while (!alive[-heap.top().second] || heap.top().first != degree[-heap.top().second]) heap.pop();
    const int c = -heap.top().second;
    heap.pop();
    const int32_t code = cb.n_codes();
    cb.codes.insert(cb.codes.end(), unit.begin() + static_cast<size_t>(c) * dim,
                    unit.begin() + static_cast<size_t>(c + 1) * dim);
    // c and its remaining neighbours refer to the new code and leave the graph.
    removed.clear();
    const uint64_t* row_c = adj.data() + static_cast<size_t>(c) * words;
    for (size_t w = 0; w < words; ++w)
      for (uint64_t bits = row_c[w]; bits; bits &= bits - 1) {
        const int t = static_cast<int>(w * 64) + std::countr_zero(bits);
        if (!alive[t]) continue;
        removed.push_back(t);
        cb.index[t] = code;
      }
    for (int t : removed) alive[t] = 0;
    remaining -= static_cast<int>(removed.size());
    // Their remaining neighbours lose an edge each (the graph is symmetric: u's row holds t iff
    // t's row holds u).
    for (int t : removed) {
      const uint64_t* row_t = adj.data() + static_cast<size_t>(t) * words;
      for (size_t w = 0; w < words; ++w)
        for (uint64_t bits = row_t[w]; bits; bits &= bits - 1) {
          const int u = static_cast<int>(w * 64) + std::countr_zero(bits);
          if (!alive[u]) continue;
          heap.push({--degree[u], -u});
        }
    }
  }
  return cb;
}

}  // namespace kvevict
