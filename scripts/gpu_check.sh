#!/usr/bin/env bash
# gpu_check.sh: for a machine with an NVIDIA GPU. Builds every tiny fixture
# for CUDA and for the CPU, runs both greedily, and compares the ids and
# the --logits of every step, for a 7-token prompt (decode schedules: gemv,
# split-KV flash decoding) and a 40-token one (prefill: flash_attn blocks of
# several tokens, gemm_tc for bf16); and the CUDA ids without --logits (the
# argmax taken on the GPU) against those with, and --top-k sampling from the
# GPU's top-k against the host sampler's draw, and the decode step's CUDA
# Graph (the default) against --no-graph. The CPU build has the GPU's bf16
# KV cache (--kv-dtype bf16) and f32 products. One table row per fixture and
# prompt; exits 1 if any row fails. Then decode end to end: a 2-layer
# Qwen2.5-7B-shaped bf16 checkpoint (random weights) built for CUDA, its
# --stats decode time per token at context ~1024 beside the machine-code
# report's bound for the same executable (scripts/sass_report; skipped where
# nvdisasm is missing), and the full model's bound times measured / report. Needs: nvcc, python3 +
# numpy, the repo (run from anywhere). The whole run stops after
# GPU_CHECK_LIMIT seconds (default 480), saying so. GPU_CHECK_EMU=1: the
# same run without a GPU (tests/test_bench_ops.py), cuda-emu standing in for
# CUDA and a small Qwen2-shaped config for Qwen2.5-7B's: it checks the script,
# not the GPU.
set -uo pipefail
LIMIT=${GPU_CHECK_LIMIT:-480}
if [ -z "${GPU_CHECK_INNER:-}" ]; then   # the whole run as one child under timeout
  GPU_CHECK_INNER=1 timeout -k 5 "$LIMIT" "$(readlink -f "$0")" "$@"
  rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then echo "gpu_check: stopped after ${LIMIT} s (GPU_CHECK_LIMIT): FAILED"; fi
  exit $rc
fi
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu_check}
mkdir -p "$OUT"
make -s llmcc >/dev/null || { echo "gpu_check: building llmcc failed"; exit 1; }
EMU=${GPU_CHECK_EMU:-0}
CUDA=cuda QCONFIG=../shared/assets/hf-configs/Qwen2.5-7B.config.json QNAME="Qwen2.5-7B" V=152064
if [ "$EMU" = 1 ]; then
  CUDA=cuda-emu QCONFIG="$OUT/small-qwen2.json" QNAME="a small Qwen2" V=4096
  echo "gpu: none (GPU_CHECK_EMU=1: cuda-emu stands in for CUDA)"
  cat > "$QCONFIG" <<EOF
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 256,
 "intermediate_size": 704, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 28,
 "head_dim": 64, "vocab_size": $V, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 1, "torch_dtype": "bfloat16"}
EOF
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 \
    | sed 's/^/gpu: /' || echo "gpu_check: nvidia-smi not found"
fi
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
      # the CPU build with the GPU's KV cache and its f32 products (the cpu target's bf16 linears round their
      # activations to bf16 by default: ~1e-2 apart), so that the logits compare at 1e-4
      kv=(); [ $t = cpu ] && kv=(--kv-dtype bf16 --knob cpu_rows_bf16=0 --knob cpu_gemm_bf16=0)
      tt=$t; [ $t = cuda ] && tt=$CUDA
      build/llmcc build "$d" -o "$d-$t" --target "$tt" --name m "${kv[@]}" 2>/dev/null && make -s -C "$d-$t" -j >/dev/null 2>"$d-$t.log" \
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
    # the decode step's kernels one by one (--no-graph) against the graph's replays: the same logits, bit for bit
    "$d-cuda/m" --prompt-ids $SHORT -n $N --temperature 0 --repeat-penalty 1 --ignore-eos --ids --no-graph \
      --logits "$d-cuda-nograph.logits" > "$d-cuda-nograph.ids" 2>"$d-cuda.err" \
      || { echo "gpu_check: $kind-$dtype cuda --no-graph run failed: $(head -1 "$d-cuda.err")"; fail=1; continue; }
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
ng = open(d + "-cuda-nograph.logits", "rb").read() == open(d + "-cuda-short.logits", "rb").read()
bad += not ng
print("%-20s %-6s %-6s %-10s %-12s %-12s %s" % (kind, dtype, "graph", "same" if ng else "DIFFER", "-", "-", "ok" if ng else "FAIL"))
k = open(d + "-cuda-topk.ids").read().split() == open(d + "-cuda-topk-host.ids").read().split()
bad += not k
print("%-20s %-6s %-6s %-10s %-12s %-12s %s" % (kind, dtype, "top-k", "same" if k else "DIFFER", "-", "-", "ok" if k else "FAIL"))
sys.exit(1 if bad else 0)
PY
  done
