#!/usr/bin/env python3
"""gen_tokenizer_expected.py: writes tests/data/tokenizer_expected.json, the
ids that Hugging Face `tokenizers` (pip install tokenizers) gives for a
corpus, so tests/test_tokenizer.py can check llmcc's tokenizer without the
network or the package. Tokenizers: Qwen2.5, Qwen3 and Llama 3 from
../shared/assets/tokenizers, Llama 2 as converted by scripts/convert_llama2c.py
(when present) and as transformers 5 writes it again with a Metaspace pre-tokenizer
(scripts/llama2_metaspace.py, each of test_tokenizer.META_VARIANTS; their ids are stored
as null where equal to the legacy file's, "ids_base", and their ids_special as null where
they are "special_prefix" + ids), the SentencePiece-style fixture of
test_tokenizer.py, and the GPT-2-style fixture tests/data/gpt2_tokenizer.json in each
pre-tokenizer of test_tokenizer.GPT2_VARIANTS.

The GPT-2-style fixture is a byte-level BPE (1024 tokens, all 256 bytes, three
special tokens as SmolLM's) trained here by `tokenizers` on the corpus below and
README.md and docs/*.md, with GPT-2's pre-tokenizer (ByteLevel with use_regex)
so that its merges join digits (" 1", "12"): a Digits split (SmolLM's
[Digits(individual_digits), ByteLevel], the file's pre_tokenizer) then changes
the ids. It is trained only where the file is absent or with --retrain, so the
ids of the other tokenizers can be made again without changing it.

    python3 scripts/gen_tokenizer_expected.py [--retrain]
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "assets"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from test_tokenizer import (GPT2_FIXTURE, GPT2_VARIANTS, META_VARIANTS, spm_fixture_json,  # noqa: E402
                            write_gpt2_fixture)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import llama2_metaspace  # noqa: E402

CORPUS = [
    "Hello world", " Hello world", "Hello World!", "hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, but we've seen what you'd do. Isn't it?",
    "DON'T SHOUT. I'M HERE. WE'LL SEE. YOU'VE GOT IT. SHE'D KNOW. IT'S 'S 'T 'Re 'rE 'LL 'lL 'Ve",
    "'s 't 're 've 'm 'll 'd 'x ''s '''", "rock'n'roll o'clock Ma'am y'all",
    "'\u017f long-s fold", "\u2019s curly apostrophe's",
    "1234567", "3.14159265358979", "12,345,678.90 and 0x1F2E3D", "2024-06-01T12:34:56Z", "9" * 40,
    "\u0661\u0662\u0663\u0664 \u2167 \u00bd \u00b2\u00b3 \u2460\u2461 \uff11\uff12\uff13",
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\t\n", " \n", "\n ", " \n \n ",
    "a  b   c    d", "trailing spaces   ", "   leading spaces", "tabs\tand\t\ttabs", "line\r\nbreaks\r\n\r\n",
    "mixed \t \n\t\n  x", "end with newline\n", "\u00a0nbsp\u00a0\u00a0x", "ideographic\u3000space",
    "line\u2028sep\u2029para", "nel\u0085x", "vt\x0bff\x0cx", "zw\u200bsp\u200cnj\u200dj", "\u2003em\u2009thin",
    "! !! !!! ?!?! ... \u2026 --- -> => :: ;; @@ ## $$ %% ^^ && ** (( )) [[ ]] {{ }}",
    "!\n\n", "?\r\n", "a.\n\nb", "x = (y + z) * 2;\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < 10; ++i) { sum += a[i] * b[i]; }  // dot product",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002\u6211\u4eec\u53bb\u516c\u56ed\u5427\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694!",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e! \u092f\u0939 \u090f\u0915 \u092a\u0930\u0940\u0915\u094d\u0937\u0923 \u0939\u0948\u0964",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e42\u0e25\u0e01",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "T\u00fcrk\u00e7e \u0131\u0130 \u015f\u011f stra\u00dfe \u00c6\u00d8\u00c5 \u0153uvre",
    "caf\u00e9 cafe\u0301 na\u00efve nai\u0308ve \u212b A\u030a \u1100\u1161\u11a8 \ufb01",
    "\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1fa\U0001f1f8 \u2764\ufe0f \U0001f600\U0001f601\U0001f602",
    "emoji\U0001f600in\U0001f600words", "\U0001f600" * 30, "\U0001d400\U0001d401 math bold",
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nhi<|im_end|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", " <|im_end|> ",
    "<|im_start", "<|im_start|", "<|im_sta rt|>", "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|reserved_special_token_5|>x<|end_of_text|>", "<s>hello</s> <s> x", "<unk>",
    "a" * 300, "ab" * 150, " " * 200, "\n" * 50, "-" * 120, "x" + " " * 77 + "y",
    "SGVsbG8gV29ybGQhIFRoaXMgaXMgYmFzZTY0IGVuY29kZWQgdGV4dCB0aGF0IGdvZXMgb24gYW5kIG9u" * 2,
    "Supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "The year 1999 had 365 days; 2000 had 366. Call 555-0123 now!",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.",
    # GPT-2's regex: case-sensitive contractions, whole numbers, " ?" before letters / numbers / other
    "I'M YOU'RE WE'VE THEY'LL HE'D IT'S 'S 'T 'RE 'VE 'M 'LL 'D 'Re 'rE 'lL 'Ve",
    "'The 'Set 'Many 'Dog 'LLama 'Very 'Real 'REad 'the 'set 'many 'dog 'llama 'very 'real 'read",
    "can't won't shan't y'all'd've 's's's x's 1's ''s ' s 'ss 'tt 'mm 'dd 'rer 'vev 'lll",
    "don\u2019t it\u2019s \u2018quoted\u2019 \"double\" `tick`",
    "1 12 123 1234 12345 123456 a1b22c333 v1.2.3-rc4 3.14e-10 1,000,000 -7 +8 #9 $10 50% 2^10",
    " 42 ", "42\n43", "\t7", " 7 ", "  7", "7  ", "x2 x 2 x  2", "abc123def 4ever 2day",
    "\u0663\u0664\u0665 \u06f1\u06f2\u06f3 \u0967\u0968\u0969 \u2460\u2461\u2462 "
    "\u00bc\u00bd\u00be \u2160\u2161\u2162 x\u00b2+y\u00b2",
    "a \t b", "a\t\tb", "x   \n   y", "  \n\n  \t  ", " a", "  a", "   a", "a ", "a  ", "a \n", "end.   ",
    "hello \t", "hello\n   ", "\r\n\r\n", "\u3000\u3000x", "\u00a0 x", " \u00a0x", "x \u3000 y",
    "line1\nline2\n\nline3\n\n\n", "\n\n\nx", "x\n \ny", " \n x", "a\n\n b", "!!\n\n??  ",
    "\u00dcn\u00efc\u00f6d\u00e9 \u00f1and\u00fa \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac "
    "\u041a\u0438\u0440\u0438\u043b\u043b\u0438\u0446\u0430 \u01c5ungla \u01c8 \u01cb \u02b0\u02b2",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 "
    "\u6f22\u5b57\u304b\u306a\u30ab\u30ca e\u0301 e \u0301 \u0301e",
    "\U0001f44d\U0001f3fd\U0001f468\u200d\U0001f469\u200d\U0001f467\U0001f1fa\U0001f1f8\u2764\ufe0f",
    "hi\U0001f44bthere \U0001f600 \U0001f600  \U0001f600\U0001f600 \U0001f600x x\U0001f600 1\U0001f6002",
    "<|im_start|>user\nWhat's 2+2?<|im_end|>\n<|im_start|>assistant\n", "x<|endoftext|> 12<|im_end|>34",
    # Qwen3's added tokens (<think>, </think>, <tool_response>, ...): plain text to the others
    "<think>\nI should add them.\n</think>\n\n4", "a<think>b</think>c", "<think></think>", " <think> \n</think>x",
    "<tool_response>\n42\n</tool_response>", "<think\n>", "</think >",
]


def random_texts(n, seed):
    """Random mixes of the character classes the pre-tokenizer cares about."""
    pool = (list("abcXYZ019'  \t\n\r.,!?-_()\"") + ["'s", "'LL", "'ve", "\u00e9", "e\u0301", "\u4e2d", "\u6587",
            "\u0905", "\u093e", "\u0661", "\u00bd", "\u00a0", "\u3000", "\u2028", "\U0001f600", "\u200d", "\u0131",
            "\u00df", "<|im_end|>", "<|eot_id|>", "<s>", " \n", "\r\n", "  ", "1234"])
    rnd = random.Random(seed)
    return ["".join(rnd.choice(pool) for _ in range(rnd.randrange(1, 40))) for _ in range(n)]


def encode(tok, texts):
    """ids (add_special_tokens=False); ids_special (True) and decoded
    (skip_special_tokens=True) are null where equal to ids / the text, to
    keep the file small."""
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    sp = [tok.encode(t, add_special_tokens=True).ids for t in texts]
    dec = [tok.decode(i, skip_special_tokens=True) for i in ids]
    return {"ids": ids,
            "ids_special": [s if s != i else None for s, i in zip(sp, ids)],
            "decoded": [d if d != t else None for d, t in zip(dec, texts)]}


def train_gpt2_fixture(texts):
    """Trains the GPT-2-style fixture (see the module docstring) into GPT2_FIXTURE."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    train = list(texts)
    for p in ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))):
        with open(os.path.join(ROOT, p), encoding="utf-8") as f:
            train += f.read().split("\n\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1024, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train, trainer=trainer)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.save(GPT2_FIXTURE)
    print("trained %s (%d tokens)" % (GPT2_FIXTURE, tok.get_vocab_size()))


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    texts = CORPUS + random_texts(250, 1)
    # one long text: exercises the encoder's word cache (used after 512 words)
    texts.append("\n".join(CORPUS))
    out = {"generator": "scripts/gen_tokenizer_expected.py", "texts": texts, "tokenizers": {}}
    import tokenizers
    out["tokenizers_version"] = tokenizers.__version__
    if "--retrain" in sys.argv[1:] or not os.path.exists(GPT2_FIXTURE):
        train_gpt2_fixture(texts)
    for key, d in (("qwen2.5", "qwen2.5-instruct"), ("llama3", "llama3-instruct"), ("qwen3", "qwen3")):
        path = os.path.join(SHARED, "tokenizers", d, "tokenizer.json")
        e = encode(Tokenizer.from_file(path), texts)
        e["sha256"] = sha(path)
        out["tokenizers"][key] = e
    with tempfile.TemporaryDirectory() as tmp:
        fx = os.path.join(tmp, "tokenizer.json")
        with open(fx, "w", encoding="utf-8") as f:
            json.dump(spm_fixture_json(), f, ensure_ascii=False)
        e = encode(Tokenizer.from_file(fx), texts)
        e["sha256"] = sha(fx)
        out["tokenizers"]["spm_fixture"] = e
        for v in GPT2_VARIANTS:
            p = os.path.join(write_gpt2_fixture(v, os.path.join(tmp, v)), "tokenizer.json")
            e = encode(Tokenizer.from_file(p), texts)
            e["sha256"] = sha(p)
            out["tokenizers"][v] = e
        conv = os.path.join(ROOT, "scripts", "convert_llama2c.py")
        if os.path.exists(conv):
            l2 = os.path.join(tmp, "llama2")
            subprocess.run([sys.executable, conv, "--tokenizer-only",
                            os.path.join(SHARED, "tokenizers", "llama2", "tokenizer.bin"), l2], check=True)
            p = os.path.join(l2, "tokenizer.json")
            e = encode(Tokenizer.from_file(p), texts)
            e["sha256"] = sha(p)
            out["tokenizers"]["llama2"] = e
            for v in META_VARIANTS:
                p = os.path.join(llama2_metaspace.make(v, os.path.join(tmp, "llama2_meta_" + v)), "tokenizer.json")
                m = encode(Tokenizer.from_file(p), texts)
                # ids_special: BOS in front (the post-processor is the legacy file's); null below
                ids_sp = [m["ids"][i] if x is None else x for i, x in enumerate(m["ids_special"])]
                m["special_prefix"] = [ids_sp[0][0]]
                m["ids_special"] = [None if sp == m["special_prefix"] + i else sp for sp, i in zip(ids_sp, m["ids"])]
                m["ids"] = [None if a == b else a for a, b in zip(m["ids"], e["ids"])]
                m["ids_base"] = "llama2"
                m["sha256"] = sha(p)
                out["tokenizers"]["llama2_meta_" + v] = m
    dst = os.path.join(ROOT, "tests", "data", "tokenizer_expected.json")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote %s (%d texts, %d bytes)" % (dst, len(texts), os.path.getsize(dst)))


if __name__ == "__main__":
    main()
