#pragma once
// The KV cache, built for eviction: each (layer, KV head) is its own ragged sequence of entries,
// stored contiguously ([len][head_dim] keys post-RoPE, [len][head_dim] values, original positions).
// Eviction compacts physically (`keep`): survivors move to the front, the length shrinks and the
// freed tail is reused by later appends (or released with `shrink_to_fit`). Masking is not eviction.
// Keys before RoPE are recovered exactly by rotating back with the entry's original position.
//
// A (layer, KV head) is either dense (the arrays above) or codebook-backed (SpindleKV, see
// CodebookHead): then only codes, per-entry code indices and norms, and positions are stored, and
// readers reconstruct entries on demand (`reconstruct_keys/values`, `keys_or_reconstruct`).
// `keys()`/`values()`/`mutable_*` only exist for dense heads and throw std::logic_error otherwise,
// because a pointer into float storage that is not there would be a lie.
//
// Stored heads. Every per-head accessor takes a *stored head* index. By default there is one
// stored head per KV head (stored head == KV head, the GQA-true layout of spec policies.md §6).
// `unfold_keep` / `unfold` switch the cache to one stored head per *query head* (SpindleKV's "fully
// unfold GQA", gqa_mode = unfold): stored head h holds its own copy of KV head h / G's entries, may
// keep a different subset of them, and is what query head h attends to. `append` always takes a
// KV head and writes to every stored head that copies it. Byte counts are what is stored (H copies
// when unfolded), never the folded equivalent. `clear` returns to one stored head per KV head.
//
// Element type (kv_type.h). Dense keys and values are stored as the cache's KvType (F16 by
// default, BF16, or F32), chosen once at construction: appends convert from f32, every reader gets
// f32 (`reconstruct_*`, `keys_or_reconstruct` convert into scratch). `keys()`/`values()`/`mutable_*`
// exist only for an F32 cache (std::logic_error otherwise), like for codebook heads. Codebook codes
// and norms stay f32 (they are few; their reconstruction multiplies them anyway).
//
// Rows held elsewhere (kv_cache_rows_elsewhere.cpp). A dense head of a folded cache may hold only
// its lengths and positions while its keys and values live somewhere else (a device cache that
// DeviceKvMirror keeps equal: the host then costs 4 bytes per entry, not 2 * head_dim * elements):
// append_position appends such an entry, and a head holds either every row or none. Every reader
// of a row-less head's rows (reconstruct_*, keys_or_reconstruct, stored_*, keys(), write_entry, a
// codebook, unfolding) throws std::logic_error instead of reading nothing (reassign_positions only
// re-numbers it: the holder re-rotates the rows);
// keep() and the byte counts work (bytes_in_use counts the rows where they are held, as the cache
// they describe; bytes_reserved what this object holds). take_rows() brings the rows back.
// A row-less head may also hold its rows' norms (RowNorms, row_norms.h: computed by whoever holds
// the rows, from the words this cache would store), handed over with each position or at once
// (set_held_row_norms): the key_norm and value_norm signals then need no row. A head holds the
// norms of every entry or of none; keep() permutes them with the positions.
//
// Listener (kv_cache_listener.h). One KvCacheListener may be attached; every mutation of the
// contents is reported to it after it succeeded. Copies never carry it; assigning into a cache
// keeps the target's listener and reports on_replaced().
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/decode/kv_cache_listener.h"
#include "core/decode/kv_rows.h"
#include "core/decode/kv_type.h"
#include "core/decode/rope.h"
#include "core/decode/device_kv_codebook.h"
#include "core/decode/edit_stamp.h"
#include "core/decode/row_norms.h"
#include "core/model/model_config.h"

