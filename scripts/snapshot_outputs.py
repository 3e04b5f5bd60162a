#!/usr/bin/env python3
"""snapshot_outputs.py: what a refactor must not change, written to one folder.

For a set of tiny fixtures (scripts/make_fixture.py) and knob settings that
reach every schedule (gemv, split-K, gemm_tc with 1-3 stages, flash prefill and
decode, top-k on the device, f16 and bf16 weights), it builds the executable
of a CPU target (--target: cuda-emu, the GPU's schedules, by default; or cpu), runs greedy decoding over a prompt longer than one prefill chunk,
and keeps the generated ids and the sha256 of the logits file. It also keeps
the sha256 of `llmcc run -c EXPR` outputs (--dump) for a few expressions.

    scripts/snapshot_outputs.py OUT [--llmcc build/llmcc] [--quick] [--target cuda-emu|cpu]
    diff -r OUT_BEFORE OUT_AFTER      # empty: bit-identical

A refactor of the compiler's passes or emitters runs it before and after (on a
checkout of each); the CUDA side is covered by the suite's nvcc builds."""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "1,4,7,10,13,40,77,3,9,12,5,6,8,2,11,14,15,16,17,18"

# (fixture kind, dtype, build flags)
CASES = [
    ("llama-gqa", "f32", []),
    ("llama-gqa", "bf16", ["--max-batch", "8"]),
    ("llama-gqa", "bf16", ["--knob", "gemm_min_n=2", "--knob", "gemm_stages=1"]),
    ("llama-gqa", "bf16", ["--knob", "gemm_min_n=2", "--knob", "gemm_stages=3"]),
    ("qwen2-tied", "bf16", ["--knob", "gemv_split_k=4", "--knob", "flash_min_n=2"]),
    ("qwen2-tied", "f16", ["--knob", "gemm_min_n=2"]),
    ("llama-linear", "f32", ["--knob", "fuse=0"]),
    ("llama-linear", "bf16", ["--knob", "flash=0", "--knob", "gemv_unroll=2"]),
    ("qwen3", "bf16", ["--knob", "gemm_min_n=2"]),
    ("qwen3-tied", "f32", ["--knob", "flash_split=4"]),
    ("mistral", "bf16", []),
]
QUICK = {0, 2, 4, 8}

EXPRS = [
    "nn.RMSNorm(96)(torch.randn(3, 96))",
    "nn.Linear(64, 48)(torch.randn(5, 64))",
    "nn.Linear(128, 96, bias=False)(torch.randn(20, 128, dtype=torch.bfloat16))",
    "F.softmax(torch.randn(4, 300), dim=-1)",
    "F.scaled_dot_product_attention(torch.randn(1, 4, 7, 32), torch.randn(1, 4, 7, 32), "
    "torch.randn(1, 4, 7, 32), is_causal=True)",
    "torch.topk(torch.randn(2, 5000), 16)",
    "F.silu(torch.randn(2, 100)) * torch.randn(2, 100)",
]


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode:
        sys.exit("snapshot: %s failed:\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--llmcc", default=os.path.join(ROOT, "build", "llmcc"))
    ap.add_argument("--work", default="/tmp/llmcc-snapshot")
    ap.add_argument("--quick", action="store_true", help="four of the model cases")
    ap.add_argument("--target", default="cuda-emu", choices=("cuda-emu", "cpu"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    for i, (kind, dtype, flags) in enumerate(CASES):
        if a.quick and i not in QUICK:
            continue
        fx = os.path.join(a.work, "%s-%s" % (kind, dtype))
        if not os.path.exists(os.path.join(fx, "config.json")):
            run([sys.executable, os.path.join(ROOT, "scripts", "make_fixture.py"), kind, fx, "--dtype", dtype,
                 "--seed", "7"])
        proj = os.path.join(a.work, "case%d" % i)
        shutil.rmtree(proj, ignore_errors=True)
        run([a.llmcc, "build", fx, "-o", proj, "--target", a.target, "--name", "m"] + flags)
        run(["make", "-s", "-C", proj, "-j2"])
        lp = os.path.join(a.work, "case%d.logits" % i)
        p = run([os.path.join(proj, "m"), "--prompt-ids", PROMPT, "-n", "24", "--temperature", "0",
                 "--repeat-penalty", "1", "--ids", "--ignore-eos", "--logits", lp])
        with open(os.path.join(a.out, "case%d.txt" % i), "w") as f:
            f.write("%s %s %s\nids %s\nlogits %s\n" % (kind, dtype, " ".join(flags), p.stdout.split(), sha(lp)))
        print("case%d %s %s %s: %s" % (i, kind, dtype, " ".join(flags), sha(lp)[:16]), flush=True)
    for i, e in enumerate(EXPRS):
        d = os.path.join(a.work, "expr%d" % i)
        shutil.rmtree(d, ignore_errors=True)
        run([a.llmcc, "run", "-c", e, "--target", a.target, "--seed", "3", "--dump", d])
        with open(os.path.join(a.out, "expr%d.txt" % i), "w") as f:
            f.write(e + "\n")
            for name in sorted(os.listdir(d)):
                f.write("%s %s\n" % (name, sha(os.path.join(d, name))))
        print("expr%d: %s" % (i, e), flush=True)


if __name__ == "__main__":
    main()
