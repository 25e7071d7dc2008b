"""deltacheck.check on NumPy kernels (no torch needed): verdicts come from the C++ runner exactly
as for `deltacheck run`; the route reports what the callable did wrong."""
import json

import numpy as np
import pytest

import deltacheck as dc
from deltacheck.examples import recurrent_gdr, recurrent_gdr_no_reset

SMOKE_GDR = dict(suite="smoke", filter=r"^gdr\(", framework="numpy")
PACKED = "gdr(layout=packed[63,0,65],dtype=fp32,gate=strong,seed=7)"


def nonempty_sequences(result):
    return sum(1 for n in result.seq_lengths if n > 0)


def test_correct_kernel_passes_every_supported_case():
    res = dc.check(recurrent_gdr, **SMOKE_GDR)
    verdicts = {r.verdict for r in res}
    assert res.ok, res.summary()
    assert verdicts == {"pass", "unsupported"}, res.summary()
    # unsupported: exactly the slot-pool modes (pool, spec, and the serving contracts ckpt,
    # accept and tree, docs/serving.md), which the fla convention cannot express
    slot_modes = ("cache=pool", "cache=spec", "cache=ckpt", "cache=accept", "cache=tree")
    for r in res:
        if r.verdict == "unsupported":
            assert any(m in r.case_id for m in slot_modes), r.line()
    assert len(res) == len(dc.select("smoke", r"^gdr\("))
    assert res.seconds_callable > 0 and res.calls > len(res)  # probes call it again


def test_state_not_reset_leaks_on_every_multi_sequence_case():
    res = dc.check(recurrent_gdr_no_reset, **SMOKE_GDR)
    assert not res.ok
    for r in res:
        if r.verdict == "unsupported":
            continue
        if nonempty_sequences(r) >= 2:
            assert r.verdict == "leak", r.line()
            assert r.leak_seq >= 1 and "alone passes" in r.line()
        else:
            assert r.verdict == "pass", r.line()
    text = res.summary()
    assert "LEAK" in text and "seq 1 from token 0" in text
    assert "rerun: dc.check(recurrent_gdr_no_reset, case='gdr(" in text


def test_one_case_by_id_and_its_result():
    res = dc.check(recurrent_gdr_no_reset, case=PACKED, framework="numpy")
    (r,) = res
    assert r.case_id.startswith("gdr(layout=packed[63,0,65],") and r.verdict == "leak"
    assert res[r.case_id] is not None and res[0].verdict == "leak"
    o = next(t for t in r.tensors if t.name == "o")
    assert [s.ok for s in o.seqs] == [True, True, False]  # seq 2 wrong (seq 1 is empty)
    (good,) = dc.check(recurrent_gdr, case=PACKED, framework="numpy")
    assert good.verdict == "pass" and {p.name for p in good.probes} >= {"isolation", "alone"}


def test_report_files_carry_the_rerun_line(tmp_path):
    res = dc.check(recurrent_gdr_no_reset, case=PACKED, framework="numpy")
    res.to_report(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "junit.xml", "report.html", "report.json", "summary.md"]
    report = json.loads((tmp_path / "report.json").read_text())
    (entry,) = report["results"]
    assert entry["verdict"] == "leak"
    assert entry["rerun"].startswith("dc.check(recurrent_gdr_no_reset, case='gdr(")
    assert "unwritten outputs: NOT detectable" in report["run"]["command"]


def test_a_zero_length_sequence_alone_is_probed_on_the_python_route():
    # The alone probe runs a pack's empty sequence as single[0], a case no user may give (the
    # zero-token rule); the route reads the probe's id back and must not hold it to that rule.
    case = ("gdr(layout=packed[0,37,64],H=2,HV=4,K=64,V=64,dtype=fp32,gate=strong,state=mixed,"
            "cache=dynamic,seed=137)")
    (r,) = dc.check(recurrent_gdr, case=case, framework="numpy")
    assert r.verdict == "pass", r.line()
    assert "alone" in {p.name for p in r.probes}


