#!/usr/bin/env python3
"""The docs tests (standard library only; run by ctest, tests/docs/CMakeLists.txt).

    check_docs.py snippets GROUP --source DIR --build DIR
        Runs the README's code blocks of one group, in order, in a fresh work folder whose entries
        point at the checkout (and `build` at the build folder), so the commands run as printed.
    check_docs.py links --source DIR      every relative link in README.md and docs/*.md points to
                                          an existing file (and heading, for .md anchors), and
                                          every docs/... path the sources cite exists
    check_docs.py tree --source DIR       docs/architecture.md's folder table lists exactly the
                                          repository's top-level folders
    check_docs.py ci --source DIR         the README's `ci` commands are steps of .ci/run, every
                                          block is marked, the README has at most 200 lines and
                                          "Check your own kernel" starts on its first screen
    check_docs.py self-test               shows that each check above can fail

Every fenced block of README.md carries a marker on the line before it:
    <!-- snippet GROUP: sh [exit=N] -->     shell commands, run with bash -e in the work folder;
                                            a leading `scripts/setup.sh && ` is left out (CI
                                            runs it first; the test runs against the build)
    <!-- snippet GROUP: python -->          Python, run by python3
    <!-- snippet GROUP: file PATH -->       written to PATH in the work folder for later blocks
    <!-- snippet GROUP: output -->          must match the output of the group's previous sh
                                            block line by line ('...' alone skips lines, inside
                                            a line it matches anything; spaces are not counted)
    <!-- snippet ci -->                     each `&&`-separated command is a step of .ci/run
    <!-- snippet illustration (why) -->     not run
A block without a marker fails the test, so a new snippet is run or explicitly not.
Groups: main (the tool on the build), external (--backend external, needs a python with numpy and
h5py: $DELTACHECK_ADAPTER_PYTHON or the venv of adapters/python/check.sh), python (the package in
.venv, first on PATH; run in an empty folder, as in a user's project, so pytest collects only the
plugin's items), cpp (the library installed and a project built against it;
tests/docs/my_project/ holds the user's kernel the README does not print).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77  # ctest SKIP_RETURN_CODE
MARKER = re.compile(r"^<!-- snippet (?:(?P<group>[\w-]+): (?P<kind>sh|python|file|output)"
                    r"(?: (?P<arg>[^>]*?))?|(?P<bare>ci|illustration)(?: [^>]*)?) -->$")
HERE = os.path.dirname(os.path.abspath(__file__))


class Block:
    def __init__(self, line, marker, lang, text):
        self.line, self.lang, self.text = line, lang, text
        self.group = marker.group("group") if marker else None
        self.kind = (marker.group("kind") or marker.group("bare")) if marker else None
        self.arg = (marker.group("arg") or "").strip() if marker else ""



def source_files(source):
    """(folder, names) of the repository's files: git's tracked and untracked-but-not-ignored files
    in a checkout (generated reports, venvs and build folders are ignored), else every file."""
    try:
        out = subprocess.run(["git", "-C", source, "ls-files", "-co", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return [(folder, files) for folder, _, files in os.walk(source)]
    by_folder = {}
    for rel in out.splitlines():
        by_folder.setdefault(os.path.join(source, os.path.dirname(rel)), []).append(
            os.path.basename(rel))
    return sorted(by_folder.items())

def blocks(path):
    """The fenced blocks of a Markdown file, each with the marker on the line before it."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(```+|~~~+)\s*(\S*)", lines[i])
        if not m:
            i += 1
            continue
        fence, start = m.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        prev = lines[start - 1].strip() if start > 0 else ""
        out.append(Block(start + 1, MARKER.match(prev), m.group(2), "\n".join(lines[start + 1:j])))
        i = j + 1
    return out


def unmarked(path):
    return [f"{os.path.basename(path)}:{b.line}: a code block without a snippet marker "
            "(<!-- snippet GROUP: sh|python|file|output --> or <!-- snippet illustration -->)"
            for b in blocks(path) if b.kind is None]


