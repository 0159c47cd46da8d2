#pragma once
// Keeps a device KV cache (cuda::DeviceKvCache, or its CPU twin DeviceKvTwin) equal to a host
// KVCache that the eviction engine mutates, by listening to the host cache's mutations
// (kv_cache_listener.h) and replaying them on the device in batches. Host code, no CUDA.
//
// What goes to the device, and when:
//  - keep(layer, head, indices) is recorded, composed with earlier keeps of the same head, and
//    sent as ONE compact(layer, lists) per layer at the next flush(layer); heads of the layer that
//    kept nothing get the identity list. Ascending lists compose to ascending lists, so positional
//    policies stay on the in-place path.
//  - write_entry marks the row; reassign_positions, a codebook, or a wholesale replacement marks
//    the head (or every head) for a resync: at flush those rows are uploaded from the host's f32
//    view (reconstruct_keys/values: the stored words converted exactly, or a codebook head's
//    reconstruction) with the positions, through the backend's write_rows, which rounds as append
//    does. clear() empties the device heads at the next flush. Re-assigned positions on a head
//    whose rows are on the device only (position-only) are re-assigned there instead: at flush,
//    after the compaction, one backend reassign_positions per layer (the keys rotated on the
//    device with the host cache's RoPE table, device_kv_reassign.h); a keep of such a head before the
//    flush first applies the pending work (a keep and a rotation do not compose: two rotations
//    round twice).
//  - appends: with MirrorAppends::Decoder the decoder appends each block to the device itself
//    (straight from its projection's device buffers) and must call flush(layer) BEFORE doing so;
//    the host append only advances the bookkeeping (a codebook head's row is marked for resync,
//    since the host stores it approximated). With MirrorAppends::Host the mirror copies each
//    host append's f32 rows and writes them at the next flush (the CPU decoder, tests).
//  - deferred host appends (Decoder mode): when no one reads the host cache during a forward call
//    (no observer), the decoder appends to the device only and calls defer_host_append. A layer
//    whose host heads hold no real row takes position-only placeholders (below); otherwise the host
//    cache lags the device by those rows until sync_host() reads them back (O(rows lagged),
//    the device's stored words converted exactly, so the host ends with the words it would have
//    stored itself). Whoever hands the host cache out must sync_host() first. While a layer lags,
//    any other mutation of its host heads is a std::logic_error (it would number rows the host
//    does not have); clear(), a replacement and mark_synced() end the lag.
//  - placeholder host rows (Decoder mode): when the observer of a call reads no keys or values
//    of the host cache (ObservationRequest::cache_row_reads not Reads for the call: the prompt
//    blocks of window-attention policies, the decode steps of CAKE's, H2O's or TOVA's indicator), the decoder appends the block to the device and
//    only a placeholder (zero rows with the right positions) to the host: lengths and positions
//    stay exact, so the engine's keeps number the same rows on both sides, and no key or value
//    byte leaves the device. A head that holds no row of its own on the host (empty, or every row
//    a placeholder) takes positions only (KVCache::append_position: no host memory for the rows,
//    and no per-row list in the mirror); one holding real rows takes zero rows, listed (a head
//    holds every row or none). The mirror tracks which host rows are placeholders through keeps;
//    sync_host() overwrites them with the device's words (O(placeholders), once, when someone asks
//    for the host cache). A written entry, re-assigned positions or a codebook on a head holding
//    placeholders is a std::logic_error (the observer said it reads no rows).
//  - row norms (Decoder mode, while hold_row_norms(true): the call's observer reads key_norm or
//    value_norm): every position-only host head also holds its rows' norms (KVCache::
//    held_row_norms), read from the device with each placeholder append (one read of rows x heads
//    x 2 floats per layer) or, for a head that has none, at once; placeholders are then positions
//    only or not made (a layer holding real rows takes the real rows), since norms computed from
//    zero rows would be wrong.
// After flush(layer) every head of the layer holds on the device exactly what the host holds:
// the same words of the KvType and the same positions; a flush that had work ends with the
// backend's release_room(layer) (a layer left mostly empty gives its arenas' room back).
//
// Unfolded caches (one stored head per query head) are not mirrored: after unfold() events are
// ignored and flush throws std::logic_error until clear() or a replacement by a folded cache.
// A host cache of another geometry than the backend's throws std::invalid_argument (construction,
// or the flush after a replacement).
#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_stats.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/kv_cache.h"
#include "core/decode/kv_cache_listener.h"
#include "core/decode/row_merges.h"
#include "core/decode/row_norms.h"

