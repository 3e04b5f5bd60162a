"""scripts/sass_report, the machine-code report (docs/machine-code-report.md): its SASS walk on
hand-written kernels whose loads are known, its integer expressions, and the report at the
Qwen2.5-7B shapes (../shared/assets/hf-configs), whose table is printed: the "before" table of
issue 16. No thresholds on today's kernels: `--check` is not asserted here.

References: kernels written here (4 independent 16-byte loads a loop trip, then their sum: 4
before the first use; a chain whose next address is the last value: 1; two 8-byte loads and no
loop: 2); the kernel IR's own listing and grid= expressions (evaluated by Python's integer
arithmetic); the parameter count of the config's architecture, counted here from config.json."""
import json
import os
import re
import runpy
import shutil
import types

from testlib import LLMCC, ROOT, Skip, run, shared, tmpdir

KERNELS_CU = r"""
// four independent 16-byte loads a trip, then their sum: 4 before the first use
__global__ void four_loads(const float4 *__restrict__ a, float *out, int trips) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.f;
#pragma unroll 1
    for (int t = 0; t < trips; t++) {
        const float4 *p = a + (size_t)t * 4096 + i;
        float4 x0 = p[0], x1 = p[1024], x2 = p[2048], x3 = p[3072];
        acc += (x0.x + x0.y + x0.z + x0.w) + (x1.x + x1.y + x1.z + x1.w)
             + (x2.x + x2.y + x2.z + x2.w) + (x3.x + x3.y + x3.z + x3.w);
    }
    out[i] = acc;
}

// a chain: each load's address is the last load's value: 1 before the first use
__global__ void chain(const int4 *__restrict__ a, int *out, int trips) {
    int j = blockIdx.x * blockDim.x + threadIdx.x, acc = 0;
#pragma unroll 1
    for (int t = 0; t < trips; t++) {
        int4 v = a[j];
        j = v.x & 4095;
        acc += v.y + v.z + v.w;
    }
    out[0] = acc + j;
}

// two streams, a weight-like and an activation-like pointer, two 16-byte loads each, then the dot product:
// 4 before the first use, two of them from each parameter
__global__ void two_streams(const float4 *__restrict__ w, const float4 *__restrict__ x, float *out, int trips) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.f;
#pragma unroll 1
    for (int t = 0; t < trips; t++) {
        float4 w0 = w[(size_t)t * 2048 + i], w1 = w[(size_t)t * 2048 + 1024 + i], x0 = x[2 * t], x1 = x[2 * t + 1];
        acc += w0.x * x0.x + w0.y * x0.y + w0.z * x0.z + w0.w * x0.w + w1.x * x1.x + w1.y * x1.y + w1.z * x1.z
             + w1.w * x1.w;
    }
    out[i] = acc;
}

// two 8-byte loads and a 2-byte one, no loop: 2 of the widest before the first use
__global__ void straight(const float2 *__restrict__ a, const unsigned short *__restrict__ h, float *out) {
    int i = threadIdx.x;
    float2 x = a[i], y = a[i + 256];
    out[i] = x.x * y.y + x.y * y.x + (float)h[i];
}

// three 4-byte loads, no loop of its own, then sinf of them (whose slow path reads its table in a loop, a
// 4-byte load of no parameter): the kernel's 3 before the first use, not the helper loop's 1
__global__ void straight_sinf(const float *__restrict__ a, float *out) {
    int i = threadIdx.x;
    float x = a[i], y = a[i + 256], z = a[i + 512];
    out[i] = sinf(x * y + z);
}
"""


def sass_report():
    """scripts/sass_report's functions and constants as attributes (the script has no .py suffix)"""
    return types.SimpleNamespace(**runpy.run_path(os.path.join(ROOT, "scripts", "sass_report"), run_name="sass_report"))