namespace kvevict {

// Storage of one codebook-backed (layer, KV head). Entry t reconstructs as
//   key_t   = RoPE(key_codes[key_index[t]] * key_norm[t], position_t)   (codes are pre-RoPE)
//   value_t = value_codes[value_index[t]] * value_norm[t]
// Codes are unit vectors (or zero). An appended entry joins the code of highest cosine with its
// normalised pre-RoPE key (value) when that cosine is > theta_key (theta_value), ties to the lower
// code index; otherwise it becomes a new code (SpindleKV's decode rule, spec policies.md §4.2).
struct CodebookHead {
  std::vector<float> key_codes, value_codes;    // [n_codes][head_dim]
  std::vector<int32_t> key_index, value_index;  // [len]
  std::vector<float> key_norm, value_norm;      // [len]
  double theta_key = 1.0, theta_value = 1.0;
  // true: key_codes / value_codes are empty and the codes are the layer's shared ones
  // (KVCache::layer_codebook, codebook_scope = per_layer_across_heads).
  bool shared_codes = false;
};

// Codes shared by every stored head of one layer (spec §4.2 eq. 15 r2: the codebook spans heads,
// which lets the G identical copies of an unfolded cache collapse to one code).
struct LayerCodebook {
  std::vector<float> key_codes, value_codes;  // [n_codes][head_dim], unit vectors
};

class KVCache {
 public:
  KVCache() = default;
  explicit KVCache(const ModelConfig& config, KvType type = KvType::F16);

  KvType kv_type() const { return kv_type_; }

  // Attaches `listener` (not owned; nullptr detaches). It replaces any listener attached before.
  void set_listener(KvCacheListener* listener) { listener_.ptr = listener; }
  KvCacheListener* listener() const { return listener_.ptr; }

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  // Heads stored per layer: n_kv_heads, or n_heads once unfolded.
  int n_stored_heads() const { return n_stored_; }
  bool unfolded() const { return unfolded_; }
  int kv_head_of_stored(int stored) const { return unfolded_ ? stored / group_ : stored; }
  int stored_head_of_query(int query_head) const { return unfolded_ ? query_head : query_head / group_; }

  // Switches to one stored head per query head: stored head h of layer l keeps the entries
  // kept[l][h] (indices into KV head h / G's entries, in the order given, each in range, no
  // duplicates). Each folded head is released once its copies are built.
  // Throws std::logic_error when already unfolded or a head is codebook-backed,
  // std::invalid_argument on bad shapes or indices.
  void unfold_keep(const std::vector<std::vector<std::vector<int>>>& kept);
  // unfold_keep with every entry kept: G identical copies of each KV head.
  void unfold();

  int length(int layer, int kv_head) const { return static_cast<int>(head(layer, kv_head).positions.size()); }
  // The head's edit stamp (edit_stamp.h): unchanged while its entries were only appended to. keep,
  // reassign_positions, unfolding and clear renew it; a copied cache's heads have fresh stamps.
  uint64_t edit_stamp(int layer, int kv_head) const { return head(layer, kv_head).stamp.value(); }
  int64_t total_entries() const;  // sum of lengths over all (layer, KV head)

  // Dense heads of an F32 cache only (std::logic_error on a codebook head or another KvType).
  const float* keys(int layer, int kv_head) const { return dense_f32(layer, kv_head).keys.f32(); }  // post-RoPE
  const float* values(int layer, int kv_head) const { return dense_f32(layer, kv_head).values.f32(); }
  const int32_t* positions(int layer, int kv_head) const { return head(layer, kv_head).positions.data(); }
  float* mutable_keys(int layer, int kv_head) { return const_cast<float*>(keys(layer, kv_head)); }
  float* mutable_values(int layer, int kv_head) { return const_cast<float*>(values(layer, kv_head)); }
  // The stored rows of a dense head in the cache's KvType (std::logic_error on a codebook head):
  // for kernels that convert one row at a time instead of a whole block.
  const KvRows& stored_keys(int layer, int kv_head) const { return dense(layer, kv_head).keys; }
  const KvRows& stored_values(int layer, int kv_head) const { return dense(layer, kv_head).values; }
  // Keys of every entry with RoPE undone, [len][head_dim] (any head).
  std::vector<float> keys_pre_rope(int layer, int kv_head) const;

