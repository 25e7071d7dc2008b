#!/usr/bin/env python3
"""Is a chunked backward's gradient error precision or a wrong result? (docs/gradients.md, "FLA's
and Transformers' chunked backwards against the tolerance")

    $VENV/bin/python adapters/python/grad_precision.py reports/x/failures/*.h5

For each failure dump of a gdr_grad case (a golden fixture of the case: inputs and the FP64
oracle's gradients, plus what the backend wrote and the tolerance baseline), prints per gradient
the relative RMS error against the FP64 oracle, ||x - ref|| / ||ref||, of:
  actual           what the backend under test wrote (from the dump)
  baseline         deltacheck's tolerance baseline (the backward recurrence in the case's precision)
  chunk fp32       FLA's naive_chunk_gated_delta_rule through autograd, as FLA ships it (fp32)
  chunk fp64       the same source with every float32 made float64, on the inputs widened to
                   float64 (the formulation, rounding aside)
  recurrent fp32   FLA's naive_recurrent_gated_delta_rule through autograd (fp32)
and, last column, dg element by element: max |dg - ref| / |ref| over the elements (the small dg
of strong decay is where a cancellation form loses its digits).
The fp64 rewrite is made here at run time from FLA's installed source (inspect.getsource, the
three spellings of float32 replaced); nothing of it is kept.
"""
import copy
import inspect
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402
import fla_gdr  # noqa: E402

GRADS = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


def in_float64(fn):
    """FLA's naive function with its arithmetic in float64 (its source, float32 replaced)."""
    source = inspect.getsource(fn)
    for old, new in (("torch.float32", "torch.float64"), (".float()", ".double()"),
                     ("dtype=torch.float,", "dtype=torch.float64,")):
        source = source.replace(old, new)
    module = sys.modules[fn.__module__]
    scope = dict(vars(module))
    exec(compile(source, f"<{fn.__name__} in float64>", "exec"), scope)
    assert "float32" not in source
    return scope[fn.__name__]


def widened(case):
    """The case with its float inputs in float64 (exact: they are fp32, bf16 or fp16)."""
    wide = copy.copy(case)
    wide.inputs = {n: a.astype(np.float64) if a.dtype.kind == "f" else a
                   for n, a in case.inputs.items()}
    wide.dtypes = {n: "fp64" if a.dtype.kind == "f" else case.dtypes[n]
                   for n, a in case.inputs.items()}
    return wide


def worst_elementwise(x, ref):
    x, ref = np.asarray(x, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    nz = ref != 0
    return np.max(np.abs(x[nz] - ref[nz]) / np.abs(ref[nz])) if nz.any() else 0.0


def rel_rms(x, ref):
    x, ref = np.asarray(x, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    norm = np.linalg.norm(ref)
    return np.linalg.norm(x - ref) / norm if norm > 0 else np.linalg.norm(x - ref)


def read(group, name):
    return dc.decode(group[name])[0].astype(np.float64)


def main(paths):
    import torch
    from fla.ops.gated_delta_rule import naive
    torch.set_num_threads(int(os.environ.get("DELTACHECK_PEER_THREADS", "1")))
    chunk, recurrent = naive.naive_chunk_gated_delta_rule, naive.naive_recurrent_gated_delta_rule
    forms = {"chunk fp32": fla_gdr.naive_forward(chunk),
             "chunk fp64": fla_gdr.naive_forward(in_float64(chunk), dtype=torch.float64),
             "recurrent fp32": fla_gdr.naive_forward(recurrent)}
    for path in paths:
        with h5py.File(path, "r") as f:
            (group,) = f.values()
            case = dc.Case(group=group)
            if case.op != "gdr_grad":
                continue
            expected = {n: read(group["expected"], n) for n in GRADS if n in group["expected"]}
            rows = {"actual": {n: read(group["actual"], n) for n in expected},
                    "baseline": {n: read(group["baseline"], n) for n in expected
                                 if n in group.get("baseline", {})}}
            print(f"{case.case_id}\n  {group.attrs.get('backend', '?')}: "
                  f"{group.attrs.get('verdict', '?')}: {group.attrs.get('message', '')[:200]}")
        for label, forward in forms.items():
            grads = dc.autograd_gdr_grad(forward)(widened(case) if "fp64" in label else case)
            rows[label] = {n: grads[n].detach().double().numpy() for n in expected}
        print("  " + f"{'rel RMS vs FP64':<16}" + "".join(f"{n:>10}" for n in expected) +
              f"{'dg elem':>10}")
        for label, values in rows.items():
            print("  " + f"{label:<16}" + "".join(
                f"{rel_rms(values[n], expected[n]):>10.2e}" if n in values else f"{'-':>10}"
                for n in expected) + f"{worst_elementwise(values['dg'], expected['dg']):>10.2e}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(main(sys.argv[1:]))
