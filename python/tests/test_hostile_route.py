"""Issue #35, the in-process route against hostile callables (hostile_callables.py): arrays a
kernel keeps stay valid and harmless (P1), a callable that exits the process is its case's error,
not a green session (P2), exception texts that are not valid UTF-8 keep type, message and frame
(P3), and isolate=True contains crashes, exits and hangs, one case each (P4)."""
import os
import subprocess
import sys

import pytest

import deltacheck as dc
from deltacheck.examples import recurrent_gdr

import hostile_callables as hc

HERE = os.path.dirname(os.path.abspath(__file__))
PACKED = hc.PACKED                                             # cu_seqlens of 4 entries
LATER = "gdr(layout=single[64],dtype=fp32,gate=strong,seed=7)"  # runs after it, must pass


def run_scenario(name):
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(HERE, "hostile_callables.py"), name],
                       env=env, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def test_kept_input_arrays_keep_their_values():
    rc, out = run_scenario("kept_inputs")
    assert rc == 0 and out.rstrip().endswith("ok"), (rc, out[-3000:])


def test_kept_output_arrays_written_after_the_run_corrupt_nothing():
    rc, out = run_scenario("kept_outputs_written_later")
    assert rc == 0 and out.rstrip().endswith("ok"), (rc, out[-3000:])


def on_the_packed_case(misbehave):
    """A correct kernel that misbehaves on PACKED's calls alone (three sequences, 128 tokens):
    the case after it must still pass."""
    def fn(**kw):
        cu = kw.get("cu_seqlens")
        if cu is not None and len(cu) == 4 and kw["q"].shape[1] == 128:
            misbehave(**kw)
        return recurrent_gdr(**kw)
    return fn


@pytest.mark.parametrize("misbehave, reason", [
    (hc.segfaults, "crashed with SIGSEGV (Segmentation fault)"),
    (hc.kills_itself, "crashed with SIGSEGV (Segmentation fault)"),
    (hc.calls_os_exit, "the callable called os._exit(0) (at hostile_callables.py:"),
    (hc.calls_sys_exit, "SystemExit: 0 (at hostile_callables.py:"),
    (hc.loops_forever, "timed out after 2 s (killed)"),
])
def test_isolate_makes_a_crash_an_exit_or_a_hang_the_case_error(misbehave, reason):
    res = dc.check(on_the_packed_case(misbehave), case=[PACKED, LATER], framework="numpy",
                   isolate=True, timeout=2)
    first, later = res
    assert first.verdict == "error" and reason in first.message, first.line()
    assert later.verdict == "pass", later.line()
    assert res.calls >= 2 and res.seconds_callable > 0  # counted in the children


def test_a_correct_callable_passes_the_smoke_cases_isolated():
    plain = dc.check(recurrent_gdr, suite="smoke", filter=r"^gdr\(", framework="numpy")
    isolated = dc.check(recurrent_gdr, suite="smoke", filter=r"^gdr\(", framework="numpy",
                        isolate=True, timeout=60)
    assert isolated.ok, isolated.summary()
    assert [r.verdict for r in isolated] == [r.verdict for r in plain]
    assert isolated.calls == plain.calls


def test_a_timeout_needs_isolation():
    with pytest.raises(ValueError, match="timeout needs isolate=True"):
        dc.check(recurrent_gdr, case=PACKED, framework="numpy", timeout=5)


def test_sys_exit_in_process_is_the_case_error_with_its_type():
    (r,) = dc.check(hc.calls_sys_exit, case=PACKED, framework="numpy")
    assert r.verdict == "error", r.line()
    assert "SystemExit: 0 (at hostile_callables.py:" in r.message, r.line()


def test_an_exception_text_with_a_lone_surrogate_keeps_type_message_and_frame():
    (r,) = dc.check(hc.surrogate_message, case=PACKED, framework="numpy")
    assert r.verdict == "error", r.line()
    assert "ValueError: bad byte \\udcff here (at hostile_callables.py:" in r.message, r.line()


def importable_here(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_os_exit_under_plain_pytest_is_a_failed_case_not_a_green_session(pytester, monkeypatch):
    importable_here(monkeypatch)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                        "--deltacheck=hostile_callables:calls_os_exit",
                                        f"--deltacheck-case={PACKED}", f"--deltacheck-case={LATER}",
                                        "--deltacheck-framework=numpy")
    out = res.stdout.str()
    assert res.ret != 0, out
    assert res.parseoutcomes().get("failed") == 2, out
    assert "the callable called os._exit(0)" in out, out


def test_pytest_options_isolate_and_timeout(pytester, monkeypatch):
    importable_here(monkeypatch)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                        "--deltacheck=hostile_callables:loops_forever",
                                        f"--deltacheck-case={PACKED}", "--deltacheck-isolate",
                                        "--deltacheck-timeout=2", "--deltacheck-framework=numpy")
    out = res.stdout.str()
    assert res.ret == 1 and res.parseoutcomes().get("failed") == 1, out
    assert "timed out after 2 s (killed)" in out, out
