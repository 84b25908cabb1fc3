#!/usr/bin/env python3
"""Draws the module graph of the `lfrt` crate from its own paths and fails on an import circle,
on a layer that reaches above itself, or on a layer that uses what its module doc does not allow.

A node is a module file under src/ (src/engine/lane.rs is `engine::lane`; a folder's mod.rs is the
folder; a file's own folder holds its child modules: src/engine/leader/loom_tests.rs is
`engine::leader::loom_tests`). An edge a -> b means a's code names an item of b: in a `use`
declaration (grouped `use crate::{a::X, b::{c::Y}}` trees, `self`, `super::`, `super::super::` and
child-module paths included) or as an inline path (`crate::b::f()`, `super::b::f()`, or `b::f()`
after `use crate::b`). A path through the crate root (`crate::LaneConfig`,
`crate::handlers::UdpEcho`, `crate::os::now_ns`) is followed through lib.rs's own `use` declarations
to the module that defines it. Comments, strings and test code (items under `#[cfg(test)]` or
`#[cfg(all(test, …))]`, and files only such a `mod x;` declares) make no edge; code after a test
module does. Macros (`syscall!`) make none either: their paths are not read.

Rules, each checked on every edge:
* Layers, lowest first; a module may use only its own layer and those below it:

      sys = error < sync < observe < engine < sources < task < bound < config < runtime < (lib)

* A layer whose top module (its mod.rs, or error.rs) has a `**May use:**` line may use only
  what that line names in backticks: a whole layer (`sys`) or a part of one (`engine::handler`,
  `engine::word::Token`), so the docs and the check cannot drift apart.
* No circle among modules, inside a layer or across layers.
* `libc` and `nix` are named only in files under src/sys/, test code included (comments and
  strings do not count): every system call lives below sys/, and the rest of the crate names
  what sys/ gives it (`sys::net::is_out_of_resources`, `sys::epoll::is_not_member`).

Usage: scripts/layers.py [--graph] [--src DIR] | scripts/layers.py --self-test
"""
import os
import re
import shutil
import sys
import tempfile

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
RANK = {"sys": 0, "error": 0, "sync": 1, "observe": 2, "engine": 3, "sources": 4, "task": 4,
        "bound": 5, "config": 6, "runtime": 7}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


# ---------------------------------------------------------------------------------------------
# Source text: comments, strings and character literals blanked (newlines kept), so braces,
# semicolons and `crate::` inside them mean nothing.

