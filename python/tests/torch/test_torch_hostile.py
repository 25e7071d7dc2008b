"""Issue #35 on the torch route (peers venv): torch tensors a kernel keeps keep their values after
the run (they share ownership of their memory), and isolate=True runs a torch kernel — torch's
own worker threads included — in forked children with the same verdicts as in-process, a
crash contained to its case."""
import ctypes

import torch

import deltacheck as dc
from user_kernels import recurrent_gdr

FP32 = dict(suite="smoke", filter=[r"^gdr\(", "dtype=fp32"], framework="torch")
PACKED = "gdr(layout=packed[63,0,65],dtype=fp32,gate=strong,seed=7)"
LATER = "gdr(layout=single[64],dtype=fp32,gate=strong,seed=7)"
# A fork of a torch process per call costs tens of ms: the first six smoke fp32 cases (single,
# batch, packed layouts) and the chunked prefill (a driven case: several calls).
SOME = dc.select("smoke", [r"^gdr\(", "dtype=fp32"])[:6] + dc.select(
    "smoke", [r"^gdr\(", "dtype=fp32", "cache=chunked"])


def test_kept_torch_inputs_keep_their_values():
    kept = []

    def keeper(**kw):
        for name in ("q", "k", "v", "g", "beta", "initial_state"):
            if kw.get(name) is not None:
                kept.append((kw[name], kw[name].clone()))
        return recurrent_gdr(**kw)

    res = dc.check(keeper, **FP32)
    assert res.ok, res.summary()
    changed = sum(not torch.equal(a, c) for a, c in kept)
    assert len(kept) > 100 and changed == 0, f"{changed} of {len(kept)} kept inputs changed"


def test_isolated_torch_kernel_with_worker_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # intra-op threads started in the parent before the forks
    try:
        torch.ones(256, 256) @ torch.ones(256, 256)
        plain = dc.check(recurrent_gdr, case=SOME)
        isolated = dc.check(recurrent_gdr, case=SOME, isolate=True, timeout=30)
    finally:
        torch.set_num_threads(threads)
    assert isolated.ok and len(isolated) == 7, isolated.summary()
    assert [r.verdict for r in isolated] == [r.verdict for r in plain]

    def crashes_on_packed(**kw):
        cu = kw.get("cu_seqlens")
        if cu is not None and len(cu) == 4 and kw["q"].shape[1] == 128:
            ctypes.string_at(0)
        return recurrent_gdr(**kw)

    first, later = dc.check(crashes_on_packed, case=[PACKED, LATER], framework="torch",
                            isolate=True)
    assert first.verdict == "error" and "SIGSEGV" in first.message, first.line()
    assert later.verdict == "pass", later.line()
