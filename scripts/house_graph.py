#!/usr/bin/env python3
"""house_graph.py: the include and call graph of compiler/ and runtime/, and its cycles.

A node is a module: a .c file together with the .h of the same name (emit.c and emit.h), or a header
alone (ir.h, kernels.h). A module A points at B when
  - one of A's files has `#include "..."` of one of B's files (resolved as the Makefile's -Icompiler
    -Iruntime do: beside the including file first), or
  - A's code names a function that B's .c file defines without `static` (A calls it or takes its
    address); a name A defines itself (a static namesake) is A's own.
The sources are read as text (comments and string literals dropped), not compiled: a macro that pastes
a name together is not seen, which is why the report names the functions behind every edge of a cycle.

    scripts/house_graph.py --check          # make lint: exit 1 on a cycle, naming what ties it
    scripts/house_graph.py --dot            # Graphviz on stdout (docs/architecture.dot)
    scripts/house_graph.py --svg FILE       # that graph drawn by Graphviz's dot (docs/architecture.svg)
    scripts/house_graph.py --check ROOT     # another checkout

A cycle is a strongly connected component of two or more modules (Tarjan's algorithm): such files can
only be read, tested and changed together, so the house keeps none (docs/architecture.md)."""
import argparse
import hashlib
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lint  # noqa: E402  (the same files)

INCLUDE_DIRS = ("compiler", "runtime")   # the Makefile's -I folders, after the including file's own
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "_Alignof", "_Static_assert", "defined",
            "__attribute__", "typeof", "__typeof__", "_Generic"}

TOKEN = re.compile(r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<pp>^[ \t]*\#(?:\\\n|[^\n])*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>->|[{}();,.=\[\]*])
  | (?P<other>\S)
""", re.S | re.M | re.X)
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def sources(root):
    """the files make lint reads (scripts/lint.py), relative to root"""
    return [os.path.relpath(path, root) for path in lint.sources(root)]


def module_of(path):
    """the picture's node: a .c file and the .h of the same name together"""
    return os.path.splitext(path)[0]


def tokens(text, macros=None):
    """(kind, value) of every token that is code: no comments, no literals' insides, no preprocessor lines;
    a #define's body goes to macros[name] as its tokens (where given)"""
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "comment":
            continue
        if kind == "string":
            yield ("string", "")
        elif kind == "pp":
            body = re.sub(r"\\\n", " ", m.group(0))
            d = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)(?:\([^)]*\))?(.*)", body, re.S)
            if d and macros is not None:
                macros[d.group(1)] = list(tokens(d.group(2)))
            yield ("pp", "")
        else:
            yield (kind, m.group(0))


def closing_paren(toks, j):
    """the index of the ")" that closes the "(" at toks[j] (the last token where none does)"""
    par = 0
    while j < len(toks):
        if toks[j][1] == "(":
            par += 1
        elif toks[j][1] == ")":
            par -= 1
            if par == 0:
                return j
        j += 1
    return len(toks) - 1


def definitions(toks):
    """{name: is_static} of the functions a file defines: at brace depth 0, NAME ( ... ) {"""
    out, depth, i, decl_static = {}, 0, 0, False
    while i < len(toks):
        kind, v = toks[i]
        if v == "{":
            depth += 1
        elif v == "}":
            depth -= 1
            if depth == 0:
                decl_static = False
        elif depth == 0:
            if v in (";",) or kind == "pp":
                decl_static = False
            elif v == "static":
                decl_static = True
            elif kind == "ident" and v not in KEYWORDS and i + 1 < len(toks) and toks[i + 1][1] == "(":
                j = closing_paren(toks, i + 1)
                # a definition: the parameter list is followed by the body (attributes between are allowed)
                k = j + 1
                while k < len(toks) and toks[k][1] == "__attribute__":
                    k = closing_paren(toks, k + 1) + 1
                if k < len(toks) and toks[k][1] == "{":
                    out[v] = decl_static
                    i = j
                    continue
        i += 1
    return out


