#pragma once
// The signal vocabulary of the policy language: ONE table from which everything else follows.
//
// A tensor signal is a per-(layer, KV head) array that a policy program may read. Its row in
// KVEVICT_TENSOR_SIGNALS gives
//   - its enum name (TensorSignal::X) and its name in the DSL (`A`, `key_norm`, ...),
//   - its axes in a per-head score program (a layer_weight program adds axis g), hence its
//     extent in elements: the product of the axes' extents (h = G, q = W, d = head_dim, t = T),
//     and its layout: row-major over its axes in the canonical order (KVEVICT_AXES, t innermost,
//     so a key vector signal K is stored [d][t], transposed from the cache's [t][d]),
//   - what the engine must record to produce it (SignalSource),
//   - a one-line description used in errors and docs.
// Its kernel-argument slot is its enum value: ScoreInputs::tensor[s], EvalInputs' HeadSignals and
// the CUDA ABI's KvScoreArgs::tensor[s] (jit/kernel_abi.h) are all arrays indexed by it, sized by
// kNumTensorSignals, and tied to the table by static_asserts.
//
// What a NEW SIGNAL costs (the ggml rule: one table entry, not edits in seventeen files):
//   1. a row here (and the count below, which a static_assert checks);
//   2. its producer in the engine (core/engine/engine_signals.cpp, EvictionEngine::State::
//      gather_tensor_signal, by its SignalSource); a new source also needs the decoder to record it.
// The DSL's name lookup, the checker's shapes, the interpreter's loads, the policy's
// "needs" flags, the JIT's loads, argument checks and GPU uploads all read this table.
//
// Position is the one integer signal: it travels as ScoreInputs::position (int32; null means the
// cache slot index) because random() keys on it too; its float slot in `tensor` stays null.
// `token` holds integers in a float buffer (exact for ids < 2^24). Signals without axis t (Q,
// Q_mean, ...) have a fixed size per head (signal_elements).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvevict {

// AXES of the language's tensors: ONE table (KVEVICT_AXES). A shape is a bit mask of axes; the
// bit order is the canonical order g, h, q, d, e, c, s, t (t innermost), which is also the
// layout: a tensor is stored row-major over its axes in that order.
//   g: KV heads of a layer (layer_weight programs)   h: query heads of the group   q: window queries
//   d, e: head dimension (channels of a key / value vector), two axes of the same KIND, so that a
//         program can name two channels at once (C[d, e] = sum(t: K[d, t] * K[e, t]))
//   c: the model dimension (n_embd: the residual stream's channels, hidden[c, t]); a kind of its own,
//      so a head channel (d, e) can never be bound to it
//   s, t: cached tokens, two axes of the same kind (pairwise terms: S[s, t] = sum(d: K[d, s] * K[d, t]))
// A read may bind a tensor's axis to another axis of the same kind (K[e, t], K[d, s]); the second
// axis of a kind has the first one's extent (e: head_dim, s: T).
enum class AxisKind : uint8_t { KvHead, QueryHead, Query, Channel, Model, Token };
//   X(enum suffix, DSL name, kind, reserved word). e, c and s are not reserved words: policies
//   written before they existed name definitions and parameters `s`, `e` and `c`, and such a name
//   hides the axis in its program.
#define KVEVICT_AXES(X)                                                                              \
  X(G, "g", AxisKind::KvHead, true) X(H, "h", AxisKind::QueryHead, true) X(Q, "q", AxisKind::Query, true) \
  X(D, "d", AxisKind::Channel, true) X(E, "e", AxisKind::Channel, false)                             \
  X(C, "c", AxisKind::Model, false) X(S, "s", AxisKind::Token, false) X(T, "t", AxisKind::Token, true)

enum AxisIndexOf : int {
#define KVEVICT_AXIS_INDEX(name, dsl, kind, reserved) kAxisIndex##name,
  KVEVICT_AXES(KVEVICT_AXIS_INDEX)
#undef KVEVICT_AXIS_INDEX
  kNumAxesInTable
};
enum AxisBit : unsigned {
#define KVEVICT_AXIS_BIT(name, dsl, kind, reserved) kAxis##name = 1u << kAxisIndex##name,
  KVEVICT_AXES(KVEVICT_AXIS_BIT)
#undef KVEVICT_AXIS_BIT
};
constexpr int kNumAxes = kNumAxesInTable;
constexpr unsigned kAllAxes = (1u << kNumAxes) - 1;