  // Any head: post-RoPE keys / values of entries [t0, t1) written to out ([t1 - t0][head_dim]).
  // Thread-safe for concurrent readers (no mutation of the cache).
  void reconstruct_keys(int layer, int kv_head, int t0, int t1, float* out) const;
  void reconstruct_values(int layer, int kv_head, int t0, int t1, float* out) const;
  // Every key (value) of the head as f32: the stored array of a dense F32 head, or the whole head
  // converted / reconstructed into `scratch` (resized; the pointer is valid while scratch is untouched and the cache unchanged).
  const float* keys_or_reconstruct(int layer, int kv_head, std::vector<float>& scratch) const;
  const float* values_or_reconstruct(int layer, int kv_head, std::vector<float>& scratch) const;

  bool is_codebook(int layer, int kv_head) const { return head(layer, kv_head).codebook.has_value(); }
  // nullptr for a dense head.
  const CodebookHead* codebook(int layer, int kv_head) const {
    const auto& cb = head(layer, kv_head).codebook;
    return cb ? &*cb : nullptr;
  }
  // Replaces the head's K/V by `cb` (indices and norms for its current entries, positions kept) and
  // releases the dense arrays. Throws std::invalid_argument when sizes or indices do not fit.
  void set_codebook(int layer, int kv_head, CodebookHead cb);
  // Makes every stored head of `layer` codebook-backed with one set of codes for the whole layer:
  // heads[h] holds head h's indices and norms (its own code arrays must be empty), indices refer to
  // `codes`. Codes are counted once per layer in the byte counts. Throws std::invalid_argument.
  void set_layer_codebook(int layer, LayerCodebook codes, std::vector<CodebookHead> heads);
  // The layer's shared codes, or nullptr when its heads have none.
  const LayerCodebook* layer_codebook(int layer) const;
  // A codebook head's catch-up from a device that appended its entries (DeviceKvMirror::sync_host,
  // device_kv_codebook.h): extend_codebook_codes appends codes to the head's book (the layer's when
  // its codes are shared: call it once per layer), then append_codebook_entries appends the entries
  // with their positions, as append would have stored them. The listener hears on_append with null
  // key and value per entry. Throws std::logic_error on a dense head, std::invalid_argument when the
  // codes are not whole head_dim vectors, the spans differ in length, or an index names no code.
  void extend_codebook_codes(int layer, int kv_head, std::span<const float> key_codes,
                             std::span<const float> value_codes);
  void append_codebook_entries(int layer, int kv_head, std::span<const int32_t> positions,
                               std::span<const CodebookEntry> entries);
  // Makes rope_table() cover positions [0, position]: for whoever rotates this cache's keys
  // elsewhere (the device's codebook append).
  void reserve_rope_table(int32_t position) { reserve_rope(position); }

  // Appends one entry of KV head `kv_head` to every stored head holding that KV head (one, or G
  // copies when unfolded). `key` is post-RoPE. On a codebook head it is matched against the codes.
  void append(int layer, int kv_head, int32_t position, const float* key, const float* value);

  // Appends an entry whose key and value are held elsewhere (see the header comment) to dense KV
  // head `kv_head` of a folded cache; the listener hears on_append with null key and value. Throws
  // std::logic_error on an unfolded cache, a codebook head, or a head holding rows (a head holds
  // every row or none; an empty head holds none after this). `norms`: the row's norms; the head
  // holds its rows' norms while every entry came with them (an empty head starts afresh), and drops
  // them at the first entry that comes without.
  void append_position(int layer, int kv_head, int32_t position, const RowNorms* norms = nullptr);
  // Gives a row-less head the norms of all its rows, one per entry in cache order (replacing any).
  // Throws std::logic_error when the head holds its rows (or none), std::invalid_argument when the
  // count is not its length.
  void set_held_row_norms(int layer, int kv_head, std::span<const RowNorms> norms);
  // Whether the head's rows are held elsewhere and it holds their norms.
  bool holds_row_norms(int layer, int kv_head) const {
    const Head& h = head(layer, kv_head);
    return rows_held_elsewhere(layer, kv_head) && h.norms_held;
  }
  // The norms of a row-less head's rows, one per entry in cache order. Throws std::logic_error
  // when the head holds its rows (compute them from the rows) or was not handed its norms.
  std::span<const RowNorms> held_row_norms(int layer, int kv_head) const;
  // True when the head has entries and holds none of their rows.
  bool rows_held_elsewhere(int layer, int kv_head) const {
    const Head& h = head(layer, kv_head);
    return h.rows_elsewhere && !h.positions.empty();
  }
  // Gives a row-less head its rows: `keys` and `values` are [length][head_dim] f32 (post-RoPE keys),
  // rounded once to the cache's KvType, in cache order. The listener hears on_write_entry for each
  // row. Throws std::logic_error when the head holds its rows already.
  void take_rows(int layer, int kv_head, const float* keys, const float* values);
  // The inverse: a dense head that holds its rows drops them (their memory freed) and holds its
  // positions only, its rows held elsewhere from now on. For the holder of an equal copy (the
  // CUDA decoder's mirror, DeviceKvMirror::release_host_rows), so the listener hears nothing: the
  // cache's contents do not change. Throws std::logic_error on an unfolded cache, a codebook head,
  // or a head that holds no row (empty or already position-only).
  void release_rows(int layer, int kv_head);

