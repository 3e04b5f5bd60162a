"""top-k on the device: the top_k / top_k_merge schedules (successive block
argmaxes over (value, index) pairs, the winning thread rescanning its part;
chunks of a long row merged by a second kernel), reachable as
torch.topk(x, k) from `llmcc run -c` and used by every model's sampler
(model_topk: with --top-k, the runtime copies 2(k+1) numbers instead of the
logits and must draw exactly the token the host sampler draws).

References: numpy's lexsort (value descending, then index ascending, NaN as
-inf) on the inputs `--dump` writes, compared exactly; the runtime's own host
sampler (forced by --logits, which needs every logit) for the drawn ids."""
import json
import os
import shutil
import struct

import numpy as np

from test_e2e import build, fixture
from oplib import compile_op, ptxas_report, run_op
from test_torch_expr import dump_run
from testlib import LLMCC, ROOT, Skip, run, tmpdir

# (expression, the input numpy computes from the dumped leaves, knobs)
CASES = [
    ("torch.topk(torch.randn(3, 100), 5)", lambda t: t["input0"], ()),
    ("torch.topk(torch.randn(37), 37)", lambda t: t["input0"], ()),                           # 1-D, k = the whole row
    ("torch.topk(torch.randn(2, 3, 5000), 128)", lambda t: t["input0"], ()),                  # several chunks, the largest k
    ("torch.topk(torch.randn(3, 10007), 17)", lambda t: t["input0"], ()),                     # a row no chunk size divides
    ("torch.topk(torch.randn(1, 152064, dtype=torch.bfloat16), 21)", lambda t: t["input0"], ()),   # Qwen2.5's vocabulary; bf16 ties
    ("torch.topk(torch.randn(4, 3000, dtype=torch.bfloat16), 100)", lambda t: t["input0"], ("topk_chunks=3",)),
    ("torch.topk(torch.randn(2, 9000), 9)", lambda t: t["input0"], ("topk_chunks=256",)),      # more chunks than ... one warp of lists each
    ("torch.topk(torch.randn(2, 5000), 40)", lambda t: t["input0"], ("reduce_block_max=32",)),  # one warp: no shared memory
    ("torch.topk(torch.zeros(2, 5000), 10)", lambda t: t["input0"], ()),                      # all equal: the first indices
    ("torch.topk(torch.randn(3, 1) * torch.ones(3, 700), 64)", lambda t: t["input0"] * t["input1"], ()),
    ("torch.topk(torch.randn(2, 3000) / torch.zeros(3000), 50)", lambda t: t["input0"] / t["input1"], ()),   # +-inf
    ("torch.topk(torch.zeros(2, 300) / torch.zeros(2, 300), 7)", lambda t: t["input0"] / t["input1"], ()),   # NaN: -inf
]


def numpy_topk(x, k):
    x = np.where(np.isnan(x), -np.inf, x)
    rows = x.reshape(-1, x.shape[-1])
    out = np.zeros((rows.shape[0], 2, k))
    for r, row in enumerate(rows):
        order = np.lexsort((np.arange(row.size), -row))[:k]
        out[r, 0], out[r, 1] = row[order], order
    return out.reshape(x.shape[:-1] + (2, k))


def test_topk_against_numpy():
    for i, (expr, inp, knobs) in enumerate(CASES):
        extra = sum((["--knob", k] for k in knobs), [])
        for target in ("cuda-emu", "cpu"):   # the GPU's top_k schedules, and the CPU target's
            p, t = dump_run(expr, "topk%d%s" % (i, target), ["--target", target] + extra)
            assert p.returncode == 0 and "matches the reference" in p.stdout, expr + "\n" + p.stdout + p.stderr
            out = t.pop("output")
            k = int(expr.rsplit(",", 1)[1].strip(" )"))
            with np.errstate(divide="ignore", invalid="ignore"):
                want = numpy_topk(inp(t), k)
            assert out.shape == want.shape, "%s %s: shape %s, numpy %s" % (target, expr, out.shape, want.shape)
            assert np.array_equal(out, want), "%s %s %s: first difference at %s: %r vs numpy %r" % (
                target, expr, knobs, np.argwhere(out != want)[0], out[out != want][0], want[out != want][0])


def test_topk_schedules_in_guarded_buffers():
    """The op harness (tests/c/op_main.c): every buffer, the chunks' workspace too, between guard regions
    that must come back untouched; the result against numpy exactly."""
    rng = np.random.default_rng(11)
    for R, L, K, knobs in ((1, 152064, 21, ()), (3, 10007, 128, ()), (2, 5000, 7, ("topk_chunks=256",)), (4, 33, 33, ()),
                           (2, 4097, 5, ("reduce_block_max=32",)), (3, 3000, 100, ("topk_chunks=7",))):
        exe, tile, d = compile_op(["topk", R, L, K], knobs)
        x = rng.standard_normal((R, L)).astype(np.float32)
        x[:, ::97] = 0.5                       # ties across chunks and threads
        (y,) = run_op(exe, d, [x.tobytes()], R, [(R, 2, K)])
        want = numpy_topk(x.astype(np.float64), K)
        got = y.view(np.float32).astype(np.float64)
        assert np.array_equal(got, want), "topk %s %s: first difference at %s" % ((R, L, K), knobs, np.argwhere(got != want)[0])


