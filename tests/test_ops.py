"""Per-op tests of the schedules: one op (or the few ops a graph op
decomposes into) goes through loop, tile and kernel IR (tests/c/op_harness.c),
its C kernels run under tests/c/op_main.c with guard regions around every
buffer, and the outputs are compared with numpy (float64 on the same
inputs). Covered: flat (elementwise), block_reduce (warp-shuffle trees, one
value per warp in shared memory), gemv with and without split-K, scalar and
vector loads, over shapes that hit the edges: K not a multiple of the vector
width or of 32 x vec, M = 1, odd row counts, long (18944) and short (3)
reductions, f32 / bf16 / f16 weights, n below the compiled maximum (rows past
n must stay unwritten). A schedule with a deliberately wrong shuffle lane
(--knob debug_shfl_offset=1) must fail the same comparison, and an
out-of-bounds write must trip a guard. Where nvcc is installed, every
kernel also compiles for sm_90 without warnings and the ptxas register and
spill counts are printed (scripts/ptxas_report; no thresholds here).

Tolerances: every output is a sum computed in f32 by a tree whose depth d
the schedule fixes (terms per lane + 5 shuffle steps + warps + split-K
slices); the classic bound |err| <= d * 2^-24 * sum |terms| holds for any
summation order of that depth, so the tests use it (with d rounded up)
rather than a guessed rtol. exp / rsqrt / division add a few ulps."""
import os
import shutil

import numpy as np

from testlib import CFLAGS, ROOT, Skip, build_c, run, tmpdir