  // Position re-assignment (StreamingLLM's official pos_shift, kvpress key re-rotation; spec
  // policies.md §5.1, §7), kv_cache_positions.cpp. Entry t of the head gets position t (cache order)
  // and its key is re-rotated to match: dense key = RoPE(RoPE^-1(key, old position), t); a codebook
  // head only rewrites positions (its keys are rebuilt from pre-RoPE codes). Entries already at
  // their index stay bit-identical. The head is then marked re-assigned: next_position() becomes
  // its length, so appended tokens continue at the cache length. `keep` does not re-assign by
  // itself: whoever evicts from a re-assigned head re-assigns it before the next append (the
  // engine does, with run.reassign_positions). clear() drops the mark.
  // A head whose rows are held elsewhere only takes its new positions (and drops its rows' norms,
  // which the rotation changes by rounding): whoever holds the rows re-rotates them with
  // rope_table(), which this call reserves for every old position and new index first
  // (DeviceKvMirror: on the device).
  void reassign_positions(int layer, int kv_head);
  bool positions_reassigned(int layer, int kv_head) const { return head(layer, kv_head).reassigned; }
  // The cache's RoPE table as reserved so far (valid until the next mutation that reserves more).
  RopeTableView rope_table() const { return rope_.table(); }
  bool any_positions_reassigned() const;
  // Position of the next entry appended to the head, for a token at index `absolute` of the
  // sequence: `absolute`, or the head's length once its positions were re-assigned.
  int32_t next_position(int layer, int kv_head, int32_t absolute) const {
    return positions_reassigned(layer, kv_head) ? length(layer, kv_head) : absolute;
  }

  // Overwrites entry t of a dense head with `key` (post-RoPE, at the entry's position) and `value`,
  // both f32, rounded once to the cache's KvType; the position is unchanged. nullptr leaves that
  // half as it is. For merge-on-evict (core/engine/merge_on_evict.h). Throws std::logic_error on a
  // codebook head, std::invalid_argument when t is out of range.
  void write_entry(int layer, int kv_head, int t, const float* key, const float* value);

  // Keeps exactly the entries at `indices` (cache order, each in [0, length), no duplicates), in the
  // order given, moving them to the front in place. Throws std::invalid_argument on a bad index.
  // On a codebook head, codes no survivor refers to are dropped (indices renumbered, order kept).
  void keep(int layer, int kv_head, std::span<const int> indices);

  // Bytes held by live entries, summed over stored heads. Dense head: 2 * len * head_dim *
  // kv_type_size(kv_type()) + len * sizeof(int32_t). Codebook head: (key codes + value codes) * head_dim *
  // sizeof(float) + len * (2 * (sizeof(int32_t) + sizeof(float)) + sizeof(int32_t)); shared layer
  // codes are not in any head's count and are added once per layer to bytes_in_use. A head whose
  // rows are held elsewhere counts as a dense head: the cache it describes holds them.
  size_t bytes_in_use() const;
  size_t head_bytes_in_use(int layer, int kv_head) const;
  // Bytes reserved by this object's containers (>= bytes_in_use unless rows are held elsewhere).
  size_t bytes_reserved() const;
  // Bytes a dense, folded cache (one stored head per KV head) holding `tokens` entries in every
  // (layer, KV head) would use: the reference a full cache is compared with, unfolded or not.
  size_t bytes_for_uniform_length(int64_t tokens) const;
  void shrink_to_fit();
  // Empties every head, makes it dense and returns to one stored head per KV head.
  void clear();

