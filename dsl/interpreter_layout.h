#pragma once
// The interpreter's array view of the lowered form (dsl/lowered.h): buffers, the extents of the
// axes, strides and the row loop, shared by the interpreter (dsl/interpreter.cpp), its fused
// contractions (dsl/contraction.h) and its token-pair tiles (dsl/token_pairs.h). Internal to the
// interpreter: not a public interface.
#include <cstdint>
#include <algorithm>
#include <vector>

#include "dsl/lowered.h"

namespace kvevict::dsl::interp {

// A tensor during evaluation: either a view of caller memory or an owned array.
struct Buf {
  unsigned shape = 0;
  const float* data = nullptr;
  std::vector<float> own;
};

// Recycles the arrays of intermediate nodes across evaluations on the same thread. A policy is
// evaluated once per (layer, KV head) with the same shapes, and fresh multi-megabyte vectors come
// from mmap: a page fault per 4 KiB and an munmap each time cost more than the arithmetic (CAKE's
// layer weight). Bounded, so that one evaluation at a long context does not stay pinned.
class BufferPool {
 public:
  static constexpr size_t kMaxPooledFloats = size_t(16) << 20;  // 64 MiB per thread

  // An array of n floats, reusing the smallest pooled one that fits. Its contents are unspecified:
  // every node writes all of its output elements.
  std::vector<float> take(size_t n) {
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].capacity() >= n && (best == free_.size() || free_[i].capacity() < free_[best].capacity())) best = i;
    std::vector<float> v;
    if (best != free_.size()) {
      v.swap(free_[best]);
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
      pooled_ -= v.capacity();
    }
    v.resize(n);
    return v;
  }

  void give(std::vector<float>& v) {
    if (v.capacity() >= 1024 && pooled_ + v.capacity() <= kMaxPooledFloats) {
      pooled_ += v.capacity();
      free_.push_back(std::move(v));
    }
    v = std::vector<float>();
  }

 private:
  std::vector<std::vector<float>> free_;
  size_t pooled_ = 0;
};

inline BufferPool& buffer_pool() {
  static thread_local BufferPool pool;
  return pool;
}

// Axis index i of a shape bit (1 << i), in the canonical order of the axis table (t last).
constexpr int kT = kNumAxes - 1;
static_assert(kvevict::kAxisT == 1u << (kNumAxes - 1), "t is the innermost axis");
constexpr int kS = kvevict::kAxisIndexS;
constexpr int kOuter = kNumAxes - 1;  // every axis but t: the axes of the rows; t runs inside a row

struct Layout {
  int ext[kNumAxes];  // extents of the axes, in the order of the axis table (g, h, q, d, e, c, s, t)
  int64_t size(unsigned shape) const {
    int64_t n = 1;
    for (int i = 0; i < kNumAxes; ++i)
      if (shape & (1u << i)) n *= ext[i];
    return n;
  }
  // Element strides of a tensor of `shape` along each axis (0 where absent).
  void strides(unsigned shape, int64_t out[kNumAxes]) const {
    int64_t s = 1;
    for (int i = kNumAxes - 1; i >= 0; --i) {
      out[i] = (shape & (1u << i)) ? s : 0;
      if (shape & (1u << i)) s *= ext[i];
    }
  }
  // Extents of the outer axes of `shape` (1 where absent) and their product, the number of rows.
  int64_t rows(unsigned shape, int64_t e[kOuter]) const {
    int64_t n = 1;
    for (int i = 0; i < kOuter; ++i) n *= e[i] = (shape & (1u << i)) ? ext[i] : 1;
    return n;
  }
  int64_t tokens(unsigned shape) const { return (shape & kAxisT) ? ext[kT] : 1; }
};

// The outer coordinates (every axis but t) of row r of a shape with outer extents e, row-major.
inline void row_coordinates(int64_t r, const int64_t e[kOuter], int64_t c[kOuter]) {
  for (int i = kOuter - 1; i >= 0; --i) {
    c[i] = r % e[i];
    r /= e[i];
  }
}
inline int64_t dot(const int64_t c[kOuter], const int64_t st[kNumAxes]) {
  int64_t o = 0;
  for (int i = 0; i < kOuter; ++i) o += c[i] * st[i];
  return o;
}

// Calls row(out_offset, {operand offsets}) for every combination of the outer axes (all but t)
// present in `shape`; each row then covers T contiguous tokens (or one element without t).
template <int N, class F>
void for_rows(const Layout& L, unsigned shape, const unsigned (&operand_shapes)[N], F row) {
  int64_t os[kNumAxes], st[N][kNumAxes], e[kOuter];
  L.strides(shape, os);
  for (int k = 0; k < N; ++k) L.strides(operand_shapes[k], st[k]);
  const int64_t rows = L.rows(shape, e);
  const int64_t row_len = L.tokens(shape);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * row_len >= (1 << 18))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t c[kOuter];
    row_coordinates(r, e, c);
    int64_t offs[N];
    for (int k = 0; k < N; ++k) offs[k] = dot(c, st[k]);
    row(dot(c, os), offs);
  }
}

}  // namespace kvevict::dsl::interp