struct AxisInfo {
  unsigned bit;
  std::string_view dsl_name;
  AxisKind kind;
  bool reserved;  // a reserved word (cannot name a parameter or a definition)
};
inline constexpr std::array<AxisInfo, kNumAxes> kAxisTable = {{
#define KVEVICT_AXIS_ROW(name, dsl, kind, reserved) {kAxis##name, dsl, kind, reserved},
    KVEVICT_AXES(KVEVICT_AXIS_ROW)
#undef KVEVICT_AXIS_ROW
}};
// The axis of a single bit (its index in kAxisTable); -1 for anything else.
constexpr int axis_index(unsigned bit) {
  for (int i = 0; i < kNumAxes; ++i)
    if (kAxisTable[i].bit == bit) return i;
  return -1;
}
constexpr AxisKind axis_kind(unsigned bit) { return kAxisTable[axis_index(bit)].kind; }
// Both token axes: a tensor with both is a token-pair (T x T) tensor.
constexpr unsigned kTokenPair = kAxisS | kAxisT;
constexpr bool is_token_pair(unsigned shape) { return (shape & kTokenPair) == kTokenPair; }

// SCALAR SIGNALS: per-(layer, head) numbers. A head scalar is the field of ScoreInputs (and of
// the kernel ABI's KvScoreArgs, which has the same field names) named in its row; a layer scalar
// exists in layer_weight programs only (LayerWeightInputs). A new scalar is a row here plus its
// field in ScoreInputs and in KVEVICT_DEFINE_KERNEL_ABI.
//   X(enum name, DSL name, field)
#define KVEVICT_HEAD_SCALAR_SIGNALS(X)                                                                   \
  X(T, "T", T) X(W, "W", W) X(G, "G", group) X(Layer, "layer", layer) X(NLayers, "n_layers", n_layers)   \
  X(KvHead, "kv_head", kv_head) X(NKvHeads, "n_kv_heads", n_kv_heads) X(HeadDim, "head_dim", head_dim)   \
  X(PromptLen, "prompt_len", prompt_len) X(DecodeStep, "decode_step", decode_step)                      \
  X(NEmbd, "n_embd", n_embd)
#define KVEVICT_LAYER_SCALAR_SIGNALS(X) X(Budget, "budget", budget)

enum class ScalarSignal : uint8_t {
#define KVEVICT_SCALAR_ENUM(name, dsl, field) name,
  KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_SCALAR_ENUM) KVEVICT_LAYER_SCALAR_SIGNALS(KVEVICT_SCALAR_ENUM)
#undef KVEVICT_SCALAR_ENUM
};
#define KVEVICT_SCALAR_COUNT(name, dsl, field) +1
constexpr int kNumScalarSignals =
    0 KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_SCALAR_COUNT) KVEVICT_LAYER_SCALAR_SIGNALS(KVEVICT_SCALAR_COUNT);
#undef KVEVICT_SCALAR_COUNT

struct ScalarSignalInfo {
  ScalarSignal id;
  std::string_view dsl_name;
  bool layer_only;  // layer_weight programs only
};
inline constexpr std::array<ScalarSignalInfo, kNumScalarSignals> kScalarSignalTable = {{
#define KVEVICT_HEAD_SCALAR_ROW(name, dsl, field) {ScalarSignal::name, dsl, false},
#define KVEVICT_LAYER_SCALAR_ROW(name, dsl, field) {ScalarSignal::name, dsl, true},
    KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_HEAD_SCALAR_ROW) KVEVICT_LAYER_SCALAR_SIGNALS(KVEVICT_LAYER_SCALAR_ROW)
#undef KVEVICT_HEAD_SCALAR_ROW
#undef KVEVICT_LAYER_SCALAR_ROW
}};

