"""Tensor-core GEMM (gemm_tc) and its kernel-IR primitives, on the CPU.

mma_m16n8k16_bf16 and ldmatrix_x4 run in C as warp-level emulations that
gather every lane's fragment registers per the PTX ISA's layouts
(compiler/emit.c). The primitives are tested alone against numpy, which
builds the 16x16 A, 16x8 B and 16x8 C matrices from the per-lane registers
with the layout tables of the PTX ISA (section "Matrix Fragments for
mma.m16n8k16 with floating point type") written out here independently;
then the gemm_tc schedule over shapes (n, out, K not multiples of the
64x64x32 tile) with guard regions, for every pinned gemm_stages / gemm_bk /
gemm_bm / gemm_bn, the run-time dispatch on n (gemv for n <= gemm_min_n), and a
deliberately wrong fragment layout (--knob debug_mma_layout=1) that must fail.
cp.async: the primitive alone (copy, zero-fill, alignment), the verifier's
rules (tests/c/cp_async_verify_test.c), and a pipeline that waits for one
group fewer (--knob debug_cp_async=1), which the verifier and, without it,
the C emulation (copies land only at their wait_group) must both catch.

Tolerances. gemm_tc stages the activations as bf16 (round to nearest even):
the reference applies the same rounding to x (numpy, to_bf16 below), so what
remains is f32 accumulation: each mma adds 16 exact bf16 products (summed in
double) to the f32 accumulator with one rounding, ceil(K/16) roundings in
all plus the epilogue, so |err| <= (ceil(K/16) + 2) * 2^-24 * sum |x w|.
Against the unrounded x the difference is bounded by the bf16 rounding of
x, |dx| <= 2^-9 |x|: 2^-9 * sum |x w| more; test_gemm_tc_vs_f32 checks that
bound too (it is why gemm_tc is for bf16 models, whose weights are already
rounded that coarsely, and why gemm_min_n is a knob)."""
import os

import numpy as np

from oplib import U, check_rows, compile_op, run_op, tile_params, to_bf16, weight, wrong, harness, tag
from testlib import LLMCC, run, tmpdir


def round_x(x, dt):
    """the activations as gemm_tc stages them: rounded to the weights' 16-bit type (nearest even)"""
    return to_bf16(x)[1] if dt == "bf16" else x.astype(np.float16).astype(np.float32)


