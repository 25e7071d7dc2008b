#!/usr/bin/env python3
"""deltacheck peer adapter: flash-linear-attention's (FLA) gated delta rule on deltacheck's gdr
cases, through the external backend:

    build/deltacheck run --case 'gdr(layout=packed[63,0,65],...)' --backend external \
        --cmd "$VENV/bin/python adapters/python/fla_gdr.py --fn naive-chunk {in} {out}"

What runs (`--fn`), each called directly as a function object (never through a dispatcher):
  naive-recurrent  fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule  (CPU)
  naive-chunk      fla.ops.gated_delta_rule.naive.naive_chunk_gated_delta_rule      (CPU)
  chunk            fla.ops.gated_delta_rule.chunk_gated_delta_rule            (Triton)
  fused-recurrent  fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule  (Triton)
Where the Triton kernels run (`--device`): `cuda` on a GPU (tl.dot on fp32 operands is TF32
there: run deltacheck with `--matmul-precision tf32`); `interpreter` on CPU tensors under
Triton's interpreter, helped by triton_cpu.py (autotuner, loop variables, bf16 arithmetic:
docs/peers.md); `auto` (the default) takes cuda when torch sees a GPU, else the interpreter.
{out} records the function, its file, the versions, the device and, under the interpreter, what
is emulated (attributes "implementation", "versions", "device", "emulation"); `--describe` prints
the same facts, with "matmul_precision" for deltacheck's `--matmul-precision`.

Conventions, and what the adapter converts (docs/semantics.md is the contract):
  Triton kernels: the conventions of docs/semantics.md are FLA's own. q, k [B,T,H,K],
    v [B,T,HV,V], g and beta [B,T,HV], GVA value head i -> q/k head i // (HV/H), scale K^-0.5
    (scale=None),
    use_qk_l2norm_in_kernel = the case's l2, cu_seqlens (int64) for packed layouts,
    initial_state / final_state [N,HV,K,V] fp32. Inputs go to the device as they are; no
    conversion. torch.empty is NaN-filled while they run (torch's fill_uninitialized_memory), so
    an output element a kernel never writes stays NaN and fails the case.
  Naive references: plain PyTorch in fp32, one batch row per sequence, none of the kernel
    features, so the adapter supplies them, outside the function:
    - varlen: no cu_seqlens argument; each packed sequence is called alone (B = 1) with its own
      initial state, as FLA's own tests compare the varlen kernels with the naive functions;
      zero-length sequences are not called (their final state is their initial state);
    - GVA: v has as many heads as q/k; q and k are repeat_interleave'd to HV heads (blocked);
    - L2 norm: none inside; with l2=1 the adapter normalizes q and k in fp32,
      x / sqrt(sum x^2 + 1e-6) (docs/semantics.md's and FLA's l2norm);
    - argument order differs between the two (naive_recurrent: q, k, v, beta, g); passed by name;
    - outputs come back in fp32 and are rounded once to the case's dtype when written.
  Gradients (gdr_grad cases, docs/gradients.md): torch.autograd.grad of the same call with the
    case's do and dht (dc_protocol.autograd_gdr_grad), through the adapter's L2 norm, GVA and
    per-sequence calls for the naive functions; tokens past cu_seqlens[-1] are cut off before
    them. The Triton chunk kernel runs its own backward on all T tokens with cu_seqlens as given
    (unwritten gradients stay NaN). fused-recurrent has no backward in FLA (it raises
    NotImplementedError): declined with FLA's reason.
  --wrong carry-state (the peer fla-wrong-grad-carry): a deliberate bug in the adapter's
    wrapper of the naive functions: each packed sequence starts from the state the previous one
    ended with.
  Not supported (declined): cache=pool / spec (states addressed through slot indices: none of
  these functions takes slots), ops other than gdr and gdr_grad.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402

FUNCTIONS = {
    "naive-recurrent": ("fla.ops.gated_delta_rule.naive", "naive_recurrent_gated_delta_rule"),
    "naive-chunk": ("fla.ops.gated_delta_rule.naive", "naive_chunk_gated_delta_rule"),
    "chunk": ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
    "fused-recurrent": ("fla.ops.gated_delta_rule", "fused_recurrent_gated_delta_rule"),
}
TRITON = ("chunk", "fused-recurrent")


def kernel_device(torch, device, what, environment=None):
    """Where a Triton kernel runs: ({"device": ..., ...}, None), or (None, why not). `device` is
    cuda, interpreter or auto (cuda when torch sees a GPU); the interpreter is set up here
    (triton_cpu.enable, after setting `environment`), before the kernel package is imported."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "interpreter"
    if device == "cuda" and not torch.cuda.is_available():
        return None, (f"no GPU: {what} is a Triton kernel, --device cuda, and "
                      f"torch.cuda.is_available() is False (torch {torch.__version__}, built for "
                      f"CUDA {torch.version.cuda})")
    if device == "cuda":
        return {"device": "cuda", "gpu": torch.cuda.get_device_name(),
                "matmul_precision": "tf32"}, None
    import triton_cpu
    os.environ.update(environment or {})
    try:
        helped = triton_cpu.enable()
    except Exception as e:
        return None, f"Triton's interpreter could not be set up: {type(e).__name__}: {e}"
    return {"device": "interpreter", "emulation": helped["emulation"],
            "matmul_precision": "fp32"}, None


