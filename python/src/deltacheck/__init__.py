"""deltacheck for Python kernels: checks a gated delta rule callable against deltacheck's cases,
FP64 oracle, tolerance, probes and verdicts, in-process (the C++ runner judges; this package
calls your function once per call of a case).

    import deltacheck as dc
    res = dc.check(chunk_gated_delta_rule, suite="gate", filter=r"^gdr\\(")
    assert res.ok, res.summary()

Under pytest, one test per case: `pytest --deltacheck=mypkg.ops:fn --deltacheck-suite=gate`, or
in a test file:

    @dc.cases("gate", filter=r"^gdr\\(")
    def test_my_kernel(case):
        case.check(my_kernel)

A model's packing path (DataCollatorWithFlattening's), each sequence against it alone:

    print(dc.check_packing("qwen3_5"))   # or your model, its config; sequences=, collator=

The manual: docs/python.md.
"""
from . import conventions
from ._check import Result, check, select
from ._deltacheck import sequence_lengths, short_id, tolerance_policy, version
from ._testing import Case, cases
from .conventions import Convention, Unsupported, convention
from .packing import PackingReport, check_generate, check_packing


def suites():
    """[(name, description)] of deltacheck's suites."""
    from ._deltacheck import suites as _suites
    return _suites()


__version__ = version()
__all__ = ["check", "select", "Result", "cases", "Case", "convention", "Convention",
           "conventions", "Unsupported", "suites", "sequence_lengths", "short_id",
           "tolerance_policy", "version", "check_packing", "check_generate", "PackingReport"]
