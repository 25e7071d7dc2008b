"""An MLX gated delta rule written for the tests, as an MLX user would write it (FLA's keyword
signature): the token recurrence in fp32, one sequence after another (MLX builds the graph
lazily and evaluates it once), every packed sequence starting from its own initial state; and
its leaky twin, whose packed sequences after the first start from the state the previous one
ended with. Differentiable: mx.vjp of it is the gdr_grad route's correct MLX kernel."""
import mlx.core as mx


def _recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
               use_qk_l2norm_in_kernel, reset=True):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    f32, dtype = mx.float32, v.dtype
    q, k, v, g, beta = (x.astype(f32) for x in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q = q * mx.rsqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k * mx.rsqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    q = mx.repeat(q, HV // H, axis=2) * scale  # value head i uses q/k head i // (HV/H)
    k = mx.repeat(k, HV // H, axis=2)
    if cu_seqlens is not None:
        cu = [int(x) for x in cu_seqlens.tolist()]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    zero = mx.zeros((HV, V), f32)  # tokens of no sequence (a padding tail)
    out = [[zero] * T for _ in range(B)]
    finals = []
    S = mx.zeros((HV, K, V), f32)
    for n, (b, bos, eos) in enumerate(seqs):
        if reset or n == 0:  # the bug of the twin: only the first sequence loads its state
            S = (initial_state[n].astype(f32) if initial_state is not None
                 else mx.zeros((HV, K, V), f32))
        for t in range(bos, eos):
            qt, kt, vt = q[b, t], k[b, t], v[b, t]
            S = S * mx.exp(g[b, t])[:, None, None]
            u = beta[b, t][:, None] * (vt - (kt[:, :, None] * S).sum(1))
            S = S + kt[:, :, None] * u[:, None, :]
            out[b][t] = (qt[:, :, None] * S).sum(1)
        finals.append(S)
    o = (mx.stack([mx.stack(row) for row in out]) if T else mx.zeros((B, 0, HV, V), f32))
    return o.astype(dtype), (mx.stack(finals) if output_final_state else None)


def recurrent_gdr(**kw):
    return _recurrent(**kw)


def recurrent_gdr_no_reset(**kw):
    return _recurrent(**kw, reset=False)
