"""Test-file helpers: deltacheck.cases(...) parametrizes a pytest test with one Case per case id,
and Case.check(fn) runs that case on fn and turns its verdict into pytest's outcome."""
import os
import shlex

from ._check import _callable_name, cache_directory, isolation, make_backend, run_cases, select


def _failure_text(r, fn_label, convention, nodeid=None):
    lines = [r.line().rstrip("\n")]
    if nodeid:
        lines.append(f"            rerun: pytest {shlex.quote(nodeid)}")
    conv = "" if convention == "fla" else f", convention={convention!r}"
    lines.append(f"            rerun: dc.check({fn_label}, case={r.case_id!r}{conv})")
    return "\n".join(lines)


def _current_nodeid():
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    return current.rsplit(" (", 1)[0] if current else None


def run_case(case_id, fn, convention="fla", device="cpu", framework=None, probes=True,
             deterministic=True, name=None, cache_dir=None, isolate=False, timeout=None,
             profile=None):
    """One case on fn: the extension's CaseResult (isolate, timeout: as deltacheck.check's)."""
    isolate, timeout = isolation(isolate, timeout, device)
    backend, io, conv = make_backend(fn, convention, device, framework, name, deterministic,
                                     profile)
    (result,), _ = run_cases([case_id], backend, io, probes, None, cache_directory(cache_dir),
                             True, isolate, timeout)
    return result, conv.name


def outcome(result, fn_label, convention, nodeid=None):
    """Skips an unsupported or skipped result, fails a failing one (reason and rerun lines)."""
    import pytest
    if result.verdict in ("unsupported", "skipped"):
        pytest.skip(f"{result.verdict}: {result.message}")
    if result.failed:
        pytest.fail(_failure_text(result, fn_label, convention, nodeid), pytrace=False)


class Case:
    """A case id handed to a test by deltacheck.cases."""

    def __init__(self, case_id):
        self.id = case_id

    def __repr__(self):
        return self.id

    def run(self, fn, convention="fla", device="cpu", framework=None, probes=True,
            deterministic=True, isolate=False, timeout=None):
        """Runs the case on fn; the result (verdict, message, tensors, probes, line())."""
        return run_case(self.id, fn, convention, device, framework, probes, deterministic,
                        isolate=isolate, timeout=timeout)[0]

    def check(self, fn, convention="fla", device="cpu", framework=None, probes=True,
              deterministic=True, isolate=False, timeout=None):
        """Runs the case on fn under pytest: fails with the verdict's reason and the rerun
        lines, skips an unsupported case, returns the result of a pass. `isolate`, `timeout`:
        as deltacheck.check's."""
        result, conv = run_case(self.id, fn, convention, device, framework, probes,
                                deterministic, isolate=isolate, timeout=timeout)
        outcome(result, _callable_name(fn).rsplit(".", 1)[-1], conv, _current_nodeid())
        return result


def cases(suite="smoke", *, filter=None, exclude=None, case=None, seed=None, argname="case"):
    """pytest.mark.parametrize over the selected case ids (deltacheck.select's arguments): one
    test per case, named by its id, so -k, -x, --lf, xdist and JUnit see each case."""
    import pytest
    ids = select(suite, filter, exclude, case, seed)
    return pytest.mark.parametrize(argname, [Case(i) for i in ids], ids=ids)
