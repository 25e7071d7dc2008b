#!/usr/bin/env python3
"""An example external candidate for deltacheck: the gated delta rule in NumPy.

deltacheck runs it once per case through the external backend:

    build/deltacheck run --suite smoke --filter '^gdr' --backend external \
        --cmd 'python3 adapters/python/numpy_gdr.py {in} {out}'

or starts it once and sends it every case (serve mode, docs/external.md: dc_protocol.serve):

    build/deltacheck run --suite smoke --filter '^gdr' --backend external \
        --serve 'python3 adapters/python/numpy_gdr.py'

The protocol (golden/README.md, "External programs"):
  {in}   an HDF5 file with one case group: attributes case_id, op, seed; params/ (one string
         attribute per case-id parameter); inputs/<name> (bf16/fp16 as uint16 bit patterns with
         attribute dtype); outputs/<name> (attributes dtype and shape of each output to produce).
  {out}  an HDF5 file this program writes: one root dataset per output, with that shape and dtype
         (fp32 -> float32; bf16/fp16 -> uint16 bits with attribute dtype). A case it cannot run is
         declined with a root attribute "unsupported" holding the reason. A non-zero exit, a crash
         or a missing dataset is a verdict error, never a pass.

The rule (docs/semantics.md): per sequence and value head, with state S [K, V] and value head i
using q/k head i // (HV / H), token by token:
    S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale q_t)
with q, k optionally L2-normalized (x / sqrt(sum x^2 + 1e-6)) and scale = K^-0.5. Computed in
float64 and rounded once to the output dtype.

--leaky deliberately ignores cu_seqlens: the state runs on from one packed sequence into the next
(the padding-free bug deltacheck exists to catch). deltacheck must report it as a leak.
"""
import argparse
import sys

import h5py
import numpy as np

import dc_protocol


