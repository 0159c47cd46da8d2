#include "core/engine/segment_checks.h"

#include "core/engine/chunk_selection.h"

namespace kvevict {

std::vector<SettingError> segment_setting_errors(const PolicyDescription& d) {
  std::vector<SettingError> e;
  const PolicySelect& s = d.select;
  const bool chunked = chunked_selection(s);
  const bool whole = s.unit == SelectUnit::Chunk;
  const std::string what = whole ? "'unit: chunk'" : "'quota: per_chunk'";
  if (chunked && s.chunk < 1)
    e.push_back({"select", whole ? "unit" : "quota", what + " needs 'chunk: EXPR', the chunk length (a whole number >= 1)"});
  if (!chunked && s.chunk > 0)
    e.push_back({"select", "chunk", "'chunk' is read only with 'unit: chunk' or 'quota: per_chunk'"});
  if (whole && s.quota == SelectQuota::PerChunk)
    e.push_back({"select", "quota", "'quota: per_chunk' keeps tokens inside every chunk; it cannot be combined with 'unit: chunk'"});
  if (s.gate == ChunkGate::Entropy && !whole)
    e.push_back({"select", "gate", "'gate: entropy' needs 'unit: chunk'"});
  if (s.gate == ChunkGate::Entropy && whole && s.chunk > 0 && (s.rescue < 1 || s.rescue >= s.chunk))
    e.push_back({"select", s.rescue > 0 ? "rescue" : "gate",
                 "'gate: entropy' needs 'rescue: EXPR', the entries kept of a spiky chunk (1 .. chunk - 1)"});
  if (s.gate != ChunkGate::Entropy && s.rescue > 0)
    e.push_back({"select", "rescue", "'rescue' is read only with 'gate: entropy'"});
  if (chunked) {
    const std::string why = what + " selects once at prefill on the prompt's chunks";
    if (s.scope == SelectScope::Layer) e.push_back({"select", "scope", what + " needs scope kv_head or layer_shared"});
    if (s.unfold_gqa) e.push_back({"select", "unfold_gqa", what + " cannot be combined with unfold_gqa"});
    if (s.random_share > 0) e.push_back({"select", "random_share", what + " cannot be combined with a random share"});
    if (d.run.cascading) e.push_back({"run", "cascading", why + "; it cannot be combined with cascading"});
    if (d.run.decode_every > 0) e.push_back({"run", "decode_every", why + "; it cannot evict while decoding"});
    if (d.run.prefill_block > 0) e.push_back({"run", "prefill_block", why + "; it cannot be applied after every prefill block"});
  }
  const int seg = d.observe.segment;
  if (d.needs(TensorSignal::SegmentAttention) && seg < 1)
    e.push_back({"score", "", "the policy reads A_seg (segment-local attention), but 'observe' has no 'segment: EXPR'"});
  if (seg < 1 && !d.observe.scaled)
    e.push_back({"observe", "scaled", "'scaled' applies to A_seg only; it needs 'segment: EXPR'"});
  if (seg > 0) {
    if (d.window < 1 && !d.depends_on_prompt_len)
      e.push_back({"observe", "segment", "'segment' needs 'window: EXPR', the observation queries of each segment (>= 1)"});
    if (d.run.decode_every > 0)
      e.push_back({"run", "decode_every", "A_seg is observed at prefill only; 'segment' cannot be combined with decode_every"});
    if (d.run.prefill_block > 0)
      e.push_back({"run", "prefill_block", "A_seg needs every segment's queries in one prefill; 'segment' cannot be combined with prefill_block"});
    if (d.observe.same_index_head)
      e.push_back({"observe", "same_index_head", "'segment' cannot be combined with same_index_head"});
    if (s.unfold_gqa) e.push_back({"select", "unfold_gqa", "'segment' cannot be combined with unfold_gqa"});
  }
  return e;
}

}  // namespace kvevict
