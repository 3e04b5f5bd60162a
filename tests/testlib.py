"""testlib: shared helpers for llmcc's test suite (tests/run.py runs it).

A test is a function named test_* in a module tests/test_*.py. It fails by
raising (assert), skips by raising Skip("why"). Paths: ROOT (the repo),
BUILD (build/), SHARED (../shared/assets, may be absent), LLMCC (the
compiler binary, built by `make llmcc` before the suite starts)."""
import os
import subprocess
import hashlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
TMP = os.path.join(BUILD, "tests")
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "assets"))
# make test-asan points LLMCC_BIN at the sanitized compiler
LLMCC = os.environ.get("LLMCC_BIN") or os.path.join(BUILD, "llmcc")
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]
# make test-asan sets LLMCC_SANITIZE=1: C test programs are built with sanitizers too.
if os.environ.get("LLMCC_SANITIZE") == "1":
    CFLAGS += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]


class Skip(Exception):
    pass


def shared(*parts):
    """Path under ../shared/assets; skips the test where it is absent."""
    p = os.path.join(SHARED, *parts)
    if not os.path.exists(p):
        raise Skip("../shared/assets/%s is absent" % "/".join(parts))
    return p


def tmpdir(name):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    return d


def run(cmd, check=True, input=None, timeout=600, env=None, cwd=None):
    """Runs cmd (a list); returns CompletedProcess with text stdout/stderr."""
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout, env=e, cwd=cwd,
                       text=not isinstance(input, bytes))
    if check and p.returncode != 0:
        raise AssertionError("command failed (rc=%d): %s\nstdout: %s\nstderr: %s" % (
            p.returncode, " ".join(cmd), str(p.stdout)[-3000:], str(p.stderr)[-3000:]))
    return p


def build_c(name, sources, extra=(), libs=("-lm",)):
    """Compiles a C test program into build/tests/NAME once per set of inputs; returns its path."""
    out = os.path.join(tmpdir("bin"), name)
    srcs = [s if os.path.isabs(s) else os.path.join(ROOT, s) for s in sources]
    h = hashlib.sha1(" ".join(CFLAGS + list(extra) + srcs + list(libs)).encode())
    for s in srcs:
        with open(s, "rb") as f:
            h.update(f.read())
    for d in ("compiler", "compiler/schedules", "runtime"):
        for fn in sorted(os.listdir(os.path.join(ROOT, d))):
            if fn.endswith(".h"):
                with open(os.path.join(ROOT, d, fn), "rb") as f:
                    h.update(f.read())
    stamp = out + ".sha1"
    if os.path.exists(out) and os.path.exists(stamp) and open(stamp).read() == h.hexdigest():
        return out
    run(["gcc"] + CFLAGS + ["-I" + os.path.join(ROOT, "compiler"), "-I" + os.path.join(ROOT, "runtime")]
        + list(extra) + srcs + ["-o", out] + list(libs))
    with open(stamp, "w") as f:
        f.write(h.hexdigest())
    return out