 private:
  struct Head {
    KvRows keys;
    KvRows values;
    std::vector<int32_t> positions;
    std::optional<CodebookHead> codebook;  // set: keys/values are empty
    bool reassigned = false;  // positions are cache indices (reassign_positions)
    bool rows_elsewhere = false;  // keys/values are empty: the rows are held elsewhere (append_position)
    bool norms_held = false;      // rows_elsewhere and held_norms has one entry per position
    std::vector<RowNorms> held_norms;
    EditStamp stamp;  // renewed by every operation that moves, drops or re-numbers an entry
  };
  // Throws std::logic_error naming `what` when the head's rows are held elsewhere.
  void check_rows_held(const char* what, int layer, int kv_head) const;
  const Head& dense(int layer, int kv_head) const;
  Head& dense(int layer, int kv_head);
  const Head& dense_f32(int layer, int kv_head) const;
  Head empty_head() const {
    return Head{KvRows(kv_type_, head_dim_), KvRows(kv_type_, head_dim_), {}, {}, false, false, false, {}, {}};
  }
  void reserve_rope(int32_t position);
  // Codebook-head halves of the public operations (kv_cache_codebook.cpp); indices already checked.
  std::vector<float> codebook_keys_pre_rope(int layer, const CodebookHead& cb) const;
  const std::vector<float>& key_codes(int layer, const CodebookHead& cb) const {
    return cb.shared_codes ? layer_codes_[layer].key_codes : cb.key_codes;
  }
  const std::vector<float>& value_codes(int layer, const CodebookHead& cb) const {
    return cb.shared_codes ? layer_codes_[layer].value_codes : cb.value_codes;
  }
  std::vector<float>& key_codes(int layer, CodebookHead& cb) {
    return cb.shared_codes ? layer_codes_[layer].key_codes : cb.key_codes;
  }
  std::vector<float>& value_codes(int layer, CodebookHead& cb) {
    return cb.shared_codes ? layer_codes_[layer].value_codes : cb.value_codes;
  }
  void append_one(int layer, int stored, int32_t position, const float* key, const float* value);
  void append_codebook_entry(int layer, int kv_head, int32_t position, const float* key, const float* value);
  void keep_codebook(int layer, int kv_head, std::span<const int> indices);
  void check_head(const char* what, int layer, int stored) const;
  const Head& head(int layer, int kv_head) const { return heads_[static_cast<size_t>(layer) * n_stored_ + kv_head]; }
  Head& head(int layer, int kv_head) { return heads_[static_cast<size_t>(layer) * n_stored_ + kv_head]; }

  ModelConfig config_;
  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  int group_ = 1;          // query heads per KV head
  int n_stored_ = 0;       // stored heads per layer
  bool unfolded_ = false;
  KvType kv_type_ = KvType::F16;
  std::vector<Head> heads_;                // [layer][stored head]
  std::vector<LayerCodebook> layer_codes_;  // [layer]; used by heads with shared_codes
  Rope rope_;               // re-applies RoPE to codebook keys; grown only by mutators
  int rope_positions_ = 0;  // positions rope_ has tabulated

  // The attached listener. A copy or move constructs an empty slot (a copy is not watched);
  // assigning keeps the target's pointer and reports on_replaced(). It must stay the LAST member:
  // the defaulted assignment operators assign members in declaration order, so the report comes
  // after every other member holds the new contents.
  struct ListenerSlot {
    KvCacheListener* ptr = nullptr;
    ListenerSlot() = default;
    ListenerSlot(const ListenerSlot&) noexcept {}
    ListenerSlot(ListenerSlot&&) noexcept {}
    ListenerSlot& operator=(const ListenerSlot&) {
      if (ptr) ptr->on_replaced();
      return *this;
    }
    ListenerSlot& operator=(ListenerSlot&&) {
      if (ptr) ptr->on_replaced();
      return *this;
    }
  };
  ListenerSlot listener_;
};

}  // namespace kvevict
