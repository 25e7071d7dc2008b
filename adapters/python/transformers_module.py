#!/usr/bin/env python3
"""deltacheck peer adapter: Transformers' GatedDeltaNet modules (Qwen3_5GatedDeltaNet,
Qwen3NextGatedDeltaNet: the whole linear-attention layer, projections to out_proj) on deltacheck's
layer cases, driven as the model drives them, through the external backend:

    build/deltacheck run --case 'layer(layout=packed[37,50],bias=0,state=none,cache=none)' \
        --backend external --serve "$VENV/bin/python adapters/python/transformers_module.py \
        --model qwen3_5 --interface flash"

What runs (`--model`): transformers.models.<model>.modeling_<model>.<Model>GatedDeltaNet, built
from a one-layer config (layer_types ["linear_attention"]) and called on hidden states
[B, T, hidden]. The kernel packages (fla, causal_conv1d) are made unimportable in this process, as
transformers_gdr.py does, so the module's hub-kernel dispatchers fall back to the modeling file's
plain PyTorch functions (torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule,
causal_conv1d_fn, causal_conv1d_update): what runs on a machine without those packages.

The case's layer parameters (ops/layer, reference/linear_attention_layer.h) become the module's
parameters exactly; each conversion:
  - hidden_size = D + HV V + 2 HV (D = 2 H K + HV V), and the hidden states of token t are the
    case's projections side by side: [qkv (D) | z (HV V) | b (HV) | a (HV)]. The in_proj weights
    are 0/1 selection matrices that pick them out in the module's own order, so every projection
    returns the case's values bit for bit (x * 1 plus zeros, in any dtype):
      qwen3_5     in_proj_qkv <- qkv, in_proj_z <- z, in_proj_b <- b, in_proj_a <- a;
      qwen3_next  in_proj_qkvz grouped per key head g (r = HV / H value heads each):
                  [q_g (K) | k_g (K) | v of heads g r .. g r + r - 1 (r V) | z of those heads],
                  in_proj_ba per key head g: [b of heads g r .. (r) | a of those heads (r)];
                  fix_query_key_value_ordering undoes exactly that grouping.
  - conv1d.weight [D, 1, W] <- conv_weight [D, W] (weight[d, W-1] multiplies the current token in
    both: PyTorch's conv1d with padding W-1, cut to T, is reference/causal_conv1d.h's sum).
  - conv bias: both modules are built with Conv1d(bias=False). A case with bias=1 (the layer op's
    default) has a conv bias the module lacks: declined (unsupported), never run without it.
  - A_log [HV] <- A_log, dt_bias [HV] <- dt_bias: the module's gates are the reference's,
    g = -exp(A_log) softplus(a + dt_bias) (fp32), beta = sigmoid(b).
  - norm.weight [V] <- norm_weight (RMSNormGated uses the weight as is, as the reference does),
    eps = config.rms_norm_eps = 1e-6, the reference's norm_eps.
  - out_proj.weight [hidden, HV V]: identity on its first HV V rows, zeros below; o is the first
    HV V channels of the module's output, i.e. the gated norm's output unchanged.
  - q/k/v split and heads: q | k | v channels, head-major (channel h K + i), as the case's qkv;
    GVA inside torch_chunk_gated_delta_rule (repeat_interleave: value head j reads q/k head
    j // r), the case's blocked convention. scale K^-0.5, L2 norm of q and k in the rule.
  - dtypes: the projections are in the activation dtype (the case's qkv, z, a, b); conv1d, A_log,
    dt_bias and norm.weight stay fp32, the case's weights (a module cast to bf16 would round them,
    which no case describes). The modules take it: causal_conv1d_fn computes in the weight's dtype
    and returns the activation dtype; the gates and the norm compute in fp32.
  - The module must have exactly these parameters (names and shapes): any other is an adapter
    error naming it, so a Transformers change cannot leave a random weight in place silently.
How the model drives the module (`--interface`; the decoder layer passes the module
hidden_states, the cache, attention_mask = create_recurrent_attention_mask(...) computed from the
packed position_ids, and its **kwargs; position_ids themselves stop at the decoder layer):
  position_ids  only the mask computed from position_ids restarting per sequence (the collator's
                default, DataCollatorWithFlattening()): the module is told nothing else;
  flash         also cu_seq_lens_q, cu_seq_lens_k (int32) and max_length_q, max_length_k (ints),
                as DataCollatorWithFlattening(return_flash_attn_kwargs=True) passes them;
  seq_idx       also seq_idx [1, T] (int32), as DataCollatorWithFlattening(return_seq_idx=True).
States and cache modes:
  - cache=none (no state in or out): one packed row [1, T, hidden], no cache: the padding-free
    training path, where a leak shows.
  - cache modes with states (prefill, decode, chunked and dynamic calls): a DynamicCache(config)
    holds one conv and one recurrent state per batch row; the case's states go in through its own
    update_conv_state / update_recurrent_state (the conv state as [N, D, W] with a zero column in
    front: the cache keeps W inputs, the convolution reads the last W - 1) and come back from it
    (final_conv_state = the cached conv state's last W - 1 columns). Sequences run as N rows of L
    tokens when all N have the same length L (decode: L = 1, the module's causal_conv1d_update and
    torch_recurrent_gated_delta_rule path; one sequence: N = 1). Sequences of different lengths
    with states are declined: one state per batch row, and padding a row would run the padding
    tokens through the states.
Outputs: o (the activation dtype), final_state and final_conv_state (fp32) as the case asks.
Kernel packages (`--kernels`): `none` (the default) hides fla and causal_conv1d, as above;
`fla` leaves flash-linear-attention importable (causal_conv1d stays hidden: it is not installed
in the peers venv and needs a GPU), so the module's rule dispatchers hand the call to FLA's
chunk_gated_delta_rule / fused_recurrent_gated_delta_rule, which run on CPU tensors under
Triton's interpreter (triton_cpu.py, set up before Transformers imports FLA; on a GPU, cuda),
while the convolution stays the modeling file's causal_conv1d_fn fallback: the module as it runs
where FLA is installed and causal-conv1d is not.
Counterfactuals, for showing that the pinned findings can change (not pinned themselves):
  --split-sequences  calls the module once per packed sequence (what a module that honoured the
                     boundaries would return): the packed leak becomes pass;
  --wrong ab-swapped a and b exchanged in the in_proj mapping: even one sequence fails.
Declined (unsupported): ops other than layer, bias=1 (above), states on sequences of different
lengths (above).
"""
import importlib
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402
from transformers_gdr import kernel_packages  # noqa: E402

