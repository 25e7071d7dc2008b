#!/usr/bin/env python3
"""deltacheck peer adapter: the plain-PyTorch gated delta rule of Transformers' Qwen3-Next /
Qwen3.5 modeling code, run on deltacheck's gdr cases through the external backend:

    build/deltacheck run --case 'gdr(layout=packed[63,0,65],...)' --backend external \
        --cmd "$VENV/bin/python adapters/python/transformers_gdr.py --fn chunk {in} {out}"

What runs (`--fn`, `--model`):
  chunk      modeling_<model>.torch_chunk_gated_delta_rule      (the model's prefill path)
  recurrent  modeling_<model>.torch_recurrent_gated_delta_rule  (the model's decode path)
  model      qwen3_next (default) or qwen3_5 (where the pinned Transformers has it)
Transformers wraps both in a hub-kernel dispatcher (`use_kernel_func_from_hub_with_fallback`)
that hands the call to flash-linear-attention's Triton kernels whenever `fla` is importable. This
adapter makes the kernel packages (fla, causal_conv1d) unimportable in its own process, calls the
plain function object underneath the dispatcher (inspect.unwrap), checks that it is defined in
the modeling file, and records in {out} what ran (attribute "implementation"), what the
dispatcher would call ("dispatch_would_call") and the versions (of the kernel packages too).
--dispatch leaves the packages visible and calls the module attribute, dispatcher included: what
the model itself does on this machine.

How the model calls it, and so how this adapter calls it:
  - Layout [B, T, H, K] / [B, T, HV, V], g and beta [B, T, HV]: the layout of docs/semantics.md (the
    function transposes to [B, H, T, D] inside). No conversion.
  - g is log-space decay (fp32), beta in (0, 1) in the activation dtype: as docs/semantics.md.
  - GVA: repeat_interleave of q/k heads, i.e. value head i uses q/k head i // (HV / H) (blocked,
    as docs/semantics.md and FLA). No conversion. (Before Transformers 5 the model repeated the
    heads before calling; for such a version the adapter repeats them the same way.)
  - scale: fixed K^-0.5 inside (no argument), the default of docs/semantics.md. l2: the case's l2
    parameter is passed as
    use_qk_l2norm_in_kernel (rsqrt(sum x^2 + 1e-6), as docs/semantics.md).
  - Packed layouts (B = 1 with cu_seqlens): the model passes `cu_seqlens=` (from the
    `cu_seq_lens_q` kwarg of padding-free training); the adapter passes it the same way when the
    function's signature takes it, explicitly or through **kwargs. The function then decides what
    to do with it; a function that ignores it carries state from one sequence into the next and
    deltacheck reports the leak.
  - States: the model holds one recurrent state per batch row, [B, HV, K, V]. For a batch
    layout that is initial_state as given. A packed row gets one state: that of its first
    sequence (initial_state[:1]), the only one a per-row cache can hold. When the function returns
    one final state for the whole row, final_state[i] is the state the row's call carries at the
    end of sequence i (the call repeated on the prefix up to cu_seqlens[i+1]); a function that
    returns [N, HV, K, V] per-sequence states is taken at its word.
  - Decode calls (cache=decode: one token per sequence) are how the model decodes: a batch of N
    rows of one token, [N, 1, ...], with the N states. The harness drives cache=chunked and
    cache=dynamic as prefill and decode calls.
  - Gradients (gdr_grad cases, docs/gradients.md): torch.autograd.grad of the same calls (the
    prefix calls of the per-sequence final states included) with the case's do and dht
    (dc_protocol.autograd_gdr_grad); tokens past cu_seqlens[-1] are cut off before the call, as
    the model feeds none.
  - Not supported (declined, verdict unsupported): cache=pool / spec (states addressed through
    slot indices: the model has no such interface), ops other than gdr.
Outputs are taken in the dtype the function returns (o in the input dtype, states fp32) and
written as deltacheck asks (dc_protocol.encode; fp32 -> bf16 rounds to nearest even).
"""
import importlib
import inspect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402

FUNCTIONS = {"chunk": "torch_chunk_gated_delta_rule",
             "recurrent": "torch_recurrent_gated_delta_rule"}


def closure_vars(fn):
    """The free variables a wrapper closes over (the dispatcher keeps its choice there)."""
    cells = getattr(fn, "__closure__", None) or ()
    return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, cells)}