namespace kvevict {

// The operations the mirror needs from a device cache (both DeviceKvTwin and cuda::DeviceKvCache
// have them; DeviceKvBackendFor adapts either).
class DeviceKvBackend {
 public:
  virtual ~DeviceKvBackend() = default;
  virtual const DeviceKvLayout& layout() const = 0;
  virtual void compact(int layer, const std::vector<std::vector<int>>& keep) = 0;
  // Gives the layer's room back when it is mostly empty (DeviceKvLayout::layout_to_release); keeps
  // the arenas where the smaller ones cannot be allocated (optional work: never an error).
  virtual void release_room(int layer) = 0;
  virtual void write_rows(int layer, int head, int64_t first_row, int64_t rows, const float* keys,
                          const float* values, const int32_t* positions) = 0;
  virtual DeviceKvHeadContents read_rows(int layer, int head, int64_t first_row, int64_t rows) const = 0;
  virtual std::vector<int32_t> read_positions(int layer, int head, int64_t first_row, int64_t rows) const = 0;
  // The norms (row_norms.h) of rows [first_row[h], first_row[h] + rows[h]) of every head h of
  // `layer`, head after head: one read for the layer.
  virtual std::vector<RowNorms> row_norms(int layer, std::span<const int64_t> first_row,
                                          std::span<const int64_t> rows) const = 0;
  // Re-assigns the positions of the heads h of `layer` with heads[h] != 0 on the device, rotating
  // their keys with `rope` (device_kv_reassign.h): KVCache::reassign_positions' work, done there.
  virtual void reassign_positions(int layer, std::span<const char> heads, const RopeTableView& rope) = 0;
  // The row merges of row_merges.h on the device cache (device_kv_merges.h): the search over every
  // listed head of a layer, the value norms and folds over one head.
  virtual std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer,
                                                                   std::span<const KeptKeySearch> searches) const = 0;
  virtual std::vector<double> value_norms(int layer, int head, std::span<const int> rows) const = 0;
  virtual void fold_rows(int layer, int head, const RowFolds& folds) = 0;
  // SpindleKV's codebooks on the device (device_kv_codebook.h, device_kv_codebook_books.h): the
  // host's codes, a decoded block's last `rows` rows of every head matched and overwritten with
  // their reconstructions (keys / values: the block as appended, in the backend's memory), and what
  // the device added since, read back.
  virtual void load_codebooks(int layer, const DeviceCodebookLoad& load) = 0;
  virtual void codebook_append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
                               int32_t first_position, const RopeTableView& rope) = 0;
  virtual DeviceCodebookNews codebook_news(int layer) = 0;
};

