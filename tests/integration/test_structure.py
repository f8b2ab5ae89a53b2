"""The source tree's shape, as doc/design.md ("The layers", "Module structure") states it.

- Each layer folder has a README.md that says what it owns, and design.md opens with the
  layer map.
- No production source file is over 1,200 lines and no function over 150.
- The call graph read from the objects' own symbols (scripts/callgraph.py, `nm`) has no
  arrow running up the layers, no circle between folders and none inside tac/.
"""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FOLDERS = ["base", "engine", "net", "proto", "tac", "nvm", "ssd"]
MAX_FILE_LINES = 1200
MAX_FUNCTION_LINES = 150


def production_sources():
    out = [os.path.join(REPO, "memcached.c")]
    for d in FOLDERS:
        for root, _dirs, files in os.walk(os.path.join(REPO, d)):
            out += [os.path.join(root, f) for f in files if f.endswith((".c", ".h"))]
    return sorted(out)


def test_folders_say_what_they_own():
    for d in FOLDERS:
        readme = os.path.join(REPO, d, "README.md")
        assert os.path.exists(readme), "%s/ has no README.md" % d
        text = open(readme).read()
        assert text.startswith("# %s/" % d) and "Owns" in text, readme
    design = open(os.path.join(REPO, "doc", "design.md")).read()
    first = re.search(r"^## (.*)$", design, re.M).group(1)
    assert first == "The layers", "doc/design.md opens with %r" % first
    for d in FOLDERS:
        assert "`%s/`" % d in design.split("## The data model")[0], d


FUNC_START = re.compile(r"^(?:static\s+)?(?:inline\s+)?(?:(?:const|unsigned|struct|enum|union)\s+)*"
                        r"[A-Za-z_][A-Za-z_0-9]*\s+\**([A-Za-z_][A-Za-z_0-9]*)\(")


def functions(path):
    """(name, first line, lines) of each function defined at file scope."""
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        m = FUNC_START.match(lines[i])
        if m and not lines[i].rstrip().endswith(";"):
            j = i
            while j < len(lines) and not lines[j].startswith("{"):
                if lines[j].rstrip().endswith(";"):
                    break
                j += 1
            if j < len(lines) and lines[j].startswith("{"):
                k = j
                while not lines[k].startswith("}"):
                    k += 1
                yield m.group(1), i + 1, k - i + 1
                i = k
        i += 1


def test_no_file_or_function_too_long():
    long_files, long_funcs = [], []
    for p in production_sources():
        rel = os.path.relpath(p, REPO)
        n = open(p).read().count("\n")
        if n > MAX_FILE_LINES:
            long_files.append("%s: %d lines" % (rel, n))
        if p.endswith(".c"):
            long_funcs += ["%s:%d %s: %d lines" % (rel, at, name, size)
                           for name, at, size in functions(p) if size > MAX_FUNCTION_LINES]
    assert not long_files, long_files
    assert not long_funcs, long_funcs


def test_call_graph_follows_the_layers():
    objs = [os.path.join(REPO, d, f) for d in FOLDERS for f in os.listdir(os.path.join(REPO, d))
            if f.endswith(".o")]
    if not objs:
        pytest.skip("no objects in the source tree (built out of tree)")
    r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "callgraph.py"), REPO],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no arrow up" in r.stdout, r.stdout
