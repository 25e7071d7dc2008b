#!/usr/bin/env python3
"""deltacheck peer check: a tiny random Qwen3.5 / Qwen3-Next model as users run it, packed by
Transformers' DataCollatorWithFlattening and judged per sequence against the same sequences run
alone, and generate() with a static cache:

    $VENV/bin/python adapters/python/transformers_model.py            # every check, a table
    $VENV/bin/python adapters/python/transformers_model.py --out r.json --check packing
    $VENV/bin/python adapters/python/transformers_model.py --describe  # what would run

No weights are downloaded: each model is built from a config (4 layers: 3 linear_attention, 1
full_attention; hidden 64; vocab 128) with random weights from torch.manual_seed(seed), in fp32,
and an fp64 copy of the same weights. Three token sequences (lengths 37, 50, 23, ids from a
seeded torch.Generator) go through the model the way SFT / RL trainers feed it:

  packing   DataCollatorWithFlattening(**options) on the three sequences, the model called on
            the collated batch (labels dropped, use_cache=False: a training forward), for each
            collator path:
              position_ids  DataCollatorWithFlattening()  (position_ids restart per sequence)
              flash         return_flash_attn_kwargs=True (cu_seq_lens_q/k, max_length_q/k too)
              seq_idx       return_seq_idx=True           (seq_idx too)
            Judged per sequence i, in deltacheck's terms: the oracle is the fp64 model on
            sequence i alone, the baseline the fp32 model on it alone; the packed logits of
            sequence i pass when max|packed - oracle| <= 2 * max|baseline - oracle| + 1e-6 *
            max|oracle| (the tolerance rule of docs/tolerance.md: at most twice a straightforward
            same-precision implementation's error, plus a floor). Verdicts: pass; leak (sequence
            0 passes, a later one does not: the first such sequence, its first token over the
            threshold and max|Δ| against it alone in fp32, the number a user compares); fail
            (sequence 0 itself is off); error (the forward raised: the message).
  generate  model.generate(ids, max_new_tokens=4, cache_implementation="static",
            do_sample=False) on sequence 0, against greedy decoding without any cache (the whole
            sequence recomputed per step): pass when the tokens agree and each step's logits
            (output_logits) are within the threshold above (fp64 recompute as the oracle); fail
            otherwise; error when it raises (the seed's reproduction: KeyError: 'linear_attention'
            on 4.57.6; not rerun here).

The kernel packages (fla, causal_conv1d) are made unimportable in this process (as
transformers_gdr.py does): the models run their plain PyTorch fallbacks, what a machine without
those packages runs. Every check is deterministic (fixed seeds, one thread) and takes seconds.

--out FILE writes {"checks": [{case_id, verdict, message}], "versions", "implementation"};
peers_check.py runs this script as the peer "transformers-model" (kind "script") and compares the
verdicts with adapters/python/expected-findings.json. Counterfactual, to show a verdict can
change (not pinned): --split-sequences feeds each collated sequence as its own row (its
input_ids and position_ids: what a model that kept the packed sequences apart would return):
every packing check passes.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402
from transformers_gdr import kernel_packages  # noqa: E402

ARCHS = ("qwen3_5", "qwen3_next")
COLLATORS = {"position_ids": {}, "flash": {"return_flash_attn_kwargs": True},
             "seq_idx": {"return_seq_idx": True}}
LENGTHS = (37, 50, 23)
VOCAB = 128
SEED = 0


def packing_id(arch, collator):
    return (f"model(arch={arch},collator={collator},lengths={'+'.join(map(str, LENGTHS))},"
            f"seed={SEED})")


def generate_id(arch):
    return f"generate(arch={arch},cache=static,max_new_tokens=4,seed={SEED})"


def all_ids():
    return ([packing_id(a, c) for a in ARCHS for c in COLLATORS] +
            [generate_id(a) for a in ARCHS])


def build(arch):
    """(fp32 model, fp64 model with the same weights), random from SEED."""
    import torch
    import transformers as tf
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                  linear_value_head_dim=16, linear_conv_kernel_dim=4,
                  layer_types=["linear_attention"] * 3 + ["full_attention"],
                  max_position_embeddings=256, pad_token_id=0, eos_token_id=None,
                  bos_token_id=None)
    if arch == "qwen3_5":
        config, model = tf.Qwen3_5TextConfig(**common), tf.Qwen3_5ForCausalLM
    else:
        config = tf.Qwen3NextConfig(**common, num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=32,
                                    shared_expert_intermediate_size=32)
        model = tf.Qwen3NextForCausalLM
    config._attn_implementation = "sdpa"
    config._experts_implementation = "eager"  # the per-expert loop: grouped_mm has no fp64
    torch.manual_seed(SEED)
    m32 = model(config).eval()
    m64 = model(config).eval()
    m64.load_state_dict(m32.state_dict())
    return m32, m64.double()


def sequences():
    import torch
    g = torch.Generator().manual_seed(SEED + 1)
    return [torch.randint(1, VOCAB, (n,), generator=g) for n in LENGTHS]


def threshold(baseline_err, oracle):
    return 2 * baseline_err + 1e-6 * float(oracle.abs().max())


def judge(packed, alone32, alone64):
    """(verdict, message) of packed logits [T, vocab] against each sequence alone."""
    rows, first_bad, cu = [], None, [0]
    for n in LENGTHS:
        cu.append(cu[-1] + n)
    for i, (a32, a64) in enumerate(zip(alone32, alone64)):
        p = packed[cu[i]:cu[i + 1]].double()
        err = (p - a64).abs().amax(dim=-1)
        thr = threshold(float((a32.double() - a64).abs().max()), a64)
        vs_fp32 = float((packed[cu[i]:cu[i + 1]] - a32).abs().max())
        ok = float(err.max()) <= thr
        rows.append(f"seq {i} max|Δ| {vs_fp32:.2e} {'ok' if ok else 'WRONG'}")
        if not ok and first_bad is None:
            token = int((err > thr).nonzero()[0])
            first_bad = (i, token, vs_fp32, float(err.max()), thr)
    table = "; ".join(rows)
    if first_bad is None:
        return "pass", table
    i, token, vs_fp32, err, thr = first_bad
    what = (f"seq {i} from token {token}, max|Δ| {vs_fp32:.2e} against it alone "
            f"({err:.2e} from fp64 > {thr:.2e}); {table}")
    return ("fail" if i == 0 else "leak"), what


def check_packing(arch, models, seqs, collator, split):
    import torch
    from transformers import DataCollatorWithFlattening
    m32, m64 = models
    alone32 = [m32(input_ids=s[None], use_cache=False).logits[0] for s in seqs]
    alone64 = [m64(input_ids=s[None], use_cache=False).logits[0] for s in seqs]
    collate = DataCollatorWithFlattening(**COLLATORS[collator])
    if split:  # the counterfactual: each collated sequence as its own row, boundaries kept
        parts = []
        for s in seqs:
            batch = collate([{"input_ids": s.tolist()}])
            parts.append(m32(input_ids=batch["input_ids"], position_ids=batch.get("position_ids"),
                             use_cache=False).logits[0])
        packed = torch.cat(parts)
    else:
        batch = collate([{"input_ids": s.tolist()} for s in seqs])
        batch.pop("labels")
        try:
            packed = m32(**batch, use_cache=False).logits[0]
        except Exception as e:  # the verdict error, with the message a user sees
            return "error", f"{type(e).__name__}: {e}"
    return judge(packed, alone32, alone64)


def check_generate(arch, models, seqs):
    import torch
    m32, m64 = models
    ids = seqs[0][None]
    try:
        out = m32.generate(ids, max_new_tokens=4, cache_implementation="static", do_sample=False,
                           output_logits=True, return_dict_in_generate=True)
    except Exception as e:
        return "error", f"{type(e).__name__}: {e}"
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    want, seq = [], ids
    worst = []
    for step in range(4):  # greedy without a cache: the whole sequence recomputed per step
        l32 = m32(input_ids=seq, use_cache=False).logits[0, -1]
        l64 = m64(input_ids=seq, use_cache=False).logits[0, -1]
        got = out.logits[step][0] if step < len(out.logits) else None
        if got is None:
            return "fail", f"generate returned {len(out.logits)} steps of logits, not 4"
        thr = threshold(float((l32.double() - l64).abs().max()), l64)
        worst.append((float((got.double() - l64).abs().max()), thr))
        nxt = int(l32.argmax())
        want.append(nxt)
        seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    detail = (f"tokens {tokens} (recomputed without a cache: {want}); step logits max|Δ| "
              + ", ".join(f"{e:.1e}" for e, _ in worst) + f" <= {max(t for _, t in worst):.1e}")
    if tokens != want or any(e > t for e, t in worst):
        return "fail", detail
    return "pass", detail


def facts():
    import torch
    import transformers
    return {"implementation": "transformers Qwen3_5ForCausalLM / Qwen3NextForCausalLM (tiny, "
                              "random from a config; plain PyTorch fallbacks: kernel packages "
                              "hidden) under DataCollatorWithFlattening, and generate() with a "
                              "static cache",
            "versions": dict({"transformers": transformers.__version__,
                              "torch": torch.__version__}, **kernel_packages(hide=False))}


def run(args):
    kernel_packages(hide=True)
    import torch
    import transformers
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()  # the fallbacks' "install ..." warnings
    info = facts()
    checks = []
    for arch in ARCHS:
        if args.arch and arch not in args.arch:
            continue
        models, seqs = build(arch), sequences()
        with torch.no_grad():
            if args.check in ("all", "packing"):
                for collator in COLLATORS:
                    v, msg = check_packing(arch, models, seqs, collator, args.split_sequences)
                    checks.append({"case_id": packing_id(arch, collator), "verdict": v,
                                   "message": msg})
            if args.check in ("all", "generate"):
                v, msg = check_generate(arch, models, seqs)
                checks.append({"case_id": generate_id(arch), "verdict": v, "message": msg})
    for c in checks:
        print(f"{c['verdict']:<12}{c['case_id']}\n{'':<12}{c['message']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(info, checks=checks), f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", choices=["all", "packing", "generate"], default="all")
    ap.add_argument("--arch", action="append", choices=ARCHS, help="only this model (repeatable)")
    ap.add_argument("--out", help="write the verdicts as JSON (peers_check.py reads them)")
    ap.add_argument("--split-sequences", action="store_true",
                    help="counterfactual: each collated sequence as its own batch")
    ap.add_argument("--describe", action="store_true", help="print what would run, as JSON")
    args = ap.parse_args()
    if args.describe:
        versions = {n: dc.package_version(n) for n in ("transformers", "torch")}
        if not all(versions.values()):
            return dc.describe({"unavailable": "transformers/torch not installed"})
        return dc.describe({"implementation": "tiny Qwen3.5 / Qwen3-Next models under "
                                              "DataCollatorWithFlattening; generate() with a "
                                              "static cache", "versions": versions,
                            "checks": all_ids()})
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