def test_topk_schedule_printed_and_pinned():
    t = run([LLMCC, "compile", "-c", "torch.topk(torch.randn(2, 10000), 5)", "--ir", "tile"]).stdout
    assert "schedule top_k " in t and "chunks=10 chunk=1000" in t and "schedule top_k_merge" in t, t
    t = run([LLMCC, "compile", "-c", "torch.topk(torch.randn(2, 10000), 5)", "--ir", "tile", "--knob", "topk_chunks=1"]).stdout
    assert "chunks=1 chunk=10000" in t and "top_k_merge" not in t, t
    # a short row: one kernel, no workspace
    t = run([LLMCC, "compile", "-c", "torch.topk(torch.randn(100), 3)", "--ir", "tile"]).stdout
    assert "top_k_merge" not in t and "block=128" in t, t


def test_wrong_tie_order_is_caught():
    """debug_topk_order breaks ties towards the larger index: on rows with ties the check must fail."""
    for expr in ("torch.topk(torch.zeros(2, 5000), 10)", "torch.topk(torch.randn(4, 3000, dtype=torch.bfloat16), 100)"):
        p = run([LLMCC, "run", "--target", "cuda-emu", "-c", expr, "--knob", "debug_topk_order=1"], check=False)
        assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, expr + "\n" + p.stdout + p.stderr
    # and a wrong shuffle lane likewise
    p = run([LLMCC, "run", "--target", "cuda-emu", "-c", "torch.topk(torch.randn(3, 5000), 20)", "--knob", "debug_shfl_offset=1"], check=False)
    assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, p.stdout + p.stderr


def test_index_check_is_exact():
    """--perturb of one index by a small amount must fail although the values' tolerance is loose"""
    p = run([LLMCC, "run", "--target", "cuda-emu", "-c", "torch.topk(torch.randn(1, 30000), 4)", "--perturb", "4"], check=False)
    assert p.returncode == 1 and "first at [0, 1, 0]" in p.stdout, p.stdout


def test_topk_errors():
    for expr, words in (("torch.topk(torch.randn(3, 4), 5)", "more than the 4 values"),
                        ("torch.topk(torch.randn(3, 400), 129)", "up to 128"),
                        ("torch.topk(torch.randn(3, 4), 0)", "k must be"),
                        ("torch.topk(torch.randn(3, 4), 2, dim=0)", "only the last dim"),
                        ("torch.topk(torch.randn(3, 4), 2, largest=False)", "largest=False"),
                        ("torch.topk(torch.randn(3, 4), 2, sorted=False)", "sorted=False"),
                        ("torch.topk(torch.randn(2, 3, 4, 5), 2)", "4-D"),
                        ("torch.topk(torch.randn(3, 4), 2).values", ".values and .indices are not supported yet")):
        p = run([LLMCC, "compile", "-c", expr, "--ir", "graph"], check=False)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, expr + ": " + p.stderr


def test_topk_kernels_compile_sm90():
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise Skip("nvcc is not installed")
    pr = ptxas_report()
    rows = []
    for expr in ("torch.topk(torch.randn(1, 152064), 128)", "torch.topk(torch.randn(3, 700), 9)"):
        cu = os.path.join(tmpdir("topk"), "k.cu")
        with open(cu, "w") as f:
            f.write(run([LLMCC, "compile", "-c", expr, "--ir", "cuda"]).stdout)
        res = pr.compile_report(nvcc, cu, "sm_90")
        assert res["ok"], "nvcc failed or warned on %s:\n%s" % (expr, res["log"])
        assert all(r[2] == 0 and r[3] == 0 for r in res["kernels"]), res["kernels"]   # no spills
        rows += [(expr,) + r for r in res["kernels"]]
    print(pr.format_table(rows, ("op", "kernel", "registers", "spill stores", "spill loads", "stack", "smem")))


def sampled(p):
    line = [l for l in p.stderr.splitlines() if l.startswith("sampled:")]
    assert line, p.stderr
    w = line[0].split()
    return {"argmax": int(w[1]), "topk": int(w[6]), "ties": int(w[10].strip("(")), "logits": int(w[-4])}


def sample_both(exe, top_k, seed, n=40, extra=()):
    base = [exe, "--prompt-ids", "1,4,7,10,13", "-n", str(n), "--temperature", "0.9", "--top-k", str(top_k), "--seed", str(seed),
            "--ids", "--ignore-eos", "--repeat-penalty", "1", "--stats"] + list(extra)
    dev = run(base + ["--device-topk"])
    host = run(base + ["--logits", exe + ".logits"])
    return dev, host