done
[ $fail = 0 ] && echo "gpu_check: all fixtures agree" || echo "gpu_check: fixtures FAILED"
[ -x "$OUT/llama-gqa-f32-cuda/m" ] && "$OUT/llama-gqa-f32-cuda/m" --info | grep '^compute:'

# decode end to end: 2 layers of Qwen2.5-7B (bf16, random weights), 64 tokens after a 960-token prompt
q="$OUT/qwen7b-L2"
[ "$EMU" = 1 ] && q="$OUT/small-L2"
[ -f "$q/model.safetensors.index.json" ] || python3 scripts/make_synthetic_checkpoint "$QCONFIG" "$q" --layers 2 >/dev/null \
  || { echo "gpu_check: the 2-layer checkpoint failed (../shared/assets/hf-configs)"; exit 1; }
build/llmcc build "$q" -o "$q-cuda" --target $CUDA --name m 2>/dev/null && make -s -C "$q-cuda" -j >/dev/null 2>"$q.log" \
  || { echo "gpu_check: the 2-layer CUDA build failed (see $q.log)"; exit 1; }
P=$(python3 -c "print(','.join(str((i * 7919) % ($V - 10) + 10) for i in range(960)))")
"$q-cuda/m" --prompt-ids "$P" -n 64 --temperature 0 --repeat-penalty 1 --ignore-eos --ids --stats >/dev/null 2>"$q.stats" \
  || { echo "gpu_check: the 2-layer run failed: $(head -1 "$q.stats")"; exit 1; }
"$q-cuda/m" --prompt-ids "$P" -n 64 --temperature 0 --repeat-penalty 1 --ignore-eos --ids --stats --no-graph >/dev/null \
  2>"$q-nograph.stats" || { echo "gpu_check: the 2-layer --no-graph run failed: $(head -1 "$q-nograph.stats")"; exit 1; }
grep -h '^launches per token' "$q.stats" "$q-nograph.stats"
grep -h '^start-up\|^time to first token' "$q.stats"   # the weights through runtime/stage.h's pinned buffers
grep -h '^decode:' "$q-nograph.stats" | sed 's/^/--no-graph /'
mkdir -p "$OUT/qwen7b-config" && cp "$QCONFIG" "$OUT/qwen7b-config/config.json"
python3 scripts/sass_report "$q" --pos 1024 > "$q.report" 2>&1
python3 scripts/sass_report "$OUT/qwen7b-config" --pos 1024 > "$OUT/qwen7b.report" 2>&1
python3 - "$q.stats" "$q.report" "$OUT/qwen7b.report" "$QNAME" <<'PY'
import re, sys
stats, report, full = (open(f).read() for f in sys.argv[1:4])
name = sys.argv[4]
m = re.search(r"decode: ([\d.]+) tok/s \((\d+) steps, ([\d.]+) ms\)", stats)
us = float(m.group(3)) * 1e3 / int(m.group(2))
print("decode, 2 layers of %s (bf16), context ~1024: measured %.1f us a token (%s tok/s)" % (name, us, m.group(1)))
bound = lambda text: re.search(r"the kernels' bounds sum to ([\d.]+) us; bandwidth bound ([\d.]+) us", text)
r, f = bound(report), bound(full)
if not r or not f:
    print("  machine-code report: none (%s)" % (report.strip().splitlines() or ["empty"])[-1][:100])
    sys.exit(0)
ratio = us / float(r.group(1))
print("  report: %s us (HBM bound %s us); measured / report %.2f" % (r.group(1), r.group(2), ratio))
print("  28 layers: report %s us (HBM bound %s us), times that ratio %.1f us a token (%.1f tok/s)" % (
    f.group(1), f.group(2), float(f.group(1)) * ratio, 1e6 / (float(f.group(1)) * ratio)))
PY
exit $fail
