#!/usr/bin/env python3
"""make_seeds.py: writes the seed corpora of the fuzz harnesses into
tests/fuzz/corpus/TARGET/ (committed; rerun only to change them).

    python3 tests/fuzz/make_seeds.py

Seeds are small valid inputs (a fuzzer mutates from them): safetensors files
built with struct, the fixture configs and tokenizers of
scripts/make_fixture.py, a hand-written SentencePiece-style tokenizer, the
GPT-2-style fixture of tests/test_tokenizer.py with SmolLM2's chat template, texts
for the encoder, packed blobs for the blob parser (packed by a throwaway
C program linked with compiler/tokenizer_pack.c), and GGUF files written with
struct by tests/test_gguf.py's raw writer.

    python3 tests/fuzz/make_seeds.py gguf     rewrites only the GGUF seeds
    python3 tests/fuzz/make_seeds.py gguf_model   only the GGUF models' (gguf-py's GGUFWriter: tiny llama,
                                                  qwen2 and qwen3 files with their tokenizers and templates)"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_fixture  # noqa: E402

CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st_bytes(tensors, metadata=None):
    hdr, blob = {}, b""
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(b)]}
        blob += b
    if metadata is not None:
        hdr["__metadata__"] = metadata
    hb = json.dumps(hdr).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + blob


def seeds_safetensors():
    f32 = lambda *xs: struct.pack("<%df" % len(xs), *xs)
    put("safetensors", "small", st_bytes([
        ("model.embed_tokens.weight", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)),
        ("model.norm.weight", "F16", [4], struct.pack("<4e", 1, 0.5, -2, 3)),
        ("lm_head.weight", "BF16", [2, 2], b"\x80\x3f\x80\xbf\x00\x40\x80\x3e"),
        ("scalar", "F32", [], f32(3.0)),
        ("empty", "I32", [0, 4], b""),
        ("ids", "I64", [2], struct.pack("<2q", 7, -1)),
    ], metadata={"format": "pt"}))
    put("safetensors", "empty_header", st_bytes([]))
    put("safetensors", "layers", st_bytes([("model.layers.%d.mlp.up_proj.weight" % i, "BF16", [2, 2], b"\0" * 8)
                                           for i in range(4)]))
    put("safetensors", "escaped", st_bytes([("a\u00e9\n\"", "U8", [3], b"xyz")]))   # \u, \n, \" escapes


def seeds_config():
    for kind in make_fixture.KINDS:
        cfg = make_fixture.config_for(kind, "f32")
        put("config", kind, json.dumps(cfg, indent=2) + "\0" +
            json.dumps({"bos_token_id": 1, "eos_token_id": [2, 3], "do_sample": True, "temperature": 0.7,
                        "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}))
    put("config", "minimal", json.dumps({"model_type": "llama", "hidden_size": 8, "intermediate_size": 8,
                                         "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4}))


def spm_tokenizer():
    """Llama 2 style: <unk> <s> </s>, 256 <0xNN>, then pieces; byte_fallback; SPM normalizer."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    pieces = ["\u2581", "a", "b", "c", "e", "l", "o", "h", "\u2581h", "\u2581a", "ll", "he", "hell", "hello", "\u2581hello"]
    for p in pieces:
        vocab[p] = len(vocab)
    merges = ["\u2581 h", "\u2581 a", "l l", "h e", "he ll", "hell o", "\u2581h ello"]
    merges = [m for m in merges if all(x in vocab for x in m.split(" ")) and m.replace(" ", "") in vocab]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for s, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def seeds_tokenizers(tmp):
    dirs = []
    for style, size in (("qwen2", 300), ("llama", 300)):
        tok, _ = make_fixture.make_tokenizer(style, size)
        cfg = {"bos_token": "<s>" if style == "llama" else None, "eos_token": "</s>" if style == "llama" else "<|im_end|>"}
        put("tokenizer_json", style, json.dumps(tok, ensure_ascii=False) + "\0" + json.dumps(cfg))
        d = os.path.join(tmp, style)
        os.makedirs(d)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tok, f, ensure_ascii=False)
        dirs.append(d)
    spm = spm_tokenizer()
    cfg = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
           "eos_token": {"content": "</s>"}}
    put("tokenizer_json", "spm", json.dumps(spm, ensure_ascii=False) + "\0" + json.dumps(cfg))
    put("tokenizer_json", "spm_no_config", json.dumps(spm))
    d = os.path.join(tmp, "spm")
    os.makedirs(d)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(spm, f, ensure_ascii=False)
    dirs.append(d)
    # GPT-2-style (Digits + ByteLevel's regex), SmolLM2's chat template
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_chat
    d = test_chat.smollm2_dir(os.path.join(tmp, "gpt2"))
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tok = f.read()
    with open(os.path.join(d, "chat_template.jinja")) as f:
        cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": f.read()}
    put("tokenizer_json", "gpt2", tok + "\0" + json.dumps(cfg))
    dirs.append(d)
    return dirs