STATEMENT_WORDS = {"return", "case", "goto", "else", "do", "sizeof", "typedef", "struct", "enum", "union"}


def uses(toks):
    """(name, called) for each identifier in code that can name a function: inside braces (function bodies,
    tables), not after . or ->; called: followed by "(". Prototypes and definitions (at depth 0) are no uses."""
    out, depth, prev = [], 0, ""
    for i, (kind, v) in enumerate(toks):
        if v == "{":
            depth += 1
        elif v == "}":
            depth -= 1
        elif kind == "ident" and depth > 0 and prev not in (".", "->"):
            out.append((v, i + 1 < len(toks) and toks[i + 1][1] == "("))
        prev = v
    return out


def variables(toks):
    """names a file declares as variables or parameters (TYPE NAME or TYPE *NAME before = ; , ) [): a bare
    use of such a name is the variable, not a function of another module"""
    out = set()
    for i in range(1, len(toks) - 1):
        kind, v = toks[i]
        if kind != "ident" or toks[i + 1][1] not in ("=", ";", ",", ")", "["):
            continue
        j = i - 1
        while j >= 0 and toks[j][1] == "*":
            j -= 1
        if j >= 0 and toks[j][0] == "ident" and toks[j][1] not in STATEMENT_WORDS:
            out.add(v)
    return out


def graph(root):
    """(files, edges): edges[a][b] = sorted names (functions, or "#include x") that tie file a to file b"""
    files = list(sources(root))
    present = set(files)
    modules = files
    texts, toks, macros, defined_here, exported = {}, {}, {}, {}, {}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            texts[f] = fh.read()
        toks[f] = list(tokens(texts[f], macros))
        defs = definitions(toks[f])
        defined_here.setdefault(f, set()).update(defs)
        if f.endswith(".c"):
            for name, is_static in defs.items():
                if not is_static:
                    exported.setdefault(name, f)
    # the functions each macro's expansion names, through the macros it expands in turn
    macro_fns = {name: {v for k, v in body if k == "ident" and v in exported} for name, body in macros.items()}
    changed = True
    while changed:
        changed = False
        for name, body in macros.items():
            for k, v in body:
                if k == "ident" and v in macro_fns and v != name and not macro_fns[v] <= macro_fns[name]:
                    macro_fns[name] |= macro_fns[v]
                    changed = True
    edges = {m: {} for m in modules}
    for f in files:
        a = f
        for inc in INCLUDE.findall(texts[f]):
            for base in [os.path.dirname(f)] + list(INCLUDE_DIRS):
                target = os.path.normpath(os.path.join(base, inc))
                if target in present:
                    b = target
                    if b != a:
                        edges[a].setdefault(b, set()).add("#include " + inc)
                    break
        local = variables(toks[f]) | defined_here.get(a, set())
        names = set()
        for v, called in uses(toks[f]):
            if v in exported and v not in defined_here.get(a, ()) and (called or v not in local):
                names.add(v)
        if f.endswith(".c"):   # a table expanded here (SCHEDULES(X) ...): what the table names, this file uses
            for k, v in toks[f]:
                if k == "ident" and v in macro_fns:
                    names |= {n for n in macro_fns[v] if n not in defined_here.get(a, ())}
        for v in names:
            b = exported[v]
            if b != a:
                edges[a].setdefault(b, set()).add(v)
    return modules, {a: {b: sorted(n) for b, n in e.items()} for a, e in edges.items()}


def cycles(modules, edges):
    """the strongly connected components of two or more modules (Tarjan), each sorted"""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
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

    for m in modules:
        if m not in index:
            visit(m)
    return sorted(out)