def test_model_topk_sampling_matches_host():
    """--top-k without a penalty draws from the device's top-k: the same ids as the host sampler (which
    reads every logit), seed by seed, and the stats say which path drew them."""
    d = fixture("qwen2-tied", "f32")
    g = run([LLMCC, "compile", d, "--ir", "graph"]).stdout
    assert "topk(" in g and "# model.top_k" in g, g[-300:]
    exe = os.path.join(build(d, "cpu"), "m")
    for top_k, seed, extra in ((2, 1, ()), (5, 2, ()), (40, 3, ()), (127, 4, ()), (5, 5, ()),
                               (40, 6, ("--top-p", "0.8")), (60, 7, ("--min-p", "0.05", "--top-p", "0.95"))):
        dev, host = sample_both(exe, top_k, seed, extra=extra)
        assert dev.stdout == host.stdout, "top-k %d seed %d: device %s, host %s" % (top_k, seed, dev.stdout, host.stdout)
        assert len(set(dev.stdout.split())) > 2, dev.stdout
        s = sampled(dev)
        assert s["topk"] == 40 and s["logits"] == 0, dev.stderr
        assert sampled(host)["logits"] == 40, host.stderr
    # past the device's 128 candidates (the 128th tells a tie apart): the logits
    dev, host = sample_both(exe, 128, 1)
    assert dev.stdout == host.stdout and sampled(dev)["logits"] == 40, dev.stderr
    # a CPU build samples from its logits unless asked
    p = run([exe, "--prompt-ids", "1,4", "-n", "5", "--temperature", "0.9", "--top-k", "5", "--repeat-penalty", "1", "--ids", "--stats", "--ignore-eos"])
    assert sampled(p)["logits"] == 5, p.stderr
    assert "--device-topk" in run([exe, "--help"]).stdout


def test_penalties_on_the_device():
    """The repetition, frequency and presence penalties applied to the device's logits (model_penalize), then
    its top-k: the same ids as the host sampler over every logit, seed by seed, on the cpu target and on cuda-emu
    (the GPU builds' path: bf16 KV cache, the decode graph); Qwen2.5-Instruct's generation_config defaults among
    them (temperature 0.7, top-k 20, top-p 0.8, repetition penalty 1.05). The penalties change the draw (else the
    comparison would not see them), and --stats says the device's top-k drew every token."""
    d = fixture("qwen2-tied", "f32")
    for target in ("cpu", "cuda-emu"):
        exe = os.path.join(build(d, target), "m")
        for pen, other, seed in ((("--repeat-penalty", "1.05"), ("--temperature", "0.7", "--top-p", "0.8"), 1),
                                 (("--repeat-penalty", "1.3"), (), 2),
                                 (("--repeat-penalty", "1.1", "--frequency-penalty", "0.5", "--presence-penalty", "0.3"),
                                  (), 3),
                                 (("--presence-penalty", "1.5"), (), 4)):
            base = [exe, "--prompt-ids", "1,4,7,10,13", "-n", "60", "--top-k", "20", "--seed", str(seed), "--ids",
                    "--ignore-eos", "--stats", "--temperature", "0.9", "--repeat-penalty", "1"] + list(other)
            dev = run(base + list(pen) + ["--device-topk"])
            host = run(base + list(pen) + ["--logits", exe + ".logits"])
            assert dev.stdout == host.stdout, "%s %s: device %s, host %s" % (target, pen, dev.stdout, host.stdout)
            s = sampled(dev)
            assert s["topk"] == 60 and s["logits"] == 0, dev.stderr
            plain = run(base + ["--device-topk"])
            assert plain.stdout != dev.stdout, "%s %s: the penalties change nothing" % (target, pen)


def tied_fixture():
    """qwen2-tied with embedding rows 50.. all equal to row 50: with tied embeddings their logits are
    equal at every step, so the k-th candidate often ties with tokens outside the top k."""
    src = fixture("qwen2-tied", "f32")
    d = os.path.join(tmpdir("topk"), "qwen2-tied-dup")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    path = os.path.join(d, "model.safetensors")
    raw = bytearray(open(path, "rb").read())
    (hl,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + hl])
    e = hdr["model.embed_tokens.weight"]
    assert e["dtype"] == "F32", e
    V, D = e["shape"]
    base = 8 + hl + e["data_offsets"][0]
    w = np.frombuffer(bytes(raw[base:base + V * D * 4]), dtype="<f4").reshape(V, D).copy()
    w[50:] = w[50]
    raw[base:base + V * D * 4] = w.tobytes()
    open(path, "wb").write(bytes(raw))
    return d


def test_model_topk_tie_falls_back_to_logits():
    exe = os.path.join(build(tied_fixture(), "cpu"), "m")
    ties = 0
    for top_k, seed in ((5, 1), (20, 2), (45, 3)):
        dev, host = sample_both(exe, top_k, seed)
        assert dev.stdout == host.stdout, "top-k %d seed %d: device %s, host %s" % (top_k, seed, dev.stdout, host.stdout)
        ties += sampled(dev)["ties"]
    assert ties > 0, "no draw met a tie at the k-th candidate: the fixture does not test the fallback"
