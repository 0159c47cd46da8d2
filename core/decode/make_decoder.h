#pragma once
// Chooses the decoder backend. The caller resolves `--device auto|cpu|cuda[:N]` first (jit's
// resolve_device probes the driver; core does not depend on jit) and passes the outcome here.
//   Cpu:  the reference CPU decoder (make_cpu_decoder).
//   Cuda: the CUDA decoder (core/decode/cuda/cuda_decoder.h) on device `options.device_ordinal`;
//         RuntimeError (exit 1) when this kvevict was built without the CUDA toolkit.
// The CUDA backend compiles in CI (no GPU there); its GPU tests passed on an H200 on 2026-12-04.
// docs/CUDA.md says what has run and what has not.
#include <memory>
#include <string_view>

#include "core/decode/decoder.h"

namespace kvevict {

enum class DecoderDevice { Cpu, Cuda };

std::unique_ptr<Decoder> make_decoder(const Model& model, DecoderDevice device, const DecoderOptions& options = {});

// Whether this build contains the CUDA decoder (KVEVICT_HAVE_CUDA at build time).
bool cuda_decoder_built();

// Whether this build contains FlashInfer's prefill attention (PrefillAttention::FlashInfer;
// docs/CUDA.md "FlashInfer prefill"); false without the CUDA decoder.
bool flashinfer_prefill_built();

// The names of PrefillAttention on command lines: "own", "flashinfer". parse: UsageError naming
// `where` for any other text.
const char* prefill_attention_name(PrefillAttention kernel);
PrefillAttention parse_prefill_attention(std::string_view name, std::string_view where);

}  // namespace kvevict