def qualified(fn):
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


# Kernel packages the modeling code's dispatchers pick up when importable, module -> distribution:
# flash-linear-attention for the rule, causal-conv1d for the short convolution.
KERNEL_PACKAGES = {"fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d"}


def kernel_packages(hide):
    """{distribution: version} of the kernel packages installed. With `hide`, makes them
    unimportable in this process (None in sys.modules), so no dispatcher can hand a call to them,
    and importing the modeling file does not spend seconds importing FLA's Triton kernels."""
    installed = {}
    for module, dist in KERNEL_PACKAGES.items():
        version = dc.package_version(dist)
        if version:
            installed[dist] = version
        if hide:
            sys.modules.setdefault(module, None)
    return installed


def resolve(model, which, dispatch):
    """(function to call, facts) or (None, reason)."""
    installed = kernel_packages(hide=not dispatch)
    hidden = {} if dispatch else installed
    try:
        import torch
        import transformers
    except Exception as e:  # not installed (peers-setup.sh could not install it)
        return None, f"transformers/torch not importable: {type(e).__name__}: {e}"
    module_name = f"transformers.models.{model}.modeling_{model}"
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        return None, (f"transformers {transformers.__version__} has no {module_name} "
                      f"({type(e).__name__}: {e})")
    name = FUNCTIONS[which]
    attr = getattr(module, name, None)
    if attr is None:
        return None, f"transformers {transformers.__version__}: {module_name} has no {name}"
    plain = inspect.unwrap(attr)
    where = getattr(getattr(plain, "__code__", None), "co_filename", "")
    if not where.endswith(f"modeling_{model}.py"):
        dc.fail(f"{name} unwraps to {qualified(plain)} from {where}, not the modeling file")
    wrapped = attr is not plain
    target = closure_vars(attr).get("implementation", attr) if wrapped else attr
    if wrapped and hidden and target is plain:
        would = ("the plain function (kernel packages hidden here: " +
                 ", ".join(f"{d} {v}" for d, v in sorted(hidden.items())) +
                 " installed; --dispatch lets the dispatcher see them)")
    else:
        would = qualified(target) if wrapped else "no dispatcher"
    params = inspect.signature(plain).parameters
    takes_cu = "cu_seqlens" in params or any(
        p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    try:  # before 5.x the model repeated q/k heads itself before calling (GVA)
        gva = "repeat_interleave" in inspect.getsource(plain)
    except (OSError, TypeError):
        gva = True
    facts = {
        "gva": ("inside the function" if gva else
                "q/k heads repeated by the adapter, as the model did"),
        "implementation": qualified(attr if dispatch else plain) + (
            " (module attribute: the hub-kernel dispatcher, as the model calls it)" if dispatch
            else " (the plain PyTorch function, unwrapped from the hub-kernel dispatcher)"
            if wrapped else " (plain PyTorch function)"),
        "dispatch_would_call": would,
        "cu_seqlens": ("explicit parameter" if "cu_seqlens" in params else
                       "accepted through **kwargs" if takes_cu else "not accepted: not passed"),
        "versions": dict({"transformers": transformers.__version__, "torch": torch.__version__},
                         **installed),
    }
    return ((attr if dispatch else plain), takes_cu, gva), facts


def model_forward(fn, takes_cu, gva):
    """The modeling function called as the model calls it (the module docstring), as a forward
    with FLA's keyword convention (dc_protocol.autograd_gdr_grad differentiates it): one call per
    batch layout; a packed row gets one call with cu_seqlens and one state, and per sequence the
    state the row carries at its end (the call repeated on the prefix)."""
    import torch

    def call(q, k, v, g, beta, state, l2, cu=None, final=True):
        extra = {"cu_seqlens": cu} if cu is not None and takes_cu else {}
        return fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=final,
                  use_qk_l2norm_in_kernel=l2, **extra)

    def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True,
                use_qk_l2norm_in_kernel=True, cu_seqlens=None):
        if not gva and v.shape[2] != q.shape[2]:
            q, k = (x.repeat_interleave(v.shape[2] // q.shape[2], dim=2) for x in (q, k))
        l2 = use_qk_l2norm_in_kernel
        if cu_seqlens is None:  # batch / single layouts: one sequence per row
            return call(q, k, v, g, beta, initial_state, l2, final=output_final_state)
        cu = [int(c) for c in cu_seqlens]
        cu_t = torch.tensor(cu, dtype=torch.long)
        row_state = initial_state[:1] if initial_state is not None else None
        o, s = call(q, k, v, g, beta, row_state, l2, cu=cu_t, final=output_final_state)
        n = len(cu) - 1
        if not output_final_state or (s is not None and s.shape[0] == n):
            return o, s
        # One state for the whole row: per sequence, the state the row carries at its end.
        HV, K, V = v.shape[2], q.shape[3], v.shape[3]
        finals = []
        for i in range(n):
            end = cu[i + 1]
            if end == 0:
                state = row_state[0] if row_state is not None else torch.zeros(HV, K, V)
            else:
                sl = lambda x: x[:, :end]  # noqa: E731
                _, st = call(sl(q), sl(k), sl(v), sl(g), sl(beta), row_state, l2,
                             cu=torch.tensor([c for c in cu if c <= end], dtype=torch.long))
                state = st[0]
            finals.append(state.float())
        return o, torch.stack(finals)

    return forward


def run_gdr(case, forward):
    """Outputs {o, final_state}, or a string: the reason to decline."""
    cache = case.param("cache")
    if cache in ("pool", "spec", "ckpt", "accept", "tree"):
        return ("cache=" + cache + ": states addressed through slot indices; the model's "
                "function takes one state per batch row and has no slot interface")
    x = {n: dc.torch_input(case, n) for n in dc.RULE_INPUTS}
    s0 = dc.torch_input(case, "initial_state") if "initial_state" in case.inputs else None
    want_final = "final_state" in case.outputs
    l2 = case.param("l2", "1") == "1"
    T, HV, V = x["q"].shape[1], x["v"].shape[2], x["v"].shape[3]
    cu = case.inputs.get("cu_seqlens")
    n = len(cu) - 1 if cu is not None else 0
    if cache == "decode" and cu is not None and all(cu[i + 1] - cu[i] == 1 for i in range(n)):
        # The model decodes a batch of N rows of one token each, with the N states.
        rows = {name: t.reshape(n, 1, *t.shape[2:]) for name, t in x.items()}
        o, s = forward(**rows, initial_state=s0, output_final_state=want_final,
                       use_qk_l2norm_in_kernel=l2)
        return {"o": o.reshape(1, T, HV, V), "final_state": s}
    o, s = forward(**x, initial_state=s0, output_final_state=want_final,
                   use_qk_l2norm_in_kernel=l2, cu_seqlens=cu)
    return {"o": o, "final_state": s}


def main():
    ap = dc.parser(__doc__)
    ap.add_argument("--fn", choices=sorted(FUNCTIONS), default="chunk",
                    help="chunk: torch_chunk_gated_delta_rule | recurrent: "
                         "torch_recurrent_gated_delta_rule")
    ap.add_argument("--model", default="qwen3_next", choices=["qwen3_next", "qwen3_5"],
                    help="the modeling file the functions come from")
    ap.add_argument("--dispatch", action="store_true",
                    help="call the module attribute (hub-kernel dispatcher included) instead "
                         "of the plain function")
    return dc.adapter_main(ap, lambda a: resolve(a.model, a.fn, a.dispatch), answer)


def answer(args, inp, out_path):
    case = dc.Case(inp)
    if case.op not in ("gdr", "gdr_grad"):
        dc.decline(out_path, f"transformers_gdr.py implements the ops gdr and gdr_grad only, "
                             f"not {case.op}")
        return
    resolved, facts = resolve(args.model, args.fn, args.dispatch)
    if resolved is None:
        dc.decline(out_path, facts)
        return
    import torch
    torch.set_num_threads(int(os.environ.get("DELTACHECK_PEER_THREADS", "1")))
    forward = model_forward(*resolved)
    if case.op == "gdr_grad":  # tokens past cu_seqlens[-1] are cut off: the model feeds none
        values = dc.autograd_gdr_grad(forward)(case)
    else:
        with torch.no_grad():
            values = run_gdr(case, forward)
    if isinstance(values, str):
        dc.decline(out_path, values, facts)
        return
    dc.write_tensors(out_path, case, values, facts)


if __name__ == "__main__":
    sys.exit(main())
