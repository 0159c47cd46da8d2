// The layout conversion and the download of a decoder's window attention; contracts in
// window_attention_signal.h.
#include "core/decode/window_attention_signal.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/device_download.h"

namespace kvevict {

void window_attention_rows(const WindowAttentionSignal& a, const float* data, int first_query_head, int n_query_heads,
                           int T, float* out) {
  const int last = first_query_head + n_query_heads - 1;
  if (n_query_heads < 1 || first_query_head < 0 || last >= a.n_kv * a.group)
    throw std::invalid_argument("window attention: query heads " + std::to_string(first_query_head) + ".." +
                                std::to_string(last) + " outside the signal's " + std::to_string(a.n_kv * a.group));
  if (first_query_head / a.group != last / a.group)
    throw std::invalid_argument("window attention: query heads " + std::to_string(first_query_head) + ".." +
                                std::to_string(last) + " span two stored heads");
  if (T < 0 || T > a.max_len)
    throw std::invalid_argument("window attention: " + std::to_string(T) + " entries; the rows hold " +
                                std::to_string(a.max_len));
  for (int i = 0; i < n_query_heads; ++i) {
    const int h = first_query_head + i;
    const float* head = data + (h / a.group) * a.kv_stride + (h % a.group) * a.group_stride;
    for (int w = 0; w < a.W; ++w)
      std::copy_n(head + w * a.row_stride, T, out + (static_cast<size_t>(i) * a.W + w) * T);
  }
}

void download_window_attention(const WindowAttentionSignal& a, std::vector<float>& host) {
  if (a.empty() || !a.on_device)
    throw std::invalid_argument("download_window_attention: the signal is not in device memory");
  download_device_floats(a.data, a.floats(), host, "window attention");
}

}  // namespace kvevict
