#pragma once
// The device KV cache's SpindleKV codebooks (private to core/decode/cuda; DeviceKvCache's
// load_codebooks / codebook_append / codebook_news forward here). Per layer: the host bookkeeping
// (DeviceCodebookBooks, shared with DeviceKvTwin) and the device storage laid out as
// DeviceCodebookAppendArgs says: key and value codes [books][code capacity][head_dim] f32, their
// counts [books] int32, the log [n_heads][log capacity] CodebookEntry. The results are the twin's,
// bit for bit (core/decode/device_kv_twin_codebook.cpp): the same element bodies, each book's rows
// in the twin's order.
//
// Storage is laid at DeviceCodebookBooks::planned_capacity (an eighth plus 64 over the need,
// re-laid geometrically, shrunk when the need falls under half) and keeps its contents on a re-lay
// (device-to-device copies of every book's codes and every head's log at the new capacity): the
// bound the host plans with rises by the block's rows at every append until the next news, and a
// reallocation per decoded token would synchronise the decode loop. Capacities never change a result.
// Codes past a book's count and log rows past the logged ones are left unset (never read).
//
// Streams and errors as DeviceKvCache: everything on the legacy default stream; a failing CUDA call
// throws RuntimeError naming it; bad requests throw (std::invalid_argument / std::logic_error, as
// DeviceCodebookBooks) before any launch. No CUDA headers here.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/decode/device_kv_codebook_books.h"
#include "core/decode/kv_type.h"

namespace kvevict::cuda {

class DeviceKvCodebooks {
 public:
  DeviceKvCodebooks(int n_layers, int n_heads, int head_dim);
  ~DeviceKvCodebooks();
  DeviceKvCodebooks(const DeviceKvCodebooks&) = delete;
  DeviceKvCodebooks& operator=(const DeviceKvCodebooks&) = delete;

  // std::invalid_argument for a layer outside [0, n_layers) (every call below checks it first).
  void check_layer(int layer) const;
  // Takes the host's codes (DeviceCodebookBooks::load): a change of book layout (count, or shared)
  // starts fresh; codes are uploaded at their first indices and the counts set to the load's.
  void load(int layer, const DeviceCodebookLoad& load);
  // Room for an append of `rows` rows (codes and log), grown as above. std::logic_error when the
  // layer holds no book.
  void reserve(int layer, int rows);
  // Launches the append of the block (device pointers keys / values, [rows][src_stride] f32) over
  // the layer's arenas, whose head h holds the block's row 0 at arena row dst_row[h]; `rope` is a
  // DEVICE table covering the block's positions. reserve(layer, rows) first. Not synchronised.
  void append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
              int32_t first_position, const int64_t* dst_row, const RopeTableView& rope, void* key_arena,
              void* value_arena, KvType type);
  // What the device added since the last load or news (DeviceCodebookBooks::news): the counts,
  // then the new codes and the logged entries, downloaded (synchronises).
  DeviceCodebookNews news(int layer);
  // Device bytes the books occupy (codes, counts and logs, as allocated; not the appends' scratch).
  size_t bytes_reserved() const;

 private:
  struct Layer;
  Layer& layer(int l);
  void grow(Layer& c, int64_t code_capacity, int64_t log_capacity);

  int n_heads_ = 0, head_dim_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  // The append's split scratch (DeviceCodebookScan, device_kv_codebook_scan.h), shared by the
  // layers (one append at a time on the stream), grown to the largest append.
  struct ScanScratch;
  std::unique_ptr<ScanScratch> scan_;
};

}  // namespace kvevict::cuda