def tools(sr):
    nvcc, nvdisasm = sr.pr.find_nvcc(), sr.find_nvdisasm()
    if not nvcc:
        raise Skip("nvcc is not installed")
    if not nvdisasm:
        raise Skip("nvdisasm is not installed (make deps: pip install nvidia-cuda-nvdisasm)")
    return nvcc, nvdisasm


def test_eval_int():
    sr = sass_report()
    env = {"n": 5, "pos": 100}
    for text, want in (("n", 5), ("38016", 38016), ("(((n + 63) / 64) * 56)", 56),
                       ("((((n * 256) + 3) / 4) * 5)", 1600),
                       ("((n * 4) * min(66, (((pos + n) + 31) / 32)))", 80), ("max(n, 7) - 2 * 3", 1),
                       ("(n % 3)", 2), ("(0 - 7) / 2", -3)):
        assert sr.eval_int(text, env) == want, (text, sr.eval_int(text, env), want)
    for bad in ("n +", "foo(1)", "n ** 2", "m"):
        try:
            sr.eval_int(bad, env)
        except ValueError:
            continue
        raise AssertionError("accepted %r" % bad)


def test_check_rule():
    """--check: a kernel reading more than 10 MB a token fails below 32 KB in flight per SM, unless what is in flight
    reaches all that one of its launches reads per SM"""
    sr = sass_report()
    KB = 1024
    def row(flight, launch, moved=20e6):
        return {"kernel": "k", "bytes": moved, "in_flight_per_sm": flight, "weight_in_flight_per_sm": flight,
                "launch_bytes_per_sm": launch}
    for weights in (False, True):
        assert sr.check([row(40 * KB, 500 * KB)], weights) == []
        assert len(sr.check([row(20 * KB, 500 * KB)], weights)) == 1
        assert sr.check([row(9 * KB, 8.7 * KB)], weights) == []          # the whole launch in flight
        assert len(sr.check([row(8 * KB, 8.7 * KB)], weights)) == 1
        assert sr.check([row(1 * KB, 500 * KB, moved=9e6)], weights) == []   # under 10 MB a token


def test_sass_walk_ground_truth():
    sr = sass_report()
    nvcc, nvdisasm = tools(sr)
    cu = os.path.join(tmpdir("sass_report"), "known.cu")
    with open(cu, "w") as f:
        f.write(KERNELS_CU)
    rows = {r["kernel"]: r for r in sr.cu_rows(nvcc, nvdisasm, cu, "sm_90")}
    # (loads by kind, the widest's bytes, loads before the first use, the parameter each of those reads)
    want = {"four_loads": ({"128": 4}, 16, 4, [[0]] * 4), "chain": ({"128": 1}, 16, 1, [[0]]),
            "two_streams": ({"128": 4}, 16, 4, [[0], [0], [1], [1]]),
            "straight": ({"64": 2, "u16": 1}, 8, 2, [[0], [0]]),
            "straight_sinf": ({"32": 4}, 4, 3, [[0], [0], [0]])}
    assert set(rows) == set(want), rows
    for k, (counts, w, before, params) in want.items():
        r = rows[k]
        assert (r["loads"], r["width"], r["before_use"], sorted(r["params"])) == (counts, w, before, params), (k, r)
        assert r["regs"] > 0 and r["spill"] == 0, r
    # the command line on a .cu: the SASS columns
    p = run(["python3", os.path.join(ROOT, "scripts", "sass_report"), cu])
    line = [l for l in p.stdout.splitlines() if l.startswith("four_loads")]
    assert line and line[0].split()[-1] == "4x16", p.stdout


def qwen_dir():
    cfgs = shared("hf-configs")
    d = os.path.join(tmpdir("sass_report"), "Qwen2.5-7B")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(cfgs, "Qwen2.5-7B.config.json"), os.path.join(d, "config.json"))
    return d


