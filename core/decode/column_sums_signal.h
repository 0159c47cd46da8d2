#pragma once
// The attention column sums of a block as a decoder left them in device memory
// (LayerSignals::column_sums_on_device; ObservationRequest::column_sums_on_device_only), so that an
// observer scoring on that device reads them in place: for a one-token decode step they are the
// new query's attention (A_now), which CAKE's and TOVA's decode indicators read.
//
// Layout: query head h's sums over the entries of its stored head (h / group), in cache order, at
// data[h * row_stride + t], t < that head's length (<= row_stride; the entries past it are 0).
// Lifetime: valid during the observer's after_layer only, and only until the observer changes the
// layer's cache; the decoder reuses the buffer for the next layer.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvevict {

struct ColumnSumsSignal {
  const float* data = nullptr;  // device memory; null: none
  int n_heads = 0;              // query heads (rows)
  int64_t row_stride = 0;       // floats between rows: the layer's longest head when it was attended

  bool empty() const { return data == nullptr; }
  size_t floats() const { return static_cast<size_t>(n_heads) * static_cast<size_t>(row_stride); }
};

// Copies c.floats() floats into `host` (resized; synchronous, on the legacy default stream, so after
// the kernels that wrote them). RuntimeError in a build without CUDA or when the copy fails;
// std::invalid_argument for an empty signal.
void download_column_sums(const ColumnSumsSignal& c, std::vector<float>& host);

}  // namespace kvevict
