// The replay prompt and options of observe.replay; see replay_prompt.h.
#include "core/engine/replay_prompt.h"

#include "core/model/model.h"
#include "core/util/error.h"

namespace kvevict {

ReplayPrompt kvzip_replay_prompt(const Model& model) {
  if (!model.tokenizer) throw UsageError("observe.replay (A_replay) needs the model's tokenizer; this model has none");
  const Tokenizer& tok = *model.tokenizer;
  ReplayPrompt p;
  p.first = tok.encode("\n\nRepeat the previous context exactly.", false);
  p.later = tok.encode("\n\nRepeat the part of the previous context exactly, starting with", false);
  // kvpress takes the suffix from the chat template (the assistant header after the user turn).
  if (model.info.chat_template == "chatml") p.suffix = tok.encode("<|im_end|>\n<|im_start|>assistant\n", false, true);
  else p.suffix = tok.encode("\n", false);
  return p;
}

ReplayOptions replay_options(const PolicyObserve::Replay& s) {
  return {.chunk = s.chunk, .previous_tail = s.previous_tail, .n_sink = s.n_sink, .context_start = 0,
          .hidden_normalised = s.normalise};
}

ReplayScores run_policy_replay(Decoder& decoder, std::span<const int> context, const PolicyObserve::Replay& settings) {
  return replay_scores(decoder, context, kvzip_replay_prompt(decoder.model()), replay_options(settings));
}

}  // namespace kvevict
