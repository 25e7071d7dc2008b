"""Calling conventions: how one call of a deltacheck case (named input tensors in, named output
tensors out, as docs/semantics.md defines them) becomes a call of the user's function.

A convention is a function `call(fn, c) -> {output name: tensor}` plus `supports(c) -> None or
the reason it cannot run a case`, where `c` is a `Call`: c.inputs (tensors by deltacheck's names:
q, k, v, g, beta, and where the case has them initial_state, cu_seqlens, state_pool,
state_slots), c.outputs (the names it must return: o, final_state, state_pool, ...), c.params
(the case id's parameters as strings), c.dims (B, T, H, HV, K, V, N) and a few array helpers
(c.zeros, c.arange, c.copy). Ready ones: "fla" (the default), "transformers", "vllm". Declare
another with

    @deltacheck.convention("mine")
    def mine(fn, c):
        o, s = fn(c.inputs["q"], ..., state=c.inputs.get("initial_state"))
        return {"o": o, "final_state": s}

and pass convention="mine" (or the returned object) to deltacheck.check. gdr_grad cases call the
same convention with the forward's view of the case (op gdr, cache=prefill) on inputs that
require gradients, and differentiate what it returns (_grad.py); `no_grad="why"` in the
decorator declines them.
"""
import inspect


class Unsupported(Exception):
    """Raised by a convention or a callable to decline a case (verdict unsupported, with the
    message as the reason)."""


class Convention:
    """`no_grad`: None when the forward it calls can be differentiated (gdr_grad cases run it
    under torch.autograd, docs/python.md "Gradients"), else the reason it cannot (gdr_grad cases
    are then unsupported with it). `in_place`: None, or what the kernel writes into its arrays
    in place (the route of immutable arrays, JAX and MLX, then declines the convention)."""

    def __init__(self, name, call, supports=None, doc="", no_grad=None, in_place=None):
        self.name = name
        self.call = call
        self._supports = supports
        self.doc = doc
        self.no_grad = no_grad
        self.in_place = in_place

    def supports(self, c):
        return self._supports(c) if self._supports else None

    def __repr__(self):
        return f"<deltacheck convention {self.name!r}>"


_REGISTRY = {}


def convention(name, supports=None, no_grad=None, in_place=None):
    """Decorator: registers `call(fn, c)` as convention `name`. `no_grad="why"` declares that
    its forward has no gradient (gdr_grad cases: unsupported, with that reason); `in_place=
    "what"` that the kernel writes into the arrays it is handed (not for JAX or MLX arrays)."""
    def register(call):
        conv = Convention(name, call, supports, inspect.getdoc(call) or "", no_grad, in_place)
        _REGISTRY[name] = conv
        return conv
    return register


def get(conv):
    if isinstance(conv, Convention):
        return conv
    try:
        return _REGISTRY[conv]
    except KeyError:
        raise ValueError(f"unknown convention {conv!r}; known: {', '.join(sorted(_REGISTRY))}, "
                         "or declare one with @deltacheck.convention(name)") from None


def names():
    return sorted(_REGISTRY)


def _gdr_without_slots(what):
    def supports(c):
        if c.op != "gdr":
            return f"the {what} convention calls a gated delta rule kernel (op gdr), not {c.op}"
        if c.params["cache"] in ("pool", "spec", "accept"):
            return (f"cache={c.params['cache']}: states addressed through slot indices; the "
                    f"{what} convention passes one state per sequence (use convention='vllm')")
        if c.params["cache"] == "ckpt":
            return (f"cache=ckpt: block checkpoints into pool rows; the {what} convention "
                    "returns one final state per sequence")
        if c.params["cache"] == "tree":
            return (f"cache=tree: tree-shaped drafts (parents, a state row per token); the "
                    f"{what} convention has no parent indices")
        return None
    return supports


