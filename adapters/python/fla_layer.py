#!/usr/bin/env python3
"""deltacheck peer adapter: flash-linear-attention's (FLA) GatedDeltaNet layer
(fla.layers.gated_deltanet.GatedDeltaNet: projections, short convolutions, the gated delta rule,
the gated norm, o_proj) on deltacheck's layer cases, through the external backend:

    build/deltacheck run --case 'layer(layout=packed[37,50],state=none,cache=none)' \
        --backend external --serve "$VENV/bin/python adapters/python/fla_layer.py \
        --interface cu_seqlens"

What runs: the layer built with hidden_size = D + HV V + 2 HV, num_heads = H, num_v_heads = HV,
head_dim = K, expand_v = V / K, conv_size = W, conv_bias = the case's bias, norm_eps = 1e-6,
use_gate=True, use_short_conv=True, mode='chunk', in eval mode under torch.no_grad() (so the layer
itself picks fused_recurrent_gated_delta_rule for q_len <= 64 and chunk_gated_delta_rule above:
both kernels are exercised). Its Triton kernels (the rule, ShortConvolution's causal_conv1d,
FusedRMSNormGated) run on a GPU (`--device cuda`) or on CPU tensors under Triton's interpreter
(`--device interpreter`, helped by triton_cpu.py as fla_gdr.py is; `auto`: cuda when torch sees
one).

The case's layer parameters (ops/layer, reference/linear_attention_layer.h) become the layer's
parameters exactly:
  - the hidden states of token t are the case's projections side by side, [qkv (D) | z (HV V) |
    b (HV) | a (HV)], and q_proj, k_proj, v_proj, g_proj, b_proj, a_proj are 0/1 selection
    matrices picking q (channels 0..HK), k (HK..2HK), v (2HK..D), z, b and a out of them (x * 1
    plus zeros: the case's values bit for bit);
  - q_conv1d / k_conv1d / v_conv1d.weight [C, 1, W] <- the q / k / v rows of conv_weight [D, W]
    (the layer convolves q, k and v separately, with SiLU, as the reference's one conv over
    q | k | v channels does); with bias=1 their .bias <- the same rows of conv_bias (FLA's
    conv_bias=True: the layer op's default is supported here, unlike Transformers' modules);
  - A_log, dt_bias <- the case's (the kernels' use_gate_in_kernel: g = -exp(A_log) softplus(a +
    dt_bias); use_beta_sigmoid_in_kernel: beta = sigmoid(b); use_qk_l2norm_in_kernel; scale
    K^-0.5; GVA value head j -> q/k head j // (HV / H), the case's blocked convention);
  - o_norm.weight [V] <- norm_weight (FusedRMSNormGated, activation swish: rmsnorm(o) * w *
    silu(z), the reference's gated norm), eps 1e-6;
  - o_proj.weight [hidden, HV V]: the identity on its first HV V rows: o is the first HV V
    channels of the layer's output.
  Every parameter is set (an unexpected name or shape is an adapter error naming it). fp32 cases
  run as they are; bf16 cases run the projections in bf16 (exact selections) and keep the conv,
  gate and norm weights in fp32, the case's.
How the packed row reaches the layer (`--interface`; hidden states [1, T, hidden] unless said):
  cu_seqlens     kwargs cu_seqlens (int64 [N + 1]), no attention_mask: FLA's varlen path;
  mask-and-cu    cu_seqlens and an all-ones attention_mask [1, T] beside it, as Transformers'
                 trainers inject one by default (FLA#838: the layer used to re-derive
                 cu_seqlens from the mask, [0, T], and ran the sequences together; fixed by FLA
                 PR #842 and, for every layer, #1088: explicit cu_seqlens take precedence in
                 fla.layers.utils.unpad_hidden_states);
  position_ids   only position_ids restarting per sequence (the default collator's packing):
                 the layer takes **kwargs and reads cu_seqlens alone, so it sees no boundary;
  padded         no packing: the N sequences as N rows of a right-padded batch [N, max L,
                 hidden] with a 0/1 attention_mask [N, max L] (FLA unpads it into cu_seqlens
                 itself); o is read back from the valid tokens.
Declined (unsupported): ops other than layer, and cases with states (cache modes other than
none): the layer keeps its states in fla.models' Cache, which this adapter does not drive (the
padding-free training path is what the interfaces above are about).
Counterfactual, to show the mask-and-cu check can fail (not a finding of FLA 0.6.0):
  --wrong mask-overrides-cu  the layer's unpad_hidden_states replaced by the code before FLA PR
                             #842 (cu_seqlens re-derived from attention_mask whenever a mask is
                             passed): mask-and-cu leaks, as FLA#838 reported.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402

INTERFACES = ("cu_seqlens", "mask-and-cu", "position_ids", "padded")
CLASS = "fla.layers.gated_deltanet.GatedDeltaNet"


def resolve(args):
    """(True, facts) or (False, reason): the device set up (the interpreter before FLA is
    imported), FLA's layer importable."""
    import importlib
    import inspect
    import warnings
    try:
        import torch
    except Exception as e:
        return False, f"torch not importable: {type(e).__name__}: {e}"
    from fla_gdr import fla_versions, kernel_device
    versions = fla_versions(torch)
    where, problem = kernel_device(torch, args.device, f"{CLASS} (Triton kernels)")
    if where is None:
        return False, problem
    try:
        with warnings.catch_warnings():  # FLA warns on import when Triton has no GPU
            warnings.simplefilter("ignore")
            module = importlib.import_module("fla.layers.gated_deltanet")
    except Exception as e:
        return False, (f"fla.layers.gated_deltanet not importable (flash-linear-attention "
                       f"{versions.get('flash-linear-attention', 'not installed')}): "
                       f"{type(e).__name__}: {e}")
    extra = (f" [deliberately wrong: {args.wrong}, FLA's code before PR #842]"
             if args.wrong else "")
    return True, dict({
        "implementation": f"{CLASS} ({inspect.getsourcefile(module)}), packed rows with "
                          f"--interface {args.interface}{extra}",
        "interface": args.interface, "versions": versions}, **where)


