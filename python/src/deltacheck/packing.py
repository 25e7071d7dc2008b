"""A model's packing path, checked per sequence: the model run on packed rows, as Transformers'
DataCollatorWithFlattening packs them for padding-free SFT / RL (position_ids restarting per
sequence, optionally the flash kwargs or seq_idx), against each sequence run alone.

    import deltacheck as dc
    print(dc.check_packing("qwen3_5"))            # a tiny random Qwen3.5: the seed's table
    print(dc.check_packing("kimi_linear"))        # also qwen3_next, bamba (a Mamba2 hybrid)
    res = dc.check_packing(my_model, sequences=[ids_a, ids_b], collator="flash")
    assert res.ok, res.table()

Judged in deltacheck's terms (docs/python.md#a-models-packing-path): for each sequence i the
oracle is an fp64 copy of the model on sequence i alone, the baseline the model as given on it
alone; the packed logits of sequence i pass when max|packed - oracle| <= 2 * max|baseline -
oracle| + 1e-6 * max|oracle| (docs/tolerance.md's rule: twice a same-precision run's error plus a
floor). Verdicts: pass; leak (sequence 0 passes and a later one does not: the first such
sequence, its first token over the threshold and max|Δ| against it alone, the number a user
compares); fail (sequence 0 itself is off); error (the forward raised: its message).

Pure Python over torch and transformers, both imported only when a check runs (importing
deltacheck imports neither); adapters/python/transformers_model.py (the peer check and the CLI)
loads this file by its path, so it imports nothing of the package either.
    python -m deltacheck.packing qwen3_5 [--collator flash] [--lengths 37,50,23] [--no-kernels]
"""
import copy

COLLATORS = {"position_ids": {}, "flash": {"return_flash_attn_kwargs": True},
             "seq_idx": {"return_seq_idx": True}}
PATH_NAMES = {"position_ids": "packed (position_ids only)", "flash": "packed (flash kwargs)",
              "seq_idx": "packed (seq_idx)"}
ARCHS = ("qwen3_5", "qwen3_next", "kimi_linear", "bamba")
LENGTHS = (37, 50, 23)
VOCAB = 128


KERNEL_MODULES = ("fla", "causal_conv1d")


def hide_kernel_packages():
    """Makes flash-linear-attention and causal-conv1d unimportable in this process (None in
    sys.modules; before transformers is imported): the models run their PyTorch fallbacks, what
    a machine without those packages runs (their Triton kernels need a GPU)."""
    import sys
    for name in KERNEL_MODULES:
        sys.modules.setdefault(name, None)


def tiny_config(arch="qwen3_5"):
    """A 4-layer config (3 linear layers, then 1 full_attention; hidden 64; vocab 128): the
    seed's kind of model, small enough for seconds on a CPU. kimi_linear: Kimi-Linear (Kimi
    Delta Attention, 4 heads of 16; MLA full attention; a 4-expert MoE); bamba: a Mamba2 hybrid
    (8 heads of 16, d_state 16, chunk 16; attention in layer 3)."""
    import transformers as tf
    tiny = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                num_attention_heads=4, max_position_embeddings=256, pad_token_id=0,
                eos_token_id=None, bos_token_id=None)
    if arch == "kimi_linear":
        return tf.KimiLinearConfig(**tiny, num_key_value_heads=4, kv_lora_rank=16,
                                   q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8,
                                   v_head_dim=16, moe_intermediate_size=32, num_local_experts=4,
                                   num_experts_per_tok=2, n_shared_experts=1,
                                   linear_head_dim=16, linear_num_heads=4,
                                   linear_conv_kernel_dim=4,
                                   layer_types=["linear_attention"] * 3 + ["full_attention"])
    if arch == "bamba":
        return tf.BambaConfig(**tiny, num_key_value_heads=2, attn_layer_indices=[3],
                              mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1,
                              mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                              mamba_chunk_size=16)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                  linear_value_head_dim=16, linear_conv_kernel_dim=4,
                  layer_types=["linear_attention"] * 3 + ["full_attention"],
                  max_position_embeddings=256, pad_token_id=0, eos_token_id=None,
                  bos_token_id=None)
    if arch == "qwen3_5":
        return tf.Qwen3_5TextConfig(**common)
    if arch == "qwen3_next":
        return tf.Qwen3NextConfig(**common, num_experts=4, num_experts_per_tok=2,
                                  moe_intermediate_size=32, shared_expert_intermediate_size=32)
    raise ValueError(f"unknown arch {arch!r}: expected one of {', '.join(ARCHS)}")


