"""deltacheck.check: a Python callable against deltacheck's cases, in-process. The C++ runner
(the extension) generates each case's inputs, computes the FP64 oracle and the baseline, runs the
probes and judges; this module only turns each call of a case into a call of the user's
function (conventions.py) and the results into a Result."""
import functools
import os
import shlex
import sys
import time
import traceback

from . import _deltacheck as _dc
from . import _grad
from . import conventions as _conventions
from ._io import make_io
from .conventions import Unsupported


class Dims:
    """B, T, H, HV, K, V and N (sequences) of a gdr call."""
    __slots__ = ("B", "T", "H", "HV", "K", "V", "N")

    def __init__(self, inputs):
        self.B, self.T, self.H, self.K = inputs["q"].shape
        self.HV, self.V = inputs["v"].shape[2], inputs["v"].shape[3]
        cu = inputs.get("cu_seqlens")
        self.N = cu.shape[0] - 1 if cu is not None else self.B

    def __repr__(self):
        return "Dims(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


_PARAMS = {}  # case id -> (op, {parameter: value}); the runner's variations of a case each have one


def _case_params(case_id, parsed=None):
    """The op and parameters of a case id: `parsed` (op, [(key, value)]) when the extension
    passes them along, else parsed here; remembered (up to 4096 ids)."""
    known = _PARAMS.get(case_id)
    if known is None:
        op, params = parsed if parsed is not None else _dc.case_params(case_id)
        if len(_PARAMS) >= 4096:
            _PARAMS.clear()
        known = _PARAMS[case_id] = (op, dict(params))
    return known


class Call:
    """One call of a case, as a convention sees it (see conventions.py)."""

    def __init__(self, case_id, inputs, outputs, io):
        self.case_id = case_id
        self.op, self.params = _case_params(case_id)
        self.io = io
        self.inputs = inputs
        self.outputs = outputs  # name -> the view the result is written into
        self._dims = None

    @property
    def dtype(self):
        """The case's dtype ("fp32", "bf16", "fp16"): that of q, k, v, beta and o. The NumPy
        route hands bf16 widened to float32 (`widened` is then True); a convention passes
        c.dtype on to a kernel that should compute in it."""
        return self.params.get("dtype", "fp32")

    @property
    def widened(self):
        """Whether the arrays are wider than the case's dtype (bf16 on the NumPy route)."""
        return self.dtype == "bf16" and getattr(self.io, "name", None) == "numpy"

    @property
    def dims(self):
        if self._dims is None:
            self._dims = Dims(self.inputs)
        return self._dims

    def zeros(self, shape, dtype):
        return self.io.zeros(shape, dtype)

    def arange(self, n, dtype):
        return self.io.arange(n, dtype)

    def copy(self, x):
        return self.io.copy(x)

    def stack(self, xs):
        return self.io.stack(xs)


class _Timed:
    """The user's function, timed: what is spent inside it is not deltacheck's overhead."""

    def __init__(self, fn, io):
        self.fn, self.io, self.seconds = fn, io, 0.0
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args, **kwargs):
        # The backward of a gdr_grad case is the user's code too: _grad adds its time here.
        t0 = time.perf_counter()
        try:
            out = self.fn(*args, **kwargs)
            self.io.synchronize(out)  # (JAX dispatches asynchronously, MLX is lazy)
            return out
        finally:
            self.seconds += time.perf_counter() - t0


def _where(exc, skip=0):
    """The innermost frame of a traceback (`skip` frames out), as 'file:line in function'."""
    frames = traceback.extract_tb(exc.__traceback__)
    if len(frames) <= skip:
        return ""
    f = frames[-1 - skip]
    return f" (at {os.path.basename(f.filename)}:{f.lineno} in {f.name})"


def _text(exc):
    """str(exc), whatever it holds: a str() that raises is named, and characters UTF-8 cannot
    carry (lone surrogates) become backslash escapes."""
    try:
        text = str(exc)
    except BaseException:
        text = f"<{type(exc).__name__} whose str() raised>"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Exited(BaseException):
    """os._exit called by the callable during its call (a BaseException: a kernel's own
    `except Exception` does not swallow it)."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def _refuse_exit(status):
    raise _Exited(status)


def _failure(exc):
    """The error a callable's exception becomes: type, message and the raising frame."""
    if isinstance(exc, _Exited):  # the frame that called os._exit, not _refuse_exit's
        return f"the callable called os._exit({exc.status}){_where(exc, 1)}"
    return _text(f"{type(exc).__name__}: {_text(exc)}{_where(exc)}")


def _callable_name(fn):
    mod = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{mod}.{name}" if mod and mod != "__main__" else name


