"""Tensor-core GEMM (gemm_tc) and its kernel-IR primitives, on the CPU.

mma_m16n8k16_bf16 and ldmatrix_x4 run in C as warp-level emulations that
gather every lane's fragment registers per the PTX ISA's layouts
(compiler/emit.c). The primitives are tested alone against numpy, which
builds the 16x16 A, 16x8 B and 16x8 C matrices from the per-lane registers
with the layout tables of the PTX ISA (section "Matrix Fragments for
mma.m16n8k16 with floating point type") written out here independently;
then the gemm_tc schedule over shapes (n, out, K not multiples of the
64x64x32 tile) with guard regions, the run-time dispatch on n (gemv for
n <= gemm_min_n), and a deliberately wrong fragment layout
(--knob debug_mma_layout=1) that must fail.

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

from test_ops import U, check_rows, compile_op, run_op, tile_params, to_bf16, weight, wrong, harness, tag
from testlib import LLMCC, run, tmpdir


def gemm_case(maxn, M, K, n, bias=True, knobs=(), seed=3, xround=True):
    rng = np.random.default_rng(seed + 7 * M + K)
    exe, tile, d = compile_op(["linear", maxn, M, K, "bf16", 1 if bias else 0], knobs)
    x = rng.standard_normal((maxn, K)).astype(np.float32)
    wb, w = weight(rng.standard_normal((M, K)), "bf16")
    ins = [x.tobytes(), wb]
    b = 0
    if bias:
        bb, b = weight(rng.standard_normal(M), "bf16")
        ins.append(bb)
    (y,) = run_op(exe, d, ins, n, [(maxn, M)])
    xs = to_bf16(x[:n])[1].astype(np.float64) if xround else x[:n].astype(np.float64)
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
    for dt in ("f32", "f16"):
        t = compile_op(["linear", 32, 40, 64, dt, 0])[1]
        assert "schedule gemm_tc" not in t, t


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
            ref_ids, ref_logits = ref_forward.greedy(model, LONG_PROMPT, 6)
        finally:
            ref_forward.linear = plain
        f32_ids, f32_logits = ref_forward.greedy(model, LONG_PROMPT, 6)
        assert f32_ids == ref_ids, "the bf16 staging changes the fixture's greedy ids: pick another prompt"
        exe = os.path.join(build(d, "cpu", extra), "m")
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
