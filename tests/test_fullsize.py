"""Full-size models, tested small: `llmcc build --random-weights` from a
config.json alone, `--dtype` conversion at build time, sharded checkpoints
from scripts/make_synthetic_checkpoint, the packer's bounded memory, MOVE_PAYLOAD
and --compress payloads, and the
real configs (../shared/assets/hf-configs) through every IR level and nvcc.

References: the numpy forward pass (tests/ref_forward.py) run on the weights
as the payload holds them or as numpy rounds them; numpy's float16 and the
round-to-nearest-even bf16 rule for conversions. The 7B benchmark itself is
scripts/bench_build, not a test."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np

import ref_forward
from testlib import LLMCC, ROOT, Skip, build_c, model_fixture, run, shared, tmpdir

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_fixture  # noqa: E402

PROMPT = [1, 4, 7, 10, 13, 40, 77]
PDT = {0: "f32", 1: "f16", 2: "bf16", 3: "i32"}
SYNTH = os.path.join(ROOT, "scripts", "make_synthetic_checkpoint")


def fixture(kind, dtype):
    return model_fixture(kind, dtype, seed=7)


def config_only(kind):
    """A directory holding only the fixture's config.json: no weights, no tokenizer."""
    d = os.path.join(tmpdir("fullsize"), "cfg-" + kind)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(fixture(kind, "f32"), "config.json"), os.path.join(d, "config.json"))
    return d


def build(model_dir, out, extra=(), make=True):
    run([LLMCC, "build", model_dir, "-o", out, "--target", "cpu", "--name", "m"] + list(extra))
    if make:
        run(["make", "-C", out, "-j2", "OPT=-O1"])   # -O1: half the build time; these tests are about the payload
    return os.path.join(out, "m")


