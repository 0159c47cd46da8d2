#pragma once
// The reference decoder's interface. `forward` runs a block of tokens at the next positions
// (a whole prompt in one pass, or one token while decoding), appends their K/V to the cache, and
// lets an observer see each layer right after that layer's attention, which is when eviction may
// act (CAKE's cascading evicts earlier layers while later ones are still to come).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/decode/cache_rows_signal.h"
#include "core/decode/cached_positions_signal.h"
#include "core/decode/column_sums_signal.h"
#include "core/decode/device_kv_stats.h"
#include "core/decode/hidden_states_signal.h"
#include "core/decode/kv_cache.h"
#include "core/decode/query_statistics_block.h"
#include "core/decode/row_merges.h"
#include "core/decode/replay_attention_block.h"
#include "core/decode/segment_attention_block.h"
#include "core/decode/window_attention_signal.h"
#include "core/model/model.h"

namespace kvevict {

// What an observer reads of the host cache's cached keys and values (its rows) during one call.
// A decoder whose cache lives on a device may leave the rows of a call the observer does not read
// on the device and append placeholder rows (exact lengths and positions, zero keys and values) to
// the host cache instead (DeviceKvMirror::append_placeholders; LayerSignals::cache_rows_are_placeholders).
enum class CacheRowReads : uint8_t {
  Reads,                     // it may read any cached key or value: the host cache holds them all
  None,                      // it reads none: only lengths and positions (and it keeps entries)
  // None, provided the decoder hands it, at every layer of the call, each signal it asked for in
  // place of rows: the window attention (ObservationRequest::window_attention > 0) and the cached
  // rows in the decoder's device memory (cache_keys_on_device, cache_values_on_device). A decoder
  // that does not make one of them, or not at every layer of the call, must treat it as Reads.
  NoneGivenDecoderSignals,
};

// The observer's answer for each kind of call: it cannot tell which kind the decoder runs next
// (a new prompt, a decode step, a later block of a prefill in blocks); the decoder can.
struct CacheRowReadsByCall {
  CacheRowReads prompt_start = CacheRowReads::Reads;  // a call at position 0: a prompt or its first block
  CacheRowReads next_token = CacheRowReads::Reads;    // one token at a later position (a decode step)
  CacheRowReads next_block = CacheRowReads::Reads;    // several tokens at a later position
  // The answer for a call of `n_tokens` tokens starting at `position`.
  CacheRowReads for_call(int position, int n_tokens) const {
    if (position == 0) return prompt_start;
    return n_tokens == 1 ? next_token : next_block;
  }
};

// Whether a decoder may give the host cache placeholder rows in a call the observer answered
// `reads` for: None, or NoneGivenDecoderSignals when the decoder hands over every such signal the
// observer asked for at every layer of the call (`serves_asked_signals`).
inline bool rows_may_stay_on_device(CacheRowReads reads, bool serves_asked_signals) {
  return reads == CacheRowReads::None || (reads == CacheRowReads::NoneGivenDecoderSignals && serves_asked_signals);
}

// One layer's newest query rows as an observer holds them itself, in host memory: [rows][n_heads *
// head_dim] post-RoPE, oldest first, the first at position first_position.
struct ObserverQueryRows {
  const float* data = nullptr;
  int rows = 0;
  int first_position = 0;
};

// What an observer asks the decoder to record during a forward pass.
struct ObservationRequest {
  int window = 0;                      // keep the post-RoPE queries of the last `window` tokens of the block
  bool accumulated_attention = false;  // column sums of the causal attention of every query of the block
  // With accumulated_attention: the observer reads those column sums in place on the decoder's
  // device only (LayerSignals::column_sums_on_device), so a decoder that computes them there may
  // leave LayerSignals::accumulated_attention null and copy nothing to the host.
  bool column_sums_on_device_only = false;
  bool hidden_norms = false;           // the L2 norm of each block token's layer input (LayerSignals::hidden_norms)
  bool output_grams = false;           // the layer's output-projection Gram matrices (LayerSignals::output_grams)
  bool output_projection = false;      // the layer's output projection per query head (LayerSignals::output_projection)
  bool hidden_states = false;          // each block token's attention input vector (LayerSignals::hidden_states)
  // With hidden_states: the observer reads them only from the decoder's device, in place (the hidden
  // signal of a program that scores there, of the block's own tokens), so a decoder whose
  // activations live on a device may hand them over as LayerSignals::hidden_states_on_device
  // (hidden_states_signal.h) and leave hidden_states empty: then no row comes to the host. The
  // CUDA decoder does so in every call that asks; the CPU decoder hands the host rows.
  bool hidden_states_on_device = false;
  // W > 0: the window attention of the sequence's newest min(W, position + n_tokens) queries (the
  // block's own, and before them the previous calls' when the block is shorter than W: a decode
  // step, a short later block) over the layer's cache as the block's append left it (scaled, the
  // ordinary head map, causal unless window_attention_causal says not; LayerSignals::window_attention).
  // A decoder MAY compute it (the CUDA decoder does, on the device, from the queries it holds
  // through the calls that ask for it: core/decode/query_window_ring.h); an observer must handle
  // its absence, and must expect it only where it keeps the same newest queries itself.
  int window_attention = 0;
  // With window_attention: the observer's own newest queries, one entry per layer (or none), valid
  // until the call's first after_layer. A decoder that holds too few queries for the window
  // attention asked (none were asked for before: NACL's window, found from the prompt's length, is
  // first asked for while decoding when its prompt was not announced, EvictionEngine::
  // announce_prompt) may start its rows from these when they end where the call begins, instead
  // of serving none until it has held W calls' queries.
  std::vector<ObserverQueryRows> observer_queries{};  // {}: designated initializers may omit it
  // false: that window attention not causal, every cached entry visible to every window row (NACL's
  // official proxy scoring); LayerSignals::window_attention.causal says which was computed.
  bool window_attention_causal = true;
  // The observer reads the norms of cached keys or values (key_norm, value_norm): a decoder whose
  // host cache holds positions only for rows it keeps on a device hands it their norms too
  // (KVCache::held_row_norms), so these signals need no row on the host.
  bool row_norms = false;
  // The observer reads the layer's cached keys (values) only from the decoder's device, in place
  // (the K and V signals of a program that scores there): a decoder whose cache lives on a device
  // may hand them over as LayerSignals::cache_rows (cache_rows_signal.h) instead of bringing the
  // rows to the host. A decoder needs to make them only in calls whose cache_row_reads is
  // NoneGivenDecoderSignals and whose rows it leaves on the device (the CUDA decoder makes them
  // then only); in the others the observer reads the host's rows, or none. An observer must
  // handle their absence.
  bool cache_keys_on_device = false;
  bool cache_values_on_device = false;
  // The same for the cached keys before RoPE (K_pre: each key rotated back by its entry's
  // position; cache_rows_signal.h), handed over in the same calls as LayerSignals::cache_rows.
  bool cache_keys_pre_rope_on_device = false;
  // The same for the norms of the layer's cached keys and values (key_norm, value_norm), handed
  // over in the same calls as LayerSignals::cache_rows' norms, computed on the device: then nothing
  // of them crosses the bus (row_norms, the host-held norms, is not asked for beside it).
  bool row_norms_on_device = false;
  // The same for the projected value norms (out_norm_l1: ||W_o,q v_t||_1 for each query head q of a
  // stored head's group, projected_value_norms.h), made from the cached values and the layer's W_o
  // where the decoder holds them, handed over in the same calls as LayerSignals::cache_rows: then
  // neither the rows nor W_o come to the host for them. The observer asks for output_projection
  // beside it (its fallback where a call is not served so); a decoder that hands these over in a
  // call may leave output_projection empty in that call.
  bool out_norms_l1_on_device = false;
  // The observer reads the cached entries' positions on the decoder's device too (the `pos` signal
  // and random()'s key of a program that scores there, and a selection that runs there): a decoder
  // whose cache lives on a device hands over its own (LayerSignals::cached_positions, a description
  // of its arena: nothing is copied) in every call. An observer must handle their absence (it then
  // reads the host cache's).
  bool positions_on_device = false;
  // The prompt query statistics (Q_mean, Q_cov) of the block's queries at positions >= from
  // (query_statistics_block.h): every decoder hands them over when asked (LayerSignals::
  // query_statistics), so the observer needs no query row of the prompt for them: the CPU decoder
  // from its own rows (block_query_statistics), the CUDA decoder on its device.
  QueryStatisticsRequest query_statistics{};
  // The segment-local attention A_seg of a prompt (segment_attention_block.h): in a call at
  // position 0 (a prompt's call; not in any other) every decoder hands it over when asked
  // (LayerSignals::segment_attention), so the observer needs neither the prompt's query rows nor
  // its cached keys for it: the CPU decoder by the host rule from its own rows, the CUDA decoder on
  // its device where its cache is resident (else by the host rule over its host cache, whose rows
  // it then brings to the host: the call counts as not served, serves_asked_signals).
  SegmentAttentionRequest segment_attention{};
  // KVzip's replay attention of one replay chunk (replay_attention_block.h): in the call that
  // starts at position replay_attention.context (the replay's; in no other) every decoder hands it
  // over when asked (LayerSignals::replay_attention), so the observer needs neither the replay's
  // query rows nor the cached keys: the CPU decoder by the host rule from its own rows, the CUDA
  // decoder on its device where its cache is resident (else by the host rule over its host cache,
  // whose rows it then brings to the host: the call counts as not served, serves_asked_signals).
  // With hidden_normalised the observer asks hidden_states too (the row factors are read from them).
  ReplayAttentionRequest replay_attention{};
  // The observer merges evicted entries into kept ones by the row merges of row_merges.h alone
  // (merge-on-evict: Nearest, Pivot, Weighted, CaM, D2O): a decoder whose cache lives on a device may run
  // them there (LayerSignals::cached_row_merges) instead of bringing the rows to the host, in the
  // calls whose cache_row_reads is NoneGivenDecoderSignals and whose rows it leaves there.
  bool cached_row_merges = false;
  // The observer reads no cached key or value after this call unless a later call's
  // cache_row_reads says Reads: a decoder whose cache lives on a device may drop its host copy of
  // the rows at the end of this call (DeviceKvMirror::release_host_rows) and bring them back when a
  // call reads them. (A prompt the observer read, with decode steps that read nothing.)
  bool host_rows_not_read_later = false;
  // > 0: the observer's after_forward of the call that ends at this position (a prompt's end)
  // edits the kept rows on the host (SpindleKV's codebook stage, ThinK's key channels;
  // cache_row_reads.h, prompt_end_edits_rows). A decoder that left rows of that prompt on its device (placeholder or
  // position-only host rows) must bring every row to the host after the call's last layer (the
  // observer's keeps applied: only the kept rows cross) and before that after_forward; the
  // observer relies on it. 0: no such call.
  int host_rows_at_prompt_end = 0;
  // What the observer reads of the cached keys and values in this call, by the call's kind (the
  // default: every row, always). Anything but Reads lets a decoder whose cache lives on a device
  // hand it a host cache whose new rows are placeholders (rows_may_stay_on_device above).
  CacheRowReadsByCall cache_row_reads{};  // {}: designated initializers may omit it without a warning
};

// What of the cached rows a request asks for on the device (LayerSignals::cache_rows).
inline CacheRowsWanted cache_rows_wanted(const ObservationRequest& r) {
  return {r.cache_keys_on_device, r.cache_values_on_device, r.row_norms_on_device, r.cache_keys_pre_rope_on_device,
          r.out_norms_l1_on_device};
}

struct LayerSignals {
  int layer = 0;
  int first_position = 0;  // position of the block's first token
  int n_tokens = 0;        // tokens in the block
  // Post-RoPE queries of the last `window` tokens of the block, [window][n_heads][head_dim];
  // window = min(request.window, n_tokens). Empty if not requested.
  std::span<const float> window_queries;
  int window = 0;
  // accumulated_attention[h][t]: sum over the block's queries of the attention probability that
  // query head h gave cache entry t of its stored head (cache.stored_head_of_query(h): KV head h / G,
  // or h itself in an unfolded cache), in cache order, the block's own entries included.
  // Empty if not requested, or when only the device copy below was asked for. For a one-token
  // block this is the current query's attention.
  const std::vector<std::vector<float>>* accumulated_attention = nullptr;
  // The same column sums in the decoder's device memory (column_sums_signal.h), from a decoder that
  // computed them there (the CUDA decoder); empty otherwise.
  ColumnSumsSignal column_sums_on_device;
  // The block's token ids, [n_tokens] (always set).
  std::span<const int> tokens;
  // hidden_norms[i]: the L2 norm of the layer's input hidden state (the residual stream before
  // the attention norm) at the block's token i, [n_tokens]. Empty if not requested.
  std::span<const float> hidden_norms;
  // hidden_states[i * dim + c]: the layer's attention input at the block's token i, the residual
  // stream AFTER the layer's input RMSNorm (times its weight): what the attention projections read
  // and what kvpress hands a press as `hidden_states`, [n_tokens][dim]. Empty if not requested.
  std::span<const float> hidden_states;
  // The same rows transposed to the hidden signal's [dim][n_tokens] in the decoder's device memory,
  // on request (ObservationRequest::hidden_states_on_device; hidden_states_signal.h: layout,
  // lifetime); hidden_states is then empty. Empty when not requested or not made.
  HiddenStatesSignal hidden_states_on_device;
  // The layer's output projection per query head as Gram matrices, [n_heads][head_dim][head_dim]:
  // G_h = W_o,h^T W_o,h with W_o,h the head_dim columns of W_o that read query head h's attention
  // output, so that ||W_o,h v|| = sqrt(v^T G_h v) (core/decode/output_gram.h). Empty if not requested.
  std::span<const float> output_grams;
  // The same projection as matrices, [n_heads][dim][head_dim]: slice h is W_o,h (row i = output
  // feature i), for ||W_o,h v||_1 (out_norm_l1, core/engine/model_signals.h). Valid during
  // after_layer only (the decoder reuses one buffer). Empty if not requested.
  std::span<const float> output_projection;
  // The block's prompt query statistics on request (ObservationRequest::query_statistics), in host
  // memory, valid during after_layer. Null when not requested.
  const BlockQueryStatistics* query_statistics = nullptr;
  // The prompt's segment attention on request (ObservationRequest::segment_attention), in host
  // memory, valid during after_layer. Null when not requested or not a call at position 0.
  const BlockSegmentAttention* segment_attention = nullptr;
  // The replay chunk's attention maxima on request (ObservationRequest::replay_attention), in host
  // memory, valid during after_layer. Null when not requested or not the replay's call.
  const BlockReplayAttention* replay_attention = nullptr;
  // The window attention the decoder computed on request (window_attention_signal.h: layout,
  // memory, lifetime). Empty when not requested or when the decoder does not compute it.
  WindowAttentionSignal window_attention;
  // The cached keys and values (and their norms) the decoder copied out in its device memory on
  // request (cache_rows_signal.h: layout, lifetime). Empty when not requested or not made.
  CacheRowsSignal cache_rows;
  // The cached entries' positions where the decoder's device cache holds them, on request
  // (cached_positions_signal.h: layout, lifetime). Empty when not requested or held on no device.
  CachedPositionsSignal cached_positions;
  // Where the observer's row merges run when this call's host rows are placeholders and it asked
  // for them (ObservationRequest::cached_row_merges): the decoder's device cache, valid during the
  // forward call. Null otherwise (the observer merges the host's rows, or must not merge).
  CachedRowMerges* cached_row_merges = nullptr;
  // The host cache of this layer holds placeholder rows (DeviceKvMirror::append_placeholders: the
  // observer's ObservationRequest::cache_row_reads for this call was not Reads): it must read no
  // cached key or value. In a one-token call it takes the newest query's attention (A_now) from
  // accumulated_attention (or column_sums_on_device), which is that row; its window attention, in
  // any call, is window_attention, and its K and V (and their norms) are cache_rows
  // (NoneGivenDecoderSignals).
  bool cache_rows_are_placeholders = false;
  // The CUDA device whose memory the signals above marked on_device are (the CUDA decoder's
  // ordinal); -1 from a decoder that hands none. An observer that reads them there must run on it.
  int cuda_device = -1;
};

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual ObservationRequest request() const = 0;
  // Called after layer `signals.layer` has attended and written its K/V; may evict from any layer <= it.
  virtual void after_layer(const LayerSignals& signals, KVCache& cache) = 0;
  // Called once at the end of the block, after the logits are computed.
  virtual void after_forward(int n_tokens, KVCache& cache) { (void)n_tokens; (void)cache; }
};

