"""Epilogue fusion (loop_fuse_epilogues): elementwise consumers of linears
computed in the linears' stores, through every schedule that runs them
(gemv with and without split-K and vector loads, gemm_tc with its pipelines
and tiles), on the CPU, against numpy:
  epilogue  r + x @ w^T (the MLP's residual add after down_proj)
  pair      silu(x @ wg^T) * (x @ wu^T): one nest, two accumulators
  halves    rotary (rotate_half) of x @ w^T: each iteration computes rows
            e and e + D/2 of a head and stores both rotated outputs
The same ops with --knob fuse=0 (separate kernels) must agree too, and a
gemm_tc pair whose W tile swaps the two weights (--knob debug_pair_swap=1)
must fail the comparison. In a model: which nests fuse, and the layer
against the double-precision reference at decode and prefill sizes.

Tolerances: each linear value is a sum of K f32 products whose error is
bounded by depth * 2^-24 * sum |x w| (test_ops.py), the depth fixed by the
schedule (test_mma.py for gemm_tc, whose activations are staged as bf16 /
f16: the reference rounds x the same way). The consumer's arithmetic adds
its own: silu(g) * u moves by at most 1.1 |dg| |u| + |silu(g)| |du| (silu'
<= 1.1) plus a few ulps for exp and the divide; a rotary output
a cos - b sin by |da| + |db| plus cosf / sinf's ulps times |a| + |b| (the
angle is f32(pos + t) * inv_freq[e] rounded to f32 in both)."""
import os

import numpy as np

from oplib import U, check_rows, compile_op, run_op, weight, wrong
from test_mma import round_x
from testlib import LLMCC, model_fixture, run


def kernels(tile):
    return [l.split()[1] for l in tile.splitlines() if l.startswith("tile ")]


def on_tc(tile, name):
    return name + "_tc" in kernels(tile)


