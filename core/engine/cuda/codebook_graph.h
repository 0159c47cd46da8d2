#pragma once
// SpindleKV's similarity graph on the current CUDA device (codebook.h's SimilarityGraphBuilder;
// built only with KVEVICT_HAVE_CUDA): the unit vectors go up, a kernel makes the n x words bits
// (codebook_graph.h's definition, the same bits as the host's), they come down (one
// synchronisation per graph); the buffers are freed after each graph, and a graph over half the
// device's free memory is built on the host. The greedy rounds stay on the host. A failing CUDA
// call or launch throws RuntimeError naming it.
//
// Two kernels, as llm.c keeps its versions side by side (bench_codebook_build times both):
//   PerWord: one thread per word runs codebook_graph_word (the element body itself; every thread
//            reads its row and 64 others through the caches, so its loads are strided);
//   Tiled:   a block per 64 x 64 tile (one word of 64 rows), both sets of rows staged in shared
//            memory, each thread's pairs summed in element order with fmaf (the same chains).
// Status: compiled with nvcc, never run on a GPU during development (CodebookGraphGpu,
// tests/core/codebook_graph_test.cpp, compares both with the host's bits).
#include <memory>

#include "core/engine/codebook.h"

namespace kvevict::cuda {

enum class GraphKernel : unsigned char { PerWord, Tiled };

std::unique_ptr<SimilarityGraphBuilder> make_cuda_similarity_graph(GraphKernel kernel = GraphKernel::Tiled);

}  // namespace kvevict::cuda
