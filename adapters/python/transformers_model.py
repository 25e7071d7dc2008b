#!/usr/bin/env python3
"""deltacheck peer check: a tiny random Qwen3.5 / Qwen3-Next / Kimi-Linear / Bamba (a Mamba2
hybrid) model as users run it, packed by
Transformers' DataCollatorWithFlattening and judged per sequence against the same sequences run
alone, and generate() with a static cache:

    $VENV/bin/python adapters/python/transformers_model.py            # every check, a table
    $VENV/bin/python adapters/python/transformers_model.py --out r.json --check packing
    $VENV/bin/python adapters/python/transformers_model.py --describe  # what would run

No weights are downloaded: each model is built from a config (4 layers: 3 linear (gated delta
rule, Kimi Delta Attention or Mamba2), 1 full_attention; hidden 64; vocab 128;
packing.py's tiny_config) with random weights from torch.manual_seed(seed), in fp32,
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
            on 5.5.0; transformers_versions.sh runs other versions, docs/peers.md).

The checks are python/src/deltacheck/packing.py's (dc.check_packing, dc.check_generate: the same
code from Python and pytest), loaded here by its path. The kernel packages (fla, causal_conv1d) are made unimportable in this process (as
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
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dc_protocol as dc  # noqa: E402
from transformers_gdr import kernel_packages  # noqa: E402


def packing_module():
    """python/src/deltacheck/packing.py, the check dc.check_packing runs, loaded by its path: the
    peers venv has torch and transformers but not deltacheck's extension."""
    path = os.path.join(HERE, "..", "..", "python", "src", "deltacheck", "packing.py")
    spec = importlib.util.spec_from_file_location("deltacheck_packing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pk = packing_module()
ARCHS = pk.ARCHS
COLLATORS = pk.COLLATORS
LENGTHS = pk.LENGTHS
SEED = 0


def packing_id(arch, collator):
    return (f"model(arch={arch},collator={collator},lengths={'+'.join(map(str, LENGTHS))},"
            f"seed={SEED})")


def generate_id(arch):
    return f"generate(arch={arch},cache=static,max_new_tokens=4,seed={SEED})"


def all_ids():
    return ([packing_id(a, c) for a in ARCHS for c in COLLATORS] +
            [generate_id(a) for a in ARCHS])


def facts():
    import torch
    import transformers
    return {"implementation": "transformers Qwen3_5ForCausalLM / Qwen3NextForCausalLM / "
                              "KimiLinearForCausalLM / BambaForCausalLM (tiny, "
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
        try:
            model = pk.tiny_model(arch, SEED)
        except AttributeError as e:  # an older Transformers without this model (4.57: no Qwen3.5)
            why = f"transformers {transformers.__version__} has no such model ({e})"
            ids = ([packing_id(arch, c) for c in COLLATORS if args.check != "generate"] +
                   [generate_id(arch)] * (args.check != "packing"))
            checks += [{"case_id": i, "verdict": "unsupported", "message": why} for i in ids]
            continue
        seqs = pk.default_sequences(LENGTHS, pk.VOCAB, SEED + 1)
        reference = pk.fp64_copy(model)
        if args.check in ("all", "packing"):
            report = pk.check_packing(model, seqs, list(COLLATORS), reference=reference,
                                      split_sequences=args.split_sequences)
            print(report.table())
            checks += [{"case_id": packing_id(arch, r.path), "verdict": r.verdict,
                        "message": r.message} for r in report]
        if args.check in ("all", "generate"):
            v, msg = pk.check_generate(model, seqs[0], 4, reference,
                                       cache_implementation="static")
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
        return dc.describe({"implementation": "tiny Qwen3.5 / Qwen3-Next / Kimi-Linear / "
                                              "Bamba models under "
                                              "DataCollatorWithFlattening; generate() with a "
                                              "static cache", "versions": versions,
                            "checks": all_ids()})
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
