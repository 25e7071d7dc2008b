"""deltacheck's pytest plugin (entry point pytest11): one test item per case id for a callable
named on the command line,

    pytest --deltacheck=mypkg.ops:chunk_gated_delta_rule --deltacheck-suite=gate -n 2

and, for test files, the deltacheck.cases decorator (deltacheck/_testing.py). A failing item
shows the verdict's row and reason line (a leak: sequence, first wrong token, max |Δ|) and the
rerun lines; an unsupported case is skipped with its reason."""
import importlib
import os
import warnings

import pytest
from _pytest.runner import collect_one_node

from ._testing import outcome, run_case


def pytest_addoption(parser):
    g = parser.getgroup("deltacheck", "deltacheck: check a Python kernel against deltacheck's cases")
    g.addoption("--deltacheck", metavar="MODULE:FUNCTION",
                help="the callable to check, e.g. mypkg.ops:chunk_gated_delta_rule "
                     "(one test item per case)")
    g.addoption("--deltacheck-suite", default="smoke", metavar="SUITE",
                help="smoke (default), gate or full")
    g.addoption("--deltacheck-filter", action="append", default=[], metavar="REGEX",
                help="keep the case ids matching REGEX (repeatable: all must match)")
    g.addoption("--deltacheck-exclude", action="append", default=[], metavar="REGEX",
                help="drop the case ids matching REGEX (repeatable)")
    g.addoption("--deltacheck-case", action="append", default=[], metavar="ID",
                help="exactly this case id instead of a suite (repeatable)")
    g.addoption("--deltacheck-seed", type=int, default=None, help="replace every case's seed")
    g.addoption("--deltacheck-convention", default="fla",
                help="how a case becomes a call: fla (default), transformers, vllm, or "
                     "MODULE:NAME of a deltacheck.Convention")
    g.addoption("--deltacheck-device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    g.addoption("--deltacheck-framework", choices=["torch", "jax", "mlx", "numpy"], default=None,
                help="torch tensors (default when torch is importable), JAX or MLX arrays (default "
                     "when the kernel's module uses jax or mlx) or NumPy arrays")
    g.addoption("--deltacheck-profile", default=None, metavar="CHOICES",
                help="the callable's precision profile, e.g. chunk=128,cumsum=independent "
                     "(tf32, chunk=N, cumsum=independent, l2norm=act, operands=fp32, "
                     "autodiff=act)")
    g.addoption("--deltacheck-no-probes", action="store_true",
                help="skip the oracle-free leakage probes")
    g.addoption("--deltacheck-cache-dir", default=None, metavar="DIR",
                help="keep the cases' inputs, FP64 expectations and baselines in DIR across runs "
                     "(default: DELTACHECK_CACHE_DIR, else pytest's cache directory; 'none': off; "
                     "--cache-clear empties it)")
    g.addoption("--deltacheck-isolate", action="store_true",
                help="run each call of the callable in a child process: a crash, an exit or a "
                     "hang is that case's error and the session goes on")
    g.addoption("--deltacheck-timeout", type=float, default=None, metavar="SECONDS",
                help="with --deltacheck-isolate: kill a call after SECONDS (default 120)")
    g.addoption("--deltacheck-model", metavar="MODULE:NAME",
                help="check a model's packing path (torch, transformers): a model, a config or "
                     "a function returning one, or qwen3_5 / qwen3_next (a tiny random model); "
                     "one test item per collator path")
    g.addoption("--deltacheck-collator", action="append", default=[], metavar="PATH",
                help="with --deltacheck-model: position_ids, flash or seq_idx (repeatable; "
                     "default: all three)")


def _load(spec, what):
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise pytest.UsageError(f"--{what}={spec!r}: expected MODULE:NAME, e.g. mypkg.ops:fn")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise pytest.UsageError(f"--{what}={spec}: {type(e).__name__}: {e}") from None
    return obj


def _cache_dir(config):
    """--deltacheck-cache-dir, else DELTACHECK_CACHE_DIR, else a folder of pytest's cache (which
    --cache-clear empties), else none. The cache and its key file are opened here: a cache asked
    for that cannot be used is a usage error; pytest's own folder, when its key cannot be made
    (no writable home), leaves the cache off with a warning."""
    from ._deltacheck import check_cache
    d = config.getoption("deltacheck_cache_dir")
    if d is None:
        d = os.environ.get("DELTACHECK_CACHE_DIR")
    asked = d is not None
    if d is None and getattr(config, "cache", None) is not None:
        d = str(config.cache.mkdir("deltacheck-expectations"))
    if d is None or d == "none":
        return ""
    try:
        check_cache(d)
    except RuntimeError as e:
        if asked:
            raise pytest.UsageError(f"deltacheck: {e}") from None
        warnings.warn(f"deltacheck: the expectation cache is off: {e}")
        return ""
    return d


class DeltacheckItem(pytest.Item):
    def __init__(self, *, case_id, **kwargs):
        super().__init__(**kwargs)
        self.case_id = case_id

    def runtest(self):
        opts = self.parent.opts
        result, conv = run_case(self.case_id, self.parent.fn, opts["convention"], opts["device"],
                                framework=opts["framework"], probes=opts["probes"],
                                name=self.parent.name, cache_dir=opts["cache_dir"],
                                isolate=opts["isolate"], timeout=opts["timeout"],
                                profile=opts["profile"])
        self.user_properties.append(("verdict", result.verdict))
        outcome(result, self.parent.label, conv, self.nodeid)

    def reportinfo(self):
        return self.parent.label, None, f"deltacheck {self.case_id}"


