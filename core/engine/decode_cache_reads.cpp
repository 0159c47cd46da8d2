// See decode_cache_reads.h.
#include "core/engine/decode_cache_reads.h"

namespace kvevict {

bool signal_source_reads_cache_rows(SignalSource source) {
  switch (source) {
    case SignalSource::LatestQuery:  // A_now: from the decoder's column sums when rows are placeholders
    case SignalSource::ColumnSums:
    case SignalSource::Positions:
    case SignalSource::Tokens:
    case SignalSource::HiddenStates:
    case SignalSource::HiddenVectors:
    case SignalSource::PromptQueries:
    case SignalSource::RopeRotation: return false;
    case SignalSource::WindowQueries:   // the host attends the window queries over the cached keys
    case SignalSource::CachedKeys:
    case SignalSource::CachedValues:
    case SignalSource::SegmentQueries:
    case SignalSource::OutputProjection:  // the cached values through W_o
    case SignalSource::Replay: return true;
  }
  return true;
}

bool decode_step_reads_cache_rows(const PolicyDescription& d) {
  const SignalSet& reads = d.decode_reads_known ? d.decode_reads : d.reads;
  for (const TensorSignalInfo& info : kTensorSignalTable)
    if (reads[signal_index(info.id)] && signal_source_reads_cache_rows(info.source)) return true;
  return d.run.decode_uses_window_attention || d.run.reassign_positions || d.merge.enabled || d.channels.enabled ||
         d.select.unfold_gqa || d.has_head_plan || !d.select.stages.empty() || d.observe.same_index_head;
}

}  // namespace kvevict
