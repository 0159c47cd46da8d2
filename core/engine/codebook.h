#pragma once
// SpindleKV's codebook (arXiv 2507.06517 §3.4, spec policies.md §4.2) for one set of vectors
// (pre-RoPE keys or values of one (layer, KV head)):
//   m_t = |x_t|, u_t = x_t / m_t; Adj[a][b] = cos(u_a, u_b) > theta (diagonal true; the cosine an
//   f32 fma chain in element order: codebook_graph.h);
//   repeat: c = node of highest remaining degree (ties: lowest index); u_c becomes a code; every
//   remaining neighbour of c (c included) refers to it; remove them all from the graph.
//   reconstruction x_t ~= codes[ref[t]] * m_t.
// A zero vector has no direction: it is its own code's member only if nothing else is near; its
// norm 0 reconstructs it exactly. Cost O(N^2 d / 2) time, spread over OpenMP's threads (the graph's
// rows), N^2 bits of memory (N = vectors; over 4 GiB is refused with a UsageError before anything
// is allocated), and O(N^2 / 64 + edges log N) for the greedy rounds (a heap of degrees).
// Storage = codes (float) + one int32 index and one float norm per vector.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvevict {

struct Codebook {
  int dim = 0;
  std::vector<float> codes;     // [n_codes][dim], unit vectors (a member of the group, not a centroid)
  std::vector<int32_t> index;   // [n] code of each vector
  std::vector<float> norm;      // [n] magnitude of each vector

  int n_codes() const { return dim ? static_cast<int>(codes.size() / dim) : 0; }
  int n_vectors() const { return static_cast<int>(index.size()); }
  size_t bytes() const { return codes.size() * sizeof(float) + index.size() * sizeof(int32_t) + norm.size() * sizeof(float); }
  // Bytes the same vectors take stored plainly (n * dim floats).
  size_t plain_bytes() const { return static_cast<size_t>(n_vectors()) * dim * sizeof(float); }
  // Writes the n reconstructed vectors, [n][dim].
  void reconstruct(float* out) const;
};

// Who builds the similarity graph (codebook_graph.h) of a codebook: the host (null, below), or the
// device the engine selects on (LayerSelector::similarity_graph: the twin on the CPU, a CUDA
// device). Every builder gives the host's bits. Returns n * codebook_graph_words(n) words.
class SimilarityGraphBuilder {
 public:
  virtual ~SimilarityGraphBuilder() = default;
  virtual std::vector<uint64_t> build(const float* unit, int n, int dim, double theta) const = 0;
};

// The host's graph over n unit vectors [n][dim] (OpenMP over rows, 16 cosines side by side).
std::vector<uint64_t> host_similarity_graph(const float* unit, int n, int dim, double theta);

// vectors: [n][dim]. theta: cosine threshold (strictly greater merges). `graph`: who builds the
// similarity graph (null: the host); std::logic_error when it returns other than n rows.
Codebook build_codebook(const float* vectors, int n, int dim, double theta,
                        const SimilarityGraphBuilder* graph = nullptr);

}  // namespace kvevict