class DeltacheckCollector(pytest.Collector):
    def __init__(self, *, fn, label, ids, opts, **kwargs):
        super().__init__(**kwargs)
        self.fn, self.label, self.ids, self.opts = fn, label, ids, opts

    def collect(self):
        # Explicit node ids: pytest parses a stored id (--lf's cache) at its first "[", and a
        # case id has brackets, so the item's id must be the parsed form of the same string.
        return [DeltacheckItem.from_parent(self, name=i, nodeid=f"{self.nodeid}::{i}", case_id=i)
                for i in self.ids]


class PackingItem(pytest.Item):
    """One collator path of --deltacheck-model: dc.check_packing's verdict, the table on failure."""

    def __init__(self, *, path, **kwargs):
        super().__init__(**kwargs)
        self.path = path

    def runtest(self):
        from .packing import as_model, check_packing
        parent = self.parent
        if parent.model is None:
            parent.model = as_model(parent.spec_obj)
        report = check_packing(parent.model, collator=self.path)
        self.user_properties.append(("verdict", report[0].verdict))
        if not report.ok:
            pytest.fail(f"{report[0].verdict.upper()}: {report[0].message}\n{report.table()}\n"
                        f"            rerun: dc.check_packing({parent.name!r}, "
                        f"collator={self.path!r})", pytrace=False)

    def reportinfo(self):
        return self.parent.name, None, f"deltacheck packing {self.path}"


class PackingCollector(pytest.Collector):
    def __init__(self, *, spec_obj, paths, **kwargs):
        super().__init__(**kwargs)
        self.spec_obj, self.paths, self.model = spec_obj, paths, None

    def collect(self):
        return [PackingItem.from_parent(self, name=p, nodeid=f"{self.nodeid}::{p}", path=p)
                for p in self.paths]


def _collect_packing(session, config, items):
    from .packing import COLLATORS, load
    spec = config.getoption("deltacheck_model")
    paths = config.getoption("deltacheck_collator") or list(COLLATORS)
    bad = [p for p in paths if p not in COLLATORS]
    if bad:
        raise pytest.UsageError(f"--deltacheck-collator={bad[0]}: expected one of "
                                f"{', '.join(COLLATORS)}")
    try:
        obj = load(spec)
    except (ImportError, AttributeError) as e:
        raise pytest.UsageError(f"--deltacheck-model={spec}: {type(e).__name__}: {e}") from None
    collector = PackingCollector.from_parent(session, name=spec, nodeid=f"packing:{spec}",
                                             spec_obj=obj, paths=paths)
    report = collect_one_node(collector)
    config.hook.pytest_collectreport(report=report)
    items[:0] = [x for x in report.result if isinstance(x, pytest.Item)]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    if config.getoption("deltacheck_model"):
        _collect_packing(session, config, items)
    spec = config.getoption("deltacheck")
    if not spec:
        return
    from . import _check
    fn = _load(spec, "deltacheck")
    conv = config.getoption("deltacheck_convention")
    if ":" in conv:
        conv = _load(conv, "deltacheck-convention")
    try:
        ids = _check.select(config.getoption("deltacheck_suite"),
                            config.getoption("deltacheck_filter"),
                            config.getoption("deltacheck_exclude"),
                            config.getoption("deltacheck_case") or None,
                            config.getoption("deltacheck_seed"))
    except (ValueError, RuntimeError) as e:
        raise pytest.UsageError(f"deltacheck: {e}") from None
    opts = {"convention": conv, "device": config.getoption("deltacheck_device"),
            "probes": not config.getoption("deltacheck_no_probes"),
            "framework": config.getoption("deltacheck_framework"),
            "cache_dir": _cache_dir(config), "profile": config.getoption("deltacheck_profile")}
    if opts["profile"]:
        try:
            _check._dc.profile_name(opts["profile"])
        except ValueError as e:
            raise pytest.UsageError(f"deltacheck: --deltacheck-profile: {e}") from None
    try:
        opts["isolate"], opts["timeout"] = _check.isolation(
            config.getoption("deltacheck_isolate"), config.getoption("deltacheck_timeout"),
            opts["device"])
    except ValueError as e:
        raise pytest.UsageError(f"deltacheck: {e} (--deltacheck-isolate, "
                                "--deltacheck-timeout)") from None
    collector = DeltacheckCollector.from_parent(session, name=spec, nodeid=spec, fn=fn,
                                                label=spec.partition(":")[2], ids=ids, opts=opts)
    # Collected like a test file, so the terminal counts the items and -k, --lf, xdist and the
    # JUnit report see them as any others.
    report = collect_one_node(collector)
    config.hook.pytest_collectreport(report=report)
    if report.outcome == "failed":
        raise pytest.UsageError(f"deltacheck: collecting {spec} failed: {report.longreprtext}")
    items[:0] = [x for x in report.result if isinstance(x, pytest.Item)]