// What the engine records to produce a signal.
enum class SignalSource : uint8_t {
  WindowQueries,  // the last W queries of the prompt (or decode), attended against the head's keys
  WindowQueryRows,  // the last W queries themselves, as the decoder hands them (no cached key or value)
  LatestQuery,    // the newest query alone (decode-time indicators)
  ColumnSums,     // attention column sums over every query so far, kept aligned with the cache
  CachedKeys,     // computed from the head's keys in the cache
  CachedValues,   // computed from the head's values in the cache
  RowNorms,       // the norms of the head's cached rows: from the rows, or held with their positions
                  // where the rows are on a device (KVCache::held_row_norms)
  Positions,      // the original position of every entry (always available)
  SegmentQueries, // the last W prompt queries of each observe.segment, each attending over its own segment
  PromptQueries,  // statistics of the prompt's pre-RoPE queries, accumulated during prefill (query_signals.h)
  Tokens,         // the token id of every entry, recorded by original position (model_signals.h)
  HiddenStates,   // the norm of the layer's input hidden state at every entry, by original position
  HiddenVectors,  // the layer's attention input (after its input RMSNorm) at every entry, by original position
  OutputProjection,  // the entries' values through the layer's output projection W_o (the decoder's Gram matrices)
  RopeRotation,   // the model's RoPE averaged over positions after the prompt (query_signals.h: average_rope_rotation)
  Replay,         // KVzip's second forward pass over the prefilled context (replay_pass.h), once after prefill
};

//   X(enum name, DSL name, axes,                  source,                        description)
#define KVEVICT_TENSOR_SIGNALS(X)                                                                         \
  X(WindowAttention, "A", kAxisH | kAxisQ | kAxisT, SignalSource::WindowQueries, "window attention")      \
  X(AccumulatedAttention, "A_acc", kAxisH | kAxisT, SignalSource::ColumnSums, "accumulated attention")    \
  X(CurrentAttention, "A_now", kAxisH | kAxisT, SignalSource::LatestQuery, "current attention")           \
  X(KeyNorm, "key_norm", kAxisT, SignalSource::RowNorms, "key norms")                                     \
  X(ValueNorm, "value_norm", kAxisT, SignalSource::RowNorms, "value norms")                             \
  X(Position, "pos", kAxisT, SignalSource::Positions, "original positions")                              \
  X(Keys, "K", kAxisD | kAxisT, SignalSource::CachedKeys, "keys as cached (post-RoPE)")                  \
  X(KeysPreRope, "K_pre", kAxisD | kAxisT, SignalSource::CachedKeys, "keys before RoPE")                 \
  X(Values, "V", kAxisD | kAxisT, SignalSource::CachedValues, "values")                                 \
  X(SegmentAttention, "A_seg", kAxisH | kAxisT, SignalSource::SegmentQueries, "segment-local attention")      \
  X(WindowQueryRows, "Q", kAxisH | kAxisQ | kAxisD, SignalSource::WindowQueryRows, "window queries (post-RoPE)")  \
  X(WindowQueryRowsPreRope, "Q_pre", kAxisH | kAxisQ | kAxisD, SignalSource::WindowQueryRows,                  \
    "window queries before RoPE")                                                                             \
  X(WindowOutputs, "O", kAxisH | kAxisQ | kAxisD, SignalSource::WindowQueries, "window attention outputs")      \
  X(QueryMean, "Q_mean", kAxisH | kAxisD, SignalSource::PromptQueries, "mean prompt query")                    \
  X(QueryCovariance, "Q_cov", kAxisH | kAxisD | kAxisE, SignalSource::PromptQueries, "prompt query covariance")   \
  X(Token, "token", kAxisT, SignalSource::Tokens, "token ids")                                                \
  X(HiddenNorm, "hidden_norm", kAxisT, SignalSource::HiddenStates, "hidden-state norms")                     \
  X(OutputNorm, "out_norm", kAxisH | kAxisT, SignalSource::OutputProjection, "output-projected value norms")    \
  X(OutputNormL1, "out_norm_l1", kAxisH | kAxisT, SignalSource::OutputProjection, "output-projected value L1 norms") \
  X(HiddenState, "hidden", kAxisC | kAxisT, SignalSource::HiddenVectors, "attention-input hidden states")       \
  X(RopeFuture, "R_future", kAxisD | kAxisE, SignalSource::RopeRotation, "mean RoPE rotation after the prompt")   \
  X(ReplayAttention, "A_replay", kAxisH | kAxisT, SignalSource::Replay, "context-replay max attention")

enum class TensorSignal : uint8_t {
#define KVEVICT_SIGNAL_ENUM(name, dsl, axes, source, about) name,
  KVEVICT_TENSOR_SIGNALS(KVEVICT_SIGNAL_ENUM)
#undef KVEVICT_SIGNAL_ENUM
};

