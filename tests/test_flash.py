"""Flash attention (loop_flash's online-softmax rewrite, the flash_attn and
flash_combine schedules) through the C backend, which runs the GPU schedule
as written: blocks of (tokens, kv head, key slice), a warp per row, lane per
key, shuffle trees, K/V tiles in shared memory.

References are independent of the compiler: numpy's softmax(q k^T) v from
the PyTorch definition (test_torch_expr.sdpa) on the inputs `llmcc run
--dump` writes, and tests/ref_forward.py (transformers' modeling code) for
whole models. Shapes cover what the schedule has to get right: query and key
counts that are not multiples of the 32-key tile, head sizes that are not
multiples of 32 lanes (partial accumulator sets), causal rows that see one
key, key slices that are empty (split-KV with few keys), batch dims
flattened into heads, GQA groups sharing a staged tile, and every variant
(prefill blocks of several tokens, decode split over the keys + combine)."""
import os
import re

import numpy as np

import ref_forward
from test_e2e import build, fixture, read_logits
from test_torch_expr import dump_run, sdpa
from testlib import LLMCC, run

SDPA = "F.scaled_dot_product_attention(torch.randn(%s), torch.randn(%s), torch.randn(%s)%s)"
# (q, k, v shapes, causal)
SHAPES = [
    ("2, 3, 37, 48", "2, 3, 37, 48", "2, 3, 37, 24", True),    # hd, hv not multiples of 32; 37 queries: a partial tile
    ("1, 5, 16", "1, 70, 16", "1, 70, 40", False),            # 5 queries over 70 keys: decode variant, 3 slices
    ("4, 1, 64", "4, 300, 64", "4, 300, 64", True),           # causal with one query: only key 0, other slices empty
    ("1, 2, 40, 128", "1, 2, 40, 128", "1, 2, 40, 128", True),  # head_dim 128 (Qwen2.5 / Llama): 4 accumulators per lane
    ("3, 33, 8", "3, 65, 8", "3, 65, 8", False),              # tiny heads, keys a tile and one over
]
# knobs that pick other variants of the same schedule
KNOBS = [[], ["--knob", "flash_split=1"], ["--knob", "flash_split=4"], ["--knob", "flash_min_n=0"],
         ["--knob", "flash_min_n=0", "--knob", "flash_tokens=3"]]


def schedules(expr, knobs):
    p = run([LLMCC, "compile", "-c", expr, "--ir", "tile"] + knobs)
    return re.findall(r"schedule (\w+)", p.stdout)


def test_sdpa_against_numpy_every_variant():
    n = 0
    for qs, ks, vs, causal in SHAPES:
        expr = SDPA % (qs, ks, vs, ", is_causal=True" if causal else "")
        for knobs in KNOBS:
            sched = schedules(expr, knobs)
            assert sched[0] == "flash_attn" and set(sched) <= {"flash_attn", "flash_combine"}, "%s %s: %s" % (expr, knobs, sched)
            # the flash schedules run on cuda-emu (the knobs are theirs); the CPU target's cpu_attn once
            for target in ("cuda-emu",) + (("cpu",) if not knobs else ()):
                p, t = dump_run(expr, "flash%d" % n, ["--target", target] + knobs)
                n += 1
                assert p.returncode == 0 and "matches the reference" in p.stdout, "%s %s %s:\n%s%s" % (
                    target, expr, knobs, p.stdout, p.stderr)
                out = t.pop("output")
                want = sdpa(t["input0"], t["input1"], t["input2"], is_causal=causal)
                # f32 kernels against float64 numpy: llmcc run's own bound
                tol = 1e-4 * np.abs(want) + 1e-5 * np.abs(want).max()
                bad = np.abs(out - want) > tol
                assert not bad.any(), "%s %s %s: %d values differ from numpy, first at %s: %r vs %r" % (
                    target, expr, knobs, bad.sum(), np.argwhere(bad)[0], out[bad][0], want[bad][0])


def test_split_variant_uses_the_combine():
    expr = SDPA % ("1, 5, 16", "1, 70, 16", "1, 70, 40", "")
    assert schedules(expr, ["--knob", "flash_split=3"]) == ["flash_attn", "flash_combine"]
    assert schedules(expr, ["--knob", "flash_split=1"]) == ["flash_attn"]
    # flash=0 (and fuse=0) keep the plain decomposition: scores, max, sum, normalise, P.V
    assert "flash_attn" not in schedules(expr, ["--knob", "flash=0"])
    assert len(schedules(expr, ["--knob", "fuse=0"])) == 5


