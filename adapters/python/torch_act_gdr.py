#!/usr/bin/env python3
"""deltacheck peer adapter: the gated delta rule written in plain PyTorch with every tensor in the
activation dtype, its gradients by autograd (the autodiff=act profile, docs/tolerance.md):

    build/deltacheck run --suite gate --op gdr_grad --backend external --profile autodiff=act \
        --cmd "$VENV/bin/python adapters/python/torch_act_gdr.py {in} {out}"

A correct implementation of the kind a model written in bf16 end to end has (`model.to(bfloat16)`,
no fp32 casts): q, k, v, g, beta and the initial state are cast to the activation dtype, the
L2 norm is x / sqrt(sum(x * x) + 1e-6) on those tensors, and the token recurrence runs on them:
S <- exp(g) S, p = k^T S (a matmul: fp32 accumulation, one rounding), u = beta (v - p),
S <- S + k u^T, o = (scale q)^T S. Every intermediate of the forward is a tensor of the
activation dtype, and so is every gradient autograd computes through it (torch rounds each op's
result). dg and dh0 come back in that dtype and are written as fp32. Without the profile the
harness judges it as any kernel (the fp32-state baselines); with `--profile autodiff=act` against
the baseline of the same formulation (reference/gated_delta_rule_autodiff.cc); `--declare` writes
that profile into {out} instead. fp32 cases run the same code in fp32 (the profile changes nothing
there).

What the adapter supplies around it (as fla_gdr.py does for FLA's naive functions): each packed
sequence is run alone from its own initial state, GVA by repeat_interleave after the norm, tokens
past cu_seqlens[-1] are cut off (dc_protocol.autograd_gdr_grad). Declined: cache modes with slot
pools, ops other than gdr and gdr_grad.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402
import fla_gdr  # noqa: E402


def recurrence(q, k, v, g, beta, scale, initial_state=None, output_final_state=True):
    """One sequence: q, k [1, T, HV, K] (normalized), v [1, T, HV, V], g, beta [1, T, HV], all
    in the activation dtype; returns (o [1, T, HV, V], final state [1, HV, K, V])."""
    import torch
    dt = q.dtype
    v, g, beta = v.to(dt), g.to(dt), beta.to(dt)
    _, T, HV, K = q.shape
    V = v.shape[-1]
    S = (initial_state.to(dt) if initial_state is not None
         else torch.zeros(1, HV, K, V, dtype=dt))
    outs = []
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]
        p = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        u = beta[:, t, :, None] * (v[:, t] - p)
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], u)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))
    return torch.stack(outs, dim=1), S


def main():
    ap = dc.parser(__doc__)
    ap.add_argument("--declare", action="store_true",
                    help="declare the profile autodiff=act in {out} (its root attribute "
                         "`profile`), instead of deltacheck's --profile autodiff=act")
    return dc.adapter_main(ap, lambda a: (recurrence, FACTS), answer)


FACTS = {"implementation": "torch_act_gdr.recurrence: the token recurrence in the activation "
                           "dtype, gradients by torch.autograd"}


def answer(args, inp, out_path):
    import torch
    case = dc.Case(inp)
    if case.op not in ("gdr", "gdr_grad"):
        dc.decline(out_path, f"torch_act_gdr.py implements gdr and gdr_grad only, not {case.op}")
        return
    if case.param("cache") in ("pool", "spec", "ckpt", "accept", "tree"):
        dc.decline(out_path, f"cache={case.param('cache')}: states in slot pools; this "
                             "recurrence takes one state per sequence")
        return
    facts = dict(FACTS, versions={"torch": torch.__version__})
    if args.declare:
        facts["profile"] = "autodiff=act"
    torch.set_num_threads(int(os.environ.get("DELTACHECK_PEER_THREADS", "1")))
    act = dc.torch_input(case, "q").dtype
    forward = fla_gdr.naive_forward(recurrence, dtype=act)
    if case.op == "gdr_grad":
        values = dc.autograd_gdr_grad(forward)(case)
    else:
        with torch.no_grad():
            values = fla_gdr.run_naive(case, forward)
    dc.write_tensors(out_path, case, values, facts)


if __name__ == "__main__":
    sys.exit(main())
