#!/usr/bin/env python3
"""gen_default_model_expected.py: writes tests/data/default_model_expected.json,
the Hugging Face transformers reference for tests/test_default_model.py: for a
few prompts, the prompt ids (AutoTokenizer), the greedy continuation ids
(LlamaForCausalLM in float32, argmax of every step, end-of-sequence not
stopping it), their decoded text, and the first step's logits summary.

    python3 scripts/gen_default_model_expected.py [MODEL_DIR] [OUT.json]

Needs torch and transformers (pip install torch transformers). Rerun it
whenever models/austen-2m/ is retrained.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    "It is a truth universally acknowledged, that",
    "Elizabeth walked into the room and",
    "\"My dear Mr. Bennet,\" said his lady to him one day,",
    "The weather was fine, and",
    "Once upon a time",
]
N_NEW = 40


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "austen-2m")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "data", "default_model_expected.json")
    import torch
    import transformers
    from transformers import AutoTokenizer, LlamaForCausalLM
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    cases = []
    for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        seq = list(ids)
        first = None
        with torch.no_grad():
            for _ in range(N_NEW):
                logits = model(torch.tensor([seq])).logits[0, -1]
                if first is None:
                    first = logits
                seq.append(int(torch.argmax(logits)))
        gen = seq[len(ids):]
        top = torch.topk(first, 5)
        cases.append({
            "prompt": prompt, "prompt_ids": ids, "greedy_ids": gen,
            "text": tok.decode(gen, skip_special_tokens=False),
            "first_logits_top5": {"ids": top.indices.tolist(), "values": [round(v, 5) for v in top.values.tolist()]},
        })
        print("%s|%s" % (prompt, cases[-1]["text"]))
    with open(out, "w") as f:
        json.dump({"model": os.path.relpath(model_dir, ROOT), "generator": "transformers %s, torch %s, float32"
                   % (transformers.__version__, torch.__version__), "n_new": N_NEW, "cases": cases},
                  f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