def weight_bytes(cfg):
    """bytes a token reads at n = 1, pos = 0: every weight but the embedding table (one row of it), and
    one K row and one V row of each layer's bf16 KV cache (the GPU's default)"""
    h, f, v, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    hd = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    layer = h * h * 2 + h * kv * 2 + 3 * h * f + 2 * h      # q, o; k, v; gate, up, down; the two norms
    layer += h + 2 * kv                                       # Qwen2's q, k, v biases
    params = L * layer + h + h + (0 if cfg.get("tie_word_embeddings") else v * h)   # final norm; embed row; lm_head
    return 2 * params + L * 2 * kv * 2                        # bf16 weights; bf16 K and V rows


def test_report_qwen25_7b():
    sr = sass_report()
    nvcc, nvdisasm = tools(sr)
    d = qwen_dir()
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["torch_dtype"] == "bfloat16", cfg["torch_dtype"]
    rows, totals = sr.model_rows(d, [], nvcc, nvdisasm, "sm_90", 0)
    print(sr.format_rows(rows, totals))
    kir = run([LLMCC, "compile", d, "--ir", "kernel"]).stdout
    grids = dict(re.findall(r"^kernel (\w+)  #.*\n  \w+ block=\d+ grid=(.*)$", kir, re.M))
    assert [r["kernel"] for r in rows] == re.findall(r"^kernel (\w+)", kir, re.M)
    assert len(grids) == len(rows) >= 20, (len(grids), len(rows))
    mb = totals["max_batch"]
    assert mb == 64, mb
    for r in rows:
        k = r["kernel"]
        g = grids[k].replace("/", "//")
        assert r["grid1"] == eval(g, {"min": min, "max": max}, {"n": 1, "pos": 0}), (k, r["grid1"], grids[k])
        assert r["grid_max"] == eval(g, {"min": min, "max": max}, {"n": mb, "pos": 0}), (k, r["grid_max"], grids[k])
        assert r["regs"] > 0 and r["threads"] in (32, 64, 96, 128, 160, 192, 224, 256, 448, 512, 1024), r
        assert 1 <= r["blocks_per_sm"] <= sr.BLOCKS_PER_SM, r
        assert r["width"] in (1, 2, 4, 8, 16) and r["before_use"] >= 1, r    # every kernel reads global memory
        # the prompt's tensor-core kernels and full flash attention do not run at n = 1; their gemv and
        # flash_decode alternatives do, once per layer
        assert (r["launches"] == 0) == (k.endswith("_tc") or k.endswith("_flash")), r
        # the decode projections (gemv): their loads before the first use include the weights'
        if r["launches"] and r["sched"] == "gemv":
            assert 1 <= r["weight_loads"] <= r["before_use"], r
            assert r["weight_in_flight_per_sm"] <= r["in_flight_per_sm"], r
    by = {r["kernel"]: r for r in rows}
    assert by["k_self_attn_o_proj"]["launches"] == cfg["num_hidden_layers"]
    # the executable's launches per token (--info, --stats: model_info.decode_launches) against the report's at n = 1
    cu = run([LLMCC, "compile", d, "--ir", "cuda"]).stdout
    info = cu[cu.index("const ModelInfo model_info = {"):]
    # a one-token forward call's launches (the decode step's CUDA Graph holds them): 12 a layer, the embedding's
    # gather and the tail's 3; the report's n = 1 column also counts the sampler's two (model_topk: k_top_k_chunks,
    # k_top_k)
    forward = sum(r["launches"] for r in rows if not r["kernel"].startswith("k_top_k"))
    launches = int(re.search(r"(\d+),\s*\"(?:f32|bf16)\",", info[:info.index("};")]).group(1))   # decode_launches
    assert launches == forward == 12 * 28 + 1 + 3, info[-200:]
    assert sum(r["launches"] for r in rows) == forward + 2
    assert by["k_lm_head"]["grid1"] == cfg["vocab_size"] // 4
    # the weights the listing says a token reads, against the parameter count from config.json
    assert totals["bytes"] == weight_bytes(cfg), (totals["bytes"], weight_bytes(cfg))
    assert abs(totals["bandwidth_seconds"] - totals["bytes"] / sr.HBM_BYTES_PER_S) < 1e-12
    assert totals["seconds"] >= totals["bandwidth_seconds"]
    # the gemv kernels stream 16-byte loads
    assert by["k_mlp_gate_proj_up_proj"]["width"] == 16, by["k_mlp_gate_proj_up_proj"]
    assert totals["weight_seconds"] >= totals["seconds"]
    # every kernel reading more than 10 MB a token keeps 32 KB in flight per SM (or all a launch reads per SM):
    # the gemv's unrolled rounds whole in flight (emit.c emit_vload_run), flash_decode's copies; counting only the
    # weights' loads, k and v (102.8 MB, 27.2 KB a launch per SM) keep less (printed, not asserted)
    assert sr.check(rows) == [], [r["kernel"] for r in sr.check(rows)]
    failing = sr.check(rows, True)
    assert {r["kernel"] for r in failing} <= {"k_self_attn_k_proj_rotary_k", "k_self_attn_v_proj"}, failing
    print("--check --weights: %s" % (", ".join("%s %.1f KB/SM" % (r["kernel"], r["weight_in_flight_per_sm"] / 1024)
                                                for r in failing) or "passes"))


