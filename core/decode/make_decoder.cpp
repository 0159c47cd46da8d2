// Backend choice; see make_decoder.h.
#include "core/decode/make_decoder.h"

#include "core/util/error.h"
#include <string>

#ifdef KVEVICT_HAVE_CUDA
#include "core/decode/cuda/cuda_decoder.h"
#include "core/decode/cuda/flashinfer_prefill.h"
#endif

namespace kvevict {

bool cuda_decoder_built() {
#ifdef KVEVICT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool flashinfer_prefill_built() {
#ifdef KVEVICT_HAVE_CUDA
  return cuda::flashinfer_prefill_built();
#else
  return false;
#endif
}

std::unique_ptr<Decoder> make_decoder(const Model& model, DecoderDevice device, const DecoderOptions& options) {
  if (device == DecoderDevice::Cpu) return make_cpu_decoder(model, options);
#ifdef KVEVICT_HAVE_CUDA
  return make_cuda_decoder(model, options);
#else
  (void)options;
  throw RuntimeError("the CUDA decoder is not in this kvevict: it was built without the CUDA toolkit");
#endif
}

}  // namespace kvevict
