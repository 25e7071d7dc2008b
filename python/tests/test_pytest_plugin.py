"""The pytest plugin (entry point pytest11) and the deltacheck.cases decorator, run as a user
would: one test item per case id, -k / --lf / -x / JUnit / xdist, failures with the verdict's
reason line and the rerun lines."""
import importlib.util
import re

import pytest

import deltacheck as dc

LEAKY = "deltacheck.examples:recurrent_gdr_no_reset"
REGEX = r"^gdr\(.*packed\[(63,0,65|1\*12)\].*dtype=fp32"  # the pool case: unsupported
FILTER = f"--deltacheck-filter={REGEX}"


def expected_ids():
    return dc.select("smoke", REGEX)


def test_one_item_per_case_and_the_leak_reason(pytester):
    ids = expected_ids()
    assert any("cache=pool" in i for i in ids)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--deltacheck={LEAKY}",
                                        FILTER, "--deltacheck-framework=numpy", "-rA")
    out = res.stdout.str()
    outcomes = res.parseoutcomes()
    unsupported = [i for i in ids if re.search("cache=(pool|spec)", i)]
    assert outcomes.get("failed") == len(ids) - len(unsupported), out
    assert outcomes.get("skipped", 0) == len(unsupported), out
    assert f"LEAK        {LEAKY} " in out, out  # the backend is named as given
    assert "seq 2 from token 0, max|Δ|" in out and "seq 2 alone passes" in out, out
    assert "rerun: pytest 'deltacheck.examples:recurrent_gdr_no_reset::gdr(" in out, out
    assert "SKIPPED" in out and "unsupported: cache=pool" in out, out
    assert res.ret == 1


def test_k_lf_x_and_junit(pytester, tmp_path):
    ids = expected_ids()
    args = [f"--deltacheck={LEAKY}", FILTER, "--deltacheck-framework=numpy"]
    res = pytester.runpytest_subprocess(*args, "-k", "none and not prefill")
    assert res.parseoutcomes() == {"failed": 1, "deselected": len(ids) - 1}, res.stdout.str()
    res = pytester.runpytest_subprocess(*args, "--lf", "-x")
    assert res.parseoutcomes().get("failed") == 1, res.stdout.str()  # -x: stops at the first
    junit = tmp_path / "junit.xml"
    res = pytester.runpytest_subprocess(*args, "--lf", f"--junitxml={junit}")
    text = junit.read_text()
    assert text.count("<testcase") == 1 and "seq 2 from token 0" in text, text


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist missing")
def test_xdist(pytester):
    res = pytester.runpytest_subprocess(f"--deltacheck={LEAKY}", FILTER,
                                        "--deltacheck-framework=numpy", "-n", "2")
    unsupported = [i for i in expected_ids() if re.search("cache=(pool|spec)", i)]
    assert res.parseoutcomes().get("failed") == len(expected_ids()) - len(unsupported), \
        res.stdout.str()


def test_decorator_form(pytester):
    pytester.makepyfile(test_user=r'''
        import deltacheck as dc
        from deltacheck.examples import recurrent_gdr, recurrent_gdr_no_reset

        @dc.cases("smoke", filter=r"^gdr\(.*packed\[(63,0,65|1\*12)\].*dtype=fp32")
        def test_correct(case):
            case.check(recurrent_gdr, framework="numpy")

        @dc.cases("smoke", filter=r"^gdr\(.*packed\[(63,0,65|1\*12)\].*dtype=fp32")
        def test_leaky(case):
            case.check(recurrent_gdr_no_reset, framework="numpy")
    ''')
    n = len(expected_ids())
    unsupported = len([i for i in expected_ids() if re.search("cache=(pool|spec)", i)])
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    out = res.stdout.str()
    outcomes = res.parseoutcomes()
    assert outcomes["passed"] == outcomes["failed"] == n - unsupported, out
    assert outcomes.get("skipped", 0) == 2 * unsupported, out
    assert "rerun: pytest 'test_user.py::test_leaky[gdr(layout=packed[63,0,65]," in out, out
    assert "rerun: dc.check(recurrent_gdr_no_reset, case='gdr(" in out, out


def test_bad_options_are_usage_errors(pytester):
    res = pytester.runpytest_subprocess("--deltacheck=nomodule")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "expected MODULE:NAME" in res.stderr.str()
    res = pytester.runpytest_subprocess("--deltacheck=deltacheck.examples:missing")
    assert "AttributeError" in res.stderr.str() and res.ret == pytest.ExitCode.USAGE_ERROR
    res = pytester.runpytest_subprocess(f"--deltacheck={LEAKY}", "--deltacheck-profile=chunk=x")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--deltacheck-profile: bad profile choice 'chunk=x'" in res.stderr.str()


def test_a_declared_profile_is_in_the_rows(pytester):
    # The fp32 recurrence declares what it is (fp32 operands): judged as one, it passes; the
    # leaky one's failures show the profile with the callable's name.
    res = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--deltacheck=deltacheck.examples:recurrent_gdr", FILTER,
        "--deltacheck-framework=numpy", "--deltacheck-profile=operands=fp32")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str()
    res = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--deltacheck={LEAKY}", FILTER, "--deltacheck-framework=numpy",
        "--deltacheck-profile=operands=fp32")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    assert "[operands=fp32]" in res.stdout.str(), res.stdout.str()


def test_reruns_read_the_expectation_cache(pytester):
    # With pytest's cache (the default), the first run fills .pytest_cache/d/deltacheck-expectations
    # and a rerun gets the same outcomes from it; --cache-clear empties it.
    args = [f"--deltacheck={LEAKY}", FILTER, "--deltacheck-framework=numpy"]
    first = pytester.runpytest_subprocess(*args)
    cache = pytester.path / ".pytest_cache" / "d" / "deltacheck-expectations"
    entries = sorted(p.name for p in cache.rglob("*.bin"))
    assert entries, first.stdout.str()
    second = pytester.runpytest_subprocess(*args)
    assert second.parseoutcomes() == first.parseoutcomes(), second.stdout.str()
    assert "seq 2 from token 0, max|Δ|" in second.stdout.str()
    assert sorted(p.name for p in cache.rglob("*.bin")) == entries  # read, not rewritten
    off = pytester.runpytest_subprocess(*args, "--deltacheck-cache-dir=none", "--cache-clear")
    assert off.parseoutcomes() == first.parseoutcomes(), off.stdout.str()
    assert not list(cache.rglob("*.bin"))