def test_report_qwen25_7b_decode_attention_at_1024():
    """Qwen2.5-7B at context 1024, with the KV cache f32 and bf16 (the default): flash_decode stages its K/V
    tiles by 16-byte cp.async copies, every copy of a thread issued before the wait (scalar loads each followed by
    its store kept 0.9 KB in flight per SM: 696 us a token for 118 MB), so it keeps all a launch reads per SM in
    flight and passes --check; f32: at the bandwidth (117.6 MB a token); bf16: half the bytes, bf16 tiles, each
    launch (2.1 MB) within one memory latency; and the kernels' bounds sum to within 1.15x of the bandwidth bound,
    counting every load or only the weights' and the KV cache's (issue 16; before: 3706 and 4702 us against 2971,
    1.25x and 1.58x)"""
    sr = sass_report()
    nvcc, nvdisasm = tools(sr)
    fds = {}
    for kv in ("f32", "bf16"):
        rows, totals = sr.model_rows(qwen_dir(), ["--kv-dtype", kv], nvcc, nvdisasm, "sm_90", 1024)
        print(sr.format_rows(rows, totals))
        fd = fds[kv] = {r["kernel"]: r for r in rows}["k_self_attn_attention_flash_decode"]
        assert fd["width"] == 16 and any(k.startswith("cp128") for k in fd["loads"]), fd
        assert fd["bytes"] > sr.CHECK_BYTES and fd["in_flight_per_sm"] >= fd["launch_bytes_per_sm"], fd
        assert fd not in sr.check(rows), fd
        if kv == "f32":
            assert fd["seconds"] <= 1.05 * fd["bytes"] / sr.HBM_BYTES_PER_S, fd
        else:
            assert fd["seconds"] <= 1.05 * fd["launches"] * sr.DRAM_LATENCY_S, fd
        assert totals["seconds"] <= 1.15 * totals["bandwidth_seconds"], totals
        assert totals["weight_seconds"] <= 1.15 * totals["bandwidth_seconds"], totals
    assert fds["bf16"]["bytes"] * 2 == fds["f32"]["bytes"], (fds["bf16"]["bytes"], fds["f32"]["bytes"])
    assert fds["bf16"]["seconds"] < fds["f32"]["seconds"], fds