def fla_versions(torch):
    """{distribution: version} of torch, FLA and Triton, as installed."""
    versions = {"torch": torch.__version__}
    for dist in ("flash-linear-attention", "fla-core", "triton"):
        if dc.package_version(dist):
            versions[dist] = dc.package_version(dist)
    return versions


def resolve(which, device="auto"):
    """(function, facts) or (None, reason). For a Triton kernel, `device` is cuda, interpreter or
    auto; the interpreter is set up (triton_cpu.enable) before FLA is imported."""
    import importlib
    import inspect
    import warnings
    try:
        import torch
    except Exception as e:
        return None, f"torch not importable: {type(e).__name__}: {e}"
    versions = fla_versions(torch)
    where = {}
    if which in TRITON:
        where, problem = kernel_device(torch, device, f"FLA's {FUNCTIONS[which][1]}")
        if where is None:
            return None, problem
    module_name, name = FUNCTIONS[which]
    try:
        with warnings.catch_warnings():  # FLA warns on import when Triton has no GPU
            warnings.simplefilter("ignore")
            module = importlib.import_module(module_name)
    except Exception as e:
        return None, (f"{module_name} not importable (flash-linear-attention "
                      f"{versions.get('flash-linear-attention', 'not installed')}): "
                      f"{type(e).__name__}: {e}")
    fn = getattr(module, name, None)
    if fn is None:
        return None, f"{module_name} has no {name}"
    fn = inspect.unwrap(fn)
    facts = {"implementation": f"{fn.__module__}.{fn.__qualname__} "
                               f"({inspect.getsourcefile(fn)})",
             "versions": versions, **where}
    return fn, facts


def l2norm(x):
    return x / (x * x).sum(-1, keepdim=True).add(1e-6).sqrt()


def naive_forward(fn, carry_state=False, dtype=None):
    """A naive function as a forward with the kernels' keyword convention (dc_protocol's
    autograd_gdr_grad calls it so): the adapter supplies L2 norm, GVA and varlen around it (the
    module docstring), all differentiable. `carry_state` is the deliberate bug of the peer
    fla-wrong-grad-carry: each packed sequence after the first starts from the state the previous
    one ended with, not from its own initial state. `dtype`: the adapter's arithmetic (fp32, as
    FLA's functions; grad_precision.py passes float64 with functions rewritten to it)."""
    import torch
    dtype = dtype or torch.float32

    def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True,
                use_qk_l2norm_in_kernel=True, cu_seqlens=None):
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        q, k = q.to(dtype), k.to(dtype)
        if use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)
        if HV != H:  # GVA: value head i uses q/k head i // (HV / H)
            q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
        if cu_seqlens is not None:
            cu = [int(c) for c in cu_seqlens]
            seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
        else:
            seqs = [(b, 0, T) for b in range(B)]
        rows = [[] for _ in range(B)]  # the pieces of o, per batch row
        finals = []
        for i, (b, lo, hi) in enumerate(seqs):
            state = initial_state[i:i + 1].to(dtype) if initial_state is not None else None
            if carry_state and finals:
                state = finals[-1][None]
            if hi == lo:
                finals.append(state[0] if state is not None else
                              torch.zeros(HV, K, V, dtype=dtype))
                continue
            sl = lambda x: x[b:b + 1, lo:hi]  # noqa: E731
            oi, si = fn(q=sl(q), k=sl(k), v=sl(v), g=sl(g), beta=sl(beta), scale=K ** -0.5,
                        initial_state=state, output_final_state=True)
            rows[b].append(oi[0].to(dtype))
            finals.append(si[0].to(dtype))
        o = []
        for pieces in rows:  # tokens of no sequence (a tail) give zeros
            done = sum(p.shape[0] for p in pieces)
            o.append(torch.cat(pieces + [torch.zeros(T - done, HV, V, dtype=dtype)]))
        return torch.stack(o), torch.stack(finals)

    return forward


def run_naive(case, forward):
    o, s = forward(**{n: dc.torch_input(case, n) for n in dc.RULE_INPUTS},
                   initial_state=(dc.torch_input(case, "initial_state")
                                  if "initial_state" in case.inputs else None),
                   use_qk_l2norm_in_kernel=case.param("l2", "1") == "1",
                   cu_seqlens=case.inputs.get("cu_seqlens"))
    return {"o": o, "final_state": s}


