"""What scripts/bench_ops.sh needs from `llmcc run`, and the script itself.

--pos P: a decoder layer at positions P.. over a KV cache whose P rows before
the call are seeded random values. `llmcc run` checks it against its own
reference (compiler/interp.c); independently, the test recomputes the layer
with numpy (test_torch_expr.layer_forward, transformers' formulas) from the
weights, input and cache rows that --dump writes, and makes sure those cache
rows matter (the result without them is far off). The `bench:` lines must
hold figures that agree with each other and with the prose; --no-check must
say it skipped the reference and still fail on non-finite output. The
script's CPU dry run (BENCH_OPS_CPU=1) must run every row. scripts/gpu_check.sh keeps
to its time limit."""
import os
import re
import shutil
import subprocess

import numpy as np

import ref_forward
from test_torch_expr import check_error, fixture, layer_forward
from testlib import LLMCC, ROOT, model_fixture, run, tmpdir


def bench_lines(out):
    res = {}
    for l in out.splitlines():
        if l.startswith("bench: "):
            kv = dict(f.split("=", 1) for f in l.split()[1:])
            res[kv["name"]] = kv
    return res


def test_pos_against_numpy():
    d = fixture("llama-gqa")
    model = ref_forward.load(d)
    # cuda-emu's default KV cache is bf16 (the GPU's): numpy rounds the call's keys and values as it stores
    # them (the rows before pos are bf16 values already); f32 asked for, they stay f32
    for layer, tokens, pos, kv in ((1, 3, 7, "bf16"), (0, 1, 40, "bf16"), (1, 3, 7, "f32"), (0, 1, 40, "f32")):
        out = os.path.join(tmpdir("bench_ops"), "pos-%d-%d-%s" % (tokens, pos, kv))
        shutil.rmtree(out, ignore_errors=True)
        p = run([LLMCC, "run", "--target", "cuda-emu", d, "--layer", str(layer), "--tokens", str(tokens), "--pos", str(pos),
                 "--dump", out] + (["--kv-dtype", kv] if kv == "f32" else []))
        assert "matches the reference" in p.stdout and "at position %d" % pos in p.stdout, p.stdout
        pre = "model.layers.%d.self_attn." % layer
        kc, vc = np.load(os.path.join(out, pre + "k_cache.npy")), np.load(os.path.join(out, pre + "v_cache.npy"))
        assert kc.shape == vc.shape == (pos, model["nkv"] * model["hd"]), kc.shape
        assert 0.5 < kc.std() < 2 and not np.array_equal(kc, vc), "the cache rows do not look like independent randn"
        x = np.load(os.path.join(out, "hidden_states.npy")).astype(np.float64)
        got = np.load(os.path.join(out, "output.npy"))
        if kv == "bf16":
            assert np.array_equal(kc, ref_forward.bf16_round(kc)), "the bf16 cache's rows are not bf16 values"
        want = layer_forward(model, layer, x, pos, kc.astype(np.float64), vc.astype(np.float64), kv_bf16=kv == "bf16")
        # f32 kernels against float64 numpy: the bound the e2e tests use
        tol = 1e-4 * float(np.abs(want).max())
        diff = float(np.abs(got - want).max())
        assert diff <= tol, "layer %d at pos %d: max |diff| %.3g > %.3g" % (layer, pos, diff, tol)
        # the cache rows are read: the same tokens at the same positions over a zero cache differ
        blind = layer_forward(model, layer, x, pos, 0 * kc.astype(np.float64), 0 * vc.astype(np.float64), kv_bf16=kv == "bf16")
        assert float(np.abs(got - blind).max()) > 100 * tol, "the output does not depend on the cache rows before --pos"


def test_pos_on_tensor_cores_and_mismatch():
    d = model_fixture("llama-gqa", "bf16", seed=0)
    p = run([LLMCC, "run", "--target", "cuda-emu", d, "--layer", "0", "--tokens", "20", "--pos", "9"])
    assert "matches the reference" in p.stdout, p.stdout
    p = subprocess.run([LLMCC, "run", "--target", "cuda-emu", d, "--layer", "0", "--tokens", "2", "--pos", "9", "--perturb", "5"], capture_output=True, text=True)
    assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, (p.returncode, p.stdout)