MODELS = {"qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5GatedDeltaNet"),
          "qwen3_next": ("Qwen3NextConfig", "Qwen3NextGatedDeltaNet")}
INTERFACES = ("position_ids", "flash", "seq_idx")


def modeling_file(model):
    """The modeling file's path, found without importing Transformers (for --describe)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "models", model,
                        f"modeling_{model}.py")
    return path if os.path.exists(path) else None


def describe_facts(args):
    """(True, facts) or (False, reason), from package metadata and the modeling file's text only
    (the peer suite calls --describe once per peer; importing torch would cost seconds)."""
    versions = {n: dc.package_version(n) for n in ("transformers", "torch")}
    if not all(versions.values()):
        return False, "transformers/torch not installed"
    versions.update(kernel_packages(hide=False))
    if args.kernels == "fla" and "flash-linear-attention" not in versions:
        return False, "--kernels fla: flash-linear-attention is not installed"
    path = modeling_file(args.model)
    cls = MODELS[args.model][1]
    if path is None:
        return False, f"transformers {versions['transformers']} has no modeling_{args.model}.py"
    with open(path, encoding="utf-8") as f:
        if f"class {cls}(" not in f.read():
            return False, f"transformers {versions['transformers']}: no {cls} in {path}"
    how = {"position_ids": "the recurrent mask from packed position_ids only",
           "flash": "cu_seq_lens_q/k and max_length_q/k (DataCollatorWithFlattening("
                    "return_flash_attn_kwargs=True))",
           "seq_idx": "seq_idx (DataCollatorWithFlattening(return_seq_idx=True))"}[args.interface]
    if args.kernels == "fla":
        how += ("; flash-linear-attention importable (its Triton rule kernels; causal_conv1d "
                "hidden)")
    extra = (" [counterfactual: one call per sequence]" if args.split_sequences else "") + (
        f" [deliberately wrong: {args.wrong}]" if args.wrong else "")
    kernels = ("the rule through FLA's kernels, the conv's PyTorch fallback"
               if args.kernels == "fla" else "plain PyTorch fallbacks: kernel packages hidden")
    facts = {
        "implementation": f"transformers.models.{args.model}.modeling_{args.model}.{cls} "
                          f"(the module, {kernels}), packed rows with {how}{extra}",
        "interface": args.interface,
        "versions": versions,
    }
    if args.kernels == "fla":
        facts.update(fla_device(args))
    return True, facts


def fla_device(args):
    """--kernels fla: where FLA's kernels run ({"device": ...}; the interpreter set up here, before
    Transformers imports FLA), after hiding causal_conv1d only."""
    import torch
    from fla_gdr import kernel_device
    sys.modules.setdefault("causal_conv1d", None)
    where, problem = kernel_device(torch, args.device, "FLA's gated delta rule kernels")
    if where is None:
        dc.fail(problem)
    return where


class Module:
    """The module built for one case's shapes, its weights set from the case."""

    def __init__(self, args, case):
        import torch
        if args.kernels == "none":
            kernel_packages(hide=True)
        tf = importlib.import_module("transformers")
        modeling = importlib.import_module(f"transformers.models.{args.model}."
                                           f"modeling_{args.model}")
        config_name, cls_name = MODELS[args.model]
        self.torch, self.modeling, self.args = torch, modeling, args
        p = case.params
        H, HV, K, V, W = (int(p[n]) for n in ("H", "HV", "K", "V", "W"))
        self.H, self.HV, self.K, self.V, self.W = H, HV, K, V, W
        self.D = 2 * H * K + HV * V
        self.hidden = self.D + HV * V + 2 * HV
        self.config = getattr(tf, config_name)(
            hidden_size=self.hidden, linear_num_value_heads=HV, linear_num_key_heads=H,
            linear_key_head_dim=K, linear_value_head_dim=V, linear_conv_kernel_dim=W,
            hidden_act="silu", rms_norm_eps=1e-6, num_hidden_layers=1,
            layer_types=["linear_attention"], num_attention_heads=1, num_key_value_heads=1,
            head_dim=8)
        self.module = getattr(modeling, cls_name)(self.config, 0).eval()
        self.dtype = dc.torch_input(case, "qkv").dtype
        self.set_weights(case)

    def selection(self, rows):
        """A [len(rows), hidden] 0/1 matrix whose row i picks hidden channel rows[i]."""
        torch = self.torch
        w = torch.zeros(len(rows), self.hidden, dtype=self.dtype)
        w[torch.arange(len(rows)), torch.tensor(rows)] = 1
        return w

    def in_proj(self):
        """{parameter name: selection rows} of the in_proj weights (the module docstring)."""
        H, HV, K, V, D = self.H, self.HV, self.K, self.V, self.D
        z0, b0, a0 = D, D + HV * V, D + HV * V + HV
        if self.args.wrong == "ab-swapped":
            a0, b0 = b0, a0
        if self.args.model == "qwen3_5":
            return {"in_proj_qkv.weight": list(range(D)),
                    "in_proj_z.weight": list(range(z0, z0 + HV * V)),
                    "in_proj_b.weight": list(range(b0, b0 + HV)),
                    "in_proj_a.weight": list(range(a0, a0 + HV))}
        r = HV // H
        qkvz, ba = [], []
        for g in range(H):
            qkvz += list(range(g * K, (g + 1) * K))  # q of key head g
            qkvz += list(range(H * K + g * K, H * K + (g + 1) * K))  # k
            qkvz += list(range(2 * H * K + g * r * V, 2 * H * K + (g + 1) * r * V))  # v
            qkvz += list(range(z0 + g * r * V, z0 + (g + 1) * r * V))  # z
            ba += list(range(b0 + g * r, b0 + (g + 1) * r))
            ba += list(range(a0 + g * r, a0 + (g + 1) * r))
        return {"in_proj_qkvz.weight": qkvz, "in_proj_ba.weight": ba}

    def set_weights(self, case):
        torch = self.torch
        HVV = self.HV * self.V
        out = torch.zeros(self.hidden, HVV, dtype=self.dtype)
        out[torch.arange(HVV), torch.arange(HVV)] = 1
        want = {name: self.selection(rows) for name, rows in self.in_proj().items()}
        f32 = lambda n: dc.torch_input(case, n).float()  # noqa: E731
        want.update({"conv1d.weight": f32("conv_weight").reshape(self.D, 1, self.W),
                     "A_log": f32("A_log"), "dt_bias": f32("dt_bias"),
                     "norm.weight": f32("norm_weight"), "out_proj.weight": out})
        dc.set_parameters(self.module, want)

    def hidden_states(self, case):
        """[1, T, hidden]: qkv | z | b | a of each token (the in_proj weights pick them out)."""
        return dc.layer_hidden_states(case)

    def kwargs(self, cu):
        """The module's keyword arguments for one packed row, per --interface (docstring)."""
        torch = self.torch
        T = cu[-1]
        lengths = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
        position_ids = torch.cat([torch.arange(n) for n in lengths]).reshape(1, T)
        embeds = torch.zeros(1, T, 1, dtype=self.dtype)
        mask = self.modeling.create_recurrent_attention_mask(
            config=self.config, inputs_embeds=embeds, attention_mask=None, cache=None,
            position_ids=position_ids)
        kw = {"attention_mask": mask}
        if self.args.interface == "flash":
            cu_t = torch.tensor(cu, dtype=torch.int32)
            kw.update(cu_seq_lens_q=cu_t, cu_seq_lens_k=cu_t, max_length_q=max(lengths),
                      max_length_k=max(lengths))
        elif self.args.interface == "seq_idx":
            kw["seq_idx"] = torch.cat([torch.full((n,), i, dtype=torch.int32)
                                       for i, n in enumerate(lengths)]).reshape(1, T)
        return kw

    def o(self, y):
        return y[..., :self.HV * self.V].reshape(y.shape[0], y.shape[1], self.HV, self.V)

    def packed(self, case, cu):
        """o [1, T, HV, V] of one packed row, no cache (--split-sequences: a call per sequence)."""
        x = self.hidden_states(case)
        if not self.args.split_sequences:
            return self.o(self.module(x, cache=None, **self.kwargs(cu)))
        parts = [self.o(self.module(x[:, cu[i]:cu[i + 1]], cache=None,
                                    **self.kwargs([0, cu[i + 1] - cu[i]])))
                 for i in range(len(cu) - 1) if cu[i + 1] > cu[i]]
        return self.torch.cat(parts, dim=1)

    def with_states(self, case, cu):
        """{o, final_state, final_conv_state}: N rows of L tokens through a DynamicCache holding
        the case's states, or a string (why it is declined)."""
        torch = self.torch
        lengths = sorted({cu[i + 1] - cu[i] for i in range(len(cu) - 1)})
        if len(lengths) != 1 or lengths[0] == 0:
            return ("sequences of different lengths with states: the module's cache holds one "
                    "conv and one recurrent state per batch row, and padding a row would run the "
                    "padding through the states")
        N, L = len(cu) - 1, lengths[0]
        x = self.hidden_states(case).reshape(N, L, self.hidden)
        cache = importlib.import_module("transformers").DynamicCache(config=self.config)
        if "initial_conv_state" in case.inputs:
            c0 = dc.torch_input(case, "initial_conv_state").to(self.dtype)
            c0 = torch.cat([c0.new_zeros(N, self.D, 1), c0], dim=-1)  # the cache keeps W inputs
            cache.update_conv_state(c0, 0, conv_kernel_size=self.W)
        if "initial_state" in case.inputs:
            cache.update_recurrent_state(dc.torch_input(case, "initial_state").float(), 0)
        y = self.module(x, cache=cache, attention_mask=None)
        layer = cache.layers[0]
        return {"o": self.o(y).reshape(1, N * L, self.HV, self.V),
                "final_state": layer.recurrent_states[0],
                "final_conv_state": layer.conv_states[0][..., -(self.W - 1):]}