def clean(text):
    out, i, n = [], 0, len(text)

    def blank(s):
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not
                                                                 re.match(r"\w", text[i - 1])):
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i:j + 1]))
            i = j + 1
        elif c == "'" and (m := re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'").match(text, i)):
            out.append(blank(m.group(0)))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(text, i, open_="{", close="}"):
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def item_end(text, i):
    """End of the item that starts at i: its `;` or its braced body, at bracket depth 0."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and c == ";":
            return j + 1
        elif depth == 0 and c == "{":
            return matching(text, j)
    return len(text)


def test_only(expr):
    """Whether a cfg predicate holds only in test builds: `test`, `all(…, test, …)`."""
    expr = expr.strip()
    if expr == "test":
        return True
    m = re.fullmatch(r"(all|any)\((.*)\)", expr, re.S)
    if not m:
        return False
    args, depth, cur = [], 0, ""
    for c in m.group(2):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            args.append(cur)
            cur = ""
        else:
            cur += c
    args = [a for a in args + [cur] if a.strip()]
    if m.group(1) == "all":
        return any(test_only(a) for a in args)
    return bool(args) and all(test_only(a) for a in args)


CFG = re.compile(r"#\s*\[\s*cfg\s*\(")


def strip_tests(text):
    """Blanks every item gated by a test-only cfg. Returns (text, test-only `mod x;` names,
    whether the whole file is test-only)."""
    whole = False
    m = re.match(r"\s*(?:#!\[[^\]]*\]\s*)*", text)
    for inner in re.finditer(r"#!\[\s*cfg\s*\((.*?)\)\s*\]", text[: m.end()], re.S):
        whole = whole or test_only(inner.group(1))
    test_mods, pos = set(), 0
    while (m := CFG.search(text, pos)):
        close = matching(text, m.end() - 1, "(", ")")
        attr_end = matching(text, m.start() + text[m.start():].index("["), "[", "]")
        pos = attr_end
        if not test_only(text[m.end():close - 1]):
            continue
        j = attr_end
        while (a := re.compile(r"\s*#\s*\[").match(text, j)):
            j = matching(text, a.end() - 1, "[", "]")
        end = item_end(text, j)
        decl = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text[j:end])
        if decl:
            test_mods.add(decl.group(1))
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start():end]) + text[end:]
        pos = end
    return text, test_mods, whole


SYSTEM_CRATE = re.compile(r"(?<![\w$:])(?:::\s*)?(libc|nix)\s*::|\bextern\s+crate\s+(libc|nix)\b")


def system_crates(rel, text):
    """(file, line, crate) for every path through `libc` or `nix` in a cleaned text."""
    return [(rel, text.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2))
            for m in SYSTEM_CRATE.finditer(text)]


# ---------------------------------------------------------------------------------------------
# Paths.

def use_trees(text):
    """(position, [segments, alias]) for every path a `use` declaration names."""
    out = []
    for m in re.finditer(r"(?<![\w$])use\s+(?!<)", text):
        end = text.find(";", m.end())
        end = len(text) if end < 0 else end
        toks = re.findall(IDENT + r"|::|[{},*]|\$", text[m.end():end])
        out.extend((m.start(), p) for p in parse_tree(toks))
    return out


def parse_tree(toks):
    paths, i = [], 0

    def tree(prefix):
        nonlocal i
        segs = list(prefix)
        while i < len(toks):
            t = toks[i]
            if t == "{":
                i += 1
                while i < len(toks) and toks[i] != "}":
                    tree(segs)
                    if i < len(toks) and toks[i] == ",":
                        i += 1
                i += 1
                return
            if t == "*":
                i += 1
                paths.append((segs, None))
                return
            if t in (",", "}"):
                break
            if t == "::" or t == "$":
                i += 1
                continue
            if t == "as":
                alias = toks[i + 1] if i + 1 < len(toks) else None
                i += 2
                paths.append((segs, alias))
                return
            segs = segs + [t]
            i += 1
        if segs and segs != list(prefix):
            if segs[-1] == "self":
                segs = segs[:-1]
            paths.append((segs, segs[-1] if segs else None))

    while i < len(toks):
        tree([])
        if i < len(toks) and toks[i] == ",":
            i += 1
    return paths


def inline_mods(text):
    """(start, end, name) of every inline `mod name { … }` block."""
    out = []
    for m in re.finditer(r"(?<!\w)mod\s+(" + IDENT + r")\s*\{", text):
        out.append((m.end() - 1, matching(text, m.end() - 1), m.group(1)))
    return out


def scope_at(module, mods, pos):
    path = module.split("::") if module else []
    for start, end, name in mods:
        if start <= pos < end:
            path = path + [name]
    return path


class Crate:
    def __init__(self, src):
        self.src = src
        self.files, self.texts, self.test_mods = {}, {}, set()
        self.sys_crates = []  # (file, line, name) where libc or nix is named outside sys/
        for root, _, names in os.walk(src):
            for f in names:
                if f.endswith(".rs"):
                    p = os.path.join(root, f)
                    rel = os.path.relpath(p, src)[:-3].split(os.sep)
                    if rel[-1] == "mod":
                        rel = rel[:-1]
                    module = "" if rel == ["lib"] else "::".join(rel)
                    cleaned = clean(open(p).read())
                    if rel[0] != "sys":
                        self.sys_crates += system_crates(os.path.relpath(p, src), cleaned)
                    text, tests, whole = strip_tests(cleaned)
                    self.files[module], self.texts[module] = p, text
                    self.test_mods |= {f"{module}::{t}" if module else t for t in tests}
                    if whole:
                        self.test_mods.add(module)
        self.modules = {m for m in self.files
                        if m and not any(m == t or m.startswith(t + "::") for t in self.test_mods)}
        self.root_names = self.aliases("")

    def aliases(self, module):
        """What each name a module's `use` declarations bring in stands for, as a path from the
        crate root; for lib.rs, keyed by the (inline) module path it is declared in."""
        text = self.texts.get(module, "")
        mods = inline_mods(text)
        out = {}
        for pos, (segs, alias) in use_trees(text):
            scope = scope_at(module, mods, pos)
            target = self.absolute(segs, scope, out, module)
            if target is not None and alias and alias != "_":
                out[tuple(scope) + (alias,) if module == "" else (alias,)] = target
        return out

    def absolute(self, segs, scope, aliases, module):
        """A path as seen from `scope`, from the crate root; None if it leaves the crate."""
        if not segs:
            return None
        if segs[0] == "crate":
            return self.through_root(segs[1:])
        if segs[0] in ("self", "super"):
            base = list(scope)
            while segs and segs[0] in ("self", "super"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            return self.through_root(base + segs)
        key = tuple(scope) + (segs[0],) if module == "" else (segs[0],)
        if key in aliases:
            return aliases[key] + segs[1:]
        child = scope + [segs[0]]
        if "::".join(child) in self.files:
            return self.through_root(child + segs[1:])
        return None

    def through_root(self, segs):
        """Follows names the crate root re-exports (`LaneConfig` → `config::LaneConfig`)."""
        for _ in range(8):
            names = getattr(self, "root_names", {})
            for k in range(len(segs), 0, -1):
                if tuple(segs[:k]) in names:
                    segs = names[tuple(segs[:k])] + segs[k:]
                    break
            else:
                return segs
        return segs

    def node(self, segs):
        """The module a path from the root lands in (the longest module prefix)."""
        for k in range(len(segs), 0, -1):
            m = "::".join(segs[:k])
            if m in self.modules:
                return m
        return None

    def uses(self):
        """module -> {(module it uses, full path used)}"""
        out = {m: set() for m in self.modules}
        for m in self.modules:
            text = self.texts[m]
            mods = inline_mods(text)
            aliases = self.aliases(m)
            paths = [(pos, segs) for pos, (segs, _) in use_trees(text)]
            heads = ["crate", "self", "super"] + sorted({a[0] for a in aliases if len(a) == 1})
            inline = re.compile(r"(?<![\w:])\$?(" + "|".join(map(re.escape, heads)) +
                                r")((?:\s*::\s*" + IDENT + r")+)")
            for x in inline.finditer(text):
                paths.append((x.start(), [x.group(1)] + re.findall(IDENT, x.group(2))))
            for pos, segs in paths:
                scope = scope_at(m, mods, pos)
                target = self.absolute(segs, scope, aliases, m)
                n = self.node(target) if target else None
                if n and n != m and not m.startswith(n + "::") and not n.startswith(m + "::"):
                    out[m].add((n, "::".join(target)))
        return out

    def may_use(self, layer):
        """What a layer's top module says it may use (None where it says nothing)."""
        text = open(self.files[layer]).read() if layer in self.files else ""
        doc = "\n".join(l[3:] for l in text.splitlines() if l.startswith("//!"))
        m = re.search(r"\*\*May use:\*\*(.*?)(?:\*\*Must never use|\n\s*\*\s|\n\s*\n|$)", doc,
                      re.S)
        if not m:
            return None
        return {t for t in re.findall(r"`([A-Za-z_][A-Za-z0-9_:]*)`", m.group(1))
                if t.split("::")[0] in RANK}


# ---------------------------------------------------------------------------------------------

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
        for w in sorted(g[v]):
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
    for v in sorted(g):
        if v not in index:
            visit(v)
    return comps


def check(src, graph=False):
    """(problems, summary line)."""
    crate = Crate(src)
    used = crate.uses()
    g = {m: {n for n, _ in used[m]} for m in used}
    out = []
    if graph:
        for m in sorted(g):
            print(f"{m} -> {', '.join(sorted(g[m])) or '-'}")
    for comp in cycles(g):
        out.append("circle: " + " <-> ".join(comp))
    for rel, line, name in crate.sys_crates:
        out.append(f"`{name}` outside src/sys/ (every system call lives below sys/; give sys/ a "
                   f"named constant or function): {rel}:{line}")
    allowed = {l: crate.may_use(l) for l in RANK}
    for m in sorted(used):
        lm = layer(m)
        if lm not in RANK:
            out.append(f"unplaced module: {m} (add its folder to scripts/layers.py)")
            continue
        bad = {}
        for n, path in sorted(used[m]):
            ln = layer(n)
            if ln == lm or ln not in RANK:
                continue
            if RANK[ln] > RANK[lm]:
                bad.setdefault(f"upward use: {m} ({lm}) -> {n} ({ln})", []).append(path)
            elif allowed[lm] is not None and not any(
                    path == a or path.startswith(a + "::")
                    # a module imported to name an allowed item of it (`use crate::engine;`
                    # then `engine::handler::…`): its inline paths are judged one by one
                    or (path in crate.modules and a.startswith(path + "::"))
                    for a in allowed[lm]):
                may = ", ".join(sorted(allowed[lm])) or "nothing"
                bad.setdefault(f"not in {lm}'s May use ({may}): {m} -> {n}", []).append(path)
        for problem, paths in bad.items():
            more = f" (+{len(paths) - 3} more)" if len(paths) > 3 else ""
            out.append(f"{problem}: {', '.join(paths[:3])}{more}")
    summary = (f"layers: {len(g)} modules, {sum(len(v) for v in g.values())} uses, no circle, "
               "no upward use, every use allowed by its layer's doc, no libc or nix outside sys/")
    return sorted(set(out), key=out.index), summary


# ---------------------------------------------------------------------------------------------
# Self-test: small fake crates, one violation each, each must be caught; the clean one passes.

CLEAN = {
    "lib.rs": """
        mod sys; mod engine; mod sources; mod config; mod runtime; mod observe;
        pub use config::{LaneConfig, line as config_line};
        pub use engine::word::Token;
        pub use sources::{handlers};
        pub mod os { pub use crate::sys::now_ns; }
    """,
    "sys/mod.rs": "//! * **May use:** nothing else of the crate.\npub fn now_ns() -> u64 { 0 }\n"
                  "pub(crate) fn is_not_member(e: i32) -> bool { e == libc::ENOENT }\n"
                  "#[macro_export] macro_rules! s { () => { $crate::sys::now_ns() } }\n",
    "observe/mod.rs": "//! * **May use:** `sys` only.\npub mod metrics;\n",
    "observe/metrics.rs": "use crate::sys;\npub struct M;\n",
    "engine/mod.rs": "//! * **May use:** `sys`, `observe`.\npub mod handler; pub mod leader; "
                     "pub mod word;\n",
    "engine/handler.rs": "use super::word::Token;\nuse crate::observe::metrics::M;\n"
                         "pub trait H {}\n",
    "engine/leader.rs": """
        use crate::sys::{self};
        // crate::config::LaneConfig in a comment is no use, nor libc::ENOENT
        const E: &str = "nix::errno::Errno";
        const S: &str = "crate::config::LaneConfig";
        const C: char = '{';
        fn f() -> [u8; 2] { let _ = sys::now_ns(); [0; 2] }
        #[cfg(test)]
        mod tests { use crate::config::LaneConfig; use crate::runtime::R; }
        #[cfg(all(test, not(loom)))]
        fn helper() { crate::config::line(); }
        fn after() -> u64 { crate::sys::now_ns() }
        #[cfg(all(test, loom))]
        mod loom_tests;
    """,
    "engine/leader/loom_tests.rs": "use super::*;\nuse crate::runtime::R;\n",
    "engine/word.rs": "pub struct Token; pub(crate) enum Word {}\n",
    "sources/mod.rs": "//! * **May use:** the engine's handler interface (`engine::handler`, and\n"
                      "//!   `engine::word::Token`), `sys` and `observe`.\n"
                      "//! * **Must never use:** `config`.\npub mod handlers; pub mod timer;\n",
    "sources/handlers.rs": "use crate::engine::{handler::H, word::Token};\nuse crate::Token as T;\n"
                           "pub struct Echo;\n",
    "sources/timer.rs": "use super::handlers::Echo;\nuse crate::os::now_ns;\n",
    "config/mod.rs": "//! * **May use:** `sources`, `engine`, `sys`.\npub struct LaneConfig;\n"
                     "pub fn line() {}\nmod check;\n#[cfg(test)]\nmod tests;\n",
    "config/check/mod.rs": "use super::super::sources::handlers::Echo;\nuse super::LaneConfig;\n",
    "config/tests.rs": "use crate::runtime::R;\n",
    "runtime/mod.rs": "use crate::{config::LaneConfig, engine::{leader, handler::H}};\n"
                      "pub struct R;\nfn f() { leader::run(); crate::handlers::Echo; }\n",
}

CASES = [
    ("grouped use from the root", "engine/leader.rs", "use crate::{config::LaneConfig};",
     "upward use: engine::leader (engine) -> config (config): config::LaneConfig"),
    ("grouped use inside a folder", "sources/timer.rs", "use crate::engine::{leader::run};",
     "not in sources's May use"),
    ("use super::", "sources/handlers.rs", "use super::timer::X;",
     "circle: sources::handlers <-> sources::timer"),
    ("use super::super::", "engine/handler.rs", "use super::super::config::LaneConfig;",
     "upward use: engine::handler (engine) -> config (config): config::LaneConfig"),
    ("inline super::super:: path", "engine/handler.rs", "fn g() { super::super::config::line(); }",
     "upward use: engine::handler (engine) -> config (config): config::line"),
    ("root re-export of a type", "engine/leader.rs", "use crate::LaneConfig;",
     "upward use: engine::leader (engine) -> config (config): config::LaneConfig"),
    ("root re-export renamed, inline", "engine/leader.rs", "fn g() { crate::config_line(); }",
     "upward use: engine::leader (engine) -> config (config): config::line"),
    ("root re-export of a module", "engine/leader.rs", "fn g() { crate::handlers::Echo; }",
     "upward use: engine::leader (engine) -> sources::handlers"),
    ("code after a test module", "engine/word.rs",
     "#[cfg(test)]\nmod tests { fn t() {} }\nfn later() { crate::config::line(); }",
     "upward use: engine::word (engine) -> config (config): config::line"),
    ("a path through an imported module", "sources/timer.rs",
     "use crate::engine;\nfn g() { engine::leader::run(); }",
     "not in sources's May use (engine::handler, engine::word::Token, observe, sys): "
     "sources::timer -> engine::leader: engine::leader::run"),
    ("an engine internal from a source", "sources/timer.rs", "use crate::engine::word::Word;",
     "not in sources's May use"),
    ("a layer below that the doc does not name", "observe/metrics.rs", "use crate::error::E;",
     "not in observe's May use (sys): observe::metrics -> error: error::E"),
    ("a renamed use", "engine/handler.rs", "use crate::config::LaneConfig as G;",
     "upward use: engine::handler (engine) -> config (config): config::LaneConfig"),
    ("a circle across files", "engine/word.rs", "use super::handler::H;",
     "circle: engine::handler <-> engine::word"),
    ("libc outside sys/", "sources/handlers.rs",
     "fn gone(e: i32) -> bool { e == ::libc::ENOENT }",
     "`libc` outside src/sys/ (every system call lives below sys/; give sys/ a named constant "
     "or function): sources/handlers.rs:"),
    ("nix in test code outside sys/", "engine/word.rs",
     "#[cfg(test)]\nmod tests { fn t() { let _ = nix::unistd::gettid(); } }",
     "`nix` outside src/sys/"),
    ("a use of libc outside sys/", "config/mod.rs", "use libc::EIO;", "`libc` outside src/sys/"),
]


def self_test():
    def build(root, files):
        for rel, text in files.items():
            p = os.path.join(root, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)

    failed = 0
    tmp = tempfile.mkdtemp(prefix="layers-self-test-")
    try:
        files = dict(CLEAN, **{"error.rs": "pub struct E;\n"})
        build(os.path.join(tmp, "clean"), files)
        problems, _ = check(os.path.join(tmp, "clean"))
        crate = Crate(os.path.join(tmp, "clean"))
        edges = {(m, n) for m, used in crate.uses().items() for n, _ in used}
        # The clean tree's edges that only a grouped use, an alias, super:: or a root
        # re-export draws must be there; test code and comments must draw none.
        missing = [f"{a} -> {b}" for a, b in [
            ("runtime", "engine::leader"), ("runtime", "sources::handlers"),
            ("sources::timer", "sys"), ("config::check", "sources::handlers"),
            ("engine::leader", "sys"), ("sources::handlers", "engine::word")] if (a, b) not in edges]
        extra = [f"{a} -> {b}" for a, b in [("engine::leader", "config"),
                                            ("engine::leader", "runtime")] if (a, b) in edges]
        extra += [f"{t} is a module" for t in ("config::tests", "engine::leader::loom_tests")
                  if t in crate.modules]
        if problems or missing or extra:
            failed += 1
            print(f"FAIL clean tree: problems {problems}, edges not drawn {missing}, "
                  f"edges drawn from test code or comments {extra}")
        else:
            print("ok   clean tree passes, with the edges only a resolved path draws")
        for i, (name, rel, code, expect) in enumerate(CASES):
            root = os.path.join(tmp, f"case{i}")
            case = dict(files)
            case[rel] = case[rel] + "\n" + code + "\n"
            build(root, case)
            problems, _ = check(root)
            if any(expect in p for p in problems):
                print(f"ok   {name}: {next(p for p in problems if expect in p)}")
            else:
                failed += 1
                print(f"FAIL {name}: expected '{expect}', got {problems or 'nothing'}")
    finally:
        shutil.rmtree(tmp)
    print(f"self-test: {len(CASES) + 1 - failed} of {len(CASES) + 1} cases pass")
    return 1 if failed else 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    src = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else SRC
    problems, summary = check(src, graph="--graph" in sys.argv)
    for p in problems:
        print(p)
    if problems:
        print(f"layers: {len(problems)} problem(s)")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
