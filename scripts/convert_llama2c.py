#!/usr/bin/env python3
"""convert_llama2c.py: converts a karpathy/llama2.c checkpoint (legacy
format: 7 x int32 header, f32 weights) and its tokenizer.bin into a Hugging
Face LlamaForCausalLM directory (config.json, model.safetensors (f32),
tokenizer.json, tokenizer_config.json, generation_config.json).

    python3 scripts/convert_llama2c.py MODEL.bin TOKENIZER.bin OUTDIR
    python3 scripts/convert_llama2c.py --tokenizer-only TOKENIZER.bin OUTDIR

RoPE: llama2.c rotates interleaved pairs (2i, 2i+1); HF Llama rotates halves
(i, i + d/2). As in transformers' convert_llama_weights_to_hf.py, the rows of
wq and wk are permuted per head: w.view(h, hd/2, 2, in).transpose(1, 2).

Tokenizer: llama2.c's tokenizer.bin holds SentencePiece pieces (with "▁"
exported as " ") and scores. llama2.c's encoder repeatedly merges the adjacent
pair whose concatenation is a vocab piece with the highest score; an HF BPE
model with one merge "a b" per split of each piece, ranked by the piece's score
(descending), does the same. Pieces that are byte tokens (<0xXX>) or the
specials <unk>/<s>/</s> get no merges (SentencePiece never forms them from
text; llama2.c would, for literal text like "<0x0A>" — a llama2.c quirk not
reproduced).
"""
import json
import os
import re
import struct
import sys