template <class Cache>
class DeviceKvBackendFor final : public DeviceKvBackend {
 public:
  explicit DeviceKvBackendFor(Cache& cache) : cache_(cache) {}
  const DeviceKvLayout& layout() const override { return cache_.layout(); }
  void compact(int layer, const std::vector<std::vector<int>>& keep) override { cache_.compact(layer, keep); }
  void release_room(int layer) override { cache_.release_room(layer); }
  void write_rows(int layer, int head, int64_t first_row, int64_t rows, const float* keys, const float* values,
                  const int32_t* positions) override {
    cache_.write_rows(layer, head, first_row, rows, keys, values, positions);
  }
  DeviceKvHeadContents read_rows(int layer, int head, int64_t first_row, int64_t rows) const override {
    return cache_.read_rows(layer, head, first_row, rows);
  }
  std::vector<int32_t> read_positions(int layer, int head, int64_t first_row, int64_t rows) const override {
    return cache_.read_positions(layer, head, first_row, rows);
  }
  std::vector<RowNorms> row_norms(int layer, std::span<const int64_t> first_row,
                                  std::span<const int64_t> rows) const override {
    return cache_.row_norms(layer, first_row, rows);
  }
  void reassign_positions(int layer, std::span<const char> heads, const RopeTableView& rope) override {
    cache_.reassign_positions(layer, heads, rope);
  }
  std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer,
                                                           std::span<const KeptKeySearch> searches) const override {
    return cache_.nearest_kept_keys(layer, searches);
  }
  std::vector<double> value_norms(int layer, int head, std::span<const int> rows) const override {
    return cache_.value_norms(layer, head, rows);
  }
  void fold_rows(int layer, int head, const RowFolds& folds) override { cache_.fold_rows(layer, head, folds); }
  void load_codebooks(int layer, const DeviceCodebookLoad& load) override { cache_.load_codebooks(layer, load); }
  void codebook_append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
                       int32_t first_position, const RopeTableView& rope) override {
    cache_.codebook_append(layer, rows, keys, values, src_stride, first_position, rope);
  }
  DeviceCodebookNews codebook_news(int layer) override { return cache_.codebook_news(layer); }

 private:
  Cache& cache_;
};

// Who appends new entries to the device (see the header comment).
enum class MirrorAppends { Decoder, Host };

// The mirror is also where the engine's row merges run when a call's host rows stay on the device
// (CachedRowMerges, row_merges.h; LayerSignals::cached_row_merges): see nearest_kept_keys and
// fold_rows below.
class DeviceKvMirror final : public KvCacheListener, public CachedRowMerges {
 public:
  // Attaches itself to `cache` (replacing any listener) and marks every non-empty head for a resync
  // (the backend must start empty), so the first flush uploads whatever the host holds. Both must
  // outlive the mirror.
  DeviceKvMirror(KVCache& cache, DeviceKvBackend& backend, MirrorAppends appends);
  ~DeviceKvMirror() override;  // detaches from the cache
  DeviceKvMirror(const DeviceKvMirror&) = delete;
  DeviceKvMirror& operator=(const DeviceKvMirror&) = delete;

  // Sends the layer's pending work to the device: buffered appends, one compaction, then the row
  // and head resyncs. Cheap when nothing is pending. Throws std::logic_error when afterwards a
  // head's device length differs from the host's (a mutation the mirror did not hear of), or the
  // host cache is unfolded; std::invalid_argument for a bad layer or another geometry.
  void flush(int layer);
  void flush_all();
  // Declares the device equal to the host as it is now, dropping pending work: for a caller that
  // restored both from matching snapshots (the decoder's restore).
  void mark_synced();
  bool pending(int layer) const;