def read_tensor(ds):
    """A dataset as float64 (bf16/fp16 decoded from their bits), or integers as they are."""
    a = ds[()]
    dtype = ds.attrs.get("dtype", "")
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return a.view(np.float16).astype(np.float64)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def encode(x, dtype):
    """float64 values as the {out} file holds them for `dtype` (rounded to nearest even)."""
    if dtype == "fp32":
        return x.astype(np.float32)
    if dtype == "fp64":
        return x.astype(np.float64)
    if dtype == "fp16":
        return x.astype(np.float16).view(np.uint16)
    if dtype == "bf16":
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    raise ValueError(f"no encoding for dtype {dtype}")


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def gated_delta_rule(q, k, v, g, beta, state, scale, token_states=None):
    """One sequence: q, k [T, H, K], v [T, HV, V], g, beta [T, HV], state [HV, K, V] (updated in
    place); with token_states [T, HV, K, V], also the state after every token."""
    hv, h = v.shape[1], q.shape[1]
    group = hv // h  # value head i uses q/k head i // group (blocked, as FLA)
    o = np.zeros((q.shape[0], hv, v.shape[2]))
    for t in range(q.shape[0]):
        qt = np.repeat(q[t], group, axis=0) * scale  # [HV, K]
        kt = np.repeat(k[t], group, axis=0)
        state *= np.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", state, kt))
        state += kt[:, :, None] * u[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", state, qt)
        if token_states is not None:
            token_states[t] = state
    return o


def run_gdr(case, leaky):
    """Every output a gdr case may ask for: o, final_state, and in the pooled cache modes the
    state pool after the call (state_pool) and the state after each draft token (token_states)."""
    p = {key: str(val) for key, val in case["params"].attrs.items()}
    x = {name: read_tensor(ds) for name, ds in case["inputs"].items()}
    q, k, v, g, beta = x["q"], x["k"], x["v"], x["g"], x["beta"]
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if p.get("l2") == "1":
        q, k = l2norm(q), l2norm(k)
    # Sequences as (row, begin, end): packed rows have cu_seqlens, batches one sequence per row.
    packed = "cu_seqlens" in x
    if packed:
        cu = [int(c) for c in x["cu_seqlens"]]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    n = len(seqs)
    if "block_slots" in x or "state_indices" in x:
        return run_serving(p, x, (q, k, v, g, beta), seqs)
    # Where each sequence's state comes from and goes to: its own initial/final state, or (cache
    # modes pool and spec) a row of the state pool picked by its slot; slot -1 is padding, skipped
    # and written nowhere. Pool rows nobody addresses must come back unchanged.
    pool = x["state_pool"].copy() if "state_pool" in x else None
    slots = [int(s) for s in x["state_slots"]] if pool is not None else list(range(n))
    s0 = x.get("initial_state", np.zeros((n, HV, K, V)))
    o = np.zeros((B, T, HV, V))
    final = np.zeros((n, HV, K, V))
    token_states = np.zeros((n, T, HV, K, V))
    carried = None
    for i, (b, lo, hi) in enumerate(seqs):
        if slots[i] < 0:
            continue
        state = (pool[slots[i]] if pool is not None else s0[i]).copy()
        if leaky and packed and carried is not None:
            state = carried  # the bug: the previous sequence's state carries on
        o[b, lo:hi] = gated_delta_rule(q[b, lo:hi], k[b, lo:hi], v[b, lo:hi], g[b, lo:hi],
                                       beta[b, lo:hi], state, K ** -0.5, token_states[i, :hi - lo])
        final[i] = state
        if pool is not None:
            pool[slots[i]] = state
        carried = state
    return {"o": o, "final_state": final, "state_pool": pool, "token_states": token_states}


def run_serving(p, x, tensors, seqs):
    """The serving contracts (docs/serving.md). cache=ckpt: block by block, the state after each
    block of `calls` tokens (or at the sequence's end) into block_slots[i, block]. cache=accept:
    from row state_indices[i, num_accepted_tokens[i] - 1], token t's state into row
    state_indices[i, t]. cache=tree: token t from its parent's state (parents[i, t] = -1: row
    state_slots[i]), its state into row state_indices[i, t]."""
    q, k, v, g, beta = tensors
    B, T, HV, V = v.shape
    K = q.shape[3]
    before = x["state_pool"]
    pool = before.copy()
    o = np.zeros((B, T, HV, V))
    for i, (b, lo, hi) in enumerate(seqs):
        if "block_slots" in x:
            state = x["initial_state"][i].copy() if "initial_state" in x else np.zeros((HV, K, V))
            bs = int(p["calls"])
            for j, at in enumerate(range(lo, hi, bs)):
                end = min(at + bs, hi)
                o[b, at:end] = gated_delta_rule(q[b, at:end], k[b, at:end], v[b, at:end],
                                                g[b, at:end], beta[b, at:end], state, K ** -0.5)
                pool[int(x["block_slots"][i, j])] = state
        elif "parents" in x:
            rows = [int(r) for r in x["state_indices"][i]]
            states = []
            for t, parent in enumerate(int(u) for u in x["parents"][i]):
                state = (before[int(x["state_slots"][i])] if parent < 0 else states[parent]).copy()
                at = slice(lo + t, lo + t + 1)
                o[b, at] = gated_delta_rule(q[b, at], k[b, at], v[b, at], g[b, at], beta[b, at],
                                            state, K ** -0.5)
                states.append(state)
                pool[rows[t]] = state
        else:
            rows = [int(r) for r in x["state_indices"][i]]
            state = before[rows[int(x["num_accepted_tokens"][i]) - 1]].copy()
            token_states = np.zeros((hi - lo, HV, K, V))
            o[b, lo:hi] = gated_delta_rule(q[b, lo:hi], k[b, lo:hi], v[b, lo:hi], g[b, lo:hi],
                                           beta[b, lo:hi], state, K ** -0.5, token_states)
            for t, row in enumerate(rows):
                pool[row] = token_states[t]
    return {"o": o, "state_pool": pool}


def answer(inp, out, leaky):
    """Reads the case from {in}, writes its outputs (or why it is declined) to {out}."""
    with h5py.File(inp, "r") as f:
        (case,) = f.values()  # exactly one case per {in} file
        op = case.attrs["op"]
        specs = {name: (spec.attrs["dtype"], tuple(spec.attrs["shape"]))
                 for name, spec in case["outputs"].items()}
        values = run_gdr(case, leaky) if op == "gdr" else None
    with h5py.File(out, "w") as f:
        if values is None:
            f.attrs["unsupported"] = f"numpy_gdr.py implements the op gdr only, not {op}"
            return 0
        for name, (dtype, shape) in specs.items():
            data = values[name].reshape(shape)
            ds = f.create_dataset(name, data=encode(data, dtype))
            if dtype in ("bf16", "fp16"):
                ds.attrs["dtype"] = dtype


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inp", nargs="?", help="{in}: the case (HDF5); none in serve mode")
    ap.add_argument("out", nargs="?", help="{out}: the outputs to write (HDF5); none in serve mode")
    ap.add_argument("--leaky", action="store_true", help="ignore cu_seqlens (a deliberate bug)")
    args = ap.parse_args()
    return dc_protocol.main(lambda inp, out: answer(inp, out, args.leaky), args.inp, args.out, ap)


if __name__ == "__main__":
    sys.exit(main())
