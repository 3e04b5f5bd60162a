"""test_families: Qwen3, Mistral, SmolLM-style Llama, transformers 5 configs and f16 checkpoints,
end to end against transformers itself.

The fixtures are written by scripts/make_fixture.py (numpy, seeded); their
expected greedy ids and logits come from transformers (float32, eager
attention), computed by scripts/gen_family_expected.py and committed as
tests/data/family_expected.json together with the sha256 of each fixture's
weights, so a drift of the generator fails here instead of comparing against
stale numbers. Also: a config in transformers 5's layout (rope_parameters)
and the same config in the 4.x layout (top-level rope_theta / rope_scaling)
build the same program."""
import base64
import hashlib
import json
import os
import sys

import numpy as np

from testlib import LLMCC, ROOT, build_exe, model_fixture, run, tmpdir

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_fixture  # noqa: E402

EXPECTED = json.load(open(os.path.join(ROOT, "tests", "data", "family_expected.json")))["cases"]


def fixture(kind, dtype, layout, seed):
    return model_fixture(kind, dtype, seed=seed, layout=layout)


def build(d, extra=()):
    return build_exe(d, "cpu", ["--name", "m"] + list(extra))


def generate(out, prompt, n, tag=""):
    lp = os.path.join(out, "logits%s.f32" % tag)
    p = run([os.path.join(out, "m"), "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n), "--temperature", "0",
             "--repeat-penalty", "1", "--ids", "--ignore-eos", "--logits", lp])
    return [int(x) for x in p.stdout.split()], np.fromfile(lp, dtype="<f4")


def check_case(name, tol):
    c = EXPECTED[name]
    d = fixture(c["kind"], c["dtype"], c["layout"], c["seed"])
    sha = hashlib.sha256(open(os.path.join(d, "model.safetensors"), "rb").read()).hexdigest()
    assert sha == c["model_sha256"], "%s: make_fixture.py no longer writes the weights the expected values were " \
        "computed for (rerun scripts/gen_family_expected.py)" % name
    ids, logits = generate(build(d), c["prompt"], len(c["ids"]))
    assert ids == c["ids"], "%s: greedy ids differ from transformers\nours         %s\ntransformers %s" % (
        name, ids, c["ids"])
    ref = np.frombuffer(base64.b64decode(c["logits_f32_base64"]), dtype="<f4").reshape(c["logits_shape"])
    got = logits.reshape(-1, ref.shape[1])[:ref.shape[0]]
    for step in range(ref.shape[0]):
        diff = float(np.max(np.abs(got[step] - ref[step])))
        bound = tol * float(np.max(np.abs(ref[step])))
        assert diff <= bound, "%s step %d: max |logit diff| %.3g > %.3g" % (name, step, diff, bound)


def test_qwen3_untied():
    check_case("qwen3-f32-v5", 1e-4)


def test_qwen3_tied():
    check_case("qwen3-tied-f32-v5", 1e-4)


def test_mistral():
    check_case("mistral-f32-v5", 1e-4)


def test_smollm_style():
    # SmolLM2's shapes and config keys with a GPT-2-style tokenizer (Digits, GPT-2's regex) and SmolLM2's ChatML:
    # the chat prompt as transformers' apply_chat_template gives it, and greedy decoding after it
    check_case("smollm-f32-v5", 1e-4)
    c = EXPECTED["smollm-f32-v5"]
    out = build(fixture(c["kind"], c["dtype"], c["layout"], c["seed"]))
    p = run([os.path.join(out, "m"), "--prompt", c["chat_question"], "--tokenize"])
    assert [int(x) for x in p.stdout.split()] == c["chat_prompt_ids"], (p.stdout, c["chat_prompt_ids"])
    p = run([os.path.join(out, "m"), "--prompt", c["chat_question"], "-n", str(len(c["chat_ids"])), "--temperature",
             "0", "--repeat-penalty", "1", "--ids", "--ignore-eos"])
    assert [int(x) for x in p.stdout.split()] == c["chat_ids"], (p.stdout, c["chat_ids"])


def test_transformers5_layouts_of_older_kinds():
    # llama3 and linear RoPE scaling inside rope_parameters; Qwen2 with layer_types
    for name in ("llama-gqa-f32-v5", "llama-linear-f32-v5", "qwen2-tied-f32-v5"):
        check_case(name, 1e-4)


def test_f16_checkpoints():
    # f16 weights widened to f32 in the kernels, as transformers computes with dtype=float32: the same tolerance
    check_case("qwen3-f16-v5", 1e-4)
    check_case("llama-gqa-f16-v4", 1e-4)


