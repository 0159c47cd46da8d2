#include "core/engine/codebook.h"

#include <cmath>
#include <stdexcept>

namespace kvevict {

void Codebook::reconstruct(float* out) const {
  for (int t = 0; t < n_vectors(); ++t) {
    const float* c = codes.data() + static_cast<size_t>(index[t]) * dim;
    for (int i = 0; i < dim; ++i) out[static_cast<size_t>(t) * dim + i] = c[i] * norm[t];
  }
}

Codebook build_codebook(const float* vectors, int n, int dim, double theta) {
  if (n < 0 || dim <= 0) throw std::invalid_argument("build_codebook: bad shape");
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
  // Adjacency as a bit matrix; degree counts include the diagonal.
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  std::vector<uint64_t> adj(static_cast<size_t>(n) * words, 0);
  std::vector<int> degree(n, 0);
  for (int a = 0; a < n; ++a) {
    adj[a * words + a / 64] |= uint64_t{1} << (a % 64);
    degree[a] += 1;
    const float* ua = unit.data() + static_cast<size_t>(a) * dim;
    for (int b = a + 1; b < n; ++b) {
      const float* ub = unit.data() + static_cast<size_t>(b) * dim;
      float dot = 0.0f;
      for (int i = 0; i < dim; ++i) dot += ua[i] * ub[i];
      if (dot > theta) {
        adj[a * words + b / 64] |= uint64_t{1} << (b % 64);
        adj[b * words + a / 64] |= uint64_t{1} << (a % 64);
        ++degree[a];
        ++degree[b];
      }
    }
  }
  std::vector<char> alive(n, 1);
  int remaining = n;
  while (remaining > 0) {
    int c = -1;
    for (int t = 0; t < n; ++t)
      if (alive[t] && (c < 0 || degree[t] > degree[c])) c = t;
    const int32_t code = cb.n_codes();
    cb.codes.insert(cb.codes.end(), unit.begin() + static_cast<size_t>(c) * dim,
                    unit.begin() + static_cast<size_t>(c + 1) * dim);
    std::vector<int> removed;
    for (int t = 0; t < n; ++t) {
      if (alive[t] && (adj[c * words + t / 64] >> (t % 64) & 1)) {
        removed.push_back(t);
        cb.index[t] = code;
      }
    }
    for (int t : removed) alive[t] = 0;
    remaining -= static_cast<int>(removed.size());
    // Remaining nodes lose the edges to removed ones.
    for (int u = 0; u < n; ++u) {
      if (!alive[u]) continue;
      const uint64_t* row = adj.data() + static_cast<size_t>(u) * words;
      for (int t : removed)
        if (row[t / 64] >> (t % 64) & 1) --degree[u];
    }
  }
  return cb;
}

}  // namespace kvevict