def test_pos_errors():
    d = fixture("llama-gqa")
    check_error(["run", "-c", "F.silu(torch.randn(3))", "--pos", "2"], "--pos: ", ["needs MODEL --layer N"])
    check_error(["run", d, "--layer", "0", "--pos", "-1"], "--pos: ", ["0..131072", "'-1'"])
    check_error(["run", d, "--layer", "0", "--pos", "131073"], "--pos: ", ["0..131072"])


def test_bench_lines():
    p = run([LLMCC, "run", "--target", "cuda-emu", fixture("llama-gqa"), "--layer", "0", "--tokens", "2", "--pos", "5", "--bench", "--profile", "--iters", "2"])
    b = bench_lines(p.stdout)
    t = b["total"]
    for k in ("ms", "iters", "bytes", "gbs", "flops", "tflops", "target", "peak_gbs", "peak_bf16_tflops", "check", "nonfinite", "kernels", "launches"):
        assert k in t, "bench: total lacks %s: %s" % (k, t)
    assert t["check"] == "match" and t["nonfinite"] == "0" and t["iters"] == "2" and t["target"] in ("cpu", "cuda-emu", "cuda"), t
    ms, byt, fl = float(t["ms"]), float(t["bytes"]), float(t["flops"])
    assert ms > 0 and abs(float(t["gbs"]) - byt / ms * 1e-6) <= 1e-4 * float(t["gbs"]), t
    assert abs(float(t["tflops"]) - fl / ms * 1e-9) <= 1e-4 * float(t["tflops"]), t
    m = re.search(r"time: ([\d.e+-]+) ms per call", p.stdout)
    assert m and abs(float(m.group(1)) - ms) <= 1e-3 * ms, p.stdout
    # llama-gqa: hidden 64, 4 heads / 2 KV heads of 16; the 5 cache rows before pos are read (K and V, f32)
    cfg = ref_forward.load(fixture("llama-gqa"))
    kvw = cfg["nkv"] * cfg["hd"]
    attn_flops = 4.0 * 2 * (5 + 2) * cfg["nh"] * cfg["hd"]
    assert fl > attn_flops and "the cache rows before --pos" in p.stdout
    mods = {k[len("module:"):]: v for k, v in b.items() if k.startswith("module:")}
    assert "model.layers.0.self_attn.attention" in mods and "model.layers.0.mlp.down_proj" in mods, mods.keys()
    assert sum(int(v["launches"]) for v in mods.values()) == int(t["launches"]), (mods, t)
    s = re.search(r"their sum is ([\d.e+-]+) ms", p.stdout)
    assert abs(sum(float(v["ms"]) for v in mods.values()) - float(s.group(1))) <= 1e-3 * float(s.group(1)) + 1e-6
    assert kvw * 5 * 4 * 2 < byt


def test_no_check():
    p = run([LLMCC, "run", "--target", "cuda-emu", "-c", "nn.Linear(64, 32)(torch.randn(4, 64))", "--no-check", "--bench", "--iters", "1"])
    assert "reference: none (--no-check)" in p.stdout and "0 of 128 values are not finite" in p.stdout, p.stdout
    assert "matches the reference" not in p.stdout and bench_lines(p.stdout)["total"]["check"] == "skipped", p.stdout
    # 0 / 0: not finite, which --no-check still catches
    check_error(["run", "-c", "torch.zeros(3) / torch.zeros(3)", "--no-check"], "--no-check: ", ["3 of 3 output values are not finite"])