def test_v4_and_v5_layouts_build_the_same_program():
    for kind in ("llama-gqa", "llama-linear", "qwen3", "mistral"):
        outs = [build(fixture(kind, "f32", layout, 3)) for layout in ("v4", "v5")]
        # the first line names the model directory, which differs
        src = [open(os.path.join(o, "model.c")).read().split("\n", 1)[1] for o in outs]
        assert len(src[0]) > 1000 and src[0] == src[1], "%s: model.c differs between the config layouts" % kind
        (ia, la), (ib, lb) = [generate(o, [1, 4, 7, 10], 12) for o in outs]
        assert ia == ib and np.array_equal(la, lb), kind


def test_layout_disagreement_and_unknown_rope_keys_refused():
    base = fixture("llama-gqa", "f32", "v5", 3)
    cfg = json.load(open(os.path.join(base, "config.json")))
    cases = [
        ({"rope_theta": 20000.0}, "rope_parameters.rope_theta: 10000.0 disagrees with rope_theta 20000.0"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_parameters: {"),
        ({"rope_parameters": dict(cfg["rope_parameters"], rope_type="yarn")},
         'rope_parameters.rope_type: "yarn" is not supported'),
        ({"rope_parameters": dict(cfg["rope_parameters"], attention_factor=2.0)},
         "rope_parameters.attention_factor: not supported with rope_type \"llama3\""),
        ({"rope_parameters": dict(cfg["rope_parameters"], partial_rotary_factor=0.5)},
         "rope_parameters.partial_rotary_factor: not supported"),
    ]
    for i, (change, want) in enumerate(cases):
        d = os.path.join(tmpdir("families"), "rope-bad-%d" % i)
        os.makedirs(d, exist_ok=True)
        json.dump(dict(cfg, **change), open(os.path.join(d, "config.json"), "w"))
        p = run([LLMCC, "inspect", d, "--config-only"], check=False)
        assert p.returncode == 1 and want in p.stderr and len(p.stderr.strip().splitlines()) == 1, (change, p.stderr)
    # both layouts present and agreeing: accepted
    d = os.path.join(tmpdir("families"), "rope-both")
    os.makedirs(d, exist_ok=True)
    json.dump(dict(cfg, rope_theta=10000.0, rope_scaling={"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                           "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 32}),
              open(os.path.join(d, "config.json"), "w"))
    p = run([LLMCC, "inspect", d, "--config-only"])
    assert "rope_type: llama3" in p.stdout and "rope_theta: 10000" in p.stdout, p.stdout


def test_mistral_sliding_window_against_the_context():
    d = fixture("mistral", "f32", "v5", 3)
    # the fixture's window (512) is not smaller than its context (256): exact
    p = run([LLMCC, "compile", d, "--ir", "graph", "--ctx", "512"])
    assert "attention" in p.stdout
    p = run([LLMCC, "build", d, "-o", os.path.join(tmpdir("families"), "mistral-ctx"), "--ctx", "1024"], check=False)
    want = "llmcc: %s/config.json: sliding_window: 512 is smaller than the compiled context 1024: sliding-window " \
        "attention is not supported yet; build with --ctx 512 or less" % d
    assert p.returncode == 1 and p.stderr.strip() == want, p.stderr
    assert not os.path.exists(os.path.join(tmpdir("families"), "mistral-ctx"))


def test_mistral_spm_tokenizer():
    """Mistral with a SentencePiece-style tokenizer in the form Mistral's tokenizer.json has (Llama 2's as
    transformers writes it with legacy=False: Metaspace, prepend_scheme first; scripts/llama2_metaspace.py):
    built, it runs, and its --tokenize ids are `tokenizers`' (tests/data/tokenizer_expected.json,
    llama2_meta_first) for texts with special tokens, runs of spaces, newlines and byte fallback."""
    from test_tokenizer import check_sha, expected_ids, write_llama2_metaspace
    tok = write_llama2_metaspace("first")
    key = "llama2_meta_first"
    check_sha(key, tok)
    d = os.path.join(tmpdir("families"), "mistral-spm")
    run([sys.executable, os.path.join(ROOT, "scripts", "make_fixture.py"), "mistral-spm", d, "--tokenizer-dir", tok])
    out = build(d)
    p = run([os.path.join(out, "m"), "--prompt", "Hello", "-n", "5", "--temperature", "0", "--ids", "--ignore-eos"])
    ids = [int(x) for x in p.stdout.split()]
    assert len(ids) == 5 and all(0 <= i < 32000 for i in ids), p.stdout
    texts = ["Hello world", " Hello world", "<s>hello</s> <s> x", "a  b   c    d", "   leading spaces",
             "line\r\nbreaks\r\n\r\n", "emoji\U0001f600in\U0001f600words", "x<|endoftext|> 12<|im_end|>34",
             "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002\u6211\u4eec\u53bb\u516c\u56ed\u5427\u3002"]
    want = expected_ids(key, texts, special=True)
    for t, w in zip(texts, want):
        got = [int(x) for x in run([os.path.join(out, "m"), "--prompt", t, "--tokenize"]).stdout.split()]
        assert got == w, (t, got, w)
