"""The CPU target's own schedules (cpu_rows, cpu_gemm, cpu_attn; compiler/schedules/cpu_*.c) against
independent references, as the GPU schedules are checked through cuda-emu elsewhere:
- the op harness (tests/oplib.py, --target cpu): linears at decode (cpu_rows: a group of outputs per K
  loop and the elements left over) and at prefill (cpu_gemm: packed panels, token blocks past mc, K steps
  past kc, outputs past a task's nb), the fused pair (SiLU(gate) * up), halves (RoPE) and residual
  epilogues, top-k in the CPU team; every buffer between guard regions, rows past n left unwritten;
- `llmcc run -c EXPR --target cpu` for norms, softmax, attention (causal or not), argmax with NaN, and the
  elementwise ops (llmcc's double-precision check);
- a model fixture: both CPU targets' greedy ids and logits against the numpy reference, --threads 1 and
  the default giving the same ids, --info naming what runs.
bf16 weights at prefill (cpu_gemm, n > 3) are also run with the bf16 dot product (knob cpu_gemm_bf16=1):
the activations are rounded to bf16 first (runtime/cpu_gemm.h), and the references round them the same way
(xs_of); those runs go through AMX tiles (K a multiple of 32) and AVX512_BF16 where this CPU has them, through
AVX512_BF16 alone with LLMCC_CPU_AMX=0 and, with LLMCC_CPU_BF16_DOT=0, through the f32 stand-in; f32 ones through
the AVX-512 (zmm) tile where the CPU has it and, with LLMCC_CPU_AVX512=0, through the portable one.
Tolerances: a sum of K terms computed in f32 in any order (vector lanes, K steps) is within
(K + 4) * 2^-24 * sum |terms| of the exact one; a wrong or missing term is far outside it."""
import os
import re

import numpy as np

import ref_forward
from oplib import U, check_rows, compile_op, run_op, to_bf16, weight
from test_e2e import PROMPT, build, fixture, read_logits
from test_epilogues import rope_ref, silu
from testlib import LLMCC, run

CPU = ("--target", "cpu")


def lin_tol(x, w, K, b=0):
    return (K + 4) * U * (np.abs(x) @ np.abs(w).T + np.abs(b)) + 1e-30


def dots(dt, maxn):
    """cpu_gemm_bf16 and cpu_rows_bf16 knob values to build with: both where bf16 weights can take the dot
    product (cpu_rows' dot16 at n <= 32, cpu_gemm's above)."""
    return (0, 1) if dt == "bf16" else (0,)


def gemm_above(dt, dot):
    """The token counts above which a linear runs cpu_gemm: 32 for bf16 weights with the dot products
    (knob cpu_dot16_max_n), else 3 (cpu_gemm_min_n)."""
    return 32 if dt == "bf16" and dot else 3


def xs_of(x, n, dot):
    """The activations a linear multiplies, in f64: the bf16 dot products see them rounded."""
    return (to_bf16(x[:n])[1] if dot else x[:n]).astype(np.float64)


def each_dot_path(dot):
    """The environments that run the bf16 dot product each way: as this CPU has it (AMX tiles where it has them and K is
    a multiple of 32), AVX512_BF16's vdpbf16ps tile (LLMCC_CPU_AMX=0), and the f32 stand-in; f32 GEMMs with and
    without the AVX-512 (zmm) tile."""
    return ({}, {"LLMCC_CPU_AMX": "0"}, {"LLMCC_CPU_BF16_DOT": "0"}) if dot else ({}, {"LLMCC_CPU_AVX512": "0"})


def compile_cpu(args, dot):
    exe, tile, d = compile_op(args + list(CPU), knobs=("cpu_gemm_bf16=%d" % dot, "cpu_rows_bf16=%d" % dot))
    assert ("bf16-dot-product" in tile or "bf16 dot product" in tile) == bool(dot), tile
    return exe, tile, d


def schedules(tile):
    return {l.split()[1]: l.split()[1] for l in tile.splitlines() if l.strip().startswith("schedule ")}