def test_bench_ops_dry_run():
    """The CPU dry run: every row gets figures (flash rows: n/a while llmcc has no flash knob). About a minute
    cold on the 2-core machine: scripts/bench_ops.sh builds and runs every row's harness (what a GPU run of the
    script would time), and the script is what this checks; a second run takes its objects from ccache."""
    d = tmpdir("bench_ops_dry")
    env = dict(os.environ, BENCH_OPS_CPU="1", BENCH_OPS_DIR=d, LLMCC_BIN=LLMCC)
    p = subprocess.run([os.path.join(ROOT, "scripts", "bench_ops.sh")], capture_output=True, text=True, env=env, timeout=300)
    out = p.stdout
    assert p.returncode == 0 and "bench_ops: every step ran" in out, "rc %d\n%s%s" % (p.returncode, out, p.stderr)
    rows = [l for l in out.splitlines() if l.startswith("  ") and re.search(r"(PASS|FAIL|n/a)$", l.rstrip())]
    gemv = [l for l in rows if "->" in l and " n=" not in l]
    gemm = [l for l in rows if " n=" in l]
    attn = [l for l in rows if ("prefill" in l or "decode" in l) and "launches" not in l]
    fused = [l for l in rows if re.search(r", \d+/\d+ launches", l)]
    assert len(gemv) == 6 and len(gemm) == 12 and len(attn) == 4 and len(fused) == 2, out   # gate_up_proj: one row per n
    assert re.search(r"top-k 21 of 4096 logits +[0-9.e+-]+ .* info$", out, re.M), out   # the device top-k ran and matched
    for l in gemv + gemm + fused:   # every figure present, a verdict against its target
        assert "n/a" not in l and (l.endswith("PASS") or l.endswith("FAIL")), l
    flash = "unknown knob 'flash'" not in open(os.path.join(d, "flash_probe.log")).read()
    for l in attn:
        assert ("n/a (no flash knob)" in l) != flash, l
    # the layer's kernels from memory (--cold), at n = 1 and at the max batch: a figure in every column
    num = r"([0-9.e+-]+)"
    cold = [re.match(r"  cold (.+?) +%s +%s +%s%% +(>=85%%|-) +(PASS|FAIL|info) +%s +%s$" % ((num,) * 5), l)
            for l in out.splitlines() if l.startswith("  cold ") and "whole layer" not in l]
    assert len(cold) == 7 and all(cold), out
    for m in cold:   # a verdict for the linears, none for attention (its bytes are the cache's)
        assert (m.group(6) == "info") == m.group(1).startswith("attention"), m.group(0)
    whole = re.search(r"  cold whole layer \((\d+) / (\d+) launches\) +%s +- +info +%s$" % (num, num), out, re.M)
    assert whole, out
    # end to end: the 2-layer executable's time a token, and 26 more cold layers on top of it
    m2 = re.search(r"e2e measured, 2 layers +%s +%s +2 +info$" % (num, num), out, re.M)
    m28 = re.search(r"e2e scaled: \+ 26 cold layers +%s +%s +28 +info$" % (num, num), out, re.M)
    assert m2 and m28 and "launches per token:" in out and "start-up:" in out, out
    t2, t28, layer = float(m2.group(2)), float(m28.group(2)), float(whole.group(3))
    assert abs(t28 - (t2 + 26 * layer)) <= 1e-3 * t28 + 1e-3, (t2, t28, layer)
    assert abs(float(m28.group(1)) - 1e3 / t28) <= 1e-3 * float(m28.group(1)), m28.group(0)
    assert re.search(r"steps: \d+ run, 0 failed", out) and "total wall time" in out, out


def test_cold_bench():
    """--cold: each timed call after a flush of the caches, its time the sum of its launches'"""
    p = run([LLMCC, "run", "--target", "cuda-emu", fixture("llama-gqa"), "--layer", "0", "--tokens", "1", "--pos", "5",
             "--bench", "--profile", "--cold", "--iters", "2"])
    t = bench_lines(p.stdout)["total"]
    assert t["cold"] == "1" and t["check"] == "match" and "each after the caches were flushed" in p.stdout, p.stdout
    s = re.search(r"their sum is ([\d.e+-]+) ms", p.stdout)
    assert abs(float(s.group(1)) - float(t["ms"])) <= 1e-3 * float(t["ms"]), p.stdout
    assert bench_lines(run([LLMCC, "run", "--target", "cuda-emu", "-c", "F.silu(torch.randn(8))", "--bench",
                            "--iters", "1"]).stdout)["total"]["cold"] == "0"
    check_error(["run", "-c", "F.silu(torch.randn(8))", "--cold"], "--cold: ", ["goes with --bench or --profile"])