def run_layer(args, case):
    """The case's outputs, or a string: the reason to decline."""
    if case.param("bias") == "1":
        return ("bias=1: the case has a conv bias, and the module's conv1d is built without one "
                "(nn.Conv1d(bias=False)); run bias=0 cases")
    m = Module(args, case)
    T = case.inputs["qkv"].shape[1]
    cu = [int(c) for c in case.inputs["cu_seqlens"]] if "cu_seqlens" in case.inputs else [0, T]
    if "final_state" not in case.outputs:  # cache=none: the padding-free path
        return {"o": m.packed(case, cu)}
    return m.with_states(case, cu)


def answer(args, inp, out_path):
    case = dc.Case(inp)
    found, facts = describe_facts(args)
    if not found:
        dc.decline(out_path, facts)
        return
    if case.op != "layer":
        dc.decline(out_path, f"transformers_module.py answers layer cases, not {case.op}", facts)
        return
    import torch
    torch.set_num_threads(int(os.environ.get("DELTACHECK_PEER_THREADS", "1")))
    with torch.no_grad():
        values = run_layer(args, case)
    if isinstance(values, str):
        dc.decline(out_path, values, facts)
        return
    dc.write_tensors(out_path, case, values, facts)


def main():
    ap = dc.parser(__doc__)
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen3_5")
    ap.add_argument("--interface", choices=INTERFACES, default="flash",
                    help="what the packed row carries besides the hidden states (docstring)")
    ap.add_argument("--kernels", choices=("none", "fla"), default="none",
                    help="none: kernel packages hidden; fla: FLA's rule kernels (docstring)")
    ap.add_argument("--device", choices=("auto", "cuda", "interpreter"), default="auto",
                    help="--kernels fla: where FLA's kernels run (fla_gdr.py's --device)")
    ap.add_argument("--split-sequences", action="store_true",
                    help="counterfactual: one module call per packed sequence")
    ap.add_argument("--wrong", choices=["ab-swapped"],
                    help="a deliberately wrong weight mapping (shows the mapping is checked)")
    return dc.adapter_main(ap, describe_facts, answer)


if __name__ == "__main__":
    sys.exit(main())