def test_linear_decode_and_prefill():
    # (maxn, M, K, dtype, bias, n): n <= 3 takes cpu_rows (groups of 4 and the rest), larger n cpu_gemm
    cases = [(2, 1, 5, "f32", True, 1), (3, 33, 96, "bf16", False, 3), (3, 37, 1000, "f16", True, 2),
             (64, 130, 600, "bf16", True, 37), (64, 100, 96, "f32", False, 64), (100, 70, 257, "f16", True, 97),
             (8, 64, 64, "bf16", False, 4), (64, 200, 160, "bf16", True, 45), (64, 96, 64, "f32", True, 61)]
    rng = np.random.default_rng(5)
    for maxn, M, K, dt, bias, n, dot in [c + (dot,) for c in cases for dot in dots(c[3], c[0])]:
        exe, tile, d = compile_cpu(["linear", maxn, M, K, dt, 1 if bias else 0], dot)
        sch = schedules(tile)
        assert set(sch) <= {"cpu_rows", "cpu_gemm"} and "cpu_rows" in sch, tile
        assert ("cpu_gemm" in sch) == (maxn > gemm_above(dt, dot)), tile
        x = rng.standard_normal((maxn, K)).astype(np.float32)
        wb, w = weight(rng.standard_normal((M, K)), dt)
        ins, b = [x.tobytes(), wb], 0
        if bias:
            bb, b = weight(rng.standard_normal(M), dt)
            ins.append(bb)
        xs = xs_of(x, n, dot)
        for env in each_dot_path(dot):
            (y,) = run_op(exe, d, ins, n, [(maxn, M)], env=env)
            check_rows(y, n, xs @ w.T + b, lin_tol(xs, w, K, b), "linear %s %s" % ((maxn, M, K, dt, bias, n), env))