// Where the CUDA decoder's attention reads the KV cache from (cuda_decoder.h, docs/CUDA.md).
enum class DeviceKvMode {
  Resident,      // a device-resident cache kept equal to the host cache by a mirror (default)
  PackedUpload,  // the reference path: the layer's whole host cache uploaded per forward call
};

// The kernel of the CUDA decoder's prefill attention (calls of more than one token; a one-token
// decode call always takes the own split-K kernel). docs/CUDA.md, "FlashInfer prefill".
enum class PrefillAttention {
  Own,         // cuda::ragged_attention: f32 queries and arithmetic on CUDA cores (the reference)
  FlashInfer,  // cuda::flashinfer_prefill: FlashInfer's tensor-core kernel (a build with FlashInfer)
};

struct DecoderOptions {
  int threads = 0;  // 0: OpenMP/BLAS default
  int device_ordinal = 0;  // CUDA device index for the CUDA backend (make_decoder.h); unused on the CPU
  KvType kv_type = KvType::F16;  // element type of the KV cache (kv_type.h); F32 is the exact reference
  DeviceKvMode device_kv = DeviceKvMode::Resident;  // CUDA backend only; unused on the CPU
  // CUDA backend only. FlashInfer is refused at construction (UsageError) by a build without it,
  // an F32 cache, a head_dim it was not built for, or DeviceKvMode::PackedUpload; calls that ask
  // for accumulated attention (row statistics) use the own kernel.
  PrefillAttention prefill_attention = PrefillAttention::Own;
};