def seeds_encoder():
    texts = ["Hello, world!", "  leading spaces and\ttabs\n\nnew lines\r\n", "123456789 0.5 3,14",
             "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m e\u0301", "\u4f60\u597d\uff0c\u4e16\u754c", "\U0001F600\U0001F680 emoji",
             "<|im_start|>user\nhi<|im_end|>", "<s>hello</s> <unk>", "it's they're I'll we'd",
             "\xff\xfe invalid utf8 \xc3", "    \n   x", "I'M 'Re x's 1 22 333 \u0663\u00bd  \n 7 "]
    for i, t in enumerate(texts):
        for sel in range(2):
            data = t.encode("utf-8", "surrogateescape") if isinstance(t, str) else t
            # byte 0 picks the tokenizer (mod make fuzz's 5); the last text goes to the GPT-2-style ones
            put("encoder", "text%02d_%d" % (i, sel), bytes([sel * 5 + i % 3 if i < 11 else 3 + sel]) + data)


PACKER = r'''
#include "tokenizer_pack.h"
#include <stdio.h>
int main(int argc, char **argv) {
    Arena a = {0}; size_t n;
    uint8_t *b = tokenizer_pack(&a, argv[1], &n);
    if (!b) return 1;
    FILE *f = fopen(argv[2], "wb"); fwrite(b, 1, n, f); fclose(f);
    return 0;
}
'''


def seeds_tokblob(tmp, dirs):
    src = os.path.join(tmp, "packer.c")
    with open(src, "w") as f:
        f.write(PACKER)
    exe = os.path.join(tmp, "packer")
    subprocess.check_call(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-I" + os.path.join(ROOT, "compiler"),
                           "-I" + os.path.join(ROOT, "runtime"), src] +
                          [os.path.join(ROOT, p) for p in ("compiler/tokenizer_pack.c", "compiler/json.c", "runtime/json.c", "compiler/util.c",
                                                           "runtime/tokenizer.c")] + ["-lutf8proc", "-o", exe])
    for d in dirs:
        out = os.path.join(CORPUS, "tokblob", os.path.basename(d))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.check_call([exe, d, out])


def seeds_gguf():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_gguf as g
    put("gguf", "small", g.small_raw())
    put("gguf", "empty", g.raw_gguf())
    put("gguf", "v2", g.raw_gguf([g.u32("general.alignment", 16)], [g.raw_tensor("x", [2], 0, 0)],
                                 struct.pack("<2f", 1, 2), version=2, alignment=16))
    scalars = [(0, "<B", 255), (1, "<b", -1), (2, "<H", 7), (3, "<h", -7), (4, "<I", 9), (5, "<i", -9),
               (6, "<f", 0.5), (7, "<B", 1), (10, "<Q", 2 ** 64 - 1), (11, "<q", -2), (12, "<d", 0.25)]
    kvs = [g.raw_kv("s%d" % t, t, struct.pack(f, v)) for t, f, v in scalars]
    kvs += [g.raw_kv("a%d" % t, 9, struct.pack("<IQ", t, 3) + struct.pack(f[0] + "3" + f[1], v, v, v))
            for t, f, v in scalars]
    kvs += [g.raw_kv("str", 8, g.raw_str("h\u00e9llo")), g.u32("general.alignment", 64),
            g.raw_kv("tokens", 9, struct.pack("<IQ", 8, 3) + g.raw_str("<s>") + g.raw_str("") + g.raw_str("ab"))]
    put("gguf", "kv_types", g.raw_gguf(kvs, [g.raw_tensor("w", [2, 2], 30, 0)], b"\0" * 8, alignment=64))
    # quantized and plain types, each at an aligned offset: (name, ne, ggml type, bytes)
    specs = [("q4_0", [32, 2], 2, 36), ("q8_0", [64], 8, 68), ("q4_k", [256], 12, 144), ("f16", [3, 1, 2], 1, 12),
             ("i32", [1, 1, 1, 3], 26, 12), ("iq2_xxs", [256], 16, 66), ("mxfp4", [32], 39, 17)]
    tensors, data = [], b""
    for name, ne, t, n in specs:
        tensors.append(g.raw_tensor(name, ne, t, len(data)))
        data += bytes(range(n % 256)) + b"\0" * (-n % 32)
    put("gguf", "quant", g.raw_gguf([g.raw_kv("general.architecture", 8, g.raw_str("llama"))], tensors, data))


CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA2 = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
          "{% else %}{{ ' ' + m['content'] + eos_token }}{% endif %}{% endfor %}")


