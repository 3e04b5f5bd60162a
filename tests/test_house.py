"""test_house: scripts/house_graph.py, the include and call graph of compiler/ and runtime/: the tree has no
cycle among its files, a cycle is found and named (include and call), and docs/architecture.svg is drawn from
today's graph."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "house_graph.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import house_graph  # noqa: E402


def check(root):
    return subprocess.run([sys.executable, SCRIPT, "--check", str(root)], capture_output=True, text=True)


def test_the_tree_has_no_cycle():
    p = check(ROOT)
    assert p.returncode == 0, p.stderr
    assert "no cycle" in p.stdout


def write(root, files):
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)


def test_a_call_cycle_is_named(tmp_path):
    """main.c calls cmd_run(), cmd_run.c calls open_model() defined in main.c: the shape of the cycle the
    house had; a static namesake, a prototype, a struct member and a local variable are no uses"""
    write(tmp_path, {
        "compiler/main.c": "int cmd_run(int argc);\nconst char *open_model(const char *m) { return m; }\n"
                           "int main(int argc, char **argv) { (void)argv; return cmd_run(argc); }\n",
        "compiler/cmd_run.c": "const char *open_model(const char *m);\n"
                              "int cmd_run(int argc) { return open_model(\"x\") != 0 && argc; }\n",
        "compiler/other.c": "static int cmd_run(int a) { return a; }\nstruct S { int open_model; };\n"
                            "int f(struct S *s) { int main = 1; return cmd_run(s->open_model) + main; }\n",
    })
    p = check(tmp_path)
    assert p.returncode == 1
    assert "a cycle of 2 files: compiler/cmd_run.c, compiler/main.c" in p.stderr
    assert "compiler/cmd_run.c -> compiler/main.c: open_model" in p.stderr
    assert "compiler/main.c -> compiler/cmd_run.c: cmd_run" in p.stderr
    assert "other.c" not in p.stderr


def test_an_include_cycle_and_a_table_are_found(tmp_path):
    """a.h includes b.h, b.c includes a.h and b.h: no cycle (headers only point at headers); then a.c's table
    expands a macro naming b.c's function while b.c calls a.c's: a cycle through the table"""
    files = {
        "compiler/a.h": '#include "b.h"\n#define FAMILIES(X) X(b_choose)\nint a_helper(void);\n',
        "compiler/b.h": "int b_choose(void);\n",
        "compiler/b.c": '#include "a.h"\n#include "b.h"\nint b_choose(void) { return 1; }\n',
        "compiler/a.c": '#include "a.h"\nint a_helper(void) { return 2; }\n',
    }
    write(tmp_path, files)
    assert check(tmp_path).returncode == 0
    write(tmp_path, {
        "compiler/a.c": '#include "a.h"\nint a_helper(void) { return 2; }\n'
                        "#define X(f) f,\nint (*const table[])(void) = {FAMILIES(X)};\n#undef X\n",
        "compiler/b.c": '#include "a.h"\nint b_choose(void) { return a_helper(); }\n',
    })
    p = check(tmp_path)
    assert p.returncode == 1
    assert "compiler/a.c -> compiler/b.c: b_choose" in p.stderr
    assert "compiler/b.c -> compiler/a.c: a_helper" in p.stderr
    write(tmp_path, {"compiler/b.h": '#include "a.h"\nint b_choose(void);\n',
                     "compiler/b.c": '#include "b.h"\nint b_choose(void) { return 1; }\n'})
    p = check(tmp_path)
    assert p.returncode == 1 and "compiler/a.h -> compiler/b.h: #include b.h" in p.stderr


def test_the_drawing_is_of_todays_graph():
    """docs/architecture.svg ends with the sha256 of the graph it was drawn from (scripts/house_graph.py --svg)"""
    files, edges = house_graph.graph(ROOT)
    digest = house_graph.dot_digest(house_graph.dot(files, edges))
    with open(os.path.join(ROOT, "docs", "architecture.svg")) as f:
        svg = f.read()
    m = re.search(r"<!-- house_graph.py dot sha256 ([0-9a-f]{64}) -->\s*$", svg)
    assert m, "docs/architecture.svg was not written by scripts/house_graph.py --svg"
    assert m.group(1) == digest, ("the house changed since docs/architecture.svg was drawn: run "
                                  "scripts/house_graph.py --svg docs/architecture.svg (Graphviz)")


def test_the_benchmark_plots_are_of_the_tables():
    """docs/benchmarks-*.svg are what scripts/plot_benchmarks draws from docs/benchmarks.md's tables today, and
    they show llmcc against a peer in every group (a table the script no longer reads would leave a plot empty)"""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_benchmarks"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with open(os.path.join(ROOT, "docs", "benchmarks-peers.svg")) as f:
        svg = f.read()
    for engine in ("llmcc", "llama.cpp", "PyTorch", "llama2.c run.c"):
        assert ">%s</text>" % engine in svg, engine
