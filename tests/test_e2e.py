"""End to end: tiny Hugging Face checkpoints (scripts/make_fixture.py) go
through `llmcc build`, the emitted project is built with make, and the CPU
executable's greedy ids and --logits are compared with the numpy reference
(tests/ref_forward.py, written from the transformers modeling code, not from
the compiler). Also: the real llama2.c model against run.c's outputs, and
the CUDA build of every fixture (compiles and links here; runs only on a
GPU, see scripts/gpu_check.sh)."""
import json
import os
import re
import shutil
import struct
import subprocess
import time

import numpy as np

import ref_forward
from testlib import LLMCC, ROOT, Skip, build_exe, model_fixture, run, shared, tmpdir

KINDS = ["llama-gqa", "qwen2-tied", "llama-linear"]
PROMPT = [1, 4, 7, 10, 13, 40, 77]


def fixture(kind, dtype):
    """the fixture checkpoint KIND in DTYPE, seed 7 (shared with test_argmax, test_cpu_target, test_flash, ...)"""
    return model_fixture(kind, dtype, seed=7)


def build(model_dir, target, extra=()):
    """model_dir's executable `m` for TARGET (built once per content: testlib.build_exe); returns its project"""
    return build_exe(model_dir, target, ["--name", "m"] + list(extra))


def read_logits(path, vocab):
    data = np.fromfile(path, dtype="<f4")
    assert data.size % vocab == 0, "logits file size %d is not a multiple of vocab %d" % (data.size, vocab)
    return data.reshape(-1, vocab)


def check_fixture(kind, dtype, n_ids, check_logits, extra=()):
    d = fixture(kind, dtype)
    check_exe(os.path.join(build(d, "cpu", extra), "m"), d, kind, dtype, n_ids, check_logits)


def check_exe(exe, d, kind, dtype, n_ids, check_logits, kv_bf16=False):
    """exe's greedy ids (the first n_ids) and, with check_logits, every step's logits against ref_forward's
    (kv_bf16: its keys and values rounded as a bf16 KV cache stores them, the GPU's default)"""
    model = ref_forward.load(d)
    ref_ids, ref_logits = ref_forward.greedy(model, PROMPT, 32, kv_bf16=kv_bf16)
    lp = os.path.join(tmpdir("e2e"), "%s-%s-%s.logits" % (kind, dtype, os.path.basename(os.path.dirname(exe))))
    # two threads whatever the cores this process may use (a pytest-xdist worker has one): the kernels' shares of
    # the work and the barriers between them are what these checks run
    p = run([exe, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "32", "--temperature", "0", "--repeat-penalty", "1", "--ids",
             "--ignore-eos", "--logits", lp, "--threads", "2"])
    ours = [int(x) for x in p.stdout.split()]
    assert ours[:n_ids] == list(ref_ids[:n_ids]), "greedy ids differ:\nours %s\nref  %s" % (ours, list(ref_ids))
    assert len(set(ref_ids)) > 1, "degenerate fixture: greedy repeats one token"
    if check_logits:
        got = read_logits(lp, model["cfg"]["vocab_size"] if isinstance(model, dict) and "cfg" in model else np.asarray(ref_logits).shape[1])
        ref = np.asarray(ref_logits, dtype=np.float32)
        assert got.shape == ref.shape, "logits shape %s vs reference %s" % (got.shape, ref.shape)
        for step in range(ref.shape[0]):
            diff = float(np.max(np.abs(got[step] - ref[step])))
            tol = 1e-4 * float(np.max(np.abs(ref[step])))
            assert diff <= tol, "step %d: max |diff| %.3g > %.3g" % (step, diff, tol)


def test_llama_gqa_f32():
    check_fixture("llama-gqa", "f32", 32, True)


def test_qwen2_tied_f32():
    check_fixture("qwen2-tied", "f32", 32, True)


def test_llama_linear_f32():
    check_fixture("llama-linear", "f32", 32, True)


def test_llama_gqa_f32_chunked_prefill():
    # prefill in chunks of 3 tokens: the KV cache must carry across calls
    check_fixture("llama-gqa", "f32", 32, True, extra=("--max-batch", "3"))


def test_bf16_fixtures_greedy():
    for kind in KINDS:
        check_fixture(kind, "bf16", 16, False)


