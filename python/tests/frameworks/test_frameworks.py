"""The JAX and MLX routes (docs/python.md, "JAX and MLX"), in the frameworks venv
(scripts/frameworks-setup.sh, run by scripts/frameworks-check.sh): a GDN forward written for the
tests in each framework (jax_kernels.py, mlx_kernels.py) passes the smoke suite's gdr cases and,
differentiated by jax.vjp / mx.vjp in-process, its gdr_grad cases; its twin that does not reset
the state between packed sequences is flagged leak. The framework is detected from the kernel's
module; its arrays come in the case's dtypes (bf16 as bf16)."""
import importlib
import re
import types

import numpy as np
import pytest

import deltacheck as dc
from deltacheck import _io
from deltacheck.examples import recurrent_gdr as numpy_gdr

FRAMEWORKS = ["jax", "mlx"]
SLOT_MODES = ("cache=pool", "cache=spec", "cache=ckpt", "cache=accept", "cache=tree")
BF16_PACKED = ("gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=strong,beta=rand,"
               "keys=norm,l2=1,state=rand,cache=prefill,calls=3,seed=11)")
POOL = ("gdr(layout=packed[1*12],H=2,HV=4,K=64,V=64,dtype=fp32,gate=strong,beta=rand,keys=norm,"
        "l2=1,state=rand,cache=pool,calls=3,seed=38)")


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    pytest.importorskip({"jax": "jax", "mlx": "mlx.core"}[request.param])
    return request.param


def kernels(fw):
    return importlib.import_module(f"{fw}_kernels")


def multi(r):
    return sum(1 for n in r.seq_lengths if n > 0) >= 2


def bug_shows(fw, r):
    """The twin carries the state from one sequence of a packed row to the next; the MLX one
    (a loop over sequences) also from one batch row to the next, the JAX one (rows vectorized)
    not."""
    return multi(r) and ("layout=packed" in r.case_id or fw == "mlx")


def test_correct_kernel_passes_the_smoke_forward(fw):
    res = dc.check(kernels(fw).recurrent_gdr, "smoke", filter=r"^gdr\(")  # detected
    assert res.ok, res.summary()
    assert f"convention 'fla', {fw} tensors on cpu" in res.notes
    assert len(res) == len(dc.select("smoke", r"^gdr\("))
    for r in res:
        if r.verdict == "unsupported":
            assert any(m in r.case_id for m in SLOT_MODES), r.line()
        else:
            assert r.verdict == "pass", r.line()


def test_state_not_reset_leaks_on_the_smoke_forward(fw):
    res = dc.check(kernels(fw).recurrent_gdr_no_reset, "smoke", filter=r"^gdr\(")
    leaks = 0
    for r in res:
        if r.verdict == "unsupported":
            continue
        if bug_shows(fw, r):
            assert r.verdict == "leak", r.line()
            # against the oracle (the sequence alone passes), or from a probe that saw a sequence
            # move where the oracle comparison is within tolerance
            assert "alone passes" in r.line() or re.search(
                r"probe (isolation|alone|order): seq \d+ moved", r.line()), r.line()
            leaks += 1
        else:
            assert r.verdict == "pass", r.line()
    assert leaks >= 30
    assert "rerun: dc.check(recurrent_gdr_no_reset, case='gdr(" in res.summary()


def test_correct_kernel_passes_the_smoke_backward(fw):
    res = dc.check(kernels(fw).recurrent_gdr, "smoke", filter=r"^gdr_grad\(")
    assert res.ok and len(res) == 5, res.summary()
    assert {r.verdict for r in res} == {"pass"}, res.summary()


def test_state_not_reset_is_flagged_on_the_smoke_backward(fw):
    res = dc.check(kernels(fw).recurrent_gdr_no_reset, "smoke", filter=r"^gdr_grad\(")
    for r in res:
        if not bug_shows(fw, r):
            assert r.verdict == "pass", r.line()
        elif ",cp=" in r.case_id:  # a cp case has no probes: fail, not leak
            assert r.verdict == "fail", r.line()
        else:
            assert r.verdict == "leak", r.line()
    assert sum(r.verdict == "leak" for r in res) >= 2


def test_bf16_arrives_as_bf16_and_goes_back(fw):
    kernel, seen = kernels(fw).recurrent_gdr, {}

    def spy(**kw):
        seen.update({n: str(x.dtype) for n, x in kw.items() if hasattr(x, "dtype")})
        return kernel(**kw)

    (r,) = dc.check(spy, case=BF16_PACKED, framework=fw)
    assert r.verdict == "pass", r.line()
    bf16 = "bfloat16" if fw == "jax" else "mlx.core.bfloat16"
    f32 = "float32" if fw == "jax" else "mlx.core.float32"
    assert {n: seen[n] for n in ("q", "k", "v", "beta")} == dict.fromkeys(("q", "k", "v", "beta"),
                                                                          bf16), seen
    assert seen["g"] == f32 and seen["initial_state"] == f32, seen


def test_immutable_arrays_cannot_take_the_vllm_pool(fw):
    (r,) = dc.check(kernels(fw).recurrent_gdr, case=POOL, convention="vllm")
    assert r.verdict == "unsupported" and f"{fw} arrays are immutable" in r.message, r.line()


def test_a_forward_outside_the_framework_is_an_error_on_gdr_grad(fw):
    (r,) = dc.check(numpy_gdr, "smoke", filter=r"^gdr_grad\(layout=packed\[63,0,65\].*seed=1\)",
                    framework=fw)
    assert r.verdict == "error", r.line()


def test_detection():
    jk = pytest.importorskip("jax_kernels")
    mk = pytest.importorskip("mlx_kernels")
    assert _io.detect(jk.recurrent_gdr) == "jax" and _io.detect(jk._scan) == "jax"
    assert _io.detect(mk.recurrent_gdr) == "mlx"
    assert _io.detect(numpy_gdr) is None and _io.detect(np.zeros) is None
    both = types.FunctionType(numpy_gdr.__code__, {"jax": jk.jax, "mx": mk.mx})
    with pytest.raises(ValueError, match="jax and mlx: say which arrays it takes"):
        _io.detect(both)
    with pytest.raises(ValueError, match="framework must be one of"):
        dc.check(numpy_gdr, case=POOL, framework="tensorflow")


def test_the_transformers_convention_on_the_smoke_backward(fw):
    # Transformers' signature (positional q, k, v; scale inside), through the same vjp
    kernel = kernels(fw).recurrent_gdr

    def transformers_gdr(q, k, v, g, beta, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, cu_seqlens=None):
        return kernel(q=q, k=k, v=v, g=g, beta=beta, scale=q.shape[-1] ** -0.5,
                      initial_state=initial_state, output_final_state=output_final_state,
                      cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)

    res = dc.check(transformers_gdr, "smoke", filter=r"^gdr_grad\(", convention="transformers",
                   framework=fw)
    assert len(res) == 5 and {r.verdict for r in res} == {"pass"}, res.summary()
