// libFuzzer target: any byte string as a policy file. Parsing and checking must end in a result or
// a UsageError (never a crash, leak, overflow or undefined behaviour); a file that compiles is
// also run by the interpreter on small inputs with every signal supplied.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    kvevict::dsl::InterpretedPolicy policy(kvevict::dsl::compile_policy_text("fuzz.yaml", text));
    constexpr int G = 2, W = 3, T = 7;
    std::vector<float> out(T);
    std::array<std::vector<float>, kvevict::kNumTensorSignals> signals;  // every row of the signal table
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = t * 3;
    kvevict::ScoreInputs in;
    in.n_layers = 2;
    in.n_kv_heads = 2;
    in.group = G;
    in.head_dim = 8;
    in.T = T;
    in.prompt_len = T;
    in.W = W;
    for (const kvevict::TensorSignalInfo& info : kvevict::kTensorSignalTable) {
      if (info.id == kvevict::TensorSignal::Position) continue;  // in.position
      signals[kvevict::signal_index(info.id)].assign(size_t(kvevict::signal_elements(info.id, G, W, 8, T)), 0.25f);
      in.set_signal(info.id, signals[kvevict::signal_index(info.id)].data());
    }
    in.position = pos.data();
    policy.score(in, false, out.data());
    policy.score(in, true, out.data());
    kvevict::LayerWeightInputs lw;
    lw.n_layers = 2;
    lw.prompt_len = T;
    lw.budget = 4;
    lw.heads = {in, in};
    lw.heads[1].kv_head = 1;
    (void)policy.layer_weight(lw);
    (void)policy.window_for(1000);
    (void)policy.protect_for(1000);
  } catch (const kvevict::Error&) {
  }
  return 0;
}
