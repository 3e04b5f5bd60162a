"""Quantized weights (GGUF's block types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q4_K, Q5_K, Q6_K), read in
place by
the linears' schedules.

The reference is gguf-py (PyPI `gguf`, llama.cpp's own Python package): it quantizes the test's
weights and dequantizes them, independently of llmcc's C (runtime/kernels.h ld_q*, runtime/cpu_quant.h,
compiler/quant.c). gguf-py cannot quantize the K-quants: their weights are random blocks (every integer and
sub-block scale byte random, the f16 super-block scales positive and sane), which gguf-py dequantizes. llmcc has
no quantizer into Q5_0 / Q5_1 (gguf-py has): `llmcc run -c` makes random blocks of those too.
Each case runs a linear through the op harness (tests/oplib.py: guard regions around every buffer,
rows past n left unwritten) on the CPU target's schedules (at most cpu_gemm_min_n tokens, cpu_rows' qdot:
by default runtime/cpu_quant_q8.h's integer dot products, the activations rounded to 8 bits, in AVX2 and
portable C; with knob cpu_qdot_q8=0 runtime/cpu_quant.h's f32 ones, AVX-512, AVX2 and portable C; LLMCC_CPU_QDOT
chooses; more tokens, cpu_gemm: the blocks dequantized into its packed f32 panel)
and on the GPU schedules emulated (gemv: a lane's whole blocks or groups of blocks, bdot, runtime/kernels.h's
bdot_q8_0, bdot_q4_1_x4 ...; the K-quants' halves of super-blocks, bdot_q4_k_h ...), at n = 1 (decode) and n > 16
(a prompt: where bf16 weights would take gemm_tc / the packed CPU GEMM, block types stay on
gemv / cpu_rows), with K of one block and of several, and output counts that are not multiples of
any tile. Then `llmcc run -c` with `--dump`: the blocks llmcc quantized are dequantized by gguf-py.

`llmcc build --quant`: q8_0 / q4_0 / q4_1 builds against tests/ref_forward.py on gguf-py's quantization of the
weights. q4_k / q6_k (gguf-py has no K-quant quantizer): the super-blocks llmcc writes, byte for byte, against
tests/ggml_kquants.py (a numpy port of ggml's reference quantizers, itself checked against libggml-base.so's
functions) and against llama.cpp's llama-quantize --pure on the same f32 GGUF file; a build's greedy ids and
logits against ref_forward on gguf-py's dequantization of llama-quantize's blocks (the port's where llama.cpp is
not built: the llama.cpp parts skip where ../shared/tools/peer-llamacpp has not built it).

Tolerance: the dequantized weights are exact in f32 on both sides (a scale times a small integer, plus
Q4_1 / Q5_1's minimum: one f32 rounding, the same in numpy), so what remains is f32 summation:
|err| <= K * 2^-24 * sum |x w| for any order (the classic bound, depth at most K). Q4_K / Q5_K's dot products
sum d * sc * q and dmin * m apart (one multiply-add by each sub-block's scale and minimum), so there |w| is
d * sc * q + dmin * m: gguf-py's dequantization of the blocks with dmin's sign flipped.

The 8-bit activations are part of that path's contract: the reference rounds the same f32 inputs the same way
(tests/ref_forward.py's q8_round, written from the rounding runtime/cpu_quant_q8.h documents), so the products
are exact integers on both sides and the same bound holds with x the rounded values."""
import json
import os
import re

import numpy as np

from oplib import U, check_close, compile_op, run_op
from ref_forward import q8_round
from testlib import LLMCC, Skip, run, tmpdir

TYPES = ("q8_0", "q4_0", "q4_1")   # llmcc quantizes into these (--quant)
Q5_TYPES = ("q5_0", "q5_1")   # blocks of 32 with a fifth bit per value in a word of their own (--quant too)
K_TYPES = ("q4_k", "q6_k", "q5_k")
BLOCK = {"q8_0": (32, 34), "q4_0": (32, 18), "q4_1": (32, 20), "q4_k": (256, 144), "q5_k": (256, 176),
         "q6_k": (256, 210), "q5_0": (32, 22), "q5_1": (32, 24)}   # values and bytes per block (ggml-common.h)


def gguf_or_skip():
    try:
        from gguf import GGMLQuantizationType, quants
    except ImportError:
        raise Skip("gguf (gguf-py, the reference) is not installed")
    return quants, GGMLQuantizationType


def qtype(T, dt):
    return getattr(T, dt.upper())


