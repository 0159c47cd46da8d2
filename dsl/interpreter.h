#pragma once
// The CPU interpreter of the lowered form: the reference semantics of the language. It evaluates
// one node at a time over whole arrays (inner loops run over contiguous tokens and vectorise),
// splits large element loops across OpenMP threads (each output element is computed by exactly
// one thread in a fixed order, so results do not depend on the thread count), and frees each
// intermediate after its last use.
#include <array>
#include <cstdint>
#include <vector>

#include "dsl/lowered.h"

namespace kvevict::dsl {

struct Extents {
  int g = 1;  // KV heads (layer_weight programs; 1 otherwise)
  int h = 1;  // query heads per KV head (G)
  int q = 0;  // window rows (W)
  int d = 1;  // head dimension (channels of K, K_pre, V)
  int c = 0;  // model dimension (n_embd: channels of hidden)
  int t = 0;  // cache length (T)
};

// Signals for one evaluation. In a score program `heads` has one entry; in a layer_weight program
// one entry per KV head (axis g), all with the same cache length.
struct HeadSignals {
  std::array<const float*, kNumTensorSignals> tensors{};  // Position is read from `position` instead
  const int32_t* position = nullptr;                       // null: the cache slot index is used
  int kv_head = 0;
};

struct EvalInputs {
  Extents ext;
  std::array<float, kNumScalarSignals> scalars{};
  std::vector<HeadSignals> heads;
  uint64_t seed = 0;
  int layer = 0;
};

// Evaluates the program; returns the output tensor laid out densely in its own shape (see
// lowered.h). Throws RuntimeError when a signal the program reads was not supplied.
std::vector<float> evaluate(const LoweredProgram& program, const EvalInputs& in);

// Convenience for score programs: writes T scores (a scalar result is broadcast), NaN -> -inf.
void evaluate_scores(const LoweredProgram& program, const EvalInputs& in, float* out);

}  // namespace kvevict::dsl
