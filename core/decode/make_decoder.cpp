// Backend choice; see make_decoder.h.
#include "core/decode/make_decoder.h"

#include "core/util/error.h"

namespace kvevict {

bool cuda_decoder_built() {
  return false;  // the backend is not written yet
}

std::unique_ptr<Decoder> make_decoder(const Model& model, DecoderDevice device, const DecoderOptions& options) {
  if (device == DecoderDevice::Cpu) return make_cpu_decoder(model, options);
  (void)options;
  throw RuntimeError("the CUDA decoder backend is not implemented yet; use --device cpu or auto");
}

}  // namespace kvevict