import numpy as np


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, ndarray f32). Writes F32 safetensors."""
    header = {}
    off = 0
    blobs = []
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = metadata or {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def permute_rope(w, n_heads):
    """HF convert_llama_weights_to_hf.permute: interleaved -> rotate-half rows."""
    d1, d2 = w.shape
    return w.reshape(n_heads, d1 // n_heads // 2, 2, d2).transpose(0, 2, 1, 3).reshape(d1, d2)


def read_model(path):
    with open(path, "rb") as f:
        data = f.read()
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic == 0x616B3432:
        raise SystemExit("%s: llama2.c versioned export (magic ak42) is not supported; "
                         "use the legacy format (export.py --version 0)" % path)
    dim, hidden, L, nh, nkv, vocab, seq = struct.unpack_from("<7i", data, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    if not (dim > 0 and hidden > 0 and L > 0 and nh > 0 and nkv > 0 and seq > 0 and dim % nh == 0):
        raise SystemExit("%s: implausible header %r" % (path, (dim, hidden, L, nh, nkv, vocab, seq)))
    hs = dim // nh
    kvd = nkv * hs
    fl = np.frombuffer(data, dtype="<f4", offset=28)
    pos = [0]

    def take(*shape):
        n = int(np.prod(shape))
        if pos[0] + n > fl.size:
            raise SystemExit("%s: file too short" % path)
        a = fl[pos[0]:pos[0] + n].reshape(shape).astype(np.float32)
        pos[0] += n
        return a

    w = {}
    w["emb"] = take(vocab, dim)
    w["rms_att"] = take(L, dim)
    w["wq"] = take(L, dim, dim)
    w["wk"] = take(L, kvd, dim)
    w["wv"] = take(L, kvd, dim)
    w["wo"] = take(L, dim, dim)
    w["rms_ffn"] = take(L, dim)
    w["w1"] = take(L, hidden, dim)
    w["w2"] = take(L, dim, hidden)
    w["w3"] = take(L, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq, hs // 2)  # freq_cis_real (unused)
    take(seq, hs // 2)  # freq_cis_imag (unused)
    if not shared:
        w["wcls"] = take(vocab, dim)
    if pos[0] != fl.size:
        raise SystemExit("%s: %d trailing floats (wrong header?)" % (path, fl.size - pos[0]))
    hp = dict(dim=dim, hidden=hidden, L=L, nh=nh, nkv=nkv, vocab=vocab, seq=seq, shared=shared)
    return hp, w


def read_tokenizer(path, vocab_size):
    """Returns (max_token_length, [bytes piece], [float score])."""
    with open(path, "rb") as f:
        data = f.read()
    (maxlen,) = struct.unpack_from("<i", data, 0)
    off = 4
    pieces, scores = [], []
    i = 0
    while vocab_size is None or i < vocab_size:
        if vocab_size is None and off >= len(data):
            break
        i += 1
        if off + 8 > len(data):
            raise SystemExit("%s: only %d tokens, model needs %d" % (path, i - 1, vocab_size))
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        pieces.append(data[off:off + n])
        off += n
        scores.append(score)
    return maxlen, pieces, scores


BYTE_RE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")
SPECIALS = ("<unk>", "<s>", "</s>")


def build_tokenizer_json(pieces, scores):
    vocab = {}
    names = []
    for i, b in enumerate(pieces):
        if i < 3:
            s = SPECIALS[i]
        else:
            s = b.decode("utf-8", errors="replace").replace(" ", "\u2581")
        if s in vocab:  # keep the first id, like a sorted bsearch would find one of them
            s = s + "<dup%d>" % i
        vocab[s] = i
        names.append(s)
    # merges: for each mergeable piece, every split into two vocab pieces
    merges = []
    for i, s in enumerate(names):
        if i < 3 or BYTE_RE.match(s) or len(s) < 2 or "<dup" in s:
            continue
        for k in range(1, len(s)):
            a, b = s[:k], s[k:]
            if a in vocab and b in vocab:
                merges.append((-scores[i], i, k, a, b))
    merges.sort()
    for m in merges:
        if " " in m[3] or " " in m[4]:
            raise SystemExit("piece with a literal space cannot be written as a merge")
    added = [{"id": i, "content": SPECIALS[i], "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i in range(3)]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": "<unk>",
            "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
            "vocab": vocab,
            "merges": ["%s %s" % (m[3], m[4]) for m in merges]},
    }
    return tok


def write_tokenizer(tok_path, vocab_size, out, model_max_length=None):
    """Writes tokenizer.json + tokenizer_config.json from a llama2.c
    tokenizer.bin (vocab_size None: every token in the file)."""
    os.makedirs(out, exist_ok=True)
    _, pieces, scores = read_tokenizer(tok_path, vocab_size)
    tok = build_tokenizer_json(pieces, scores)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    tc = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": model_max_length,
        "tokenizer_class": "LlamaTokenizer",
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                 for a in tok["added_tokens"]},
    }
    if model_max_length is None:
        del tc["model_max_length"]
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    return len(pieces)


def convert(model_path, tok_path, out):
    hp, w = read_model(model_path)
    os.makedirs(out, exist_ok=True)
    dim, L, nh, nkv = hp["dim"], hp["L"], hp["nh"], hp["nkv"]
    t = [("model.embed_tokens.weight", w["emb"])]
    for i in range(L):
        p = "model.layers.%d." % i
        t += [
            (p + "input_layernorm.weight", w["rms_att"][i]),
            (p + "self_attn.q_proj.weight", permute_rope(w["wq"][i], nh)),
            (p + "self_attn.k_proj.weight", permute_rope(w["wk"][i], nkv)),
            (p + "self_attn.v_proj.weight", w["wv"][i]),
            (p + "self_attn.o_proj.weight", w["wo"][i]),
            (p + "post_attention_layernorm.weight", w["rms_ffn"][i]),
            (p + "mlp.gate_proj.weight", w["w1"][i]),
            (p + "mlp.up_proj.weight", w["w3"][i]),
            (p + "mlp.down_proj.weight", w["w2"][i]),
        ]
    t.append(("model.norm.weight", w["rms_final"]))
    if not hp["shared"]:
        t.append(("lm_head.weight", w["wcls"]))
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": dim,
        "intermediate_size": hp["hidden"],
        "num_hidden_layers": L,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": dim // nh,
        "vocab_size": hp["vocab"],
        "max_position_embeddings": hp["seq"],
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "tie_word_embeddings": hp["shared"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
        "use_cache": True,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # run.c's defaults: temperature 1.0, top-p 0.9
    gen = {"bos_token_id": 1, "eos_token_id": 2, "do_sample": True,
           "temperature": 1.0, "top_p": 0.9, "max_length": hp["seq"]}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    write_tokenizer(tok_path, hp["vocab"], out, hp["seq"])
    return hp


def main(argv):
    if len(argv) == 3 and argv[0] == "--tokenizer-only":
        n = write_tokenizer(argv[1], None, argv[2])
        print("wrote %s: tokenizer only, %d tokens" % (argv[2], n))
        return 0
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    hp = convert(*argv)
    print("wrote %s: dim %d hidden %d layers %d heads %d/%d vocab %d seq %d %s" % (
        argv[2], hp["dim"], hp["hidden"], hp["L"], hp["nh"], hp["nkv"], hp["vocab"], hp["seq"],
        "tied" if hp["shared"] else "untied"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