def lin_err(xs, w, K, tc, S=1):
    """bound on the error of xs @ w^T as the schedule sums it"""
    depth = (-(-K // 16) + 2) if tc else (-(-K // 32) + 5 + S + 2)
    return depth * U * (np.abs(xs) @ np.abs(w).T) + 1e-30


def xs_for(x, n, dt, tc):
    xs = x[:n]
    return (round_x(xs, dt) if tc else xs).astype(np.float64)


def silu(g):
    return g / (1 + np.exp(-g))


def mlp_case(maxn, M, K, dt, n, knobs=(), seed=0):
    rng = np.random.default_rng(seed + M + 7 * K)
    exe, tile, d = compile_op(["mlp", maxn, M, K, dt], knobs)
    x = rng.standard_normal((maxn, K)).astype(np.float32)
    wgb, wg = weight(rng.standard_normal((M, K)) * 0.2, dt)
    wub, wu = weight(rng.standard_normal((M, K)) * 0.2, dt)
    (y,) = run_op(exe, d, [x.tobytes(), wgb, wub], n, [(maxn, M)])
    fused = "fuse=0" not in knobs
    tc = on_tc(tile, "gate_proj_up_proj" if fused else "gate_proj") and n > 16
    xs = xs_for(x, n, dt, tc)
    g, u = xs @ wg.T, xs @ wu.T
    ref = silu(g) * u
    tol = 1.1 * lin_err(xs, wg, K, tc) * np.abs(u) + np.abs(silu(g)) * lin_err(xs, wu, K, tc) + 8 * U * np.abs(ref)
    return y, ref, tol, tile


def test_pair_mlp_gemv_and_gemm_tc():
    cases = [
        (3, 172, 96, "f32", 2, ()), (1, 1, 5, "f32", 1, ()), (2, 64, 1000, "bf16", 1, ()), (2, 64, 1000, "bf16", 2, ("gemv_split_k=3",)),
        (2, 48, 700, "f16", 2, ("gemv_vec=1",)), (3, 33, 264, "bf16", 3, ("gemv_rows_per_block=3",)),
        (40, 100, 200, "bf16", 37, ()), (40, 100, 200, "f16", 40, ()), (70, 130, 72, "bf16", 65, ("gemm_bn=128",)),
        (40, 96, 160, "bf16", 33, ("gemm_stages=1",)), (40, 96, 160, "bf16", 33, ("gemm_stages=3", "gemm_bk=16")),
        (40, 80, 520, "bf16", 18, ("gemm_bm=128",)), (40, 100, 200, "bf16", 16, ()),
    ]
    for maxn, M, K, dt, n, kn in cases:
        for fuse in ("fuse=1", "fuse=0"):
            y, ref, tol, tile = mlp_case(maxn, M, K, dt, n, kn + (fuse,))
            ks = kernels(tile)
            if fuse == "fuse=1":
                assert "gate_proj_up_proj" in ks and "gate_proj" not in ks and "gate_mul_up" not in ks, tile
                assert "two accumulators" in tile, tile
            else:
                assert "gate_proj" in ks and "up_proj" in ks and "gate_mul_up" in ks, tile
            check_rows(y, n, ref, tol, "mlp %s n=%d %s" % ((maxn, M, K, dt), n, kn + (fuse,)))
    # the split-K pair really splits (both accumulators' partials in one workspace) and the gemm_tc rows ran on it
    _, _, _, tile = mlp_case(2, 64, 1000, "bf16", 2, ("gemv_split_k=3",))
    assert "gate_proj_up_proj_splitk" in kernels(tile), tile
    _, _, _, tile = mlp_case(40, 100, 200, "bf16", 37)
    assert on_tc(tile, "gate_proj_up_proj") and "a pair: the W tile is 32 outputs of wg and of wu" in tile, tile


def test_pair_with_swapped_weights_is_caught():
    for kn in ((), ("gemm_stages=1",)):
        y, ref, tol, tile = mlp_case(40, 100, 200, "bf16", 37, kn + ("debug_pair_swap=1",))
        assert wrong(y, 37, ref, tol), "a W tile with the two weights swapped passed %s" % (kn,)
        y, ref, tol, tile = rope_case(40, 3, 32, 96, "bf16", 30, 4, kn + ("debug_pair_swap=1",))
        assert wrong(y, 30, ref, tol), "a rotary W tile with the halves swapped passed %s" % (kn,)


def test_pair_swap_knob_leaves_single_linears_alone():
    """debug_pair_swap is a pair's fault: a layer that also has single gemm_tc linears (q/k/v/o) compiles
    (it crashed: a single linear has no second weight), and its run fails the check through the MLP pair."""
    from test_e2e import fixture
    d = fixture("llama-gqa", "bf16")
    p = run([LLMCC, "compile", d, "--layer", "0", "--ir", "kernel", "--knob", "debug_pair_swap=1"], check=False)
    assert p.returncode == 0 and "k_self_attn_o_proj_tc" in p.stdout and "k_mlp_gate_proj_up_proj_tc" in p.stdout, p.stderr[-500:]
    p = run([LLMCC, "run", "--target", "cuda-emu", d, "--layer", "0", "--tokens", "32", "--knob", "debug_pair_swap=1"], check=False)
    assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, p.stdout + p.stderr


def rope_ref(q, pos, inv_freq, H, D):
    """rotate_half RoPE of q [n, H*D] at positions pos.. (the angle rounded to f32 as the kernel computes it)"""
    n, half = q.shape[0], D // 2
    t = np.arange(n)
    ang = ((pos + t).astype(np.float32)[:, None] * inv_freq[None, :].astype(np.float32)).astype(np.float64)
    c, s = np.cos(ang), np.sin(ang)
    q = q.reshape(n, H, D)
    a, b = q[:, :, :half], q[:, :, half:]
    out = np.concatenate([a * c[:, None, :] - b * s[:, None, :], b * c[:, None, :] + a * s[:, None, :]], axis=2)
    return out.reshape(n, H * D)


def rope_case(maxn, H, D, K, dt, n, pos, knobs=(), seed=0):
    rng = np.random.default_rng(seed + H * D + K)
    exe, tile, d = compile_op(["rope_proj", maxn, H, D, K, dt], knobs)
    x = rng.standard_normal((maxn, K)).astype(np.float32)
    wb, w = weight(rng.standard_normal((H * D, K)) * 0.2, dt)
    inv_freq = (10000.0 ** (-np.arange(0, D, 2) / D)).astype(np.float32)
    (y,) = run_op(exe, d, [x.tobytes(), wb, inv_freq.tobytes()], n, [(maxn, H * D)], pos=pos)
    fused = "fuse=0" not in knobs
    tc = on_tc(tile, "q_proj_rotary_q" if fused else "q_proj") and n > 16
    xs = xs_for(x, n, dt, tc)
    q = xs @ w.T
    ref = rope_ref(q, pos, inv_freq, H, D)
    e = lin_err(xs, w, K, tc).reshape(n, H, 2, D // 2)
    m = np.abs(q).reshape(n, H, 2, D // 2)
    both = (e[:, :, 0] + e[:, :, 1] + 8 * U * (m[:, :, 0] + m[:, :, 1]))
    tol = np.concatenate([both, both], axis=2).reshape(n, H * D)
    return y, ref, tol, tile


def test_halves_rope_gemv_and_gemm_tc():
    cases = [
        (2, 3, 32, 96, "f32", 1, 0, ()), (2, 2, 40, 200, "f32", 2, 7, ()), (2, 4, 6, 64, "bf16", 2, 1000, ()),
        (2, 2, 128, 1024, "bf16", 1, 5, ("gemv_split_k=4",)), (3, 3, 64, 96, "f16", 3, 2, ("gemv_vec=2",)),
        (40, 4, 32, 200, "bf16", 37, 3, ()), (40, 3, 40, 96, "f16", 40, 0, ()), (40, 2, 128, 256, "bf16", 17, 60, ("gemm_bn=128",)),
        (40, 5, 64, 160, "bf16", 33, 9, ("gemm_stages=1",)), (40, 3, 32, 64, "bf16", 20, 1, ("gemm_bk=16", "gemm_stages=3")),
    ]
    for maxn, H, D, K, dt, n, pos, kn in cases:
        for fuse in ("fuse=1", "fuse=0"):
            y, ref, tol, tile = rope_case(maxn, H, D, K, dt, n, pos, kn + (fuse,))
            ks = kernels(tile)
            if fuse == "fuse=1":
                assert "q_proj_rotary_q" in ks and "rotary_q" not in ks and "q_proj" not in ks, tile
                assert "2 stores" in tile or "2 store per" in tile or "2 stores per" in tile, tile
            else:
                assert "q_proj" in ks and "rotary_q" in ks, tile
            check_rows(y, n, ref, tol, "rope_proj %s n=%d pos=%d %s" % ((maxn, H, D, K, dt), n, pos, kn + (fuse,)))


def test_halves_refused_for_odd_head_dim():
    # an odd head_dim has no halves: the rotary stays its own kernel
    _, tile, _ = compile_op(["rope_proj", 2, 2, 5, 32, "f32"])
    assert "rotary_q" in kernels(tile) and "q_proj" in kernels(tile), tile


def test_epilogue_residual():
    for maxn, M, K, dt, n, kn in ((2, 64, 96, "f32", 2, ()), (2, 50, 1000, "bf16", 1, ("gemv_split_k=2",)), (40, 70, 130, "bf16", 38, ()),
                                  (40, 64, 64, "f16", 20, ("gemm_stages=1",))):
        rng = np.random.default_rng(M + K)
        for fuse in ("fuse=1", "fuse=0"):
            exe, tile, d = compile_op(["linear_residual", maxn, M, K, dt], kn + (fuse,))
            assert ("down_proj_residual" in kernels(tile)) == (fuse == "fuse=1"), tile
            x = rng.standard_normal((maxn, K)).astype(np.float32)
            wb, w = weight(rng.standard_normal((M, K)) * 0.2, dt)
            r = rng.standard_normal((maxn, M)).astype(np.float32)
            (y,) = run_op(exe, d, [x.tobytes(), wb, r.tobytes()], n, [(maxn, M)])
            tc = on_tc(tile, "down_proj_residual" if fuse == "fuse=1" else "down_proj") and n > 16
            xs = xs_for(x, n, dt, tc)
            ref = r[:n].astype(np.float64) + xs @ w.T
            check_rows(y, n, ref, lin_err(xs, w, K, tc) + 2 * U * np.abs(ref), "linear_residual %s %s" % ((maxn, M, K, dt, n), kn + (fuse,)))


def fixture(kind, dtype):
    return model_fixture(kind, dtype, seed=11)


def test_model_nests_and_layers():
    # every layer: q/k projections with their RoPE (k's stores land in the KV cache), gate/up with SiLU * up;
    # every MLP residual goes into the next norm (a side store; the last one's, inlined, into the final norm's
    # rows)
    d = fixture("qwen2-tied", "bf16")
    fused = run([LLMCC, "compile", d, "--ir", "loop"]).stdout
    plain = run([LLMCC, "compile", d, "--ir", "loop", "--knob", "fuse=0"]).stdout
    head = fused.splitlines()[0]
    layers = 2
    assert "%d pairs, %d halves" % (layers, 2 * layers) in head, head
    assert "0 epilogues, 0 pairs, 0 halves" in plain.splitlines()[0]
    for nest in ("self_attn_q_proj_rotary_q", "self_attn_k_proj_rotary_k", "mlp_gate_proj_up_proj"):
        assert fused.count("nest %s " % nest) == layers, nest
    for nest in ("self_attn_rotary_q", "self_attn_rotary_k", "mlp_gate_proj", "mlp_up_proj", "mlp_gate_mul_up"):
        assert "nest %s " % nest not in fused and "nest %s " % nest in plain, nest
    # k's halves store straight into the cache, q_proj's bias is in both accumulators' stores
    assert "k_cache[0][(pos + t), (p / 16), ((p % 16) + 16)] = " in fused or "k_cache[0][(pos + t), (p / " in fused, fused
    assert fused.count("self_attn.q_proj.bias[") >= 2 * layers
    # the layers against the double reference: bf16 weights at decode sizes (gemv), f32 at 40 tokens (prefill
    # sizes: bf16 would run gemm_tc, whose bf16-rounded inputs the layer's bound does not cover; the per-op
    # tests above check gemm_tc pairs against a reference that rounds the same way)
    for dd, T in ((d, "1"), (d, "5"), (fixture("qwen2-tied", "f32"), "40"), (fixture("llama-gqa", "f32"), "40"), (fixture("llama-gqa", "bf16"), "3")):
        for kn in ((), ("--knob", "gemv_split_k=2")):
            out = run([LLMCC, "run", "--target", "cuda-emu", dd, "--layer", "1", "--tokens", T, "--pos", "3"] + list(kn)).stdout
            assert "matches the reference" in out, out