def test_a_sharded_report_records_its_shard(tmp_path):
    # report merge holds each shard to the cases it selected: a shard's report must say which.
    res = dc.check(recurrent_gdr, suite="smoke", filter=r"^gdr\(layout=packed", shard=(1, 3),
                   framework="numpy", probes=False)
    res.to_report(tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["run"]["shard"] == {"index": 1, "count": 3}
    selected = report["selected_cases"]
    assert len(report["results"]) == len(range(1, selected, 3)) > 0


def _kernel(**overrides):
    def fn(**kw):
        o, s = recurrent_gdr(**kw)
        return overrides.get("result", lambda o, s, kw: (o, s))(o, s, kw)
    return fn


@pytest.mark.parametrize("result, message", [
    (lambda o, s, kw: (o[:, :-1], s), "output o: shape"),
    (lambda o, s, kw: (o, None), "returned no final_state"),
    (lambda o, s, kw: 1 / 0, "ZeroDivisionError: division by zero (at test_check.py:"),
])
def test_a_malformed_or_crashing_callable_is_an_error(result, message):
    fn = _kernel(result=result)
    (r,) = dc.check(fn, case=PACKED, framework="numpy", probes=False)
    assert r.verdict == "error" and message in r.message, r.line()


def test_writing_into_an_input_is_an_error():
    def fn(**kw):
        kw["q"][0, 5, 1, 3] += 1.0
        return recurrent_gdr(**kw)
    (r,) = dc.check(fn, case=PACKED, framework="numpy", probes=False)
    assert r.verdict == "error", r.line()
    # [1, 128, H=2, K=64]: token 5, head 1, element 3 is flat element (5 * 2 + 1) * 64 + 3
    assert "wrote into its input 'q' (element 707 of 16384 changed" in r.message, r.line()


def test_unwritten_elements_are_caught_when_written_in_place():
    @dc.convention("in-place-test")
    def in_place(fn, c):
        fn(c.inputs, c.outputs)  # the kernel writes into deltacheck's (poisoned) buffers
        return c.outputs

    def half_written(inputs, outputs):
        kw = {k: inputs.get(k) for k in ("q", "k", "v", "g", "beta", "initial_state",
                                         "cu_seqlens")}
        o, s = recurrent_gdr(**kw, scale=64 ** -0.5, output_final_state=True,
                             use_qk_l2norm_in_kernel=True)
        outputs["o"][:, : o.shape[1] // 2] = o[:, : o.shape[1] // 2]
        outputs["final_state"][...] = s

    (r,) = dc.check(half_written, case=PACKED, framework="numpy", convention=in_place,
                    probes=False)
    assert r.verdict == "error" and "unwritten" in r.message, r.line()


def test_unsupported_raised_by_the_callable():
    def fn(**kw):
        raise dc.Unsupported("no fp32 in this kernel")
    (r,) = dc.check(fn, case=PACKED, framework="numpy")
    assert r.verdict == "unsupported" and r.message == "no fp32 in this kernel"


def vllm_style(q, k, v, g, beta, scale, initial_state, inplace_final_state, cu_seqlens,
               ssm_state_indices, use_qk_l2norm_in_kernel, num_accepted_tokens=None):
    """A slot-pool kernel on top of the recurrence: states gathered from and written back to
    initial_state[ssm_state_indices], padding entries (slot < 0) skipped; with
    num_accepted_tokens (speculative verify, [N, T] indices) one token at a time from row
    [i, num_accepted_tokens[i] - 1], each token's state into row [i, t]."""
    assert inplace_final_state
    if num_accepted_tokens is not None:
        idx, acc = np.asarray(ssm_state_indices), np.asarray(num_accepted_tokens)
        state = initial_state[idx[np.arange(len(acc)), acc - 1]]
        outs = []
        for t in range(q.shape[1]):
            o, state = recurrent_gdr(q=q[:, t:t + 1], k=k[:, t:t + 1], v=v[:, t:t + 1],
                                     g=g[:, t:t + 1], beta=beta[:, t:t + 1], scale=scale,
                                     initial_state=state, output_final_state=True, cu_seqlens=None,
                                     use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
            outs.append(o)
            initial_state[idx[:, t]] = state
        return np.concatenate(outs, axis=1), None
    slots = np.asarray(ssm_state_indices)
    live = slots >= 0
    o, s = recurrent_gdr(q=q, k=k, v=v, g=g, beta=beta, scale=scale,
                         initial_state=initial_state[np.where(live, slots, 0)],
                         output_final_state=True, cu_seqlens=cu_seqlens,
                         use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    initial_state[slots[live]] = s[live]
    return o, None


def test_vllm_convention_runs_the_pool_cases():
    res = dc.check(vllm_style, "smoke", filter=[r"^gdr\(", "cache=(pool|prefill)"],
                   convention="vllm", framework="numpy")
    verdicts = {r.case_id: r.verdict for r in res}
    assert any("cache=pool" in i for i in verdicts), verdicts
    assert set(verdicts.values()) == {"pass"}, res.summary()


def count_ignored(**kw):
    """vllm_style resuming every verify from row 0, whatever num_accepted_tokens says."""
    if kw.get("num_accepted_tokens") is not None:
        kw["num_accepted_tokens"] = np.ones_like(np.asarray(kw["num_accepted_tokens"]))
    return vllm_style(**kw)


def test_vllm_convention_runs_speculative_verify_and_catches_an_ignored_count():
    res = dc.check(vllm_style, "gate", filter=[r"^gdr\(", "cache=accept"], convention="vllm",
                   framework="numpy")
    assert len(res) >= 3 and {r.verdict for r in res} == {"pass"}, res.summary()
    res = dc.check(count_ignored, "gate", filter=[r"^gdr\(", "cache=accept", r"batch\[\d+x[2-9]"],
                   convention="vllm", framework="numpy")
    assert len(res) >= 3 and {r.verdict for r in res} == {"fail"}, res.summary()


def test_vllm_convention_replays_a_serving_scenario():
    # contract=accept: plain prefills, then verifies that resume from the accepted row themselves
    # (docs/scenarios.md); every call reaches the callable through the vllm convention.
    scenario = [r"^serve\(", "contract=accept"]
    res = dc.check(vllm_style, "gate", filter=scenario, convention="vllm", framework="numpy")
    assert len(res) >= 1 and {r.verdict for r in res} == {"pass"}, res.summary()
    res = dc.check(count_ignored, "gate", filter=scenario, convention="vllm", framework="numpy")
    assert {r.verdict for r in res} == {"fail"}, res.summary()
    for r in res:
        assert "(request " in r.message and ", call " in r.message and "verify" in r.message, \
            r.message


def test_a_declared_convention():
    @dc.convention("positional-test")
    def positional(fn, c):
        i = c.inputs
        o, s = fn(i["q"], i["k"], i["v"], i["g"], i["beta"], i.get("initial_state"),
                  i.get("cu_seqlens"), c.params["l2"] == "1")
        return {"o": o, "final_state": s}

    def mine(q, k, v, g, beta, h0, cu, l2):
        return recurrent_gdr(q=q, k=k, v=v, g=g, beta=beta, scale=q.shape[-1] ** -0.5,
                             initial_state=h0, output_final_state=True, cu_seqlens=cu,
                             use_qk_l2norm_in_kernel=l2)

    assert "positional-test" in dc.conventions.names()
    res = dc.check(mine, case=[PACKED, PACKED.replace("fp32", "bf16")],
                   convention="positional-test", framework="numpy")
    assert [r.verdict for r in res] == ["pass", "pass"], res.summary()


def test_selection_errors_are_one_line():
    with pytest.raises(ValueError, match="unknown"):
        dc.select("no-such-suite")
    with pytest.raises(ValueError, match="layout"):
        dc.check(recurrent_gdr, case="gdr(layout=oops)")
    with pytest.raises(ValueError, match="unknown convention 'nope'"):
        dc.check(recurrent_gdr, case=PACKED, convention="nope")


def test_the_expectation_cache_gives_the_same_results(tmp_path):
    regex = r"^gdr\(layout=packed"
    plain = dc.check(recurrent_gdr_no_reset, "smoke", filter=regex, framework="numpy")
    cold = dc.check(recurrent_gdr_no_reset, "smoke", filter=regex, framework="numpy",
                    cache_dir=tmp_path)
    warm = dc.check(recurrent_gdr_no_reset, "smoke", filter=regex, framework="numpy",
                    cache_dir=tmp_path)
    assert list(tmp_path.rglob("*.bin"))
    for a, b, c in zip(plain.results, cold.results, warm.results):
        assert a.case_id == b.case_id == c.case_id
        assert a.verdict == b.verdict == c.verdict, a.case_id
        assert a.message == b.message == c.message, a.case_id


def test_preparing_ahead_changes_nothing_but_the_waiting():
    """prepare_ahead (the default) prepares the next case on another thread while fn runs: the
    same results, and fn still sees the cases' calls one after the other, in case order."""
    ids = dc.select("smoke", r"^gdr\(")
    order = {case_id: i for i, case_id in enumerate(ids)}
    seen = []  # the case id of every call (the probes' calls carry their own variants' ids)

    @dc.convention("recording-fla", supports=dc.conventions.fla.supports)
    def recording(fn, c):
        seen.append(c.case_id)
        return dc.conventions.fla.call(fn, c)

    results, calls = {}, {}
    for ahead in (False, True):
        seen.clear()
        results[ahead] = dc.check(recurrent_gdr_no_reset, case=ids, framework="numpy",
                                  convention=recording, prepare_ahead=ahead)
        calls[ahead] = list(seen)
    assert calls[True] == calls[False]  # the same calls, in the same order
    first_calls = [order[i] for i in calls[True] if i in order]
    assert first_calls == sorted(first_calls) and len(calls[True]) > len(first_calls)
    assert {r.verdict for r in results[True]} == {"pass", "leak", "unsupported"}
    for a, b in zip(results[False], results[True]):
        assert (a.case_id, a.verdict, a.message) == (b.case_id, b.verdict, b.message)
        assert [p.detail for p in a.probes] == [p.detail for p in b.probes], a.case_id


def test_bf16_crosses_rounded_to_nearest_even():
    """The NumPy route's bf16: inputs widened exactly, outputs rounded to nearest even (ties to
    the even neighbour, a NaN stays a NaN), as deltacheck's generator and kernels round."""
    from deltacheck import _deltacheck as _dc
    values = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -2.5, np.nan, 3e38], np.float32)
    bits = np.zeros(values.shape, np.uint16)
    _dc.store_bf16(bits, values)
    assert bits[:3].tolist() == [0x3F80, 0x3F82, 0xC020]
    back = _dc.widen_bf16(bits)
    assert back.dtype == np.float32 and back.shape == values.shape
    assert back[:3].tolist() == [1.0, 1 + 2.0 ** -6, -2.5]
    assert np.isnan(back[3])  # not rounded into an infinity
    assert np.isfinite(back[4]) and abs(back[4] / 3e38 - 1) <= 2.0 ** -8
    with pytest.raises(ValueError, match="5 values for 4 elements"):
        _dc.store_bf16(np.zeros(4, np.uint16), values)


def test_fp16_outputs_are_rounded_as_numpy_rounds():
    """fp16 outputs are stored by the extension (NumPy's own cast is slower): the same bits as
    NumPy's float32 -> float16 (nearest even, subnormals, overflow to infinity), over random bit
    patterns and the edges."""
    from deltacheck import _deltacheck as _dc
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = [0.0, -0.0, 65504.0, 65519.99, 65520.0, -1e9, 5.96e-8, 2.98e-8, 2.99e-8, 6.09e-5,
             np.inf, -np.inf, np.nan]
    x = np.concatenate([x, np.array(edges, np.float32),
                        (rng.standard_normal(100_000) * 1e-5).astype(np.float32)])
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    got = np.empty_like(want)
    _dc.store_f16(got.view(np.uint16), x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    with pytest.raises(ValueError, match="3 values for 2 elements"):
        _dc.store_f16(np.zeros(2, np.uint16), x[:3])


def test_gradients_need_torch_and_a_differentiable_convention():
    # gdr_grad differentiates the callable with torch.autograd (docs/python.md, "Gradients")
    ids = dc.select("smoke", r"^gdr_grad\(")
    res = dc.check(recurrent_gdr, case=ids, framework="numpy")
    assert len(res) == len(ids) >= 1 and res.ok
    for r in res:
        assert r.verdict == "unsupported" and "NumPy callable has no gradients" in r.message
    (r,) = dc.check(recurrent_gdr, case=ids[0], framework="numpy", convention="vllm")
    assert r.verdict == "unsupported" and "inplace_final_state" in r.message, r.line()

    @dc.convention("no_backward", no_grad="the kernel has no backward")
    def no_backward(fn, c):
        return dc.conventions.fla.call(fn, c)

    (r,) = dc.check(recurrent_gdr, case=ids[0], framework="numpy", convention=no_backward)
    assert r.verdict == "unsupported", r.line()
    assert r.message == "the no_backward convention has no gradient: the kernel has no backward"


def test_bench_splits_the_time_cold_and_warm(capsys):
    """python -m deltacheck.bench: the per-call route and the per-case harness, with and without a
    filled expectation cache (--warm); a kernel that does not pass makes it exit 1."""
    from deltacheck import bench
    few = [r"^gdr\(layout=packed\[63,0,65\]"]
    assert bench.main(["--filter", few[0]]) == 0
    cold = capsys.readouterr().out
    assert bench.main(["--filter", few[0], "--warm"]) == 0
    warm = capsys.readouterr().out
    for out, label in ((cold, "no cache"), (warm, "warm cache")):
        assert label in out, out
        for line in ("route", "harness", "overhead", "ratio", "process CPU"):
            assert f"  {line}" in out, out
    assert bench.main(["--filter", few[0], "--warm",
                       "--kernel", "deltacheck.examples:recurrent_gdr_no_reset"]) == 1
    assert "did not pass" in capsys.readouterr().out