def read_payload(path):
    """{name: (dtype name, shape, raw ndarray as stored)} from a payload.bin (runtime/payload.h)."""
    b = open(path, "rb").read()
    magic, ver, n, table_off, tok_off, tok_size, data_off, total = struct.unpack_from("<8sII5Q", b, 0)
    assert magic == b"LLMCCWT1" and total == len(b), (magic, total, len(b))
    out = {}
    for i in range(n):
        e = table_off + 168 * i
        name = b[e:e + 112].split(b"\0")[0].decode()
        dtype, ndim, s0, s1, s2, s3, off, nbytes = struct.unpack_from("<II6Q", b, e + 112)
        shape = (s0, s1, s2, s3)[:ndim]
        npdt = {0: "<f4", 1: "<u2", 2: "<u2", 3: "<i4"}[dtype]
        out[name] = (PDT[dtype], shape, np.frombuffer(b, npdt, nbytes // np.dtype(npdt).itemsize, off).reshape(shape))
    return out, tok_size


def as_f32(dt, raw):
    if dt == "f32":
        return raw.astype(np.float32)
    if dt == "f16":
        return raw.view("<f2").astype(np.float32)
    return (raw.astype(np.uint32) << 16).view(np.float32)


def ref_dir_from(weights, config_dir, name):
    """A checkpoint (f32) with exactly these weights and config_dir's config.json, for ref_forward."""
    d = os.path.join(tmpdir("fullsize"), name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(config_dir, "config.json"), os.path.join(d, "config.json"))
    make_fixture.write_safetensors(os.path.join(d, "model.safetensors"), list(weights.items()), "f32")
    return d


def run_ids_logits(exe, n, tag, prompt=PROMPT):
    lp = os.path.join(tmpdir("fullsize"), tag + ".logits")
    p = run([exe, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n), "--temperature", "0", "--repeat-penalty", "1",
             "--ids", "--ignore-eos", "--logits", lp])
    return [int(x) for x in p.stdout.split()], lp


def check_against_ref(exe, ref_model_dir, tag, n=8, prompt=PROMPT, bf16=False):
    """Our greedy ids and logits against ref_forward teacher-forced on our ids (no near-tie flakiness).
    bf16: the executable's linears are bf16, so every call went through the cpu target's bf16 dot products
    (activations rounded to bf16: ref_forward's bf16_x_rows). That rounding is discontinuous: f32 last-bit
    differences upstream flip single roundings (test_mma's gemm_tc check measured it), so the tolerance adds
    the reference's own |rounded - unrounded| per step twice: once for the rounding, once for the flipped
    roundings, which every decode step's rounding (since cpu_rows' dot16) makes as many again."""
    ids, lp = run_ids_logits(exe, n, tag, prompt)
    assert len(ids) == n, ids
    model = ref_forward.load(ref_model_dir)
    V = model["vocab"]
    got = np.fromfile(lp, dtype="<f4").reshape(-1, V)
    seq = list(prompt) + ids[:-1]
    plain = ref_forward.logits_all(model, seq)[len(prompt) - 1:]
    ref = plain
    if bf16:   # every row: the prompt's and the decode steps' linears take bf16 dot products
        ref = ref_forward.logits_all(model, seq, bf16_x_rows=len(seq))[len(prompt) - 1:]
    assert got.shape == ref.shape, (got.shape, ref.shape)
    for k in range(n):
        diff = float(np.max(np.abs(got[k] - ref[k])))
        # the rounding's move twice: every step rounds (the decode steps' too), and f32 last-bit differences
        # upstream flip single roundings, which move the logits as far again (test_default_model does the same)
        tol = 1e-4 * float(np.max(np.abs(ref[k]))) + (2 if bf16 else 1) * float(np.max(np.abs(ref[k] - plain[k])))
        assert diff <= tol, "%s step %d: max |diff| %.3g > %.3g" % (tag, k, diff, tol)
        assert int(np.argmax(got[k])) == ids[k]
    return ids


# ---------------------------------------------------------------- --random-weights
def test_random_weights_from_config_only():
    for kind in ("llama-gqa", "qwen2-tied"):
        d = config_only(kind)
        out = os.path.join(tmpdir("fullsize"), "rw-" + kind)
        exe = build(d, out, ["--random-weights", "5"])
        tensors, tok_size = read_payload(os.path.join(out, "payload.bin"))
        assert tok_size == 0, "no tokenizer.json: the payload must hold no tokenizer"
        cfg = json.load(open(os.path.join(d, "config.json")))
        weights = {}
        for name, (dt, shape, raw) in tensors.items():
            assert dt == "f32", (name, dt)   # the fixture's torch_dtype is float32
            w = as_f32(dt, raw)
            weights[name] = w
            if name.endswith("norm.weight"):
                assert abs(float(w.mean()) - 1.0) < 0.01 and float(np.abs(w - 1).max()) <= 0.0347, name
            elif w.size >= 4096:
                assert abs(float(w.std()) - 0.02) < 0.002 and abs(float(w.mean())) < 0.002, (name, w.std(), w.mean())
                assert float(np.abs(w).max()) <= 0.0347, name
        assert ("lm_head.weight" in weights) == (not cfg["tie_word_embeddings"])
        # the executable computes with exactly the weights it carries
        check_against_ref(exe, ref_dir_from(weights, d, "rw-ref-" + kind), "rw-" + kind)
        # no tokenizer: ids only, said in one line
        r = run([exe, "--prompt", "hello", "-n", "2"], check=False)
        assert r.returncode == 1 and "no tokenizer" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
        assert "tokenizer: none" in run([exe, "--info"]).stdout
    # deterministic: the same seed packs the same bytes, another seed others; config dtype follows --dtype
    d = config_only("llama-gqa")
    a, b, c = (os.path.join(tmpdir("fullsize"), "rw-seed-%s" % s) for s in ("a", "b", "c"))
    build(d, a, ["--random-weights", "5"], make=False)
    build(d, b, ["--random-weights", "5"], make=False)
    build(d, c, ["--random-weights", "6", "--dtype", "bf16"], make=False)
    pa, pb = (open(os.path.join(x, "payload.bin"), "rb").read() for x in (a, b))
    assert pa == pb
    tc, _ = read_payload(os.path.join(c, "payload.bin"))
    ta, _ = read_payload(os.path.join(a, "payload.bin"))
    assert all(dt == "bf16" for dt, _, _ in tc.values())
    w5, w6 = ta["model.layers.0.mlp.up_proj.weight"][2], as_f32("bf16", tc["model.layers.0.mlp.up_proj.weight"][2])
    assert float(np.abs(w5 - w6).mean()) > 0.01, "another seed must give other weights"


def test_random_weights_ignores_checkpoint_weights():
    # a directory with weights: --random-weights packs random ones, not the checkpoint's
    d = fixture("llama-gqa", "f32")
    out = os.path.join(tmpdir("fullsize"), "rw-over-ckpt")
    build(d, out, ["--random-weights", "1"], make=False)
    tensors, tok_size = read_payload(os.path.join(out, "payload.bin"))
    real = ref_forward.read_weights(d)
    w = tensors["model.layers.0.self_attn.q_proj.weight"][2]
    assert not np.array_equal(w, real["model.layers.0.self_attn.q_proj.weight"])
    assert tok_size > 0, "the checkpoint's tokenizer is still packed"


def test_make_move_payload():
    """make MOVE_PAYLOAD=1 turns payload.bin into the executable: same bytes, same output, one copy on disk."""
    d = config_only("llama-gqa")
    out = os.path.join(tmpdir("fullsize"), "move-payload")
    exe = build(d, out, ["--random-weights", "9"])
    want = run([exe, "--prompt-ids", "1,2,3", "-n", "6", "--ids", "--temperature", "0"]).stdout
    pay = open(os.path.join(out, "payload.bin"), "rb").read()
    copied = open(exe, "rb").read()
    os.remove(exe)
    run(["make", "-C", out, "MOVE_PAYLOAD=1"])
    assert not os.path.exists(os.path.join(out, "payload.bin"))
    moved = open(exe, "rb").read()
    assert moved == copied, "the moved executable differs from the copied one"
    magic, ver, _, off, size, _sum = struct.unpack_from("<8sIIQQQ", moved, len(moved) - 64)
    assert magic == b"LLMCCEND" and off % 65536 == 0 and moved[off:off + size] == pay
    assert "payload ok" in run([exe, "--verify"]).stdout
    assert run([exe, "--prompt-ids", "1,2,3", "-n", "6", "--ids", "--temperature", "0"]).stdout == want
    # relinking without payload.bin: one line saying what to do
    os.utime(os.path.join(out, "m.elf"))
    r = run(["make", "-C", out, "MOVE_PAYLOAD=1"], check=False)
    assert r.returncode != 0 and "llmcc build again" in r.stderr, r.stderr


def test_compressed_payload():
    """--compress: zstd frames with byte planes, decoded at start; same logits, smaller file, damage caught."""
    d = fixture("llama-gqa", "bf16")
    out = os.path.join(tmpdir("fullsize"), "z-comp")
    exe = build(d, out, ["--compress"])
    assert "COMPRESS ?= 3" in open(os.path.join(out, "options.mk")).read()
    z_exe = exe + "-z"
    os.replace(exe, z_exe)
    b, lb = run_ids_logits(z_exe, 12, "z-comp")
    # --stats: the start-up's weights are decompressed (their rate counts the decoding), not mapped
    st = run([z_exe, "--prompt-ids", "1,2", "-n", "1", "--ids", "--stats"]).stderr
    assert re.search(r"the weights decompressed in [\d.]+ ms", st), st
    # the same project with the payload appended raw (only the append step runs again)
    run(["make", "-C", out, "COMPRESS=0"])
    raw_exe = exe
    a, la = run_ids_logits(raw_exe, 12, "z-raw")
    assert a == b and open(la, "rb").read() == open(lb, "rb").read(), "compressed build computes differently"
    zb = open(z_exe, "rb").read()
    magic, ver, _, off, size, _sum = struct.unpack_from("<8sIIQQQ", zb, len(zb) - 64)
    assert zb[off:off + 8] == b"LLMCCZ01", zb[off:off + 8]
    nf, raw_size, frame_size = struct.unpack_from("<IQQ", zb, off + 12)
    assert raw_size == os.path.getsize(os.path.join(out, "payload.bin")) and size < raw_size
    planes = [struct.unpack_from("<I", zb, off + size - 24 * nf + 24 * i + 16)[0] for i in range(nf)]
    assert set(planes) <= {1, 2}
    assert "payload ok" in run([z_exe, "--verify"]).stdout
    # one damaged byte inside the compressed data: a one-line error at start, never garbage
    bad = os.path.join(tmpdir("fullsize"), "z-bad")
    dmg = bytearray(zb)
    dmg[off + 64 + (size - 64 - 24 * nf) // 2] ^= 0x55
    open(bad, "wb").write(bytes(dmg))
    os.chmod(bad, 0o755)
    r = run([bad, "--prompt-ids", "1,2", "-n", "2", "--ids"], check=False)
    assert r.returncode == 1 and "damaged" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    r = run([bad, "--verify"], check=False)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr


# ---------------------------------------------------------------- --dtype
def test_dtype_f32_to_bf16_and_f16():
    d = fixture("llama-gqa", "f32")
    src = ref_forward.read_weights(d)
    rounders = {
        "bf16": lambda a: (make_fixture.f32_to_bf16_bits(a).astype(np.uint32) << 16).view(np.float32),
        "f16": lambda a: a.astype(np.float16).astype(np.float32),
    }
    for dt, rnd in rounders.items():
        out = os.path.join(tmpdir("fullsize"), "dtype-f32-to-" + dt)
        exe = build(d, out, ["--dtype", dt])
        tensors, _ = read_payload(os.path.join(out, "payload.bin"))
        rounded = {}
        for name, a in src.items():
            pdt, shape, raw = tensors[name]
            assert pdt == dt, (name, pdt)
            rounded[name] = rnd(a)
            want_bits = make_fixture.f32_to_bf16_bits(a) if dt == "bf16" else a.astype("<f2").view("<u2")
            assert np.array_equal(raw, want_bits.reshape(raw.shape)), "%s: %s bits differ from numpy's rounding" % (name, dt)
        assert "%s (%d tensors" % (dt, len(src)) in run([exe, "--info"]).stdout
        check_against_ref(exe, ref_dir_from(rounded, d, "dtype-ref-" + dt), "dtype-" + dt, n=16, bf16=dt == "bf16")


def test_dtype_bf16_to_f32():
    d = fixture("qwen2-tied", "bf16")
    out = os.path.join(tmpdir("fullsize"), "dtype-bf16-to-f32")
    exe = build(d, out, ["--dtype", "f32"])
    tensors, _ = read_payload(os.path.join(out, "payload.bin"))
    src = ref_forward.read_weights(d)   # bf16 widened to f32 by numpy
    for name, a in src.items():
        pdt, shape, raw = tensors[name]
        assert pdt == "f32" and np.array_equal(raw, a.reshape(raw.shape)), name
    check_against_ref(exe, d, "dtype-bf16-f32", n=16)


def test_conversions_match_numpy():
    """quant.c's f32 -> f16 / bf16 and back against numpy on edge cases and random bit patterns."""
    src = os.path.join(tmpdir("fullsize"), "conv_driver.c")
    with open(src, "w") as f:
        f.write(r'''
#include "quant.h"
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    (void)argc;
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) return 2;
    float x;
    while (fread(&x, 4, 1, in) == 1) {
        uint16_t h = cvt_f32_to_f16(x), b = cvt_f32_to_bf16(x);
        float hb = cvt_f16_to_f32(h), bb = cvt_bf16_to_f32(b);
        fwrite(&h, 2, 1, out); fwrite(&b, 2, 1, out); fwrite(&hb, 4, 1, out); fwrite(&bb, 4, 1, out);
    }
    fclose(in); fclose(out);
    return 0;
}
''')
    exe = build_c("conv_driver", [src, "compiler/quant.c", "compiler/util.c"])
    rng = np.random.default_rng(3)
    bits = np.concatenate([
        rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32),
        # around the f16 subnormal / normal / overflow boundaries and the halfway points
        (np.float32([0, -0.0, 2**-24, 2**-25, 1.5 * 2**-25, 2**-14, 65504, 65519.99, 65520, 65536, 1e30, np.inf, -np.inf])
         .view(np.uint32)),
        (np.arange(0, 2**16, dtype=np.uint32) << 13) | 0x1000,   # every f16 value plus exactly half an f16 ulp
        (np.arange(0, 2**16, dtype=np.uint32) << 16) | 0x8000,   # every bf16 value plus exactly half a bf16 ulp
    ]).astype("<u4")
    x = bits.view("<f4")
    inp, outp = os.path.join(tmpdir("fullsize"), "conv.in"), os.path.join(tmpdir("fullsize"), "conv.out")
    x.tofile(inp)
    run([exe, inp, outp])
    rec = np.fromfile(outp, dtype=[("h", "<u2"), ("b", "<u2"), ("hb", "<f4"), ("bb", "<f4")])
    nan = np.isnan(x)
    with np.errstate(over="ignore", invalid="ignore"):
        want_h = x.astype("<f2").view("<u2")
    h_nan = ((rec["h"] & 0x7c00) == 0x7c00) & ((rec["h"] & 0x3ff) != 0)
    assert np.array_equal(h_nan, nan), "f16 NaN-ness"
    bad = np.nonzero((rec["h"] != want_h) & ~nan)[0]
    assert bad.size == 0, "f16 differs from numpy for %s" % [(hex(int(bits[i])), hex(int(rec["h"][i])), hex(int(want_h[i]))) for i in bad[:5]]
    want_b = make_fixture.f32_to_bf16_bits(x)
    assert np.array_equal(rec["b"], want_b), "bf16 rounding"
    # widening back is exact
    hh = rec["h"][~h_nan]
    assert np.array_equal(rec["hb"][~h_nan], hh.view("<f2").astype(np.float32))
    bb = rec["b"][~nan]
    assert np.array_equal(rec["bb"][~nan].view("<u4"), bb.astype(np.uint32) << 16)


# ---------------------------------------------------------------- synthetic sharded checkpoints
def test_synthetic_sharded_checkpoint():
    for kind in ("qwen2-tied", "llama-linear"):
        cfgdir = config_only(kind)
        d = os.path.join(tmpdir("fullsize"), "synth-" + kind)
        shutil.rmtree(d, ignore_errors=True)
        run([sys.executable, SYNTH, os.path.join(cfgdir, "config.json"), d, "--shard-mb", "0.05", "--seed", "2"])
        idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        shards = sorted(set(idx["weight_map"].values()))
        assert len(shards) >= 3, shards
        assert sorted(f for f in os.listdir(d) if f.endswith(".safetensors")) == shards
        size = 0
        for s in shards:
            with open(os.path.join(d, s), "rb") as f:
                (hl,) = struct.unpack("<Q", f.read(8))
                hdr = json.loads(f.read(hl))
            hdr.pop("__metadata__", None)
            assert all(idx["weight_map"][k] == s and v["dtype"] == "BF16" for k, v in hdr.items())
            size += sum(v["data_offsets"][1] - v["data_offsets"][0] for v in hdr.values())
        assert idx["metadata"]["total_size"] == size
        w = ref_forward.read_weights(d)
        for name, a in w.items():
            if name.endswith("norm.weight"):
                assert np.all(a == 1.0), name
            else:
                assert 2**-8 <= float(np.abs(a).min()) and float(np.abs(a).max()) < 2**-4, name
        exe = build(d, os.path.join(tmpdir("fullsize"), "synth-%s-cpu" % kind), ["--timings"])
        check_against_ref(exe, d, "synth-" + kind, bf16=True)


def _peak_memory_mib(err):
    """llmcc's own peak resident memory, as --timings prints it (VmHWM). Not
    wait4's ru_maxrss: that one also counts this Python process, whose pages the
    child held between fork and exec (CI once saw 65 MiB that way)."""
    m = re.search(r"peak memory (\d+) MiB", err)
    assert m, err
    return int(m.group(1))


def test_packing_memory_is_bounded():
    """Packing 180 MB of bf16 weights, as they are, converted to f32 (360 MB), or generated,
    keeps llmcc's peak RSS far below the weights' size: the packer streams."""
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
        "intermediate_size": 2816, "num_hidden_layers": 6, "num_attention_heads": 8,
        "num_key_value_heads": 8, "vocab_size": 8192, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    }
    base = tmpdir("fullsize")
    cfgp = os.path.join(base, "mem-config.json")
    json.dump(cfg, open(cfgp, "w"))
    d = os.path.join(base, "synth-mem")
    if not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        run([sys.executable, SYNTH, cfgp, d, "--shard-mb", "64"])
    total = json.load(open(os.path.join(d, "model.safetensors.index.json")))["metadata"]["total_size"] / 2**20
    assert total > 170, total
    for extra in ([], ["--dtype", "f32"], ["--random-weights", "3"]):
        out = os.path.join(base, "mem-out")
        err = run([LLMCC, "build", d, "-o", out, "--target", "cpu", "--timings"] + extra).stderr
        assert "packing" in err, err
        rss = _peak_memory_mib(err)
        assert rss < 64, "llmcc %s peaked at %.0f MiB RSS packing %.0f MiB of weights" % (" ".join(extra), rss, total)
        shutil.rmtree(out)