def pre_842_unpad(hidden_states, cu_seqlens, attention_mask, q_len):
    """--wrong mask-overrides-cu: fla/layers/gated_deltanet.py's logic before FLA PR #842
    (FLA#838): a mask, when given, replaces the caller's cu_seqlens."""
    from einops import rearrange
    from fla.layers.utils import get_unpad_data, index_first_axis
    if attention_mask is not None:
        indices, cu_seqlens, _ = get_unpad_data(attention_mask[:, -q_len:])
        hidden_states = index_first_axis(rearrange(hidden_states, "b s ... -> (b s) ..."),
                                         indices).unsqueeze(0)
        return hidden_states, indices, cu_seqlens
    return hidden_states, None, cu_seqlens


class Layer:
    """FLA's GatedDeltaNet built for one case's shapes, its weights set from the case."""

    def __init__(self, args, case, device):
        import torch
        import fla.layers.gated_deltanet as gdn
        if args.wrong == "mask-overrides-cu":
            gdn.unpad_hidden_states = pre_842_unpad
        p = case.params
        H, HV, K, V, W = (int(p[n]) for n in ("H", "HV", "K", "V", "W"))
        self.torch, self.args, self.device = torch, args, device
        self.HK, self.HV, self.V = H * K, HV, V
        self.D = 2 * H * K + HV * V
        self.hidden = self.D + HV * V + 2 * HV
        self.bias = "conv_bias" in case.inputs
        self.layer = gdn.GatedDeltaNet(
            hidden_size=self.hidden, expand_v=V / K, head_dim=K, num_heads=H, num_v_heads=HV,
            mode="chunk", use_gate=True, use_short_conv=True, conv_size=W,
            conv_bias=self.bias, layer_idx=0, norm_eps=1e-6).eval()
        self.dtype = dc.torch_input(case, "qkv").dtype
        self.set_weights(case, W)
        self.layer.to(device)

    def selection(self, lo, n):
        """[n, hidden] 0/1: row i picks hidden channel lo + i."""
        w = self.torch.zeros(n, self.hidden, dtype=self.dtype)
        w[self.torch.arange(n), self.torch.arange(lo, lo + n)] = 1
        return w

    def set_weights(self, case, W):
        torch, HK, D, HVV = self.torch, self.HK, self.D, self.HV * self.V
        f32 = lambda n: dc.torch_input(case, n).float()  # noqa: E731
        cw = f32("conv_weight")
        parts = {"q": (0, HK), "k": (HK, HK), "v": (2 * HK, HVV)}
        want = {f"{n}_proj.weight": self.selection(lo, c) for n, (lo, c) in parts.items()}
        want.update({"g_proj.weight": self.selection(D, HVV),
                     "b_proj.weight": self.selection(D + HVV, self.HV),
                     "a_proj.weight": self.selection(D + HVV + self.HV, self.HV),
                     "A_log": f32("A_log"), "dt_bias": f32("dt_bias"),
                     "o_norm.weight": f32("norm_weight")})
        for n, (lo, c) in parts.items():
            want[f"{n}_conv1d.weight"] = cw[lo:lo + c].reshape(c, 1, W)
            if self.bias:
                want[f"{n}_conv1d.bias"] = f32("conv_bias")[lo:lo + c]
        out = torch.zeros(self.hidden, HVV, dtype=self.dtype)
        out[torch.arange(HVV), torch.arange(HVV)] = 1
        want["o_proj.weight"] = out
        dc.set_parameters(self.layer, want)

    def o(self, y):
        return y[..., :self.HV * self.V].reshape(y.shape[0], y.shape[1], self.HV, self.V)

    def run(self, case, cu):
        """o [1, T, HV, V] of the packed row, per --interface (module docstring)."""
        torch, dev = self.torch, self.device
        x = dc.layer_hidden_states(case).to(dev)
        T = x.shape[1]
        lengths = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
        cu_t = torch.tensor(cu, dtype=torch.long, device=dev)
        how = self.args.interface
        if how == "cu_seqlens":
            return self.o(self.layer(x, cu_seqlens=cu_t)[0])
        if how == "mask-and-cu":
            mask = torch.ones(1, T, dtype=torch.long, device=dev)
            return self.o(self.layer(x, attention_mask=mask, cu_seqlens=cu_t)[0])
        if how == "position_ids":
            pos = torch.cat([torch.arange(n) for n in lengths]).reshape(1, T).to(dev)
            return self.o(self.layer(x, position_ids=pos)[0])
        rows = [(lo, n) for lo, n in zip(cu, lengths) if n > 0]  # padded
        L = max(n for _, n in rows)
        batch = x.new_zeros(len(rows), L, self.hidden)
        mask = torch.zeros(len(rows), L, dtype=torch.long, device=dev)
        for i, (lo, n) in enumerate(rows):
            batch[i, :n], mask[i, :n] = x[0, lo:lo + n], 1
        y = self.o(self.layer(batch, attention_mask=mask)[0])
        out = y.new_zeros(1, T, self.HV, self.V)
        for i, (lo, n) in enumerate(rows):
            out[0, lo:lo + n] = y[i, :n]
        return out


