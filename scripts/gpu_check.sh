#!/usr/bin/env bash
# gpu_check.sh: for a machine with an NVIDIA GPU. Builds every tiny fixture
# for CUDA and for the CPU, runs both greedily, and compares the ids and
# the --logits of every step, for a 7-token prompt (decode schedules: gemv,
# split-KV flash decoding) and a 40-token one (prefill: flash_attn blocks of
# several tokens, gemm_tc for bf16); and the CUDA ids without --logits (the
# argmax taken on the GPU) against those with, and --top-k sampling from the
# GPU's top-k against the host sampler's draw. One table row per fixture and
# prompt; exits 1 if any row fails. Needs: nvcc, python3 + numpy, the repo
# (run from anywhere). Takes well under 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu_check}
mkdir -p "$OUT"
make -s llmcc >/dev/null || { echo "gpu_check: building llmcc failed"; exit 1; }
nvidia-smi -L 2>/dev/null | head -1 || echo "gpu_check: nvidia-smi not found"
SHORT=1,4,7,10,13,40,77
LONG=$(python3 -c "print(','.join(str((i * 37) % 200 + 3) for i in range(40)))")
N=32
fail=0
printf "%-20s %-6s %-6s %-10s %-12s %-12s %s\n" fixture dtype prompt ids max_abs_diff tol result
for kind in llama-gqa qwen2-tied llama-linear; do
  for dtype in f32 bf16; do
    d="$OUT/$kind-$dtype"
    [ -f "$d/config.json" ] || python3 scripts/make_fixture.py "$kind" "$d" --dtype "$dtype" --seed 7 >/dev/null
    for t in cpu cuda; do
      build/llmcc build "$d" -o "$d-$t" --target "$t" --name m 2>/dev/null && make -s -C "$d-$t" -j >/dev/null 2>"$d-$t.log" \
        || { echo "gpu_check: $kind-$dtype $t build failed (see $d-$t.log)"; fail=1; continue 2; }
      for p in short long; do
        [ $p = short ] && ids=$SHORT || ids=$LONG
        "$d-$t/m" --prompt-ids $ids -n $N --temperature 0 --repeat-penalty 1 --ignore-eos --ids --logits "$d-$t-$p.logits" \
          > "$d-$t-$p.ids" 2>"$d-$t.err" || { echo "gpu_check: $kind-$dtype $t run failed: $(head -1 "$d-$t.err")"; fail=1; continue 3; }
      done
    done
    # without --logits the runtime takes the GPU's argmax (model.next_token)
    "$d-cuda/m" --prompt-ids $SHORT -n $N --temperature 0 --repeat-penalty 1 --ignore-eos --ids > "$d-cuda-argmax.ids" 2>"$d-cuda.err" \
      || { echo "gpu_check: $kind-$dtype cuda run failed: $(head -1 "$d-cuda.err")"; fail=1; continue; }
    # --top-k sampling from the GPU's top-k (model_topk) against the host sampler over the logits, same seed
    topk=(--prompt-ids $SHORT -n $N --temperature 0.8 --top-k 20 --top-p 0.9 --seed 3 --repeat-penalty 1 --ignore-eos --ids)
    { "$d-cuda/m" "${topk[@]}" > "$d-cuda-topk.ids" && "$d-cuda/m" "${topk[@]}" --logits "$d-cuda-topk.logits" > "$d-cuda-topk-host.ids"; } 2>"$d-cuda.err" \
      || { echo "gpu_check: $kind-$dtype cuda top-k run failed: $(head -1 "$d-cuda.err")"; fail=1; continue; }
    python3 - "$d" "$kind" "$dtype" <<'PY' || fail=1
import sys, numpy as np
d, kind, dtype = sys.argv[1:]
bad = 0
for p in ("short", "long"):
    a = open("%s-cpu-%s.ids" % (d, p)).read().split(); b = open("%s-cuda-%s.ids" % (d, p)).read().split()
    la = np.fromfile("%s-cpu-%s.logits" % (d, p), "<f4"); lb = np.fromfile("%s-cuda-%s.logits" % (d, p), "<f4")
    ok_ids = a == b
    n = min(la.size, lb.size)
    diff = float(np.max(np.abs(la[:n] - lb[:n]))) if n else float("inf")
    # bf16 prefill runs on gemm_tc, which rounds each linear's input to bf16: an f32 difference of one ulp
    # upstream (nvcc's FMA contraction) can flip a rounding, one bf16 ulp (2^-8) of that input; so the long
    # prompt of a bf16 fixture gets a bf16-sized bound, everything else the f32 one
    rel = 1e-2 if (dtype == "bf16" and p == "long") else 1e-4
    tol = rel * float(np.max(np.abs(la))) if la.size else 0.0
    ok = ok_ids and la.size == lb.size and diff <= tol
    bad += not ok
    print("%-20s %-6s %-6s %-10s %-12.3g %-12.3g %s" % (kind, dtype, p, "same" if ok_ids else "DIFFER", diff, tol, "ok" if ok else "FAIL"))
g = open(d + "-cuda-argmax.ids").read().split() == open(d + "-cuda-short.ids").read().split()
bad += not g
print("%-20s %-6s %-6s %-10s %-12s %-12s %s" % (kind, dtype, "argmax", "same" if g else "DIFFER", "-", "-", "ok" if g else "FAIL"))
k = open(d + "-cuda-topk.ids").read().split() == open(d + "-cuda-topk-host.ids").read().split()
bad += not k
print("%-20s %-6s %-6s %-10s %-12s %-12s %s" % (kind, dtype, "top-k", "same" if k else "DIFFER", "-", "-", "ok" if k else "FAIL"))
sys.exit(1 if bad else 0)
PY
  done
done
[ $fail = 0 ] && echo "gpu_check: all fixtures agree" || echo "gpu_check: FAILED"
exit $fail
