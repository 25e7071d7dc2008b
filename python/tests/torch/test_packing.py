"""dc.check_packing (python/src/deltacheck/packing.py): a model's packing path per sequence,
from Python, from the CLI (python -m deltacheck.packing) and under pytest (--deltacheck-model),
and the README's example as printed. Run in the peers venv (scripts/python-check.sh) with
flash-linear-attention and causal-conv1d hidden: their Triton kernels need a GPU."""
import os
import re
import subprocess
import sys
import textwrap

from deltacheck import packing

packing.hide_kernel_packages()

import transformers  # noqa: E402

import deltacheck as dc  # noqa: E402
from packing_models import PerSequence, per_sequence_model  # noqa: E402

transformers.logging.set_verbosity_error()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
HIDE = "import sys; sys.modules['fla'] = sys.modules['causal_conv1d'] = None\n"


def test_qwen3_5_position_ids_leaks_from_the_second_sequence():
    res = dc.check_packing("qwen3_5", collator="position_ids")
    r = res["position_ids"]
    assert r.verdict == "leak" and not res.ok
    assert (r.leak_seq, r.leak_token) == (1, 0)
    assert r.leak_max_abs > 1e3 * max(res.noise), (r.leak_max_abs, res.noise)
    assert r.seqs[0].ok and r.seqs[0].max_abs < 1e-5
    table = res.table()
    assert re.search(r"packed \(position_ids only\)\s+\S+ ok\s+\S+ WRONG\s+\S+ WRONG\s+LEAK seqB "
                     r"from token 0", table), table


def test_a_model_that_keeps_the_sequences_apart_passes_every_path():
    res = dc.check_packing(per_sequence_model())
    assert [r.verdict for r in res] == ["pass"] * 3, res.table()
    assert res.ok and "WRONG" not in res.table()


def test_split_sequences_counterfactual_passes():
    res = dc.check_packing("qwen3_next", collator="position_ids", split_sequences=True)
    assert res.ok, res.table()


def test_kimi_linear_and_a_mamba2_hybrid_leak_silently_with_the_flash_kwargs():
    # Qwen3.5 refuses the flash kwargs without FLA (error); Kimi-Linear and Bamba pass them on as
    # cu_seq_lens_q, which no dispatcher reads: the same leak as position_ids only
    for arch in ("kimi_linear", "bamba"):
        res = dc.check_packing(arch, collator=["position_ids", "flash", "seq_idx"])
        got = [(r.verdict, r.leak_seq, r.leak_token) for r in res]
        assert got == [("leak", 1, 0), ("leak", 1, 0), ("error", None, None)], res.table()
        assert "causal_conv1d" in res["seq_idx"].message
        assert res["flash"].leak_max_abs > 1e3 * max(res.noise), res.table()
        split = dc.check_packing(arch, collator="flash", split_sequences=True)
        assert split.ok, split.table()


def test_an_error_just_above_the_noise_is_caught():
    # 1e-4 on every logit of the second and third sequences: far below what a user sees in a
    # loss curve, far above fp32 noise (2e-7)
    res = dc.check_packing(PerSequence(packing.tiny_model("qwen3_5"), offset=1e-4),
                           collator="position_ids")
    r = res[0]
    assert (r.verdict, r.leak_seq, r.leak_token) == ("leak", 1, 0), res.table()
    wrong_first = dc.check_packing(PerSequence(packing.tiny_model("qwen3_5"), offset=1e-4,
                                               wrong_from=0), collator="position_ids")
    assert wrong_first[0].verdict == "fail" and wrong_first[0].leak_seq == 0


def test_own_sequences_config_and_collator_callable():
    config = packing.tiny_config("qwen3_5")
    seqs = [[5, 6, 7, 8, 9, 10], list(range(1, 20))]
    res = dc.check_packing(config, sequences=seqs, collator={"return_position_ids": True})
    assert res.lengths == [6, 19] and res[0].verdict == "leak", res.table()

    def broken(features):  # a collator whose batch the model cannot take: float token ids
        ids = transformers.DataCollatorWithFlattening()(features)["input_ids"]
        return {"input_ids": ids.float()}
    res = dc.check_packing(config, sequences=seqs, collator=broken)
    assert res[0].verdict == "error" and res[0].path == "broken", res.table()
    assert "ERROR: RuntimeError" in res.table() and not res.ok


def test_generate_with_a_static_cache_passes_and_a_lost_state_fails(monkeypatch):
    model = packing.tiny_model("qwen3_5")
    ids = packing.default_sequences()[0]
    verdict, detail = dc.check_generate(model, ids, cache_implementation="static")
    assert verdict == "pass", detail
    # the recurrent state dropped between decoding steps (every cache class that has it)
    from transformers import cache_utils
    patched = [c for c in vars(cache_utils).values()
               if isinstance(c, type) and "get_recurrent_state" in vars(c)]
    assert patched
    for cls in patched:
        monkeypatch.setattr(cls, "get_recurrent_state", lambda self, *a, **k: None)
    verdict, detail = dc.check_generate(model, ids, cache_implementation="static")
    assert verdict == "fail", detail


def run_py(args, cwd, code=None):
    cmd = [sys.executable] + (["-c", HIDE + code] if code else []) + args
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_cli(tmp_path):
    proc = run_py(["-m", "deltacheck.packing", "qwen3_5", "--collator", "position_ids",
                   "--no-kernels"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "LEAK seqB from token 0" in proc.stdout, proc.stdout
    proc = run_py(["-m", "deltacheck.packing", "qwen3_5", "--lengths", "3,x"], tmp_path)
    assert proc.returncode == 2 and "--lengths '3,x': expected positive integers" in proc.stderr


def test_pytest_option(tmp_path):
    (tmp_path / "conftest.py").write_text(HIDE)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def pytest(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
    proc = pytest("--deltacheck-model=qwen3_5", "--deltacheck-collator=position_ids")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "LEAK: seq 1 from token 0" in proc.stdout and "WRONG" in proc.stdout, proc.stdout
    assert "rerun: dc.check_packing('qwen3_5', collator='position_ids')" in proc.stdout
    proc = pytest("--deltacheck-model=packing_models:per_sequence_model")
    assert proc.returncode == 0 and "3 passed" in proc.stdout, proc.stdout[-2000:]
    proc = pytest("--deltacheck-model=qwen3_5", "--deltacheck-collator=nope")
    assert proc.returncode == 4 and "--deltacheck-collator=nope" in proc.stderr, proc.stderr


def readme_example():
    """The README's check_packing block and the output block after it."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- snippet illustration \(dc\.check_packing[^>]*-->\n```python\n(.*?)```\n"
                  r"\n?<!-- snippet illustration[^>]*-->\n```\n(.*?)```", text, re.S)
    assert m, "README.md: no dc.check_packing example followed by its output"
    return m.group(1), m.group(2)


def test_readme_example_runs_as_printed(tmp_path):
    """The README's block runs after its Python block (`import deltacheck as dc`); its output is
    matched line by line, the rounding-level numbers (below 1e-5: fp32 noise, which the CPU's
    instruction set may move in the last bits) as wildcards, the leak's max|Δ| as printed."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "docs"))
    from check_docs import output_matches
    code, expected = readme_example()
    expected = re.sub(r"\d\.\de-(0[6-9]|1\d)|0\.0e\+00", "...", expected.rstrip("\n"))
    proc = run_py([], tmp_path, code="import deltacheck as dc\n" + textwrap.dedent(code))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert output_matches(expected, proc.stdout) is None, (
        output_matches(expected, proc.stdout), proc.stdout)