def from_config(config, seed=0):
    """A causal LM with random weights from torch.manual_seed(seed), in fp32, eval mode."""
    import torch
    import transformers as tf
    config._attn_implementation = "sdpa"
    config._experts_implementation = "eager"  # the per-expert loop: grouped_mm has no fp64
    torch.manual_seed(seed)
    return tf.AutoModelForCausalLM.from_config(config).float().eval()


def tiny_model(arch="qwen3_5", seed=0):
    return from_config(tiny_config(arch), seed)


def as_model(model, seed=0):
    """A model from a model, a config or an arch name."""
    if isinstance(model, str):
        return tiny_model(model, seed)
    if hasattr(model, "model_type") and not hasattr(model, "forward"):  # a PretrainedConfig
        return from_config(model, seed)
    return model


def default_sequences(lengths=LENGTHS, vocab=VOCAB, seed=1):
    """Token ids in [1, vocab) from a seeded torch.Generator, one tensor per length."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=g) for n in lengths]


def fp64_copy(model):
    return copy.deepcopy(model).double().eval()


def threshold(baseline_err, oracle):
    return 2 * baseline_err + 1e-6 * float(oracle.abs().max())


def seq_name(i):
    return "seq" + (chr(ord("A") + i) if i < 26 else str(i))


class SeqResult:
    """One sequence of the pack: max_abs (packed against it alone, the model's dtype), err
    (packed against the fp64 oracle), noise (alone against the oracle), threshold, first_token
    (the first over the threshold, or None)."""

    def __init__(self, index, length, max_abs, err, noise, thr, first_token):
        self.index, self.length, self.max_abs, self.err = index, length, max_abs, err
        self.noise, self.threshold, self.first_token = noise, thr, first_token

    @property
    def ok(self):
        return self.first_token is None


class PackingResult:
    """One packing path of one model: verdict, message, seqs (SeqResult each, empty on error),
    leak_seq / leak_token / leak_max_abs (as dc.check's results; None unless a leak or fail)."""

    def __init__(self, path, label, verdict, message, seqs=()):
        self.path, self.label, self.verdict, self.message = path, label, verdict, message
        self.seqs = list(seqs)
        bad = next((s for s in self.seqs if not s.ok), None)
        self.leak_seq = bad.index if bad else None
        self.leak_token = bad.first_token if bad else None
        self.leak_max_abs = bad.max_abs if bad else None

    @property
    def ok(self):
        return self.verdict == "pass"

    def __repr__(self):
        return f"<PackingResult {self.path}: {self.verdict}>"


class PackingReport:
    """Every path checked on one model: .ok, .results (a PackingResult per path, also by
    iterating or indexing by path name), .table() (also str()) the per-sequence table."""

    def __init__(self, model_name, lengths, noise, results):
        self.model_name, self.lengths, self.noise = model_name, list(lengths), noise
        self.results = list(results)

    @property
    def ok(self):
        return all(r.ok for r in self.results)

    def __iter__(self):
        return iter(self.results)

    def __len__(self):
        return len(self.results)

    def __getitem__(self, key):
        if isinstance(key, str):
            for r in self.results:
                if r.path == key:
                    return r
            raise KeyError(key)
        return self.results[key]

    def table(self):
        names = [f"{seq_name(i)} ({n})" for i, n in enumerate(self.lengths)]
        first = "max|Δ| against it alone"
        width = max(len(x) for x in [first, "alone (fp32 vs fp64 noise)"] +
                    [r.label for r in self.results]) + 2
        head = f"{first:<{width}}" + "".join(
            f"{n:<16}" for n in names) + "verdict"
        lines = [f"deltacheck packing: {self.model_name}, {len(self.lengths)} sequences", head,
                 f"{'alone (fp32 vs fp64 noise)':<{width}}" + "".join(
                     f"{e:<16.1e}" for e in self.noise)]
        for r in self.results:
            if not r.seqs:
                lines.append(f"{r.label:<{width}}{r.verdict.upper()}: {r.message}")
                continue
            cells = "".join(f"{s.max_abs:.1e} {'ok' if s.ok else 'WRONG':<8}" for s in r.seqs)
            tail = r.verdict.upper()
            if r.leak_seq is not None:
                tail += f" {seq_name(r.leak_seq)} from token {r.leak_token}"
            lines.append(f"{r.label:<{width}}{cells}{tail}")
        return "\n".join(lines)

    __str__ = table

    def __repr__(self):
        return f"<PackingReport {self.model_name}: " + ", ".join(
            f"{r.path} {r.verdict}" for r in self.results) + ">"


def judge(packed, alone, alone64):
    """(verdict, message, [SeqResult]) of packed logits [T, vocab] against each sequence alone
    (logits [n_i, vocab] in the model's dtype and in fp64)."""
    seqs, cu = [], 0
    for i, (a, a64) in enumerate(zip(alone, alone64)):
        n = a.shape[0]
        p = packed[cu:cu + n]
        cu += n
        noise = float((a.double() - a64).abs().max())
        thr = threshold(noise, a64)
        err = (p.double() - a64).abs().amax(dim=-1)
        over = (err > thr).nonzero()
        seqs.append(SeqResult(i, n, float((p - a).abs().max()), float(err.max()), noise, thr,
                              int(over[0]) if len(over) else None))
    table = "; ".join(f"seq {s.index} max|Δ| {s.max_abs:.2e} {'ok' if s.ok else 'WRONG'}"
                      for s in seqs)
    bad = next((s for s in seqs if not s.ok), None)
    if bad is None:
        return "pass", table, seqs
    what = (f"seq {bad.index} from token {bad.first_token}, max|Δ| {bad.max_abs:.2e} against it "
            f"alone ({bad.err:.2e} from fp64 > {bad.threshold:.2e}); {table}")
    return ("fail" if bad.index == 0 else "leak"), what, seqs


def collator_of(spec):
    """(path name, label, collate) of a collator spec: a name of COLLATORS, a dict of
    DataCollatorWithFlattening options, or a collate callable of your own."""
    from transformers import DataCollatorWithFlattening
    if isinstance(spec, str):
        if spec not in COLLATORS:
            raise ValueError(f"unknown collator {spec!r}: expected one of "
                             f"{', '.join(COLLATORS)}, a dict of DataCollatorWithFlattening "
                             "options or a collate callable")
        return spec, PATH_NAMES[spec], DataCollatorWithFlattening(**COLLATORS[spec])
    if isinstance(spec, dict):
        name = ",".join(f"{k}={v}" for k, v in spec.items()) or "position_ids"
        return name, f"packed ({name})", DataCollatorWithFlattening(**spec)
    if callable(spec):
        name = getattr(spec, "__name__", type(spec).__name__)
        return name, f"packed ({name})", spec
    raise ValueError(f"collator {spec!r}: expected a name, a dict or a callable")


def logits_of(out):
    return out.logits if hasattr(out, "logits") else out[0]


def run_packed(model, seqs, collate, split=False):
    """The model's logits [T, vocab] on the collated sequences (labels dropped, use_cache=False:
    a training forward). split: the counterfactual, each collated sequence as its own row
    (its input_ids and position_ids), what a model that kept the sequences apart returns."""
    import torch
    if split:
        parts = []
        for s in seqs:
            batch = collate([{"input_ids": s.tolist()}])
            parts.append(logits_of(model(input_ids=batch["input_ids"],
                                         position_ids=batch.get("position_ids"),
                                         use_cache=False))[0])
        return torch.cat(parts)
    batch = dict(collate([{"input_ids": s.tolist()} for s in seqs]))
    batch.pop("labels", None)
    return logits_of(model(**batch, use_cache=False))[0]


def check_packing(model, sequences=None, collator=("position_ids", "flash", "seq_idx"), *,
                  seed=0, split_sequences=False, reference=None):
    """Checks a model's packing path per sequence (module docstring). model: a causal LM (torch
    module returning .logits), a transformers config (random weights from seed) or an arch name
    (ARCHS: a tiny model). sequences: token id lists or 1-D tensors (default:
    lengths 37, 50, 23 from a seeded generator). collator: one spec or a list (collator_of).
    reference: the fp64 model (default: a deep copy of model in fp64). A PackingReport."""
    import torch
    model = as_model(model, seed)
    if sequences is None:
        vocab = getattr(getattr(model, "config", None), "vocab_size", VOCAB)
        sequences = default_sequences(vocab=vocab)
    seqs = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("check_packing: sequences must be non-empty token id lists")
    specs = [collator] if isinstance(collator, (str, dict)) or callable(collator) else collator
    paths = [collator_of(s) for s in specs]
    m64 = fp64_copy(model) if reference is None else reference
    with torch.no_grad():
        alone = [logits_of(model(input_ids=s[None], use_cache=False))[0] for s in seqs]
        alone64 = [logits_of(m64(input_ids=s[None], use_cache=False))[0].double() for s in seqs]
        noise = [float((a.double() - a64).abs().max()) for a, a64 in zip(alone, alone64)]
        results = []
        for name, label, collate in paths:
            try:
                packed = run_packed(model, seqs, collate, split_sequences)
            except Exception as e:  # the verdict error, with the message a user sees
                results.append(PackingResult(name, label, "error", f"{type(e).__name__}: {e}"))
                continue
            results.append(PackingResult(name, label, *judge(packed, alone, alone64)))
    return PackingReport(type(model).__name__, [len(s) for s in seqs], noise, results)


def check_generate(model, ids, max_new_tokens=4, reference=None, **generate_kwargs):
    """(verdict, detail): model.generate(ids, max_new_tokens, do_sample=False, **generate_kwargs,
    e.g. cache_implementation="static") against greedy decoding without any cache (the whole
    sequence recomputed per step): pass when the tokens agree and each step's logits are within
    the threshold (an fp64 recompute as the oracle); fail otherwise; error when it raises."""
    import torch
    m64 = fp64_copy(model) if reference is None else reference
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    with torch.no_grad():
        try:
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True,
                                 **generate_kwargs)
        except Exception as e:
            return "error", f"{type(e).__name__}: {e}"
        tokens = out.sequences[0, ids.shape[1]:].tolist()
        want, seq, worst = [], ids, []
        for step in range(max_new_tokens):
            if step >= len(out.logits):
                return "fail", (f"generate returned {len(out.logits)} steps of logits, not "
                                f"{max_new_tokens}")
            l32 = logits_of(model(input_ids=seq, use_cache=False))[0, -1]
            l64 = logits_of(m64(input_ids=seq, use_cache=False))[0, -1].double()
            thr = threshold(float((l32.double() - l64).abs().max()), l64)
            worst.append((float((out.logits[step][0].double() - l64).abs().max()), thr))
            want.append(int(l32.argmax()))
            seq = torch.cat([seq, torch.tensor([[want[-1]]])], dim=1)
    detail = (f"tokens {tokens} (recomputed without a cache: {want}); step logits max|Δ| "
              + ", ".join(f"{e:.1e}" for e, _ in worst) + f" <= {max(t for _, t in worst):.1e}")
    if tokens != want or any(e > t for e, t in worst):
        return "fail", detail
    return "pass", detail


def load(spec):
    """A model, config or arch name from 'MODULE:NAME' (a zero-argument callable is called) or
    an arch name."""
    import importlib
    if ":" not in spec:
        return spec
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if callable(obj) and not hasattr(obj, "forward") and not isinstance(obj, type):
        obj = obj()
    return obj


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m deltacheck.packing",
                                 description="check a model's packing path per sequence")
    ap.add_argument("model", help=f"{' or '.join(ARCHS)} (a tiny random model), or MODULE:NAME "
                                  "(a model, a config, or a function returning one)")
    ap.add_argument("--collator", action="append", choices=list(COLLATORS),
                    help="a DataCollatorWithFlattening path (repeatable; default: all)")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)),
                    help="the sequences' lengths (random token ids)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-kernels", action="store_true",
                    help="hide flash-linear-attention and causal-conv1d: the PyTorch fallbacks")
    args = ap.parse_args(argv)
    if args.no_kernels:
        hide_kernel_packages()
    try:
        lengths = [int(n) for n in args.lengths.split(",")]
        if any(n <= 0 for n in lengths):
            raise ValueError
    except ValueError:
        ap.error(f"--lengths {args.lengths!r}: expected positive integers, e.g. 37,50,23")
    try:
        model = as_model(load(args.model), args.seed)
    except (ImportError, AttributeError, ValueError) as e:
        ap.error(f"{args.model}: {type(e).__name__}: {e}")
    vocab = getattr(getattr(model, "config", None), "vocab_size", VOCAB)
    report = check_packing(model, default_sequences(lengths, vocab, args.seed + 1),
                           args.collator or list(COLLATORS), seed=args.seed)
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    import sys
    sys.exit(main())
