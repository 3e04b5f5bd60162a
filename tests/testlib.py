"""testlib: shared helpers for llmcc's test suite (pytest runs it: `make test`, docs/testing.md).

A test is a function named test_* in a module tests/test_*.py. It fails by
raising (assert), skips by raising Skip("why"). Paths: ROOT (the repo),
BUILD (build/), SHARED (../shared/assets, may be absent), LLMCC (the
compiler binary, built by `make llmcc` before the suite starts).

Things several tests need (a fixture checkpoint, an emitted project and its
executable, a C test program) are made once and kept under build/tests: each
behind a lock that every pytest-xdist worker takes, written in full before its
stamp (the digest of everything it was made from) says it is there, so a
second run on an unchanged tree makes nothing again (`once`, `model_fixture`,
`build_exe`, `build_c`)."""
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
TMP = os.path.join(BUILD, "tests")
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "assets"))
# make test-asan points LLMCC_BIN at the sanitized compiler
LLMCC = os.environ.get("LLMCC_BIN") or os.path.join(BUILD, "llmcc")
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]
# the C compiler of the tests' own programs: through ccache where it is installed (tests/conftest.py sets it up)
CC = ["ccache", "gcc"] if shutil.which("ccache") else ["gcc"]
# make test-asan sets LLMCC_SANITIZE=1: C test programs are built with sanitizers too.
if os.environ.get("LLMCC_SANITIZE") == "1":
    CFLAGS += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]


try:
    import pytest
    Skip = pytest.skip.Exception   # raise Skip("why"): pytest reports the test as skipped, saying why
except ImportError:                # a script importing a test module (make fuzz) without pytest
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


def write_atomic(path, text):
    """PATH holds TEXT, or what it held before: another worker reading it never sees it half-written."""
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def run(cmd, check=True, input=None, timeout=600, env=None, cwd=None):
    """Runs cmd (a list); returns CompletedProcess with text stdout/stderr."""
    e = dict(os.environ)
    if env:
        e.update(env)
    # no input: stdin is empty (an executable without a prompt reads its prompt from stdin)
    p = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout, env=e, cwd=cwd,
                       text=not isinstance(input, bytes), **({} if input is not None else {"stdin": subprocess.DEVNULL}))
    if check and p.returncode != 0:
        raise AssertionError("command failed (rc=%d): %s\nstdout: %s\nstderr: %s" % (
            p.returncode, " ".join(cmd), str(p.stdout)[-3000:], str(p.stderr)[-3000:]))
    return p


def build_c(name, sources, extra=(), libs=("-lm",)):
    """Compiles a C test program into build/tests/bin/NAME once per set of inputs; returns its path."""
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

    def make(path):
        run(CC + CFLAGS + ["-I" + os.path.join(ROOT, "compiler"), "-I" + os.path.join(ROOT, "runtime")]
            + list(extra) + srcs + ["-o", path] + list(libs))
    return once(out, h.hexdigest(), make)


# ---- made once, shared by the workers ----

@contextlib.contextmanager
def lock(name):
    """Holds the lock NAME (a file under build/tests/locks) against every other test process."""
    path = os.path.join(tmpdir("locks"), hashlib.sha1(name.encode()).hexdigest()[:16] + ".lock")
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def digest(*parts):
    """sha1 of PARTS: strings, and files or directories named by ("file", path) (a directory: every file's
    name, size and modification time; a file: its bytes)."""
    h = hashlib.sha1()
    for p in parts:
        if isinstance(p, tuple) and p[0] == "file":
            path = p[1]
            if os.path.isdir(path):
                for top, dirs, files in sorted(os.walk(path)):
                    dirs.sort()
                    for fn in sorted(files):
                        st = os.stat(os.path.join(top, fn))
                        h.update(("%s %d %d\n" % (os.path.relpath(os.path.join(top, fn), path), st.st_size,
                                                  st.st_mtime_ns)).encode())
            elif os.path.exists(path):
                with open(path, "rb") as f:
                    h.update(f.read())
            else:
                h.update(b"absent " + path.encode())
        else:
            h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def once(path, key, make):
    """PATH (a file or a directory) made by make(PATH) once for KEY: under PATH's lock, so that two workers
    asking for it wait for one to make it; a PATH of another key, or one left half-made by a failure, is
    removed and made again. Returns PATH."""
    stamp = path + ".stamp"
    with lock(path):
        if os.path.exists(path) and os.path.exists(stamp) and open(stamp).read() == key:
            return path
        for p in (stamp, path):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.remove(p)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            make(path)
        except BaseException:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            raise
        with open(stamp, "w") as f:
            f.write(key)
    return path


def model_fixture(kind, dtype="f32", seed=7, layout=None):
    """scripts/make_fixture.py KIND's checkpoint (a tiny model: config, safetensors, tokenizer), made once for
    every test that asks for the same one; a test that edits a checkpoint edits a copy
    (shutil.copytree)."""
    script = os.path.join(ROOT, "scripts", "make_fixture.py")
    name = "%s-%s-s%d%s" % (kind, dtype, seed, "-" + layout if layout else "")
    args = [kind, "--dtype", dtype, "--seed", str(seed)] + (["--layout", layout] if layout else [])

    def make(d):
        run([sys.executable, script, args[0], d] + args[1:])
    return once(os.path.join(TMP, "fixtures", name), digest(("file", script), args), make)


def sanitizer_flags():
    """make arguments that build an emitted project with ASan/UBSan (make test-asan), or none"""
    if os.environ.get("LLMCC_SANITIZE") != "1":
        return []
    san = "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
    return ["CFLAGS=" + san, "LDFLAGS=" + san, "STATIC=0"]   # the sanitizers' runtimes are shared libraries


def build_exe(model, target="cpu", args=(), make_args=(), tag=None):
    """`llmcc build MODEL -o OUT --target TARGET ARGS`, then `make -C OUT MAKE_ARGS`, once per content: the
    compiler, the runtime and the templates, MODEL's files and the arguments (a second run on an unchanged
    tree builds nothing). OUT is build/tests/exe/TAG (by default MODEL's name, TARGET and ARGS); returns it.
    Under make test-asan the executable is built with the sanitizers."""
    args, make_args = list(args), list(make_args) + sanitizer_flags()
    if tag is None:
        tag = "-".join([os.path.basename(os.path.normpath(model)), target] +
                       [a.lstrip("-").replace("=", "").replace("/", "_") for a in args])
    out = os.path.join(TMP, "exe", tag[:120])
    key = digest(("file", LLMCC), ("file", os.path.join(ROOT, "runtime")), ("file", os.path.join(ROOT, "templates")),
                 ("file", model), target, args, make_args,
                 [os.environ.get(k, "") for k in ("CC", "CFLAGS", "NVCC", "LLMCC_SANITIZE")])

    def make(d):
        run([LLMCC, "build", model, "-o", d, "--target", target] + args)
        run(["make", "-C", d, "-s", "-j2"] + make_args)
    return once(out, key, make)


def is_static(path):
    """A 64-bit ELF file without a PT_INTERP program header: no dynamic loader, nothing to load at start."""
    import struct
    with open(path, "rb") as f:
        b = f.read(1 << 16)
    assert b[:4] == b"\x7fELF" and b[4] == 2, "not a 64-bit ELF file"
    phoff, = struct.unpack_from("<Q", b, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", b, 0x36)
    return all(struct.unpack_from("<I", b, phoff + i * phentsize)[0] != 3 for i in range(phnum))
