// The double reference of KVzip's replay scores; see reference_replay.h.
#include "reference_replay.h"

#include <algorithm>
#include <cmath>

#include "reference_forward.h"

namespace kvevict::test {

ReplayPrompt kvpress_test_prompt(const Tokenizer& tok) {
  return {tok.encode("\n\nRepeat the previous context exactly.", false),
          tok.encode("\n\nRepeat the part of the previous context exactly, starting with", false), tok.encode("\n", false)};
}

std::vector<std::vector<std::vector<double>>> reference_replay_scores(const Model& model, const std::vector<int>& context,
                                                                      const ReplayPrompt& prompt, const ReplayOptions& o) {
  const ModelConfig& c = model.config;
  const int L = static_cast<int>(context.size());
  std::vector<std::vector<std::vector<double>>> ref(c.n_layers, std::vector<std::vector<double>>(c.n_heads, std::vector<double>(L, 0.0)));
  for (auto& layer : ref) {
    for (auto& head : layer) std::fill_n(head.begin(), std::min(o.n_sink, L), 1.0);
  }
  for (int start = o.context_start, index = 0; start < L; start += o.chunk, ++index) {
    const int end = std::min(L, start + o.chunk), sink = std::min(o.n_sink, start);
    // The replay input, assembled here from the definition (not with replay_tokens).
    std::vector<int> replay = index == 0 ? prompt.first : prompt.later;
    if (index > 0) replay.insert(replay.end(), context.begin() + (start - o.previous_tail), context.begin() + start);
    replay.insert(replay.end(), prompt.suffix.begin(), prompt.suffix.end());
    replay.insert(replay.end(), context.begin() + start, context.begin() + end);
    std::vector<int> sequence = context;
    sequence.insert(sequence.end(), replay.begin(), replay.end());
    const ReferenceResult r = reference_forward(model, sequence);
    const int R = static_cast<int>(replay.size());
    auto in_subset = [&](int u, int i) { return u < sink || (u >= start && u < end) || (u >= L && u <= L + i); };
    for (int l = 0; l < c.n_layers; ++l) {
      for (int h = 0; h < c.n_heads; ++h) {
        std::vector<double>& best = ref[l][h];
        std::fill(best.begin() + start, best.begin() + end, 0.0);
        for (int i = 0; i < R; ++i) {
          const std::vector<double>& p = r.probs[l][h][L + i];
          double z = 0;
          for (int u = 0; u <= L + i; ++u) z += in_subset(u, i) ? p[u] : 0.0;
          if (o.hidden_normalised) {  // KVzip+: divided by ||h|| of the attention input
            double ss = 0;
            for (double x : r.attention_inputs[l][L + i]) ss += x * x;
            z *= std::sqrt(ss);
          }
          for (int u = start; u < end; ++u) best[u] = std::max(best[u], p[u] / z);
        }
      }
    }
  }
  return ref;
}

}  // namespace kvevict::test