def make_backend(fn, convention="fla", device="cpu", framework=None, name=None,
                 deterministic=True, profile=None):
    """The extension's backend for `fn` (and the IO route it uses)."""
    conv = _conventions.get(convention)
    io = make_io(framework, device, fn)

    def supports(case_id, op=None, params=None):
        op, params = _case_params(case_id, None if op is None else (op, params))
        probe = Call.__new__(Call)
        probe.case_id, probe.op, probe.params = case_id, op, params
        if op == "gdr_grad":  # the forward, differentiated (_grad.py)
            return _grad.supports(conv, io, probe)
        if conv.in_place and not getattr(io, "mutable", True):
            return (f"the {conv.name} convention has the kernel write into its arrays in place "
                    f"({conv.in_place}); {io.name} arrays are immutable")
        return conv.supports(probe)

    timed = _Timed(fn, io)  # one for all calls: its wrapper metadata is copied once

    def invoke(c):
        if c.op == "gdr_grad":
            return _grad.call(conv, timed, c)
        return conv.call(timed, c)

    def call(case_id, inputs, outputs):
        c = Call(case_id, {k: io.input(a) for k, a in inputs.items()},
                 {k: io.output(a) for k, a in outputs.items()}, io)
        timed.seconds = 0.0
        # os._exit and sys.exit during the call are its error, not the end of the process (a
        # native _exit from compiled code only isolate=True contains).
        exit_was, os._exit = os._exit, _refuse_exit
        try:
            returned = invoke(c)  # (under io.guard(), entered by run_cases for the whole run)
            for out_name, view in c.outputs.items():
                value = returned.get(out_name) if isinstance(returned, dict) else None
                if value is None:
                    raise ValueError(f"the callable returned no {out_name} (convention "
                                     f"{conv.name!r}; expected {', '.join(c.outputs)})")
                if value is not view:
                    io.write(out_name, view, value)
        except (Unsupported, KeyboardInterrupt):
            raise
        except BaseException as e:  # SystemExit included
            raise RuntimeError(_failure(e)) from e
        finally:
            os._exit = exit_was
        return timed.seconds

    label = name or f"py:{_callable_name(fn)}"
    backend = _dc.Backend(label, call, supports, Unsupported, deterministic=deterministic,
                          bf16_bits=io.bf16_bits, profile=profile or "fp32")
    return backend, io, conv


DEFAULT_TIMEOUT = 120.0  # seconds per isolated call, as `deltacheck run --isolate`


def isolation(isolate, timeout, device="cpu"):
    """(isolate, timeout in seconds, None without isolation), checked: a timeout without
    isolation, or isolation on a CUDA device, is a ValueError."""
    if not isolate:
        if timeout is not None:
            raise ValueError("timeout needs isolate=True: a call in this process cannot be "
                             "stopped, only a child process can be killed")
        return False, None
    if str(device) != "cpu":
        raise ValueError(f"isolate=True forks a child process for each call, and CUDA cannot "
                         f"be used in a forked child: device must be 'cpu', not {device!r}")
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return True, timeout


def run_cases(ids, backend, io, probes=True, on_result=None, cache_dir="", prepare_ahead=True,
              isolate=False, timeout=None):
    """The extension's run of `backend` (make_backend) on the case ids, under the IO route's
    guard for the whole run: torch's NaN-filled torch.empty and deterministic algorithms are
    global flags, set once rather than around each call. `isolate`: each call in a forked child
    killed after `timeout` seconds (isolation())."""
    with io.guard():
        return _dc.run(ids, backend, probes, on_result, cache_dir, prepare_ahead, isolate,
                       DEFAULT_TIMEOUT if timeout is None else timeout)


def _as_list(x):
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


def select(suite="smoke", filter=None, exclude=None, case=None, seed=None, shard=None):
    """The case ids of a selection: a suite narrowed by `filter` / `exclude` regexes (each a
    string or a list, all filters must match), or explicit `case` ids; `seed` replaces every
    case's seed; `shard=(i, n)` keeps every n-th case from the i-th."""
    index, count = shard or (0, 1)
    return _dc.select(suite, _as_list(case), _as_list(filter), _as_list(exclude),
                      -1 if seed is None else int(seed), index, count)