# ---------------------------------------------------------------- real configs
# The three the issue names get a full sm_90 object (nvcc + ptxas); the other
# configs stop at PTX (nvcc's front end and code generator, ~1 s each): their
# TUs differ from these only in the shape constants.
FULL_NVCC = ("Qwen2.5-7B", "Llama-3.1-8B", "TinyLlama", "Qwen3-0.6B", "Qwen3-8B", "Mistral-7B-v0.3")


def test_real_configs_every_level_and_nvcc():
    """Every real config.json of ../shared/assets/hf-configs (full-size Llama, Qwen2/3, Mistral shapes) through
    every IR level, and its CUDA source through nvcc (a full compile for FULL_NVCC, PTX for the rest).
    About a minute on the 2-core machine, nearly all of it nvcc on full-size kernels: the one test that compiles
    the real shapes' CUDA (their tile sizes, split-K and register use differ from the fixtures'); its nvcc calls
    go through ccache, so a second run is quick."""
    cfgs = shared("hf-configs")
    nvcc = shutil.which("nvcc")
    names = sorted(fn for fn in os.listdir(cfgs) if fn.endswith("config.json") and "generation" not in fn)
    assert len(names) >= 5, names
    jobs = []
    for fn in names:
        d = os.path.join(tmpdir("fullsize"), "real-" + fn.replace(".json", ""))
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(cfgs, fn), os.path.join(d, "config.json"))
        cfg = json.load(open(os.path.join(d, "config.json")))
        # Mistral-7B-v0.1's 4096-key sliding window is exact only up to a 4096-position context
        win = cfg.get("sliding_window") if cfg.get("model_type") == "mistral" else None
        ctx = ["--ctx", str(win)] if win and win < 8192 else []
        if ctx:
            p = run([LLMCC, "compile", d, "--ir", "graph"], check=False)
            assert p.returncode == 1 and "sliding_window: %d is smaller than the compiled context 8192" % win in p.stderr
        for level in ("graph", "tensor", "loop", "tile", "kernel", "c"):
            p = run([LLMCC, "compile", d, "--ir", level] + ctx)
            assert len(p.stdout) > 200, (fn, level)
        g = run([LLMCC, "compile", d, "--ir", "graph"] + ctx).stdout
        assert "model.layers.%d." % (cfg["num_hidden_layers"] - 1) in g, fn
        # Qwen3: the per-head q/k norms are in the graph
        assert ("self_attn.q_norm" in g) == (cfg.get("model_type") == "qwen3"), fn
        cu = run([LLMCC, "compile", d, "--ir", "cuda"] + ctx).stdout
        assert "__global__" in cu, fn
        src = os.path.join(d, "model.cu")
        open(src, "w").write(cu)
        full = any(fn.startswith(k) for k in FULL_NVCC)
        jobs.append((fn, (os.environ.get("NVCC") or nvcc or "nvcc").split() + ["-arch=sm_90", "-O2", "-I" + ROOT, "-I" + os.path.join(ROOT, "runtime")]
                     + (["-c", src, "-o", src + ".o"] if full else ["--ptx", src, "-o", src + ".ptx"])))
    assert sum(1 for j in jobs if "-c" in j[1]) == len(FULL_NVCC), [j[0] for j in jobs]
    if not nvcc:
        raise Skip("nvcc is not installed: every IR level checked, the CUDA TUs not compiled")
    running = []
    def reap(fn, p):
        out, err = p.communicate()
        assert p.returncode == 0, fn + ":\n" + err
        assert "warning" not in (out + err).lower(), fn + ":\n" + err
    for fn, cmd in jobs:   # two at a time: the machine has 2 cores
        if len(running) == 2:
            reap(*running.pop(0))
        running.append((fn, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for r in running:
        reap(*r)


def test_build_option_errors():
    d = config_only("llama-gqa")
    out = os.path.join(tmpdir("fullsize"), "opt-err")
    for args, word in ((["--compress=0"], "--compress"), (["--dtype", "q4"], "--dtype"),
                       (["--random-weights", "x"], "--random-weights"), (["--random-weights", "-1"], "--random-weights")):
        r = run([LLMCC, "build", d, "-o", out, "--target", "cpu"] + args, check=False)
        assert r.returncode == 1 and word in r.stderr and len(r.stderr.splitlines()) == 1, (args, r.stderr)
        assert not os.path.exists(out)
    # without --random-weights a config-only directory is an error naming it
    r = run([LLMCC, "build", d, "-o", out, "--target", "cpu"], check=False)
    assert r.returncode == 1 and "no weights" in r.stderr, r.stderr
    h = run([LLMCC, "--help"]).stdout
    for flag in ("--dtype", "--random-weights", "--timings", "--compress"):
        assert flag in h, flag
