#pragma once
// Small dense linear algebra over the channel axes of the policy language: the inverse of a
// symmetric positive-definite matrix M[.., d, e] (docs/DSL.md §6, `inverse(d, e: M)`), batched over
// the matrix's other axes. It serves the methods whose score is a leverage x^T M^-1 x over the head
// dimension (kvpress LeverageScorePress / CompactorPress: (X^T X + jitter)^-1 of a Gaussian sketch;
// CapPress: (I + sum_t w_t v_t v_t^T)^-1).
//
// CONTRACT (one n x n matrix, row-major float, n = head_dim, 1 <= n <= kMaxMatrixDim):
//   1. S = (M + M^T) / 2 in double (the matrix is symmetrised, as kvpress's leverage press does
//      before its Cholesky; for a symmetric input this is M itself).
//   2. Cholesky S = L L^T in double, column by column (j = 0..n-1, inner sums in increasing k).
//      A pivot fails when it is not > kPivotTolerance * scale, scale = max_i |S_ii| (1 if that is
//      0): a singular or indefinite matrix is not inverted at face value.
//   3. DOCUMENTED FALLBACK: on a failed pivot the factorisation restarts on S + lambda I with
//      lambda = scale * kJitterSteps[k], k = 0, 1, ... (1e-7 .. 1e-3 of the largest diagonal
//      entry, ten times larger each try), the ridge kvpress's chol_with_jitter also adds. If every
//      try fails, or M holds a NaN or an infinity, every entry of the result is NaN (a score that
//      reads it becomes NaN, which the interpreter turns into -infinity). Nothing throws.
//   4. inverse = L^-T L^-1: L is inverted in place (forward substitution, increasing indices),
//      then out[i][j] = sum over k >= max(i, j) of Linv[k][i] * Linv[k][j] in increasing k, rounded
//      to float. The result is exactly symmetric.
// Every step is a fixed sequence of double operations, so the result is deterministic and
// independent of threads. The same text (KVEVICT_DEFINE_SPD_INVERSE below) is compiled here and
// pasted into generated CUDA (a matrix stage: jit/kernel_abi.h, jit/cuda_codegen.h), so the
// host-compiled kernel reproduces the interpreter bit for bit;
// on a GPU it may differ in the last bits (fused multiply-adds), within tolerance.
//
// Cost: n^3 / 2 multiply-adds and n^2 doubles of work space per matrix (512 KiB at n = 256).
#include <cstdint>
#include <string>
#include <vector>