@convention("fla", supports=_gdr_without_slots("fla"))
def fla(fn, c):
    """flash-linear-attention's keyword signature (chunk_gated_delta_rule,
    fused_recurrent_gated_delta_rule): fn(q=, k=, v=, g=, beta=, scale=, initial_state=,
    output_final_state=, cu_seqlens=, use_qk_l2norm_in_kernel=) -> (o, final_state).
    Shapes as docs/semantics.md ([B,T,H,K] q/k, [B,T,HV,V] v, [B,T,HV] g/beta, states
    [N,HV,K,V] fp32);
    cu_seqlens int64 for packed layouts, else None; initial_state None for state=none;
    scale = K**-0.5."""
    i = c.inputs
    o, s = fn(q=i["q"], k=i["k"], v=i["v"], g=i["g"], beta=i["beta"], scale=c.dims.K ** -0.5,
              initial_state=i.get("initial_state"),
              output_final_state="final_state" in c.outputs, cu_seqlens=i.get("cu_seqlens"),
              use_qk_l2norm_in_kernel=c.params["l2"] == "1")
    return {"o": o, "final_state": s}


def _takes(fn, name):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind == p.VAR_KEYWORD for p in params)


@convention("transformers", supports=_gdr_without_slots("transformers"))
def transformers(fn, c):
    """Transformers' Qwen3-Next / Qwen3.5 functions (torch_chunk_gated_delta_rule,
    torch_recurrent_gated_delta_rule), called as the model calls them:
    fn(q, k, v, g=, beta=, initial_state=, output_final_state=, use_qk_l2norm_in_kernel=
    [, cu_seqlens=]) -> (o, final_state), scale fixed at K**-0.5 inside. The model holds one state
    per batch row: one-token decode sequences become N rows of one token with their N states. A
    packed row: a function that takes cu_seqlens gets it with the N sequences' states; one that
    does not gets the row and, with state=none, no state (its packing leak is then a finding);
    N > 1 initial states in one row it cannot hold (unsupported, not a verdict on the kernel).
    When the function returns one state for the row, sequence i's final state is the row's state
    at its end (the call repeated on the prefix)."""
    i = c.inputs
    q, k, v, g, beta = (i[n] for n in ("q", "k", "v", "g", "beta"))
    s0 = i.get("initial_state")
    want_final = "final_state" in c.outputs
    kw = {"use_qk_l2norm_in_kernel": c.params["l2"] == "1"}
    takes_cu = _takes(fn, "cu_seqlens")

    def call(q, k, v, g, beta, state, cu=None, final=True):
        extra = {"cu_seqlens": cu} if cu is not None and takes_cu else {}
        return fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=final,
                  **kw, **extra)

    cu = i.get("cu_seqlens")
    if cu is None:  # one sequence per batch row
        o, s = call(q, k, v, g, beta, s0, final=want_final)
        return {"o": o, "final_state": s}
    bounds = [int(x) for x in cu]
    n = len(bounds) - 1
    if c.params["cache"] == "decode" and all(bounds[j + 1] - bounds[j] == 1 for j in range(n)):
        # The model decodes a batch of N rows of one token each, with the N states.
        rows = lambda x: x.reshape(n, 1, *x.shape[2:])  # noqa: E731
        o, s = call(rows(q), rows(k), rows(v), rows(g), rows(beta), s0, final=want_final)
        return {"o": o.reshape(v.shape[:2] + o.shape[2:]), "final_state": s}
    if s0 is not None and n > 1 and not takes_cu:
        raise Unsupported(
            f"{n} sequences packed in one row with initial states: a function without a "
            "cu_seqlens parameter holds one state per batch row (the transformers convention)")
    o, s = call(q, k, v, g, beta, s0, cu=cu, final=want_final)
    if not want_final or (s is not None and s.shape[0] == n):
        return {"o": o, "final_state": s}
    d = c.dims
    finals = []
    for j, end in enumerate(bounds[1:]):
        if end == 0:  # no token yet: no call to make; the sequence keeps its initial state
            finals.append(s0[j] if s0 is not None else c.zeros((d.HV, d.K, d.V), "fp32"))
            continue
        sl = lambda x: x[:, :end]  # noqa: E731
        state = s0[:j + 1] if s0 is not None else None
        _, st = call(sl(q), sl(k), sl(v), sl(g), sl(beta), state, cu=cu[:j + 2])
        finals.append(st[-1])
    return {"o": o, "final_state": c.stack(finals)}


