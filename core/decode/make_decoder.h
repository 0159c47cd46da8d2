#pragma once
// Chooses the decoder backend. The caller resolves `--device auto|cpu|cuda[:N]` first (jit's
// resolve_device probes the driver; core does not depend on jit) and passes the outcome here.
//   Cpu:  the reference CPU decoder (make_cpu_decoder).
//   Cuda: the CUDA decoder (core/decode/cuda/cuda_decoder.h) on device `options.device_ordinal`;
//         RuntimeError (exit 1) when this kvevict was built without the CUDA toolkit.
// The CUDA backend compiles in CI (no GPU there); its GPU tests passed on an H200 on 2026-12-04.
// docs/CUDA.md says what has run and what has not.
#include <memory>
#include <string>
#include <string_view>

#include "core/decode/decoder.h"
#include "core/engine/policy_modes.h"
#include "core/util/error.h"

namespace kvevict {

// PrefillAttention's names on command lines and in benchmark JSON (mode_name / parse_mode).
template <> struct ModeNames<PrefillAttention> {
  static constexpr std::array<std::string_view, 2> names = {"own", "flashinfer"};
};
static_assert(ModeNames<PrefillAttention>::names.size() == static_cast<size_t>(PrefillAttention::FlashInfer) + 1);

enum class DecoderDevice { Cpu, Cuda };

std::unique_ptr<Decoder> make_decoder(const Model& model, DecoderDevice device, const DecoderOptions& options = {});

// Whether this build contains the CUDA decoder (KVEVICT_HAVE_CUDA at build time).
bool cuda_decoder_built();

// Whether this build contains FlashInfer's prefill attention (PrefillAttention::FlashInfer;
// docs/CUDA.md "FlashInfer prefill"); false without the CUDA decoder.
bool flashinfer_prefill_built();

// A PrefillAttention by its name (ModeNames above): UsageError naming `where` for any other text.
// Inline: the eval config's reader (and its fuzz target) needs it without the decoders.
inline PrefillAttention parse_prefill_attention(std::string_view name, std::string_view where) {
  PrefillAttention kernel = PrefillAttention::Own;
  if (!parse_mode(name, kernel))
    throw UsageError(std::string(where) + ": unknown prefill attention '" + std::string(name) +
                     "' (expected own or flashinfer)");
  return kernel;
}

}  // namespace kvevict