// No comments inside: the macro is also stringified into kernel source. Plain C: arrays and
// loops only, no library calls but sqrt. Returns the number of jitter steps used (0: none), or
// -1 when the matrix could not be inverted (then `out` is all NaN). `work` holds n * n doubles.
#define KVEVICT_DEFINE_SPD_INVERSE(FN)                                                                \
  FN int kv_spd_inverse(const float* m, int n, double* work, float* out) {                           \
    const double jitter[6] = {0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3};                                     \
    double scale = 0.0;                                                                              \
    int finite = 1;                                                                                  \
    for (int i = 0; i < n * n; ++i) {                                                                \
      const float x = m[i];                                                                          \
      if (!(x == x) || x - x != 0.0f) finite = 0;                                                    \
    }                                                                                                \
    for (int i = 0; i < n && finite; ++i) {                                                          \
      const double a = m[i * n + i] < 0.0f ? -(double)m[i * n + i] : (double)m[i * n + i];           \
      if (a > scale) scale = a;                                                                      \
    }                                                                                                \
    if (scale == 0.0) scale = 1.0;                                                                   \
    int step = -1;                                                                                   \
    for (int k = 0; k < 6 && finite && step < 0; ++k) {                                             \
      int ok = 1;                                                                                    \
      for (int j = 0; j < n && ok; ++j) {                                                            \
        for (int i = j; i < n; ++i) {                                                                \
          double s = 0.5 * ((double)m[i * n + j] + (double)m[j * n + i]);                            \
          if (i == j) s += scale * jitter[k];                                                        \
          for (int p = 0; p < j; ++p) s -= work[i * n + p] * work[j * n + p];                         \
          if (i == j) {                                                                              \
            if (!(s > 1e-12 * scale)) {                                                              \
              ok = 0;                                                                                \
              break;                                                                                 \
            }                                                                                        \
            work[j * n + j] = sqrt(s);                                                               \
          } else {                                                                                   \
            work[i * n + j] = s / work[j * n + j];                                                   \
          }                                                                                          \
        }                                                                                            \
      }                                                                                              \
      if (ok) step = k;                                                                              \
    }                                                                                                \
    if (step < 0) {                                                                                  \
      const float nan = 0.0f / 0.0f;                                                                 \
      for (int i = 0; i < n * n; ++i) out[i] = nan;                                                  \
      return -1;                                                                                     \
    }                                                                                                \
    for (int j = 0; j < n; ++j) {                                                                    \
      work[j * n + j] = 1.0 / work[j * n + j];                                                       \
      for (int i = j + 1; i < n; ++i) {                                                              \
        double s = 0.0;                                                                              \
        for (int p = j; p < i; ++p) s += work[i * n + p] * work[p * n + j];                          \
        work[i * n + j] = -s / work[i * n + i];                                                      \
      }                                                                                              \
    }                                                                                                \
    for (int i = 0; i < n; ++i)                                                                      \
      for (int j = 0; j <= i; ++j) {                                                                 \
        double s = 0.0;                                                                              \
        for (int p = i; p < n; ++p) s += work[p * n + i] * work[p * n + j];                          \
        out[i * n + j] = (float)s;                                                                   \
        out[j * n + i] = (float)s;                                                                   \
      }                                                                                              \
    return step;                                                                                     \
  }

namespace kvevict::dsl {

// The largest matrix `inverse` accepts: head_dim is at most a few hundred in every supported model.
// The checker and the interpreter refuse larger extents (a clear error, not an allocation).
inline constexpr int kMaxMatrixDim = 512;

// Relative jitter of each try (the first is none); the literals inside the macro are the same.
inline constexpr double kJitterSteps[6] = {0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3};
inline constexpr double kPivotTolerance = 1e-12;

// One n x n matrix; `work` is resized to n * n. Returns the jitter step used, -1 if none worked.
int spd_inverse(const float* m, int n, std::vector<double>& work, float* out);

// `batch` matrices stored one after another (n * n floats each), as a tensor [.., d, e] with the
// matrix axes innermost. Matrices are independent (OpenMP over them for large batches; results do
// not depend on the thread count). Returns how many needed jitter and how many failed.
struct InverseReport {
  int64_t jittered = 0, failed = 0;
};
InverseReport spd_inverse_batched(const float* m, int64_t batch, int n, float* out);

// ---- The checker's rule for inverse(M) (docs/DSL.md §6) ----
// M must hold both channel axes d and e (the matrix) and no token axis s or t (one matrix per head
// and query head, never per token: T x head_dim^2 would not be bounded by the head), in a score
// program. Returns "" when M of `shape` may be inverted, else the error message.
std::string inverse_operand_error(unsigned shape, bool layer_weight_program);

// ---- The interpreter's nodes (dsl/lowered.h: Inverse, Randn) ----
// Inverse: `operand` holds `elements` floats, a dense tensor whose two innermost axes are d and e
// (the checker refuses a matrix with a token axis), so it is elements / head_dim^2 matrices one
// after another. Throws RuntimeError when head_dim exceeds kMaxMatrixDim (before allocating).
void evaluate_inverse(const float* operand, int64_t elements, int head_dim, float* out);
// Randn: out[d * head_dim + e] = kv_dsl_randn(seed, layer, kv_head, d, e) (core/engine/gaussian_rng.h).
void evaluate_randn(uint64_t seed, uint32_t layer, uint32_t kv_head, int head_dim, float* out);

}  // namespace kvevict::dsl
