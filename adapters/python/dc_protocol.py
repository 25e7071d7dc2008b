"""The deltacheck external-program protocol, shared by the peer adapters (transformers_*.py,
fla_gdr.py). The protocol itself is golden/README.md, "External programs":

  {in}   an HDF5 file with one case group: attributes case_id, op, seed; params/ (one string
         attribute per case-id parameter); inputs/<name> (bf16/fp16 as uint16 bit patterns with
         attribute dtype); outputs/<name> (attributes dtype and shape of each output to produce).
  {out}  one root dataset per output, with that shape and dtype (fp32 -> float32, bf16/fp16 ->
         uint16 bits with attribute dtype); or a root attribute "unsupported" with the reason.

Every adapter also writes root attributes naming what ran: "implementation" (the function's
qualified name, and how it was reached) and "versions" (the packages it came from). deltacheck
ignores them; they are there for whoever opens {out} (a failure dump keeps the case, and
`--describe` prints the same facts without a case).

Serve mode (docs/external.md): `deltacheck run --backend external --serve 'python3 x.py'` starts
the adapter once per runner thread with DELTACHECK_SERVE=1 in its environment; `main(answer, ...)`
then calls `serve(answer)`, which answers every call of the run on stdin/stdout with the same
{in} and {out} files. Started with {in} and {out} arguments, `main` answers that one case.

Needs only numpy and h5py; torch is imported by the adapters that use it.
"""
import json
import os
import sys
import traceback

import h5py
import numpy as np


class Case:
    """One case read from {in}: id, op, params (strings), inputs (numpy arrays: bf16 decoded to
    float32, fp16 as float16, the rest as stored) with their dtype names, and the outputs to
    produce as {name: (dtype, shape)}."""

    def __init__(self, path=None, group=None):
        if group is None:
            with h5py.File(path, "r") as f:
                (group,) = f.values()  # exactly one case per {in} file
                self.__init__(group=group)
            return
        # A case group of {in}, or of a golden fixture file (whose expected/ is not read).
        self.case_id = str(group.attrs["case_id"])
        self.op = str(group.attrs["op"])
        self.params = {k: str(v) for k, v in group["params"].attrs.items()}
        self.inputs, self.dtypes = {}, {}
        for name, ds in group["inputs"].items():
            self.inputs[name], self.dtypes[name] = decode(ds)
        self.outputs = {name: (str(s.attrs["dtype"]), tuple(int(n) for n in s.attrs["shape"]))
                        for name, s in group["outputs"].items()}

    def param(self, key, default=None):
        return self.params.get(key, default)

    def int_param(self, key, default=0):
        return int(self.params.get(key, default))


def decode(ds):
    """A dataset as (array, dtype name): bf16 as float32 (exact), fp16 as float16."""
    a = ds[()]
    dtype = str(ds.attrs.get("dtype", ""))
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32), dtype
    if dtype == "fp16":
        return a.view(np.float16), dtype
    return a, dtype


def encode(x, dtype):
    """Values as the {out} file holds them for `dtype`; floats rounded once, to nearest even."""
    x = np.asarray(x)
    if dtype == "fp32":
        return x.astype(np.float32)
    if dtype == "fp64":
        return x.astype(np.float64)
    if dtype == "fp16":
        return x.astype(np.float16).view(np.uint16)
    if dtype == "bf16":
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    if dtype in ("int32", "int64", "uint8"):
        return x.astype({"int32": np.int32, "int64": np.int64, "uint8": np.uint8}[dtype])
    raise ValueError(f"no encoding for dtype {dtype}")


def _attrs(f, facts):
    for key, value in (facts or {}).items():
        f.attrs[key] = value if isinstance(value, str) else json.dumps(value)


def write_outputs(path, case, values, facts=None):
    """Writes every output the case asks for from `values` (name -> array of the right size)."""
    with h5py.File(path, "w") as f:
        _attrs(f, facts)
        for name, (dtype, shape) in case.outputs.items():
            data = np.asarray(values[name]).reshape(shape)
            ds = f.create_dataset(name, data=encode(data, dtype))
            if dtype in ("bf16", "fp16"):
                ds.attrs["dtype"] = dtype


def write_tensors(path, case, values, facts):
    """Writes torch tensors (name -> tensor or None) as the case's outputs, in float64 before the
    one rounding to each output's dtype; an output the case asks for and `values` lacks is an
    adapter error naming the implementation."""
    out = {name: t.detach().double().cpu().numpy() for name, t in values.items()
           if t is not None}
    missing = [name for name in case.outputs if name not in out]
    if missing:
        fail(f"{facts['implementation']} returned no {', '.join(missing)}")
    write_outputs(path, case, out, facts)


