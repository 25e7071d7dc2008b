"""Precision profiles on the Python route (docs/tolerance.md, "Precision profiles"): dc.check's
`profile` judges the callable against that profile's baselines and shows it in every row; a bad
one is a ValueError naming the bad choice. The callables: the fp32 recurrence of
deltacheck.examples, and the same recurrence with S^T k rounded to bf16 before v - S^T k
(attention-gym#465), which the tensor-core baseline hides and operands=fp32 does not."""
import numpy as np
import pytest

import deltacheck as dc
from deltacheck.examples import recurrent_gdr

CASE = ("gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=zero,beta=rand,keys=norm,"
        "regime=converged,l2=1,state=rand,cache=prefill,calls=3,seed=4000)")


def _bf16(x):
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def rounded_stk(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                use_qk_l2norm_in_kernel):
    q, k, v, beta, g = (np.asarray(x, dtype=np.float32) for x in (q, k, v, beta, g))
    _, _, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if use_qk_l2norm_in_kernel:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + np.float32(1e-6))
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + np.float32(1e-6))
    heads = np.arange(HV) // (HV // H)
    cu = [int(x) for x in cu_seqlens]
    o = np.zeros((1, q.shape[1], HV, V), dtype=np.float32)
    finals = np.zeros((len(cu) - 1, HV, K, V), dtype=np.float32)
    for n in range(len(cu) - 1):
        S = np.array(initial_state[n], dtype=np.float32)
        for t in range(cu[n], cu[n + 1]):
            qt, kt = q[0, t, heads] * np.float32(scale), k[0, t, heads]
            S *= np.exp(g[0, t])[:, None, None]
            stk = _bf16(np.einsum("hk,hkv->hv", kt, S))  # the bug
            S += kt[:, :, None] * (beta[0, t][:, None] * (v[0, t] - stk))[:, None, :]
            o[0, t] = np.einsum("hk,hkv->hv", qt, S)
        finals[n] = S
    return o, finals


def test_operands_fp32_catches_a_rounded_stk_that_the_default_profile_lets_pass():
    plain = dc.check(rounded_stk, case=CASE, framework="numpy", probes=False)
    assert plain.ok, plain.summary()
    declared = dc.check(rounded_stk, case=CASE, framework="numpy", probes=False,
                        profile="operands=fp32")
    assert not declared.ok
    (r,) = list(declared)
    assert r.verdict == "fail", r.message
    assert "[operands=fp32]" in r.line()
    right = dc.check(recurrent_gdr, case=CASE, framework="numpy", probes=False,
                     profile="operands=fp32")
    assert right.ok, right.summary()


def test_a_bad_profile_is_a_value_error_naming_the_choice():
    with pytest.raises(ValueError, match="bad profile choice 'chunk=0'"):
        dc.check(recurrent_gdr, case=CASE, framework="numpy", profile="operands=fp32,chunk=0")
