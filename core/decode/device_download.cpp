// See device_download.h.
#include "core/decode/device_download.h"

#include <string>

#include "core/util/error.h"
#ifdef KVEVICT_HAVE_CUDA
#include "core/decode/cuda/window_attention.h"
#endif

namespace kvevict {

void download_device_floats(const float* device, size_t floats, std::vector<float>& host, const char* what) {
  host.resize(floats);
#ifdef KVEVICT_HAVE_CUDA
  (void)what;  // cuda::download_floats names the failed copy itself
  cuda::download_floats(device, floats, host.data());
#else
  (void)device;
  throw RuntimeError(std::string(what) + ": a device buffer in a build without CUDA");
#endif
}

}  // namespace kvevict
