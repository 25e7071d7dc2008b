#!/usr/bin/env python3
"""The peer suite's driver and its pinned findings (standard library only; any python3 runs it).

    peers_check.py run --deltacheck build/deltacheck --venv VENV|--python PY --out reports/peers
        Runs every peer of adapters/python/expected-findings.json on its cases through
        `deltacheck run --backend external --serve` (one adapter process per job for all its
        calls), one report directory per peer, and compares the verdict of every (peer, case
        family) with the pinned one. Exit 1 when any finding changed
        (in either direction) or a peer did not run as it should; 0 otherwise, also when a peer
        is skipped because scripts/peers-setup.sh could not install its packages (a banner says
        so). Writes findings.md and findings.json (versions, what ran, verdicts) into --out.
        --long: also the families marked "long" (minutes of CPU each: FLA's Triton kernels
        under Triton's interpreter); without it they are listed as "long (not run)".
    peers_check.py table                     prints the findings table of docs/peers.md
    peers_check.py check-doc docs/peers.md   exit 1 when that page's table is not the file's
    peers_check.py self-test                 shows that a changed finding and a stale table are
                                             caught (run by ctest)

A family's verdict is the verdict of all its cases when they agree, else "mixed(a,b)".
A peer may set "jobs" (at most that many adapter processes: one import of torch for all its
cases) and "kind": "script" (a program that judges its own checks, run once with --out FILE:
{"checks": [{case_id, verdict, message}]}; its case ids are its own, not deltacheck cases, e.g.
transformers_model.py's model(...) and generate(...) checks).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "expected-findings.json")
BEGIN = "<!-- peers-findings:begin (rendered by adapters/python/peers_check.py table) -->"
END = "<!-- peers-findings:end -->"


def load(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != "deltacheck-peer-findings" or doc.get("version") != 1:
        raise SystemExit(f"peers: {path}: not a version 1 deltacheck-peer-findings file")
    return doc


def render_table(doc):
    rows = ["| peer | case family | finding | case that shows it | note |",
            "| --- | --- | --- | --- | --- |"]
    for peer in doc["peers"]:
        for fam in peer["families"]:
            finding = f"**{fam['expect']}**"
            if "expect_gpu" in fam:
                gpu = fam["expect_gpu"]
                finding += f" (GPU: {'**' + gpu + '**' if gpu else 'not pinned'})"
            if fam.get("long"):
                finding += " (`--long`)"
            rows.append(f"| {peer['name']} | {fam['family']} | {finding} | `{fam['show']}` | "
                        f"{fam.get('note', '')} |")
    return "\n".join(rows) + "\n"


def doc_section(text):
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def check_doc(page, doc):
    with open(page) as f:
        section = doc_section(f.read())
    want = render_table(doc)
    if section is None:
        return f"{page}: no findings table (markers {BEGIN!r} ... {END!r})"
    if section != want:
        return (f"{page}: the findings table differs from {os.path.relpath(EXPECTED)}; "
                f"paste the output of `python3 adapters/python/peers_check.py table`")
    return None


def family_verdict(verdicts):
    distinct = sorted(set(verdicts))
    return distinct[0] if len(distinct) == 1 else "mixed(" + ",".join(distinct) + ")"


def compare(doc, verdicts_by_peer, gpu_by_peer, long=True):
    """Rows (peer, family, expected, got, status) with status ok | CHANGED | not pinned |
    skipped | long (not run); verdicts_by_peer[peer] is {case id: verdict} or a string (why it
    was skipped)."""
    rows = []
    for peer in doc["peers"]:
        got = verdicts_by_peer.get(peer["name"])
        for fam in peer["families"]:
            want = fam["expect"]
            if gpu_by_peer.get(peer["name"]) and "expect_gpu" in fam:
                want = fam["expect_gpu"]
            if fam.get("long") and not long:
                rows.append((peer["name"], fam["family"], want or "-", "-", "long (not run)"))
                continue
            if isinstance(got, str) or got is None:
                rows.append((peer["name"], fam["family"], want or "-", "-", "skipped"))
                continue
            seen = [got.get(c, "missing") for c in fam["cases"]]
            verdict = family_verdict(seen)
            status = ("not pinned" if want is None else "ok" if verdict == want else "CHANGED")
            rows.append((peer["name"], fam["family"], want or "-", verdict, status))
    return rows


def banner(lines):
    bar = "#" * 100
    print(bar, *("## " + line for line in lines), bar, sep="\n", flush=True)


def read_status(venv):
    """scripts/peers-setup.sh's record: {group: (state, detail)}."""
    status = {}
    try:
        with open(os.path.join(venv, ".deltacheck-peers-status")) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2:
                    status[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    except OSError as e:
        status["base"] = ("failed", f"no status file in {venv} ({e.strerror})")
    return status


def canonical(deltacheck, ids):
    out = subprocess.run([deltacheck, "list", "cases"] + [a for i in ids for a in ("--case", i)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"peers: deltacheck list cases: {out.stderr.strip()}")
    return out.stdout.split()


def run_script(python, script, extra, name, out, problems):
    """A peer of kind "script": a program that judges its own checks (deltacheck's verdicts, its
    own check ids) and writes them with --out FILE as {"checks": [{case_id, verdict, message}],
    "implementation", "versions"}. Returns (verdicts or the reason it did not run, facts)."""
    path = os.path.join(out, f"{name}.json")
    done = subprocess.run([python, script] + extra + ["--out", path], capture_output=True,
                          text=True)
    with open(os.path.join(out, f"{name}.log"), "w") as f:
        f.write(done.stdout + done.stderr)
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        problems.append(f"{name}: exited {done.returncode} without its verdicts: "
                        f"{done.stderr.strip()[-300:]}")
        return "script failed", {}
    facts = {k: result[k] for k in ("implementation", "versions") if k in result}
    print(f"peers: {name}: {len(result['checks'])} checks: {facts.get('implementation', '?')}",
          flush=True)
    for c in result["checks"]:
        if c["verdict"] != "pass":
            print(f"    {c['verdict']:<12}{c['case_id']}\n    {'':<12}{c.get('message', '')}",
                  flush=True)
    return {c["case_id"]: c["verdict"] for c in result["checks"]}, facts


def run(args):
    doc = load(args.expected)
    # Every pinned id must still be canonical, and 'show' must expand to the family's first case:
    # otherwise the case model changed under the file and the pins need a look. One `deltacheck
    # list cases` for all of them (it prints one canonical id per --case, in order; a call per
    # family cost about a minute of CPU).
    families = [(peer["name"], fam) for peer in doc["peers"] if peer.get("kind") != "script"
                for fam in peer["families"]]  # a script's check ids are its own
    asked = [i for _, fam in families for i in fam["cases"] + [fam["show"]]]
    answers = iter(canonical(args.deltacheck, asked))
    for name, fam in families:
        ids = [next(answers) for _ in fam["cases"]]
        if ids != fam["cases"]:
            raise SystemExit(f"peers: {name} / {fam['family']}: case ids are not "
                             "canonical any more; update expected-findings.json")
        if next(answers) != fam["cases"][0]:
            raise SystemExit(f"peers: {name} / {fam['family']}: show "
                             f"{fam['show']} is not the first case")
    if args.python:  # an environment of one's own (a GPU machine): no setup record to read
        status = {g: ("ok", args.python) for g in {"base"} | {p["group"] for p in doc["peers"]}}
        python = args.python
    else:
        status = read_status(args.venv)
        python = os.path.join(args.venv, "bin", "python")
    os.makedirs(args.out, exist_ok=True)
    verdicts, gpu, facts, problems = {}, {}, {}, []
    for peer in doc["peers"]:
        if args.peer and peer["name"] not in args.peer:
            continue
        name, group = peer["name"], peer["group"]
        for g in ("base", group):
            state, detail = status.get(g, ("failed", "not attempted"))
            if state != "ok":
                verdicts[name] = f"{g} packages not installed: {detail}"
                banner([f"PEER SKIPPED: {name}: the '{g}' packages could not be installed",
                        f"  {detail}",
                        "  its cases did not run; the core gate does not depend on them"])
                break
        if name in verdicts:
            continue
        adapter = shlex.split(peer["adapter"])
        script = os.path.join(HERE, adapter[0])
        if peer.get("kind") == "script":
            verdicts[name], facts[name] = run_script(python, script, adapter[1:], name, args.out,
                                                     problems)
            continue
        described = subprocess.run([python, script] + adapter[1:] + ["--describe"],
                                   capture_output=True, text=True)
        try:
            facts[name] = json.loads(described.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            problems.append(f"{name}: --describe failed: {described.stderr.strip()[-300:]}")
            verdicts[name] = "adapter --describe failed"
            continue
        unavailable = facts[name].get("unavailable", "")
        # A Triton kernel runs on a GPU ("device": "cuda", judged against expect_gpu) or under
        # Triton's interpreter on CPU tensors ("interpreter"); the device goes into the command
        # (so every report names it) and a GPU's TF32 matmuls are declared.
        device = facts[name].get("device")
        gpu[name] = device == "cuda"
        where = ["--device", device] if device else []
        cases = sorted({c for fam in peer["families"] for c in fam["cases"]
                        if args.long or not fam.get("long")})
        if not cases:  # only long families: no --case would mean the default suite
            verdicts[name] = {}
            continue
        report = os.path.join(args.out, name)
        jobs = min(args.jobs, peer.get("jobs", args.jobs))  # one worker: one import of torch
        cmd = [args.deltacheck, "run", "--backend", "external", "--no-probes", "--quiet",
               "--progress", "lines", "--jobs", str(jobs), "--timeout", str(args.timeout),
               "--report-dir", report, "--max-dumps", "5",
               # one adapter process per --jobs thread for all calls (docs/external.md)
               "--serve", " ".join(shlex.quote(a) for a in [python, script] + adapter[1:] + where)]
        if facts[name].get("matmul_precision") == "tf32":
            cmd += ["--matmul-precision", "tf32"]
        for c in cases:
            cmd += ["--case", c]
        what = facts[name].get("implementation", unavailable)
        print(f"peers: {name}: {len(cases)} cases: {what}", flush=True)
        if facts[name].get("emulation"):
            print(f"    {facts[name]['emulation']}", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        with open(os.path.join(args.out, f"{name}.log"), "w") as f:
            f.write(done.stdout + done.stderr)
        if done.returncode not in (0, 1):
            problems.append(f"{name}: deltacheck exited {done.returncode}: "
                            f"{done.stderr.strip()[-300:]}")
            verdicts[name] = "deltacheck failed"
            continue
        with open(os.path.join(report, "report.json")) as f:
            results = json.load(f)["results"]
        verdicts[name] = {r["case_id"]: r["verdict"] for r in results}
        for r in results:
            if r["verdict"] != "pass":
                print(f"    {r['verdict']:<12}{r['case_id']}\n    {'':<12}{r.get('message', '')}",
                      flush=True)
    rows = [r for r in compare(doc, verdicts, gpu, args.long)
            if not args.peer or r[0] in args.peer]
    changed = [r for r in rows if r[4] == "CHANGED"]
    lines = ["| peer | case family | pinned | now | |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {p} | {f} | {w} | {g} | {s} |" for p, f, w, g, s in rows]
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    ran_on = [f"- {p}: {f['device']}" + (f" ({f['emulation']})" if f.get("emulation") else "")
              for p, f in sorted(facts.items()) if f.get("device")]
    with open(os.path.join(args.out, "findings.md"), "w") as f:
        f.write("# Peer findings\n\n" + table + ("\nWhere the Triton kernels ran:\n\n" +
                                                  "\n".join(ran_on) + "\n" if ran_on else ""))
    with open(os.path.join(args.out, "findings.json"), "w") as f:
        json.dump({"peers": facts, "status": status, "rows": [
            dict(zip(("peer", "family", "pinned", "now", "status"), r)) for r in rows]},
            f, indent=1, sort_keys=True)
    for p in problems:
        print(f"peers: ERROR: {p}", file=sys.stderr)
    if changed:
        banner([f"PEER FINDINGS CHANGED: {len(changed)} famil{'y' if len(changed) == 1 else 'ies'}"]
               + [f"  {p} / {f}: pinned {w}, now {g}" for p, f, w, g, _ in changed]
               + ["  upstream fixed or broke something, or deltacheck changed: look at the "
                  "reports, then update adapters/python/expected-findings.json and the "
                  "table in docs/peers.md (peers_check.py table)"])
    skipped = sorted({r[0] for r in rows if r[4] == "skipped"})
    if skipped:
        print(f"peers: skipped (packages not installed): {', '.join(skipped)}")
    long = sum(r[4] == "long (not run)" for r in rows)
    if long:
        print(f"peers: {long} long famil{'y' if long == 1 else 'ies'} not run "
              "(scripts/peers-check.sh --long runs them)")
    print(f"peers: {sum(r[4] in ('ok', 'not pinned') for r in rows)} passed, {len(changed)} "
          f"failed, {sum(r[4] == 'skipped' for r in rows)} skipped")  # (peer, family) pairs
    return 1 if changed or problems else 0


def self_test():
    """The comparison and the table check must be able to fail."""
    doc = load(EXPECTED)
    peer = doc["peers"][0]
    good = {c: fam["expect"] for fam in peer["families"] for c in fam["cases"]}
    rows = compare({"peers": [peer]}, {peer["name"]: good}, {})
    assert all(r[4] == "ok" for r in rows), rows
    flipped = dict(good)
    case = peer["families"][1]["cases"][0]
    flipped[case] = "pass" if good[case] != "pass" else "fail"  # upstream fixed (or broke) it
    rows = compare({"peers": [peer]}, {peer["name"]: flipped}, {})
    assert [r[4] for r in rows].count("CHANGED") == 1, rows
    assert rows[1][3].startswith("mixed(") or rows[1][3] != rows[1][2], rows
    missing = dict(good)
    del missing[case]
    assert any(r[4] == "CHANGED" for r in compare({"peers": [peer]},
                                                  {peer["name"]: missing}, {}))
    skipped = compare({"peers": [peer]}, {peer["name"]: "not installed"}, {})
    assert all(r[4] == "skipped" for r in skipped)
    long_peer = json.loads(json.dumps(peer))
    long_peer["families"][0]["long"] = True  # not run without --long: not a change, not a pass
    rows = compare({"peers": [long_peer]}, {peer["name"]: {}}, {}, long=False)
    assert rows[0][4] == "long (not run)" and rows[1][4] == "CHANGED", rows
    with tempfile.TemporaryDirectory() as d:
        page = os.path.join(d, "peers.md")
        with open(page, "w") as f:
            f.write(f"# x\n\n{BEGIN}\n{render_table(doc)}{END}\n")
        assert check_doc(page, doc) is None
        stale = json.loads(json.dumps(doc))
        stale["peers"][0]["families"][0]["expect"] = "fail"
        assert check_doc(page, stale) is not None
        with open(page, "w") as f:
            f.write("# no table\n")
        assert check_doc(page, doc) is not None
    with tempfile.TemporaryDirectory() as d:  # a script peer's verdicts, and one that wrote none
        script = os.path.join(d, "judge.py")
        with open(script, "w") as f:
            f.write("import json, sys\nout = sys.argv[sys.argv.index('--out') + 1]\n"
                    "json.dump({'checks': [{'case_id': 'model(x)', 'verdict': sys.argv[1]}]}, "
                    "open(out, 'w'))\n")
        problems = []
        got, _ = run_script(sys.executable, script, ["leak"], "judge", d, problems)
        assert got == {"model(x)": "leak"} and not problems, (got, problems)
        script_peer = {"name": "judge", "families": [{"family": "f", "expect": "pass",
                                                      "cases": ["model(x)"]}]}
        assert compare({"peers": [script_peer]}, {"judge": got}, {})[0][4] == "CHANGED"
        got, _ = run_script(sys.executable, os.path.join(d, "missing.py"), [], "gone", d,
                            problems)
        assert isinstance(got, str) and problems, (got, problems)
    print("peers_check self-test: 6 passed, 0 failed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the peer suite and compare with the pinned findings")
    r.add_argument("--deltacheck", required=True)
    where = r.add_mutually_exclusive_group(required=True)
    where.add_argument("--venv", help="made by scripts/peers-setup.sh")
    where.add_argument("--python", help="or this interpreter, with the peers' packages installed "
                                        "(scripts/gpu-check.sh)")
    r.add_argument("--out", default="reports/peers")
    r.add_argument("--expected", default=EXPECTED)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--timeout", type=float, default=300)
    r.add_argument("--peer", action="append", help="only this peer (repeatable)")
    r.add_argument("--long", action="store_true",
                   help='also the families marked "long" (local runs; CI runs the rest)')
    t = sub.add_parser("table", help="print the findings table of docs/peers.md")
    t.add_argument("--expected", default=EXPECTED)
    c = sub.add_parser("check-doc", help="compare a page's findings table with the file")
    c.add_argument("page", nargs="?", default=os.path.normpath(os.path.join(HERE, "..", "..", "docs", "peers.md")))
    c.add_argument("--expected", default=EXPECTED)
    sub.add_parser("self-test", help="show that changed findings and stale tables are caught")
    args = ap.parse_args()
    if args.command == "run":
        return run(args)
    if args.command == "table":
        sys.stdout.write(render_table(load(args.expected)))
        return 0
    if args.command == "check-doc":
        problem = check_doc(args.page, load(args.expected))
        if problem:
            print(f"peers: {problem}", file=sys.stderr)
            return 1
        print(f"peers: {args.page}: findings table matches {os.path.basename(EXPECTED)}")
        return 0
    return self_test()


if __name__ == "__main__":
    sys.exit(main())