def merged(files, edges):
    """the graph of modules (module_of): a file pair's edges together, none from a module to itself"""
    modules = sorted({module_of(f) for f in files})
    out = {m: {} for m in modules}
    for a, e in edges.items():
        for b, names in e.items():
            ma, mb = module_of(a), module_of(b)
            if ma != mb:
                out[ma].setdefault(mb, set()).update(names)
    return modules, {a: {b: sorted(n) for b, n in e.items()} for a, e in out.items()}


def reduced(modules, edges):
    """the edges no longer path implies (transitive reduction), where the graph has no cycle; an edge within
    a cycle is kept"""
    comp = {m: i for i, c in enumerate(cycles(modules, edges)) for m in c}

    def reach(a, skip):   # what a reaches without the direct edge a -> skip
        seen, todo = set(), [b for b in edges[a] if b != skip]
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                todo.extend(edges[v])
        return seen
    out = {}
    for a in modules:
        out[a] = {}
        for b, names in edges[a].items():
            same_cycle = a in comp and comp.get(b) == comp[a]
            if same_cycle or b not in reach(a, b):
                out[a][b] = names
    return out


def dot(files, edges):
    """Graphviz of the modules, a cluster per folder, each arrow one that no longer path implies (solid: calls;
    dashed: includes only); users point up at what they use"""
    modules, medges = merged(files, edges)
    medges = reduced(modules, medges)
    lines = ["// written by scripts/house_graph.py --dot: the modules of compiler/ and runtime/ (a .c file with its",
             "// .h), an arrow from each to what it uses (solid: calls a function the other defines; dashed: includes",
             "// its header only), leaving out the arrows that a longer path implies",
             "digraph llmcc {", '  rankdir=BT; newrank=true; ranksep=0.35; nodesep=0.15;',
             '  node [shape=box, style=rounded, fontname="Helvetica", fontsize=10, height=0.25];',
             '  edge [color="#666666", arrowsize=0.5];']
    folders = sorted({os.path.dirname(m) for m in modules})
    for i, d in enumerate(folders):
        lines.append('  subgraph cluster_%d { label="%s/"; fontname="Helvetica"; style=rounded; color="#aaaaaa";'
                     % (i, d))
        for m in modules:
            if os.path.dirname(m) == d:
                lines.append('    "%s" [label="%s"];' % (m, os.path.basename(m)))
        lines.append("  }")
    for a in modules:
        for b, names in sorted(medges[a].items()):
            calls = [n for n in names if not n.startswith("#include")]
            lines.append('  "%s" -> "%s"%s;' % (a, b, "" if calls else " [style=dashed]"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--check", action="store_true", help="exit 1 when the graph has a cycle")
    ap.add_argument("--dot", action="store_true", help="print the graph as Graphviz")
    ap.add_argument("--svg", metavar="FILE", help="draw the graph into FILE with Graphviz (dot)")
    args = ap.parse_args(argv[1:])
    modules, edges = graph(os.path.abspath(args.root))
    if args.dot:
        sys.stdout.write(dot(modules, edges))
    if args.svg:
        text = dot(modules, edges)
        try:
            svg = subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            print("house_graph: dot (Graphviz: apt-get install graphviz) failed: %s" % e, file=sys.stderr)
            return 1
        # the digest of the graph it was drawn from: tests/test_house.py checks that the drawing is today's
        with open(args.svg, "wb") as f:
            f.write(svg + ("<!-- house_graph.py dot sha256 %s -->\n" % dot_digest(text)).encode())
    comps = cycles(modules, edges)
    for comp in comps:
        print("house_graph: a cycle of %d files: %s" % (len(comp), ", ".join(comp)), file=sys.stderr)
        for a in comp:
            for b in comp:
                if b in edges[a]:
                    print("  %s -> %s: %s" % (a, b, ", ".join(edges[a][b])), file=sys.stderr)
    if args.check:
        if comps:
            return 1
        nedges = sum(len(e) for e in edges.values())
        print("house_graph: %d files, %d edges, no cycle" % (len(modules), nedges))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