class Result:
    """The results of deltacheck.check: .ok, .summary(), .to_report(dir), per-case results
    (iterate, or index by case id), .notes, and timing (.seconds, .seconds_callable)."""

    def __init__(self, results, stats, notes, fn_label, convention, selection, seed, shard=None):
        self.results = results
        self.seconds = stats.seconds
        self.seconds_callable = stats.seconds_callable
        self.calls = stats.calls
        self.notes = notes
        self._fn_label = fn_label
        self._convention = convention
        self._selection = selection
        self._seed = seed
        self._shard = shard or (0, 1)

    @property
    def ok(self):
        return not any(r.failed for r in self.results)

    def __iter__(self):
        return iter(self.results)

    def __len__(self):
        return len(self.results)

    def __getitem__(self, key):
        if isinstance(key, int):
            return self.results[key]
        for r in self.results:
            if r.case_id == key:
                return r
        raise KeyError(key)

    def failures(self):
        return [r for r in self.results if r.failed]

    def rerun(self, r):
        """The line that reruns one case."""
        conv = "" if self._convention == "fla" else f", convention={self._convention!r}"
        return f"dc.check({self._fn_label}, case={r.case_id!r}{conv})"

    @property
    def overhead_per_case(self):
        """Seconds per case spent outside the callable (generation, oracle, baseline, probes'
        bookkeeping, comparisons, conversions)."""
        n = max(1, len(self.results))
        return (self.seconds - self.seconds_callable) / n

    def summary(self, passes=False):
        """The console rows of every non-pass result (with the reason line and a rerun line),
        the notes and the totals, as `deltacheck run` prints them."""
        lines = []
        for r in self.results:
            if r.verdict == "pass" and not passes:
                continue
            lines.append(r.line().rstrip("\n"))
            if r.failed:
                lines.append(f"            rerun: {self.rerun(r)}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(_dc.format_summary(self.results, self.seconds).rstrip("\n"))
        return "\n".join(lines)

    def __repr__(self):
        return (f"<deltacheck.Result {len(self.results)} cases, "
                f"{'ok' if self.ok else 'FAILED'}>")

    def to_report(self, directory):
        """Writes report.json, junit.xml, summary.md and report.html into `directory`, as
        `deltacheck run --report-dir` does; failing cases carry their rerun line."""
        command = " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)
        command += "".join(f"\n# {n}" for n in self.notes)
        _dc.write_report(self.results, str(directory), self._selection,
                         -1 if self._seed is None else int(self._seed), self.seconds, command,
                         [(r.case_id, self.rerun(r)) for r in self.failures()],
                         int(self._shard[0]), int(self._shard[1]))
        return str(directory)


def cache_directory(cache_dir=None):
    """The expectation cache directory a run uses: `cache_dir`, else DELTACHECK_CACHE_DIR, else
    none ("")."""
    if cache_dir is None:
        cache_dir = os.environ.get("DELTACHECK_CACHE_DIR", "")
    return os.fspath(cache_dir)


def check(fn, suite="smoke", *, filter=None, exclude=None, case=None, seed=None, shard=None,
          device="cpu", convention="fla", framework=None, probes=True, name=None,
          deterministic=True, verbose=False, cache_dir=None, prepare_ahead=True, isolate=False,
          timeout=None, profile=None):
    """Runs `fn` on the selected cases (deltacheck.select's arguments) and judges it exactly as
    `deltacheck run` does. `convention` says how a case's tensors become fn's arguments
    (deltacheck.conventions); `device` where torch tensors live ("cpu", "cuda", "cuda:1");
    `framework` "torch", "jax", "mlx" or "numpy" (default: jax or mlx when fn's module uses
    it, else torch when importable, else numpy; docs/python.md "JAX and MLX"). `deterministic=False` for
    kernels whose bits may vary between identical calls (the repeat probe then tolerates it).
    verbose=True prints each result's row as it comes. `cache_dir` keeps the cases' inputs,
    FP64 expectations and baselines across runs of the same deltacheck build (default: the
    DELTACHECK_CACHE_DIR environment variable; none when unset): a rerun then spends its time
    in fn and the comparisons. Verdicts are the same with and without it. `prepare_ahead`
    prepares the next case (inputs, FP64 expectation, baselines) on another thread while fn runs
    the current one: the same results, less waiting between cases, one more case in memory.
    `isolate=True` runs each call of fn in a forked child process killed after `timeout` seconds
    (default 120): a crash, an exit or a hang is that case's error and the run goes on.
    `profile` declares fn's precision profile, the formulation choices it makes, e.g.
    "chunk=128,cumsum=independent" (tf32, chunk=N, cumsum=independent, l2norm=act,
    operands=fp32, autodiff=act; docs/tolerance.md): judged against that profile's baselines, shown in every
    row; a bad one is a ValueError naming the bad choice."""
    isolate, timeout = isolation(isolate, timeout, device)
    ids = select(suite, filter, exclude, case, seed, shard)
    backend, io, conv = make_backend(fn, convention, device, framework, name, deterministic,
                                     profile)
    on_result = (lambda r: print(r.line(), end="", flush=True)) if verbose else None
    results, stats = run_cases(ids, backend, io, probes, on_result, cache_directory(cache_dir),
                               prepare_ahead, isolate, timeout)
    if case is not None:
        selection = ["--cases"] + _as_list(case)
    else:
        selection = [suite] + _as_list(filter) + ["--exclude"] + _as_list(exclude)
    notes = [io.unwritten_note, f"convention {conv.name!r}, {io.name} tensors on {device}"]
    if isolate:
        notes.append(f"isolated: each call in a child process, killed after {timeout:g} s")
    return Result(results, stats, notes, _callable_name(fn).rsplit(".", 1)[-1], conv.name,
                  selection, seed, shard)