  // Decoder mode: the decoder appended `rows` rows (positions first_position, first_position + 1,
  // ...) to every head of `layer` on the device only (after flush(layer)). Where no head of the
  // layer holds a real row on the host (empty or position-only heads), the host takes position-only
  // placeholders (as append_placeholders; nothing lags); otherwise the layer lags by `rows`.
  // Returns false, deferring nothing, where the host must take the rows now: Host mode, an
  // unfolded cache, pending work on the layer, a head whose host rows are not the device's words
  // (a codebook head), or re-assigned positions (the next position is the host's length, so the
  // host may not lag) on a layer whose heads hold real rows; the caller then appends to the host as
  // usual.
  // A layer whose heads are all codebook heads (SpindleKV) defers too when the decoder hands over
  // the block as appended (`keys` / `values`: [rows][src_stride] f32 in the backend's memory) and
  // the device holds the layer's books as the host holds them (after flush(layer)): the backend
  // matches the rows against its books and stores their reconstructions (codebook_append), and
  // the host catches up from the codes and entries the device logged (sync_host; no row crosses in
  // the decode loop). Without the block such a layer is not deferred.
  bool defer_host_append(int layer, int rows, int32_t first_position, const float* keys = nullptr,
                         const float* values = nullptr, int64_t src_stride = 0);
  // Decoder mode: the decoder appended `rows` rows (positions first_position, first_position + 1,
  // ...) to every head of `layer` on the device (after flush(layer)); the host takes placeholder
  // rows with those positions. Returns false, appending nothing, where defer_host_append would, or
  // while the layer lags; the caller then appends the real rows to the host.
  bool append_placeholders(int layer, int rows, int32_t first_position);
  // The host cache made whole: every lagging row appended and every placeholder row overwritten
  // from the device (one read per run of rows). Throws std::logic_error when the device does not
  // hold host + lagged rows, or a placeholder's position differs from the device's.
  void sync_host();
  // Only the lagging rows (the placeholders stay): for a call that keeps using placeholders.
  void sync_host_appends();
  // Decoder mode: every dense host head holding real rows that equal the device's (after flushing
  // the pending work: no lag, no placeholder) drops them and holds its positions only
  // (KVCache::release_rows): for an observer that reads no cached row in the calls to come
  // (ObservationRequest::host_rows_not_read_later). A later call that reads rows brings each head's
  // back in one read (sync_host). Returns the heads released (DeviceKvCounts::heads_released). Host
  // mode, an unfolded cache and codebook heads release nothing.
  int release_host_rows();
  // What a copy of the host cache needs (the decoder's snapshot): lagging rows appended and the
  // placeholders of heads that hold real rows filled; position-only heads stay so (no row crosses;
  // after the copy is assigned back, mark_synced ends the mirror's lists and lag; the position-only
  // heads say by themselves that their rows are on the device).
  void sync_host_for_copy();
  // Whether position-only host heads hold their rows' norms from now on (see the header comment):
  // the decoder sets it per call (an observer that reads key_norm or value_norm). Turning it on
  // gives the heads that lack them their norms now (one read per layer, after flushing it); while
  // off, positions come without norms and the heads drop theirs (no one reads them: no transfer).
  void hold_row_norms(bool hold);
  bool holds_row_norms() const { return row_norms_; }
  int host_lag(int layer) const { return host_lag_.at(static_cast<size_t>(layer)); }
  // Whether some host head of the layer holds placeholders or is position-only.
  bool has_placeholders(int layer) const;
  // Host rows of (layer, head) that are zero placeholders (ascending). A position-only head
  // (KVCache::rows_held_elsewhere) has none listed: every row of it is on the device only.
  const std::vector<int>& placeholder_rows(int layer, int head) const {
    return placeholders_.at(static_cast<size_t>(layer) * n_heads_ + head);
  }

