#pragma once
// CUDA runner of KVzip's replay attention of one layer for one replay chunk (core/decode/
// replay_attention_block.h): the CUDA decoder's answer to ObservationRequest::replay_attention
// where its cache is resident. The algorithm is replay_attention_twin's, step for step: every KV
// head's sinks, chunk and replay entries gathered into rows of their own (replay_gather_element,
// one thread per word), the window attention kernel (core/decode/cuda/window_attention.h) over them
// per piece of replay rows (plan_replay_attention), each piece folded into a device [n_heads][chunk]
// output by replay_max_piece_rows (one thread per element, rows in order), then one download.
// Launches go to the legacy default stream, ordered with the decoder's kernels.
// tests/core/replay_attention_gpu_test.cpp compares it with the twin.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/replay_attention_block.h"

namespace kvevict::cuda {

// Device scratch reused layer after layer and chunk after chunk (the gathered rows and positions,
// a piece's window attention and a split plan's partials, the row factors, the output): grown as
// needed, never shrunk, freed on destruction.
class ReplayAttentionBuffer {
 public:
  // The replay attention of the block of R replay rows whose append left every stored head of `view`
  // (device memory) context + R long, from its query rows [R][view.n_heads * group][head_dim] f32 in
  // device memory and the row factors (host memory: empty, or R of them, rounded to f32 as the twin
  // takes them). Equal to replay_attention_twin with the same max_piece_floats wherever the window
  // attention kernel equals its twin. UsageError when replay_attention_applies is false;
  // RuntimeError when a launch or a copy fails.
  BlockReplayAttention compute(const DeviceKvLayerView& view, int group, const float* queries, int R,
                               const ReplayAttentionRequest& request, const std::vector<double>& factors,
                               size_t max_piece_floats = size_t{1} << 26);
  // Whether compute's scratch for such a block (n_kv stored heads of head_dim words of
  // `word_bytes`, n_heads query heads; grow's quarter of room each) is held already or fits in
  // half of the device's free memory: the CUDA decoder asks before the call
  // (serves_replay_attention), so a card too full for it takes the host rule instead of running out
  // mid-call. RuntimeError when the device cannot say.
  bool can_hold(const ReplayAttentionRequest& request, int R, int n_kv, int n_heads, int head_dim, size_t word_bytes,
                size_t max_piece_floats = size_t{1} << 26) const;

 private:
  DeviceArray<uint16_t> keys_;     // the gathered keys (F32 caches take two words per element)
  DeviceArray<int32_t> positions_;  // the gathered positions
  DeviceArray<float> window_;      // a piece's window attention, then its partials
  DeviceArray<float> factors_;     // the row factors (KVzip+)
  DeviceArray<float> out_;         // [n_heads][chunk]
};

}  // namespace kvevict::cuda
