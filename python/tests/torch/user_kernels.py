"""Torch kernels written for the tests, as a user would write them (FLA's keyword signature): the
gated delta rule's token recurrence in fp32, correct, and with bugs: a state-not-reset one (each
packed sequence starts from the state the previous one ended with), one that runs the last
sequence on through the padding tail past cu_seqlens[-1], and one without an autograd path. The
recurrence is written per token row (unbind, stack) so that autograd records one node per
operation, not one per token: its gradients are the gdr_grad route's correct torch kernel."""
import torch


def _recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
               use_qk_l2norm_in_kernel, reset=True, through_tail=False):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    dtype = v.dtype
    q, k, v, beta, g = (x.float() for x in (q, k, v, beta, g))
    if use_qk_l2norm_in_kernel:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q.repeat_interleave(HV // H, dim=2) * scale  # value head i uses q/k head i // (HV/H)
    k = k.repeat_interleave(HV // H, dim=2)
    if cu_seqlens is not None:
        cu = cu_seqlens.tolist()
        if through_tail:
            cu[-1] = T  # the bug: the last sequence runs on into the tail past cu_seqlens[-1]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    rows = [list(zip(*(x[b].unbind(0) for x in (q, k, v, g, beta)))) for b in range(B)]
    out = [[None] * T for _ in range(B)]
    finals = []
    S = torch.zeros(HV, K, V, device=v.device)
    for n, (b, bos, eos) in enumerate(seqs):
        if reset or n == 0:
            S = (initial_state[n].float() if initial_state is not None
                 else torch.zeros(HV, K, V, device=v.device))
        for t in range(bos, eos):
            qt, kt, vt, gt, bt = rows[b][t]
            S = S * gt.exp()[:, None, None]
            u = bt[:, None] * (vt - torch.einsum("hk,hkv->hv", kt, S))
            S = S + kt[:, :, None] * u[:, None, :]
            out[b][t] = torch.einsum("hk,hkv->hv", qt, S)
        finals.append(S)
    zero = torch.zeros(HV, V, device=v.device)  # tokens of no sequence (a padding tail)
    o = (torch.stack([torch.stack([r if r is not None else zero for r in row]) for row in out])
         if T else torch.zeros(B, 0, HV, V, device=v.device))
    return o.to(dtype), (torch.stack(finals) if output_final_state else None)


def recurrent_gdr(**kw):
    return _recurrent(**kw)


def recurrent_gdr_no_reset(**kw):
    return _recurrent(**kw, reset=False)


def recurrent_gdr_through_tail(**kw):
    return _recurrent(**kw, through_tail=True)


def recurrent_gdr_no_autograd(**kw):
    with torch.no_grad():  # the bug: a forward autograd cannot differentiate
        return _recurrent(**kw)


def transformers_gdr(q, k, v, g, beta, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """recurrent_gdr under Transformers' signature (convention='transformers')."""
    return _recurrent(q=q, k=k, v=v, g=g, beta=beta, scale=q.shape[-1] ** -0.5,
                      initial_state=initial_state, output_final_state=output_final_state,
                      cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)


def recurrent_gdr_detached_gate(g, **kw):
    """g used outside autograd (its gradient: None, so zeros)."""
    return _recurrent(g=g.detach(), **kw)