def test_kv_cache_dtypes():
    """The KV cache's dtype: bf16 by default on cuda-emu (the GPU's schedules), f32 on cpu, the other with
    --kv-dtype; each executable's greedy ids and every step's logits against the numpy reference with its keys
    and values rounded (or not) the same way; --info names it"""
    d = fixture("llama-gqa", "f32")
    for target, extra, kv in (("cuda-emu", (), "bf16"), ("cuda-emu", ("--kv-dtype", "f32"), "f32"),
                              ("cpu", ("--kv-dtype", "bf16"), "bf16")):
        exe = os.path.join(build(d, target, extra), "m")
        check_exe(exe, d, "llama-gqa", "f32", 32, True, kv_bf16=kv == "bf16")
        info = run([exe, "--info"]).stdout
        assert re.search(r"^kv cache: %s$" % kv, info, re.M), info
    # the reference's rounding is observable: without it the bf16 cache's logits are off the bound
    model = ref_forward.load(d)
    plain = np.asarray(ref_forward.greedy(model, PROMPT, 32)[1])
    rounded = np.asarray(ref_forward.greedy(model, PROMPT, 32, kv_bf16=True)[1])
    assert np.abs(plain - rounded).max() > 1e-4 * np.abs(plain).max(), "bf16 rounding moves no logit past the bound"


def test_decode_step_is_one_graph_launch():
    """The GPU builds' decode step is one CUDA Graph launch a token (issue 16). model.cu's one-token branch of
    model_forward replays decode_step's graph, one graph launch and no kernel launch of its own; on cuda-emu, which
    runs the captured step as a replay does (pos -1 in every launch, the kernels reading it from device memory; the
    grids of the longest context) and counts the launches a capture holds (CUDA: the graph's nodes), the capture
    holds the launch plan's one-token launches (model_info.decode_launches), and 200 greedy tokens (positions across
    several of flash_decode's key slices) give the ids and every step's logits of --no-graph bit for bit"""
    d = fixture("llama-gqa", "f32")
    cu = run([LLMCC, "compile", d, "--ir", "cuda"]).stdout
    one = re.search(r"if \(n == 1 && m->graph\) \{(.*?)\} else \{", cu, re.S).group(1)
    assert one.count("graph_replay(") == 1 and "<<<" not in one, one
    info = re.search(r"^const ModelInfo model_info = \{(.*?)^\};", cu, re.M | re.S).group(1)
    plan = int(re.search(r"(\d+),\s*\"(?:f32|bf16)\",", info).group(1))   # decode_launches, then kv_dtype
    exe = os.path.join(build(d, "cuda-emu"), "m")
    base = [exe, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "200", "--temperature", "0", "--repeat-penalty", "1",
            "--ids", "--ignore-eos", "--stats"]
    out = {}
    for way in ("graph", "no-graph"):
        lp = os.path.join(tmpdir("e2e"), "graph-%s.logits" % way)
        p = run(base + ["--logits", lp] + (["--no-graph"] if way == "no-graph" else []))
        out[way] = (p.stdout, open(lp, "rb").read())
        want = ("launches per token: 1 (a CUDA Graph; its capture holds %d kernels" % plan if way == "graph"
                else "launches per token: %d (" % plan)
        assert plan > 10 and want in p.stderr, (way, plan, p.stderr)
    assert len(out["graph"][0].split()) == 200 and len(out["graph"][1]) > 0
    assert out["graph"] == out["no-graph"], "the graph's decode differs from the kernels launched one by one"


def test_aidreams_matches_llama2c():
    ref_dir = shared("aidreams260K")
    d = os.path.join(tmpdir("e2e"), "aidreams")
    if not os.path.exists(os.path.join(d, "config.json")):
        run(["python3", os.path.join(ROOT, "scripts", "convert_llama2c.py"), os.path.join(ref_dir, "aidreams260K.bin"),
             os.path.join(ref_dir, "tok512.bin"), d])
    exe = os.path.join(build(d, "cpu"), "m")
    # run.c's -n counts positions including the prompt (and BOS is position 0 but not
    # listed): with "Once upon a time" it generated 64 - len(prompt ids) tokens.
    ref_ids = open(os.path.join(ref_dir, "ref_greedy_prompt.ids.txt")).read().split()
    p = run([exe, "--prompt", "Once upon a time", "--tokenize"])
    assert p.stdout.split() == ["1"] + ref_ids[:12], p.stdout   # BOS, then run.c's prompt tokens
    p = run([exe, "--prompt", "Once upon a time", "-n", "52", "--temperature", "0"])
    want = open(os.path.join(ref_dir, "ref_greedy_prompt.stdout.txt")).read()
    assert p.stdout.strip() == want.strip(), "ours:\n%r\nrun.c:\n%r" % (p.stdout, want)
    p = run([exe, "--prompt", "Once upon a time", "-n", "52", "--temperature", "0", "--ids"])
    assert p.stdout.split() == ref_ids[12:], (p.stdout, ref_ids)
    # no prompt: run.c starts from BOS and generates 127 tokens (-n 128)
    ref_np = open(os.path.join(ref_dir, "ref_greedy_noprompt.ids.txt")).read().split()
    p = run([exe, "--prompt-ids", "1", "-n", str(len(ref_np)), "--temperature", "0", "--ids", "--ignore-eos"])
    assert p.stdout.split() == ref_np, (p.stdout, ref_np)


