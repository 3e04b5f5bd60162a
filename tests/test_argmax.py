"""argmax on the device: the block_reduce schedule over (value, index) pairs
(warp shuffles of both, the first maximum kept), used by every model for its
greedy next token (model_forward returns it; the runtime then copies no
logits), and reachable as torch.argmax(x, dim=-1) from `llmcc run -c`.

References: numpy's argmax (the first maximum) on the inputs `--dump`
writes, compared exactly; the numpy model reference (tests/ref_forward.py)
for the greedy ids of a whole model."""
import os

import numpy as np

import ref_forward
from test_e2e import build, fixture
from test_torch_expr import dump_run
from testlib import LLMCC, run

CASES = [
    "torch.argmax(torch.randn(3, 1000), dim=-1)",
    "torch.argmax(torch.randn(2, 3, 70000, dtype=torch.bfloat16), dim=-1)",
    "torch.argmax(torch.ones(4, 33), dim=-1)",                               # all equal: index 0
    "torch.argmax(torch.randn(3, 1) * torch.ones(3, 5000), dim=-1)",          # rows of one value over every thread and warp: the first
    "torch.argmax(torch.randn(5), dim=0)",
    "torch.argmax(torch.randn(1, 152064, dtype=torch.bfloat16), dim=-1)",     # Qwen2.5's vocabulary
    "torch.argmax(torch.randn(7, 31) * 0 - 1, dim=-1)",
]


def test_argmax_against_numpy():
    for i, expr in enumerate(CASES):
        for target in ("cuda-emu", "cpu"):   # the GPU's argmax schedule, and the CPU target's
            p, t = dump_run(expr, "argmax%d%s" % (i, target), ["--target", target])
            assert p.returncode == 0 and "matches the reference" in p.stdout, expr + "\n" + p.stdout + p.stderr
            out = t.pop("output")
            x = t["input0"]
            if "* 0" in expr:
                x = x * 0 - 1
            if "torch.ones(3, 5000)" in expr:
                x = x * t["input1"]
            want = np.argmax(x, axis=-1).reshape(out.shape)
            assert np.array_equal(out, want), "%s %s: %s vs numpy %s" % (target, expr, out.ravel()[:8],
                                                                         want.ravel()[:8])


def test_argmax_errors():
    for expr, words in (("torch.argmax(torch.randn(3, 4), dim=0)", "only the last dim"),
                        ("torch.argmax(torch.randn(3, 4))", "'dim'"),
                        ("torch.argmax(torch.randn(3, 4), dim=-1, keepdim=True)", "keepdim=True")):
        p = run([LLMCC, "compile", "-c", expr, "--ir", "graph"], check=False)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, p.stderr


def test_model_greedy_on_device():
    """Greedy decoding with no penalty and no --logits takes model_forward's
    argmax; its ids must equal the numpy reference's and the host sampler's
    (which reads the logits)."""
    d = fixture("qwen2-tied", "f32")
    g = run([LLMCC, "compile", d, "--ir", "graph"]).stdout
    assert "argmax(" in g and "# model.next_token" in g, g[-300:]
    exe = os.path.join(build(d, "cpu"), "m")
    prompt = [1, 4, 7, 10, 13, 40, 77]
    ref_ids, _ = ref_forward.greedy(ref_forward.load(d), prompt, 24)
    base = [exe, "--prompt-ids", ",".join(map(str, prompt)), "-n", "24", "--temperature", "0", "--ids", "--ignore-eos"]
    dev = run(base + ["--repeat-penalty", "1"]).stdout.split()
    host = run(base + ["--repeat-penalty", "1", "--logits", exe + ".logits"]).stdout.split()
    assert [int(x) for x in dev] == list(ref_ids), "device argmax ids %s, reference %s" % (dev, list(ref_ids))
    assert dev == host