def test_report_llama31_8b_at_1024():
    """Llama-3.1-8B at context 1024 (no biases, 8 kv heads, group 4): --check passes, and the kernels' bounds sum
    to within 1.15x of the bandwidth bound counting only weight and KV-cache loads (before: 4043 us against 3183,
    the gemv rounds interleaved with their products)"""
    sr = sass_report()
    nvcc, nvdisasm = tools(sr)
    d = os.path.join(tmpdir("sass_report"), "Llama-3.1-8B")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(shared("hf-configs"), "Llama-3.1-8B.config.json"), os.path.join(d, "config.json"))
    rows, totals = sr.model_rows(d, [], nvcc, nvdisasm, "sm_90", 1024)
    print(sr.format_rows(rows, totals))
    assert sr.check(rows) == [], [r["kernel"] for r in sr.check(rows)]
    assert totals["weight_seconds"] <= 1.15 * totals["bandwidth_seconds"], totals


def test_report_qwen25_7b_quantized():
    """--quant q4_1 / q8_0 / q4_0 / q4_k / q6_k at Qwen2.5-7B shapes: the block type's bytes in the bytes a token
    reads, the quantized gemv kernels reading groups of whole blocks with 16- or 8-byte loads (bdot_<type>_x<G>) or
    halves of super-blocks (16-byte loads; q6_k's 210-byte super-blocks 4-byte words), no byte loads, every weight
    load of a lane's first round issued before the first product (q6_k: the activations' loads are as wide, and
    some come first), and every one of them passing --check --weights (32 KB of weights in flight per SM, or all
    of what a launch reads: k_proj, v_proj). Spills: none, but q6_k's RoPE pairs at 168 registers (printed)"""
    sr = sass_report()
    nvcc, nvdisasm = tools(sr)
    d = qwen_dir()
    cfg = json.load(open(os.path.join(d, "config.json")))
    h, f, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    for dt, block_bytes, block, widths in (("q4_1", 20, 32, (16,)), ("q8_0", 34, 32, (8,)), ("q4_0", 18, 32, (8, 16)),
                                           ("q4_k", 144, 256, (16,)), ("q6_k", 210, 256, (4,))):
        rows, totals = sr.model_rows(d, ["--quant", dt], nvcc, nvdisasm, "sm_90", 0)
        print(sr.format_rows(rows, totals))
        kir = run([LLMCC, "compile", d, "--quant", dt, "--ir", "kernel"]).stdout
        quantized = set(re.findall(r"^kernel (\w+)  #(?:(?!\nkernel ).)*?param p\d+: in %s\[" % dt, kir, re.M | re.S))
        by = {r["kernel"]: r for r in rows}
        gemv = [k for k in quantized if by[k]["sched"] == "gemv" and by[k]["launches"]]
        assert {"k_mlp_gate_proj_up_proj", "k_mlp_down_proj_residual", "k_self_attn_o_proj", "k_self_attn_v_proj"} <= set(gemv), gemv
        gate_up = by["k_mlp_gate_proj_up_proj"]
        assert gate_up["bytes"] == 2 * h * f * block_bytes // block * L, gate_up
        for k in gemv:
            r = by[k]
            assert r["width"] in widths and "u8" not in r["loads"], r
            assert r["spill"] == 0 or (dt == "q6_k" and "rotary" in k), r
            if r["spill"]:
                print("    %s %s: %d bytes spilled at %d registers" % (dt, k, r["spill"], r["regs"]))
            # the widest loads are the weights', all of a lane's first round before the first use (q6_k: a half
            # super-block's 29 words, with activation loads among them)
            if dt == "q6_k":
                assert r["weight_loads"] >= 29, r
            else:
                assert r["weight_loads"] == r["before_use"] >= 5, r
        failing = [r["kernel"] for r in sr.check(rows, True)]
        assert not [k for k in failing if k in gemv], (dt, failing)
        print("--check --weights (%s): the quantized gemv kernels pass; the kernels' bounds sum to %.1f us "
              "(bandwidth bound %.1f us)" % (dt, totals["weight_seconds"] * 1e6, totals["bandwidth_seconds"] * 1e6))