U = 2.0 ** -24
HARNESS_SRCS = (["compiler/util.c", "compiler/expr.c", "compiler/tensor_ir.c", "compiler/loop_ir.c", "compiler/tile_ir.c",
                 "compiler/kernel_ir.c", "compiler/emit.c", "compiler/emit_c.c", "compiler/emit_cuda.c", "compiler/graph.c"] +
                ["compiler/schedules/" + f for f in sorted(os.listdir(os.path.join(ROOT, "compiler/schedules")))
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
    gen = os.path.join(d, "gen.c")
    src = run([h] + [str(a) for a in args] + kn).stdout
    with open(gen, "w") as f:
        f.write(src)
    tile = run([h] + [str(a) for a in args] + kn + ["--print", "tile"]).stdout
    exe = os.path.join(d, "op")
    # under make test-asan the kernels are sanitized too: reads out of bounds (guards see only writes)
    san = [f for f in CFLAGS if f.startswith("-fsanitize") or f.startswith("-fno-sanitize") or f == "-fno-omit-frame-pointer"]
    run(["gcc", "-std=c11", "-O1", "-fopenmp", "-Wall", "-Wextra", "-Werror"] + san + [gen, os.path.join(ROOT, "tests", "c", "op_main.c"),
         "-o", exe, "-lm"])
    return exe, tile, d


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


def run_op(exe, d, inputs, n, out_shapes, pos=0):
    inp = os.path.join(d, "in.bin")
    outp = os.path.join(d, "out.bin")
    with open(inp, "wb") as f:
        for b in inputs:
            f.write(b)
    p = run([exe, inp, outp, str(n), str(pos)], check=False)
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
    assert np.all(np.isfinite(got)), "%s: non-finite outputs (unwritten elements?)" % what
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


# ---- gemv (linear) ----

def linear_case(maxn, M, K, dt, bias, n, knobs=(), seed=0):
    rng = np.random.default_rng(seed + M * 131 + K)
    exe, tile, d = compile_op(["linear", maxn, M, K, dt, 1 if bias else 0], knobs)
    x = rng.standard_normal((maxn, K)).astype(np.float32)
    wb, w = weight(rng.standard_normal((M, K)), dt)
    ins = [x.tobytes(), wb]
    b = None
    if bias:
        bb, b = weight(rng.standard_normal(M), dt)
        ins.append(bb)
    (y,) = run_op(exe, d, ins, n, [(maxn, M)])
    xs = x[:n].astype(np.float64)
    ref = xs @ w.T + (b if bias else 0)
    p = tile_params(tile, "proj")
    S = int(p.get("split_k", 1))
    depth = -(-K // 32) + 5 + S + 2
    tol = depth * U * (np.abs(xs) @ np.abs(w).T + (np.abs(b) if bias else 0)) + 1e-30
    return y, ref, tol, n, tile


def check_linear(*a, **kw):
    y, ref, tol, n, tile = linear_case(*a, **kw)
    check_rows(y, n, ref, tol, "linear %s" % (a,))
    return tile


def test_gemv_shapes_f32():
    # M = 1, K = 3 (fewer than 32 lanes' worth), K not a multiple of 4 (scalar loads), odd rows
    t = check_linear(1, 1, 3, "f32", False, 1)
    assert tile_params(t, "proj")["vec"] == "1"
    t = check_linear(5, 37, 200, "f32", True, 3)
    assert tile_params(t, "proj")["schedule"] == "gemv" and tile_params(t, "proj")["vec"] == "4"
    check_linear(3, 64, 257, "f32", False, 3)          # K odd: scalar path
    check_linear(2, 33, 1000, "f32", True, 2)          # K % 128 != 0: a partial last round


def test_gemv_shapes_bf16_f16():
    t = check_linear(4, 37, 200, "bf16", True, 3)      # 200 = 8 * 25: vectors, K not a multiple of 256
    assert tile_params(t, "proj")["vec"] == "8"
    t = check_linear(3, 19, 172, "bf16", False, 3)     # 172 % 8 = 4: narrower vectors
    assert tile_params(t, "proj")["vec"] == "4"
    check_linear(2, 29, 300, "f16", True, 1)
    check_linear(1, 8, 4097, "bf16", False, 1)         # odd K: scalar loads of bf16


def test_gemv_split_k():
    # long K, few rows: split-K is chosen from the shapes, and its partials are summed in order
    y, ref, tol, n, tile = linear_case(2, 7, 18944, "bf16", True, 2)
    p = tile_params(tile, "proj")
    assert int(p["split_k"]) > 1, tile
    assert tile_params(tile, "proj_splitk")["schedule"] == "splitk_sum"
    check_rows(y, n, ref, tol, "split-K linear")
    # pinned: an uneven last slice, and split-K off
    t = check_linear(3, 5, 1000, "bf16", False, 3, knobs=("gemv_split_k=3",))
    assert tile_params(t, "proj")["split_k"] == "3" and tile_params(t, "proj")["k_chunk"] == "336"
    t = check_linear(3, 5, 1000, "bf16", False, 3, knobs=("gemv_split_k=1",))
    assert tile_params(t, "proj")["split_k"] == "1"
    check_linear(1, 3, 18944, "f32", False, 1)


def test_gemv_knobs():
    # one row per block, three (a block of 96 threads), 8; scalar loads forced
    for k in ("gemv_rows_per_block=1", "gemv_rows_per_block=3", "gemv_rows_per_block=8", "gemv_vec=1", "gemv_vec=2"):
        t = check_linear(3, 37, 264, "bf16", True, 2, knobs=(k,))
        p = tile_params(t, "proj")
        if k.startswith("gemv_rows"):
            assert p["rows_per_block"] == k.split("=")[1] and p["block"] == str(32 * int(k.split("=")[1])), t
        else:
            assert p["vec"] == k.split("=")[1], t


def test_gemv_unroll():
    """gemv_unroll issues U rounds of loads before their terms and adds them in round order: every U
    gives the same bits as U=1 (K = 18944 on split-K slices, 264 and 1000 leave remainders of 1..3
    rounds, 37 fewer rounds than U), and each result is within the linear's bound."""
    for maxn, M, K, dt, n in ((3, 37, 264, "bf16", 2), (2, 7, 18944, "bf16", 1), (2, 50, 1000, "f32", 2), (1, 5, 37, "f32", 1), (2, 9, 1000, "f16", 2)):
        base = None
        for u in ("1", "2", "3", "4", "8", "0"):
            y, ref, tol, n_, tile = linear_case(maxn, M, K, dt, True, n, knobs=("gemv_unroll=" + u,))
            check_rows(y, n, ref, tol, "linear %s unroll %s" % ((maxn, M, K, dt), u))
            p = tile_params(tile, "proj")
            if u != "0":
                assert p["unroll"] == u, tile
            base = y[:n] if base is None else base
            assert np.array_equal(y[:n], base), "unroll %s changed the sums of linear %s" % (u, (maxn, M, K, dt))


def test_gemv_wrong_shuffle_is_caught():
    # the same comparison must fail when every shuffle reads one lane too far
    for args in ((4, 37, 200, "bf16", True, 3), (1, 1, 3, "f32", False, 1), (2, 7, 18944, "bf16", True, 2)):
        y, ref, tol, n, _ = linear_case(*args, knobs=("debug_shfl_offset=1",))
        assert wrong(y, n, ref, tol), "a schedule with shuffle delta + 1 passed for linear %s" % (args,)


# ---- block_reduce (rmsnorm, softmax) ----

def rmsnorm_case(maxn, D, dt, n, knobs=(), seed=1):
    rng = np.random.default_rng(seed + D)
    exe, tile, d = compile_op(["rmsnorm", maxn, D, dt], knobs)
    x = rng.standard_normal((maxn, D)).astype(np.float32)
    wb, w = weight(rng.standard_normal(D), dt)
    (y,) = run_op(exe, d, [x.tobytes(), wb], n, [(maxn, D)])
    xs = x[:n].astype(np.float64)
    inv = 1.0 / np.sqrt((xs * xs).mean(axis=1, keepdims=True) + np.float64(np.float32(1e-5)))
    ref = xs * inv * w
    B = int(tile_params(tile, "norm_inv_rms")["block"])
    depth = -(-D // B) + 5 + 5 + 2
    # the sum of squares has positive terms: its relative error is depth*u; rsqrt, /D, two products: a few ulps more
    rel = (depth / 2 + 8) * U
    return y, ref, rel * np.abs(ref) + 1e-30, n, tile


def test_block_reduce_rmsnorm():
    for maxn, D, dt, n, knobs in ((3, 3, "f32", 3, ()), (3, 64, "bf16", 2, ()), (1, 100, "f32", 1, ()), (2, 18944, "bf16", 2, ()),
                                  (2, 896, "f16", 1, ()), (2, 1000, "f32", 2, ("reduce_block_max=32",)),
                                  (2, 5000, "f32", 2, ("reduce_block_max=1024",))):
        y, ref, tol, n, tile = rmsnorm_case(maxn, D, dt, n, knobs)
        p = tile_params(tile, "norm_inv_rms")
        assert p["schedule"] == "block_reduce"
        if knobs:
            assert p["block"] == knobs[0].split("=")[1], tile
        check_rows(y, n, ref, tol, "rmsnorm D=%d %s" % (D, knobs))


def softmax_case(maxn, L, n, knobs=(), seed=2):
    rng = np.random.default_rng(seed + L)
    exe, tile, d = compile_op(["softmax", maxn, L], knobs)
    x = (3 * rng.standard_normal((maxn, L))).astype(np.float32)
    (y,) = run_op(exe, d, [x.tobytes()], n, [(maxn, L)])
    xs = x[:n].astype(np.float64)
    e = np.exp(xs - xs.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    B = int(tile_params(tile, "softmax_sum")["block"])
    depth = -(-L // B) + 5 + 5 + 2
    rel = (depth + 12) * U   # the max is exact; expf within 2 ulps twice, the sum, the division
    return y, ref, rel * ref + 1e-30, n, tile


def test_block_reduce_softmax():
    for maxn, L, n, knobs in ((2, 3, 2, ()), (3, 33, 3, ()), (1, 1000, 1, ()), (2, 18944, 1, ()), (3, 300, 2, ("reduce_block_max=64",))):
        y, ref, tol, n, tile = softmax_case(maxn, L, n, knobs)
        check_rows(y, n, ref, tol, "softmax L=%d %s" % (L, knobs))


def test_block_reduce_wrong_shuffle_is_caught():
    for D in (3, 64, 18944):
        y, ref, tol, n, _ = rmsnorm_case(2, D, "f32", 2, knobs=("debug_shfl_offset=1",))
        assert wrong(y, n, ref, tol), "a block_reduce with shuffle delta + 1 passed for D=%d" % D
    y, ref, tol, n, _ = softmax_case(2, 1000, 2, knobs=("debug_shfl_offset=1",))
    assert wrong(y, n, ref, tol), "a softmax with shuffle delta + 1 passed"


# ---- flat ----

def test_flat_elementwise():
    for maxn, C, n in ((1, 1, 1), (5, 37, 3), (2, 18944, 2), (3, 300, 3)):
        rng = np.random.default_rng(C)
        exe, tile, d = compile_op(["silu_mul", maxn, C])
        assert tile_params(tile, "silu_mul")["schedule"] == "flat"
        x = rng.standard_normal((maxn, C)).astype(np.float32)
        g = rng.standard_normal((maxn, C)).astype(np.float32)
        (y,) = run_op(exe, d, [x.tobytes(), g.tobytes()], n, [(maxn, C)])
        xs, gs = x[:n].astype(np.float64), g[:n].astype(np.float64)
        ref = xs / (1 + np.exp(-xs)) * gs
        check_rows(y, n, ref, 8 * U * np.abs(ref) + 1e-30, "silu_mul C=%d" % C)


# ---- the kernel IR verifier ----

def test_kernel_verifier_rules():
    exe = build_c("kernel_verify_test", HARNESS_SRCS[:-1] + ["tests/c/kernel_verify_test.c"])
    p = run([exe], check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("ok  ") == 18, p.stdout


# ---- the guards themselves ----

def test_guard_catches_out_of_bounds_write():
    # a hand-written "kernel" that writes one element past its output: op_main must say so
    d = tmpdir(os.path.join("ops", "oob"))
    gen = os.path.join(d, "gen.c")
    with open(gen, "w") as f:
        f.write("#include <stdint.h>\nstruct HBuf { const char *name; int esize; long long elems; int role; };\n"
                "const int nbufs = 2;\nconst struct HBuf hbufs[] = {{\"x\", 4, 8, 0}, {\"y\", 4, 8, 1}};\n"
                "void run_ops(void **B, int64_t n, int64_t pos) { (void)pos; float *y = B[1]; const float *x = B[0];\n"
                "    for (int64_t i = 0; i <= n; i++) y[i] = x[i % 8]; }\n")
    exe = os.path.join(d, "op")
    run(["gcc", "-std=c11", "-O1", gen, os.path.join(ROOT, "tests", "c", "op_main.c"), "-o", exe])
    inp = os.path.join(d, "in.bin")
    np.zeros(8, np.float32).tofile(inp)
    ok = run([exe, inp, os.path.join(d, "out.bin"), "7", "0"], check=False)
    assert ok.returncode == 0, ok.stderr
    p = run([exe, inp, os.path.join(d, "out.bin"), "8", "0"], check=False)
    assert p.returncode == 3 and "guard after y" in p.stderr, (p.returncode, p.stderr)


# ---- CUDA: every kernel compiles for sm_90 without warnings ----

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


CUDA_OPS = [["linear", 4, 37, 200, "bf16", 1], ["linear", 64, 200, 200, "bf16", 1], ["mma_prim"], ["ldmatrix_prim"], ["linear", 2, 7, 18944, "bf16", 1], ["linear", 3, 64, 257, "f32", 0],
            ["linear", 2, 29, 300, "f16", 1], ["rmsnorm", 2, 18944, "bf16"], ["rmsnorm", 2, 64, "f32"],
            ["softmax", 2, 3], ["silu_mul", 2, 300], ["mlp", 64, 200, 256, "bf16"], ["mlp", 2, 96, 1000, "f16"], ["rope_proj", 64, 4, 128, 256, "bf16"],
            ["linear_residual", 64, 100, 96, "bf16"]]


def test_cuda_kernels_compile_sm90():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        raise Skip("nvcc is not installed")
    pr = ptxas_report()
    h = harness()
    rows = []
    for args in CUDA_OPS:
        d = tmpdir(os.path.join("ops", "cuda_" + tag(args, ())))
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(run([h] + [str(a) for a in args] + ["--target", "cuda"]).stdout)
        res = pr.compile_report(nvcc, cu, "sm_90")
        assert res["ok"], "nvcc failed or warned on %s:\n%s" % (args, res["log"])
        rows += [(" ".join(map(str, args)),) + r for r in res["kernels"]]
    assert rows, "no kernels reported"
    print(pr.format_table(rows, ("op", "kernel", "registers", "spill stores", "spill loads", "stack", "smem")))


# ---- fusion (loop IR) ----

def test_fusion_residual_into_rmsnorm():
    # h = x + r, then RMSNorm(h): fused, the sum of squares computes h, stores it and accumulates it
    for D, dt, n in ((64, "f32", 2), (18944, "bf16", 1), (3, "f32", 2)):
        maxn = 2
        rng = np.random.default_rng(D + 5)
        for fuse in ("fuse=1", "fuse=0"):
            exe, tile, d = compile_op(["residual_norm", maxn, D, dt], (fuse,))
            kernels = [l.split()[1] for l in tile.splitlines() if l.startswith("tile ")]
            assert ("residual" in kernels) == (fuse == "fuse=0"), tile
            x = rng.standard_normal((maxn, D)).astype(np.float32)
            r = rng.standard_normal((maxn, D)).astype(np.float32)
            wb, w = weight(rng.standard_normal(D), dt)
            h, y = run_op(exe, d, [x.tobytes(), r.tobytes(), wb], n, [(maxn, D), (maxn, D)])
            hs = (x[:n] + r[:n]).astype(np.float64)    # the f32 add is exact in f64
            href = (x[:n] + r[:n]).astype(np.float64)
            check_rows(h, n, href, 0.0, "residual h (%s)" % fuse)
            inv = 1.0 / np.sqrt((hs * hs).mean(axis=1, keepdims=True) + np.float64(np.float32(1e-5)))
            ref = hs * inv * w
            depth = -(-D // 32) + 12
            check_rows(y, n, ref, (depth / 2 + 8) * U * np.abs(ref) + 1e-30, "residual_norm D=%d %s" % (D, fuse))


def test_fusion_silu_into_mul():
    for C, n in ((1, 1), (172, 3), (18944, 2)):
        maxn = 3
        rng = np.random.default_rng(C + 9)
        for fuse in ("fuse=1", "fuse=0"):
            exe, tile, d = compile_op(["silu_then_mul", maxn, C], (fuse,))
            kernels = [l.split()[1] for l in tile.splitlines() if l.startswith("tile ")]
            assert kernels == (["gate_mul_up"] if fuse == "fuse=1" else ["act_fn", "gate_mul_up"]), tile
            x = rng.standard_normal((maxn, C)).astype(np.float32)
            g = rng.standard_normal((maxn, C)).astype(np.float32)
            (y,) = run_op(exe, d, [x.tobytes(), g.tobytes()], n, [(maxn, C)])
            xs, gs = x[:n].astype(np.float64), g[:n].astype(np.float64)
            ref = xs / (1 + np.exp(-xs)) * gs
            check_rows(y, n, ref, 8 * U * np.abs(ref) + 1e-30, "silu_then_mul C=%d %s" % (C, fuse))


def test_fusion_in_a_model_and_its_guards():
    # in a decoder layer: act_fn goes into gate_mul_up; residual adds into the next norm's sum of squares. Refused: gate_mul_up into down_proj (it is read inside a reduction,
    # once per output row: recomputed M times), q/k/v's norm output (read by three nests).
    from testlib import LLMCC
    d = os.path.join(tmpdir("ops"), "fx-llama-gqa")
    if not os.path.exists(os.path.join(d, "config.json")):
        run(["python3", os.path.join(ROOT, "scripts", "make_fixture.py"), "llama-gqa", d, "--seed", "7"])
    fused = run([LLMCC, "compile", d, "--ir", "loop"]).stdout
    plain = run([LLMCC, "compile", d, "--ir", "loop", "--knob", "fuse=0"]).stdout
    head = fused.splitlines()[0]
    layers = 2
    assert "fused: %d inlined, %d side stores" % (layers, 2 * layers + 1) in head, head
    assert "fused: 0 inlined, 0 side stores" in plain.splitlines()[0]
    assert "nest mlp_act_fn " not in fused and "nest mlp_act_fn " in plain
    # side stores: the embedding, every attn_residual, every mlp_residual but the last (last_token reads
    # one row of it: not the next reduction's shape), and last_token into the final norm
    # (the last layer's mlp_residual goes into down_proj's store: an epilogue, test_epilogues.py; gate_mul_up with
    # gate_proj and up_proj into one pair nest)
    assert "nest attn_residual " not in fused and "nest mlp_residual " not in fused and fused.count("nest mlp_down_proj_residual ") == 1
    assert fused.count("nest mlp_gate_proj_up_proj ") == layers and fused.count("nest mlp_down_proj ") == layers - 1
    # tails: every RMSNorm's scale into its sum-of-squares nest (one kernel per norm)
    assert "%d tails" % (2 * layers + 1) in head and "0 tails" in plain.splitlines()[0], head
    assert "nest input_layernorm " not in fused and "nest post_attention_layernorm " not in fused and "nest norm " not in fused
    assert fused.count("nest input_layernorm_inv_rms ") == layers and "nest input_layernorm " in plain
    # retarget: the KV-cache copies go into RoPE's k (elementwise) and v_proj (a linear's epilogue), which
    # store at the cache row pos + t; q's RoPE output is read by the attention, so it stays an activation
    assert "%d copies retargeted" % (2 * layers) in head and "0 copies retargeted" in plain.splitlines()[0], head
    assert "nest self_attn_k_cache " not in fused and "nest self_attn_v_cache " not in fused
    assert "nest self_attn_k_cache " in plain and "nest self_attn_v_cache " in plain
    # (RoPE itself then goes into k_proj: the halves, test_epilogues.py)
    assert "k_cache[0][(pos + t), (p / 8), (p % 8)] = ((acc * cos(" in fused
    assert "v_cache[1][(pos + t), (o / 16), (o % 16)] = acc" in fused
