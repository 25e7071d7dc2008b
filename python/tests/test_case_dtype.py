"""The NumPy route tells a convention the case's dtype (docs/python.md, "JAX and MLX"): NumPy
has no bfloat16, so bf16 inputs arrive widened to float32 and `c.dtype` / `c.widened` say so,
for a convention to pass on to a kernel that should compute in bf16."""
import numpy as np

import deltacheck as dc
from deltacheck.examples import recurrent_gdr

BF16 = ("gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=strong,beta=rand,"
        "keys=norm,l2=1,state=rand,cache=prefill,calls=3,seed=11)")
FP32 = "gdr(layout=packed[63,0,65],dtype=fp32,gate=strong,seed=7)"
seen = []


@dc.convention("dtype_spy")
def dtype_spy(fn, c):
    i = c.inputs
    seen.append((c.dtype, c.widened, i["q"].dtype))
    o, s = fn(q=i["q"], k=i["k"], v=i["v"], g=i["g"], beta=i["beta"], scale=c.dims.K ** -0.5,
              initial_state=i.get("initial_state"), output_final_state=True,
              cu_seqlens=i.get("cu_seqlens"), use_qk_l2norm_in_kernel=c.params["l2"] == "1",
              dtype=c.dtype)
    return {"o": o, "final_state": s}


def kernel(dtype, **kw):
    """recurrent_gdr that computes in the dtype it is told: a bf16 case's o rounded to bf16
    (by float32 bit masking, to nearest even), as a bf16 kernel's would be."""
    o, s = recurrent_gdr(**kw)
    if dtype == "bf16":
        bits = o.astype(np.float32).view(np.uint32)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        o = bits.view(np.float32)
    return o, s


def test_the_numpy_route_passes_the_case_dtype():
    seen.clear()
    (r,) = dc.check(kernel, case=BF16, convention="dtype_spy", framework="numpy")
    assert r.verdict == "pass", r.line()
    assert seen and set(seen) == {("bf16", True, np.dtype(np.float32))}, seen
    seen.clear()
    (r,) = dc.check(kernel, case=FP32, convention="dtype_spy", framework="numpy")
    assert r.verdict == "pass", r.line()
    assert set(seen) == {("fp32", False, np.dtype(np.float32))}, seen