def gpu_present():
    return bool(shutil.which("nvidia-smi")) and run(["nvidia-smi", "-L"], check=False).returncode == 0


def test_cuda_builds_every_fixture():
    """Every fixture builds for CUDA without warnings and without a libcudart dependency; on a GPU the
    executable's greedy ids (and f32 logits) match the numpy reference as the CPU build's do, without one it
    says so in one line and exits non-zero."""
    if not shutil.which("nvcc"):
        raise Skip("nvcc is not installed")
    gpu = gpu_present()
    for kind in KINDS:
        for dtype in ("f32", "bf16"):
            out = fixture(kind, dtype) + "-cuda"
            run([LLMCC, "build", fixture(kind, dtype), "-o", out, "--target", "cuda", "--name", "m"])
            p = run(["make", "-C", out, "-j2"])
            assert "warning" not in (p.stdout + p.stderr).lower(), "nvcc warnings:\n" + p.stdout + p.stderr
            ldd = run(["ldd", os.path.join(out, "m")], check=False).stdout
            assert "libcudart" not in ldd, ldd
            if gpu:
                # the same checks as the CPU build's (test_llama_gqa_f32 ..., test_bf16_fixtures_greedy)
                check_exe(os.path.join(out, "m"), fixture(kind, dtype), kind, dtype, 32 if dtype == "f32" else 16, dtype == "f32",
                          kv_bf16=True)
                continue
            # without a GPU the executable must say so in one line and exit non-zero
            r = run([os.path.join(out, "m"), "--prompt-ids", "1,2", "-n", "2"], check=False)
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            assert r.returncode != 0 and len(lines) == 1 and "GPU" in lines[0], (r.returncode, r.stderr)
            # --info names the device it has (none here), the runtime and the architecture of the kernels
            info = run([os.path.join(out, "m"), "--info"]).stdout
            assert re.search(r"^compute: no CUDA GPU \((no NVIDIA driver|driver CUDA \d+\.\d+); runtime CUDA \d+\.\d+, "
                             r"kernels for sm_90\)$", info, re.M), info
            assert re.search(r"^kv cache: bf16$", info, re.M), info   # the GPU's default
        # every launch is followed by its LLMCC_CUDA_CHECK check, naming the kernel and its graph op
        src = open(os.path.join(out, "model.cu")).read()
        launches = re.findall(r"^\s*(k_\w+)<<<.*\n(?:.*\n)*?\s*LAUNCH_CHECK\(\"(\w+)\", \"([\w.]+)\", (l|-1)\);", src, re.M)
        assert len(launches) == src.count("<<<") > 0 and all(k == n for k, n, _, _ in launches), launches[:3]


def test_compile_every_ir_level():
    d = fixture("qwen2-tied", "f32")
    for level in ("graph", "tensor", "loop", "tile", "kernel", "cuda", "c"):
        p = run([LLMCC, "compile", d, "--ir", level])
        assert len(p.stdout) > 200, level
    # the printed C is the translation unit `llmcc build` emits, and compiles
    c = run([LLMCC, "compile", d, "--ir", "c"]).stdout
    src = os.path.join(tmpdir("e2e"), "ir_c.c")
    open(src, "w").write(c)
    run(["cc", "-std=c11", "-O0", "-fopenmp", "-Wall", "-Werror", "-Wno-unknown-pragmas", "-I" + ROOT, "-I" + os.path.join(ROOT, "runtime"),
         "-c", src, "-o", src + ".o"])
    if shutil.which("nvcc"):
        cu = run([LLMCC, "compile", d, "--ir", "cuda"]).stdout
        src = os.path.join(tmpdir("e2e"), "ir_cuda.cu")
        open(src, "w").write(cu)
        run(["nvcc", "-arch=sm_90", "-I" + ROOT, "-c", src, "-o", src + ".o"])


