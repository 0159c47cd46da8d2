#pragma once
// The L2 norms of cached rows: the key_norm and value_norm signals (core/engine/signals.h).
//
// One definition, computed the same way wherever the rows are: each f32 element squared exactly in
// double (a float times a float fits a double's mantissa), summed in element order in double, the
// square root taken in double (correctly rounded on the host and on CUDA alike) and rounded once
// to float. So the host engine over a KVCache's rows, the device kernel over the device cache's
// words (device_kv_row_norms.h) and its CPU twin give the same bits for the same stored words.
#include <cmath>

#include "core/util/host_device.h"

namespace kvevict {

// The norms of one cached entry's key and value, as stored (after the cache's KvType rounding).
struct RowNorms {
  float key = 0.0f;
  float value = 0.0f;
};

// The norm of one row of d elements, element i given by load(i) as f32.
template <class Load>
KVEVICT_HOST_DEVICE inline float l2_row_norm(Load load, int d) {
  double s = 0;
  for (int i = 0; i < d; ++i) {
    const double x = static_cast<double>(load(i));
    s += x * x;
  }
  return static_cast<float>(sqrt(s));
}

// L2 norm of each of the T rows of a [T][d] f32 matrix.
void compute_row_norms(const float* rows, int T, int d, float* out);

}  // namespace kvevict
