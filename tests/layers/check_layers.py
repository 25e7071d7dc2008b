#!/usr/bin/env python3
"""The one-way arrows between deltacheck's folders (docs/architecture.md, "Dependencies"): every
project #include of a C++/CUDA source must point to its own folder or to one the table below
allows. A new arrow back up fails with the file, the line and the include.

    check_layers.py check --source DIR     the repository
    check_layers.py self-test              the check can fail (a planted include is caught)
"""
import argparse
import os
import re
import sys
import tempfile

# folder -> the folders it may include (besides itself). golden/ and reports/ sit above the harness
# (fixtures are prepared and judged by it; reports hold its verdicts); "golden" from "backends" is
# the external protocol's file format. The tool (tools/deltacheck) stands on the public API alone:
# include/deltacheck, which reaches everything below it.
BELOW_KERNELS = ["core", "kernels/common"]
ALLOWED = {
    "core": [],
    "reference": ["core"],
    "kernels/common": ["core"],
    "kernels/cpu": BELOW_KERNELS,
    "kernels/cuda": BELOW_KERNELS,
    "kernels/torch": BELOW_KERNELS,
    "cases": ["core", "kernels/common"],
    "ops": ["core", "reference", "cases", "kernels/common"],
    "harness": ["core", "reference", "cases", "ops", "kernels/common", "kernels/cpu"],
    "golden": ["core", "cases", "ops", "harness"],
    "reports": ["core", "cases", "ops", "harness", "golden"],
    "backends": ["core", "reference", "cases", "ops", "harness", "golden",
                         "kernels/common", "kernels/cpu", "kernels/cuda", "kernels/torch"],
    "tools/deltacheck": ["deltacheck"],
    "include": ["core", "cases", "ops", "harness", "reports", "golden", "deltacheck"],
    "api": ["core", "cases", "ops", "harness", "backends", "reports", "golden",
            "deltacheck", "include", "kernels/common", "kernels/cpu"],
}
SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path):
    """The layer a repository-relative path belongs to, or None (tests, bench, ...)."""
    parts = path.split("/")
    if parts[0] == "kernels" and len(parts) > 2:
        return "kernels/" + parts[1]
    if parts[0] == "tools" and len(parts) > 2:
        return "tools/" + parts[1]
    if parts[0] == "include" and len(parts) > 1 and parts[1] == "deltacheck":
        return "include"
    if parts[0] == "deltacheck":  # "deltacheck/x.h" as the public headers include each other
        return "deltacheck"
    return parts[0] if parts[0] in ALLOWED or parts[0] == "deltacheck" else None


def problems(source):
    found = []
    for layer in ALLOWED:
        top = os.path.join(source, layer)
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, source)
                own = folder_of(rel)
                if own != layer:  # a deeper layer (kernels/cpu inside kernels) is its own
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = folder_of(m.group(1))
                        if target is None or target == own:
                            continue
                        if target == "deltacheck" and own == "include":
                            continue
                        if target not in ALLOWED[own]:
                            found.append(f"{rel}:{n}: {own}/ includes \"{m.group(1)}\" "
                                         f"({target}/ is not below {own}/, docs/architecture.md)")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as d:
        for rel, text in [("core/a.h", '#include "core/b.h"\n'),
                          ("reference/r.h", '#include "core/a.h"\n#include "kernels/cpu/k.h"\n'),
                          ("kernels/cpu/k.h", '#include "harness/runner.h"\n'),
                          ("cases/c.h", '#include "ops/registry.h"\n'),
                          ("ops/gdr/o.h", '#include "cases/case.h"\n#include "harness/runner.h"\n'),
                          ("harness/h.cc", '#include "backends/registry.h"\n'),
                          ("tools/deltacheck/t.cc",
                           '#include "deltacheck/runner.h"\n#include "harness/runner.h"\n')]:
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        found = problems(d)
        assert any(p.startswith("reference/r.h:2:") for p in found), found
        assert any(p.startswith("kernels/cpu/k.h:1:") for p in found), found
        assert any(p.startswith("cases/c.h:1:") for p in found), found
        assert any(p.startswith("ops/gdr/o.h:2:") for p in found), found
        assert any(p.startswith("tools/deltacheck/t.cc:2:") for p in found), found
        assert any(p.startswith("harness/h.cc:1:") for p in found), found
        assert len(found) == 6, found
    print("check_layers self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["check", "self-test"])
    ap.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = ap.parse_args()
    if args.command == "self-test":
        return self_test()
    found = problems(os.path.abspath(args.source))
    for p in found:
        print("layers: " + p, file=sys.stderr)
    if not found:
        print("layers: every include points down or sideways (docs/architecture.md)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