def random_kblocks(dt, rows, k, rng, bound=1.0):
    """rows x k values of K-quant dt as random blocks, uint8 [rows, bytes per row]: every byte random, then the f16
    super-block scales d (and dmin) positive, drawn so that the values stay within about +-bound"""
    vals, nb = BLOCK[dt]
    blocks = rng.integers(0, 256, size=(rows, k // vals, nb), dtype=np.uint8)
    most = {"q4_k": 63 * 15, "q5_k": 63 * 31, "q6_k": 128 * 32}[dt]
    d = (rng.uniform(0.5, 1.0, size=blocks.shape[:2]) * bound / most).astype(np.float16)
    if dt == "q6_k":
        blocks[..., 208:210] = d.view(np.uint8).reshape(rows, -1, 2)
    else:
        dmin = (rng.uniform(0.5, 1.0, size=blocks.shape[:2]) * bound / 63).astype(np.float16)
        blocks[..., 0:2] = d.view(np.uint8).reshape(rows, -1, 2)
        blocks[..., 2:4] = dmin.view(np.uint8).reshape(rows, -1, 2)
    return blocks.reshape(rows, -1)


def weights(dt, M, K, rng):
    """(blocks as stored, the values gguf-py dequantizes them to, the magnitudes the tolerance sums: |w|, or for
    Q4_K / Q5_K d * sc * q + dmin * m)"""
    quants, T = gguf_or_skip()
    if dt in K_TYPES:
        blocks = random_kblocks(dt, M, K, rng)
        w = quants.dequantize(blocks, qtype(T, dt)).astype(np.float64)
        if dt == "q6_k":
            return blocks, w, np.abs(w)
        flipped = blocks.reshape(M, K // 256, -1).copy()
        flipped[..., 3] ^= 0x80   # dmin's sign bit: d * sc * q + dmin * m, every term >= 0
        return blocks, w, quants.dequantize(flipped.reshape(M, -1), qtype(T, dt)).astype(np.float64)
    blocks = quants.quantize(rng.standard_normal((M, K)).astype(np.float32), qtype(T, dt))
    w = quants.dequantize(blocks, qtype(T, dt)).astype(np.float64)
    return blocks, w, np.abs(w)


def linear_case(dt, target, maxn, M, K, ns, bias=True, seed=5, knobs=(), isas=(None,), fault=False):
    """one linear compiled once, run at every n of ns with every cpu_qdot implementation of isas"""
    rng = np.random.default_rng(seed + 13 * M + K)
    exe, tile, d = compile_op(["linear", maxn, M, K, dt, 1 if bias else 0, "--target", target], knobs)
    q8 = "rounded to 8 bits per 32" in tile   # cpu_rows' qdot with 8-bit activations (n <= cpu_gemm_min_n)
    x = rng.standard_normal((maxn, K)).astype(np.float32)
    blocks, w, wabs = weights(dt, M, K, rng)
    ins = [x.tobytes(), blocks.tobytes()]
    b = np.zeros(M)
    if bias:
        b = rng.standard_normal(M).astype(np.float32)
        ins.append(b.tobytes())
    for isa in isas:
        env = dict(os.environ, LLMCC_CPU_QDOT=isa) if isa else None
        for n in ns:
            (y,) = run_op(exe, d, ins, n, [(maxn, M)], env=env)
            assert np.all(y[n:] == 0xFFFFFFFF), "%s: rows past n=%d were written" % (dt, n)
            got = y[:n].view(np.float32).astype(np.float64)
            xs = (q8_round(x[:n]) if q8 and n <= 3 else x[:n]).astype(np.float64)
            ref = xs @ w.T + b.astype(np.float64)
            tol = (K + 2) * U * (np.abs(xs) @ wabs.T + np.abs(b)) + 1e-30
            what = "%s linear %s n=%d M=%d K=%d on %s%s" % (dt, maxn, n, M, K, target, " (%s)" % isa if isa else "")
            if fault:
                assert np.any(np.abs(got - ref) > tol), what + ": the deliberate fault went unnoticed"
            else:
                check_close(got, ref, tol, what)
    return tile


def linear_blocks_vs_gguf(types, shapes):
    for target, isas, q8 in (("cpu", (None, "c"), 1), ("cpu", (None, "avx2", "c"), 0), ("cuda-emu", (None,), 1)):
        for dt in types:
            for maxn, M, K, ns in shapes:
                tile = linear_case(dt, target, maxn, M, K, ns, bias=(M != 64), isas=isas,
                                   knobs=("cpu_qdot_q8=%d" % q8,))
            # the schedules: the CPU target's dot products (n <= 3; 8-bit activations or f32) and packed GEMM (K in
            # steps of 512: the last shape's K is three), the GPU's gemv: blocks of 32 a whole block per
            # lane (bdot), the K-quants' halves of super-blocks (bdot)
            if target == "cpu":
                how = "integer products" if q8 else "dequantized in registers"
                assert "a dot product of w's %s blocks (%s)" % (dt, how) in tile, tile
                assert ("rounded to 8 bits per 32" in tile) == bool(q8), tile
                assert "the blocks dequantized" in tile and "kc=512" in tile, tile
            elif dt in K_TYPES:
                assert "gemv" in tile and "halves of super-blocks" in tile, tile
            else:
                assert "gemv" in tile and "bdot" in tile, tile


def test_linear_blocks_vs_gguf():
    """every block type of 32 through both CPU-side targets' schedules, decode and prompt shapes"""
    linear_blocks_vs_gguf(TYPES + Q5_TYPES, ((1, 37, 32, (1,)), (4, 64, 320, (1, 3)), (40, 19, 96, (1, 17, 40)),
                                  (6, 40, 1088, (2, 6))))


def test_linear_k_quants_vs_gguf():
    """the K-quants likewise: K of one super-block and several, 1280 in cpu_gemm's K steps of 512, 512, 256; on
    cuda-emu also K of 37 super-blocks (a lane's rounds of halves: two a trip for q4_k, the last trip partial; q6_k's
    rows of odd super-blocks start 2 bytes past a word) with split-K, and the element loads (gemv_bdot_groups=0)"""
    linear_blocks_vs_gguf(K_TYPES, ((1, 37, 256, (1,)), (4, 64, 768, (1, 3)), (40, 19, 256, (1, 17, 40)),
                                    (6, 40, 1280, (2, 6))))
    for dt in K_TYPES:
        for knobs in ((), ("gemv_split_k=3",)):
            tile = linear_case(dt, "cuda-emu", 3, 9, 256 * 37, (1, 3), knobs=knobs)
            assert "halves of super-blocks" in tile, tile
        tile = linear_case(dt, "cuda-emu", 3, 9, 256 * 37, (1, 3), knobs=("gemv_bdot_groups=0",))
        assert "scalar loads" in tile, tile


def test_qdot_fault_knob():
    """debug_qdot_row=1 (each dot product reads the next weight row) must fail, on every block type, with 8-bit
    activations and f32 ones"""
    for dt in TYPES + Q5_TYPES + K_TYPES:
        for q8 in (1, 0):
            linear_case(dt, "cpu", 4, 24, 256 if dt in K_TYPES else 64, (3,),
                        knobs=("debug_qdot_row=1", "cpu_qdot_q8=%d" % q8), fault=True)


def test_pack_fault_knob():
    """debug_pack_row=1 (cpu_gemm's runtime pack of the weight panel starts a row late) must fail the prompt shapes
    (n > cpu_gemm_min_n) on every block type, as it must on f32 and bf16 weights"""
    for dt in TYPES + Q5_TYPES + K_TYPES:
        tile = linear_case(dt, "cpu", 40, 19, 256 if dt in K_TYPES else 96, (17, 40), knobs=("debug_pack_row=1",),
                           fault=True)
        assert "the blocks dequantized" in tile, tile
    for dt in ("", ", dtype=torch.bfloat16"):
        expr = "x = torch.randn(40, 96); nn.Linear(96, 19%s)(x)" % dt
        assert "matches the reference" in run([LLMCC, "run", "-c", expr, "--target", "cpu"]).stdout
        p = run([LLMCC, "run", "-c", expr, "--target", "cpu", "--knob", "debug_pack_row=1"], check=False)
        assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, (dt, p.stdout, p.stderr)


def test_gemv_bdot_rounds_vs_gguf():
    """the GPU gemv's block dot products (bdot) where a lane's blocks do not fill its unrolled rounds: K of 9 rounds
    of 32 blocks and 7 blocks more (lanes 0-6 one block more than the rest), the chosen unroll and split-K, an
    unroll of 3 (a tail of 1 or 2 blocks per lane) and split-K over 4 slices (each slice's own tail); then K of
    whole unrolled rounds, where the loop of the rounds left over is left out"""
    K = 32 * (32 * 9 + 7)
    for dt in TYPES:
        for knobs in ((), ("gemv_unroll=3",), ("gemv_split_k=4", "gemv_unroll=2"), ("gemv_split_k=3",)):
            tile = linear_case(dt, "cuda-emu", 3, 5, K, (1, 3), knobs=knobs)
            assert "bdot" in tile, tile
            if "gemv_split_k=4" in knobs:
                assert "split_k=4" in tile and "unroll=2" in tile, tile
        # K of whole unrolled rounds (8 rounds of 32 blocks): every trip loads its rounds (a constant count)
        for knobs in (("gemv_unroll=8", "gemv_bdot_groups=0"), ("gemv_split_k=2", "gemv_unroll=4", "gemv_bdot_groups=0")):
            tile = linear_case(dt, "cuda-emu", 3, 5, 32 * 32 * 8, (1, 3), knobs=knobs)
            assert "bdot" in tile and "unroll=%s" % knobs[-2][-1] in tile, tile


def test_gemv_bdot_groups_vs_gguf():
    """the GPU gemv's groups of blocks (bdot_<type>_x<G>: a lane's G consecutive blocks in 16- or 8-byte loads) where
    the rows are whole groups: K of 37 groups of 8 blocks (lanes with one round more than others), split-K over 3
    slices (each slice's last round partial for some lanes), and the block form on the same K (knob
    gemv_bdot_groups=0); K of 7 blocks is not whole groups: the block form. Each against gguf-py."""
    for dt in TYPES + Q5_TYPES:
        for knobs in ((), ("gemv_split_k=3",), ("gemv_unroll=1",)):
            tile = linear_case(dt, "cuda-emu", 3, 9, 256 * 37, (1, 3), knobs=knobs)
            assert "bdot" in tile and "groups of" in tile and "-byte loads" in tile, tile
        tile = linear_case(dt, "cuda-emu", 3, 9, 256 * 37, (1, 3), knobs=("gemv_bdot_groups=0",))
        assert "a block each, bdot" in tile, tile
        tile = linear_case(dt, "cuda-emu", 3, 9, 32 * 7, (1, 3))
        assert "a block each, bdot" in tile, tile


def test_gemv_bdot_group_pairs():
    """a pair (silu(gate(x)) * up(x), the MLP's) of block-type weights through the GPU gemv's groups on cuda-emu
    (groups of at most 4 blocks: q4_0 takes its 8-byte form; the K-quants' halves of super-blocks; emit.c loads
    both rows before either's products) matches `llmcc run -c`'s double-precision reference of
    the blocks; the deliberate fault (debug_bdot_row=1) does not"""
    for dt in TYPES + Q5_TYPES + K_TYPES:
        expr = ("x = torch.randn(3, 1024); g = nn.Linear(1024, 40, bias=False, dtype=llmcc.%s); "
                "u = nn.Linear(1024, 40, bias=False, dtype=llmcc.%s); F.silu(g(x)) * u(x)" % (dt, dt))
        tile = run([LLMCC, "compile", "-c", expr, "--target", "cuda-emu", "--ir", "tile"]).stdout
        assert "two accumulators" in tile and ("halves of super-blocks" if dt in K_TYPES else "groups of") in tile, tile
        assert ("groups of 4 blocks in 8-byte loads" in tile) == (dt in ("q4_0", "q8_0", "q5_0")), tile
        p = run([LLMCC, "run", "-c", expr, "--target", "cuda-emu"])
        assert "matches the reference" in p.stdout, p.stdout
        p = run([LLMCC, "run", "-c", expr, "--target", "cuda-emu", "--knob", "debug_bdot_row=1"], check=False)
        assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, (dt, p.stdout, p.stderr)


def test_bdot_fault_knob():
    """debug_bdot_row=1 (each lane's block dot products read the next weight row) must fail on cuda-emu"""
    for dt in TYPES:
        for groups in (1, 0):
            tile = linear_case(dt, "cuda-emu", 4, 24, 32 * 40, (1, 3), fault=True,
                               knobs=("debug_bdot_row=1", "gemv_bdot_groups=%d" % groups))
            assert "bdot" in tile and ("groups of" in tile) == bool(groups), tile
    for dt in K_TYPES:
        tile = linear_case(dt, "cuda-emu", 4, 24, 256 * 5, (1, 3), fault=True, knobs=("debug_bdot_row=1",))
        assert "halves of super-blocks" in tile, tile


def test_run_c_dump_vs_gguf():
    """`llmcc run -c` quantizes its random weights as llama.cpp does (the K-quants, Q5_0 and Q5_1: random blocks);
    gguf-py dequantizes what it dumped"""
    quants, T = gguf_or_skip()
    for dt in TYPES + Q5_TYPES + K_TYPES:
        for target in ("cpu", "cuda-emu"):
            d = tmpdir(os.path.join("quant_dump", dt + "_" + target))
            K = 512 if dt in K_TYPES else 96
            expr = "x = torch.randn(3, %d); nn.Linear(%d, 21, dtype=llmcc.%s)(x)" % (K, K, dt)
            p = run([LLMCC, "run", "-c", expr, "--target", target, "--dump", d])
            assert "matches the reference" in p.stdout, p.stdout
            files = {f[:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".npy")}
            wname = [k for k in files if k.endswith("weight")]
            bname = [k for k in files if k.endswith("bias")]
            assert len(wname) == 1 and len(bname) == 1, sorted(files)
            blocks = files[wname[0]]
            assert blocks.dtype == np.uint8 and blocks.shape == (21, K // BLOCK[dt][0] * BLOCK[dt][1]), blocks.shape
            w = quants.dequantize(blocks, qtype(T, dt)).astype(np.float64)
            wabs = np.abs(w)
            if dt in ("q4_k", "q5_k"):   # the tolerance's magnitudes (the module's docstring)
                flipped = blocks.reshape(21, K // 256, -1).copy()
                flipped[..., 3] ^= 0x80
                wabs = quants.dequantize(flipped.reshape(21, -1), qtype(T, dt)).astype(np.float64)
            x = [v for k, v in files.items() if k not in (wname[0], bname[0], "output", "reference")]
            assert len(x) == 1, sorted(files)
            # the cpu target's 3 tokens take cpu_rows' dot products, their activations rounded to 8 bits
            xs = (q8_round(x[0]) if target == "cpu" else x[0]).astype(np.float64)
            ref = xs @ w.T + files[bname[0]].astype(np.float64)
            tol = (K + 2) * U * (np.abs(xs) @ wabs.T + np.abs(files[bname[0]])) + 1e-30
            check_close(files["output"].astype(np.float64), ref, tol, "run -c %s on %s" % (dt, target))
            if dt in K_TYPES + Q5_TYPES:
                # random blocks: the values within about nn.Linear's bound 1 / sqrt(K), and not all alike
                bound = 1 / np.sqrt(K)
                assert np.max(np.abs(w)) <= 2.5 * bound and np.std(w) > bound / 10, (dt, np.max(np.abs(w)), np.std(w))
                continue
            # the blocks are what llama.cpp's quantizer makes of some values: requantizing gguf-py's
            # dequantization of them gives them back (a fixed point of the reference quantizer)
            assert np.array_equal(quants.quantize(w.astype(np.float32), qtype(T, dt)), blocks), dt


def test_block_types_refused_where_they_do_not_apply():
    """block types are for nn.Linear's weights, with in_features whole blocks"""
    for expr, want in (("torch.randn(4, 32, dtype=llmcc.q4_0)", "only nn.Linear's dtype= takes it"),
                       ("nn.Linear(40, 8, dtype=llmcc.q8_0)(torch.randn(1, 40))", "need a multiple of 32"),
                       ("nn.Linear(288, 8, dtype=llmcc.q6_k)(torch.randn(1, 288))", "need a multiple of 256"),
                       ("nn.Linear(48, 8, dtype=llmcc.q5_1)(torch.randn(1, 48))", "need a multiple of 32"),
                       ("nn.RMSNorm(32, dtype=llmcc.q4_1)(torch.randn(1, 32))", "only nn.Linear's dtype= takes it")):
        p = run([LLMCC, "run", "-c", expr, "--target", "cpu"], check=False)
        assert p.returncode == 1 and want in p.stderr and len(p.stderr.strip().splitlines()) == 1, (expr, p.stderr)


def build_quant_against(model_dir, dt, out, model, prompt, n):
    """`llmcc build model_dir --quant dt` (28 linears quantized; model["q8_linears"]: with the default 8-bit
    activations at decode, else knob cpu_qdot_q8=0) against tests/ref_forward.py's model (its weights the reference's
    dequantized blocks): greedy ids equal, logits within 1e-4 x max |logit| (8-bit activations: see
    test_build_quant_matches_reference). Returns (the executable, its --stats)"""
    import ref_forward
    q8 = bool(model.get("q8_linears"))
    want_ids, want_logits = ref_forward.greedy(model, prompt, n)
    b = run([LLMCC, "build", model_dir, "-o", out, "--target", "cpu", "--name", "m", "--quant", dt,
             "--knob", "cpu_qdot_q8=%d" % q8])   # ggml's name (q4_0): the linears alone
    # what --quant did, said: every linear quantized (whole blocks), the embedding and lm_head kept
    assert "llmcc: --quant %s: 28 matrices quantized; the embedding and lm_head keep theirs (--quant-all)\n" % dt \
        in b.stderr, b.stderr
    run(["make", "-C", out, "-s", "-j2"])
    exe = os.path.join(out, "m")
    info = run([exe, "--info"]).stdout
    assert " %s (28 tensors," % dt in info and "block-type weights: dot products" in info, info
    assert ("8-bit activations" in info) == q8, info
    lp = os.path.join(out, "logits")
    p = run([exe, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n), "--temperature", "0",
             "--repeat-penalty", "1", "--ignore-eos", "--ids", "--logits", lp, "--stats"])
    assert [int(x) for x in p.stdout.split()] == list(want_ids), (dt, p.stdout, list(want_ids))
    got = np.fromfile(lp, dtype="<f4").reshape(n, -1)
    diffs = []
    for s in range(n):
        ref = np.asarray(want_logits[s], dtype=np.float64)
        diffs.append(float(np.max(np.abs(got[s] - ref))) / float(np.max(np.abs(ref))))
    print("    %s%s: logits / max|logit| differ by %s" % (dt, " (8-bit activations)" if q8 else "",
                                                      " ".join("%.0e" % d for d in diffs)))
    if q8:   # test_build_quant_matches_reference's docstring: most steps close, every step within 2e-2
        assert diffs[0] <= 1e-4 and float(np.median(diffs[1:])) <= 1e-4 and max(diffs) <= 2e-2, (dt, diffs)
    else:
        assert max(diffs) <= 1e-4, (dt, diffs)
    return exe, p.stderr


def test_build_quant_matches_reference():
    """`llmcc build --quant TYPE` of models/austen-2m: its linears quantized as the payload is written. The
    reference: tests/ref_forward.py with every linear's weight quantized and dequantized by gguf-py (the
    embedding, also the tied lm_head, stays bf16: --quant keeps it without --quant-all; the lm_head's input
    rounded to bf16, as its bf16 dot products take it: ref_forward's bf16_lm_head), and the decode steps'
    linear inputs rounded to 8 bits (ref_forward's q8_linears; also once with knob cpu_qdot_q8=0: f32 inputs);
    greedy ids equal, logits within 1e-4 x max |logit|; the payload holds the blocks (--info).

    With 8-bit activations, an input that lies within f32 summation error of a rounding boundary (the reference
    sums in another order) can round to the neighbouring integer: that element moves by a whole step max|x| / 127,
    and the logits by up to about 1% of their range at that step and sometimes the next few (measured: every step
    within 1e-6 x max but such steps, 2e-4 to 9e-3 there). Which steps flip depends on the instruction set the
    kernels are compiled for: built for x86-64-v4 alone, q4_1 flipped at the first decode step (1.6e-4), which the
    target_clones build on the same CPU did not. So there: the prompt's step (f32 activations) and the median
    decode step within 1e-4 x max, which a systematic error (a wrong scale, a wrong block, a wrong rounding) moves
    at every step, and every step within 2e-2 x max."""
    quants, T = gguf_or_skip()
    import ref_forward
    from testlib import ROOT
    model_dir = os.path.join(ROOT, "models", "austen-2m")
    prompt = [1, 79, 95, 11, 230, 308, 12]
    n = 16
    for dt, q8 in [(t, 1) for t in TYPES + Q5_TYPES] + [("q4_1", 0)]:
        model = ref_forward.load(model_dir)
        model["q8_linears"] = bool(q8)
        model["bf16_lm_head"] = True   # the tied embedding stays bf16: the lm_head takes bf16 dot products
        for lay in model["layers"]:
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
                w = np.asarray(lay[proj], dtype=np.float32)
                lay[proj] = quants.dequantize(quants.quantize(w, qtype(T, dt)), qtype(T, dt)).astype(np.float32)
        exe, stats = build_quant_against(model_dir, dt, os.path.join(tmpdir("quant_build"), "%s_q8_%d" % (dt, q8)),
                                         model, prompt, n)
        # --stats: the weight bytes a decode step reads, from the config: the tied bf16 embedding whole (it is
        # the lm_head), the bf16 norms, the linears' blocks
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        H, I, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
        kv = cfg["num_key_value_heads"] * cfg["head_dim"]
        rows_k = [(H, H), (kv, H), (kv, H), (H, H), (I, H), (I, H), (H, I)]   # q k v o gate up down
        vals, nb = BLOCK[dt]
        want_bytes = V * H * 2 + (2 * L + 1) * H * 2 + L * sum(r * k // vals * nb for r, k in rows_k)
        m = re.search(r"decode reads: ([0-9.]+) MB of weights a token", stats)
        assert m and abs(float(m.group(1)) - want_bytes / 1e6) <= 0.05, (stats, want_bytes)
    for bad in ("q2_k", "q4_k_l"):
        p = run([LLMCC, "build", model_dir, "-o", os.path.join(tmpdir("quant_build"), "bad"), "--quant", bad],
                check=False)
        assert p.returncode == 1 and "is not a block type llmcc quantizes into" in p.stderr, p.stderr


# ---- --quant q4_k / q6_k: llama.cpp's llama-quantize is the reference (gguf-py has no K-quant quantizer) ----

QUANTIZED = ("q4_k", "q6_k")   # the K-quants these tests build alone (q5_k: test_quant_mixes_are_llama_quantizes)


def llama_quantize_or_skip():
    """llama.cpp's llama-quantize (../shared/tools/peer-llamacpp's build), or Skip"""
    import test_gguf_model as gm
    gm.need_gguf()
    p = run([gm.PEER, "--convert"], check=False) if os.access(gm.PEER, os.X_OK) else None
    tool = p and p.returncode == 0 and os.path.join(os.path.dirname(p.stdout.strip()), "build", "bin",
                                                     "llama-quantize")
    if not tool or not os.access(tool, os.X_OK):
        raise Skip("llama.cpp's llama-quantize is not built (../shared/tools/peer-llamacpp)")
    return tool


def llama_quantized(tool, src, dt):
    """src (an f32 GGUF file) quantized by llama-quantize --pure into dt: every matrix of whole super-blocks,
    with no importance matrix, so by ggml's quantize_row_q4_K_ref / quantize_row_q6_K_ref"""
    out = "%s-%s.gguf" % (src[:-5], dt)
    run([tool, "--pure", src, out, dt.upper()], env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(tool)))
    return out


def payload_tensors(path):
    """payload.bin's tensors (runtime/payload.h): name -> (PDT_* dtype, bytes)"""
    buf = open(path, "rb").read()
    n, table = int.from_bytes(buf[12:16], "little"), int.from_bytes(buf[16:24], "little")
    out = {}
    for i in range(n):
        e = buf[table + 168 * i:table + 168 * (i + 1)]
        off, nbytes = int.from_bytes(e[152:160], "little"), int.from_bytes(e[160:168], "little")
        out[e[:112].split(b"\0")[0].decode()] = (int.from_bytes(e[112:116], "little"), buf[off:off + nbytes])
    return out


def gguf_matrices_in_hf_order(path, cfg):
    """a GGUF file's matrices by Hugging Face name, raw rows [rows, bytes per row], llama's attn_q / attn_k rows
    back in Hugging Face's order (the converter permuted them for ggml's RoPE; rows are whole blocks)"""
    import test_gguf_model as gm
    from gguf import GGUFReader
    layer = {g: h for h, g in gm.LAYER_TENSORS}
    heads = {"attn_q": cfg["num_attention_heads"], "attn_k": cfg["num_key_value_heads"]}
    out = {}
    for t in GGUFReader(path).tensors:
        if len(t.shape) != 2:
            continue
        rows = np.array(t.data).reshape(int(t.shape[1]), -1)
        part = t.name.split(".")
        if part[0] != "blk":
            out[{"output": "lm_head.weight", "token_embd": "model.embed_tokens.weight"}[part[0]]] = (t, rows)
            continue
        if part[2] in heads:
            hf_rows = np.empty_like(rows)
            hf_rows[gm.permute(np.arange(len(rows)).reshape(-1, 1), heads[part[2]])[:, 0]] = rows
            rows = hf_rows
        out["model.layers.%s.%s.weight" % (part[1], layer[part[2]])] = (t, rows)
    return out


def edge_rows(rng):
    """rows of 256 values for the quantizers' corners: all zero, constant (positive: the minimum clamped to 0;
    negative: max == min), all positive, all negative, one zero sub-block among others (its scale 0: the fit's
    codes stay), tiny values (below ggml's GROUP_MAX_EPS; d underflows f16), large ones, small integers (ties of
    the rounding), sub-blocks of very different magnitudes (scales rounding to 0 or 1 of 63), an outlier"""
    x = rng.standard_normal((12, 256)).astype(np.float32)
    x[0] = 0
    x[1] = 0.5
    x[2] = -0.3
    x[3] = np.abs(x[3])
    x[4] = -np.abs(x[4])
    x[5, 64:96] = 0
    x[6] *= 1e-20
    x[7] *= 3e3
    x[8] = rng.integers(-8, 8, 256)
    x[9] *= np.repeat(10.0 ** rng.uniform(-6, 0, 16), 16)
    x[10, 17] = 40
    x[11] = rng.uniform(0, 1, 256) ** 4 - 0.02
    return x


_k_builds = {}   # dt -> (the edge-case GGUF, its config, llmcc's payload tensors), built once per run


def k_quant_build(dt):
    """the llama-k fixture (rows of whole super-blocks) as an f32 GGUF written by gguf-py, blk.1.ffn_up's first
    rows replaced by edge_rows, built by llmcc with --quant dt --quant-all (every matrix: attn_q / attn_k through
    the un-permutation, as the packer quantizes rows in their new order)"""
    if dt not in _k_builds:
        import json
        import test_gguf_model as gm
        from gguf import GGUFReader
        gm.need_gguf()
        cfg = json.load(open(os.path.join(gm.fixture("llama-k"), "config.json")))
        plain = gm.gguf_of("llama-k", writer="gguf-py")
        up = [np.array(t.data) for t in GGUFReader(plain).tensors if t.name == "blk.1.ffn_up.weight"][0].copy()
        up[:12] = edge_rows(np.random.default_rng(18))
        src = gm.rewrite(plain, os.path.join(tmpdir("quant_k"), "llama-k-edges.gguf"),
                         tensors=[("blk.1.ffn_up.weight", up, None)])
        out = os.path.join(tmpdir("quant_k"), "build-" + dt)
        run([LLMCC, "build", src, "-o", out, "--target", "cpu", "--name", "m", "--quant", dt, "--quant-all"])
        _k_builds[dt] = (src, cfg, payload_tensors(os.path.join(out, "payload.bin")))
    return _k_builds[dt]


def assert_blocks_equal(dt, name, got, want, by):
    """llmcc's payload tensor got (PDT_* dtype, bytes) holds want's super-blocks (uint8 [rows, bytes per row])"""
    pdt, blob = got
    assert pdt == {"q4_k": 7, "q6_k": 9}[dt], (dt, name, pdt)
    mine = np.frombuffer(blob, np.uint8).reshape(want.shape[0], -1, BLOCK[dt][1])
    differ = np.flatnonzero(np.any(mine != want.reshape(mine.shape), axis=2))
    assert differ.size == 0, "%s %s: %d of %d super-blocks differ from %s's, the first %s" % (
        dt, name, differ.size, mine.shape[0] * mine.shape[1], by, np.unravel_index(differ[0], mine.shape[:2]))


def test_build_k_quant_blocks_equal_numpy_port():
    """`llmcc build F32.gguf --quant q4_k|q6_k --quant-all` writes, for every matrix, the super-blocks of
    tests/ggml_kquants.py (a numpy port of ggml's quantize_row_q4_K_ref / quantize_row_q6_K_ref; needs no
    llama.cpp), byte for byte, the edge rows included"""
    import ggml_kquants
    for dt in QUANTIZED:
        src, cfg, got = k_quant_build(dt)
        values = gguf_matrices_in_hf_order(src, cfg)
        assert len(values) == 2 + 7 * cfg["num_hidden_layers"], sorted(values)
        port = {"q4_k": ggml_kquants.quantize_q4_k, "q6_k": ggml_kquants.quantize_q6_k}[dt]
        for name, (t, rows) in values.items():
            assert t.tensor_type.name == "F32", (t.name, t.tensor_type.name)
            assert_blocks_equal(dt, name, got[name], port(rows).reshape(len(rows), -1), "the numpy port")


def test_numpy_port_equals_ggml():
    """tests/ggml_kquants.py against ggml's own quantize_row_q4_K_ref / quantize_row_q6_K_ref (llama.cpp's
    libggml-base.so, through ctypes) on 6 x 2000 super-blocks: normal, small integers (ties of the rounding),
    one-signed and skewed, heavy-tailed, sub-blocks of magnitudes 1e-8 to 1e4, values of few levels; and the
    edge rows. Byte for byte."""
    import ctypes
    import ggml_kquants
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_quantize_or_skip()), "libggml-base.so"))
    rng = np.random.default_rng(7)
    n = 2000
    cases = [rng.standard_normal((n, 256)), rng.integers(-8, 8, (n, 256)) * 0.25, rng.uniform(0, 1, (n, 256)) ** 6,
             rng.standard_t(2, (n, 256)), rng.standard_normal((n, 256)) * np.repeat(10.0 ** rng.uniform(-8, 4, (n, 16)),
                                                                                     16, axis=1),
             rng.integers(0, 3, (n, 256)) * rng.standard_normal((n, 1)), edge_rows(rng)]
    for x in cases:
        x = np.ascontiguousarray(x, dtype=np.float32)
        for dt, port, ref in (("q4_k", ggml_kquants.quantize_q4_k, lib.quantize_row_q4_K_ref),
                              ("q6_k", ggml_kquants.quantize_q6_k, lib.quantize_row_q6_K_ref)):
            want = np.zeros((len(x), BLOCK[dt][1]), np.uint8)
            ref(x.ctypes.data_as(ctypes.c_void_p), want.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
            differ = np.flatnonzero(np.any(port(x) != want, axis=1))
            assert differ.size == 0, "%s: %d of %d blocks differ from ggml's, the first %d" % (
                dt, differ.size, len(x), differ[0])


def test_build_k_quant_blocks_equal_llama_quantize():
    """the same builds against llama.cpp's llama-quantize --pure on the same f32 file (ggml's reference quantizers,
    run by llama.cpp itself), byte for byte"""
    tool = llama_quantize_or_skip()
    for dt in QUANTIZED:
        src, cfg, got = k_quant_build(dt)
        want = gguf_matrices_in_hf_order(llama_quantized(tool, src, dt), cfg)
        assert len(want) == 2 + 7 * cfg["num_hidden_layers"], sorted(want)
        for name, (t, rows) in want.items():
            assert t.tensor_type.name == dt.upper(), (dt, t.name, t.tensor_type.name)
            assert_blocks_equal(dt, name, got[name], rows, "llama-quantize")


def test_build_k_quant_matches_reference():
    """`llmcc build --quant q4_k|q6_k` of the llama-k fixture's Hugging Face directory (safetensors, f32): the
    reference is tests/ref_forward.py with every linear's weight replaced by gguf-py's dequantization of
    llama-quantize's blocks of it (where llama.cpp is not built, tests/ggml_kquants.py's); the embedding and
    lm_head stay f32 without --quant-all. Greedy ids equal, logits within 1e-4 x max |logit|"""
    import json
    import ggml_kquants
    import ref_forward
    import test_gguf_model as gm
    quants, T = gguf_or_skip()
    try:
        tool = llama_quantize_or_skip()
    except Skip:
        tool = None
    model_dir = gm.fixture("llama-k")
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    for dt in QUANTIZED:
        model = ref_forward.load(model_dir)
        model["q8_linears"] = True   # the default 8-bit activations at decode (test_build_quant_matches_reference)
        blocks = tool and gguf_matrices_in_hf_order(llama_quantized(tool, gm.gguf_of("llama-k", writer="gguf-py"), dt),
                                                    cfg)
        port = {"q4_k": ggml_kquants.quantize_q4_k, "q6_k": ggml_kquants.quantize_q6_k}[dt]
        for i, lay in enumerate(model["layers"]):
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
                kind = "mlp" if proj in ("gate_proj", "up_proj", "down_proj") else "self_attn"
                w = np.asarray(lay[proj], dtype=np.float32)
                rows = blocks["model.layers.%d.%s.%s.weight" % (i, kind, proj)][1] if tool else \
                    port(w).reshape(len(w), -1)
                lay[proj] = quants.dequantize(rows, qtype(T, dt)).astype(np.float32)
                assert lay[proj].shape == w.shape, (proj, lay[proj].shape)
        build_quant_against(model_dir, dt, os.path.join(tmpdir("quant_k"), "e2e-" + dt), model, [1, 4, 7, 10, 13],
                            16)


def test_build_k_quant_keeps_rows_of_partial_super_blocks():
    """--quant q4_k of models/austen-2m (hidden 192, intermediate 512): only down_proj's rows are whole
    super-blocks; the other linears keep bf16, as --quant q8_0 keeps rows that are not whole blocks of 32"""
    from testlib import ROOT
    out = os.path.join(tmpdir("quant_k"), "austen-q4_k")
    run([LLMCC, "build", os.path.join(ROOT, "models", "austen-2m"), "-o", out, "--target", "cpu", "--quant", "q4_k"])
    dtypes = {n: dt for n, (dt, _) in payload_tensors(os.path.join(out, "payload.bin")).items() if "proj" in n}
    assert len(dtypes) == 28 and all(dt == (7 if "down_proj" in n else 2) for n, dt in dtypes.items()), dtypes


def test_quant_says_what_it_left():
    """--quant with ggml's block type (any case but llama-quantize's own spelling: q4_k, q4_K) says how many matrices
    it quantized and why the rest keep their dtype (rows that are not whole blocks), never leaving one out without a
    word; --quant-all goes with a block type alone"""
    from testlib import model_fixture
    d = model_fixture("llama-gqa", "f32", seed=0)
    out = os.path.join(tmpdir("quant_says"), "p")
    p = run([LLMCC, "build", d, "-o", out, "--target", "cpu", "--quant", "q4_K"])
    assert "llmcc: --quant q4_k: 0 matrices quantized; 14 keep their dtype (their rows, as " in p.stderr and \
        "values, are not whole blocks of 256); the embedding and lm_head keep theirs (--quant-all)" in p.stderr, p.stderr
    p = run([LLMCC, "build", d, "-o", out, "--target", "cpu", "--quant", "q8_0", "--quant-all"])
    assert "llmcc: --quant q8_0: 14 matrices quantized; 2 keep their dtype (their rows, as 172 values, are not " \
        "whole blocks of 32)\n" in p.stderr, p.stderr
    for bad in (["--quant", "Q8_0", "--quant-all"], ["--quant-all"]):
        p = run([LLMCC, "build", d, "-o", out, "--target", "cpu"] + bad, check=False)
        assert p.returncode == 1 and p.stderr.startswith("llmcc: --quant-all: goes with a block type in lower case"), \
            (bad, p.stderr)


def test_q5_blocks_equal_gguf_py():
    """--quant q5_0 / q5_1 (ggml's reference quantizers, also --quant Q4_K_M's fallback for rows that are not whole
    super-blocks): the payload's blocks byte for byte gguf-py's quantization of the same f32 weights"""
    quants, T = gguf_or_skip()
    import ref_forward
    from testlib import ROOT
    model_dir = os.path.join(ROOT, "models", "austen-2m")
    model = ref_forward.load(model_dir)
    for dt in Q5_TYPES:
        out = os.path.join(tmpdir("quant_q5"), dt)
        run([LLMCC, "build", model_dir, "-o", out, "--target", "cpu", "--quant", dt])
        got = payload_tensors(os.path.join(out, "payload.bin"))
        for i, lay in enumerate(model["layers"]):
            for proj in ("q_proj", "down_proj"):
                kind = "mlp" if proj == "down_proj" else "self_attn"
                w = np.asarray(lay[proj], dtype=np.float32)
                want = np.ascontiguousarray(quants.quantize(w, qtype(T, dt))).view(np.uint8).tobytes()
                pdt, blocks = got["model.layers.%d.%s.%s.weight" % (i, kind, proj)]
                assert blocks == want, (dt, i, proj)


PDT_NAMES = ["f32", "f16", "bf16", "i32", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k", "q5_0", "q5_1"]   # dtypes.h


def test_quant_mixes_are_llama_quantizes():
    """--quant with llama-quantize's names (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K, Q4_K_S, Q4_K_M, Q5_K_M; Q4_K its alias
    of Q4_K_M): each matrix in the type llama-quantize's mix of that name gives it (the base type; q6_k for the output
    matrix, Q8_0 keeping q8_0; more bits for v_proj / down_proj in some layers of the K mixes; q5_0 / q5_1 / q8_0 /
    f16 where rows are not whole blocks), on a fixture of whole super-blocks (llama-k) and one of rows of 64 and 172
    (llama-gqa), and the blocks byte for byte llama-quantize's; the summary line counts them"""
    import json
    import test_gguf_model as gm
    tool = llama_quantize_or_skip()
    plain = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q6_K")
    k_mixes = ("Q4_K_S", "Q4_K_M", "Q5_K_M")
    for kind, mix in [(k, m) for k in ("llama-k", "llama-gqa") for m in k_mixes + plain]:
        cfg = json.load(open(os.path.join(gm.fixture(kind), "config.json")))
        src = gm.gguf_of(kind, writer="gguf-py")
        mixed = "%s-%s.gguf" % (src[:-5], mix)
        run([tool, src, mixed, mix], env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(tool)))
        want = gguf_matrices_in_hf_order(mixed, cfg)
        out = os.path.join(tmpdir("quant_k_m"), kind + "-" + mix)
        # the K mixes' names in any case; the plain ones as llama-quantize writes them (q4_0 is ggml's block type)
        name = mix.lower() if mix in k_mixes else "Q4_K" if mix == "Q4_K_M" else mix
        b = run([LLMCC, "build", src, "-o", out, "--target", "cpu", "--name", "m", "--quant", name])
        got = payload_tensors(os.path.join(out, "payload.bin"))
        types = {}
        for tname, (t, rows) in want.items():
            dt = t.tensor_type.name.lower()
            types[dt] = types.get(dt, 0) + 1
            pdt, blocks = got[tname]
            assert PDT_NAMES[pdt] == dt, (kind, mix, tname, PDT_NAMES[pdt], dt)
            mine = np.frombuffer(blocks, np.uint8).reshape(len(rows), -1)
            assert mine.shape == rows.view(np.uint8).reshape(len(rows), -1).shape and \
                np.array_equal(mine, rows.view(np.uint8).reshape(len(rows), -1)), (kind, mix, tname, dt)
        said = "llmcc: --quant %s: " % mix + ", ".join("%d %s" % (types[d], d) for d in PDT_NAMES if d in types)
        assert said + " (llama-quantize's mix)" in b.stderr, (b.stderr, types)
        # the mix's each way: llama-k's rows are whole super-blocks (the base type and a larger one), llama-gqa's are
        # not (64 and 172 values: the fallbacks); a plain type's output matrix is not in the base type (but Q8_0's
        # and Q6_K's)
        base = mix[:4].lower() if mix in k_mixes else mix.lower()
        if mix in k_mixes:
            assert (base in types and len(types) >= 2) if kind == "llama-k" else "f16" in types and base not in types, \
                (kind, mix, types)
        elif kind == "llama-k":
            assert base in types and (len(types) >= 2) == (mix not in ("Q8_0", "Q6_K")), (kind, mix, types)