def output_matches(expected, actual):
    """None when every line of `expected` appears in `actual` in order ('...' lines skip any
    number of lines; '...' inside a line matches anything; runs of spaces count as one), else
    the first line that does not."""
    def pattern(line):
        parts = [re.escape(" ".join(p.split())) for p in line.split("...")]
        return re.compile("^" + ".*".join(parts) + "$")
    got = [" ".join(l.split()) for l in actual.split("\n")]
    pos, gap = 0, True  # the excerpt may start anywhere in the output
    for line in expected.split("\n"):
        if line.strip() in ("...", ""):
            gap = True
            continue
        p = pattern(line.strip())
        while pos < len(got) and not p.match(got[pos]):
            if not gap:
                return line
            pos += 1
        if pos == len(got):
            return line
        pos, gap = pos + 1, False
    return None


def workdir(source, build):
    """A fresh folder whose entries are the checkout's, `build` being the build folder, so
    commands run as printed and whatever they write stays out of the checkout."""
    d = tempfile.mkdtemp(prefix="deltacheck-docs-")
    source = os.path.abspath(source)
    for name in os.listdir(source):
        if name in ("build", "reports") or name.startswith(".git"):
            continue
        os.symlink(os.path.join(source, name), os.path.join(d, name))
    os.symlink(os.path.abspath(build), os.path.join(d, "build"))
    os.mkdir(os.path.join(d, "reports"))
    return d


def adapter_python():
    """A python3 with numpy and h5py for adapters/python/*.py (named python3: its folder goes
    first on PATH), or None."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for py in (os.environ.get("DELTACHECK_ADAPTER_PYTHON"),
               os.path.join(cache, "deltacheck", "venv", "bin", "python3"),
               os.path.join(cache, "deltacheck", "peers-venv", "bin", "python3")):
        if py and os.path.exists(py) and subprocess.run(
                [py, "-c", "import numpy, h5py"], capture_output=True).returncode == 0:
            return py
    return None


def run_snippets(args):
    args.source, args.build = os.path.abspath(args.source), os.path.abspath(args.build)
    readme = os.path.join(args.source, "README.md")
    problems = unmarked(readme)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    group = [b for b in blocks(readme) if b.group == args.group]
    if not any(b.kind in ("sh", "python") for b in group):
        print(f"docs: README.md has no runnable block in group '{args.group}'", file=sys.stderr)
        return 1
    env = dict(os.environ, HDF5_USE_FILE_LOCKING="FALSE")
    if args.group == "python":
        venv = os.path.join(args.source, ".venv", "bin")
        if not os.path.exists(os.path.join(venv, "python")):
            print(f"docs: SKIPPED: no {venv}/python (scripts/setup.sh makes it)")
            return SKIP
        env["PATH"] = venv + os.pathsep + env["PATH"]
    if args.group == "external":
        py = adapter_python()
        if py is None:
            print("docs: SKIPPED: no python with numpy and h5py (adapters/python/check.sh makes "
                  "one; or set DELTACHECK_ADAPTER_PYTHON)")
            return SKIP
        env["PATH"] = os.path.dirname(py) + os.pathsep + env["PATH"]  # a venv's bin/python3
    if args.group == "cpp":  # the user's kernel, which the README does not print
        env["DELTACHECK_DOCS_MY_PROJECT"] = os.path.join(HERE, "my_project")
        env.setdefault("CTEST_PARALLEL_LEVEL", str(os.cpu_count() or 1))  # its ctest, not ours
    work = workdir(args.source, args.build)
    cwd = work
    if args.group == "python":
        cwd = os.path.join(work, "my_project")
        os.mkdir(cwd)
    last_output, code = "", 0
    try:
        for b in group:
            where = f"README.md:{b.line}"
            if b.kind == "file":
                path = os.path.join(work, b.arg)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(b.text + "\n")
                if args.group == "cpp":
                    for extra in os.listdir(env["DELTACHECK_DOCS_MY_PROJECT"]):
                        shutil.copy(os.path.join(env["DELTACHECK_DOCS_MY_PROJECT"], extra),
                                    os.path.dirname(path))
                print(f"docs: {where}: wrote {b.arg}")
                continue
            if b.kind == "output":
                miss = output_matches(b.text, last_output)
                if miss is not None:
                    print(f"docs: {where}: the printed output is not what the command printed; "
                          f"first line not found:\n  {miss}\n--- the command printed:\n"
                          f"{last_output}", file=sys.stderr)
                    code = 1
                continue
            want = int(b.arg.split("=", 1)[1]) if b.arg.startswith("exit=") else 0
            if b.kind == "python":
                cmd = ["python3", "-c", b.text]
            else:
                text = re.sub(r"^scripts/setup\.sh && ", "", b.text, flags=re.M)
                cmd = ["bash", "-e", "-o", "pipefail", "-c", text]
            start = time.time()
            done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
            last_output = done.stdout + done.stderr
            tail = [l for l in last_output.strip().split("\n") if l.strip()][-2:]
            print(f"docs: {where}: {b.kind} block exited {done.returncode} in "
                  f"{time.time() - start:.1f} s" + "".join(f"\n    | {l}" for l in tail))
            if done.returncode != want:
                print(f"docs: {where}: expected exit code {want}, got {done.returncode}:\n"
                      f"{last_output[-4000:]}", file=sys.stderr)
                code = 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return code


def check_ci(source):
    """Each command of a `ci` block must be a step of .ci/run."""
    with open(os.path.join(source, ".ci", "run")) as f:
        steps = {l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")}
    problems = []
    for b in blocks(os.path.join(source, "README.md")):
        if b.kind == "ci":
            for cmd in (c.strip() for c in b.text.replace("\n", "&&").split("&&")):
                if cmd and cmd not in steps:
                    problems.append(f"README.md:{b.line}: '{cmd}' is not a step of .ci/run")
    return problems


MAX_README_LINES = 200  # a front door, not a manual (issue #18)
FIRST_SCREEN = 60       # "Check your own kernel" starts within it (issue #20)


def front_door_problems(readme):
    with open(readme, encoding="utf-8") as f:
        lines = f.read().rstrip("\n").split("\n")
    problems = []
    if len(lines) > MAX_README_LINES:
        problems.append(f"README.md: {len(lines)} lines, more than {MAX_README_LINES}: move the "
                        "detail into docs/")
    heading = [n for n, l in enumerate(lines, 1) if l.startswith("## Check your own kernel")]
    if not heading or heading[0] > FIRST_SCREEN:
        problems.append(f"README.md: '## Check your own kernel' is not within the first "
                        f"{FIRST_SCREEN} lines")
    return problems


def slug(heading):
    """GitHub's anchor for a heading."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def anchors(path):
    out, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence and re.match(r"^#{1,6} ", line):
                out.add(slug(re.sub(r"^#+ ", "", line.rstrip("\n"))))
    return out