def torch_input(case, name, device=None):
    """A case input as a torch tensor in its own dtype (bf16 / fp16 as such), on `device`."""
    import torch
    a, dtype = case.inputs[name], case.dtypes[name]
    t = torch.from_numpy(np.ascontiguousarray(a))
    t = t.to({"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, t.dtype))
    return t if device is None else t.to(device)


RULE_INPUTS = ("q", "k", "v", "g", "beta")


def layer_hidden_states(case):
    """[1, T, D + HV V + 2 HV]: a layer case's projections side by side, qkv | z | b | a per
    token (the module adapters' input; their projections are 0/1 selections of it)."""
    import torch
    x = [torch_input(case, n) for n in ("qkv", "z", "b", "a")]
    T = x[0].shape[1]
    return torch.cat([t.reshape(1, T, -1) for t in x], dim=-1)


def set_parameters(module, want):
    """Replaces every parameter of a torch module by want[name] (frozen copies); a module whose
    parameter names or shapes differ from `want` is an adapter error naming them, so a library
    change cannot leave a random weight in place silently."""
    import torch
    what = type(module).__name__
    have = dict(module.named_parameters())
    if sorted(have) != sorted(want):
        fail(f"{what} has parameters {sorted(have)}; the adapter maps {sorted(want)}")
    for name, value in want.items():
        if tuple(have[name].shape) != tuple(value.shape):
            fail(f"{what}.{name} has shape {tuple(have[name].shape)}, the case gives "
                 f"{tuple(value.shape)}")
        owner_name, _, attr = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        setattr(owner, attr, torch.nn.Parameter(value.clone(), requires_grad=False))


def autograd_gdr_grad(forward, cut_tail=True):
    """A gdr_grad handler from a torch forward of the rule (docs/gradients.md, "The contract").

    `forward` takes FLA's keyword convention, forward(q=, k=, v=, g=, beta=, scale=None,
    initial_state=, output_final_state=, use_qk_l2norm_in_kernel=, cu_seqlens=) -> (o, ht), with
    q, k [B,T,H,K], v [B,T,HV,V], g, beta [B,T,HV], initial_state / ht [N,HV,K,V], cu_seqlens int64.
    The handler, handler(case, device=None) -> {dq, dk, dv, dg, dbeta[, dh0]} (torch tensors),
    runs it on the case's inputs (leaves that require grad) and takes
    torch.autograd.grad((o, ht), inputs, (do, dht), allow_unused=True): an input the forward
    does not use gets zeros; dh0 is returned when the case has an initial state; without a dht
    the final state is not asked for. Tokens past cu_seqlens[-1] (a gdr_grad case's tail): with
    `cut_tail` they are cut off before the forward and get exactly zero (the contract); without
    it the forward sees all T tokens and cu_seqlens ending before T (a varlen kernel's own
    contract is then under test, unwritten gradients included)."""

    def handler(case, device=None):
        import torch
        T = case.inputs["q"].shape[1]
        live = T
        cu = None
        if "cu_seqlens" in case.inputs:
            cu = torch.from_numpy(case.inputs["cu_seqlens"].astype(np.int64))
            cu = cu if device is None else cu.to(device)
            if cut_tail:
                live = int(case.inputs["cu_seqlens"][-1])
        leaves = {n: torch_input(case, n, device)[:, :live].clone().requires_grad_()
                  for n in RULE_INPUTS}
        if "initial_state" in case.inputs:
            leaves["initial_state"] = torch_input(case, "initial_state", device).requires_grad_()
        dht = torch_input(case, "dht", device) if "dht" in case.inputs else None
        with torch.enable_grad():
            o, ht = forward(**{n: leaves[n] for n in RULE_INPUTS}, scale=None,
                            initial_state=leaves.get("initial_state"),
                            output_final_state=dht is not None,
                            use_qk_l2norm_in_kernel=case.param("l2", "1") == "1",
                            cu_seqlens=cu)
        outputs = [o]
        upstream = [torch_input(case, "do", device)[:, :live].to(o.dtype)]
        if dht is not None:
            outputs.append(ht)
            upstream.append(dht.to(ht.dtype))
        names = list(leaves)
        # An output autograd did not record (no token to differentiate: a zero-length sequence
        # run alone, where a forward may return fresh tensors) passes no gradient back.
        pairs = [(x, u) for x, u in zip(outputs, upstream) if x.requires_grad]
        grads = (torch.autograd.grad([x for x, _ in pairs], [leaves[n] for n in names],
                                     [u for _, u in pairs], allow_unused=True)
                 if pairs else [None] * len(names))
        result = {}
        for name, grad in zip(names, grads):
            grad = torch.zeros_like(leaves[name]) if grad is None else grad
            if name != "initial_state" and live < T:  # the tail: exactly zero
                grad = torch.cat([grad, grad.new_zeros(grad.shape[0], T - live,
                                                       *grad.shape[2:])], dim=1)
            result["dh0" if name == "initial_state" else "d" + name] = grad
        return result

    return handler


def parser(doc):
    """An adapter's argument parser: {in} and {out} (absent in serve mode), described by the
    first line of the module's docstring."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("inp", nargs="?", help="{in}: the case (HDF5)")
    ap.add_argument("out", nargs="?", help="{out}: the outputs to write (HDF5)")
    return ap


def adapter_main(ap, resolve, answer):
    """Parses the arguments (the adapter adds --describe's companions first): with --describe,
    prints resolve(args)'s facts (or why it is unavailable); else answers the case(s) with
    answer(args, inp, out)."""
    ap.add_argument("--describe", action="store_true",
                    help="print what would run, as JSON, and exit")
    args = ap.parse_args()
    if args.describe:
        found, facts = resolve(args)
        return describe(facts if found else {"unavailable": facts})
    return main(lambda inp, out: answer(args, inp, out), args.inp, args.out, ap)


def decline(path, reason, facts=None):
    """Declines the case: verdict unsupported with `reason`."""
    with h5py.File(path, "w") as f:
        _attrs(f, facts)
        f.attrs["unsupported"] = reason


def describe(facts):
    """--describe: the implementation facts as one JSON line on stdout."""
    print(json.dumps(facts, sort_keys=True))
    return 0


def package_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # not installed, or no metadata
        return None


class Failure(SystemExit):
    """An adapter-side error with its one-line reason (exit code 1 when it ends the program)."""

    def __init__(self, message):
        super().__init__(1)
        self.message = message


def fail(message):
    """An adapter-side error: one line on stderr and exit code 1 (deltacheck shows the line); in
    serve mode the call's answer is `error <message>` and the worker goes on."""
    print(message, file=sys.stderr)
    raise Failure(message)


# --- serve mode ------------------------------------------------------------------------------
PROTOCOL = "deltacheck-serve 1"  # the handshake: protocol name and version


def serving():
    """Whether deltacheck started this program in serve mode (`--serve`)."""
    return os.environ.get("DELTACHECK_SERVE") == "1"


def one_line(text):
    """`text` as one line of printable characters (for an answer line)."""
    line = " ".join(str(text).split())
    return "".join(ch if ch.isprintable() else "?" for ch in line)[:300] or "(no message)"


def answer_one(answer, inp, out):
    """Runs answer(inp, out) for one request: the answer line, never an exception."""
    try:
        answer(inp, out)
        return "ok"
    except Failure as e:
        return "error " + one_line(e.message)
    except SystemExit as e:
        if e.code in (0, None):
            return "ok"
        return "error " + one_line(e.code if isinstance(e.code, str) else
                                   f"exited with code {e.code}")
    except Exception as e:  # the traceback goes to stderr, which deltacheck captures per call
        traceback.print_exc()
        return "error " + one_line(f"{type(e).__name__}: {e}")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(answer):
    """Answers deltacheck's requests until stdin ends (docs/external.md): the handshake line, then
    per request `run<TAB>{in}<TAB>{out}` one answer line: `ok` once answer(inp, out) has written
    {out} (declined cases included: `decline` writes the reason there), `error <reason>` when it
    raised. stdout is the protocol channel: whatever else writes to stdout (print, a library's C
    code) goes to stderr while serving."""
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", closefd=False)
    channel.write(PROTOCOL + "\n")
    channel.flush()
    for raw in sys.stdin.buffer:  # bytes: a path is whatever the file system allows
        request = os.fsdecode(raw)
        fields = request.rstrip("\r\n").split("\t")
        if len(fields) == 3 and fields[0] == "run":
            reply = answer_one(answer, fields[1], fields[2])
        else:
            reply = "error " + one_line(f"malformed request {request[:80]!r}")
        channel.write(reply + "\n")
        channel.flush()
    return 0


def main(answer, inp=None, out=None, parser=None):
    """An adapter's entry point: answer(inp, out) for the one case named on the command line, or
    `serve(answer)` when deltacheck started it in serve mode (no {in} and {out} given)."""
    if inp is None and out is None and serving():
        return serve(answer)
    if not inp or not out:
        message = "{in} and {out} are required (or run it with deltacheck's --serve)"
        if parser is not None:
            parser.error(message)
        fail(message)
    answer(inp, out)
    return 0
