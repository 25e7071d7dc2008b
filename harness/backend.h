// The backend interface: everything the runner needs from an implementation under test.
// A backend says whether it can run a case before it runs it, and runs it on raw inputs into
// outputs the runner allocated (poisoned, with guard bands); errors come back as a Status.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"
#include "harness/tolerance.h"
#include "ops/operation.h"

namespace deltacheck::harness {

// What a backend may remember across the calls of one driven case (a scenario): created empty
// for each run of the case, so that backends stay free of state between cases and threads.
using DriveMemory = std::map<std::string, std::vector<float>>;

struct Support {
  bool ok = true;
  std::string reason;  // why not, when !ok (e.g. "no CUDA device")
  static Support Yes() { return {}; }
  static Support No(std::string why) { return {false, std::move(why)}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // True for the deliberately wrong implementations that prove the harness can fail.
  virtual bool deliberately_wrong() const { return false; }
  // True for the deliberately correct, independent formulations of the false-positive panel
  // (right:*): any non-pass they get is the harness's fault.
  virtual bool deliberately_correct() const { return false; }
  // Declared: bit-identical results for identical inputs; two runs that differ then fail the
  // repeat probe. False means "not promised": the repeat probe measures it (harness/probes.h).
  virtual bool deterministic() const { return true; }
  // Declared: a sequence's result does not depend, even in the last bit, on what else is in its
  // batch. When false (or when the repeat probe finds the backend not bit-reproducible), the
  // alone/order/isolation probes compare a sequence's two results with its tolerance instead of
  // bit for bit: moving within it is batch-dependent rounding, beyond it a leak.
  virtual bool batch_invariant(const cases::Case& c) const { return true; }
  // What the backend's matmuls do with fp32 operands (TF32: judged against the TF32 baseline).
  virtual MatmulPrecision matmul_precision() const { return MatmulPrecision::kDefault; }
  // The formulation choices the backend makes (chunk size, independent prefix sums, the L2 norm
  // in the activation dtype, fp32 operands, TF32; ops/precision.h): it is judged against that
  // profile's baselines, and the profile is printed with every result. The default is the
  // default profile with matmul_precision().
  virtual PrecisionProfile precision_profile() const {
    PrecisionProfile p;
    p.matmul = matmul_precision();
    return p;
  }
  virtual Support supports(const cases::Case& c) const = 0;
  // Writes every tensor of `outputs` (shapes and dtypes fixed by the operation).
  virtual Status run(const cases::Case& c, const cases::TensorMap& inputs,
                     cases::TensorMap& outputs) = 0;
  // One call of a driven case (a serving scenario, ops/serve): `call` says which requests its
  // rows are and what the runtime decided around them. Kernels ignore it (the default runs the
  // call's case); the deliberately wrong runtimes (wrong:serve-*) act on it.
  virtual Status run_driven(const ops::DrivenCall& call, DriveMemory& memory, const cases::Case& c,
                            const cases::TensorMap& inputs, cases::TensorMap& outputs) {
    return run(c, inputs, outputs);
  }
  // True when run_driven does more than run: the runtime keeps memory across a scenario's calls
  // (`memory`). An isolated backend (--isolate) runs such calls in this process, since a child's
  // memory would be lost with it; the others' calls still run in a child.
  virtual bool keeps_call_memory() const { return false; }
  // True when the runner must check that each call left the inputs as they were (a backend whose
  // code a const reference does not hold: a Python callable, a user's function): a copy taken
  // before the call is compared after it, and a change is the verdict error (input_check.h).
  virtual bool checks_inputs() const { return false; }
};

struct BackendInfo {
  std::string name;
  std::string description;
  bool deliberately_wrong;
  bool deliberately_correct = false;
};

// Options some backends take (from the command line: --device, --cmd, --serve, --timeout,
// --library,
// --op).
struct BackendOptions {
  std::string device = "cpu";  // torch: cpu | cuda
  std::string cmd;             // external: 'PROGRAM {in} {out}', one process per call
  std::string serve;           // external: 'PROGRAM', one process serving every call of a
                               // thread (docs/external.md); instead of cmd
  double timeout_s = 120.0;    // external: per case
  // external, torch-op: the candidate's declared precision profile (--profile; --matmul-precision
  // tf32 is its tf32 choice), and whether it promises bit-identical repeats (otherwise the
  // repeat probe measures it)
  PrecisionProfile profile;
  bool deterministic = false;
  bool batch_invariant = false;
  std::string library;  // torch-op: shared library registering the operator
  std::string op;       // torch-op: qualified operator name, e.g. myns::chunk_gated_delta_rule
};

}  // namespace deltacheck::harness
