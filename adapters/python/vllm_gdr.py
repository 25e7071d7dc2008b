#!/usr/bin/env python3
"""deltacheck peer adapter: vLLM's own gated-delta Triton kernels (its vendored copy of FLA,
vllm/third_party/flash_linear_attention/ops) on deltacheck's gdr cases, through the external
backend, called the way vLLM's GDN layers call them:

    build/deltacheck run --case 'gdr(layout=batch[6x3],cache=spec)' --backend external \
        --serve "$VENV/bin/python adapters/python/vllm_gdr.py --fn fused-recurrent"

What runs (`--fn`), each called directly as a function object:
  fused-recurrent  vllm.third_party.flash_linear_attention.ops.fused_recurrent_gated_delta_rule
  chunk            vllm.third_party.flash_linear_attention.ops.chunk_gated_delta_rule
Where (`--device`): `cuda` on a GPU (run deltacheck with `--matmul-precision tf32`);
`interpreter` on CPU tensors under Triton's interpreter, helped by triton_cpu.py as for FLA
(docs/peers.md); `auto` (the default): cuda when torch sees a GPU, else the interpreter.
{out} and `--describe` record the function, its file, the versions, the device and what is
emulated, as fla_gdr.py does.

vLLM on a machine without a GPU (facts found by trying, docs/peers.md). Under the interpreter the
adapter sets two environment variables before vLLM is imported; nothing of vLLM is replaced:
  CUDA_VISIBLE_DEVICES=""  vllm.triton_utils replaces `triton` by a placeholder whose
      `@triton.jit` returns the plain Python function unless Triton reports exactly one active
      GPU driver; its own exception is an empty device list ("a distributed environment where the
      devices are not visible yet"). The adapter checks that vLLM then says HAS_TRITON (else it
      declines: the kernels would not be Triton kernels).
  VLLM_TARGET_DEVICE=cpu   vLLM's CPU platform ("an explicit CPU target is authoritative", for
      CPU-only jobs that reuse an accelerator wheel). Without it the platform is "unspecified",
      which claims pinned memory, and the chunked kernel's prepare_chunk_indices (a pinned
      host-to-device copy) fails with "Found no NVIDIA driver".

How vLLM calls them (vllm/model_executor/layers/mamba/gdn/olmo_gdn_linear_attn.py, 0.33.0, whose
_forward_core passes q/k/v/g/beta as they are; the Qwen3-Next layer calls the same chunk kernel
the same way, and for decode a variant that computes g and beta from A_log/a/b/dt_bias in the
kernel, which a case's g and beta cannot be fed to exactly) and the conversions:
  States: vLLM keeps a state pool `ssm_state` [rows, HV, V, K] (V before K: the transpose of
    docs/semantics.md's [HV, K, V]), fp32 here; row 0 is NULL_BLOCK_ID, the padding/null row:
    the recurrent kernel skips a sequence whose index is <= 0 (reads and writes nothing, and
    leaves its o unwritten). The adapter builds the pool as [null row, case states...]: the
    case's initial_state i (or state_pool row r) is vLLM row i+1 (r+1), transposed to [V, K];
    a padding entry (state slot -1) gets index 0. The null row is NaN-filled: read, it shows.
  fused-recurrent (vLLM: decode and speculative decode): one call over all sequences, packed
    (B=1, cu_seqlens int32 as vLLM's query_start_loc; batch[NxT] layouts are flattened),
    initial_state=ssm_state, inplace_final_state=True, ssm_state_indices, scale=None (K^-0.5),
    use_qk_l2norm_in_kernel = the case's l2. The states come back from the pool rows.
    - cache=none (state=none): a zero-filled pool (vLLM's recurrent kernel always reads a state).
    - prefill / decode / chunked / dynamic calls: ssm_state_indices [N] = i+1 per sequence.
    - pool: ssm_state_indices [N] = slot+1, or 0 for a padding entry.
    - spec (multi-token decode, a state per draft token): ssm_state_indices [N, T] (vLLM's
      spec_state_indices_tensor, one row per request, a column per token) and
      num_accepted_tokens [N] (the previous verify step's accepted count, bonus token
      included): the kernel reads the initial state from column num_accepted_tokens-1 and writes
      the state after token t into column t. The adapter varies the accepted count by sequence
      (a_n = n % T + 1, so all of 1..T occur), puts the sequence's pool slot in column a_n-1 and
      fresh rows in the others; token_states[n, t] is the row of column t, and the case's
      state_pool row (the state after the last draft) is the row of column T-1.
  chunk (vLLM: prefill): initial_state = ssm_state[indices] gathered, outputs final states that
    are scattered back (ssm_state[indices] = final_state), cu_seqlens int32, output_final_state,
    use_qk_l2norm_in_kernel = the case's l2. cache=none passes zeros (vLLM zeroes the rows of
    requests without an initial state). Declines spec (it writes no per-token state; vLLM runs
    speculative decoding through the recurrent kernel).
  accept (ops/gdr/serving.h, docs/serving.md): the case's state_indices [N, T] and
    num_accepted_tokens [N] are vLLM's arguments already (count includes the bonus token); they
    pass through (rows + 1) and the pool is updated in place. chunk declines it; both decline
    cache=ckpt (vLLM's block checkpoints come from FlashInfer's chunked prefill, not these).
  vLLM's own input checks (assertions: the chunked kernel refuses fp32 activations) decline the
  case with vLLM's message: the implementation does not accept that input.
  --wrong accepted-without-bonus (a deliberate adapter bug, pinned as a finding so that the
    peer suite shows the accepted-count mapping can fail): num_accepted_tokens passed as the
    count of accepted drafts without the bonus token (at least 1), so every sequence whose
    previous step accepted a draft resumes from the state one token too early.
  Both allocate their outputs with torch.empty: NaN-filled while they run, so an output element
  never written fails the case (padding entries' o are don't-care for deltacheck).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402
from fla_gdr import kernel_device  # noqa: E402

MODULE = "vllm.third_party.flash_linear_attention.ops"
FUNCTIONS = {"fused-recurrent": "fused_recurrent_gated_delta_rule",
             "chunk": "chunk_gated_delta_rule"}


def resolve(which, device="auto", wrong=None):
    """(function, facts) or (None, reason); under the interpreter, set up before vLLM is
    imported."""
    import importlib
    import inspect
    import warnings
    try:
        import torch
    except Exception as e:
        return None, f"torch not importable: {type(e).__name__}: {e}"
    versions = {"torch": torch.__version__}
    for dist in ("vllm", "triton"):
        if dc.package_version(dist):
            versions[dist] = dc.package_version(dist)
    # Under the interpreter: vLLM disables Triton without exactly one active GPU driver, except
    # where the visible device list is empty (vllm/triton_utils/importing.py); its CPU platform
    # claims no pinned memory (the chunked kernel's prepare_chunk_indices needs that).
    where, problem = kernel_device(torch, device, f"vLLM's {FUNCTIONS[which]}",
                                   {"CUDA_VISIBLE_DEVICES": "", "VLLM_TARGET_DEVICE": "cpu"})
    if where is None:
        return None, problem
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(MODULE)
            from vllm.triton_utils import HAS_TRITON
    except Exception as e:
        return None, (f"{MODULE} not importable (vllm {versions.get('vllm', 'not installed')}): "
                      f"{type(e).__name__}: {e}")
    if not HAS_TRITON:
        return None, ("vllm.triton_utils.HAS_TRITON is False: vLLM replaced triton by its "
                      "placeholder, so its kernels are not Triton kernels here")
    fn = inspect.unwrap(getattr(module, FUNCTIONS[which]))
    facts = {"implementation": f"{fn.__module__}.{fn.__qualname__} "
                               f"({inspect.getsourcefile(fn)})"
                               + (f", with the adapter's deliberate bug --wrong {wrong}"
                                  if wrong else ""),
             "versions": versions, **where}
    return fn, facts


class Pool:
    """vLLM's state pool for one case: row 0 the null block (NaN), then the case's states (its
    initial states, or its state_pool rows), transposed to [HV, V, K]; extra rows for spec."""

    def __init__(self, case, torch, extra=0):
        import numpy as np
        self.torch = torch
        B, T, H, K = case.inputs["q"].shape
        HV, V = case.inputs["v"].shape[2:]
        if "state_pool" in case.inputs:
            states = case.inputs["state_pool"]
        elif "initial_state" in case.inputs:
            states = case.inputs["initial_state"]
        else:  # cache=none: vLLM's recurrent kernel always reads a state; zeros are "none"
            states = np.zeros((self.sequences(case), HV, K, V), np.float32)
        self.case_rows = len(states)
        rows = torch.full((1 + len(states) + extra, HV, V, K), float("nan"))
        rows[1:1 + len(states)] = torch.from_numpy(np.ascontiguousarray(states)).transpose(-1, -2)
        self.rows = rows.contiguous()

    @staticmethod
    def sequences(case):
        if "cu_seqlens" in case.inputs:
            return len(case.inputs["cu_seqlens"]) - 1
        return case.inputs["q"].shape[0]

    def case_state(self, vllm_row):
        """A pool row as deltacheck's [HV, K, V]."""
        return self.rows[vllm_row].transpose(-1, -2)

    def case_states(self):
        return self.rows[1:1 + self.case_rows].transpose(-1, -2)


