"""The single-op front door: `llmcc compile -c EXPR`, `llmcc run -c EXPR`,
`llmcc compile MODEL --layer N` and `llmcc run MODEL --layer N`.

Every construct of the expression language runs through `llmcc run -c`,
which checks the compiled kernels against its own double-precision
evaluator of the graph (compiler/interp.c); independently, the test reads
the inputs, weights and output that `--dump` writes and recomputes the
result with numpy from the PyTorch definitions written out below (not from
the compiler). One decoder layer is checked the same way against the body
of tests/ref_forward.py's layer loop. Error cases must be one line naming
the column, exit 1."""
import glob
import os
import shutil
import subprocess

import numpy as np

import ref_forward
from testlib import LLMCC, ROOT, model_fixture, run, tmpdir


# ---- numpy references, from the PyTorch documentation's formulas ----
def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 if w is None else w)


def linear(x, w, b=None):
    return x @ w.T + (0.0 if b is None else b)


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sdpa(q, k, v, is_causal=False, scale=None):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if is_causal:  # torch: tril(ones(L, S)), query i sees keys j <= i
        L, S = s.shape[-2], s.shape[-1]
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    return softmax(s) @ v


F32_EPS, BF16_EPS, F16_EPS = float(np.finfo(np.float32).eps), 2.0 ** -7, 2.0 ** -10   # torch.finfo(dtype).eps

# (expression, numpy of the dumped leaves); together they use every construct of the language
CASES = [
    ("nn.SiLU()(nn.Linear(16, 12)(nn.RMSNorm(16)(torch.randn(2, 3, 16)))) * torch.ones(12) - torch.zeros(3, 12) / 2 + 0.5",
     lambda t: silu(linear(rmsnorm(t["input0"], t["rmsnorm0.weight"], F32_EPS), t["linear0.weight"], t["linear0.bias"]))
     * t["input1"] - t["input2"] / 2 + 0.5),
    ("F.softmax(torch.randn(2, 5, 33, dtype=torch.bfloat16), dim=-1) + torch.nn.Softmax(dim=-1)(torch.randn(5, 33, dtype=torch.float16))",
     lambda t: softmax(t["input0"]) + softmax(t["input1"])),
    ("F.silu(torch.matmul(torch.randn(2, 1, 5, 7), torch.randn(3, 7, 4))) @ torch.randn(4, 6)",
     lambda t: silu(t["input0"] @ t["input1"]) @ t["input2"]),
    ("F.scaled_dot_product_attention(torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 8), is_causal=True)",
     lambda t: sdpa(t["input0"], t["input1"], t["input2"], is_causal=True)),
    ("torch.nn.functional.scaled_dot_product_attention(torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(1, 7, 16), scale=0.3)",
     lambda t: sdpa(t["input0"], t["input1"], t["input2"], scale=0.3)),
    ("nn.RMSNorm(32)(torch.randn(4, 32, dtype=torch.bfloat16)) - nn.Linear(32, 32, bias=False)(-torch.randn(4, 32)) / torch.randn(4, 1)",
     lambda t: rmsnorm(t["input0"], t["rmsnorm0.weight"], BF16_EPS) - linear(-t["input1"], t["linear0.weight"]) / t["input2"]),
    ("nn.RMSNorm(24, eps=1e-5, elementwise_affine=False)(torch.randn(3, 24, dtype=torch.float16))",
     lambda t: rmsnorm(t["input0"], None, 1e-5)),
    # variables: one input read by two linears (loop_fuse_epilogues makes them a pair), a module bound once and called twice
    ("x = torch.randn(3, 40); up = nn.Linear(40, 24, bias=False); F.silu(nn.Linear(40, 24)(x)) * up(x) + up(x)",
     lambda t: silu(linear(t["input0"], t["linear0.weight"], t["linear0.bias"])) * linear(t["input0"], t["linear1.weight"])
     + linear(t["input0"], t["linear1.weight"])),
    ("n = nn.RMSNorm(8); n(n(torch.randn(2, 8)) * 3)", lambda t: rmsnorm(rmsnorm(t["input0"], t["rmsnorm0.weight"], F32_EPS) * 3, t["rmsnorm0.weight"], F32_EPS)),
]


