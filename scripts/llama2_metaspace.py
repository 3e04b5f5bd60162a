#!/usr/bin/env python3
"""llama2_metaspace.py: writes the Llama 2 tokenizer as today's tools write it, with a
Metaspace pre-tokenizer instead of the legacy Prepend/Replace normalizer, for the tokenizer
tests (tests/test_tokenizer.py, scripts/gen_tokenizer_expected.py, tests/test_chat.py).

The source is ../shared/assets/tokenizers/llama2/tokenizer.bin, made into a legacy
tokenizer.json by scripts/convert_llama2c.py; transformers (5) loads that directory and
save_pretrained writes it again:
  always  as loaded (its tokenizer_config.json says legacy: true): normalizer null,
          Metaspace(prepend_scheme "always", split false), the [Replace, ByteFallback, Fuse,
          Strip] decoder: what transformers 5 writes for any Llama-2-style tokenizer it saves
  first   legacy=False (LlamaTokenizerFast(legacy=False), Mistral-style conversions): "first"
  never   legacy=False, add_prefix_space=False: "never", and a decoder without Strip
  split   "first", then split true in the pre-tokenizer and tokenizers' Metaspace decoder
          (prepend_scheme "first") instead of the Sequence, edited here: SentencePieceBPETokenizer's
          shape (which no transformers class writes for a Llama tokenizer)
A chat template given with --chat-template FILE goes into the directory before the save.

    python3 scripts/llama2_metaspace.py VARIANT OUTDIR [--chat-template FILE]
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_BIN = os.path.normpath(os.path.join(ROOT, "..", "shared", "assets", "tokenizers", "llama2", "tokenizer.bin"))
# variant -> (from_pretrained keyword arguments, the prepend_scheme transformers must write)
VARIANTS = {
    "always": ({}, "always"),
    "first": ({"legacy": False}, "first"),
    "never": ({"legacy": False, "add_prefix_space": False}, "never"),
    "split": ({"legacy": False}, "first"),
}


def make(variant, out, chat_template=None):
    from transformers import AutoTokenizer
    kw, scheme = VARIANTS[variant]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "convert_llama2c.py"), "--tokenizer-only",
                        TOKENIZER_BIN, tmp], check=True, stdout=subprocess.DEVNULL)
        if chat_template is not None:
            p = os.path.join(tmp, "tokenizer_config.json")
            with open(p) as f:
                tc = json.load(f)
            tc["chat_template"] = chat_template
            with open(p, "w") as f:
                json.dump(tc, f, indent=2)
        AutoTokenizer.from_pretrained(tmp, **kw).save_pretrained(out)
    p = os.path.join(out, "tokenizer.json")
    with open(p, encoding="utf-8") as f:
        tok = json.load(f)
    pre = tok["pre_tokenizer"]
    # another transformers may write something else: then these are not the files the tests mean
    want = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": False}
    if tok["normalizer"] is not None or pre != want:
        sys.exit("llama2_metaspace.py: transformers wrote normalizer %s, pre_tokenizer %s; expected null and %s"
                 % (json.dumps(tok["normalizer"]), json.dumps(pre), json.dumps(want)))
    if variant == "split":
        pre["split"] = True
        tok["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}
        with open(p, "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=2)
    return out


def main():
    a = sys.argv[1:]
    ct = None
    if "--chat-template" in a:
        i = a.index("--chat-template")
        with open(a[i + 1]) as f:
            ct = f.read()
        del a[i:i + 2]
    if len(a) != 2 or a[0] not in VARIANTS:
        sys.exit("usage: llama2_metaspace.py {%s} OUTDIR [--chat-template FILE]" % ",".join(VARIANTS))
    make(a[0], a[1], ct)
    print("wrote %s (Llama 2 tokenizer, Metaspace %s)" % (a[1], a[0]))


if __name__ == "__main__":
    main()