// The count, as a literal: the kernel ABI pastes it into generated kernel text.
#define KVEVICT_NUM_TENSOR_SIGNALS 22
constexpr int kNumTensorSignals = KVEVICT_NUM_TENSOR_SIGNALS;

struct TensorSignalInfo {
  TensorSignal id;
  std::string_view dsl_name;
  unsigned axes;  // in a per-head program
  SignalSource source;
  std::string_view description;
};

inline constexpr std::array<TensorSignalInfo, kNumTensorSignals> kTensorSignalTable = {{
#define KVEVICT_SIGNAL_ROW(name, dsl, axes, source, about) {TensorSignal::name, dsl, axes, source, about},
    KVEVICT_TENSOR_SIGNALS(KVEVICT_SIGNAL_ROW)
#undef KVEVICT_SIGNAL_ROW
}};

// Every row sits at its own enum value, so the table can be indexed by the enum.
constexpr bool signal_table_is_ordered() {
  for (int i = 0; i < kNumTensorSignals; ++i)
    if (static_cast<int>(kTensorSignalTable[i].id) != i) return false;
  return true;
}
static_assert(signal_table_is_ordered(), "kTensorSignalTable rows must follow the TensorSignal order");
#define KVEVICT_SIGNAL_COUNT(name, dsl, axes, source, about) +1
static_assert(0 KVEVICT_TENSOR_SIGNALS(KVEVICT_SIGNAL_COUNT) == KVEVICT_NUM_TENSOR_SIGNALS,
              "KVEVICT_NUM_TENSOR_SIGNALS must equal the rows of KVEVICT_TENSOR_SIGNALS");
#undef KVEVICT_SIGNAL_COUNT

constexpr const TensorSignalInfo& signal_info(TensorSignal s) { return kTensorSignalTable[static_cast<int>(s)]; }
constexpr unsigned signal_axes(TensorSignal s) { return signal_info(s).axes; }
constexpr int signal_index(TensorSignal s) { return static_cast<int>(s); }
// Whether signals of `source` are made from the observation window's queries (a policy file that
// reads one needs `observe: {window: ...}`).
constexpr bool source_reads_window_queries(SignalSource source) {
  return source == SignalSource::WindowQueries || source == SignalSource::WindowQueryRows;
}

// Whether a signal of `source` can be made for a run of a head's entries alone (the newest ones,
// which score_at insertion scores: EvictionEngine::State::score_new_entries): its value at an entry
// is that entry's own (its position, its rows' norms, its token, its hidden state), or it has no
// token axis and does not depend on which entries are cached (the prompt's query statistics, the
// RoPE average). Attention over the cache, and cached rows laid out [d][t] for the whole head, are
// made for the whole head only.
constexpr bool source_made_per_entry(SignalSource source) {
  switch (source) {
    case SignalSource::RowNorms:
    case SignalSource::Positions:
    case SignalSource::Tokens:
    case SignalSource::HiddenStates:
    case SignalSource::HiddenVectors:
    case SignalSource::PromptQueries:
    case SignalSource::RopeRotation:
      return true;
    default:
      return false;
  }
}

// Elements of a signal's buffer for one head: the product of the extents of its axes
// (h = group, q = W, d = head_dim, c = n_embd, t = T; g, if present, is not part of one head's
// buffer). A signal without axis t (Q, Q_mean, ...) does not grow with the cache.
constexpr int64_t signal_elements(TensorSignal s, int group, int W, int head_dim, int T, int n_embd = 0) {
  const unsigned a = signal_axes(s);
  int64_t n = 1;
  if (a & kAxisT) n *= T > 0 ? T : 0;
  if (a & kAxisH) n *= group > 0 ? group : 0;
  if (a & kAxisQ) n *= W > 0 ? W : 0;
  if (a & kAxisD) n *= head_dim > 0 ? head_dim : 0;
  if (a & kAxisE) n *= head_dim > 0 ? head_dim : 0;  // the second channel axis (Q_cov)
  if (a & kAxisC) n *= n_embd > 0 ? n_embd : 0;       // the model dimension (hidden)
  return n;
}

// "A (window attention)": for errors.
inline std::string signal_label(TensorSignal s) {
  return std::string(signal_info(s).dsl_name) + " (" + std::string(signal_info(s).description) + ")";
}

// Which signals a program (or a whole policy) reads, indexed by TensorSignal.
using SignalSet = std::array<bool, kNumTensorSignals>;

}  // namespace kvevict
