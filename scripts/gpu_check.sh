#!/usr/bin/env bash
# gpu_check.sh: for a machine with an NVIDIA GPU. Builds every tiny fixture
# for CUDA and for the CPU, runs both greedily, and compares the ids and
# the --logits of every step. Prints one table row per fixture; exits 1 if
# any row fails. Needs: nvcc, python3 + numpy, the repo (run from anywhere).
# Takes well under 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu_check}
mkdir -p "$OUT"
make -s llmcc >/dev/null || { echo "gpu_check: building llmcc failed"; exit 1; }
nvidia-smi -L 2>/dev/null | head -1 || echo "gpu_check: nvidia-smi not found"
PROMPT=1,4,7,10,13,40,77
N=32
fail=0
printf "%-20s %-6s %-10s %-12s %-12s %s\n" fixture dtype ids max_abs_diff tol_1e-4 result
for kind in llama-gqa qwen2-tied llama-linear; do
  for dtype in f32 bf16; do
    d="$OUT/$kind-$dtype"
    [ -f "$d/config.json" ] || python3 scripts/make_fixture.py "$kind" "$d" --dtype "$dtype" --seed 7 >/dev/null
    for t in cpu cuda; do
      build/llmcc build "$d" -o "$d-$t" --target "$t" --name m 2>/dev/null && make -s -C "$d-$t" -j >/dev/null 2>"$d-$t.log" \
        || { echo "gpu_check: $kind-$dtype $t build failed (see $d-$t.log)"; fail=1; continue 2; }
      "$d-$t/m" --prompt-ids $PROMPT -n $N --temperature 0 --repeat-penalty 1 --ignore-eos --ids --logits "$d-$t.logits" \
        > "$d-$t.ids" 2>"$d-$t.err" || { echo "gpu_check: $kind-$dtype $t run failed: $(head -1 "$d-$t.err")"; fail=1; continue 2; }
    done
    python3 - "$d" "$kind" "$dtype" <<'PY' || fail=1
import sys, numpy as np
d, kind, dtype = sys.argv[1:]
a = open(d + "-cpu.ids").read().split(); b = open(d + "-cuda.ids").read().split()
la = np.fromfile(d + "-cpu.logits", "<f4"); lb = np.fromfile(d + "-cuda.logits", "<f4")
ok_ids = a == b
n = min(la.size, lb.size)
diff = float(np.max(np.abs(la[:n] - lb[:n]))) if n else float("inf")
tol = 1e-4 * float(np.max(np.abs(la))) if la.size else 0.0
ok = ok_ids and la.size == lb.size and diff <= tol
print("%-20s %-6s %-10s %-12.3g %-12.3g %s" % (kind, dtype, "same" if ok_ids else "DIFFER", diff, tol, "ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
  done
done
[ $fail = 0 ] && echo "gpu_check: all fixtures agree" || echo "gpu_check: FAILED"
exit $fail
