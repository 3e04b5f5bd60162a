"""`make`'s default model (scripts/default_model): SmolLM2-135M-Instruct from its GGUF file where
fetched (built and asked its question; tests/test_smollm2_gguf.py checks its answers against
transformers), else, offline, models/austen-2m, which the rest of this file tests.

models/austen-2m (trained by scripts/train_tiny.py):
its CPU executable's prompt ids, greedy ids and echoed text are compared with
Hugging Face transformers' (tests/data/default_model_expected.json, written
by scripts/gen_default_model_expected.py), its greedy ids and logits with the
numpy reference (tests/ref_forward.py), and what MODEL_CARD.md says against
the files and the executable: its example's output, the sizes and counts
(config.json, the safetensors header, tokenizer.json), the sampling defaults
(--info), the training result (loss.csv), and the issue's limits."""
import csv
import json
import math
import os
import re
import shlex
import shutil
import struct
import subprocess

import numpy as np

import ref_forward
from testlib import LLMCC, ROOT, Skip, build_exe, is_static, run, tmpdir

MODEL = os.path.join(ROOT, "models", "austen-2m")
EXPECTED = os.path.join(ROOT, "tests", "data", "default_model_expected.json")


def exe():
    return os.path.join(build_exe(MODEL, "cpu", ["--name", "m"]), "m")


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
        # f32 both sides, different summation orders; the JSON keeps 5 decimals. The prompt goes through the
        # cpu target's bf16 dot products (the weights are bf16), which round the activations; transformers'
        # logits here are unrounded. The tolerance adds twice what that rounding moves these logits in the
        # independent numpy reference: once for the rounding itself, once for the single roundings that f32
        # last-bit differences upstream flip (test_fullsize.check_against_ref), which move them as far again
        tol = 1e-4 * float(np.max(np.abs(ref))) + 1e-5 + 2 * bf16_slack(c["prompt_ids"], top["ids"])
        diff = float(np.max(np.abs(got[top["ids"]] - ref)))
        assert diff <= tol, "%r: max |diff| %.3g > %.3g" % (c["prompt"], diff, tol)


def bf16_slack(prompt_ids, ids):
    """How far the bf16 dot products' rounding of the prompt's activations moves the first logits at ids, in
    ref_forward (its bf16_x_rows; test_fullsize.check_against_ref says why a tolerance adds it)."""
    model = ref_forward.load(MODEL)
    plain = ref_forward.logits_all(model, prompt_ids)[-1]
    rounded = ref_forward.logits_all(model, prompt_ids, bf16_x_rows=len(prompt_ids))[-1]
    return float(np.max(np.abs(rounded[ids] - plain[ids])))


def test_greedy_and_logits_match_numpy_reference():
    e = expected()
    c = e["cases"][0]
    model = ref_forward.load(MODEL)
    n = 24
    # the weights are bf16: every call runs through the cpu target's bf16 dot products (ref_forward models them)
    ref_ids, ref_logits = ref_forward.greedy(model, c["prompt_ids"], n, bf16_dots=True)
    plain_ids, plain_logits = ref_forward.greedy(model, c["prompt_ids"], n)
    assert plain_ids == ref_ids, "the bf16 rounding changes the reference's greedy ids: the slack below is moot"
    lp = os.path.join(tmpdir("default-model"), "ref.logits")
    p = run([exe(), "--prompt-ids", ",".join(map(str, c["prompt_ids"])), "--ids", "--logits", lp] + greedy_args(n))
    assert [int(x) for x in p.stdout.split()] == list(ref_ids), (p.stdout, list(ref_ids))
    got = np.fromfile(lp, dtype="<f4").reshape(n, -1)
    ref = np.asarray(ref_logits, dtype=np.float32)
    plain = np.asarray(plain_logits, dtype=np.float32)
    # the tolerance adds the rounding's own move twice (as bf16_slack's callers do): every call rounds, and f32
    # last-bit differences upstream flip single roundings, which move the logits as far again
    for step in range(n):
        diff = float(np.max(np.abs(got[step] - ref[step])))
        tol = 1e-4 * float(np.max(np.abs(ref[step]))) + 2 * float(np.max(np.abs(ref[step] - plain[step])))
        assert diff <= tol, "step %d: max |diff| %.3g > %.3g" % (step, diff, tol)


def card():
    with open(os.path.join(MODEL, "MODEL_CARD.md")) as f:
        return f.read()


def card_number(pattern):
    """the numbers a regex finds in MODEL_CARD.md (thousands separators dropped)"""
    m = re.search(pattern, card())
    assert m, "MODEL_CARD.md no longer says %r" % pattern
    return [float(g.replace(",", "")) if "." in g else int(g.replace(",", "")) for g in m.groups()]


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def test_model_card_sample_is_what_the_executable_prints():
    # the card's example: its command, run on the CPU build, prints its text (the card wraps long lines). The
    # example is greedy: sampled text moves with the instruction set's rounding (a sample written on an AVX-512
    # machine differed on an AVX2 one), greedy text only where two logits tie within that rounding
    lines = card().splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith("    $ build/default/llama "))   # as `make` offline
    args = shlex.split(lines[i][len("    $ build/default/llama "):])
    shown = []
    for l in lines[i + 1:]:
        if not l.startswith("    "):
            break
        shown.append(l[4:])
    assert args[-2:] == ["--temperature", "0"] and len(shown) >= 2, lines[i:i + 3]
    p = run([exe()] + args)
    assert p.stdout.split() == " ".join(shown).split(), "the card shows:\n%s\nthe executable prints:\n%s" % (
        "\n".join(shown), p.stdout)