def test_fused_pair_halves_and_residual():
    rng = np.random.default_rng(9)
    mlps = ((3, 172, 96, "f32", 2), (2, 64, 1000, "bf16", 1), (64, 100, 300, "bf16", 40), (64, 70, 64, "f16", 5),
            (64, 80, 96, "bf16", 50))
    for (maxn, M, K, dt, n), dot in [(c, dot) for c in mlps for dot in dots(c[3], c[0])]:
        exe, tile, d = compile_cpu(["mlp", maxn, M, K, dt], dot)
        assert "gate_proj_up_proj" in tile, tile
        x = rng.standard_normal((maxn, K)).astype(np.float32)
        wgb, wg = weight(rng.standard_normal((M, K)) * 0.2, dt)
        wub, wu = weight(rng.standard_normal((M, K)) * 0.2, dt)
        xs = xs_of(x, n, dot)
        g, u = xs @ wg.T, xs @ wu.T
        ref = silu(g) * u
        tol = 1.1 * lin_tol(xs, wg, K) * np.abs(u) + np.abs(silu(g)) * lin_tol(xs, wu, K) + 8 * U * np.abs(ref)
        for env in each_dot_path(dot):
            (y,) = run_op(exe, d, [x.tobytes(), wgb, wub], n, [(maxn, M)], env=env)
            check_rows(y, n, ref, tol, "mlp %s %s" % ((maxn, M, K, dt, n), env))
    # the pair's halves are W's rows in runs of D / 2, D apart: runs shorter than a task (16), longer (64)
    ropes = ((2, 3, 32, 96, "f32", 1, 0), (3, 4, 6, 64, "bf16", 3, 1000), (64, 4, 32, 200, "bf16", 37, 3),
             (64, 2, 128, 300, "f16", 64, 60), (64, 3, 128, 100, "f32", 20, 5), (16, 2, 256, 64, "bf16", 9, 1))
    for (maxn, H, D, K, dt, n, pos), dot in [(c, dot) for c in ropes for dot in dots(c[4], c[0])]:
        exe, tile, d = compile_cpu(["rope_proj", maxn, H, D, K, dt], dot)
        assert "q_proj_rotary_q" in tile, tile
        x = rng.standard_normal((maxn, K)).astype(np.float32)
        wb, w = weight(rng.standard_normal((H * D, K)) * 0.2, dt)
        inv_freq = (10000.0 ** (-np.arange(0, D, 2) / D)).astype(np.float32)
        xs = xs_of(x, n, dot)
        q = xs @ w.T
        e = lin_tol(xs, w, K).reshape(n, H, 2, D // 2)
        m = np.abs(q).reshape(n, H, 2, D // 2)
        both = e[:, :, 0] + e[:, :, 1] + 8 * U * (m[:, :, 0] + m[:, :, 1])
        for env in each_dot_path(dot):
            (y,) = run_op(exe, d, [x.tobytes(), wb, inv_freq.tobytes()], n, [(maxn, H * D)], pos=pos, env=env)
            check_rows(y, n, rope_ref(q, pos, inv_freq, H, D), np.concatenate([both, both], axis=2).reshape(n, H * D),
                       "rope_proj %s %s" % ((maxn, H, D, K, dt, n, pos), env))
    for (maxn, M, K, dt, n), dot in [(c, dot) for c in ((2, 64, 96, "f32", 2), (64, 70, 130, "bf16", 38))
                                     for dot in dots(c[3], c[0])]:
        exe, tile, d = compile_cpu(["linear_residual", maxn, M, K, dt], dot)
        assert "down_proj_residual" in tile, tile
        x = rng.standard_normal((maxn, K)).astype(np.float32)
        wb, w = weight(rng.standard_normal((M, K)) * 0.2, dt)
        r = rng.standard_normal((maxn, M)).astype(np.float32)
        xs = xs_of(x, n, dot)
        ref = r[:n].astype(np.float64) + xs @ w.T
        for env in each_dot_path(dot):
            (y,) = run_op(exe, d, [x.tobytes(), wb, r.tobytes()], n, [(maxn, M)], env=env)
            check_rows(y, n, ref, lin_tol(xs, w, K) + 2 * U * np.abs(ref),
                       "linear_residual %s %s" % ((maxn, M, K, dt, n), env))


def test_topk_in_the_cpu_team():
    from test_topk import numpy_topk
    rng = np.random.default_rng(2)
    for R, L, K in ((1, 152064, 21), (3, 10007, 128)):
        exe, tile, d = compile_op(["topk", R, L, K] + list(CPU))
        x = rng.standard_normal((R, L)).astype(np.float32)
        x[:, ::97] = 0.5
        (y,) = run_op(exe, d, [x.tobytes()], R, [(R, 2, K)])
        got = y.view(np.float32).astype(np.float64)
        assert np.array_equal(got, numpy_topk(x.astype(np.float64), K)), "topk %s" % ((R, L, K),)


def test_ops_through_run():
    exprs = ["nn.RMSNorm(2048)(torch.randn(3, 2048))", "nn.RMSNorm(896, dtype=torch.bfloat16)(torch.randn(1, 896))",
             "F.softmax(torch.randn(4, 3000), dim=-1)", "F.silu(torch.randn(2, 1000)) * torch.randn(2, 1000)",
             "torch.argmax(torch.randn(3, 70000), dim=-1)",
             "F.scaled_dot_product_attention(torch.randn(1, 4, 37, 64), torch.randn(1, 4, 37, 64), "
             "torch.randn(1, 4, 37, 64), is_causal=True)",
             "F.scaled_dot_product_attention(torch.randn(2, 2, 5, 16), torch.randn(2, 2, 9, 16), "
             "torch.randn(2, 2, 9, 24))",
             "x = torch.randn(2, 300); F.silu(nn.Linear(300, 40)(x)) * nn.Linear(300, 40)(x)"]
    for e in exprs:
        p = run([LLMCC, "run", "-c", e] + list(CPU))
        assert "matches the reference" in p.stdout and "target: cpu (the CPU's schedules" in p.stdout, (e, p.stdout)
        tile = run([LLMCC, "compile", "-c", e, "--ir", "tile"] + list(CPU)).stdout
        assert all(s.startswith("cpu_") for s in schedules(tile)), (e, tile)
    # cpu_gemm's two ways to take the activations: an f32 matrix read in place, anything else packed
    for e, way in (("nn.Linear(300, 70)(torch.randn(13, 300))", "read in place"),
                   ("nn.Linear(300, 70)(torch.randn(13, 300, dtype=torch.bfloat16))", "slivers of 6")):
        p = run([LLMCC, "run", "-c", e] + list(CPU))
        assert "matches the reference" in p.stdout, (e, p.stdout)
        assert way in run([LLMCC, "compile", "-c", e, "--ir", "tile"] + list(CPU)).stdout, e


def test_fixture_both_targets_and_threads():
    """Greedy ids and every step's logits of both CPU targets against the numpy reference; the cpu build's
    ids with one thread and with two; --info names the threads and the instruction set."""
    d = fixture("qwen2-tied", "bf16")
    model = ref_forward.load(d)
    for target in ("cpu", "cuda-emu"):
        # cpu: every call through the bf16 dot products, modelled by the reference; the tolerance adds what the
        # rounding moves the logits (test_fullsize.check_against_ref says why). cuda-emu: its bf16 KV cache (the
        # GPU's default), modelled likewise
        ref_ids, ref_logits = ref_forward.greedy(model, PROMPT, 16, bf16_dots=target == "cpu",
                                                 kv_bf16=target == "cuda-emu")
        ref = np.asarray(ref_logits, dtype=np.float64)
        plain_ids, plain_logits = ref_forward.greedy(model, PROMPT, 16)
        assert plain_ids == ref_ids, "the bf16 rounding changes the reference's greedy ids: the slack is moot"
        slack = np.abs(ref - np.asarray(plain_logits, dtype=np.float64)).max()
        out = build(d, target)
        exe = os.path.join(out, "m")
        lp = exe + ".logits"
        base = [exe, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "16", "--temperature", "0", "--repeat-penalty", "1",
                "--ids", "--ignore-eos"]
        ids = [int(x) for x in run(base + ["--logits", lp, "--threads", "2"]).stdout.split()]
        assert ids == list(ref_ids), "%s: ids %s, reference %s" % (target, ids, list(ref_ids))
        got = read_logits(lp, ref.shape[1])
        err = np.abs(got - ref[:len(got)]).max()
        assert err < 2e-3 * np.abs(ref).max() + slack, "%s: logits off by %g" % (target, err)
        tile = run([LLMCC, "compile", d, "--ir", "tile", "--target", target]).stdout
        kinds = set(schedules(tile))
        if target == "cpu":
            assert kinds <= {"cpu_rows", "cpu_gemm", "cpu_attn", "top_k", "top_k_merge"} and "cpu_gemm" in kinds, kinds
            one = [int(x) for x in run(base + ["--threads", "1"]).stdout.split()]
            assert one == ids, "one thread: %s, two: %s" % (one, ids)
            info = run([exe, "--info"]).stdout
            assert "target: cpu" in info and "compute: " in info and "kernels for " in info, info
        else:
            assert not any(k.startswith("cpu_") for k in kinds) and "gemv" in kinds, kinds


def test_barriers_and_tokens_kernels():
    """The cpu build's host code orders its launches itself (emit.c): every kernel's omp for is nowait, and
    model_forward has a barrier before a launch that uses what the ones since the last barrier wrote, none
    between the independent q, k and v projections; model_forward_batch runs them once for all the tokens
    through their _tokens variants (each token's RoPE position and KV row from positions and kv_rows), and
    attention per token. (That the results are right: the fixture tests above and test_serve's batched
    requests against each alone.)"""
    out = build(fixture("qwen2-tied", "bf16"), "cpu")
    src = open(os.path.join(out, "model.c")).read()
    fors = re.findall(r"#pragma omp for[^\n]*", src)
    assert fors and all(f.endswith(" nowait") for f in fors), set(fors)
    body = lambda name: src[src.index("\nint %s(" % name):].split("\n}\n", 1)[0]
    layer = lambda text: text[text.index("for (int l = 0; l < 2; l++)"):]   # the fixture's layers, one loop
    one, batch = layer(body("model_forward")), layer(body("model_forward_batch"))

    def before(text, what):
        """the text between the call before what's kernel (k_self_attn_k_proj...) and that call"""
        calls = [m.start() for m in re.finditer(r"\bk_\w+\(", text)]
        at = [c for c in calls if text.startswith("k_" + what.replace(".", "_"), c)][0]
        return text[[c for c in calls if c < at][-1]:at]
    BARRIER = "#pragma omp barrier"
    for text in (one, batch):
        assert BARRIER not in before(text, "self_attn.k_proj") and BARRIER not in before(text, "self_attn.v_proj")
        assert BARRIER in before(text, "self_attn.attention") and BARRIER in before(text, "self_attn.o_proj")
        assert BARRIER in before(text, "self_attn.q_proj"), "q_proj reads the norm just written"
    for proj in ("q_proj_rotary_q", "k_proj_rotary_k", "v_proj"):
        assert re.search(r"k_self_attn_%s_tokens\(\w+, n, pos, positions, kv_rows," % proj, batch), proj
        # model_forward calls the same variants (its tokens' positions pos, pos + 1, ...): each kernel once
        assert re.search(r"k_self_attn_%s_tokens\(\w+, n, pos, positions, kv_rows," % proj, one), proj
        assert "static void k_self_attn_%s(" % proj not in src, proj
    assert "positions[t] = pos + t;" in body("model_forward")
    # unfused attention bounds its keys by pos + n, past the call's tokens: it has no variant (n is no token)
    plain = run([LLMCC, "compile", fixture("qwen2-tied", "bf16"), "--ir", "c", "--target", "cpu", "--knob",
                 "fuse=0"]).stdout
    assert "positions[n]" not in plain
    kernel = src[src.index("void k_self_attn_k_proj_rotary_k_tokens("):].split("\n}\n", 1)[0]
    assert "kv_rows[(t_" in kernel and "positions[(t_" in kernel and "(pos + " not in kernel, kernel[:3000]
    assert "each token: n = 1" in before(batch, "self_attn.attention"), "attention runs per token"
    assert batch.count("each token: n = 1") == 1, "only attention loops over the tokens"


def test_prefetch_knob():
    """Knob cpu_prefetch (cpu_rows' prefetch of the weights ahead of the decode dot products' loads) reaches the
    tile IR, the kernel IR and the emitted calls with its value, is left out at 0, and must be whole cache
    lines. (That prefetching leaves the sums alone: tests/c/test_cpu_dot16.c runs with and without it, and
    every qdot / dot16 check here and in test_quant.py runs with the default.)"""
    fix = fixture("qwen2-tied", "bf16")
    for value in (None, 0, 640):
        knobs = () if value is None else ("--knob", "cpu_prefetch=%d" % value)
        want = 4096 if value is None else value
        tile = run([LLMCC, "compile", fix, "--target", "cpu", "--ir", "tile"] + list(knobs)).stdout
        kern = run([LLMCC, "compile", fix, "--target", "cpu", "--ir", "kernel"] + list(knobs)).stdout
        dot16 = [l for l in kern.splitlines() if "= dot16(" in l]
        assert dot16, kern[:2000]
        if want:
            assert "the weights prefetched %d bytes ahead" % want in tile, tile[:3000]
            assert all(l.endswith("prefetching %d bytes ahead" % want) for l in dot16), dot16[:4]
        else:
            assert "bytes ahead" not in tile and not any("prefetch" in l for l in dot16), dot16[:4]
    out = build(fix, "cpu")
    # (a call longer than 120 columns is wrapped: its spaces and line breaks as one space)
    src = open(os.path.join(out, "model.c")).read()
    calls = [re.sub(r"\s+", " ", c) for c in re.findall(r"cpu_dot16_rows\([^;]*;", src)]
    assert calls and all(re.search(r", 4096, m_\d+, smem0 \+ \d+LL\);$", c) for c in calls), calls[:4]
    p = run([LLMCC, "compile", fix, "--target", "cpu", "--ir", "tile", "--knob", "cpu_prefetch=100"], check=False)
    assert p.returncode == 1 and p.stderr.strip() == \
        "llmcc: --knob: cpu_prefetch must be a multiple of 64 (bytes: whole cache lines)", p.stderr


def test_aarch64_builds_with_neon():
    """The same model.c compiles for aarch64 (a cross gcc, where installed: apt-get install gcc-aarch64-linux-gnu)
    and its kernels' loops become NEON vector FMAs (fmla on .4s lanes)."""
    import shutil
    from testlib import Skip
    cc = shutil.which("aarch64-linux-gnu-gcc")
    if not cc:
        raise Skip("no aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)")
    out = build(fixture("qwen2-tied", "bf16"), "cpu")
    flags = [l.split("=", 1)[1].split() for l in open(os.path.join(out, "Makefile")) if l.startswith("MODEL_CFLAGS ?=")][0]
    asm = os.path.join(out, "model.aarch64.s")
    run([cc, "-std=c11", "-D_GNU_SOURCE", "-fopenmp", "-Wall", "-Werror", "-I" + os.path.join(out, "runtime"), "-S",
         os.path.join(out, "model.c"), "-o", asm] + flags)
    text = open(asm).read()
    assert text.count(".4s") > 100 and "fmla\tv" in text, "no NEON vector FMAs in the aarch64 build"
