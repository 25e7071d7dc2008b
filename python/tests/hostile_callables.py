"""Hostile NumPy callables for test_hostile_route.py (issue #35): kernels that keep the arrays
they were handed, exit the process, crash, hang, or raise exceptions whose text is not valid
UTF-8. Each `scenario_*` runs deltacheck on one of them and prints "ok" when deltacheck held; the
tests run them in a child interpreter, so that a crash of deltacheck's own is a failed test, not
a dead test session."""
import ctypes
import os
import signal
import sys

import numpy as np

import deltacheck as dc
from deltacheck.examples import recurrent_gdr

SMOKE_FP32 = dict(suite="smoke", filter=[r"^gdr\(", "dtype=fp32"], framework="numpy")
PACKED = "gdr(layout=packed[63,0,65],dtype=fp32,gate=strong,seed=7)"
NAMES = ("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens")


def scenario_kept_inputs():
    """A kernel that keeps every input array it gets (a cache): after the run each still holds
    the values it had during its call."""
    kept = []

    def keeper(**kw):
        for name in NAMES:
            a = kw.get(name)
            if a is not None:
                kept.append((name, a, np.array(a, copy=True)))
        return recurrent_gdr(**kw)

    res = dc.check(keeper, **SMOKE_FP32)
    assert res.ok, res.summary()
    changed = [name for name, a, copy in kept if not np.array_equal(a, copy, equal_nan=True)]
    assert len(kept) > 100, len(kept)
    assert not changed, f"{len(changed)} of {len(kept)} kept input arrays changed: {changed[:8]}"
    print("ok")


FLA = dc.conventions.get("fla")


@dc.convention("hostile-in-place", supports=lambda c: FLA.supports(c))
def in_place(fn, c):
    """Hands the kernel deltacheck's output arrays to write into."""
    fn(c.inputs, c.outputs)
    return c.outputs


def scenario_kept_outputs_written_later():
    """A kernel that writes its results into the output arrays and keeps them; after the run it
    writes into every kept one. More cases then run and pass, and nothing crashes."""
    kept = []

    def writer(inputs, outputs):
        kw = {k: inputs.get(k) for k in NAMES}
        o, s = recurrent_gdr(**kw, scale=inputs["q"].shape[-1] ** -0.5,
                             output_final_state="final_state" in outputs,
                             use_qk_l2norm_in_kernel=True)
        outputs["o"][...] = o
        if "final_state" in outputs:
            outputs["final_state"][...] = s
        kept.extend(outputs.values())

    res = dc.check(writer, convention="hostile-in-place", **SMOKE_FP32)
    assert res.ok, res.summary()
    assert len(kept) > 100, len(kept)
    for a in kept:  # into memory deltacheck may since have freed or handed to the next case
        a[...] = 12345.0
    res = dc.check(recurrent_gdr, **SMOKE_FP32)
    assert res.ok, res.summary()
    assert all(np.all(a == 12345.0) for a in kept)
    print("ok")


# Callables that end or break the process, for the isolation tests and the pytest gate.

def calls_os_exit(**kw):
    os._exit(0)


def calls_sys_exit(**kw):
    sys.exit(0)


def segfaults(**kw):
    ctypes.string_at(0)


def kills_itself(**kw):
    os.kill(os.getpid(), signal.SIGSEGV)


def loops_forever(**kw):
    while True:
        pass


def surrogate_message(**kw):
    raise ValueError("bad byte \udcff here")


if __name__ == "__main__":
    globals()["scenario_" + sys.argv[1]]()