def dump_run(expr, name, extra=()):
    d = os.path.join(tmpdir("torch_expr"), name)
    shutil.rmtree(d, ignore_errors=True)
    p = run([LLMCC, "run", "-c", expr, "--dump", d] + list(extra), check=False)
    leaves = {os.path.basename(f)[:-4]: np.load(f).astype(np.float64) for f in glob.glob(os.path.join(d, "*.npy"))}
    return p, leaves


def test_every_construct_matches_both_references():
    for i, (expr, ref) in enumerate(CASES):
        p, t = dump_run(expr, "case%d" % i)
        assert p.returncode == 0, "%s: rc %d\n%s%s" % (expr, p.returncode, p.stdout, p.stderr)
        assert "matches the reference" in p.stdout, p.stdout
        assert "target: cpu" in p.stdout or "target: cuda" in p.stdout, p.stdout
        out = t.pop("output")
        t.pop("reference")
        want = ref(t)
        assert out.shape == want.shape, "%s: shape %s, numpy %s" % (expr, out.shape, want.shape)
        # f32 kernels against float64 numpy: the bound llmcc run itself uses
        tol = 1e-4 * np.abs(want) + 1e-5 * np.abs(want).max()
        bad = np.abs(out - want) > tol
        assert not bad.any(), "%s: %d values differ from numpy, first at %s: %r vs %r" % (
            expr, bad.sum(), np.argwhere(bad)[0], out[bad][0], want[bad][0])


def test_leaf_dtypes_and_seeds():
    expr = "F.silu(torch.randn(64, dtype=torch.bfloat16) + torch.randn(64, dtype=torch.float16))"
    p, a = dump_run(expr, "seed1", ["--seed", "1"])
    assert p.returncode == 0, p.stderr
    # the values are what the dtypes can hold: bf16 = f32 with the low 16 bits zero; f16 round-trips
    assert not (a["input0"].astype(np.float32).view(np.uint32) & 0xffff).any(), "bf16 input holds non-bf16 values"
    assert np.array_equal(a["input1"].astype(np.float16).astype(np.float64), a["input1"]), "f16 input holds non-f16 values"
    assert 0.5 < a["input0"].std() < 2, "randn values do not look standard-normal"
    _, b = dump_run(expr, "seed1b", ["--seed", "1"])
    _, c = dump_run(expr, "seed2", ["--seed", "2"])
    assert np.array_equal(a["input0"], b["input0"]), "the same seed gave different inputs"
    assert not np.array_equal(a["input0"], c["input0"]), "different seeds gave the same inputs"


