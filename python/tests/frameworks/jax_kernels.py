"""A JAX gated delta rule written for the tests, as a JAX user would write it (FLA's keyword
signature): the token recurrence in fp32 under jax.lax.scan, jitted, every packed sequence
starting from its own initial state; and its leaky twin, whose packed sequences after the first
start from the state the previous one ended with. Shapes are bucketed (B, T and the number of
sequences padded to powers of four, the padding masked out) so that the probes' cuts reuse a few
compiled shapes. Differentiable: jax.vjp of it is the gdr_grad route's correct JAX kernel."""
import jax
import jax.numpy as jnp
import numpy as np


def _bucket(n, least):
    """The least power of 4 times `least` that holds n."""
    size = least
    while size < n:
        size *= 4
    return size


@jax.jit
def _scan(q, k, v, g, beta, s0, start, valid, end, seq, scale, l2):
    f32 = jnp.float32
    q = jnp.where(l2, q * jax.lax.rsqrt((q * q).sum(-1, keepdims=True) + 1e-6), q)
    k = jnp.where(l2, k * jax.lax.rsqrt((k * k).sum(-1, keepdims=True) + 1e-6), k)
    rep = v.shape[2] // q.shape[2]  # value head i uses q/k head i // (HV/H)
    q = jnp.repeat(q, rep, axis=2) * scale
    k = jnp.repeat(k, rep, axis=2)
    B, HV, K, V = v.shape[0], v.shape[2], k.shape[3], v.shape[3]

    def step(carry, x):
        S, F = carry
        qt, kt, vt, gt, bt, st, ok, en, sq = x
        S = jnp.where(st[:, None, None, None], s0[sq], S)
        T1 = S * jnp.exp(gt)[..., None, None]
        u = bt[..., None] * (vt - jnp.einsum("bhk,bhkv->bhv", kt, T1))
        T1 = T1 + kt[..., :, None] * u[..., None, :]
        S = jnp.where(ok[:, None, None, None], T1, S)
        o = jnp.where(ok[:, None, None], jnp.einsum("bhk,bhkv->bhv", qt, S), 0.0)
        F = F.at[sq].set(jnp.where(en[:, None, None, None], S, F[sq]))
        return (S, F), o

    xs = tuple(jnp.swapaxes(x, 0, 1) for x in (q, k, v, g, beta, start, valid, end, seq))
    init = (jnp.zeros((B, HV, K, V), f32), s0)
    (_, finals), o = jax.lax.scan(step, init, xs)
    return jnp.swapaxes(o, 0, 1), finals


def _recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
               use_qk_l2norm_in_kernel, reset=True):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if cu_seqlens is not None:
        cu = [int(x) for x in np.asarray(cu_seqlens)]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    # one compiled shape per bucket of (B, T, N), whatever the dtype and l2
    N, Bb, Tb = len(seqs), _bucket(B, 1), _bucket(T, 64)
    start, valid, end = (np.zeros((Bb, Tb), bool) for _ in range(3))
    seq = np.zeros((Bb, Tb), np.int32)
    for n, (b, bos, eos) in enumerate(seqs):
        if eos > bos:
            # the bug of the twin: only a row's first sequence loads its initial state
            start[b, bos] = reset or bos == 0
            valid[b, bos:eos] = end[b, eos - 1] = True
        seq[b, bos:eos] = n
    seq[B:] = np.arange(N, N + Bb - B)[:, None]  # padding rows: sequences of their own, unused
    Nb = _bucket(N + Bb - B, 8)

    def pad(x):
        x = x.astype(jnp.float32)
        return jnp.pad(x, [(0, Bb - B), (0, Tb - T)] + [(0, 0)] * (x.ndim - 2))

    s0 = (initial_state.astype(jnp.float32) if initial_state is not None
          else jnp.zeros((N, HV, K, V), jnp.float32))
    s0 = jnp.pad(s0, [(0, Nb - N), (0, 0), (0, 0), (0, 0)])
    o, finals = _scan(pad(q), pad(k), pad(v), pad(g), pad(beta), s0, start, valid, end, seq,
                      jnp.float32(scale), bool(use_qk_l2norm_in_kernel))
    return o[:B, :T].astype(v.dtype), (finals[:N] if output_final_state else None)


def recurrent_gdr(**kw):
    return _recurrent(**kw)


def recurrent_gdr_no_reset(**kw):
    return _recurrent(**kw, reset=False)
