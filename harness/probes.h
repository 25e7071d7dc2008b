// Oracle-free leakage probes. Each runs the backend again on a variation of the case and compares
// the backend with itself, so a leak shows even where the oracle comparison passes, and a
// precision shortfall (a sequence off the oracle by the same amount in every variation) is never
// called a leak:
//   repeat     the same case twice. Identical bits: the backend is deterministic (measured). Bits
//              that differ fail a backend that declared itself deterministic; for others they
//              must agree within the case's tolerance, and the probes below then compare with
//              tolerance.
//   isolation  every other sequence's inputs regenerated (then the others): the sequences whose
//              inputs stayed must not move
//   alone      sampled sequences run one by one: each must equal its part of the pack
//   order      sequences in reverse order: each must equal its part of the original pack
//   split      each sequence split mid-chunk into two calls with state carried: within tolerance
//              of the oracle like one-shot, or (when one-shot itself is off the oracle) within
//              tolerance of the one-shot result
// "Must not move" is bit for bit when the repeat probe found the backend deterministic and the
// backend is batch-invariant (Backend::batch_invariant); otherwise a sequence moves when the
// difference between its two results exceeds that sequence's tolerance (the per-sequence threshold
// of the plain run). A move is a leak: the reason says which sequence, output and token moved, by
// how much, against which tolerance, and whether the comparison was bit for bit.
// A variation the backend declines (unsupported for that case, e.g. a split that needs an
// initial state a training-path module cannot take) is a skipped probe with the backend's reason.
#pragma once

#include <memory>
#include <vector>

#include "harness/backend.h"
#include "harness/result.h"
#include "harness/runner.h"

namespace deltacheck::harness {

// The probes' calls of a case, planned before the case's own call: which probes apply and the
// variations of the case they run. With `ahead` (RunOptions::prepare_ahead) each call's inputs
// and outputs are built on another thread while the call before it runs (the first while the
// case's own call runs): the same calls in the same order, the same reports.
class ProbePlan {
 public:
  ProbePlan(const PreparedCase& pc, bool ahead);
  ~ProbePlan();
  ProbePlan(const ProbePlan&) = delete;
  ProbePlan& operator=(const ProbePlan&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend std::vector<ProbeReport> run_probes(const PreparedCase&, Backend&, const cases::TensorMap&,
                                             const CaseResult&, ProbePlan&);
};

// Runs the probes that apply to the case. `outputs` are the backend's outputs of the plain run and
// `judged` their oracle comparison (its per-sequence thresholds are the probes' tolerance).
std::vector<ProbeReport> run_probes(const PreparedCase& pc, Backend& backend,
                                    const cases::TensorMap& outputs, const CaseResult& judged,
                                    ProbePlan& plan);
// The same with a plan made now (no call of it built ahead unless `ahead`).
std::vector<ProbeReport> run_probes(const PreparedCase& pc, Backend& backend,
                                    const cases::TensorMap& outputs, const CaseResult& judged,
                                    bool ahead = false);

}  // namespace deltacheck::harness