def test_model_card_numbers_are_true():
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    st = safetensors_header(os.path.join(MODEL, "model.safetensors"))
    hidden, inter, layers, heads, kv, hd = card_number(r"hidden (\d+), intermediate (\d+), (\d+) layers, (\d+) query heads "
                                                        r"and (\d+) key/value heads of (\d+)")
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["head_dim"]) == (hidden, inter, layers, heads, kv, hd), cfg
    assert kv < heads and cfg["architectures"] == ["LlamaForCausalLM"] and "`LlamaForCausalLM`" in card()
    # parameters, counted from the checkpoint's own header; the limit is 1-5 M
    nparams, nembed = card_number(r"parameters \| ([\d,]+) \(([\d,]+) of them the embedding\)")
    assert sum(int(np.prod(t["shape"])) for t in st.values()) == nparams
    assert int(np.prod(st["model.embed_tokens.weight"]["shape"])) == nembed
    assert 1_000_000 <= nparams <= 5_000_000, nparams
    # tied embeddings, no biases, bfloat16, the context, RoPE
    assert cfg["tie_word_embeddings"] and "lm_head.weight" not in st
    assert not any(k.endswith(".bias") for k in st) and not cfg["attention_bias"] and not cfg["mlp_bias"]
    assert {t["dtype"] for t in st.values()} == {"BF16"} and "bfloat16" in card()
    (ctx,) = card_number(r"(\d+) positions \(`max_position_embeddings`\)")
    assert cfg["max_position_embeddings"] == ctx
    (theta,) = card_number(r"theta ([\d,]+), no scaling")
    assert cfg["rope_theta"] == theta and cfg["rope_scaling"] is None
    # sizes: the weights file and the directory (the limit: 8 MiB)
    wmb, dmb = card_number(r"model.safetensors`, bfloat16 .*?, ([\d.]+) MB; the directory is ([\d.]+) MB")
    size = sum(os.path.getsize(os.path.join(MODEL, f)) for f in os.listdir(MODEL))
    assert round(os.path.getsize(os.path.join(MODEL, "model.safetensors")) / 1e6, 1) == wmb
    assert round(size / 1e6, 1) == dmb and size <= 8 * 1024 * 1024, size


def test_model_card_tokenizer_is_true():
    tok = json.load(open(os.path.join(MODEL, "tokenizer.json")))
    vocab, merges = card_number(r"byte-level BPE, ([\d,]+) tokens: .* ([\d,]+) merges")
    added = {a["content"]: a["id"] for a in tok["added_tokens"]}
    assert tok["model"]["type"] == "BPE" and len(tok["model"]["vocab"]) == vocab and len(tok["model"]["merges"]) == merges
    assert added == {"<s>": 0, "</s>": 1}
    # "<s> (0, BOS, prepended to every prompt)": the executable's tokenization starts with it
    assert run([exe(), "--prompt", "Emma", "--tokenize"]).stdout.split()[0] == "0"


def test_model_card_sampling_defaults_are_the_executables():
    t, k, p_, rp = card_number(r"temperature ([\d.]+), top-k (\d+), top-p ([\d.]+), repetition penalty ([\d.]+)")
    g = json.load(open(os.path.join(MODEL, "generation_config.json")))
    assert (g["temperature"], g["top_k"], g["top_p"], g["repetition_penalty"]) == (t, k, p_, rp), g
    info = run([exe(), "--info"]).stdout
    line = next(l for l in info.splitlines() if l.startswith("sampling defaults:"))
    assert line == "sampling defaults: temperature %g, top-k %d, top-p %g, min-p 0, repetition penalty %g" % (t, k, p_, rp), line


def test_model_card_training_result_is_loss_csv():
    # "1,508 steps", "held-out cross-entropy 3.66 nats/token (perplexity 39), training 2.91": loss.csv's last points
    (steps,) = card_number(r"\*\*([\d,]+) steps, ")
    val, ppl, train = card_number(r"held-out cross-entropy ([\d.]+) nats/token \(perplexity (\d+)\), training (\d+\.\d+)")
    with open(os.path.join(MODEL, "loss.csv")) as f:
        rows = list(csv.DictReader(f))
    last = {r["kind"]: r for r in rows}
    assert int(last["val"]["step"]) == steps and int(last["train"]["step"]) == steps
    assert round(float(last["val"]["loss"]), 2) == val and round(float(last["train"]["loss"]), 2) == train
    assert round(math.exp(float(last["val"]["loss"]))) == ppl