def test_wrong_mask_is_caught():
    # debug_flash_mask: a causal mask off by one (each row sees one key too many) must fail the check, in
    # both variants. (debug_shfl_offset is no fault here: a shfl_xor butterfly over any 5 independent masks,
    # which the shifted ones are, still reduces all 32 lanes.)
    expr = SDPA % ("1, 2, 40, 32", "1, 2, 40, 32", "1, 2, 40, 32", ", is_causal=True")
    for knobs in ([], ["--knob", "flash_split=2", "--knob", "flash_min_n=64"]):
        p = run([LLMCC, "run", "--target", "cuda-emu", "-c", expr, "--knob", "debug_flash_mask=1"] + knobs, check=False)
        assert p.returncode == 1 and "DOES NOT MATCH" in p.stdout, p.stdout + p.stderr
        p = run([LLMCC, "run", "--target", "cuda-emu", "-c", expr] + knobs)
        assert "matches the reference" in p.stdout


def test_pending_tile_copies_are_caught():
    # debug_cp_async=1: the K/V tile's cp.async copies are still pending (wait_group 1, one group committed) when
    # the scores read the tile: the kernel verifier must refuse it (hd 32: the copies' path; the prefill and the
    # split decode variants)
    expr = SDPA % ("1, 2, 40, 32", "1, 2, 40, 32", "1, 2, 40, 32", ", is_causal=True")
    for knobs in ([], ["--knob", "flash_split=2", "--knob", "flash_min_n=64"]):
        p = run([LLMCC, "run", "--target", "cuda-emu", "-c", expr, "--knob", "debug_cp_async=1"] + knobs, check=False)
        assert p.returncode != 0 and "while a cp.async into it may be pending" in p.stderr, p.stdout + p.stderr
        assert "16-byte cp.async" in run([LLMCC, "compile", "-c", expr, "--ir", "tile"] + knobs).stdout


def test_loop_ir_shows_the_rewrite():
    d = fixture("llama-gqa", "f32")
    p = run([LLMCC, "compile", d, "--ir", "loop"])
    assert "2 online softmax" in p.stdout and "online softmax over j in 0..(pos + n) where j < ((pos + t) + 1)" in p.stdout, p.stdout[:400]
    assert "heads share k and v in groups of 2" in p.stdout
    assert "attention_scores" not in p.stdout and "attention.scores" not in p.stdout
    p = run([LLMCC, "compile", d, "--ir", "loop", "--knob", "flash=0"])
    assert "0 online softmax" in p.stdout and "attention_scores" in p.stdout


def test_model_prefill_and_decode_against_reference():
    """A GQA model (4 heads, 2 kv heads): a 45-token prompt (more than
    flash_min_n: the prefill variant, several tokens per block) then 20 decode
    steps (the split variant and its combine), greedy ids and every step's
    logits against the numpy reference; with the split pinned to 3 slices and
    with the prefill variant for every call too. The KV cache bf16 (the default: flash_attn's tiles bf16, the
    reference's keys and values rounded as it stores them) and f32."""
    d = fixture("llama-gqa", "f32")
    model = ref_forward.load(d)
    prompt = [(i * 37) % 200 + 3 for i in range(45)]
    for knobs in ([], ["--knob", "flash_split=3"], ["--knob", "flash_min_n=0", "--knob", "flash_tokens=2"],
                  ["--kv-dtype", "f32"]):
        ref_ids, ref_logits = ref_forward.greedy(model, prompt, 20, kv_bf16="f32" not in knobs)
        ref = np.asarray(ref_logits, dtype=np.float32)
        out = build(d, "cuda-emu", knobs)
        lp = out + ".logits"
        p = run([os.path.join(out, "m"), "--prompt-ids", ",".join(map(str, prompt)), "-n", "20", "--temperature", "0",
                 "--repeat-penalty", "1", "--ids", "--ignore-eos", "--logits", lp])
        ours = [int(x) for x in p.stdout.split()]
        assert ours == list(ref_ids), "%s: greedy ids differ:\nours %s\nref  %s" % (knobs, ours, list(ref_ids))
        got = read_logits(lp, ref.shape[1])
        assert got.shape == ref.shape, (got.shape, ref.shape)
        for step in range(ref.shape[0]):
            diff = float(np.max(np.abs(got[step] - ref[step])))
            tol = 1e-4 * float(np.max(np.abs(ref[step])))
            assert diff <= tol, "%s step %d: max |diff| %.3g > %.3g" % (knobs, step, diff, tol)


def test_pinned_tokens_that_do_not_fit_are_refused():
    # 32 tokens of one head at head_dim 128: 32 warps fit, their q rows, K/V tiles and P do not fit 48 KiB
    expr = SDPA % ("1, 64, 128", "1, 64, 128", "1, 64, 128", ", is_causal=True")
    p = run([LLMCC, "compile", "-c", expr, "--ir", "tile", "--knob", "flash_tokens=32"], check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("llmcc: --knob: flash_tokens=32 does not fit"), p.stderr
    assert "shared memory" in lines[0]