def gguf_model_bytes(arch, qtype, tokenizer, template=None, layers=1, hidden=32, heads=2, kv=1, ff=64):
    """A GGUF model file as convert_hf_to_gguf.py lays one out, tiny: random weights, linears in qtype."""
    import numpy as np
    import gguf
    from gguf import GGUFWriter
    rng = np.random.default_rng(7)
    model, tokens, types, extra = tokenizer
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.gguf")
        w = GGUFWriter(out, arch)
        w.add_type("model")
        w.add_block_count(layers)
        w.add_context_length(256)
        w.add_embedding_length(hidden)
        w.add_feed_forward_length(ff)
        w.add_head_count(heads)
        w.add_head_count_kv(kv)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        if arch == "llama":
            w.add_vocab_size(len(tokens))
            w.add_rope_dimension_count(hidden // heads)
        w.add_tokenizer_model(model)
        w.add_token_list(tokens)
        w.add_token_types(types)
        for key, value in extra:
            getattr(w, key)(value)
        if template:
            w.add_chat_template(template)

        def add(name, *shape):
            a = rng.standard_normal(shape).astype(np.float32) * 0.1
            if len(shape) == 1:
                w.add_tensor(name, a if "norm" not in name else a + 1)
            else:
                w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        hd = hidden // heads
        add("token_embd.weight", len(tokens), hidden)
        add("output_norm.weight", hidden)
        for i in range(layers):
            b = "blk.%d." % i
            add(b + "attn_norm.weight", hidden)
            add(b + "attn_q.weight", heads * hd, hidden)
            add(b + "attn_k.weight", kv * hd, hidden)
            add(b + "attn_v.weight", kv * hd, hidden)
            if arch == "qwen2":
                add(b + "attn_q.bias", heads * hd)
                add(b + "attn_k.bias", kv * hd)
                add(b + "attn_v.bias", kv * hd)
            if arch == "qwen3":
                add(b + "attn_q_norm.weight", hd)
                add(b + "attn_k_norm.weight", hd)
            add(b + "attn_output.weight", hidden, heads * hd)
            add(b + "ffn_norm.weight", hidden)
            add(b + "ffn_gate.weight", ff, hidden)
            add(b + "ffn_up.weight", ff, hidden)
            add(b + "ffn_down.weight", hidden, ff)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(out, "rb") as f:
            return f.read()


def seeds_gguf_model():
    from gguf import GGMLQuantizationType as QT
    # SentencePiece: <unk>, <s>, </s>, a few pieces, byte tokens for what they miss; scores rank the merges
    pieces = ["<unk>", "<s>", "</s>", "\u2581", "\u2581H", "e", "l", "ll", "o", "\u2581w", "r", "d", "H", "w", "!"]
    pieces += ["<0x%02X>" % b for b in range(256)]
    ptypes = [2, 3, 3] + [1] * 12 + [6] * 256
    scores = [0.0, 0.0, 0.0] + [-float(i) for i in range(12)] + [0.0] * 256
    spm = ("llama", pieces, ptypes, [("add_token_scores", scores), ("add_bos_token_id", 1), ("add_eos_token_id", 2),
                                     ("add_unk_token_id", 0), ("add_add_bos_token", True)])
    put("gguf_model", "llama_spm", gguf_model_bytes("llama", QT.F16, spm, LLAMA2))
    # byte-level BPE: GPT-2's byte alphabet, a few merges, ChatML's control tokens
    alphabet = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a"]
    merges = ["H e", "He l", "Hel l", "Hell o", "\u0120 w", "\u0120w o"]
    words = ["He", "Hel", "Hell", "Hello", "\u0120w", "\u0120wo"]
    bpe_tokens = alphabet + words + ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    bpe_types = [1] * (len(alphabet) + len(words)) + [3, 3, 3]
    eot = len(bpe_tokens) - 2
    for arch, pre, qt in (("qwen2", "qwen2", QT.Q8_0), ("qwen3", "smollm", QT.Q4_0)):
        bpe = ("gpt2", bpe_tokens, bpe_types, [("add_tokenizer_pre", pre), ("add_token_merges", merges),
                                               ("add_eos_token_id", eot), ("add_bos_token_id", eot + 1)])
        put("gguf_model", arch + "_bpe", gguf_model_bytes(arch, qt, bpe, CHATML, kv=2 if arch == "qwen3" else 1))


def main():
    if sys.argv[1:] == ["gguf_model"]:
        shutil.rmtree(os.path.join(CORPUS, "gguf_model"), ignore_errors=True)
        seeds_gguf_model()
        return
    if sys.argv[1:] == ["gguf"]:
        shutil.rmtree(os.path.join(CORPUS, "gguf"), ignore_errors=True)
        seeds_gguf()
        return
    shutil.rmtree(CORPUS, ignore_errors=True)
    seeds_gguf()
    seeds_gguf_model()
    seeds_safetensors()
    seeds_config()
    seeds_encoder()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = seeds_tokenizers(tmp)
        seeds_tokblob(tmp, dirs)
    for t in sorted(os.listdir(CORPUS)):
        fs = os.listdir(os.path.join(CORPUS, t))
        print("%s: %d seeds, %d bytes" % (t, len(fs), sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in fs)))


if __name__ == "__main__":
    main()
