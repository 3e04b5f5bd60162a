#!/usr/bin/env python3
"""gen_family_expected.py: transformers' greedy ids and logits for the fixtures of
the model families (scripts/make_fixture.py), committed as
tests/data/family_expected.json and read by tests/test_families.py.

    python3 scripts/gen_family_expected.py        (needs transformers + torch, CPU)

For each case (kind, dtype, config layout) it writes the fixture with
make_fixture.py, records the sha256 of its model.safetensors (so the test notices
when the generator drifts), and runs transformers itself in float32 with eager
attention: 24 greedy tokens after PROMPT (argmax of a full causal forward per
step, no cache, eos ignored) and the logits of the first 8 steps. It also checks
that the fixture's files are what transformers 5 writes:
  - config.json in the v5 layout equals AutoConfig.from_pretrained(...).save_pretrained's
    (same keys and values);
  - f16 weights equal the tensors transformers saves after loading them as float16;
  - the v4 layout (top-level rope_theta / rope_scaling) gives transformers the same
    logits as the v5 layout.
"""
import base64
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_fixture  # noqa: E402

OUT = os.path.join(ROOT, "tests", "data", "family_expected.json")
PROMPT = [1, 4, 7, 10, 13, 40, 77]
N_IDS, N_LOGITS, SEED = 24, 8, 7
# kinds with a real tokenizer and chat template: the chat prompt's ids from transformers' apply_chat_template,
# and greedy ids after it
CHAT_KINDS = {"smollm": "What is 2+2? Answer in 10 words."}
# (kind, dtype, layout): the new families in transformers 5's layout, the older Llama
# kinds (llama3 and linear RoPE scaling) in it too, and f16 checkpoints
CASES = [("qwen3", "f32", "v5"), ("qwen3-tied", "f32", "v5"), ("mistral", "f32", "v5"), ("smollm", "f32", "v5"),
         ("llama-gqa", "f32", "v5"), ("llama-linear", "f32", "v5"), ("qwen2-tied", "f32", "v5"),
         ("qwen3", "f16", "v5"), ("llama-gqa", "f16", "v4")]


def case_name(kind, dtype, layout):
    return "%s-%s-%s" % (kind, dtype, layout)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def greedy_and_logits(model, torch, prompt=PROMPT):
    ids = list(prompt)
    out, logits = [], []
    with torch.no_grad():
        for step in range(N_IDS):
            lg = model(torch.tensor([ids])).logits[0, -1].float().numpy()
            if step < N_LOGITS:
                logits.append(lg.astype("<f4"))
            nxt = int(np.argmax(lg))
            out.append(nxt)
            ids.append(nxt)
    return out, np.stack(logits)


def check_config_layout(d, transformers):
    ours = json.load(open(os.path.join(d, "config.json")))
    with tempfile.TemporaryDirectory() as t:
        transformers.AutoConfig.from_pretrained(d).save_pretrained(t)
        theirs = json.load(open(os.path.join(t, "config.json")))
    theirs.pop("transformers_version", None)
    ours = {k: v for k, v in ours.items() if k != "transformers_version"}
    if ours != theirs:
        diff = sorted(k for k in set(ours) | set(theirs) if k not in ours or k not in theirs or ours[k] != theirs[k])
        raise SystemExit("%s: config.json differs from transformers' save_pretrained in %s" % (d, diff))


def check_f16_weights(d, transformers, torch):
    from safetensors.numpy import load_file
    m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float16)
    with tempfile.TemporaryDirectory() as t:
        m.save_pretrained(t)
        theirs = load_file(os.path.join(t, "model.safetensors"))
    ours = load_file(os.path.join(d, "model.safetensors"))
    for k, v in ours.items():
        if k not in theirs:   # tied weights are saved once
            continue
        assert theirs[k].dtype == np.float16 and np.array_equal(theirs[k].view("<u2"), v.view("<u2")), k


def main():
    import torch
    import transformers
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    cases = {}
    tmp = tempfile.mkdtemp(prefix="llmcc-family-")
    for kind, dtype, layout in CASES:
        name = case_name(kind, dtype, layout)
        d = os.path.join(tmp, name)
        make_fixture.make(kind, d, dtype, SEED, layout=layout)
        if layout == "v5":
            check_config_layout(d, transformers)
        if dtype == "f16":
            check_f16_weights(d, transformers, torch)
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        ids, logits = greedy_and_logits(model, torch)
        other = os.path.join(tmp, name + "-other-layout")
        make_fixture.make(kind, other, dtype, SEED, layout="v4" if layout == "v5" else "v5")
        m2 = transformers.AutoModelForCausalLM.from_pretrained(other, dtype=torch.float32, attn_implementation="eager")
        ids2, logits2 = greedy_and_logits(m2.eval(), torch)
        assert ids2 == ids and np.array_equal(logits2, logits), "%s: transformers reads the two layouts differently" % name
        assert len(set(ids)) > 1, "%s: degenerate fixture %s" % (name, ids)
        chat = {}
        if kind in CHAT_KINDS:
            tok = transformers.AutoTokenizer.from_pretrained(d)
            r = tok.apply_chat_template([{"role": "user", "content": CHAT_KINDS[kind]}], add_generation_prompt=True,
                                        tokenize=True)
            prompt = [int(x) for x in (r["input_ids"] if hasattr(r, "keys") else r)]
            chat = {"chat_question": CHAT_KINDS[kind], "chat_prompt_ids": prompt,
                    "chat_ids": greedy_and_logits(model, torch, prompt)[0]}
        cases[name] = {
            "kind": kind, "dtype": dtype, "layout": layout, "seed": SEED, "prompt": PROMPT,
            "model_sha256": sha256(os.path.join(d, "model.safetensors")),
            "ids": ids,
            "logits_f32_base64": base64.b64encode(logits.tobytes()).decode("ascii"),
            "logits_shape": list(logits.shape),
            **chat,
        }
        print("%-24s ids %s" % (name, ids))
    doc = {"generator": "scripts/gen_family_expected.py",
           "transformers": transformers.__version__, "torch": torch.__version__, "cases": cases}
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s (%d cases)" % (OUT, len(cases)))


if __name__ == "__main__":
    main()