def gemm_case(maxn, M, K, n, bias=True, knobs=(), seed=3, xround=True, dt="bf16"):
    rng = np.random.default_rng(seed + 7 * M + K)
    exe, tile, d = compile_op(["linear", maxn, M, K, dt, 1 if bias else 0], knobs)
    x = rng.standard_normal((maxn, K)).astype(np.float32)
    wb, w = weight(rng.standard_normal((M, K)), dt)
    ins = [x.tobytes(), wb]
    b = 0
    if bias:
        bb, b = weight(rng.standard_normal(M), dt)
        ins.append(bb)
    (y,) = run_op(exe, d, ins, n, [(maxn, M)])
    xs = round_x(x[:n], dt).astype(np.float64) if xround else x[:n].astype(np.float64)
    ref = xs @ w.T + b
    mag = np.abs(x[:n].astype(np.float64)) @ np.abs(w).T + np.abs(b)
    tol = (-(-K // 16) + 2) * U * mag + 1e-30
    if not xround:
        tol = tol + 2.0 ** -9 * mag
    return y, ref, tol, n, tile


def test_gemm_tc_shapes():
    # n past the tile edge (17, 33) and a full 64; outputs 8 (< one n-tile), 72, 200; K 16, 48, 200 (K tails)
    for maxn, M, K, n in ((17, 8, 16, 17), (64, 72, 48, 64), (40, 200, 200, 33), (64, 200, 48, 17), (33, 72, 200, 33)):
        y, ref, tol, n, tile = gemm_case(maxn, M, K, n)
        p = tile_params(tile, "proj_tc")
        assert p["schedule"] == "gemm_tc" and p["min_n"] == "16", tile
        check_rows(y, n, ref, tol, "gemm_tc n=%d M=%d K=%d" % (n, M, K))


def test_gemm_tc_long_k_no_bias():
    y, ref, tol, n, _ = gemm_case(20, 24, 18944, 20, bias=False)
    check_rows(y, n, ref, tol, "gemm_tc K=18944")


def test_gemm_tc_vs_f32():
    # the same outputs against unrounded activations: within the bf16 rounding of x
    y, ref, tol, n, _ = gemm_case(40, 72, 200, 33, xround=False)
    check_rows(y, n, ref, tol, "gemm_tc vs f32 activations")


def test_dispatch_on_n():
    # n <= gemm_min_n runs the gemv (f32 activations: the tight gemv bound, not the bf16 one), n above it gemm_tc
    rng = np.random.default_rng(11)
    maxn, M, K = 24, 40, 64
    exe, tile, d = compile_op(["linear", maxn, M, K, "bf16", 0], ("gemm_min_n=20",))
    assert tile_params(tile, "proj_tc")["min_n"] == "20" and tile_params(tile, "proj")["schedule"] == "gemv"
    x = rng.standard_normal((maxn, K)).astype(np.float32)
    wb, w = weight(rng.standard_normal((M, K)), "bf16")
    mag = np.abs(x.astype(np.float64)) @ np.abs(w).T
    for n in (1, 20):
        (y,) = run_op(exe, d, [x.tobytes(), wb], n, [(maxn, M)])
        check_rows(y, n, x[:n].astype(np.float64) @ w.T, 12 * U * mag[:n] + 1e-30, "gemv n=%d" % n)
    for n in (21, 24):
        (y,) = run_op(exe, d, [x.tobytes(), wb], n, [(maxn, M)])
        xr = to_bf16(x[:n])[1].astype(np.float64)
        check_rows(y, n, xr @ w.T, 6 * U * mag[:n] + 1e-30, "gemm_tc n=%d" % n)
        # not the gemv's answer: the bf16 rounding of x shows
        assert np.max(np.abs(y[:n].view(np.float32) - x[:n].astype(np.float64) @ w.T)) > 1e-6


def test_gemm_tc_off_and_f32_weights():
    t = compile_op(["linear", 32, 40, 64, "bf16", 0], ("gemm_tc=0",))[1]
    assert "schedule gemm_tc" not in t and tile_params(t, "proj")["schedule"] == "gemv"
    # max_batch 16: no call can exceed gemm_min_n, so no gemm_tc kernel is compiled
    t = compile_op(["linear", 16, 40, 64, "bf16", 0])[1]
    assert "schedule gemm_tc" not in t, t
    t = compile_op(["linear", 32, 40, 64, "f32", 0])[1]
    assert "schedule gemm_tc" not in t, t


def test_gemm_tc_f16_weights():
    """f16 weights: X rounded to f16 when staged, mma.m16n8k16 f16 (products of halves are exact in f32, so
    the bf16 bound holds on the f16-rounded x) over the edge shapes, 1 to 3 stages."""
    for (maxn, M, K, n), kn in zip(PIPE_SHAPES, ((), ("gemm_stages=1",), ("gemm_stages=3", "gemm_bk=16"), (), ("gemm_bk=64",), ())):
        y, ref, tol, n, tile = gemm_case(maxn, M, K, n, knobs=kn, dt="f16")
        assert tile_params(tile, "proj_tc")["schedule"] == "gemm_tc", tile
        check_rows(y, n, ref, tol, "gemm_tc f16 n=%d M=%d K=%d %s" % (n, M, K, kn))
    c = run([harness(), "linear", "32", "40", "64", "f16", "0"]).stdout
    assert "mma_warp(w_, 1, " in c and "f32_to_f16(" in c and "mma_warp(w_, 0, " not in c and "f32_to_bf16(" not in c
    cu = run([harness(), "linear", "32", "40", "64", "f16", "0", "--target", "cuda"]).stdout
    assert "mma_m16n8k16_f16(" in cu and "mma_m16n8k16_bf16(" not in cu   # runtime/kernels.h: mma...f32.f16.f16.f32


# n past the tile edge (17, 33), n = 64, n = 17 with M = 17; M 8 (< an n-tile), 17, 72, 130, 200; K 16 (< bk), 36 and 203
# (K % 8 != 0: W by register prefetch), 48 and 200 (not multiples of 32 or 64), 256 (S = 3: two steps after the loop)
PIPE_SHAPES = ((17, 8, 16, 17), (64, 72, 48, 64), (40, 200, 200, 33), (33, 72, 256, 33), (20, 17, 203, 17), (64, 130, 36, 64))
PIPE_KNOBS = ((1, 32), (1, 64), (2, 16), (2, 32), (2, 64), (3, 16), (3, 32))


def test_gemm_tc_stages_and_bk():
    """every pinned (gemm_stages, gemm_bk) against numpy with the same bound: the pipeline changes when
    tiles arrive, not the arithmetic (same mma order along K)"""
    for stages, bk in PIPE_KNOBS:
        for maxn, M, K, n in PIPE_SHAPES:
            y, ref, tol, n, tile = gemm_case(maxn, M, K, n, knobs=("gemm_stages=%d" % stages, "gemm_bk=%d" % bk))
            p = tile_params(tile, "proj_tc")
            s = min(stages, -(-K // bk))   # no more stages than K steps
            assert (p["stages"], p["bk"]) == (str(s), str(bk)), tile
            what = "stages=%d bk=%d n=%d M=%d K=%d" % (s, bk, n, M, K)
            assert ("cp.async" in tile) == (s > 1 and K % 8 == 0), what + "\n" + tile
            # X by 4-wide vector loads in the pipelines where K % 4 == 0 (rows 16-byte aligned), else scalar
            assert ("4-wide vector loads" in tile) == (s > 1 and K % 4 == 0), what + "\n" + tile
            check_rows(y, n, ref, tol, "gemm_tc " + what)


def test_gemm_tc_block_tiles():
    """gemm_bm / gemm_bn 128 (8 or 16 warps of 32 x 32): n and M past one and past two 128-tiles. bm 128 with
    bk 16 leaves half a 16-byte W chunk per thread, so W goes by register prefetch there"""
    shapes = ((17, 8, 16, 17), (40, 200, 200, 33), (150, 72, 256, 129), (130, 130, 203, 130))
    for bm, bn, stages, bk, cp in ((128, 64, 2, 32, True), (64, 128, 3, 32, True), (128, 128, 2, 32, True), (128, 64, 2, 16, False),
                                   (128, 128, 1, 64, False)):
        kn = ("gemm_bm=%d" % bm, "gemm_bn=%d" % bn, "gemm_stages=%d" % stages, "gemm_bk=%d" % bk)
        for maxn, M, K, n in shapes:
            y, ref, tol, n, tile = gemm_case(maxn, M, K, n, knobs=kn)
            p = tile_params(tile, "proj_tc")
            s = min(stages, -(-K // bk))
            assert (p["bm"], p["bn"], p["block"], p["stages"]) == (str(bm), str(bn), str(bm * bn // 32), str(s)), tile
            assert ("cp.async" in tile) == (cp and s > 1 and K % 8 == 0), (kn, K, tile)
            check_rows(y, n, ref, tol, "gemm_tc %s n=%d M=%d K=%d" % (" ".join(kn), n, M, K))


def test_gemm_tc_default_tiles():
    # K % 8 == 0 and more than one K step: 2 stages of 32 (W by cp.async); one step or K % 8 != 0: one stage, bk 64 from K = 512
    for K, want in ((16, ("1", "32")), (48, ("2", "32")), (203, ("1", "32")), (4096, ("2", "32")), (4099, ("1", "64"))):
        t = compile_op(["linear", 32, 40, K, "bf16", 0])[1]
        p = tile_params(t, "proj_tc")
        assert (p["stages"], p["bk"]) == want, (K, p)
    t = compile_op(["linear", 32, 40, 4096, "bf16", 0], ("gemm_stages=3",))[1]
    assert tile_params(t, "proj_tc")["bk"] == "32"
    # bk 64 with 3 stages is 54 KiB of shared memory: a user error, not a broken kernel
    p = run([harness(), "linear", "32", "40", "4096", "bf16", "0", "--knob", "gemm_stages=3", "--knob", "gemm_bk=64"], check=False)
    assert p.returncode == 1 and "llmcc: --knob: gemm_bm=64 gemm_bn=64 gemm_bk=64 gemm_stages=3 needs 55296 bytes" in p.stderr, p.stderr
    p = run([harness(), "linear", "32", "40", "64", "bf16", "0", "--knob", "gemm_bk=8"], check=False)
    assert p.returncode == 1 and "gemm_bk must be 16, 32 or 64" in p.stderr, p.stderr


def caught(bits, n, ref, tol):
    """a wrong pipeline reads a stage before its copies land: NaN (the C backend's fill) or stale values"""
    got = bits[:n].view(np.float32)
    return not np.all(np.isfinite(got)) or wrong(bits, n, ref, tol)


def test_wrong_cp_async_wait_is_caught():
    """debug_cp_async=1 waits for one group fewer than the step reads. The kernel verifier rejects it; built
    anyway (op_harness --no-kernel-verify), the C backend's cp.async emulation, which performs copies only at
    the wait_group that completes them, must give wrong results, on one K step and on many"""
    for stages in (2, 3):
        kn = ("gemm_stages=%d" % stages, "debug_cp_async=1")
        p = run([harness(), "linear", "40", "200", "200", "bf16", "1"] + sum((["--knob", k] for k in kn), []), check=False)
        assert p.returncode != 0 and "while a cp.async into it may be pending" in p.stderr, (p.returncode, p.stderr)
        for maxn, M, K, n in ((17, 8, 96, 17), (40, 200, 200, 33)):   # 3 K steps (one round of S) and 7
            rng = np.random.default_rng(1)
            exe, tile, d = compile_op(["linear", maxn, M, K, "bf16", 0, "--no-kernel-verify"], kn)
            x = rng.standard_normal((maxn, K)).astype(np.float32)
            wb, w = weight(rng.standard_normal((M, K)), "bf16")
            (y,) = run_op(exe, d, [x.tobytes(), wb], n, [(maxn, M)])
            xr = to_bf16(x[:n])[1].astype(np.float64)
            tol = (-(-K // 16) + 2) * U * (np.abs(xr) @ np.abs(w).T) + 1e-30
            check_rows(run_op(compile_op(["linear", maxn, M, K, "bf16", 0], kn[:1])[0], d, [x.tobytes(), wb], n, [(maxn, M)])[0],
                       n, xr @ w.T, tol, "the same pipeline without the fault")
            assert caught(y, n, xr @ w.T, tol), "gemm_tc waiting for one cp.async group fewer passed for %s" % ((stages, maxn, M, K, n),)


def test_cp_async_primitive():
    """cp_async_prim: lane l copies BYTES bytes from element 8l + off into smem[8l] (zero-fill for l % 3 == 0); the
    elements past BYTES keep the C backend's NaN fill (0xffff); an offset that breaks the alignment aborts"""
    rng = np.random.default_rng(8)
    s = to_bf16(rng.standard_normal(288).astype(np.float32))[0]
    for nbytes in (4, 8, 16):
        d = tmpdir(os.path.join("ops", "cp_async_prim_%d" % nbytes))
        exe, _, _ = compile_op(["cp_async_prim", nbytes])
        for off in (0, 8, 16):
            (out,) = run_op(exe, d, [s.tobytes(), np.array([off], np.int32).tobytes()], 32, [(32, 8)])
            for lane in range(32):
                m = nbytes // 2
                want = [0] * m if lane % 3 == 0 else [int(v) for v in s[8 * lane + off: 8 * lane + off + m]]
                want += [0xFFFF] * (8 - m)
                assert [int(v) for v in out[lane]] == want, "cp.async %d bytes off %d lane %d: %s, want %s" % (
                    nbytes, off, lane, [hex(int(v)) for v in out[lane]], [hex(v) for v in want])
        inp = os.path.join(d, "in.bin")
        with open(inp, "wb") as f:
            f.write(s.tobytes() + np.array([1], np.int32).tobytes())
        p = run([exe, inp, os.path.join(d, "out.bin"), "32", "0"], check=False)
        assert p.returncode != 0 and "cp.async" in p.stderr and "misaligned" in p.stderr, (p.returncode, p.stderr)


def test_cp_async_verifier_rules():
    from oplib import HARNESS_SRCS
    from testlib import build_c
    exe = build_c("cp_async_verify_test", HARNESS_SRCS[:-1] + ["tests/c/cp_async_verify_test.c"])
    p = run([exe], check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("ok  ") == 18, p.stdout


def test_gemm_tc_pipelines_compile_sm90():
    """every (stages, bk) gemm_tc, the epilogue rewrites on gemm_tc, and the mma, ldmatrix and cp.async primitives
    compile for sm_90 without warnings (ptxas counts printed)"""
    import shutil
    from oplib import ptxas_report
    from testlib import Skip
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        raise Skip("nvcc is not installed")
    pr = ptxas_report()
    rows = []
    cases = [(["linear", 64, 200, K, "bf16", 1], ("gemm_stages=%d" % st, "gemm_bk=%d" % bk)) for st, bk in PIPE_KNOBS for K in (200, 203)]
    cases += [(["linear", 150, 200, 256, "bf16", 0], ("gemm_bm=%d" % bm, "gemm_bn=%d" % bn, "gemm_stages=%d" % st, "gemm_bk=%d" % bk))
              for bm, bn, st, bk in ((128, 64, 2, 32), (64, 128, 3, 32), (128, 128, 2, 32), (128, 64, 2, 16))]
    cases += [(["cp_async_prim", b], ()) for b in (4, 8, 16)]
    cases += [(["linear", 64, 200, 200, "f16", 1], ("gemm_stages=%d" % st,)) for st in (1, 2)]
    # from test_ops.py's list, which goes through `llmcc compile -c` now: what -c cannot express (the
    # primitives; the epilogue rewrites on gemm_tc, which needs a runtime n above gemm_min_n; RoPE)
    cases += [(["mma_prim"], ()), (["ldmatrix_prim"], ()), (["mlp", 64, 200, 256, "bf16"], ()),
              (["rope_proj", 64, 4, 128, 256, "bf16"], ()), (["linear_residual", 64, 100, 96, "bf16"], ())]
    for args, kn in cases:
        d = tmpdir(os.path.join("ops", "cuda_" + tag(args, kn)))
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(run([harness()] + [str(a) for a in args] + sum((["--knob", k] for k in kn), []) + ["--target", "cuda"]).stdout)
        res = pr.compile_report(nvcc, cu, "sm_90")
        assert res["ok"], "nvcc failed or warned on %s %s:\n%s" % (args, kn, res["log"])
        rows += [(" ".join(map(str, args + list(kn))),) + r for r in res["kernels"] if r[0].endswith("_tc") or "prim" in r[0]]
    print(pr.format_table(rows, ("op", "kernel", "registers", "spill stores", "spill loads", "stack", "smem")))


def test_wrong_mma_layout_is_caught():
    for maxn, M, K, n in ((17, 8, 16, 17), (40, 200, 200, 33)):
        y, ref, tol, n, _ = gemm_case(maxn, M, K, n, knobs=("debug_mma_layout=1",))
        assert wrong(y, n, ref, tol), "gemm_tc with two A fragment registers swapped passed for %s" % ((maxn, M, K, n),)


# ---- the primitives alone ----

def frag_matrices(a, b, c):
    """A (16x16), B (16x8), C (16x8) from per-lane registers: a [32,4] u32, b [32,2] u32, c [32,4] f32 (PTX ISA layout)"""
    def lo_hi(r):
        return to_f32(r & 0xFFFF), to_f32(r >> 16)
    A = np.zeros((16, 16)); B = np.zeros((16, 8)); C = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(8):           # a0..a7: row g (+8 for a2, a3, a6, a7), col 2t + i%2 (+8 for a4..a7)
            row = g + 8 * ((i // 2) % 2)
            col = 2 * t + i % 2 + 8 * (i // 4)
            A[row, col] = lo_hi(a[lane, i // 2])[i % 2]
        for i in range(4):           # b0..b3: row (k) 2t + i%2 (+8 for b2, b3), col (n) g
            B[2 * t + i % 2 + 8 * (i // 2), g] = lo_hi(b[lane, i // 2])[i % 2]
        for i in range(4):           # c0..c3: row g (+8 for c2, c3), col 2t + i%2
            C[g + 8 * (i // 2), 2 * t + i % 2] = c[lane, i]
    return A, B, C


def to_f32(h):
    return float((np.uint32(h) << np.uint32(16)).view(np.float32))


def test_mma_primitive_every_lane():
    rng = np.random.default_rng(5)
    d = tmpdir(os.path.join("ops", "mma_prim"))
    exe, _, _ = compile_op(["mma_prim"])
    for rep in range(3):
        bits = to_bf16(rng.standard_normal((32, 6, 2)).astype(np.float32))[0].astype(np.uint32)
        regs = bits[:, :, 0] | (bits[:, :, 1] << 16)
        a, b = regs[:, :4], regs[:, 4:]
        c = rng.standard_normal((32, 4)).astype(np.float32)
        (dout,) = run_op(exe, d, [a.astype(np.uint32).tobytes(), b.astype(np.uint32).tobytes(), c.tobytes()], 32, [(32, 4)])
        A, B, C = frag_matrices(a, b, c)
        D = C + A @ B
        got = np.zeros((16, 8))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for i in range(4):
                got[g + 8 * (i // 2), 2 * t + i % 2] = dout[lane, i].view(np.float32)
        tol = 2 * U * (np.abs(C) + np.abs(A) @ np.abs(B)) + 1e-30
        assert np.all(np.abs(got - D) <= tol), "mma: max err %g" % np.max(np.abs(got - D))


def test_ldmatrix_primitive_every_lane():
    rng = np.random.default_rng(6)
    d = tmpdir(os.path.join("ops", "ldm_prim"))
    exe, _, _ = compile_op(["ldmatrix_prim"])
    S = 512
    for rep in range(3):
        # finite bf16 bit patterns (an f32 round trip keeps them), random 16-byte aligned row addresses
        smem = to_bf16(rng.standard_normal(S).astype(np.float32))[0]
        addr = (rng.integers(0, S // 8, 32) * 8).astype(np.int32)
        (dout,) = run_op(exe, d, [smem.tobytes(), addr.tobytes()], 32, [(32, 4)])
        for lane in range(32):
            for m in range(4):
                row = int(addr[8 * m + lane // 4])       # matrix m: rows from lanes 8m..8m+7
                want = int(smem[row + 2 * (lane % 4)]) | (int(smem[row + 2 * (lane % 4) + 1]) << 16)
                assert int(dout[lane, m]) == want, "ldmatrix lane %d matrix %d: %#x, want %#x" % (lane, m, int(dout[lane, m]), want)
    # a misaligned row address aborts, as it would fault on the GPU
    addr[3] += 1
    inp = os.path.join(d, "in.bin")
    with open(inp, "wb") as f:
        f.write(smem.tobytes() + addr.tobytes())
    p = run([exe, inp, os.path.join(d, "out.bin"), "32", "0"], check=False)
    assert p.returncode != 0 and "ldmatrix row" in p.stderr, (p.returncode, p.stderr)


# ---- in a whole model ----

LONG_PROMPT = [1, 4, 7, 10, 13, 40, 77, 3, 9, 27, 81, 2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38]   # 24 > gemm_min_n


def test_bf16_model_prefill_on_gemm_tc():
    """A bf16 fixture's 24-token prefill runs its linears on gemm_tc (decode steps on gemv); with
    --max-batch 20 the prompt is two calls, 20 tokens (gemm_tc) then 4 (gemv). The numpy reference
    (tests/ref_forward.py) gets the same bf16 rounding of a linear's input for the rows of calls of more
    than gemm_min_n tokens. Greedy ids must match exactly. Logits: the rounding is discontinuous, so f32
    last-bit differences upstream (summation order) flip single roundings, and those flips move the logits
    by up to as much as the rounding itself does (measured: a 2e-7 relative jitter of the reference's
    own inputs moves its logits 0.004 of 2.2, the rounding as a whole 0.0096). So the tolerance is the
    e2e one (1e-4 of the largest logit) plus the reference's own |rounded - unrounded| per step: what the
    bf16 staging can account for, and no more."""
    import ref_forward
    from test_e2e import build, fixture, read_logits
    d = fixture("llama-gqa", "bf16")
    model = ref_forward.load(d)
    plain = ref_forward.linear
    calls = []

    def linear_tc(x, wt, b, chunk):
        # gemm_tc rounds x to bf16 per call of more than 16 tokens; the reference sees the whole prompt at once,
        # so it rounds the rows that were in such a call
        rows = x.shape[0]
        xr = x.copy()
        if rows > 1:
            big = [(s, min(s + chunk, rows)) for s in range(0, rows, chunk) if min(s + chunk, rows) - s > 16]
            for s, e in big:
                xr[s:e] = to_bf16(x[s:e])[1]
            calls.append(len(big))
        return plain(xr, wt, b)

    for chunk, extra in ((64, ()), (20, ("--max-batch", "20"))):
        ref_forward.linear = lambda x, wt, b: linear_tc(x, wt, b, chunk)
        try:
            ref_ids, ref_logits = ref_forward.greedy(model, LONG_PROMPT, 6, kv_bf16=True)   # cuda-emu's bf16 KV cache
        finally:
            ref_forward.linear = plain
        f32_ids, f32_logits = ref_forward.greedy(model, LONG_PROMPT, 6, kv_bf16=True)
        assert f32_ids == ref_ids, "the bf16 staging changes the fixture's greedy ids: pick another prompt"
        exe = os.path.join(build(d, "cuda-emu", extra), "m")
        tile = run([LLMCC, "compile", d, "--ir", "tile"] + list(extra)).stdout
        assert "schedule gemm_tc" in tile
        lp = os.path.join(tmpdir("e2e"), "tc-%d.logits" % chunk)
        p = run([exe, "--prompt-ids", ",".join(map(str, LONG_PROMPT)), "-n", "6", "--temperature", "0", "--repeat-penalty", "1",
                 "--ids", "--ignore-eos", "--logits", lp])
        ours = [int(x) for x in p.stdout.split()]
        assert ours == list(ref_ids), "greedy ids differ (chunk %d):\nours %s\nref  %s" % (chunk, ours, list(ref_ids))
        got = read_logits(lp, np.asarray(ref_logits).shape[1])
        f32_logits = np.asarray(f32_logits, dtype=np.float64)
        for step, ref in enumerate(np.asarray(ref_logits, dtype=np.float64)):
            diff = float(np.max(np.abs(got[step] - ref)))
            tol = 1e-4 * float(np.max(np.abs(ref))) + float(np.max(np.abs(ref - f32_logits[step])))
            assert diff <= tol, "chunk %d step %d: max |diff| %.3g > %.3g" % (chunk, step, diff, tol)
    assert any(calls), "the reference never rounded: the prompt did not reach gemm_tc's size"
