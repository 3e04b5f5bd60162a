"""The default model, models/austen-2m (trained by scripts/train_tiny.py):
its CPU executable's prompt ids, greedy ids and echoed text are compared with
Hugging Face transformers' (tests/data/default_model_expected.json, written
by scripts/gen_default_model_expected.py), its greedy ids and logits with the
numpy reference (tests/ref_forward.py), and the directory with the issue's
limits (size, files, model card)."""
import json
import os

import numpy as np

import ref_forward
from testlib import LLMCC, ROOT, run, tmpdir

MODEL = os.path.join(ROOT, "models", "austen-2m")
EXPECTED = os.path.join(ROOT, "tests", "data", "default_model_expected.json")
_exe = []


def exe():
    if not _exe:
        out = os.path.join(tmpdir("default-model"), "austen-cpu")
        run([LLMCC, "build", MODEL, "-o", out, "--target", "cpu", "--name", "m"])
        run(["make", "-C", out, "-j2"])
        _exe.append(os.path.join(out, "m"))
    return _exe[0]


def expected():
    with open(EXPECTED) as f:
        return json.load(f)


def greedy_args(n):
    return ["-n", str(n), "--temperature", "0", "--repeat-penalty", "1", "--ignore-eos"]


def test_prompt_ids_match_transformers():
    for c in expected()["cases"]:
        p = run([exe(), "--prompt", c["prompt"], "--tokenize"])
        assert [int(x) for x in p.stdout.split()] == c["prompt_ids"], (c["prompt"], p.stdout, c["prompt_ids"])


def test_greedy_ids_match_transformers():
    e = expected()
    for c in e["cases"]:
        p = run([exe(), "--prompt", c["prompt"], "--ids"] + greedy_args(e["n_new"]))
        ours = [int(x) for x in p.stdout.split()]
        assert ours == c["greedy_ids"], "%r:\nours %s\nhf   %s" % (c["prompt"], ours, c["greedy_ids"])
        assert len(set(ours)) > 5, "degenerate continuation for %r" % c["prompt"]


def test_greedy_text_matches_transformers():
    # the executable echoes the prompt, then prints the continuation as it decodes it
    e = expected()
    for c in e["cases"]:
        p = run([exe(), "--prompt", c["prompt"]] + greedy_args(e["n_new"]))
        assert p.stdout.rstrip("\n") == (c["prompt"] + c["text"]).rstrip("\n"), \
            "ours:\n%r\nhf:\n%r" % (p.stdout, c["prompt"] + c["text"])


def test_first_logits_match_transformers():
    e = expected()
    lp = os.path.join(tmpdir("default-model"), "first.logits")
    for c in e["cases"]:
        run([exe(), "--prompt", c["prompt"], "--ids", "--logits", lp] + greedy_args(1))
        got = np.fromfile(lp, dtype="<f4")
        top = c["first_logits_top5"]
        assert list(np.argsort(-got)[:5]) == top["ids"], (c["prompt"], list(np.argsort(-got)[:5]), top["ids"])
        ref = np.array(top["values"], dtype=np.float32)
        # f32 both sides, different summation orders; the JSON keeps 5 decimals
        tol = 1e-4 * float(np.max(np.abs(ref))) + 1e-5
        diff = float(np.max(np.abs(got[top["ids"]] - ref)))
        assert diff <= tol, "%r: max |diff| %.3g > %.3g" % (c["prompt"], diff, tol)


def test_greedy_and_logits_match_numpy_reference():
    e = expected()
    c = e["cases"][0]
    model = ref_forward.load(MODEL)
    n = 24
    ref_ids, ref_logits = ref_forward.greedy(model, c["prompt_ids"], n)
    lp = os.path.join(tmpdir("default-model"), "ref.logits")
    p = run([exe(), "--prompt-ids", ",".join(map(str, c["prompt_ids"])), "--ids", "--logits", lp] + greedy_args(n))
    assert [int(x) for x in p.stdout.split()] == list(ref_ids), (p.stdout, list(ref_ids))
    got = np.fromfile(lp, dtype="<f4").reshape(n, -1)
    ref = np.asarray(ref_logits, dtype=np.float32)
    for step in range(n):
        diff = float(np.max(np.abs(got[step] - ref[step])))
        tol = 1e-4 * float(np.max(np.abs(ref[step])))
        assert diff <= tol, "step %d: max |diff| %.3g > %.3g" % (step, diff, tol)


def test_model_directory_meets_the_issue():
    names = set(os.listdir(MODEL))
    need = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
            "MODEL_CARD.md", "loss.png"}
    assert need <= names, "missing: %s" % sorted(need - names)
    size = sum(os.path.getsize(os.path.join(MODEL, f)) for f in names)
    assert size <= 8 * 1024 * 1024, "models/austen-2m is %d bytes, over 8 MiB" % size
    with open(os.path.join(MODEL, "loss.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"], "not grouped-query attention"
    p = run([LLMCC, "inspect", MODEL])
    n = 0
    for line in p.stdout.splitlines():
        # tensor lines: NAME DTYPE [shape]; count parameters from the shapes
        if "[" in line and "]" in line:
            dims = line[line.index("[") + 1:line.index("]")].replace(",", " ").split()
            if dims and all(d.isdigit() for d in dims):
                n += int(np.prod([int(d) for d in dims]))
    assert 1_000_000 <= n <= 5_000_000, "%d parameters, outside 1-5 M" % n
    card = open(os.path.join(MODEL, "MODEL_CARD.md")).read()
    for word in ("r-cran-janeaustenr", "public domain", "loss.png", "train_tiny.py"):
        assert word in card, "MODEL_CARD.md does not mention %r" % word
