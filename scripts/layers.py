#!/usr/bin/env python3
"""Draws the module graph of the `lfrt` crate from its own `use crate::…` / `crate::…` paths and
fails on an import circle or on a layer that reaches above itself.

A node is a module file under src/ (src/engine/group.rs is `engine::group`; a folder's mod.rs is
the folder). An edge a -> b means a's text names `crate::b…` outside its `#[cfg(test)]` tail.
Layers, lowest first; a module may use only its own layer and those below it:

    sys < sync < observe < engine < sources < task < bound < config < runtime < (lib root)

`error` sits beside `sys` (every layer returns it). Usage: scripts/layers.py [--graph]
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
LAYERS = ["sys", "error", "sync", "observe", "engine", "sources", "task", "bound", "config",
          "runtime"]
RANK = {"sys": 0, "error": 0, "sync": 1, "observe": 2, "engine": 3, "sources": 4, "task": 4.5, "bound": 5,
        "config": 6, "runtime": 7}


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    return "::".join(rel)


def modules():
    out = {}
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(root, f)
                out[module_of(p)] = p
    out.pop("lib", None)
    return out


def strip_tests(text):
    # Test modules may reach anywhere; the architecture is the non-test code.
    m = re.search(r"^#\[cfg\((?:test|all\(test, not\(loom\)\))\)\]\s*\n\s*mod tests", text, re.M)
    text = text if not m else text[: m.start()]
    # Comments and doc links do not make an edge.
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def edges(mods):
    names = sorted(mods, key=len, reverse=True)
    out = {m: set() for m in mods}
    for m, p in mods.items():
        text = strip_tests(open(p).read())
        for path in re.findall(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
            for n in names:
                if path == n or path.startswith(n + "::"):
                    if n != m and not m.startswith(n + "::") and not n.startswith(m + "::"):
                        out[m].add(n)
                    break
    return out


def layer(m):
    return m.split("::")[0]


def cycles(g):
    # Tarjan's strongly connected components; a component of more than one module is a circle.
    index, low, stack, on, comps, i = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = i[0]
        i[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in g:
        if v not in index:
            visit(v)
    return comps


def main():
    mods = modules()
    g = edges(mods)
    bad = 0
    if "--graph" in sys.argv:
        for m in sorted(g):
            print(f"{m} -> {', '.join(sorted(g[m])) or '-'}")
    for comp in cycles(g):
        print("circle: " + " <-> ".join(comp))
        bad += 1
    for m in sorted(g):
        lm = layer(m)
        if lm not in RANK:
            print(f"unplaced module: {m} (add its folder to scripts/layers.py)")
            bad += 1
            continue
        for n in sorted(g[m]):
            ln = layer(n)
            if ln in RANK and RANK[ln] > RANK[lm]:
                print(f"upward use: {m} ({lm}) -> {n} ({ln})")
                bad += 1
    if bad:
        print(f"layers: {bad} problem(s)")
        return 1
    print(f"layers: {len(g)} modules, {sum(len(v) for v in g.values())} uses, no circle, no upward use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
