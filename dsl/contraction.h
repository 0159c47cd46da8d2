#pragma once
// Fused contraction of the interpreter: sum or mean over axes R of x * y (a Binary Mul node that
// only such reductions use) without materialising the product. sum(d: K[d, s] * K[d, t]) over a
// tile of s is head_dim x tile x T products; this computes the tile x T result directly.
//
// The result is bit for bit the unfused one (dsl/lowered.h, REDUCTION ORDER): each product is
// rounded to float, then accumulated in float in increasing canonical order of the reduced
// coordinates when t is kept, or in double over the reduced rows in canonical order, t inner,
// when t is reduced. The inner loop runs over contiguous tokens in blocks of kContractionBlock
// (the operand block stays in cache across the output rows). Output rows (and token blocks) are
// split across OpenMP threads; each element is computed by one thread, so the result does not
// depend on the thread count.
//
// Speed (t kept): four output rows that share their second operand (R-KV's cosine tile: one
// u[d, s] per row, u[d, t] shared) run as 4 x 16 tiles held in registers, so each operand vector
// is loaded once for four rows; those tiles and the row-by-row blocks are compiled for AVX-512,
// AVX2 and the baseline (function multiversioning, picked at load time) with fp-contract off, so
// every clone performs the same float multiplies and adds in the same order: the same bits on
// every machine (tests/dsl/contraction_tiles_test.cpp).
#include "dsl/interpreter_layout.h"

namespace kvevict::dsl::interp {

// out has shape (x.shape | y.shape) & ~axes; reducer is Sum or Mean.
void contract(const Layout& L, Reducer reducer, unsigned axes, const Buf& x, const Buf& y, unsigned out_shape, float* out);

// Whether node i of p is a product that every user contracts (Reduce Sum/Mean with a == i), so
// that the interpreter never computes it on its own.
std::vector<bool> fused_products(const LoweredProgram& p);

}  // namespace kvevict::dsl::interp
