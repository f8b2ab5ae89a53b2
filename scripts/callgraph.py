#!/usr/bin/env python3
"""The call graph between object files, read from their own symbols.

For each .o of libtaccore.a (plus memcached.o and metrics.o) it runs `nm` and
records what the object defines and what it takes from the others. An edge
A -> B means A uses a symbol B defines. It then reports:

  * circles between subsystems (a subsystem is a folder; the root holds
    only main, memcached.c), and every arrow that runs up the layer map of
    doc/design.md ("The layers"): LAYERS below, top first;
  * inside tac/ (and its subfolders), every pair of files that use each other
    and every longer circle.

Usage: scripts/callgraph.py [BUILD_DIR] [--edges] [--subsystems]
  BUILD_DIR  where the objects are (default: the current directory).
  --edges    print every file edge with the symbols it carries.
  --subsystems  print the subsystem graph.
Exits 1 when a forbidden circle exists, so a test can run it.
"""
import os
import subprocess
import sys
from collections import defaultdict


# doc/design.md's layer map, top first: a file may call only files of its
# own folder or of a folder ranked below it.
LAYERS = {"root": 7, "proto": 6, "net": 5, "tac": 4, "engine": 3, "nvm": 2,
          "ssd": 2, "base": 1}


def subsystem(path):
    """The subsystem a source file belongs to: its folder, or 'root'."""
    parts = path.split("/")
    if len(parts) > 1:
        return parts[0]
    return "root"


def objects(build):
    out = []
    for dirpath, dirnames, filenames in os.walk(build):
        rel = os.path.relpath(dirpath, build)
        if rel != "." and rel.startswith(("tests", "bench", "build-", ".", "autom4te",
                           "tools", "contrib", "doc", "m4")):
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames
                       if not d.startswith(("build-", ".", "tmp"))]
        for f in filenames:
            if f.endswith(".o"):
                p = os.path.normpath(os.path.join(rel, f))
                out.append(p)
    return sorted(out)


def symbols(build, obj):
    res = subprocess.run(["nm", "--defined-only", "-g", os.path.join(build, obj)],
                         capture_output=True, text=True, check=True)
    defined = set()
    for line in res.stdout.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRCGSVW":
            defined.add(f[2])
    res = subprocess.run(["nm", "-u", os.path.join(build, obj)],
                         capture_output=True, text=True, check=True)
    used = {line.split()[-1] for line in res.stdout.splitlines() if line.strip()}
    return defined, used


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index = {}
    low = {}
    stack = []
    on = set()
    out = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build = args[0] if args else "."
    objs = objects(build)
    defs = {}
    uses = {}
    for o in objs:
        defs[o], uses[o] = symbols(build, o)
    owner = {}
    for o, ds in defs.items():
        for s in ds:
            owner.setdefault(s, o)
    edges = defaultdict(dict)
    for o, us in uses.items():
        for s in us:
            d = owner.get(s)
            if d and d != o:
                edges[o].setdefault(d, []).append(s)

    src = {o: o[:-2] + ".c" for o in objs}
    if "--edges" in sys.argv:
        for o in objs:
            for d in sorted(edges.get(o, {})):
                print(f"{src[o]} -> {src[d]}: {' '.join(sorted(edges[o][d]))}")

    sub_edges = defaultdict(set)
    for o, ds in edges.items():
        for d in ds:
            a, b = subsystem(src[o]), subsystem(src[d])
            if a != b:
                sub_edges[a].add(b)
    if "--subsystems" in sys.argv:
        for a in sorted(sub_edges):
            print(f"{a} -> {', '.join(sorted(sub_edges[a]))}")

    bad = 0
    for comp in cycles(set(sub_edges) | {b for v in sub_edges.values() for b in v},
                       sub_edges):
        bad += 1
        print("circle between subsystems: " + " <-> ".join(comp))
        for a in comp:
            for o, ds in edges.items():
                if subsystem(src[o]) != a:
                    continue
                for d, syms in ds.items():
                    if subsystem(src[d]) in comp and subsystem(src[d]) != a:
                        print(f"   {src[o]} -> {src[d]}: {' '.join(sorted(syms)[:6])}")

    for o, ds in edges.items():
        for d, syms in ds.items():
            a, b = subsystem(src[o]), subsystem(src[d])
            if a != b and LAYERS.get(b, 0) >= LAYERS.get(a, 0):
                bad += 1
                print(f"arrow up: {src[o]} -> {src[d]}: {' '.join(sorted(syms)[:6])}")

    tac = {o for o in objs if src[o].startswith("tac/")}
    tac_edges = {o: {d for d in edges.get(o, {}) if d in tac} for o in tac}
    for comp in cycles(tac, tac_edges):
        bad += 1
        print("circle inside tac/: " + " <-> ".join(src[o] for o in comp))
        for o in comp:
            for d in sorted(tac_edges[o]):
                if d in comp:
                    print(f"   {src[o]} -> {src[d]}: {' '.join(sorted(edges[o][d])[:6])}")
    if bad == 0:
        print(f"{len(objs)} objects: no circle between subsystems, no arrow up "
              "the layers, no circle inside tac/")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
