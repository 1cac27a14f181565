#!/usr/bin/env python3
"""Checks the layout rules of src/ (issue 9): no file over 600 lines,
src/watchdog/action.rs at most 400, no import cycle between src/ files,
no raw `libc::poll(`.

Imports are read from the text: `use crate::…`, `use super::…` and inline
`crate::a::b` paths. A path names the deepest file it reaches
(`crate::audit::record::Ident` -> src/audit/record.rs); `mod` declarations
are not imports. Exit 0 when every rule holds, 1 with each breach named.

    python3 tools/layout.py            # check
    python3 tools/layout.py --graph    # print the file-level import graph
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
MAX_LINES = 600
LIMITS = {"watchdog/action.rs": 400}


def files():
    out = []
    for d, _, fs in os.walk(ROOT):
        for f in fs:
            if f.endswith(".rs"):
                out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return sorted(out)


def module_of(rel):
    """src/audit/record.rs -> ['audit', 'record']; mod.rs/lib.rs -> the dir."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    if parts and parts[0] == "bin":
        return None
    return parts


def resolve(segments, known):
    """Deepest existing file for a module path; None if none."""
    for n in range(len(segments), 0, -1):
        cand = "/".join(segments[:n])
        if cand + ".rs" in known:
            return cand + ".rs"
        if cand + "/mod.rs" in known:
            return cand + "/mod.rs"
    return None


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def imports(rel, known):
    text = strip_comments(open(os.path.join(ROOT, rel)).read())
    me = module_of(rel) or []
    # `super` of a/b.rs is a; of a/b/mod.rs (module a::b) it is a too.
    parent = me[:-1]
    deps = set()
    # `crate::` and `super::` paths, anywhere (use lines and inline paths);
    # one brace level is expanded.
    for prefix, root in (("crate", []), ("super", parent)):
        pat = r"\b" + prefix + r"::((?:[a-z_][a-z0-9_]*::)*)(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)"
        for m in re.finditer(pat, text):
            base = root + [p for p in m.group(1).split("::") if p]
            tail = m.group(2)
            if tail.startswith("{"):
                tails = [t.strip().split("::")[0] for t in tail.strip("{}").split(",")]
            else:
                tails = [tail]
            for t in tails:
                f = resolve(base + ([t] if t else []), known)
                if f:
                    deps.add(f)
    deps.discard(rel)
    # a module's own mod.rs/lib.rs is not a dependency of its children
    return {d for d in deps if not d.endswith("mod.rs") and d != "lib.rs"}


def cycles(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    known = set(files())
    graph = {f: imports(f, known) for f in known if not f.startswith("bin/")}
    if "--graph" in sys.argv:
        for f in sorted(graph):
            print(f"{f} -> {', '.join(sorted(graph[f])) or '-'}")
        return 0
    bad = []
    for f in sorted(known):
        n = sum(1 for _ in open(os.path.join(ROOT, f)))
        limit = LIMITS.get(f, MAX_LINES)
        if n > limit:
            bad.append(f"src/{f}: {n} lines (at most {limit})")
        if "libc::poll(" in open(os.path.join(ROOT, f)).read():
            bad.append(f"src/{f}: raw libc::poll( (use nix::poll)")
    for c in cycles(graph):
        bad.append("import cycle: " + " <-> ".join("src/" + x for x in c))
    for b in bad:
        print(b)
    print(f"layout: {len(known)} files, {len(bad)} breach(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
