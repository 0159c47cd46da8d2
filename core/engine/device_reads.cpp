#include "core/engine/device_reads.h"

#include "core/engine/merge_state.h"
#include "core/engine/replay_checks.h"

namespace kvevict {

bool scores_signals_in_place(const PolicyProgram& p) {
  const PolicyDescription& d = p.description();
  return p.scores_device_signals() && (!d.has_layer_weight || p.layer_weight_takes_device_signals()) &&
         !d.head_plan_reads_signals() && d.select.stages.empty() && !d.channels.enabled && !d.observe.same_index_head &&
         !d.needs(TensorSignal::WindowQueryRows) && !d.needs(TensorSignal::WindowQueryRowsPreRope) &&
         !d.needs(TensorSignal::WindowOutputs);
}

bool selector_shares_program_memory(SelectionDevice selector, const PolicyProgram& p) {
  return selector != SelectionDevice::Host &&
         (selector == SelectionDevice::Cuda) == (p.selection_device() == SelectionDevice::Cuda);
}

bool host_reads_column_sums(const PolicyDescription& d, bool accumulated_in_place) {
  return (d.needs(TensorSignal::AccumulatedAttention) && !accumulated_in_place) ||
         MergeOnEvictState::needs_decode_attention(d.merge);
}

bool hidden_states_read_in_their_call(const PolicyDescription& d) {
  return d.select.score_at == ScoreAt::Insertion && d.decode_scores_each_entry_alone && !reads_replay(d) &&
         !d.channels.enabled;
}

DeviceReads decide_device_reads(const PolicyProgram& p, SelectionDevice selector, const EvictionPlan& plan) {
  const PolicyDescription& d = p.description();
  const bool in_place = scores_signals_in_place(p);
  const bool shared_memory = selector_shares_program_memory(selector, p);
  const bool unfold = plan.geometry.unfold_gqa;
  DeviceReads r;
  r.window_in_place = in_place;
  r.accumulated_in_place = in_place && d.needs(TensorSignal::AccumulatedAttention) && shared_memory && !unfold;
  r.scores_to_selector = p.scores_to_device() && shared_memory;
  r.current_in_place = in_place && d.needs(TensorSignal::CurrentAttention) &&
                       !host_reads_column_sums(d, r.accumulated_in_place);
  r.rows_in_place = in_place && (d.needs(TensorSignal::Keys) || d.needs(TensorSignal::Values) ||
                                 d.needs(TensorSignal::KeysPreRope) || d.needs(TensorSignal::OutputNormL1));
  r.norms_in_place = in_place && !plan.select.frozen_scores && d.needs_row_norms();
  r.positions_in_place = in_place && d.needs(TensorSignal::Position) && !unfold;
  r.positions_to_selector = r.scores_to_selector && !unfold;
  r.hidden_states_in_place = in_place && d.needs(TensorSignal::HiddenState) && hidden_states_read_in_their_call(d);
  return r;
}

}  // namespace kvevict
