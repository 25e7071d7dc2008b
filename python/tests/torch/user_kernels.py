"""Torch kernels written for the tests, as a user would write them (FLA's keyword signature): the
gated delta rule's token recurrence in fp32, correct, and with a state-not-reset bug (each
packed sequence starts from the state the previous one ended with)."""
import torch


def _recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
               use_qk_l2norm_in_kernel, reset):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q, k, v, beta, g = (x.float() for x in (q, k, v, beta, g))
    if use_qk_l2norm_in_kernel:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q.repeat_interleave(HV // H, dim=2) * scale  # value head i uses q/k head i // (HV/H)
    k = k.repeat_interleave(HV // H, dim=2)
    if cu_seqlens is not None:
        cu = cu_seqlens.tolist()
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    o = torch.empty(B, T, HV, V, dtype=v.dtype, device=v.device)
    finals = torch.empty(len(seqs), HV, K, V, dtype=torch.float32, device=v.device)
    S = torch.zeros(HV, K, V, device=v.device)
    for n, (b, bos, eos) in enumerate(seqs):
        if reset or n == 0:
            S = (initial_state[n].float().clone() if initial_state is not None
                 else torch.zeros(HV, K, V, device=v.device))
        for t in range(bos, eos):
            S = S * g[b, t].exp()[:, None, None]
            u = beta[b, t][:, None] * (v[b, t] - torch.einsum("hk,hkv->hv", k[b, t], S))
            S = S + k[b, t][:, :, None] * u[:, None, :]
            o[b, t] = torch.einsum("hk,hkv->hv", q[b, t], S)
        finals[n] = S
    return o, (finals if output_final_state else None)


def recurrent_gdr(**kw):
    return _recurrent(**kw, reset=True)


def recurrent_gdr_no_reset(**kw):
    return _recurrent(**kw, reset=False)