def test_bench_ops_budget():
    """The budget holds: steps that do not fit are not started, reported, and make the exit status 1."""
    d = tmpdir("bench_ops_budget")
    env = dict(os.environ, BENCH_OPS_CPU="1", BENCH_OPS_DIR=d, LLMCC_BIN=LLMCC, BENCH_OPS_BUDGET="15")
    p = subprocess.run([os.path.join(ROOT, "scripts", "bench_ops.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and "SOME STEPS FAILED" in p.stdout, "rc %d\n%s%s" % (p.returncode, p.stdout, p.stderr)
    assert "skipped: the 15 s budget is spent" in p.stdout, p.stdout
    wall = int(re.search(r"total wall time (\d+) s", p.stdout).group(1))
    assert wall <= 15 + 5, p.stdout   # timeout -k 5 stops a step that outlives the budget


def test_gemm_sweep_dry_run():
    """scripts/bench_gemm_sweep on the CPU: the configurations named run and every linear gets a figure"""
    d = tmpdir("bench_sweep_dry")
    env = dict(os.environ, BENCH_SWEEP_CPU="1", BENCH_SWEEP_DIR=d, LLMCC_BIN=LLMCC, BENCH_SWEEP_ONLY="default 128x128_s2")
    p = subprocess.run([os.path.join(ROOT, "scripts", "bench_gemm_sweep"), "24"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and "every configuration ran" in p.stdout, "rc %d\n%s%s" % (p.returncode, p.stdout, p.stderr)
    rows = [l for l in p.stdout.splitlines() if re.match(r"\w+ \d+->\d+ ", l)]
    assert len(rows) == 6 and all(len(l.split()) == 4 and "n/a" not in l for l in rows), p.stdout
    assert "128x128_s2" in p.stdout and "64x128_s2" not in p.stdout, p.stdout


def test_gpu_check_stops_at_its_limit():
    """scripts/gpu_check.sh runs as one child under GPU_CHECK_LIMIT seconds: past it, it says so and fails (124),
    from any working directory"""
    env = dict(os.environ, GPU_CHECK_LIMIT="2", OUT=os.path.join(tmpdir("gpu_check"), "out"))
    p = subprocess.run(["bash", "gpu_check.sh"], cwd=os.path.join(ROOT, "scripts"), env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 124 and "gpu_check: stopped after 2 s (GPU_CHECK_LIMIT): FAILED" in p.stdout, (
        p.returncode, p.stdout, p.stderr)


def test_gpu_check_emulated():
    """GPU_CHECK_EMU=1 runs scripts/gpu_check.sh whole without a GPU (over a minute cold on the 2-core machine:
    the script builds its 13 executables itself, as it will on the GPU machine, whose 15 minutes allow no
    untested script) (cuda-emu for CUDA, a small Qwen2 for
    Qwen2.5-7B): every fixture's row agrees (ids, logits at 1e-4, the device's argmax, the graph against --no-graph,
    device top-k against the host sampler) and the end-to-end lines are printed, so that the script a GPU run gets
    has run (it once compared the GPU with the cpu target's bf16-activation products, 1e-2 apart)"""
    env = dict(os.environ, GPU_CHECK_EMU="1", GPU_CHECK_LIMIT="900", OUT=os.path.join(tmpdir("gpu_check_emu"), "out"))
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh")], env=env, capture_output=True,
                       text=True, timeout=960)
    out = p.stdout
    assert p.returncode == 0 and "gpu_check: all fixtures agree" in out, (p.returncode, out, p.stderr)
    rows = re.findall(r"^(llama-gqa|qwen2-tied|llama-linear) +(f32|bf16) +(short|long|argmax|graph|top-k) .* (ok|FAIL)$",
                      out, re.M)
    assert len(rows) == 30 and all(r[3] == "ok" for r in rows), out
    assert re.search(r"^launches per token: 1 \(a CUDA Graph; its capture holds (\d+) kernels; --no-graph: \1 launches\)",
                     out, re.M), out
    assert re.search(r"^decode, 2 layers of a small Qwen2 \(bf16\), context ~1024: measured [\d.]+ us", out, re.M), out
    assert "start-up: " in out and "time to first token: " in out, out


def test_bf16_cache_rounding_fault_is_caught():
    """knob debug_kv_round=1 (a bf16 KV cache's stores truncate instead of rounding to nearest even) must fail
    the reference on the GPU's schedules (cuda-emu: decode and a prompt, flash_attn's bf16 tiles) and on the CPU's
    with --kv-dtype bf16; without the knob both match"""
    d = fixture("llama-gqa")
    for target, tokens in (("cuda-emu", 1), ("cuda-emu", 20), ("cpu", 3)):
        args = [LLMCC, "run", "--target", target, d, "--layer", "1", "--tokens", str(tokens), "--pos", "40",
                "--kv-dtype", "bf16"]
        p = run(args)
        assert "matches the reference" in p.stdout, p.stdout
        p = subprocess.run(args + ["--knob", "debug_kv_round=1"], capture_output=True, text=True)
        assert p.returncode != 0 and "DOES NOT MATCH" in p.stdout, (target, tokens, p.stdout, p.stderr)
