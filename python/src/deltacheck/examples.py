"""Example kernels in NumPy with FLA's keyword signature, for trying deltacheck.check without torch
(and for its tests and deltacheck.bench): the gated delta rule's token recurrence in fp32, correct
(recurrent_gdr), and with a state-not-reset bug (recurrent_gdr_no_reset: each sequence starts
from the state the previous one ended with instead of its own initial state, which deltacheck
reports as leak)."""
import numpy as np


def _recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
               use_qk_l2norm_in_kernel, reset):
    q, k, v, beta = (np.asarray(x, dtype=np.float32) for x in (q, k, v, beta))
    g = np.asarray(g, dtype=np.float32)
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if use_qk_l2norm_in_kernel:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + np.float32(1e-6))
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + np.float32(1e-6))
    heads = np.arange(HV) // (HV // H)  # value head i uses q/k head i // (HV / H)
    if cu_seqlens is not None:
        cu = [int(x) for x in cu_seqlens]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    o = np.zeros((B, T, HV, V), dtype=np.float32)
    finals = np.zeros((len(seqs), HV, K, V), dtype=np.float32)
    S = np.zeros((HV, K, V), dtype=np.float32)
    for n, (b, bos, eos) in enumerate(seqs):
        if reset or n == 0:
            S = (np.array(initial_state[n], dtype=np.float32) if initial_state is not None
                 else np.zeros((HV, K, V), dtype=np.float32))
        for t in range(bos, eos):
            qt, kt = q[b, t, heads] * np.float32(scale), k[b, t, heads]
            S *= np.exp(g[b, t])[:, None, None]
            u = beta[b, t][:, None] * (v[b, t] - np.einsum("hk,hkv->hv", kt, S))
            S += kt[:, :, None] * u[:, None, :]
            o[b, t] = np.einsum("hk,hkv->hv", qt, S)
        finals[n] = S
    return o, (finals if output_final_state else None)


def recurrent_gdr(**kw):
    return _recurrent(**kw, reset=True)


def recurrent_gdr_no_reset(**kw):
    return _recurrent(**kw, reset=False)
