#pragma once
// SpindleKV's similarity graph on the current CUDA device (codebook.h's SimilarityGraphBuilder;
// built only with KVEVICT_HAVE_CUDA): the unit vectors go up, one thread per word of the graph runs
// codebook_graph_word (codebook_graph.h), the n x words bits come down (one synchronisation per
// graph); the buffers are freed after each graph, and a graph over half the device's free memory
// is built on the host. The same bits as the host's; the greedy rounds stay on the host. A failing CUDA call or
// launch throws RuntimeError naming it. Status: compiled with nvcc, never run on a GPU during
// development (CodebookGraphGpu, tests/core/codebook_graph_test.cpp).
#include <memory>

#include "core/engine/codebook.h"

namespace kvevict::cuda {

std::unique_ptr<SimilarityGraphBuilder> make_cuda_similarity_graph();

}  // namespace kvevict::cuda
