// Oracle-free leakage probes. Each runs the backend again on a variation of the case and compares
// the backend with itself, so a leak shows even where the oracle comparison passes:
//   repeat     the same case twice: bit-identical
//   isolation  every other sequence's inputs regenerated: the sequences under test bit-identical
//   alone      sequences run one by one: each bit-identical to its part of the pack
//   order      sequences in reverse order: outputs permuted and otherwise bit-identical
//   split      each sequence split mid-chunk into two calls with state carried: within tolerance
//              of the oracle, like one-shot
// Bit-identity is asked of deterministic backends; for others the comparisons are skipped with
// that reason.
#pragma once

#include <vector>

#include "harness/backend.h"
#include "harness/result.h"
#include "harness/runner.h"

namespace deltacheck::harness {

// Runs the probes that apply to the case. `outputs` are the backend's outputs of the plain run.
std::vector<ProbeReport> run_probes(const PreparedCase& pc, Backend& backend,
                                    const cases::TensorMap& outputs);

}  // namespace deltacheck::harness
