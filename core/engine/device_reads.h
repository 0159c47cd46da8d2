#pragma once
// Where the eviction engine hands its score program a signal in the decoder's device memory, and
// where a selection reads the scores the program wrote on its device, instead of a host copy
// (docs/CUDA.md, "Choosing how policies are scored"). Decided once per engine from the program
// (what its backend takes, what its policy reads), the device of its token selector and the plan
// (unfolded GQA, frozen scores): plain data, no device needed, tested on the CPU
// (tests/core/device_reads_test.cpp). A mode on here is still used only where the decoder handed
// the signal over on its device in that call; otherwise the engine takes the host path.
#include "core/engine/cache_row_reads.h"
#include "core/engine/eviction_plan.h"
#include "core/engine/policy_modes.h"
#include "core/engine/policy_program.h"

namespace kvevict {

struct DeviceReads {
  // The decoder's window attention A (PrecomputedWindow::in_place), and every in-place read below,
  // need scores_signals_in_place.
  bool window_in_place = false;
  // A_acc accumulated on the device the program scores on (the selector's, not the host), the
  // decoder's device column sums added there: no download of the sums, no upload of A_acc
  // (accumulated_attention_store.h). Not for a policy that unfolds GQA (the decoder's sums are per
  // KV head's entries, the unfolded cache's heads per query head).
  bool accumulated_in_place = false;
  // Decode scores written into the selector's device buffer, which the selection reads in place
  // (PolicyProgram::scores_to_device, LayerSelector::layer_score_buffer), in the steps whose rule
  // is a plain per-head selection (the engine's decode_scores_in_selector).
  bool scores_to_selector = false;
  // Decode steps' A_now from the decoder's device column sums without a host copy: the policy reads
  // A_now and nothing on the host reads the column sums (host_reads_column_sums).
  bool current_in_place = false;
  // K, V, K_pre and the values' projected L1 norms (out_norm_l1) from the decoder's device copy of
  // the layer's cached rows (LayerSignals::cache_rows), so a call whose programs read only those, A
  // and row-free signals leaves its rows on the device (cache_row_reads.h).
  bool rows_in_place = false;
  // The cached keys' and values' norms (key_norm, value_norm) from the decoder's device in the same
  // calls: then the host holds no norm either. Not for frozen scores, which score every appended
  // entry at its own step through the host's held norms.
  bool norms_in_place = false;
  // The positions (`pos`, random()'s key) from the decoder's device cache, for a policy that reads
  // them. Not for unfolded GQA (the device cache's heads are KV heads).
  bool positions_in_place = false;
  // ... and the selections from the selector's buffer (scores_to_selector) read them there too.
  bool positions_to_selector = false;
  // hidden[c, t] of the block's own tokens from the decoder's device (LayerSignals::
  // hidden_states_on_device), for a policy that reads every hidden state in the call that hands it
  // over (hidden_states_read_in_their_call): then no attention input comes to the host, and none
  // goes back up per head.
  bool hidden_states_in_place = false;

  // How K, V and their norms reach the programs (cache_row_reads.h).
  CachedRowSignals cached_row_signals() const {
    return rows_in_place || norms_in_place ? CachedRowSignals::GivenOnDevice : CachedRowSignals::ReadOnHost;
  }
};

// Whether the program may read the decoder's device signals in place at all: it takes device
// signals (the CUDA scoring backend) and nothing on the host reads them: a layer weight only when
// the program computes it on the device too (CAKE's generated layer kernel), no head plan reading
// a signal, no extra stage programs or channel program, no signal the engine derives from A (the
// window's queries or outputs), not NACL's own map.
bool scores_signals_in_place(const PolicyProgram& p);

// Whether a selector on `selector` holds buffers (and the accumulated-attention store made for its
// device) the program reads and writes as its own memory: a device selector whose memory kind is the
// program's (the CUDA selector for the CUDA backend; the twin, host memory, for a program that is
// not the CUDA backend, as the tests' stand-in). A CUDA program with the twin selector would write
// host addresses from a kernel: its scores and A_acc then take the host paths.
bool selector_shares_program_memory(SelectionDevice selector, const PolicyProgram& p);

// Whether something on the host reads a block's column sums: a host accumulation of A_acc (not
// accumulated_in_place) or a merge's decode attention (merge_state.h). Else a decoder may keep them
// on its device.
bool host_reads_column_sums(const PolicyDescription& d, bool accumulated_in_place);

// Whether `d` reads every hidden state (hidden[c, t]) in the call that hands it over: the prompt's
// programs read them at their layer's turn and, with score_at insertion, the decode indicator
// scores the new entries alone (score_new_entries). Not so with a replay (its layers are scored
// after the prompt), a channel program (at the prompt's end) or an indicator that rescores whole
// heads. Then the engine's records hold one call's block of one layer (model_signals.h), and a
// program on the decoder's device may read that block where the decoder made it.
bool hidden_states_read_in_their_call(const PolicyDescription& d);

// Every mode above for `p` selecting on `selector` under `plan` (its geometry and selection spec;
// both are fixed for the engine's life).
DeviceReads decide_device_reads(const PolicyProgram& p, SelectionDevice selector, const EvictionPlan& plan);

}  // namespace kvevict
