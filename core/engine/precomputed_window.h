#pragma once
// The window attention a decoder computed for the engine (LayerSignals::window_attention,
// core/decode/window_attention_signal.h), held for the duration of one after_layer. When it is
// exactly what the engine would compute for a head (same layer, the same W window rows from the
// same position, the head's entries as the decoder saw them), the engine copies the head's rows out
// of it instead of running compute_window_attention. A device buffer is downloaded once, at its
// first use, unless every head's rows can be handed to device scoring kernels in place (in_place).
//
// The engine offers it after recording the block's queries, drops it when it changes the layer's
// cache (keep, merges, unfolding) and at the end of after_layer. It is only for the window attention
// over the G query heads of each KV head, causal or not as the policy's (NACL's official proxy is
// not); the engine does not offer it for NACL's same_index_head map, nor over re-assigned positions.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/decode/decoder.h"

namespace kvevict {

class PrecomputedWindow {
 public:
  // Holds s.window_attention for layer s.layer when it has W rows from position `first` (the
  // engine's window for this layer), `group` query heads per KV head and the causal rule `causal`
  // over `cache`'s folded heads as they are now; otherwise holds nothing. A previous offer is
  // dropped first.
  void offer(const LayerSignals& s, int W, int first, int group, bool causal, const KVCache& cache);
  void drop();
  void drop_layer(int layer) {
    if (layer == layer_) drop();
  }

  // Copies the rows of query heads first_query_head .. + n_query_heads - 1 over stored head
  // `cache_head` (T entries, in cache order) into out [n_query_heads][W][T] when the held signal
  // is for (layer, W, first), those query heads read cache_head, and that head still has the T
  // entries it had when offered; false otherwise (the caller computes them). Safe to call from
  // several threads at once (the one download is guarded).
  bool copy(int layer, int cache_head, int first_query_head, int n_query_heads, int W, int first, int T, float* out);
  // The held device signal's rows of stored head `cache_head` read in place: the device pointer of
  // its [group][W][T] rows (ScoreInputs::set_device_signal) when the signal is on the device, is for
  // (layer, W, first), the head still has its T entries and its rows are exactly T apart (every
  // head of the layer as long as the longest: a prefill's, or a decode step's over the rolling
  // window where the layer's heads are equally long); nullptr otherwise. Downloads nothing.
  const float* in_place(int layer, int cache_head, int W, int first, int T);
  // Whether in_place serves every stored head of `layer` (then no download is needed for it).
  bool in_place_for_every_head(int layer, int W, int first) const;
  // Downloads a held device signal now, on the calling thread (the decoder's: its CUDA device is
  // current there), so that copies made by worker threads find it on the host. No-op otherwise.
  void fetch() { (void)host_data(); }

  // Heads copied out, heads handed in place and device buffers downloaded since the last reset_counts.
  int64_t heads_copied() const { return copied_.load(); }
  int64_t heads_in_place() const { return in_place_.load(); }
  int64_t downloads() const { return downloads_.load(); }
  void reset_counts() {
    copied_ = 0;
    in_place_ = 0;
    downloads_ = 0;
  }

 private:
  const float* host_data();
  bool serves(int layer, int cache_head, int W, int first, int T) const;  // held, and for this head as it is
  bool kernels_layout(int W, int64_t T) const;  // a device signal whose rows are exactly [G][W][T]

  WindowAttentionSignal signal_;
  int layer_ = -1;  // -1: nothing held
  int first_ = 0;
  std::vector<int64_t> lengths_;  // each stored head's length when offered
  std::mutex download_mutex_;
  bool downloaded_ = false;
  std::vector<float> host_;  // the download of a device signal
  std::atomic<int64_t> copied_{0}, in_place_{0}, downloads_{0};
};

}  // namespace kvevict