def smollm2_gguf_cached():
    d = os.environ.get("LLMCC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "llmcc")
    return os.path.exists(os.path.join(d, "smollm2-gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"))


def test_make_default_builds_smollm2_and_answers():
    """`make`'s default: the GGUF file (from the cache; the test does not download) built and asked"""
    if not smollm2_gguf_cached():
        raise Skip("SmolLM2-135M-Instruct's GGUF is not cached (scripts/fetch_smollm2 --gguf fetches it)")
    build = tmpdir("make-default")
    p = run([os.path.join(ROOT, "scripts", "default_model"), LLMCC, build, "cpu", "What is the capital of France?",
             "unused"], env=dict(os.environ, PIP_NO_INDEX="1"))
    lines = p.stdout.strip().splitlines()
    cmd = '%s/default/smollm2 --prompt "What is the capital of France?" --temperature 0' % build
    assert cmd in lines, lines[-4:]
    answer = lines[lines.index(cmd) + 1:]
    assert answer and "Paris" in answer[0], answer
    # the file as it ships: statically linked; in a root that holds nothing else it answers, and so does a stripped
    # copy; the question on stdin, llama-cli's flags and a positional prompt; the defaults in force said
    exe = os.path.join(build, "default", "smollm2")
    assert is_static(exe)
    greedy = ["--temperature", "0", "-n", "16"]
    want = run([exe, "-p", "What is the capital of France?"] + greedy).stdout
    assert "Paris" in want, want
    assert run([exe] + greedy, input="What is the capital of France?\n").stdout == want
    root = tmpdir("smollm2-root")
    shutil.rmtree(root)
    os.makedirs(root)
    shutil.copy(exe, os.path.join(root, "smollm2"))
    run(["strip", "-o", os.path.join(root, "stripped"), exe])
    for f in ["/smollm2", "/stripped"]:
        if os.geteuid() == 0 and shutil.which("chroot"):
            p = run(["chroot", root, f, "-p", "What is the capital of France?"] + greedy)
        else:   # chroot needs root: the copies outside one
            p = run([root + f, "-p", "What is the capital of France?"] + greedy)
        assert p.stdout == want, (f, p.stdout, p.stderr)
    if os.geteuid() == 0 and shutil.which("chroot"):
        # the server there, named localhost: no /etc/hosts and no NSS modules to read one with
        srv = subprocess.Popen(["chroot", root, "/smollm2", "--serve", "--host", "localhost", "--port", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            said = ""
            while "serving on" not in said and srv.poll() is None:   # each line as it comes; "" once it has exited
                said += srv.stderr.readline()
            assert re.search(r"serving on http://127\.0\.0\.1:\d+/v1", said), said + srv.stderr.read(2000)
        finally:
            srv.kill()
            srv.wait()
    assert run([exe, "-c", "512", "--temp", "0", "-n", "16", "Hello"]).stdout.strip()
    defaults = ("sampling: temperature 0.8 (llama.cpp's default), top-k 40 (llama.cpp's default), top-p 0.95 "
                "(llama.cpp's default), min-p 0.05 (llama.cpp's default), repetition penalty 1 (llama.cpp's default)")
    assert defaults in run([exe, "--version"]).stdout.splitlines()
    assert defaults in run([exe, "--info"]).stdout.splitlines()


def test_make_default_offline_falls_back_to_austen():
    """no GGUF in the cache and no index to fetch it from: one line says so, austen-2m is built and run"""
    build = tmpdir("make-default-offline")
    env = dict(os.environ, LLMCC_CACHE=tmpdir("empty-cache"), PIP_NO_INDEX="1")
    p = run([os.path.join(ROOT, "scripts", "default_model"), LLMCC, build, "cpu", "unused",
             "It was a fine morning, and Elizabeth"], env=env)
    said = [l for l in p.stderr.splitlines() if l.startswith("llmcc: the default model")]
    assert len(said) == 1 and "offline fallback, models/austen-2m" in said[0], p.stderr
    out = p.stdout.strip().splitlines()
    cmd = '%s/default/llama --prompt "It was a fine morning, and Elizabeth" -n 64 --temperature 0' % build
    assert cmd in out, out[-4:]
    # a second run rebuilds nothing (the key of what the build is made of is unchanged) and answers the same
    again = run([os.path.join(ROOT, "scripts", "default_model"), LLMCC, build, "cpu", "unused",
                 "It was a fine morning, and Elizabeth"], env=env)
    assert "llmcc: %s/default/llama is up to date" % build in again.stdout and "llmcc: wrote" not in again.stderr, \
        (again.stdout, again.stderr)
    assert again.stdout.split(cmd)[1].split() == p.stdout.split(cmd)[1].split()
    # what the model card's example prints (test_model_card_sample_is_what_the_executable_prints checks that)
    want = run([exe(), "--prompt", "It was a fine morning, and Elizabeth", "-n", "64", "--temperature", "0"]).stdout
    assert "\n".join(out[out.index(cmd) + 1:]).split() == want.split()
