#pragma once
// What keeping a device-resident KV cache equal to the host cache costs (DeviceKvMirror,
// device_kv_mirror.h), as the mirror counts it and as a decoder reports it
// (Decoder::device_kv_stats): for tests of the mirror and for benchmarks that split a decode
// step's time (bench_gpu_decode). Host code, no CUDA.
#include <cstddef>
#include <cstdint>

namespace kvevict {

struct DeviceKvCounts {
  int64_t compactions = 0;   // compact calls sent
  int64_t rows_written = 0;  // rows sent through write_rows (appends buffered in Host mode included)
  int64_t head_resyncs = 0;  // whole non-empty heads re-uploaded
  int64_t rows_deferred = 0;  // rows appended to the device only (defer_host_append), summed over heads
  int64_t rows_placeholder = 0;  // rows the host took as placeholders (append_placeholders), summed over heads
  int64_t rows_read = 0;      // rows read back to the host (sync_host), summed over heads; a codebook
                              // head's: its position and its entry (code index, norm), not its words
  int64_t device_reassigns = 0;  // layers whose position-only heads had their positions re-assigned on the device
  int64_t heads_released = 0;    // host heads that dropped their rows, the device holding them (release_host_rows)
  int64_t rows_folded = 0;       // rows written by row merges run on the device (fold_rows), summed over heads
  int64_t codebook_rows_on_device = 0;  // deferred rows of codebook heads matched on the device, summed over heads
  int64_t codes_uploaded = 0;           // codebook codes (keys and values) sent to the device
};

// Host wall time (seconds) spent in the mirror's sync_host and in its flushes that had work
// (appends buffered in Host mode, the layer's one compaction, resyncs). Host time only: the device
// work these calls enqueue runs asynchronously and is charged to whichever later call waits for it
// (a download or a synchronisation: possibly sync_host's own reads, possibly the decoder's next
// download), so on a GPU the split between them and the decoder's own time is approximate.
struct DeviceKvSeconds {
  double sync_host = 0;
  double flush = 0;
  // The decoder's own side (the CUDA decoder; same caveat): downloading each block's new K/V rows
  // into the host cache (calls with an observer, or whose rows the mirror could not defer), and
  // the downloads an observer asked for (window queries, column sums, layer inputs).
  double host_append = 0;
  double observation = 0;
};

// A device-resident cache's footprint (Decoder::device_kv_bytes): live entries (keys, values and
// positions, DeviceKvLayout::bytes_in_use), the arenas as allocated, and the codebooks.
struct DeviceKvBytes {
  size_t in_use = 0;
  size_t reserved = 0;
  size_t codebooks = 0;
};

// Summed since the decoder was made; all zero for a decoder without a device-resident cache.
struct DeviceKvStats {
  DeviceKvCounts counts;
  DeviceKvSeconds seconds;
};

}  // namespace kvevict
