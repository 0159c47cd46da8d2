#pragma once
// The eviction engine's time accounting (EvictionReport::seconds and its phases, EnginePhase in
// engine.h): an EngineCall times one entry into the engine, a PhaseScope inside it one phase.
// Only on the calling thread, never inside an OpenMP loop: the slots are plain doubles.
#include <optional>
#include <stdexcept>

#include "core/engine/engine.h"
#include "core/util/stopwatch.h"

namespace kvevict {

// Where the current engine call's phases go (report.prefill_phases or decode_phases; none outside
// a call) and the innermost phase running.
class EnginePhaseClock {
 public:
  double& slot(EnginePhase p) {
    if (!phases_) throw std::logic_error("engine: a phase timed outside an engine call");
    return (*phases_)[p];
  }

 private:
  friend class PhaseScope;
  friend class EngineCall;
  EnginePhaseSeconds* phases_ = nullptr;
  std::optional<EnginePhase> phase_;
};

// Times phase `p` until its end, pausing the enclosing phase (Stopwatch's `paused`), so nested
// phases never count an interval twice (the same phase nested in itself counts it once).
class PhaseScope {
 public:
  PhaseScope(EnginePhaseClock& clock, EnginePhase p)
      : clock_(clock), outer_(clock.phase_), watch_(&clock.slot(p), outer_ ? &clock.slot(*outer_) : nullptr) {
    clock.phase_ = p;
  }
  ~PhaseScope() { clock_.phase_ = outer_; }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  EnginePhaseClock& clock_;
  std::optional<EnginePhase> outer_;
  Stopwatch watch_;
};

// One entry into the engine (after_layer, after_forward, apply_after_prefill, finish_replay): its
// time goes to report.seconds and, phase by phase, to the prefill or the decode phases; what no
// PhaseScope inside covers is Other. The seconds' watch starts first and ends last, so the
// phases of a call sum to at most its seconds.
class EngineCall {
 public:
  EngineCall(EnginePhaseClock& clock, EvictionReport& report, bool decoding)
      : clock_(clock), seconds_(&report.seconds), other_(enter(clock, report, decoding), EnginePhase::Other) {}
  ~EngineCall() { clock_.phases_ = nullptr; }  // other_ has taken its slot's address already
  EngineCall(const EngineCall&) = delete;
  EngineCall& operator=(const EngineCall&) = delete;

 private:
  static EnginePhaseClock& enter(EnginePhaseClock& clock, EvictionReport& report, bool decoding) {
    clock.phases_ = decoding ? &report.decode_phases : &report.prefill_phases;
    return clock;
  }
  EnginePhaseClock& clock_;
  Stopwatch seconds_;
  PhaseScope other_;
};

}  // namespace kvevict