def _vllm_supports(c):
    if c.op != "gdr":
        return f"the vllm convention calls a gated delta rule kernel (op gdr), not {c.op}"
    if c.params["cache"] == "spec":
        return ("cache=spec: deltacheck's multi-token decode keeps a state per draft token in "
                "token_states, which vLLM's num_accepted_tokens interface does not produce")
    if c.params["cache"] == "ckpt":
        return ("cache=ckpt: fused_recurrent_gated_delta_rule takes no block-checkpoint "
                "arguments (vLLM writes them from its chunked prefill)")
    if c.params["cache"] == "tree":
        return ("cache=tree: fused_recurrent_gated_delta_rule takes no parent indices (vLLM "
                "verifies chains of drafts)")
    return None


@convention("vllm", supports=_vllm_supports,
            no_grad="it writes the final states into the slot pool in place "
                    "(inplace_final_state=True), which autograd cannot take dht back through; "
                    "vLLM's fused_recurrent_gated_delta_rule is inference-only",
            in_place="the final states, into the slot pool")
def vllm(fn, c):
    """vLLM-style slot pool (vllm's fused_recurrent_gated_delta_rule):
    fn(q=, k=, v=, g=, beta=, scale=, initial_state=POOL, inplace_final_state=True, cu_seqlens=,
    ssm_state_indices=SLOTS, use_qk_l2norm_in_kernel=) -> (o, final_state); the kernel reads
    sequence i's state from POOL[SLOTS[i]] and writes its final state back there, skipping
    entries with a negative slot (padding). cache=pool passes the case's pool (a copy) and slots
    and returns the pool after the call; the other modes pass a pool of N slots, slots 0..N-1.
    cache=accept adds num_accepted_tokens=[N] with ssm_state_indices=[N, T] (vLLM's speculative
    verify: start from row [i, num_accepted_tokens[i] - 1], write token t's state to row [i, t])."""
    i = c.inputs
    if c.params["cache"] == "accept":
        # Speculative verify (docs/serving.md): [N, T] per-token rows and the accepted counts;
        # batch layout, so no cu_seqlens (every sequence has T tokens).
        pool = c.copy(i["state_pool"])
        o, _ = fn(q=i["q"], k=i["k"], v=i["v"], g=i["g"], beta=i["beta"], scale=c.dims.K ** -0.5,
                  initial_state=pool, inplace_final_state=True, cu_seqlens=None,
                  ssm_state_indices=i["state_indices"],
                  num_accepted_tokens=i["num_accepted_tokens"],
                  use_qk_l2norm_in_kernel=c.params["l2"] == "1")
        return {"o": o, "state_pool": pool}
    if "state_pool" in i:
        pool, slots = c.copy(i["state_pool"]), i["state_slots"]
    else:
        d = c.dims
        s0 = i.get("initial_state")
        pool = c.copy(s0) if s0 is not None else c.zeros((d.N, d.HV, d.K, d.V), "fp32")
        slots = c.arange(d.N, "int32")
    o, _ = fn(q=i["q"], k=i["k"], v=i["v"], g=i["g"], beta=i["beta"], scale=c.dims.K ** -0.5,
              initial_state=pool, inplace_final_state=True, cu_seqlens=i.get("cu_seqlens"),
              ssm_state_indices=slots, use_qk_l2norm_in_kernel=c.params["l2"] == "1")
    return {"o": o, "state_pool": pool, "final_state": pool}
