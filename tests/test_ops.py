"""Per-op tests of the GPU schedules, through `llmcc run -c EXPR --target cuda-emu` (the same pipeline
and the same kernels a model build gets, run exactly on the CPU by the C backend): each case is a PyTorch-style expression; llmcc's own check
against its double-precision evaluator must pass, and independently the test reads the inputs,
weights and output --dump writes and compares them with numpy (float64 on the same inputs) under
a bound derived from the schedule, tighter than llmcc's. Covered: flat (elementwise),
block_reduce (warp-shuffle trees, one value per warp in shared memory), gemv with and without
split-K, scalar and vector loads, unrolling, over shapes that hit the edges: K not a multiple of
the vector width or of 32 x vec, M = 1, odd row counts, long (18944) and short (3) reductions,
f32 / bf16 / f16 weights. A schedule with a deliberately wrong shuffle lane (--knob
debug_shfl_offset=1) must fail both llmcc's check and this one. Fusion: inline, side store and
tail fused and unfused (--knob fuse=0), and where the rewrites apply in a model. Where nvcc is
installed, every kernel also compiles for sm_90 without warnings and the ptxas register and spill
counts are printed (scripts/ptxas_report; no thresholds here).

What -c cannot reach stays on the op harness (tests/oplib.py): rows past a runtime n left
unwritten and guard regions around every buffer (test_guard_catches_out_of_bounds_write below;
the op harness cases in test_mma.py, test_epilogues.py, test_topk.py use them), gemm_tc, RoPE,
the kernel-IR primitives.

Tolerances: every output is a sum computed in f32 by a tree whose depth d the schedule fixes
(terms per lane + 5 shuffle steps + warps + split-K slices); the classic bound
|err| <= d * 2^-24 * sum |terms| holds for any summation order of that depth, so the tests use
it (with d rounded up) rather than a guessed rtol. exp / rsqrt / division add a few ulps."""
import hashlib
import os
import shutil

import numpy as np

from oplib import HARNESS_SRCS, U, check_close, ptxas_report, tile_params
from testlib import LLMCC, ROOT, Skip, build_c, run, tmpdir

DT = {"f32": "torch.float32", "bf16": "torch.bfloat16", "f16": "torch.float16"}


def knob_args(knobs):
    a = []
    for k in knobs:
        a += ["--knob", k]
    return a


def run_expr(expr, knobs=(), match=True):
    """`llmcc run -c EXPR --target cuda-emu --dump`: (the dumped arrays as float64, tile IR text). match: llmcc's
    own check must pass (True) or must report a mismatch (False)."""
    d = os.path.join(tmpdir("ops"), "c_" + hashlib.sha1((expr + "|" + "|".join(knobs)).encode()).hexdigest()[:16])
    shutil.rmtree(d, ignore_errors=True)
    p = run([LLMCC, "run", "-c", expr, "--target", "cuda-emu", "--dump", d] + knob_args(knobs), check=False)
    if match:
        assert p.returncode == 0 and "matches the reference" in p.stdout, (expr, knobs, p.stdout, p.stderr)
    else:
        assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, (expr, knobs, p.stdout, p.stderr)
    t = {f[:-4]: np.load(os.path.join(d, f)).astype(np.float64) for f in os.listdir(d) if f.endswith(".npy")}
    tile = run([LLMCC, "compile", "-c", expr, "--ir", "tile", "--target", "cuda-emu"] + knob_args(knobs)).stdout
    return t, tile


def check(got, ref, tol, what):
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    check_close(got, ref, tol, what)


def wrong(got, ref, tol):
    """True when check rejects the values"""
    try:
        check(got, ref, tol, "mutated")
    except AssertionError as e:
        assert "elements off" in str(e), "mutated run failed otherwise: %s" % e
        return True
    return False


def tiles(tile):
    return [l.split()[1] for l in tile.splitlines() if l.startswith("tile ")]


# ---- gemv (linear) ----

def linear_expr(rows, M, K, dt, bias):
    return "nn.Linear(%d, %d, bias=%s, dtype=%s)(torch.randn(%d, %d))" % (K, M, bias, DT[dt], rows, K)


