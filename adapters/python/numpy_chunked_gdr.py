#!/usr/bin/env python3
"""A correct chunked gated delta rule in NumPy, all fp32: the false-positive panel's member that
deltacheck reaches only through the external protocol (docs/panel.md).

    build/deltacheck run --suite smoke --filter '^gdr' --backend external \\
        --cmd 'python3 adapters/python/numpy_chunked_gdr.py {in} {out}'

It computes the chunked form as FLA, FlashInfer and Transformers do: chunks of 64 tokens that never
straddle a sequence boundary, chunk-local cumulative gates G = cumsum(g), decay factors
exp(G_i - G_j) (which lose digits under strong decay), the WY/UT transform
T = (I + strictly_lower(diag(beta) K K^T * decay))^-1 by forward substitution, then

    w = T (beta exp(G) K),  u = T (beta V),  v_new = u - w S
    o = scale [(Q S) exp(G) + (Q K^T * decay * causal) v_new]
    S <- exp(G_last) S + (K exp(G_last - G))^T v_new

with the in-kernel L2 norm x / sqrt(sum x^2 + 1e-6) in fp32 and scale = K^-0.5. The output is
rounded once to its dtype. The protocol is golden/README.md, "External programs" (dc_protocol.py).
"""
import argparse
import sys

import numpy as np

import dc_protocol

F32 = np.float32
CHUNK = 64


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True, dtype=F32) + F32(1e-6))


def chunked_rule(q, k, v, g, beta, state, scale):
    """One sequence, every value head at once: q, k [L, HV, K] (normalized, one head per value
    head), v [L, HV, V], g, beta [L, HV], state [HV, K, V] fp32 (updated in place). Returns o."""
    L, HV, V = v.shape
    o = np.zeros((L, HV, V), F32)
    for begin in range(0, L, CHUNK):
        n = min(CHUNK, L - begin)
        rows = slice(begin, begin + n)
        qc, kc, vc = (x[rows].transpose(1, 0, 2) for x in (q, k, v))  # [HV, n, *]
        bc = beta[rows].T[:, :, None]  # [HV, n, 1]
        G = np.cumsum(g[rows].T, axis=1, dtype=F32)  # [HV, n], chunk-local
        causal = np.tril(np.ones((n, n), bool))
        decay = np.exp(np.where(causal, G[:, :, None] - G[:, None, :], F32(-np.inf)))
        A = ((bc * kc) @ kc.transpose(0, 2, 1)) * decay * np.tril(np.ones((n, n), F32), -1)
        T = np.zeros((HV, n, n), F32)
        for i in range(n):  # forward substitution: row i of (I + A)^-1
            T[:, i, :i] = -np.einsum("hm,hmj->hj", A[:, i, :i], T[:, :i, :i])
            T[:, i, i] = 1
        eg = np.exp(G)[:, :, None]
        w = T @ (bc * eg * kc)
        u = T @ (bc * vc)
        v_new = u - w @ state
        oc = (qc @ state) * eg + ((qc @ kc.transpose(0, 2, 1)) * decay) @ v_new
        o[rows] = (scale * oc).transpose(1, 0, 2)
        last = G[:, -1:]  # [HV, 1]
        k_decayed = kc * np.exp(last - G)[:, :, None]
        state *= np.exp(last)[:, :, None]
        state += k_decayed.transpose(0, 2, 1) @ v_new
    return o