  // Row merges on the device (row_merges.h: the search, the value norms, the folds), numbered as the
  // host cache numbers the head now: the layer's pending work is flushed first (so device row t is host row t), then the backend runs
  // them. After fold_rows the host copy is the device's again: a position-only head re-reads its
  // held norms (when it holds them); a head holding real rows lists every folded row as a
  // placeholder (sync_host brings the folded words back). std::logic_error on an unfolded cache, a
  // lagging layer or a codebook head (its rows are the host's reconstruction); the backend's
  // std::invalid_argument for bad indices. DeviceKvCounts::rows_folded counts the rows written.
  std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer, std::span<const KeptKeySearch> searches) override;
  std::vector<double> value_norms(int layer, int head, std::span<const int> rows) override;
  void fold_rows(int layer, int head, const RowFolds& folds) override;

  // What the mirror did and the host time it took, since construction (device_kv_stats.h).
  using Counts = DeviceKvCounts;
  using Seconds = DeviceKvSeconds;
  const Counts& counts() const { return counts_; }
  const Seconds& seconds() const { return seconds_; }

  void on_append(int layer, int head, int32_t position, const float* key, const float* value) override;
  void on_keep(int layer, int head, std::span<const int> indices) override;
  void on_write_entry(int layer, int head, int t) override;
  void on_reassign(int layer, int head) override;
  void on_codebook(int layer, int head) override;
  void on_unfold() override;
  void on_clear() override;
  void on_replaced() override;

 private:
  // One (layer, head)'s difference between the device and the host. Device rows are numbered as
  // the device holds them, then the rows of `tail` (Host mode appends not written yet).
  struct HeadState {
    bool keep_pending = false;
    std::vector<int> map;           // keep_pending: device row of each host row, in host order
    bool resync = false;            // upload the whole head from the host
    bool reassign = false;          // re-assign its positions on the device (a position-only head)
    std::vector<int> dirty;         // host rows to upload (may repeat)
    std::vector<float> tail_keys, tail_values;  // Host mode: appended rows not on the device yet
    std::vector<int32_t> tail_positions;
  };
  HeadState& state(int layer, int head) { return heads_[static_cast<size_t>(layer) * n_heads_ + head]; }
  const HeadState& state(int layer, int head) const { return heads_[static_cast<size_t>(layer) * n_heads_ + head]; }
  // "layer L head H", for the errors.
  static std::string where(int layer, int head);
  void check_geometry() const;
  void mark_all_for_resync();
  void write_tail(int layer, int head, HeadState& s);
  void compact_layer(int layer);
  // flush's work without its final check (the host may already hold a mutation not yet recorded).
  void apply_pending(int layer);
  void reassign_on_device(int layer);
  void resync_head(int layer, int head);  // upload the whole head from the host at the next flush
  void resync_rows(int layer, int head, HeadState& s);
  void refuse_while_lagging(int layer, int head, const char* what) const;
  void refuse_placeholders(int layer, int head, const char* what) const;
  bool host_takes_rows_now(const char* what, int layer, int rows) const;
  // The host head is empty or position-only: it may take positions only (KVCache::append_position).
  bool host_head_holds_no_row(int layer, int head) const;
  void add_placeholders(int layer, int rows, int32_t first_position);
  // With row_norms_: the norms of the last `rows` device rows of each head of `layer` that holds no
  // row on the host (others: none), head after head, in one read; empty otherwise.
  std::vector<RowNorms> appended_row_norms(int layer, int rows) const;
  void fill_placeholders(int layer, bool position_only_heads);
  void fill_head(int layer, int head, KvType type);
  void append_lagging_rows();
  void refuse_unmergeable(int layer, int head, const char* what) const;
  // Codebooks (device_kv_mirror_codebooks.cpp): whether every head of the layer is a codebook head;
  // the layer's books sent where the device's differ from the host's (part of a flush); whether a
  // block may be matched on the device now; the host's catch-up from the device's news.
  bool all_heads_codebook(int layer) const;
  void send_codebooks(int layer);
  bool codebooks_current(int layer) const;
  void mark_codebooks_for_reload();
  void append_lagging_codebook_entries(int layer, int lag);

  KVCache& cache_;
  DeviceKvBackend& backend_;
  MirrorAppends appends_;
  int n_layers_ = 0, n_heads_ = 0, head_dim_ = 0;
  bool unfolded_ = false;
  std::vector<HeadState> heads_;    // [layer][head]
  std::vector<char> layer_pending_;  // [layer]
  std::vector<int> host_lag_;        // [layer]: rows every head of the layer has on the device only
  std::vector<std::vector<int>> placeholders_;  // [layer][head]: host rows holding placeholders, ascending
  // Per layer, the codebooks the device holds: `loaded` as of the host's codes at the last send or
  // catch-up, `key_codes` / `value_codes` of each book (a prefix of the host's while the host only
  // appends codes); `reload` sends them all again (a keep drops and renumbers codes).
  struct LayerBooks {
    bool loaded = false, reload = false, shared = false;
    std::vector<int32_t> key_codes, value_codes;  // [books]
  };
  std::vector<LayerBooks> books_;    // [layer]
  bool filling_ = false;             // sync_host is overwriting placeholders: its own writes are not news
  bool row_norms_ = false;           // hold_row_norms(true)
  Counts counts_;
  Seconds seconds_;
  std::vector<float> keys_, values_;  // upload scratch
};

}  // namespace kvevict