def link_problems(source):
    docs = os.path.join(source, "docs")
    pages = [os.path.join(source, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    problems = []
    for page in pages:
        rel = os.path.relpath(page, source)
        with open(page, encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)  # not inside code blocks
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(full):
                problems.append(f"{rel}: link to {target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                problems.append(f"{rel}: link to {target}: no heading '#{anchor}' in "
                                f"{os.path.relpath(full, source)}")
    # docs/... paths that source files and headers cite.
    for folder, files in source_files(source):
        parts = os.path.relpath(folder, source).split(os.sep)
        if parts[0] in ("docs", "third_party") or any(
                p.startswith(("build", ".")) and p != "." or p == "__pycache__" for p in parts):
            continue
        for name in files:
            p = os.path.join(folder, name)
            if os.path.abspath(p) == os.path.abspath(__file__) or p == pages[0]:
                continue  # this file names DESIGN.md to look for it; the README is a page
            if not name.endswith((".h", ".cc", ".cuh", ".cu", ".py", ".sh", ".txt", ".md",
                                  ".cmake", ".json", ".in")):
                continue
            with open(p, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    for cited in re.findall(r"(?<![\w/.])docs/[\w\-./]*\w", line):
                        if not os.path.exists(os.path.join(source, cited)):
                            problems.append(f"{os.path.relpath(p, source)}:{n}: cites "
                                            f"{cited}, which does not exist")
                    if "DESIGN.md" in line:
                        problems.append(f"{os.path.relpath(p, source)}:{n}: cites DESIGN.md, "
                                        "which is not in the repository (docs/semantics.md)")
    for page in pages:
        with open(page, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if "DESIGN.md" in line:
                    problems.append(f"{os.path.relpath(page, source)}:{n}: cites DESIGN.md")
    return problems


def ignored_top_level(source):
    pats = []
    try:
        with open(os.path.join(source, ".gitignore")) as f:
            pats = [l.strip().strip("/") for l in f if l.strip().startswith("/")]
    except OSError:
        pass
    return pats


def tree_problems(source):
    import fnmatch
    with open(os.path.join(source, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- folders:begin -->(.*?)<!-- folders:end -->", text, re.S)
    if not m:
        return ["docs/architecture.md: no folder table (<!-- folders:begin --> ... end)"]
    listed = re.findall(r"^\| `([^`/]+)/` \|", m.group(1), re.M)
    cited = re.findall(r"`([\w\-]+(?:/[\w\-.]+)*/)`", m.group(1))
    ignored = ignored_top_level(source)
    actual = sorted(
        d for d in os.listdir(source)
        if os.path.isdir(os.path.join(source, d)) and not d.startswith(".")
        and not any(fnmatch.fnmatch(d, p) for p in ignored)
        and d not in ("third_party", "__pycache__"))
    problems = [f"docs/architecture.md: folder {d}/ is in the repository but not in the table"
                for d in actual if d not in listed]
    problems += [f"docs/architecture.md: folder {d}/ is in the table but not in the repository"
                 for d in listed if d not in actual]
    problems += [f"docs/architecture.md: cites {c}, which does not exist"
                 for c in cited if not os.path.isdir(os.path.join(source, c))]
    return problems


def report(problems, what):
    for p in problems:
        print(f"docs: {p}", file=sys.stderr)
    if not problems:
        print(f"docs: {what}: OK")
    return 1 if problems else 0


def self_test():
    """Each check must be able to fail."""
    assert output_matches("a  b\n...\nd ... f", "x\na b\nc\nd e f\n") is None
    assert output_matches("a b\nc", "a b\nx\nc") == "c"  # no '...': lines must follow
    assert output_matches("zzz", "a\nb") == "zzz"
    assert slug("External programs (`--backend external`)") == "external-programs---backend-external"
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs"))
        os.makedirs(os.path.join(d, "kernels"))
        os.makedirs(os.path.join(d, "build-x"))
        with open(os.path.join(d, ".gitignore"), "w") as f:
            f.write("/build*/\n")
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write("# T\n\n[ok](docs/a.md#b) [bad](docs/missing.md) [anchor](docs/a.md#nope)\n"
                    "<!-- snippet illustration -->\n```\nx\n```\n\n```sh\nls\n```\n")
        with open(os.path.join(d, "docs", "a.md"), "w") as f:
            f.write("# A\n\n## B\n")
        with open(os.path.join(d, "kernels", "k.h"), "w") as f:
            f.write("// see docs/nothing.md and DESIGN.md\n")
        problems = link_problems(d)
        assert any("docs/missing.md" in p for p in problems), problems
        assert any("#nope" in p for p in problems), problems
        assert not any("a.md#b" in p for p in problems), problems
        assert any("docs/nothing.md" in p for p in problems), problems
        assert any("k.h:1: cites DESIGN.md" in p for p in problems), problems
        assert len(unmarked(os.path.join(d, "README.md"))) == 1
        assert any("Check your own kernel" in p
                   for p in front_door_problems(os.path.join(d, "README.md")))
        with open(os.path.join(d, "README.md"), "a") as f:
            f.write("x\n" * MAX_README_LINES)
        assert any("more than" in p for p in front_door_problems(os.path.join(d, "README.md")))
        with open(os.path.join(d, "docs", "architecture.md"), "w") as f:
            f.write("<!-- folders:begin -->\n| `docs/` | x |\n| `gone/` | y |\n"
                    "<!-- folders:end -->\n")
        problems = tree_problems(d)
        assert any("kernels/ is in the repository" in p for p in problems), problems
        assert any("gone/ is in the table" in p for p in problems), problems
        assert not any("build-x" in p for p in problems), problems
    print("check_docs self-test: output, anchors, links, markers and tree checks fail as they must")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("snippets")
    s.add_argument("group")
    s.add_argument("--source", required=True)
    s.add_argument("--build", required=True)
    for name in ("links", "tree", "ci"):
        p = sub.add_parser(name)
        p.add_argument("--source", required=True)
    sub.add_parser("self-test")
    args = ap.parse_args()
    if args.command == "snippets":
        return run_snippets(args)
    if args.command == "links":
        return report(link_problems(args.source), "links")
    if args.command == "tree":
        return report(tree_problems(args.source), "folder table")
    if args.command == "ci":
        readme = os.path.join(args.source, "README.md")
        return report(unmarked(readme) + check_ci(args.source) + front_door_problems(readme),
                      "README's CI commands, snippet markers, length and first screen")
    return self_test()


if __name__ == "__main__":
    sys.exit(main())
