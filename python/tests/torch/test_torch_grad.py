"""Gradients through the Python route (docs/python.md, "Gradients"): gdr_grad cases judge a torch
forward's gradients, taken by torch.autograd.grad. A user's 10-line test file
(test_user_grad.py) checks the correct recurrence of user_kernels.py on the gate suite's 34 fp32
gdr_grad cases; kernels written wrong for the test get their verdicts per case class: the state
not reset at sequence boundaries leaks on multi-sequence cases (fail on context-parallel cases,
which have no probes; tail cases are probed without their tail), running through the padding tail
is flagged on exactly the tail cases (fail, or leak where the tail's gradient reaches the last
sequence), a forward without an
autograd path is an error, a detached input fails on its gradient alone. Conventions without
gradients (vllm, a declared no_grad) are unsupported with their reason."""
import re

import deltacheck as dc
import user_kernels
from test_torch_route import run_user_file

FP32 = [r"^gdr_grad\(", "dtype=fp32"]  # test_user_grad.py's selection
TAIL = r"^gdr_grad\(.*,tail=[1-9]"


def carries_state(case_id):
    """Whether a state carried from one sequence to the next reaches an output: two sequences
    or more, and a later one with tokens or a gradient of the final states (dht)."""
    lengths = dc.sequence_lengths(case_id)
    return len(lengths) >= 2 and (any(lengths[1:]) or "dht=rand" in case_id)


def has_tail(case_id):
    return ",tail=0," not in case_id


def is_cp(case_id):
    """A context-parallel case: two calls, judged without repacking (a wrong one reads fail)."""
    return ",cp=" in case_id


def test_correct_kernel_gradients_pass(tmp_path):
    proc, cases = run_user_file("recurrent_gdr", tmp_path, "test_user_grad.py")
    assert proc.returncode == 0, proc.stdout[-3000:]
    ids = dc.select("gate", FP32)
    assert 25 <= len(cases) == len(ids) and sum(map(has_tail, ids)) >= 3
    assert all(outcome == "passed" for outcome, _ in cases.values()), proc.stdout[-3000:]


def test_state_not_reset_leaks_on_multi_sequence_cases():
    res = dc.check(user_kernels.recurrent_gdr_no_reset, "gate", filter=FP32)
    leaks = 0
    for r in res:
        if not carries_state(r.case_id):
            assert r.verdict == "pass", r.line()
        elif is_cp(r.case_id):  # no probes: not confirmed alone
            assert r.verdict == "fail", r.line()
        else:
            # a gradient leaks backwards too: seq 0 takes a later sequence's state gradient
            assert r.verdict == "leak", r.line()
            assert re.search(r"right alone|alone passes|probe \w+: seq \d+ moved", r.line()), \
                r.line()
            leaks += 1
    assert leaks >= 15


def test_running_through_the_tail_is_flagged_on_the_tail_cases():
    ids = dc.select("gate", TAIL) + dc.select("gate", FP32, case=None)[:2]
    res = dc.check(user_kernels.recurrent_gdr_through_tail, case=ids)
    for r in res:
        if has_tail(r.case_id):
            assert "past cu_seqlens[-1]" in r.line(), r.line()
            if r.verdict == "leak":  # the tail's state gradient reached the last sequence
                assert re.search(r"probe \w+: (leak )?seq \d+ moved", r.line()), r.line()
            else:
                assert r.verdict == "fail", r.line()
        else:  # the same as the correct kernel there, probes included
            assert r.verdict == "pass", r.line()
    assert sum(r.verdict != "pass" for r in res) == 5
    packed = res[dc.select("gate", FP32)[0]]
    assert "packed[63,0,65]" in packed.case_id
    assert {p.name for p in packed.probes} >= {"repeat", "isolation", "alone", "order"}
    assert all(p.verdict == "pass" for p in packed.probes)


def test_a_forward_without_autograd_path_is_an_error():
    res = dc.check(user_kernels.recurrent_gdr_no_autograd, "gate",
                   filter=FP32 + [r"seed=(1|7|28)\)"])
    assert len(res) == 3, res.summary()
    for r in res:
        assert r.verdict == "error", r.line()
        assert "o has no autograd path (no grad_fn)" in r.message, r.line()


def test_an_unused_input_gets_zero_gradients():
    case = dc.select("gate", FP32)[0]
    (r,) = dc.check(user_kernels.recurrent_gdr_detached_gate, case=case)
    assert r.verdict == "fail", r.line()
    bad = {t.name for t in r.tensors if not t.ok}
    assert bad == {"dg"}, r.line()  # the others are right: only g's gradient is missing


def several_states_in_a_row(case_id):
    """A packed row whose sequences have initial states (a cp case has them even with state=none:
    rank 1 starts from the state at the cut)."""
    return ("layout=packed" in case_id and len(dc.sequence_lengths(case_id)) > 1
            and ("state=none" not in case_id or is_cp(case_id)))


def transformers_gdr_without_cu(q, k, v, g, beta, initial_state=None, output_final_state=False,
                                use_qk_l2norm_in_kernel=False):
    """Transformers' torch fallback signature: no cu_seqlens, one state per batch row."""
    return user_kernels.transformers_gdr(q, k, v, g, beta, initial_state, output_final_state,
                                         use_qk_l2norm_in_kernel)


def test_conventions():
    ids = dc.select("gate", FP32, case=None)
    # a function that takes cu_seqlens gets every sequence's state, cp ranks included
    res = dc.check(user_kernels.transformers_gdr, case=ids, convention="transformers")
    assert res.ok and {r.verdict for r in res} == {"pass"}, res.summary()
    assert sum(map(is_cp, ids)) >= 3 and sum(map(several_states_in_a_row, ids)) >= 10
    # one without it holds one state per row: several in a row are declined with the reason, not
    # judged (the kernel is not wrong); rows without states still show its packing leak
    res = dc.check(transformers_gdr_without_cu, case=ids, convention="transformers")
    for r in res:
        if several_states_in_a_row(r.case_id):
            assert r.verdict == "unsupported" and "one state per batch row" in r.message, r.line()
        elif "layout=packed" not in r.case_id or not carries_state(r.case_id):
            # a tail: it runs the padding as part of the row's last sequence (fail, or leak where
            # the padding's gradient reaches that sequence)
            assert r.verdict == "pass" or (r.verdict in ("fail", "leak") and has_tail(r.case_id)), \
                r.line()
        else:
            assert r.verdict in ("leak", "fail"), r.line()
    assert sum(r.verdict == "unsupported" for r in res) >= 10, res.summary()
    fwd = dc.select("gate", [r"^gdr\(layout=packed", "dtype=fp32", "state=none"], case=None)
    res = dc.check(transformers_gdr_without_cu, case=fwd, convention="transformers")
    assert fwd and {r.verdict for r in res} == {"leak"}, res.summary()
    (r,) = dc.check(user_kernels.recurrent_gdr, case=ids[0], convention="vllm")
    assert r.verdict == "unsupported" and "inplace_final_state" in r.message, r.line()

    @dc.convention("inference_only", no_grad="my kernel has no backward")
    def inference_only(fn, c):
        return dc.conventions.fla.call(fn, c)

    (r,) = dc.check(user_kernels.recurrent_gdr, case=ids[0], convention="inference_only")
    assert r.verdict == "unsupported" and "my kernel has no backward" in r.message, r.line()
    (r,) = dc.check(user_kernels.recurrent_gdr, case=ids[0], framework="numpy")
    assert r.verdict == "unsupported" and "NumPy callable has no gradients" in r.message
