"""oplib: the op harness (tests/c/op_harness.c + tests/c/op_main.c) for what `llmcc run -c` cannot
express: the hand-built kernel-IR primitives (mma_prim, ldmatrix_prim, cp_async_prim), schedules that
only a runtime row count reaches (gemm_tc needs max_batch > gemm_min_n; a -c expression has static
rows), RoPE (rope_proj: no rotary in the expression language), a schedule built without the kernel
verifier (--no-kernel-verify), and the guard regions around every buffer with rows past n left
unwritten. Used by test_mma.py, test_epilogues.py and test_topk.py; test_ops.py goes through -c.

Tolerances: every output is a sum computed in f32 by a tree whose depth d the schedule fixes; the
classic bound |err| <= d * 2^-24 * sum |terms| holds for any summation order of that depth."""
import os

import numpy as np

from testlib import CC, CFLAGS, ROOT, build_c, digest, lock, once, run, tmpdir

U = 2.0 ** -24
HARNESS_SRCS = (["compiler/util.c", "compiler/expr.c", "compiler/tensor_ir.c", "compiler/loop_ir.c", "compiler/tile_ir.c",
                 "compiler/kernel_ir.c", "compiler/emit.c", "compiler/plan.c", "compiler/emit_kernel.c",
                 "compiler/emit_c.c", "compiler/emit_cuda.c", "compiler/graph.c"] +
                ["compiler/schedules/" + f for f in sorted(os.listdir(os.path.join(ROOT, "compiler", "schedules")))
                 if f.endswith(".c")] +
                ["tests/c/op_harness.c"])


def harness():
    return build_c("op_harness", HARNESS_SRCS)


def tag(args, knobs):
    s = "_".join(str(a) for a in args) + "".join("_" + k.replace("=", "") for k in knobs)
    return s.replace("/", "")


def compile_op(args, knobs=()):
    """Generates and builds the C program for one op; returns (exe, tile IR text)."""
    d = tmpdir(os.path.join("ops", tag(args, knobs)))
    kn = []
    for k in knobs:
        kn += ["--knob", k]
    h = harness()
    exe = os.path.join(d, "op")
    with lock(d):   # two test modules may build the same op at once
        gen = os.path.join(d, "gen.c")
        src = run([h] + [str(a) for a in args] + kn).stdout
        with open(gen, "w") as f:
            f.write(src)
        tile = run([h] + [str(a) for a in args] + kn + ["--print", "tile"]).stdout
        # under make test-asan the kernels are sanitized too: reads out of bounds (guards see only writes)
        san = [f for f in CFLAGS if f.startswith("-fsanitize") or f.startswith("-fno-sanitize")
               or f == "-fno-omit-frame-pointer"]
        # compiled and linked apart, so that ccache keeps the objects (it caches no compile-and-link command);
        # the kernels for this CPU's instruction set alone where tests/conftest.py says so ($CFLAGS)
        flags = ["-std=c11", "-O1", "-fopenmp", "-Wall", "-Wextra", "-Werror", "-I" + ROOT] + san
        run(CC + flags + os.environ.get("CFLAGS", "").split() + ["-c", gen, "-o", gen + ".o"])
        run(CC + ["-fopenmp"] + san + [gen + ".o", op_main(flags), "-o", exe, "-lm"])
    return exe, tile, d


def op_main(flags):
    """tests/c/op_main.c's object (the harness's main), compiled once for FLAGS"""
    src = os.path.join(ROOT, "tests", "c", "op_main.c")
    obj = os.path.join(tmpdir("bin"), "op_main-%s.o" % digest(flags)[:12])
    return once(obj, digest(("file", src), flags), lambda o: run(CC + flags + ["-c", src, "-o", o]))


def to_bf16(a):
    """f32 -> bf16 bits (round to nearest even) and the f32 values they hold."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r, (r.astype(np.uint32) << 16).view(np.float32)


def weight(a, dt):
    """(bytes as stored, f64 values the kernel sees)"""
    if dt == "f32":
        a = a.astype(np.float32)
        return a.tobytes(), a.astype(np.float64)
    if dt == "f16":
        h = a.astype(np.float16)
        return h.tobytes(), h.astype(np.float64)
    bits, vals = to_bf16(a)
    return bits.tobytes(), vals.astype(np.float64)


def run_op(exe, d, inputs, n, out_shapes, pos=0, env=None):
    inp = os.path.join(d, "in.bin")
    outp = os.path.join(d, "out.bin")
    with open(inp, "wb") as f:
        for b in inputs:
            f.write(b)
    p = run([exe, inp, outp, str(n), str(pos)], check=False, env=env)
    assert p.returncode == 0, "op run failed (rc=%d): %s" % (p.returncode, p.stderr)
    raw = np.fromfile(outp, dtype=np.uint32)
    outs, off = [], 0
    for shp in out_shapes:
        cnt = int(np.prod(shp))
        outs.append(raw[off:off + cnt].reshape(shp))
        off += cnt
    assert off == raw.size, "output size %d, expected %d" % (raw.size, off)
    return outs


def check_rows(bits, n, ref, tol, what):
    """rows < n match ref within tol (array or scalar); rows >= n are untouched (0xffffffff)"""
    got = bits[:n].view(np.float32).astype(np.float64)
    assert np.all(bits[n:] == 0xFFFFFFFF), "%s: rows past n=%d were written" % (what, n)
    check_close(got, ref, tol, what + " (unwritten elements?)")


def check_close(got, ref, tol, what):
    """got matches ref within tol (array or scalar); names the worst element otherwise"""
    assert np.all(np.isfinite(got)), "%s: non-finite outputs" % what
    err = np.abs(got - ref)
    bad = err > tol
    if np.any(bad):
        i = np.unravel_index(np.argmax(err - tol), err.shape)
        raise AssertionError("%s: %d of %d elements off; worst at %s: got %.9g, want %.9g (tol %.3g)" % (
            what, int(bad.sum()), bad.size, i, got[i], ref[i], np.broadcast_to(tol, err.shape)[i]))


def wrong(bits, n, ref, tol):
    """True when check_rows rejects the values themselves (the run itself must have succeeded)"""
    try:
        check_rows(bits, n, ref, tol, "mutated")
    except AssertionError as e:
        assert "elements off" in str(e), "mutated run failed otherwise: %s" % e
        return True
    return False


def tile_params(tile, name):
    """the 'schedule' line of tile NAME as a dict, e.g. {'schedule': 'gemv', 'split_k': '3', ...}"""
    lines = tile.splitlines()
    for i, l in enumerate(lines):
        if l.startswith("tile %s " % name):
            parts = lines[i + 1].split()
            d = {"schedule": parts[1]}
            for p in parts[2:]:
                if "=" in p:
                    k, v = p.split("=", 1)
                    d[k] = v
            return d
    raise AssertionError("no tile %s in:\n%s" % (name, tile))


def ptxas_report():
    """scripts/ptxas_report as a module (it has no .py suffix)"""
    import importlib.machinery
    import importlib.util
    path = os.path.join(ROOT, "scripts", "ptxas_report")
    loader = importlib.machinery.SourceFileLoader("ptxas_report", path)
    spec = importlib.util.spec_from_loader("ptxas_report", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


