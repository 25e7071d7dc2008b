// Crash and hang isolation (--isolate): each call of a backend runs in a forked child process
// with a timeout, so a backend that aborts, segfaults, calls exit() or hangs costs one case the
// verdict error ("crashed with SIGSEGV (Segmentation fault)", "timed out after 30 s") instead
// of the whole run. The child writes the outputs — guard bands and poison included, so the
// runner's integrity checks see exactly what the backend did — into an anonymous shared mapping,
// which the parent copies back. A Status the backend returns and an exception it throws come
// back as they were (the runner then says "threw: ...").
//
// The external backend needs none of this: its program already runs as a separate process with
// a timeout (backends/external_backend.cc). A backend that has initialized CUDA in the
// parent cannot be used in a forked child (CUDA forbids it).
#pragma once

#include <functional>
#include <memory>

#include "cases/tensor.h"
#include "core/status.h"
#include "harness/backend.h"

namespace deltacheck::harness {

struct IsolationOptions {
  double timeout_s = 120.0;  // per backend call; the child is killed (SIGKILL) after it
};

// Runs `fn(outputs)` in a forked child and brings `outputs` (every byte of each tensor's storage,
// guards included) back when it returns. Errors name what happened to the child: killed by a
// signal, exited early, timed out. An exception thrown by `fn` is rethrown here as
// std::runtime_error with the same message.
Status run_isolated(const std::function<Status(cases::TensorMap&)>& fn, cases::TensorMap& outputs,
                    const IsolationOptions& options);

// True in a child process of run_isolated() (the deliberately crashing backends crash only
// there).
bool in_isolated_child();

// `inner` with every run() isolated as above; name, support and the other properties are
// inner's.
std::unique_ptr<Backend> make_isolated_backend(std::unique_ptr<Backend> inner,
                                               const IsolationOptions& options);

}  // namespace deltacheck::harness