def run_kernel(case, fn, device):
    import torch
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    q, k, v, g, beta = (dc.torch_input(case, n, dev) for n in dc.RULE_INPUTS)
    s0 = dc.torch_input(case, "initial_state", dev) if "initial_state" in case.inputs else None
    cu = None
    if "cu_seqlens" in case.inputs:
        cu = torch.from_numpy(case.inputs["cu_seqlens"].astype("int64")).to(dev)
    unwritten_shows(torch)
    o, s = fn(q=q, k=k, v=v, g=g, beta=beta, scale=None, initial_state=s0,
              output_final_state="final_state" in case.outputs,
              use_qk_l2norm_in_kernel=case.param("l2", "1") == "1", cu_seqlens=cu)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return {"o": o, "final_state": s}


def unwritten_shows(torch):
    """The kernels allocate their outputs, and their backward its gradients (torch.empty):
    NaN-filled from here on, so an element a kernel never writes shows."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def run_grad(args, case, fn, facts):
    """gdr_grad through autograd of the function: {dq, dk, dv, dg, dbeta[, dh0]}, or a string
    (the reason to decline)."""
    import torch
    if args.fn not in TRITON:
        return dc.autograd_gdr_grad(naive_forward(fn, args.wrong == "carry-state"))(case)
    if args.fn == "fused-recurrent":
        # Known without running the forward: FLA 0.6's backward raises NotImplementedError at
        # once (its message is the reason). A backward that does anything else is run below.
        from fla.ops.gated_delta_rule.fused_recurrent import FusedRecurrentFunction
        try:
            FusedRecurrentFunction.backward(None, None, None)
        except NotImplementedError as e:
            return f"FLA's fused_recurrent_gated_delta_rule has no backward: {e}"
        except Exception:  # a real backward, called without a context: run it properly
            pass
    dev = torch.device("cuda" if facts["device"] == "cuda" else "cpu")
    unwritten_shows(torch)
    # The varlen kernel sees all T tokens with cu_seqlens ending before T (its own contract).
    grads = dc.autograd_gdr_grad(fn, cut_tail=False)(case, dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return grads


def main():
    ap = dc.parser(__doc__)
    ap.add_argument("--fn", choices=sorted(FUNCTIONS), default="naive-chunk",
                    help="which FLA function runs (naive-* on CPU; chunk, fused-recurrent: Triton)")
    ap.add_argument("--device", choices=("auto", "cuda", "interpreter"), default="auto",
                    help="where the Triton kernels run: cuda, or interpreter (CPU tensors under "
                         "Triton's interpreter, triton_cpu.py); auto: cuda when torch sees a GPU")
    ap.add_argument("--wrong", choices=("carry-state",),
                    help="a deliberate bug, for the peer fla-wrong-grad-carry (naive functions "
                         "only): carry-state starts each packed sequence from the state the "
                         "previous one ended with")
    return dc.adapter_main(ap, lambda a: resolve(a.fn, a.device), answer)


def answer(args, inp, out_path):
    case = dc.Case(inp)
    if case.op not in ("gdr", "gdr_grad"):
        dc.decline(out_path, f"fla_gdr.py implements the ops gdr and gdr_grad only, not {case.op}")
        return
    if case.param("cache") in ("pool", "spec", "ckpt", "accept", "tree"):
        dc.decline(out_path, f"cache={case.param('cache')}: states addressed through slot "
                             "indices; FLA's functions take one state per sequence, no slots")
        return
    fn, facts = resolve(args.fn, args.device)  # imported once per process
    if fn is None:
        dc.decline(out_path, facts)
        return
    if args.wrong and args.fn in TRITON:
        dc.fail(f"--wrong {args.wrong} is a bug of the adapter's naive-function wrapper; "
                f"--fn {args.fn} has none")
    if args.wrong:
        facts = dict(facts, wrong=f"{args.wrong}: the adapter's deliberate bug (each packed "
                                  "sequence starts from the previous one's final state)")
    import torch
    torch.set_num_threads(int(os.environ.get("DELTACHECK_PEER_THREADS", "1")))
    if case.op == "gdr_grad":
        values = run_grad(args, case, fn, facts)
        if isinstance(values, str):
            dc.decline(out_path, values, facts)
            return
    else:
        with torch.no_grad():
            values = (run_kernel(case, fn, facts["device"]) if args.fn in TRITON else
                      run_naive(case, naive_forward(fn, args.wrong == "carry-state")))
    dc.write_tensors(out_path, case, values, facts)


if __name__ == "__main__":
    sys.exit(main())