def packed(case, torch, dev):
    """q, k, v, g, beta as vLLM passes them (one packed row, B=1) and cu_seqlens (int32)."""
    x = [dc.torch_input(case, n) for n in ("q", "k", "v", "g", "beta")]
    B, T = x[0].shape[:2]
    if "cu_seqlens" in case.inputs:
        cu = torch.from_numpy(case.inputs["cu_seqlens"].astype("int32"))
    else:
        cu = torch.arange(0, (B + 1) * T, T, dtype=torch.int32)
        x = [t.reshape(1, B * T, *t.shape[2:]) for t in x]
    return [t.to(dev) for t in x], cu.to(dev)


def slots(case):
    """Each sequence's row of the case's states: its pool slot, or itself (-1: padding)."""
    if "state_slots" in case.inputs:
        return [int(s) for s in case.inputs["state_slots"]]
    return list(range(Pool.sequences(case)))


def lengths(case):
    B, T = case.inputs["q"].shape[:2]
    if "cu_seqlens" in case.inputs:
        cu = [int(c) for c in case.inputs["cu_seqlens"]]
        return [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    return [T] * B


def token_columns(case, first, fresh):
    """vLLM's multi-token call (speculative decode): ssm_state_indices [N, T], a pool row per
    token of each sequence, and num_accepted_tokens [N]: the state after token t goes to column
    t; the initial state is read from column accepted-1, which holds the sequence's own row. The
    rest are fresh pool rows from `fresh` on; columns past a sequence's length, and every column
    of a padding entry, are NULL_BLOCK_ID."""
    lens = lengths(case)
    width = max(lens)
    spec = case.param("cache") == "spec"
    cols, accepted = [], []
    for i, (row, n) in enumerate(zip(first, lens)):
        a = i % width + 1 if spec else 1  # spec: every accepted count 1..T occurs
        accepted.append(a)
        if row <= 0:
            cols.append([0] * width)
            continue
        tokens = list(range(fresh, fresh + n - 1))
        fresh += max(n - 1, 0)
        tokens.insert(a - 1, row)
        cols.append((tokens + [0] * width)[:width])
    return cols, accepted


def without_bonus(accepted):
    """--wrong accepted-without-bonus: the accepted drafts, not counting the bonus token."""
    return [max(int(a) - 1, 1) for a in accepted]


def run_fused_recurrent(case, fn, dev, wrong=None):
    import torch
    (q, k, v, g, beta), cu = packed(case, torch, dev)
    lens = lengths(case)
    multi = max(lens) > 1
    pool = Pool(case, torch, extra=sum(max(n - 1, 0) for n in lens) if multi else 0)
    rows = pool.rows.to(dev)
    first = [s + 1 if s >= 0 else 0 for s in slots(case)]  # NULL_BLOCK_ID 0 for padding
    accepted = None
    if multi:  # as vLLM's speculative decode; one token per sequence: as its decode
        cols, accepted = token_columns(case, first, 1 + pool.case_rows)
        if wrong == "accepted-without-bonus":
            accepted = without_bonus(accepted)
        indices = torch.tensor(cols, dtype=torch.int32)
        accepted = torch.tensor(accepted, dtype=torch.int32).to(dev)
    else:
        indices = torch.tensor(first, dtype=torch.int32)
    o, _ = fn(q=q, k=k, v=v, g=g, beta=beta, scale=None, initial_state=rows,
              inplace_final_state=True, cu_seqlens=cu, ssm_state_indices=indices.to(dev),
              num_accepted_tokens=accepted,
              use_qk_l2norm_in_kernel=case.param("l2", "1") == "1")
    pool.rows = rows.cpu()
    out = {"o": o.reshape(case.inputs["v"].shape)}
    after = pool.case_states().clone()
    if multi:  # each sequence's final state: the row of its last token's column
        for s, row, n in zip(slots(case), indices.tolist(), lens):
            if s >= 0 and n > 0:
                after[s] = pool.case_state(row[n - 1])
    if case.param("cache") == "spec":
        out["token_states"] = torch.stack([torch.stack([pool.case_state(r) for r in row])
                                           for row in indices.tolist()])
    out["state_pool" if "state_pool" in case.inputs else "final_state"] = after
    return out


def run_accept(case, fn, dev, wrong=None):
    """cache=accept (ops/gdr/serving.h, docs/serving.md): the case is vLLM's speculative
    verify call itself: state_indices [N, T] and num_accepted_tokens [N] pass through as
    ssm_state_indices and num_accepted_tokens (rows shifted by one for the null row 0), and the
    kernel updates the pool in place."""
    import torch
    (q, k, v, g, beta), cu = packed(case, torch, dev)
    pool = Pool(case, torch)
    rows = pool.rows.to(dev)
    table = torch.from_numpy(case.inputs["state_indices"].astype("int64"))
    indices = torch.where(table >= 0, table + 1, 0).to(torch.int32)
    accepted = case.inputs["num_accepted_tokens"].tolist()
    if wrong == "accepted-without-bonus":
        accepted = without_bonus(accepted)
    accepted = torch.tensor(accepted, dtype=torch.int32)
    o, _ = fn(q=q, k=k, v=v, g=g, beta=beta, scale=None, initial_state=rows,
              inplace_final_state=True, cu_seqlens=cu, ssm_state_indices=indices.to(dev),
              num_accepted_tokens=accepted.to(dev),
              use_qk_l2norm_in_kernel=case.param("l2", "1") == "1")
    pool.rows = rows.cpu()
    return {"o": o.reshape(case.inputs["v"].shape), "state_pool": pool.case_states()}


def run_chunk(case, fn, dev, wrong=None):
    import torch
    (q, k, v, g, beta), cu = packed(case, torch, dev)
    pool = Pool(case, torch)
    rows = pool.rows.to(dev)
    idx = torch.tensor([s + 1 if s >= 0 else 0 for s in slots(case)], dtype=torch.int64).to(dev)
    initial = rows[idx].contiguous()
    o, final = fn(q=q, k=k, v=v, g=g, beta=beta, scale=None, initial_state=initial,
                  output_final_state=True, cu_seqlens=cu,
                  use_qk_l2norm_in_kernel=case.param("l2", "1") == "1")
    rows[idx] = final.to(rows.dtype)
    pool.rows = rows.cpu()
    out = {"o": o.reshape(case.inputs["v"].shape)}
    out["state_pool" if "state_pool" in case.inputs else "final_state"] = pool.case_states()
    return out


def main():
    ap = dc.parser(__doc__)
    ap.add_argument("--fn", choices=sorted(FUNCTIONS), default="fused-recurrent",
                    help="which of vLLM's kernels runs")
    ap.add_argument("--device", choices=("auto", "cuda", "interpreter"), default="auto",
                    help="cuda, or interpreter (CPU tensors under Triton's interpreter, "
                         "triton_cpu.py); auto: cuda when torch sees a GPU")
    ap.add_argument("--wrong", choices=("accepted-without-bonus",),
                    help="a deliberate adapter bug (spec, accept): deltacheck must flag it")
    return dc.adapter_main(ap, lambda a: resolve(a.fn, a.device, a.wrong), answer)


def answer(args, inp, out_path):
    case = dc.Case(inp)
    if case.op != "gdr":
        dc.decline(out_path, f"vllm_gdr.py implements the op gdr only, not {case.op}")
        return
    cache = case.param("cache")
    if args.fn == "chunk" and cache in ("spec", "accept"):
        dc.decline(out_path, f"cache={cache}: vLLM's chunk_gated_delta_rule writes no per-token "
                             "states (vLLM verifies drafts with the recurrent kernel)")
        return
    if cache not in ("none", "prefill", "decode", "chunked", "dynamic", "pool", "spec", "accept"):
        why = ("its block checkpoints come from FlashInfer's chunked prefill" if cache == "ckpt"
               else "its verify takes chains of drafts, no parent indices")
        dc.decline(out_path, f"cache={cache}: no such call in vLLM's use of these kernels ({why})")
        return
    fn, facts = resolve(args.fn, args.device, args.wrong)  # imported once per process
    if fn is None:
        dc.decline(out_path, facts)
        return
    import torch
    torch.set_num_threads(int(os.environ.get("DELTACHECK_PEER_THREADS", "1")))
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # NaN-filled torch.empty
    dev = torch.device("cuda" if facts["device"] == "cuda" else "cpu")
    run = (run_chunk if args.fn == "chunk" else
           run_accept if cache == "accept" else run_fused_recurrent)
    try:
        with torch.no_grad():
            values = run(case, fn, dev, args.wrong)
    except AssertionError as e:  # vLLM's own input checks
        dc.decline(out_path, f"vLLM's {FUNCTIONS[args.fn]} refuses this input: {e}", facts)
        return
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dc.write_tensors(out_path, case, values, facts)


if __name__ == "__main__":
    sys.exit(main())