def test_mismatch_is_reported():
    # --perturb spoils one output value: the check must name it and fail
    p = run([LLMCC, "run", "-c", "F.softmax(torch.randn(3, 5), dim=-1)", "--perturb", "7"], check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "DOES NOT MATCH" in p.stdout and "first at [1, 2]" in p.stdout, p.stdout
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llmcc: -c: ") and "[1, 2]" in err[0], p.stderr


def test_bench_and_profile():
    p = run([LLMCC, "run", "-c", "torch.nn.Softmax(dim=-1)(torch.randn(1, 2, 8, 64))", "--bench", "--profile", "--iters", "2"])
    out = p.stdout
    for want in ("matches the reference", "ms per call", "GB/s", "CPU figures (C backend; no GPU)",
                 "k_softmax0_max", "k_softmax0_sum"):   # the normalise is the sum kernel's tail
        assert want in out, "missing %r in:\n%s" % (want, out)
    p = run([LLMCC, "run", "-c", "nn.Linear(64, 32)(torch.randn(4, 64))", "--bench", "--iters", "1"])
    assert "TFLOP/s" in p.stdout and "16.4 KFLOP" in p.stdout, p.stdout   # 2 * 4 * 32 * 64


def test_compile_every_level():
    expr = "nn.Linear(8, 4)(F.softmax(torch.randn(3, 8, dtype=torch.bfloat16), dim=-1))"
    outs = {}
    for level in ("graph", "tensor", "loop", "tile", "kernel", "c", "cuda"):
        p = run([LLMCC, "compile", "-c", expr, "--ir", level])
        assert p.stdout.strip(), level
        outs[level] = p.stdout
    assert "input(randn) : bf16[3, 8]" in outs["graph"] and "linear0.weight" in outs["graph"], outs["graph"]
    assert "k_softmax0_max" in outs["kernel"] and "k_linear0" in outs["kernel"]
    d = tmpdir("torch_expr")
    src = os.path.join(d, "harness.c")
    with open(src, "w") as f:
        f.write(outs["c"])
    run(["cc", "-O1", "-fopenmp", "-std=c11", "-I" + ROOT, "-o", os.path.join(d, "harness"), src, "-lm"])
    if shutil.which("nvcc"):
        cu = os.path.join(d, "harness.cu")
        with open(cu, "w") as f:
            f.write(outs["cuda"])
        run(["nvcc", "-arch=sm_90", "-I" + ROOT, "-c", cu, "-o", os.path.join(d, "harness_cu.o")])


def check_error(args, key, words):
    p = run([LLMCC] + args, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1, "%s: rc %d" % (args, p.returncode)
    assert len(lines) == 1, "%s: not one line:\n%s" % (args, p.stderr)
    assert lines[0].startswith("llmcc: " + key), lines[0]
    for w in words:
        assert w in lines[0], "%s: %r not in %s" % (args, w, lines[0])


def test_errors():
    c = lambda e: ["compile", "-c", e, "--ir", "graph"]
    check_error(c("torch.foo(3)"), "-c: COL 1: ", ["unknown function 'torch.foo'", "supported:", "nn.RMSNorm", "F.scaled_dot_product_attention"])
    check_error(c("torch.randn(2, 3) + torch.randn(4, 3)"), "-c: COL 19: ", ["[2, 3] and [4, 3] do not broadcast"])
    check_error(c("torch.randn(2, 3) @ torch.randn(4, 5)"), "-c: COL 19: ", ["inner dimensions 3 and 4 differ"])
    check_error(c("nn.Linear(4, 8)(torch.randn(2, 5))"), "-c: COL 17: ", ["nn.Linear(4, 8)", "last dimension to be 4", "[2, 5]"])
    check_error(c("torch.randn(2, dtype=torch.int8)"), "-c: COL 22: ", ["torch.int8 is not supported", "torch.bfloat16"])
    check_error(c("torch.randn(2, dtype=3)"), "-c: COL 22: ", ["expects a dtype"])
    check_error(c("F.softmax(torch.randn(3, 4), dim=0)"), "-c: COL 34: ", ["not supported yet", "dim=-1"])
    check_error(c("torch.randn(2, 3"), "-c: COL 17: ", ["expected ')'"])
    check_error(c("torch.randn(1, 2, 3, 4, 5)"), "-c: COL 25: ", ["at most 4 dimensions"])
    check_error(c("nn.Linear(4, 8)"), "-c: COL 1: ", ["not a tensor"])
    check_error(c("F.silu(x)"), "-c: COL 8: ", ["unknown name 'x'", "assign it first"])
    check_error(c("x = torch.randn(2); y"), "-c: COL 21: ", ["unknown name 'y'"])
    check_error(c("x = torch.randn(2) F.silu(x)"), "-c: COL 20: ", ["expected ';' after the assignment to x"])
    check_error(c("x = torch.randn(2);"), "-c: COL 20: ", ["not followed by an expression"])
    check_error(c("F.x = torch.randn(2); F.x"), "-c: COL 5: ", ["unexpected '='"])
    check_error(["run", "-c", "torch.randn(2) $ 1"], "-c: COL 16: ", ["unexpected character"])
    check_error(c("torch.randn(65536, 1) * torch.randn(1, 262144)"), "-c: COL 23: ", ["1.718e+10 elements", "2^33"])
    check_error(c("(" * 300 + "torch.randn(3)" + ")" * 300), "-c: COL 201: ", ["nested too deeply"])
    check_error(["compile", "-c", "F.silu(torch.randn(2))", "/some/model", "--ir", "graph"], "-c: ", ["not both"])


def fixture(kind="llama-gqa"):
    return model_fixture(kind, "f32", seed=0)


def layer_forward(model, li, x, pos=0, k_cache=None, v_cache=None, kv_bf16=False):
    """One decoder layer at positions pos..pos+n-1 over a cache holding pos rows
    before them (k_cache, v_cache: [pos, kv_heads * head_dim], keys already
    rotated, as a cache holds them): the body of ref_forward.forward's loop
    (transformers' modeling code), with its helpers. kv_bf16: the call's keys and
    values rounded to bf16 (nearest even) as a bf16 cache stores them."""
    n = x.shape[0]
    nh, nkv, hd = model["nh"], model["nkv"], model["hd"]
    lay = model["layers"][li]
    cos, sin = ref_forward.rope_cos_sin(model, np.arange(pos, pos + n))
    h = ref_forward.rmsnorm(x, lay["input_layernorm.weight"], model["eps"])
    q = ref_forward.linear(h, lay["q_proj"], lay["q_proj.b"]).reshape(n, nh, hd).transpose(1, 0, 2)
    k = ref_forward.linear(h, lay["k_proj"], lay["k_proj.b"]).reshape(n, nkv, hd).transpose(1, 0, 2)
    v = ref_forward.linear(h, lay["v_proj"], lay["v_proj.b"]).reshape(n, nkv, hd).transpose(1, 0, 2)
    q, k = ref_forward.apply_rope(q, cos, sin), ref_forward.apply_rope(k, cos, sin)
    if kv_bf16:
        k, v = ref_forward.bf16_round(k), ref_forward.bf16_round(v)
    if pos:
        k = np.concatenate([k_cache.reshape(pos, nkv, hd).transpose(1, 0, 2), k], axis=1)
        v = np.concatenate([v_cache.reshape(pos, nkv, hd).transpose(1, 0, 2), v], axis=1)
    kr, vr = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
    s = q @ kr.transpose(0, 2, 1) * hd ** -0.5
    # query t (position pos + t) sees keys 0..pos+t
    s = np.where(np.tril(np.ones((n, pos + n), dtype=bool), k=pos)[None], s, -np.inf)
    o = (softmax(s) @ vr).transpose(1, 0, 2).reshape(n, nh * hd)
    x = x + ref_forward.linear(o, lay["o_proj"], lay["o_proj.b"])
    h = ref_forward.rmsnorm(x, lay["post_attention_layernorm.weight"], model["eps"])
    g, u = ref_forward.linear(h, lay["gate_proj"], lay["gate_proj.b"]), ref_forward.linear(h, lay["up_proj"], lay["up_proj.b"])
    return x + ref_forward.linear(silu(g) * u, lay["down_proj"], lay["down_proj.b"])


def test_run_layer_against_numpy():
    for kind, layer, tokens in (("llama-gqa", 1, 6), ("qwen2-tied", 0, 3)):
        d = fixture(kind)
        out = os.path.join(tmpdir("torch_expr"), "layer-%s" % kind)
        shutil.rmtree(out, ignore_errors=True)
        p = run([LLMCC, "run", d, "--layer", str(layer), "--tokens", str(tokens), "--dump", out])
        assert "matches the reference" in p.stdout and "the checkpoint's weights" in p.stdout, p.stdout
        x = np.load(os.path.join(out, "hidden_states.npy"))
        got = np.load(os.path.join(out, "output.npy"))
        want = layer_forward(ref_forward.load(d), layer, x)
        assert got.shape == want.shape == (tokens, x.shape[1])
        # both sides compute in f32, in different orders: the e2e tests' bound
        diff = float(np.abs(got - want).max())
        assert diff <= 1e-4 * float(np.abs(want).max()), "%s layer %d: max |diff| %.3g" % (kind, layer, diff)


def test_run_layer_tensor_cores():
    """A bf16 layer over more than gemm_min_n tokens runs its linears on the mma schedule; the
    reference rounds their inputs to bf16 as that schedule does, so the check stays tight, and a
    wrong fragment layout (debug_mma_layout=1) is caught."""
    d = os.path.join(tmpdir("torch_expr"), "llama-gqa-bf16")
    if not os.path.exists(os.path.join(d, "config.json")):
        run(["python3", os.path.join(ROOT, "scripts", "make_fixture.py"), "llama-gqa", d, "--dtype", "bf16"])
    p = run([LLMCC, "compile", d, "--layer", "1", "--ir", "tile"])
    assert "gemm_tc" in p.stdout, "the layer's linears are not on the tensor-core schedule"
    p = run([LLMCC, "run", d, "--layer", "1", "--tokens", "24", "--target", "cuda-emu"])
    assert "matches the reference" in p.stdout, p.stdout
    p = run([LLMCC, "run", d, "--layer", "1", "--tokens", "24", "--target", "cpu"])
    assert "matches the reference" in p.stdout and "cpu_gemm" in run([LLMCC, "compile", d, "--layer", "1", "--ir", "tile",
                                                                         "--target", "cpu"]).stdout, p.stdout
    p = subprocess.run([LLMCC, "run", d, "--layer", "1", "--tokens", "24", "--target", "cuda-emu", "--knob",
                        "debug_mma_layout=1"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, (p.returncode, p.stdout)


def test_layer_every_level():
    d = fixture()
    outs = {}
    for level in ("graph", "tensor", "loop", "tile", "kernel", "c", "cuda"):
        outs[level] = run([LLMCC, "compile", d, "--layer", "1", "--ir", level]).stdout
        assert outs[level].strip(), level
    g = outs["graph"]
    assert "decoder layer 1 only" in g and "input(randn) : f32[n, 64]  # hidden_states" in g, g
    names = [l.split("# ")[1] for l in g.splitlines() if "  # " in l]
    assert names[0] == "hidden_states" and all(n.startswith("model.layers.1.") for n in names[1:]), names
    assert "model.layers.0." not in g and "lm_head" not in g and "embed_tokens" not in g
    nodes = [l for l in g.splitlines() if l.startswith("%")]
    assert g.strip().endswith("return %%%d" % (len(nodes) - 1)) and "mlp_residual" in nodes[-1], "the output is not the layer's last op"
    assert "k_self_attn_attention_flash" in outs["kernel"] and "k_mlp_down_proj" in outs["kernel"]
    src = os.path.join(tmpdir("torch_expr"), "layer.c")
    with open(src, "w") as f:
        f.write(outs["c"])
    run(["cc", "-O0", "-fopenmp", "-std=c11", "-I" + ROOT, "-c", src, "-o", src + ".o"])


def test_layer_out_of_range():
    d = fixture()
    check_error(["compile", d, "--layer", "2", "--ir", "graph"], "--layer: ", ["2 is out of range", "2 decoder layers", "0..1"])
    check_error(["compile", d, "--layer", "-1", "--ir", "graph"], "--layer: ", ["expects an integer"])
    check_error(["build", d, "-o", os.path.join(tmpdir("torch_expr"), "never"), "--layer", "0"], "--layer: ", ["compile"])
    check_error(["run", d, "--layer", "5"], "--layer: ", ["5 is out of range"])
    check_error(["run", d], "--layer: ", ["needs --layer N"])
