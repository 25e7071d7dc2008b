// Backends: the implementations deltacheck judges. To check your kernel, either implement Backend
// (one class: name, description, supports, run) or wrap one function in a FunctionBackend — for
// the gated delta rule on raw buffers, gdr_backend() in deltacheck/gdr.h does the unpacking.
// A backend says whether it can run a case before it runs it, and runs it from the case's inputs
// into outputs deltacheck allocated (poisoned with NaN, with guard bands on both sides, so
// unwritten elements and out-of-bounds writes are caught). Errors come back as a Status; a
// backend that throws gets the verdict error.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "deltacheck/case.h"
#include "harness/backend.h"

namespace deltacheck {

// The interface (harness/backend.h):
//   std::string name() const;                 // shown in every result row, e.g. "my-kernel"
//   std::string description() const;
//   Support supports(const Case& c) const;    // Support::Yes() or Support::No("why")
//   Status run(const Case& c, const TensorMap& inputs, TensorMap& outputs);
//   bool deterministic() const;               // default true: same inputs, same bits
//   bool batch_invariant(const Case&) const;  // default true: a sequence's bits do not depend
//                                             // on the rest of its batch (probes bit for bit)
//   MatmulPrecision matmul_precision() const; // default fp32; kTF32 for tensor-core fp32
//   PrecisionProfile precision_profile() const; // default: the default profile with
//                                             // matmul_precision() (docs/tolerance.md)
//   bool deliberately_wrong() const;          // default false
//   bool deliberately_correct() const;        // default false (the false-positive panel)
// run() writes every tensor of `outputs`; the names, shapes and dtypes are fixed by the
// operation (docs/semantics.md; for gdr see deltacheck/gdr.h). Cases of multi-call cache modes
// (chunked prefill, dynamic decode) are driven by deltacheck as several run() calls, each with
// cache=prefill or cache=decode, carrying the states the backend returned.
using Backend = harness::Backend;
using Support = harness::Support;
// Status (deltacheck::Status, core/status.h): Status::Ok(), InvalidArgument(msg),
// Unsupported(msg) (verdict unsupported), Internal(msg) (verdict error).

// run() and supports() of a FunctionBackend.
using RunFunction =
    std::function<Status(const Case& c, const TensorMap& inputs, TensorMap& outputs)>;
using SupportFunction = std::function<Support(const Case& c)>;

// A backend made of functions: run, and optionally supports (default: every case).
class FunctionBackend : public Backend {
 public:
  FunctionBackend(std::string name, RunFunction run, SupportFunction supports = nullptr);
  // Optional settings, chainable.
  FunctionBackend& set_description(std::string description);
  // Say false for kernels that may differ bit-wise between identical runs (atomics); the
  // repeat probe then tolerates it.
  FunctionBackend& set_deterministic(bool deterministic);
  // Say true when a sequence's result is bit-identical whatever else is in its batch: the
  // leakage probes then compare bit for bit and catch leaks below the tolerance. By default
  // (false) a sequence that moves by less than its tolerance when its neighbours change is
  // rounding that depends on the batch, not a leak (harness/probes.h).
  FunctionBackend& set_batch_invariant(bool batch_invariant);
  // Say kTF32 for kernels whose fp32 matmuls run in TF32: they are judged against the TF32
  // baseline on fp32 cases.
  FunctionBackend& set_matmul_precision(harness::MatmulPrecision precision);
  // The formulation choices the kernel makes (chunk size, prefix sums rounded independently,
  // the L2 norm in the activation dtype, fp32 operands, TF32; profile_from_name reads
  // "chunk=128,cumsum=independent"): it is judged against that profile's baselines, and the
  // profile is printed with every result (docs/tolerance.md, "Precision profiles").
  FunctionBackend& set_profile(const harness::PrecisionProfile& profile);
  // Say true when the function could write into its inputs (it reaches them through raw
  // pointers, or runs code deltacheck cannot see, e.g. Python): the runner then checks after
  // every call that they are unchanged (a change is the verdict error, naming the element).
  FunctionBackend& set_checks_inputs(bool checks);

  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  bool deterministic() const override { return deterministic_; }
  bool batch_invariant(const Case&) const override { return batch_invariant_; }
  harness::MatmulPrecision matmul_precision() const override { return profile_.matmul; }
  harness::PrecisionProfile precision_profile() const override { return profile_; }
  bool checks_inputs() const override { return checks_inputs_; }
  Support supports(const Case& c) const override;
  Status run(const Case& c, const TensorMap& inputs, TensorMap& outputs) override;

 private:
  std::string name_, description_;
  RunFunction run_;
  SupportFunction supports_;
  bool deterministic_ = true;
  bool batch_invariant_ = false;
  bool checks_inputs_ = false;
  harness::PrecisionProfile profile_;
};

// deltacheck's own backends, for comparison or as a known-good / known-bad reference in your
// tests: "cpu" (the project's chunked CPU kernel), the deliberately wrong "wrong:*" ones
// (e.g. "wrong:ignore-cu-seqlens", which leaks), the deliberately correct "right:*" ones (the
// false-positive panel, docs/panel.md), "external" (a program: BackendOptions::cmd, one process
// per call, or BackendOptions::serve, one worker for all calls, docs/external.md) and, with the
// torch component, "torch" and "torch-op".
using BackendOptions = harness::BackendOptions;
// What a backend's fp32 matmuls do: kDefault (fp32) or kTF32; "fp32" | "tf32" as names
// (matmul_precision_from_name throws std::invalid_argument for another).
using MatmulPrecision = harness::MatmulPrecision;
using harness::matmul_precision_from_name;
using harness::matmul_precision_name;
// A precision profile and its spelling ("fp32" for the default; profile_from_name throws
// std::invalid_argument naming the bad choice).
using PrecisionProfile = harness::PrecisionProfile;
using harness::profile_from_name;
using harness::profile_name;
using BackendInfo = harness::BackendInfo;
std::vector<BackendInfo> list_backends();
// Throws std::invalid_argument naming the unknown backend and the known ones.
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options = {});
// `backend` with every run() in a forked child process (`deltacheck run --isolate`): a crash, an
// exit or a hang past timeout_s is the verdict error of that case and the run goes on. Name,
// support and the other properties are the backend's.
std::unique_ptr<Backend> isolated_backend(std::unique_ptr<Backend> backend, double timeout_s);

}  // namespace deltacheck