// A decoder's state at one moment: a copy of its host cache and its position, plus whatever a
// backend keeps elsewhere (the CUDA decoder: a device-to-device copy of its device cache). Made by
// Decoder::snapshot and consumed by restore of the same decoder, any number of times (the eval
// sweep's one prefill, many (policy, budget) runs).
class DecoderSnapshot {
 public:
  DecoderSnapshot(KVCache cache, int position) : cache_(std::move(cache)), position_(position) {}
  virtual ~DecoderSnapshot() = default;
  DecoderSnapshot(const DecoderSnapshot&) = delete;
  DecoderSnapshot& operator=(const DecoderSnapshot&) = delete;
  const KVCache& cache() const { return cache_; }  // for byte and entry counts
  int position() const { return position_; }

 private:
  KVCache cache_;
  int position_ = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Runs `tokens` at positions position() .. position()+n-1. Returns the logits of the last token.
  // If `all_logits` is given it receives [n][vocab] logits, one row per token (teacher forcing).
  virtual const std::vector<float>& forward(std::span<const int> tokens, ForwardObserver* observer = nullptr,
                                            std::vector<float>* all_logits = nullptr) = 0;
  virtual KVCache& cache() = 0;
  // The host cache for its lengths, positions and byte counts only: those are exact, its rows may
  // not be (a device-resident cache keeps them on the device, KVCache::rows_held_elsewhere, or as
  // placeholders); read rows through cache(). Brings no row to the host beyond those a lagging
  // layer owes (DeviceKvMirror::sync_host_appends).
  virtual const KVCache& cache_layout() { return cache(); }
  // The host cache for edits by keeps between calls (KVCache::keep: an eviction after the forward
  // that made its signals, KVzip's after its replay) by a caller that reads no row: lengths and
  // positions exact, rows as cache_layout leaves them (a device-resident cache follows the keeps
  // through its listener, device_kv_mirror.h). Brings no row to the host beyond cache_layout's.
  virtual KVCache& cache_for_keeps() { return cache(); }
  virtual int position() const = 0;   // next position (tokens processed so far; not the cache length)
  virtual void set_position(int position) = 0;  // used when restoring a cache snapshot
  virtual void reset() = 0;           // empty cache, position 0
  // The cache and position as they are now; restore returns to them (the host cache is assigned,
  // so a listener attached to it stays attached and is told). restore throws std::invalid_argument
  // for a snapshot another decoder made.
  virtual std::unique_ptr<DecoderSnapshot> snapshot() const = 0;
  virtual void restore(const DecoderSnapshot& snapshot) = 0;
  virtual std::string device_name() const = 0;
  virtual const Model& model() const = 0;
  // What its device-resident KV cache cost so far (device_kv_stats.h): the CUDA decoder's mirror in
  // DeviceKvMode::Resident; all zero otherwise (the CPU decoder, the packed upload).
  virtual DeviceKvStats device_kv_stats() const { return {}; }
  // What its device-resident KV cache occupies on the device now (pending work flushed first), as
  // opposed to KVCache::bytes_in_use, the policy's accounting of the host cache: they agree for a
  // dense cache, and differ where the device holds more (SpindleKV's codebook heads are held there
  // as their dense reconstructions beside the books). nullopt without a device-resident cache.
  virtual std::optional<DeviceKvBytes> device_kv_bytes() { return std::nullopt; }
};

std::unique_ptr<Decoder> make_cpu_decoder(const Model& model, const DecoderOptions& options = {});

}  // namespace kvevict