def test_compiler_over_every_fixture():
    """Every fixture kind of scripts/make_fixture.py that needs no outside tokenizer through `llmcc build` (the
    whole pipeline, packing included, without make) for every target, and in bf16 for the cpu target: what
    make test-asan runs the sanitized compiler over."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_fixture", os.path.join(ROOT, "scripts", "make_fixture.py"))
    make_fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_fixture)
    top = tmpdir("e2e_every_fixture")
    for kind in make_fixture.KINDS + make_fixture.FAMILY_KINDS + ("llama-k",):
        for dtype, targets in (("f32", ("cpu", "cuda-emu", "cuda")), ("bf16", ("cpu",))):
            d = model_fixture(kind, dtype, seed=7)
            for target in targets:
                out = os.path.join(top, "%s-%s-%s" % (kind, dtype, target))
                shutil.rmtree(out, ignore_errors=True)
                p = run([LLMCC, "build", d, "-o", out, "--target", target, "--name", "m"])
                src = os.path.join(out, "model.cu" if target == "cuda" else "model.c")
                assert os.path.getsize(src) > 1000 and "launches per step" in p.stderr + p.stdout, (kind, target)
                shutil.rmtree(out)


def test_real_configs_compile():
    cfgs = shared("hf-configs")
    for fn in sorted(os.listdir(cfgs)):
        if not fn.endswith("config.json") or "generation" in fn:
            continue
        d = os.path.join(tmpdir("configs"), fn.replace(".json", ""))
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(cfgs, fn), os.path.join(d, "config.json"))
        cfg = json.load(open(os.path.join(d, "config.json")))
        # Mistral-7B-v0.1: its 4096-key sliding window is exact up to a 4096-position context
        win = cfg.get("sliding_window") if cfg.get("model_type") == "mistral" else None
        p = run([LLMCC, "compile", d, "--ir", "kernel"] + (["--ctx", str(win)] if win else []))
        assert "distinct kernels" in p.stdout, fn


def test_build_refuses_foreign_dir_and_leaves_nothing_on_failure():
    d = fixture("llama-gqa", "f32")
    foreign = os.path.join(tmpdir("e2e"), "foreign")
    os.makedirs(foreign, exist_ok=True)
    open(os.path.join(foreign, "keep.txt"), "w").write("mine")
    r = run([LLMCC, "build", d, "-o", foreign, "--target", "cpu"], check=False)
    assert r.returncode == 1 and "refusing" in r.stderr, r.stderr
    assert os.listdir(foreign) == ["keep.txt"]
    # a checkpoint with a missing tensor: error names it, no output directory appears
    bad = os.path.join(tmpdir("e2e"), "missing-tensor")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(d, bad)
    cfg = open(os.path.join(bad, "config.json")).read().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3')
    open(os.path.join(bad, "config.json"), "w").write(cfg)
    out = bad + "-out"
    r = run([LLMCC, "build", bad, "-o", out, "--target", "cpu"], check=False)
    assert r.returncode == 1 and "model.layers.2." in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert not os.path.exists(out)
    assert not [f for f in os.listdir(tmpdir("e2e")) if f.startswith("missing-tensor-out.tmp")]


def test_killed_build_leftover_swept():
    """A build killed with SIGKILL leaves OUT.tmp-PID behind; the next build of OUT removes it (its process is gone)
    and says so in one line; another live process's directory stays"""
    d = fixture("llama-gqa", "f32")
    out = os.path.join(tmpdir("e2e"), "swept")
    p = subprocess.Popen([LLMCC, "build", d, "-o", out, "--target", "cpu"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    left = "%s.tmp-%d" % (out, p.pid)
    t0 = time.time()
    while not os.path.exists(left) and p.poll() is None and time.time() - t0 < 60:
        time.sleep(0.001)
    p.kill()
    p.wait()
    if not os.path.exists(left):   # it finished first, or had not started writing: make the leftover as it would be
        os.makedirs(os.path.join(left, "runtime"))
    live = "%s.tmp-%d" % (out, os.getpid())   # this test's own: a live process
    os.makedirs(live, exist_ok=True)
    r = run([LLMCC, "build", d, "-o", out, "--target", "cpu"])
    assert not os.path.exists(left) and "llmcc: removed %s (left by a build that did not finish)" % left in r.stderr, \
        r.stderr
    assert os.path.isdir(live)
    os.rmdir(live)


def test_build_without_target_builds_for_what_is_here():
    """`llmcc build` without --target picks the target as `make` does: cuda where nvidia-smi finds a GPU (and nvcc
    is there), else cpu, and says which."""
    gpu = subprocess.run("command -v nvcc >/dev/null && nvidia-smi -L >/dev/null 2>&1", shell=True).returncode == 0
    out = os.path.join(tmpdir("build_default_target"), "p")
    p = run([LLMCC, "build", fixture("llama-gqa", "f32"), "-o", out])
    assert os.path.exists(os.path.join(out, "model.cu" if gpu else "model.c")), os.listdir(out)
    said = "(for the GPU here; --target cpu builds for the CPU)" if gpu else \
        "(for the CPU: no NVIDIA GPU here; --target cuda builds for one)"
    assert said in p.stderr, p.stderr
