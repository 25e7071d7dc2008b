"""Gradients through the Python route (docs/python.md, "Gradients"): one call of a gdr_grad case
becomes a forward call of the user's function in its convention, on copies of q, k, v, g, beta
and initial_state that require gradients, then torch.autograd.grad of (o, final_state) with the
case's do (and dht). The gradients go back under the gdr_grad op's names (dq, dk, dv, dg, dbeta,
dh0); an input the forward does not use gets zeros.

The forward sees all T tokens: a case with tail=N passes cu_seqlens ending N tokens before T,
as a training step with a padded batch does, and do covers the tail too. A forward that leaves
the tail's outputs alone (unwritten or zero, no autograd path) hands the tail zero gradients,
as the contract asks; one that runs a sequence through the tail does not, and fails."""
import time

# The inputs that get gradients, and the gdr_grad output each gradient is written to.
GRADIENTS = (("q", "dq"), ("k", "dk"), ("v", "dv"), ("g", "dg"), ("beta", "dbeta"),
             ("initial_state", "dh0"))
_UPSTREAM = ("do", "dht")  # gradients of the forward's outputs: not forward inputs


def forward_params(params):
    """A gdr_grad case's parameters as the forward's (gdr, one prefill call) for conventions."""
    p = {k: v for k, v in params.items() if k not in ("dht", "tail")}
    p["cache"] = "prefill"
    return p


def supports(conv, io, c):
    """None, or why `conv` with tensors of `io` cannot run gdr_grad case `c`."""
    if conv.no_grad:
        return f"the {conv.name} convention has no gradient: {conv.no_grad}"
    if io.name == "numpy":
        return ("gdr_grad differentiates the callable with torch.autograd, jax.vjp or mx.vjp; "
                "a NumPy callable has no gradients (framework='numpy', or none of torch, jax, "
                "mlx detected)")
    return conv.supports(_forward_view(c))


def _forward_view(c):
    """The forward's view of gdr_grad call `c` (op gdr, forward parameters), sharing its io."""
    f = type(c).__new__(type(c))
    f.case_id, f.op, f.params = c.case_id, "gdr", forward_params(c.params)
    f.io, f.inputs, f.outputs, f._dims = getattr(c, "io", None), {}, {}, None
    return f


def call(conv, fn, c):
    """Runs gdr_grad call `c`: the forward `fn` through `conv`, then autograd. Returns the
    gradients by output name. `fn` is the timed callable (its .seconds gets the backward's
    time too: the backward is the user's code)."""
    if c.io.name in ("jax", "mlx"):
        return _call_functional(conv, fn, c)
    torch = c.io.torch
    f = _forward_view(c)
    leaves = {}
    for name, x in c.inputs.items():
        if name in _UPSTREAM:
            continue
        if any(name == n for n, _ in GRADIENTS):
            x = leaves[name] = x.detach().clone().requires_grad_(True)
        f.inputs[name] = x
    dht = c.inputs.get("dht")
    f.outputs = {"o": None, **({"final_state": None} if dht is not None else {})}
    returned = conv.call(fn, f)
    if not isinstance(returned, dict):
        raise ValueError(f"convention {conv.name!r} returned {type(returned).__name__}, "
                         "not a dict of outputs")
    live = _live_tokens(c)
    outputs, upstream = [], []
    for name, grad in (("o", c.inputs["do"]), ("final_state", dht)):
        if grad is None:
            continue
        value = returned.get(name)
        if value is None:
            raise ValueError(f"the callable returned no {name} (a gdr_grad case differentiates "
                             f"{', '.join(f.outputs)})")
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{name} is a {type(value).__name__}, not a torch tensor: "
                             "gdr_grad needs the forward's outputs as tensors autograd recorded")
        if tuple(value.shape) != tuple(grad.shape):
            raise ValueError(f"output {name}: shape {tuple(value.shape)} returned, "
                             f"{tuple(grad.shape)} expected")
        if value.grad_fn is None and not value.requires_grad:
            if live == 0:  # no token: nothing to record (a pack of zero-length sequences)
                continue
            raise ValueError(f"{name} has no autograd path (no grad_fn): the forward ran "
                             "outside autograd (torch.no_grad, .detach(), NumPy, or a kernel "
                             "without a backward), so its gradients cannot be taken")
        outputs.append(value)
        upstream.append(grad.to(value.dtype))
    grads = [None] * len(leaves)
    if outputs:
        t0 = time.perf_counter()
        try:
            grads = torch.autograd.grad(outputs, list(leaves.values()), upstream,
                                        allow_unused=True)
            c.io.synchronize()
        finally:
            if hasattr(fn, "seconds"):
                fn.seconds += time.perf_counter() - t0
    out_name = dict(GRADIENTS)
    return {out_name[n]: (g if g is not None else torch.zeros_like(x))
            for (n, x), g in zip(leaves.items(), grads)}


def _call_functional(conv, fn, c):
    """gdr_grad call `c` on the JAX or MLX route: the forward through `conv` as a function of
    q, k, v, g, beta (and initial_state), differentiated by jax.vjp / mx.vjp (c.io.vjp) with do
    (and dht) as cotangents. An input the forward does not use gets the framework's zero
    gradient. The whole vjp (forward and backward) is the user's time."""
    io = c.io
    f = _forward_view(c)
    names = [n for n, _ in GRADIENTS if n in c.inputs]
    rest = {n: x for n, x in c.inputs.items() if n not in _UPSTREAM and n not in names}
    dht = c.inputs.get("dht")
    wanted = ["o"] + (["final_state"] if dht is not None else [])
    upstream = [c.inputs["do"]] + ([dht] if dht is not None else [])
    f.outputs = {n: None for n in wanted}

    def forward(*xs):
        f.inputs = {**rest, **dict(zip(names, xs))}
        returned = conv.call(fn, f)
        if not isinstance(returned, dict):
            raise ValueError(f"convention {conv.name!r} returned {type(returned).__name__}, "
                             "not a dict of outputs")
        outs = []
        for name, grad in zip(wanted, upstream):
            value = returned.get(name)
            if value is None:
                raise ValueError(f"the callable returned no {name} (a gdr_grad case "
                                 f"differentiates {', '.join(wanted)})")
            if not io.is_array(value):
                raise ValueError(f"{name} is a {type(value).__module__}."
                                 f"{type(value).__name__}, not a {io.name} array: gdr_grad "
                                 f"differentiates the forward with {io.name}'s vjp, which "
                                 "cannot see through arrays of another library")
            if tuple(value.shape) != tuple(grad.shape):
                raise ValueError(f"output {name}: shape {tuple(value.shape)} returned, "
                                 f"{tuple(grad.shape)} expected")
            outs.append(value)
        return tuple(outs)

    seconds = getattr(fn, "seconds", 0.0)
    t0 = time.perf_counter()
    try:
        grads = io.vjp(forward, [c.inputs[n] for n in names], upstream)
        io.synchronize(tuple(grads))
    finally:
        if hasattr(fn, "seconds"):  # the forward's own time is inside this span
            fn.seconds = seconds + time.perf_counter() - t0
    out_name = dict(GRADIENTS)
    return {out_name[n]: g for n, g in zip(names, grads)}


def _live_tokens(c):
    """Tokens that belong to a sequence: cu_seqlens[-1], or B*T without cu_seqlens."""
    cu = c.inputs.get("cu_seqlens")
    if cu is not None:
        return int(cu[-1]) if cu.shape[0] else 0
    d = c.dims
    return d.B * d.T
