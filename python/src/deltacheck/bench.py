"""Overhead figures of the in-process route: `python -m deltacheck.bench [--suite smoke]`.

On the same cases, in one run:
  route     per call of the callable: what the Python route adds around it (DLPack views, the
            convention, writing the outputs back)
  harness   per case: the C++ runner's own work (inputs, FP64 oracle, baseline, probes'
            bookkeeping, judging, the check that each call left its inputs unchanged) that the
            callable waits for (the next case is prepared while it runs, unless
            --no-prepare-ahead), which `deltacheck run` pays too; measured beside it with
            deltacheck's own "cpu" backend (one case at a time, its inputs not checked)
  overhead  per case: everything outside the callable (harness + route x calls per case)
  ratio     overhead / the C++ runner's harness on the same cases in the same run
  process CPU  the same split in process CPU time (all threads), which a loaded machine does not
            inflate: the figure to compare between runs
The callable: deltacheck.examples.recurrent_gdr (NumPy), or --kernel MODULE:FUNCTION.
--warm: both runs read a filled expectation cache (a temporary directory, filled by an untimed
pass of each), as a rerun under the pytest plugin does (its cache is on by default).
--isolate: each call in a child process (dc.check(isolate=True)); the route then includes the
fork, and the process CPU figures leave out the children's."""
import argparse
import os
import sys
import time


def measure(fn, ids, framework, probes, cache_dir="", prepare_ahead=True, isolate=False):
    """Runs the cases on `fn`; also returns the process CPU time of the run and of the callable's
    calls (CPU time, unlike wall time, is not inflated by other processes on a loaded machine)."""
    import functools
    from ._check import make_backend, run_cases
    inside = [0.0]

    @functools.wraps(fn)
    def cpu_timed(*args, **kwargs):
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            inside[0] += time.process_time() - t0

    backend, io, _ = make_backend(cpu_timed, framework=framework)
    cpu0 = time.process_time()
    results, stats = run_cases(ids, backend, io, probes, None, cache_dir, prepare_ahead, isolate)
    cpu = time.process_time() - cpu0
    return results, stats, cpu, inside[0], io


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="smoke")
    ap.add_argument("--filter", default=r"^gdr\(")
    ap.add_argument("--framework", choices=["numpy", "torch"], default="numpy")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--warm", action="store_true",
                    help="read the inputs, expectations and tolerances from a filled cache")
    ap.add_argument("--no-prepare-ahead", action="store_true",
                    help="prepare each case only when its turn comes (dc.check(prepare_ahead=False))")
    ap.add_argument("--isolate", action="store_true",
                    help="each call in a child process (dc.check(isolate=True))")
    ap.add_argument("--kernel", default=None,
                    help="MODULE:FUNCTION of the callable (default: the tests' NumPy recurrence)")
    args = ap.parse_args(argv)
    from . import _deltacheck as _dc
    from ._check import select
    if args.kernel:
        import importlib
        mod, _, name = args.kernel.partition(":")
        fn = getattr(importlib.import_module(mod), name)
    else:
        from .examples import recurrent_gdr as fn
    ids = select(args.suite, args.filter)
    probes = not args.no_probes
    cache_dir = ""
    if args.warm:
        import tempfile
        cache_dir = tempfile.mkdtemp(prefix="deltacheck-bench-")
        # Filled (untimed) by both runs: what the cpu backend's probes cache (e.g. the split's
        # tolerance, which a callable whose split calls give the one-shot bits never needs) is
        # then there for its timed run too.
        filled = measure(fn, ids, args.framework, probes, cache_dir)[0]
        _dc.run_builtin([r.case_id for r in filled if r.verdict != "unsupported"], "cpu", probes,
                        cache_dir)
    ahead = not args.no_prepare_ahead
    try:
        results, s, cpu, cpu_callable, io = measure(fn, ids, args.framework, probes, cache_dir,
                                                    ahead, args.isolate)
        bad = [r for r in results if r.verdict not in ("pass", "unsupported")]
        ran = [r for r in results if r.verdict != "unsupported"]
        n = max(1, len(ran))
        cpu0 = time.process_time()
        builtin = _dc.run_builtin([r.case_id for r in ran], "cpu", probes, cache_dir)
        builtin_cpu = time.process_time() - cpu0
    finally:
        if cache_dir:
            import shutil
            shutil.rmtree(cache_dir, ignore_errors=True)
    route = (s.seconds_calls - s.seconds_callable) / max(1, s.calls)
    harness = (s.seconds - s.seconds_calls) / n
    harness_cpu_backend = (builtin.seconds - builtin.seconds_calls) / n
    overhead = (s.seconds - s.seconds_callable) / n
    load = os.getloadavg()[0]
    print(f"deltacheck.bench: {len(ran)} {args.suite} cases ({args.filter}), {s.calls} calls, "
          f"{io.name} callable, probes {'on' if probes else 'off'}, "
          f"{'warm cache' if args.warm else 'no cache'}, "
          f"{'next case prepared ahead' if ahead else 'no preparing ahead'}"
          f"{', each call isolated' if args.isolate else ''}; load {load:.1f} on "
          f"{os.cpu_count()} cores")
    print(f"  callable       {1e3 * s.seconds_callable / n:8.2f} ms/case")
    print(f"  route          {1e3 * route:8.3f} ms/call  ({s.calls / n:.1f} calls/case)")
    print(f"  harness        {1e3 * harness:8.2f} ms/case  (same cases on the C++ cpu backend: "
          f"{1e3 * harness_cpu_backend:.2f} ms/case)")
    print(f"  overhead       {1e3 * overhead:8.2f} ms/case  (everything outside the callable)")
    print(f"  ratio          {overhead / max(harness_cpu_backend, 1e-9):8.2f}          (overhead / the "
          f"C++ cpu backend's harness in this run: less moved by the machine's speed than either)")
    print(f"  process CPU    {1e3 * (cpu - cpu_callable) / n:8.2f} ms/case outside the "
          f"callable, {1e3 * cpu_callable / n:.2f} inside (all threads; the wall figures above "
          f"are inflated by load, CPU time is not)")
    print(f"  C++ cpu CPU    {1e3 * builtin_cpu / n:8.2f} ms/case for the same cases on the C++ cpu "
          f"backend, its kernel calls included")
    if bad:
        print(f"deltacheck.bench: {len(bad)} cases did not pass: {bad[0].line()}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