def run_gdr(case):
    x = {name: np.asarray(a) for name, a in case.inputs.items()}
    q, k, v = (x[n].astype(F32) for n in ("q", "k", "v"))
    g, beta = x["g"].astype(F32), x["beta"].astype(F32)
    B, T, H, K = q.shape
    HV = v.shape[2]
    if case.param("l2") == "1":
        q, k = l2norm(q), l2norm(k)
    # value head i uses q/k head i // (HV / H) (blocked, as FLA)
    q, k = np.repeat(q, HV // H, axis=2), np.repeat(k, HV // H, axis=2)
    if "cu_seqlens" in x:
        cu = [int(c) for c in x["cu_seqlens"]]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    n = len(seqs)
    if "block_slots" in x or "state_indices" in x:
        return run_serving(case, x, (q, k, v, g, beta), seqs)
    # Pool modes: states live in rows picked by the slots; slot -1 is padding (skipped), rows
    # nobody addresses come back unchanged. Spec: the state after each draft token, each the
    # final state of that prefix computed in the chunked form.
    pool = x["state_pool"].astype(F32).copy() if "state_pool" in x else None
    slots = [int(s) for s in x["state_slots"]] if pool is not None else list(range(n))
    s0 = x["initial_state"].astype(F32) if "initial_state" in x else np.zeros((n, HV, K, v.shape[3]), F32)
    spec = "token_states" in case.outputs
    out = {"o": np.zeros(v.shape, F32), "final_state": np.zeros(s0.shape, F32),
           "state_pool": pool, "token_states": np.zeros((n, T) + s0.shape[1:], F32)}
    scale = F32(K ** -0.5)
    for i, (b, lo, hi) in enumerate(seqs):
        if slots[i] < 0:
            continue
        start = pool[slots[i]] if pool is not None else s0[i]
        args = (q[b, lo:hi], k[b, lo:hi], v[b, lo:hi].astype(F32), g[b, lo:hi], beta[b, lo:hi])
        for p in range(1, hi - lo if spec else 0):
            prefix = start.copy()
            chunked_rule(*(a[:p] for a in args), prefix, scale)
            out["token_states"][i, p - 1] = prefix
        state = start.copy()
        out["o"][b, lo:hi] = chunked_rule(*args, state, scale)
        if spec and hi > lo:
            out["token_states"][i, hi - lo - 1] = state
        out["final_state"][i] = state
        if pool is not None:
            pool[slots[i]] = state
    return out


def run_serving(case, x, tensors, seqs):
    """The serving contracts (docs/serving.md) in the chunked form. cache=ckpt: each block of
    `calls` tokens as its own prefill from the previous block's state, which goes into
    block_slots[i, block]. cache=accept: every prefix from row state_indices[i,
    num_accepted_tokens[i] - 1], prefix t + 1's state into row state_indices[i, t]. cache=tree:
    each token's root path (its ancestors, then itself; parents[i, t] = -1 is the start row
    state_slots[i]) as one chunked sequence, the path's end state into row state_indices[i, t]."""
    q, k, v, g, beta = tensors
    K = q.shape[3]
    before = x["state_pool"].astype(F32)
    pool = before.copy()
    o = np.zeros(v.shape, F32)
    scale = F32(K ** -0.5)
    HV, V = v.shape[2], v.shape[3]
    for i, (b, lo, hi) in enumerate(seqs):
        args = (q[b], k[b], v[b].astype(F32), g[b], beta[b])
        if "block_slots" in x:
            state = (x["initial_state"][i].astype(F32).copy() if "initial_state" in x
                     else np.zeros((HV, K, V), F32))
            bs = int(case.param("calls"))
            for j, at in enumerate(range(lo, hi, bs)):
                end = min(at + bs, hi)
                o[b, at:end] = chunked_rule(*(a[at:end] for a in args), state, scale)
                pool[int(x["block_slots"][i, j])] = state
        elif "parents" in x:
            parents = [int(u) for u in x["parents"][i]]
            for t, row in enumerate(int(r) for r in x["state_indices"][i]):
                path, u = [], t
                while u >= 0:
                    path.insert(0, lo + u)
                    u = parents[u]
                state = before[int(x["state_slots"][i])].copy()
                o[b, lo + t] = chunked_rule(*(a[path] for a in args), state, scale)[-1]
                pool[row] = state
        else:
            rows = [int(r) for r in x["state_indices"][i]]
            start = before[rows[int(x["num_accepted_tokens"][i]) - 1]]
            for t, row in enumerate(rows):
                state = start.copy()
                o[b, lo:lo + t + 1] = chunked_rule(*(a[lo:lo + t + 1] for a in args), state, scale)
                pool[row] = state
    return {"o": o, "state_pool": pool}


def answer(inp, out):
    case = dc_protocol.Case(inp)
    facts = {"implementation": "numpy_chunked_gdr.chunked_rule (fp32, chunk 64, UT solve)",
             "versions": {"numpy": np.__version__}}
    if case.op != "gdr":
        dc_protocol.decline(out, f"numpy_chunked_gdr.py implements gdr only, not {case.op}", facts)
        return
    dc_protocol.write_outputs(out, case, run_gdr(case), facts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inp", nargs="?", help="{in}: the case (HDF5); none in serve mode")
    ap.add_argument("out", nargs="?", help="{out}: the outputs to write (HDF5); none in serve mode")
    args = ap.parse_args()
    return dc_protocol.main(answer, args.inp, args.out, ap)


if __name__ == "__main__":
    sys.exit(main())
