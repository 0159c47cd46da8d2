// The cost of SpindleKV's codebook stage per set of vectors (core/engine/codebook.h): build_codebook
// over N vectors of head_dim d, as the stage runs it for one (layer, stored head)'s kept keys or
// values at the end of a prefill (N = the head's kept entries; with codebook_scope
// per_layer_across_heads, the layer's entries over all its heads). The vectors lie near a few
// hundred directions with noise, so the graph has both edges and isolated nodes, as keys do.
//   bench_codebook_build [N = 4096] [d = 128] [theta = 0.95] [repeats = 3]
// Prints the best of the repeats in ms, the codes made, and OpenMP's thread count; then, on a CUDA
// device, the same with the similarity graph built there by each of its two kernels
// (core/engine/cuda/codebook_graph.h: the upload, the kernel and the bits' download, the greedy
// rounds on the host), or why not.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "core/engine/codebook.h"
#include "jit/device.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/engine/cuda/codebook_graph.h"
#endif

namespace {

// The best of `repeats` builds (seconds) and the codes made.
std::pair<double, int> time_builds(const std::vector<float>& x, int n, int d, double theta, int repeats,
                                   const kvevict::SimilarityGraphBuilder* graph) {
  double best = 1e30;
  int codes = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = kvevict::bench::wall_seconds();
    const kvevict::Codebook cb = kvevict::build_codebook(x.data(), n, d, theta, graph);
    best = std::min(best, kvevict::bench::wall_seconds() - t0);
    codes = cb.n_codes();
  }
  return {best, codes};
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int d = argc > 2 ? std::atoi(argv[2]) : 128;
  const double theta = argc > 3 ? std::atof(argv[3]) : 0.95;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
  if (n < 1 || d < 1 || repeats < 1) {
    std::fprintf(stderr, "usage: bench_codebook_build [N >= 1] [d >= 1] [theta] [repeats >= 1]\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const int directions = std::max(1, n / 16);
  std::vector<float> base(static_cast<size_t>(directions) * d), x(static_cast<size_t>(n) * d);
  for (float& v : base) v = normal(rng);
  for (int t = 0; t < n; ++t) {
    const float* b = base.data() + static_cast<size_t>(rng() % directions) * d;
    for (int i = 0; i < d; ++i) x[static_cast<size_t>(t) * d + i] = b[i] + 0.15f * normal(rng);
  }
  const auto [best, codes] = time_builds(x, n, d, theta, repeats, nullptr);
  std::printf("build_codebook N=%d d=%d theta=%.3f: %.2f ms (best of %d), %d codes, %d OpenMP threads\n", n, d, theta,
              1e3 * best, repeats, codes, omp_get_max_threads());
  if (const std::string why = kvevict::jit::cuda_unavailable_reason(); !why.empty()) {
    std::printf("device graph: skipped: %s\n", why.c_str());
    return 0;
  }
#if defined(KVEVICT_HAVE_CUDA)
  for (const auto& [kernel, name] : {std::pair{kvevict::cuda::GraphKernel::PerWord, "per-word kernel"},
                                     std::pair{kvevict::cuda::GraphKernel::Tiled, "tiled kernel"}}) {
    const auto device = kvevict::cuda::make_cuda_similarity_graph(kernel);
    time_builds(x, n, d, theta, 1, device.get());  // warm-up: the context and the buffers
    const auto [on_device, device_codes] = time_builds(x, n, d, theta, repeats, device.get());
    std::printf("build_codebook N=%d d=%d theta=%.3f, graph on the device (%s): %.2f ms (best of %d), %d codes%s\n", n,
                d, theta, name, 1e3 * on_device, repeats, device_codes,
                device_codes == codes ? "" : " (DIFFERS from the host's)");
  }
#endif
  return 0;
}