def linear_case(rows, M, K, dt, bias, knobs=(), match=True):
    t, tile = run_expr(linear_expr(rows, M, K, dt, bias), knobs, match)
    x, w = t["input0"], t["linear0.weight"]
    b = t["linear0.bias"] if bias else 0
    ref = x @ w.T + b
    S = int(tile_params(tile, "linear0").get("split_k", 1))
    depth = -(-K // 32) + 5 + S + 2
    tol = depth * U * (np.abs(x) @ np.abs(w).T + np.abs(b)) + 1e-30
    return t["output"], ref, tol, tile


def check_linear(*a, **kw):
    y, ref, tol, tile = linear_case(*a, **kw)
    check(y, ref, tol, "linear %s %s" % (a, kw))
    return tile


def test_gemv_shapes_f32():
    # M = 1, K = 3 (fewer than 32 lanes' worth), K not a multiple of 4 (scalar loads), odd rows
    t = check_linear(1, 1, 3, "f32", False)
    assert tile_params(t, "linear0")["vec"] == "1"
    t = check_linear(3, 37, 200, "f32", True)
    assert tile_params(t, "linear0")["schedule"] == "gemv" and tile_params(t, "linear0")["vec"] == "4"
    check_linear(3, 64, 257, "f32", False)          # K odd: scalar path
    check_linear(2, 33, 1000, "f32", True)          # K % 128 != 0: a partial last round


def test_gemv_shapes_bf16_f16():
    t = check_linear(3, 37, 200, "bf16", True)      # 200 = 8 * 25: vectors, K not a multiple of 256
    assert tile_params(t, "linear0")["vec"] == "8"
    t = check_linear(3, 19, 172, "bf16", False)     # 172 % 8 = 4: narrower vectors
    assert tile_params(t, "linear0")["vec"] == "4"
    check_linear(1, 29, 300, "f16", True)
    check_linear(1, 8, 4097, "bf16", False)         # odd K: scalar loads of bf16


def test_gemv_split_k():
    # long K, few rows: split-K is chosen from the shapes, and its partials are summed in order
    y, ref, tol, tile = linear_case(2, 7, 18944, "bf16", True)
    assert int(tile_params(tile, "linear0")["split_k"]) > 1, tile
    assert tile_params(tile, "linear0_splitk")["schedule"] == "splitk_sum"
    check(y, ref, tol, "split-K linear")
    # pinned: an uneven last slice, and split-K off
    t = check_linear(3, 5, 1000, "bf16", False, knobs=("gemv_split_k=3",))
    assert tile_params(t, "linear0")["split_k"] == "3" and tile_params(t, "linear0")["k_chunk"] == "336"
    t = check_linear(3, 5, 1000, "bf16", False, knobs=("gemv_split_k=1",))
    assert tile_params(t, "linear0")["split_k"] == "1" and "linear0_splitk" not in tiles(t)
    check_linear(1, 3, 18944, "f32", False)


def test_gemv_knobs():
    # one row per block, three (a block of 96 threads), 8; scalar loads forced
    for k in ("gemv_rows_per_block=1", "gemv_rows_per_block=3", "gemv_rows_per_block=8", "gemv_vec=1", "gemv_vec=2"):
        t = check_linear(2, 37, 264, "bf16", True, knobs=(k,))
        p = tile_params(t, "linear0")
        if k.startswith("gemv_rows"):
            assert p["rows_per_block"] == k.split("=")[1] and p["block"] == str(32 * int(k.split("=")[1])), t
        else:
            assert p["vec"] == k.split("=")[1], t


def test_gemv_unroll():
    """gemv_unroll issues U rounds of loads before their terms and adds them in round order: every U
    gives the same bits as U=1 (K = 18944 on split-K slices, 264 and 1000 leave remainders of 1..3
    rounds, 37 fewer rounds than U), and each result is within the linear's bound."""
    for rows, M, K, dt in ((2, 37, 264, "bf16"), (1, 7, 18944, "bf16"), (2, 50, 1000, "f32"), (1, 5, 37, "f32"), (2, 9, 1000, "f16")):
        base = None
        for u in ("1", "2", "3", "4", "8", "0"):
            y, ref, tol, tile = linear_case(rows, M, K, dt, True, knobs=("gemv_unroll=" + u,))
            check(y, ref, tol, "linear %s unroll %s" % ((rows, M, K, dt), u))
            if u != "0":
                assert tile_params(tile, "linear0")["unroll"] == u, tile
            base = y if base is None else base
            assert np.array_equal(y, base), "unroll %s changed the sums of linear %s" % (u, (rows, M, K, dt))


def test_gemv_wrong_shuffle_is_caught():
    # the same comparison (and llmcc's own) must fail when every shuffle reads one lane too far
    for args in ((3, 37, 200, "bf16", True), (1, 1, 3, "f32", False), (2, 7, 18944, "bf16", True)):
        y, ref, tol, _ = linear_case(*args, knobs=("debug_shfl_offset=1",), match=False)
        assert wrong(y, ref, tol), "a schedule with shuffle delta + 1 passed for linear %s" % (args,)


# ---- block_reduce (rmsnorm, softmax) ----

def rmsnorm_bound(t, h, D, tile, name):
    w = t["rmsnorm0.weight"]
    inv = 1.0 / np.sqrt((h * h).mean(axis=1, keepdims=True) + np.float64(np.float32(1e-5)))
    ref = h * inv * w
    B = int(tile_params(tile, name)["block"])
    depth = -(-D // B) + 5 + 5 + 2
    # the sum of squares has positive terms: its relative error is depth*u; rsqrt, /D, two products: a few ulps more
    return ref, (depth / 2 + 8) * U * np.abs(ref) + 1e-30


def rmsnorm_case(rows, D, dt, knobs=(), match=True):
    t, tile = run_expr("nn.RMSNorm(%d, eps=1e-5, dtype=%s)(torch.randn(%d, %d))" % (D, DT[dt], rows, D), knobs, match)
    ref, tol = rmsnorm_bound(t, t["input0"], D, tile, "rmsnorm0_inv_rms")
    return t["output"], ref, tol, tile


def test_block_reduce_rmsnorm():
    for rows, D, dt, knobs in ((3, 3, "f32", ()), (2, 64, "bf16", ()), (1, 100, "f32", ()), (2, 18944, "bf16", ()),
                               (1, 896, "f16", ()), (2, 1000, "f32", ("reduce_block_max=32",)),
                               (2, 5000, "f32", ("reduce_block_max=1024",))):
        y, ref, tol, tile = rmsnorm_case(rows, D, dt, knobs)
        p = tile_params(tile, "rmsnorm0_inv_rms")
        assert p["schedule"] == "block_reduce"
        if knobs:
            assert p["block"] == knobs[0].split("=")[1], tile
        check(y, ref, tol, "rmsnorm D=%d %s" % (D, knobs))


def softmax_case(rows, L, knobs=(), match=True):
    # 3 x: a wider range of exponents than N(0, 1)
    t, tile = run_expr("F.softmax(torch.randn(%d, %d) * 3, dim=-1)" % (rows, L), knobs, match)
    xs = (t["input0"].astype(np.float32) * np.float32(3)).astype(np.float64)    # the f32 product the kernel sees
    e = np.exp(xs - xs.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    B = int(tile_params(tile, "softmax0_sum")["block"])
    depth = -(-L // B) + 5 + 5 + 2
    rel = (depth + 12) * U   # the max is exact; expf within 2 ulps twice, the sum, the division
    return t["output"], ref, rel * ref + 1e-30, tile


def test_block_reduce_softmax():
    for rows, L, knobs in ((2, 3, ()), (3, 33, ()), (1, 1000, ()), (1, 18944, ()), (2, 300, ("reduce_block_max=64",))):
        y, ref, tol, tile = softmax_case(rows, L, knobs)
        assert tile_params(tile, "softmax0_sum")["schedule"] == "block_reduce"
        if knobs:
            assert tile_params(tile, "softmax0_sum")["block"] == "64", tile
        check(y, ref, tol, "softmax L=%d %s" % (L, knobs))


def test_block_reduce_wrong_shuffle_is_caught():
    for D in (3, 64, 18944):
        y, ref, tol, _ = rmsnorm_case(2, D, "f32", knobs=("debug_shfl_offset=1",), match=False)
        assert wrong(y, ref, tol), "a block_reduce with shuffle delta + 1 passed for D=%d" % D
    y, ref, tol, _ = softmax_case(2, 1000, knobs=("debug_shfl_offset=1",), match=False)
    assert wrong(y, ref, tol), "a softmax with shuffle delta + 1 passed"


# ---- flat ----

def silu_mul_case(rows, C, knobs=()):
    t, tile = run_expr("F.silu(torch.randn(%d, %d)) * torch.randn(%d, %d)" % (rows, C, rows, C), knobs)
    xs, gs = t["input0"], t["input1"]
    ref = xs / (1 + np.exp(-xs)) * gs
    return t["output"], ref, 8 * U * np.abs(ref) + 1e-30, tile


def test_flat_elementwise():
    for rows, C in ((1, 1), (3, 37), (2, 18944), (3, 300)):
        y, ref, tol, tile = silu_mul_case(rows, C)
        assert tiles(tile) == ["mul0"] and tile_params(tile, "mul0")["schedule"] == "flat", tile
        check(y, ref, tol, "silu_mul C=%d" % C)


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

CUDA_EXPRS = [linear_expr(3, 37, 200, "bf16", True), linear_expr(2, 7, 18944, "bf16", True), linear_expr(3, 64, 257, "f32", False),
              linear_expr(1, 29, 300, "f16", True), "nn.RMSNorm(18944, dtype=torch.bfloat16)(torch.randn(2, 18944))",
              "nn.RMSNorm(64)(torch.randn(2, 64))", "F.softmax(torch.randn(2, 3), dim=-1)", "F.silu(torch.randn(2, 300)) * torch.randn(2, 300)",
              "x = torch.randn(2, 1000); F.silu(nn.Linear(1000, 96, bias=False, dtype=torch.float16)(x)) * "
              "nn.Linear(1000, 96, bias=False, dtype=torch.float16)(x)",
              "torch.randn(4, 100) + nn.Linear(96, 100, bias=False, dtype=torch.bfloat16)(torch.randn(4, 96))",
              "x = torch.randn(2, 64); r = torch.randn(2, 64); h = x + r; nn.RMSNorm(64)(h) + h"]


def test_cuda_kernels_compile_sm90():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        raise Skip("nvcc is not installed")
    pr = ptxas_report()
    rows = []
    for i, expr in enumerate(CUDA_EXPRS):
        d = tmpdir(os.path.join("ops", "cuda_%d" % i))
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(run([LLMCC, "compile", "-c", expr, "--ir", "cuda"]).stdout)
        res = pr.compile_report(nvcc, cu, "sm_90")
        assert res["ok"], "nvcc failed or warned on %s:\n%s" % (expr, res["log"])
        rows += [(expr[:40],) + r for r in res["kernels"]]
    assert rows, "no kernels reported"
    print(pr.format_table(rows, ("op", "kernel", "registers", "spill stores", "spill loads", "stack", "smem")))


# ---- fusion (loop IR) ----

def test_fusion_residual_into_rmsnorm():
    # h = x + r, then RMSNorm(h) + h: fused, the sum of squares computes h, stores it (the final add reads
    # it back) and accumulates it
    for D, dt in ((64, "f32"), (18944, "bf16"), (3, "f32")):
        expr = "x = torch.randn(2, %d); r = torch.randn(2, %d); h = x + r; nn.RMSNorm(%d, eps=1e-5, dtype=%s)(h) + h" % (D, D, D, DT[dt])
        for fuse in ("fuse=1", "fuse=0"):
            t, tile = run_expr(expr, (fuse,))
            assert ("add0" in tiles(tile)) == (fuse == "fuse=0"), tile
            h = (t["input0"].astype(np.float32) + t["input1"].astype(np.float32)).astype(np.float64)   # the f32 add
            nref, ntol = rmsnorm_bound(t, h, D, tile, "rmsnorm0_inv_rms")
            ref = nref + h
            check(t["output"], ref, ntol + 2 * U * np.abs(ref), "residual_norm D=%d %s" % (D, fuse))


def test_fusion_silu_into_mul():
    for C in (1, 172, 18944):
        for fuse in ("fuse=1", "fuse=0"):
            y, ref, tol, tile = silu_mul_case(3, C, (fuse,))
            assert tiles(tile) == (["mul0"] if fuse == "fuse=1" else ["silu0", "mul0"]), tile
            check(y, ref, tol, "silu_then_mul C=%d %s" % (C, fuse))


def test_fusion_in_a_model_and_its_guards():
    # in a decoder layer: act_fn goes into gate_mul_up; the attention's residual add into the post-attention norm's
    # sum of squares, the MLP's into down_proj's epilogue (nothing fuses across layers: each layer computes its own
    # output, so every layer is one program and the embedding's gather a step of its own). Refused: gate_mul_up into
    # down_proj (it is read inside a reduction, once per output row: recomputed M times), q/k/v's norm output (read
    # by three nests).
    from testlib import LLMCC
    d = os.path.join(tmpdir("ops"), "fx-llama-gqa")
    if not os.path.exists(os.path.join(d, "config.json")):
        run(["python3", os.path.join(ROOT, "scripts", "make_fixture.py"), "llama-gqa", d, "--seed", "7"])
    fused = run([LLMCC, "compile", d, "--ir", "loop"]).stdout
    plain = run([LLMCC, "compile", d, "--ir", "loop", "--knob", "fuse=0"]).stdout
    head = fused.splitlines()[0]
    layers = 2
    assert "fused: %d inlined, %d side stores" % (layers, layers + 1) in head, head
    assert "fused: 0 inlined, 0 side stores" in plain.splitlines()[0]
    assert "nest mlp_act_fn " not in fused and "nest mlp_act_fn " in plain
    # side stores: every attn_residual into the post-attention norm, and last_token into the final norm; inlined:
    # every act_fn; epilogues: every mlp_residual into down_proj; gate_mul_up with gate_proj and up_proj into one
    # pair nest
    assert "nest attn_residual " not in fused and "nest mlp_residual " not in fused
    assert "%d epilogues" % layers in head and fused.count("nest mlp_down_proj_residual ") == layers, head
    assert "nest embed_tokens " in fused and "model.layers.1.mlp_residual[(pos + t), d]" in fused
    assert fused.count("nest mlp_gate_proj_up_proj ") == layers and "nest mlp_down_proj " not in fused
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