def answer(args, inp, out_path):
    case = dc.Case(inp)
    found, facts = resolve(args)  # the import happens once per process
    if not found:
        dc.decline(out_path, facts)
        return
    if case.op != "layer":
        dc.decline(out_path, f"fla_layer.py answers layer cases, not {case.op}", facts)
        return
    if "final_state" in case.outputs or "initial_state" in case.inputs:
        dc.decline(out_path, f"cache={case.param('cache')}: a case with states; the adapter "
                             "drives FLA's layer without its Cache (the padding-free path only)",
                   facts)
        return
    import torch
    torch.set_num_threads(int(os.environ.get("DELTACHECK_PEER_THREADS", "1")))
    dev = torch.device("cuda" if facts["device"] == "cuda" else "cpu")
    T = case.inputs["qkv"].shape[1]
    cu = [int(c) for c in case.inputs["cu_seqlens"]] if "cu_seqlens" in case.inputs else [0, T]
    with torch.no_grad():
        from fla_gdr import unwritten_shows
        unwritten_shows(torch)
        o = Layer(args, case, dev).run(case, cu)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    dc.write_tensors(out_path, case, {"o": o.cpu()}, facts)


def main():
    ap = dc.parser(__doc__)
    ap.add_argument("--interface", choices=INTERFACES, default="cu_seqlens",
                    help="how the packed sequences reach the layer (docstring)")
    ap.add_argument("--device", choices=("auto", "cuda", "interpreter"), default="auto",
                    help="where the Triton kernels run (fla_gdr.py's --device)")
    ap.add_argument("--wrong", choices=("mask-overrides-cu",),
                    help="counterfactual: FLA's unpadding before PR #842 (FLA#838)")
    return dc.adapter_main(ap, resolve, answer)


if __name__ == "__main__":
    sys.exit(main())
