#!/usr/bin/env python3
"""make_fixture.py: writes a tiny Hugging Face checkpoint with seeded random
weights, for llmcc's tests.

    python3 scripts/make_fixture.py KIND OUTDIR [--dtype f32|bf16] [--seed N]

KIND:
  llama-gqa     LlamaForCausalLM: hidden 64, intermediate 172, 2 layers, 4 heads,
                2 kv heads, head_dim 16, vocab 300, untied lm_head, rope_theta 1e4,
                llama3 rope_scaling (factor 8, low 1, high 4, original 32)
  qwen2-tied    Qwen2ForCausalLM: hidden 64, intermediate 128, 2 layers, 4 heads,
                1 kv head, q/k/v biases, tied embeddings, rope_theta 1e6,
                eps 1e-6, vocab 320 (tokenizer has 300), eos [5, 6]
  llama-linear  as llama-gqa but linear rope_scaling (factor 2), head_dim 32
                (!= hidden/heads), attention_bias and mlp_bias
  qwen3         Qwen3ForCausalLM: hidden 64, intermediate 128, 2 layers, 4 heads, 2 kv
                heads, head_dim 32 (!= hidden/heads), q_norm / k_norm, no biases,
                untied lm_head, rope_theta 1e6, eps 1e-6
  qwen3-tied    as qwen3 but tied embeddings, head_dim 16, 1 kv head
  mistral       MistralForCausalLM: hidden 64, intermediate 160, 2 layers, 4 heads,
                1 kv head, sliding_window 512 (not smaller than the context of 256),
                rope_theta 1e6, eps 1e-5
  smollm        LlamaForCausalLM shaped as SmolLM2 (9 heads, 3 kv heads, head_dim 8,
                hidden 72, tied embeddings, rope_theta 1e5, SmolLM2's config keys
                is_llama_config and rope_interleaved) with the GPT-2-style tokenizer of
                tests/data/gpt2_tokenizer.json (Digits, ByteLevel with GPT-2's regex;
                <|im_start|> / <|im_end|> as SmolLM2's) and SmolLM2-Instruct's chat template
  qwen2-tok     Qwen2ForCausalLM with the real Qwen2.5-Instruct tokenizer and
                generation_config (copied from --tokenizer-dir, default
                ../shared/assets/tokenizers/qwen2.5-instruct): vocab 151936, hidden 32,
                intermediate 64, 1 layer, 2 heads, 1 kv head, untied lm_head. Rigged so
                that after a token whose id is a multiple of 5 it emits <|im_end|>
                (151645): embedding dimension 0 is +4 for those ids and -2 for the rest,
                and only the <|im_end|> row of lm_head reads dimension 0 (weight 50).
  qwen3-tok     Qwen3ForCausalLM with the real Qwen3 tokenizer and chat template
                (../shared/assets/tokenizers/qwen3) and Qwen3-8B's generation_config:
                vocab 151936, hidden 32, 1 layer. Rigged so that its greedy reply after
                "...assistant\n" is "<think>I</think>\n\nHello<|im_end|>": the embedding of
                each id of that chain is one dimension of its own (the rest near zero),
                the next id's lm_head row reads it (weight 50).
  mistral-spm   mistral with vocab 32000 and the SentencePiece-style tokenizer files of
                --tokenizer-dir (required; Llama 2's with a Metaspace pre-tokenizer, as
                Mistral's are: scripts/llama2_metaspace.py first DIR); layout v5.
  llama-k       LlamaForCausalLM with every row a multiple of 256 values (GGUF's K-quants'
                super-blocks, which llama-quantize needs): hidden 256, intermediate 768,
                4 layers, 4 heads, 2 kv heads, head_dim 64, vocab 300, no rope_scaling

--layout v4 writes config.json as transformers 4.x did (top-level rope_theta and
rope_scaling, torch_dtype), --layout v5 as transformers 5 does (both inside
rope_parameters, dtype, layer_types for Qwen); the default is v4 for the first
three kinds (as hub checkpoints have) and v5 for qwen3, qwen3-tied and mistral.
--dtype f16 writes float16 weights.

Writes config.json, generation_config.json, model.safetensors,
tokenizer.json (tiny byte-level BPE in HF format, or the copied one) and
tokenizer_config.json.
Standard library + numpy only.
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys

import numpy as np

KINDS = ("llama-gqa", "qwen2-tied", "llama-linear")
# kinds of the families added later (checked against transformers: scripts/gen_family_expected.py)
FAMILY_KINDS = ("qwen3", "qwen3-tied", "mistral", "smollm")
# kinds with an outside tokenizer: not in KINDS, which the numpy reference tests walk
# (mistral-spm and llama-k last: a kind's place seeds its weights)
EXTRA_KINDS = ("qwen2-tok",) + FAMILY_KINDS + ("qwen3-tok", "mistral-spm", "llama-k")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN_TOK_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "assets", "tokenizers", "qwen2.5-instruct"))
QWEN3_TOK_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "assets", "tokenizers", "qwen3"))
QWEN3_GEN_CONFIG = os.path.normpath(os.path.join(ROOT, "..", "shared", "assets", "hf-configs",
                                                 "Qwen3-8B.generation_config.json"))
# qwen3-tok's greedy chain: "\n" -> <think> -> "I" -> </think> -> "\n\n" -> "Hello" -> <|im_end|>
QWEN3_CHAIN = (198, 151667, 40, 151668, 271, 9707, 151645)
IM_END = 151645

CORPUS = (
    "Once upon a time there was a little robot who lived in a small town. "
    "The robot liked to read books and to count the stars at night. "
    "One day the robot met a cat, and the cat said: hello, what is your name? "
    "I am the robot of the town, it said, and I like the stars and the sea. "
    "They walked to the sea together, and then they went home to sleep. "
    "In the morning the sun was bright, the birds were singing, and the robot "
    "was happy. 1, 2, 3 and 42 are numbers; the end.\n"
)

# Qwen2's pre-tokenizer regex (tokenizer.json of Qwen2.5)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


# ---------------------------------------------------------------- safetensors
def f32_to_bf16_bits(a):
    """Round-to-nearest-even f32 -> bf16 bit patterns (uint16)."""
    u = np.ascontiguousarray(a, dtype="<f4").view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    r = np.where(nan, (u >> 16) | 0x40, r)
    return r.astype("<u2")


def write_safetensors(path, tensors, dtype="f32"):
    """tensors: list of (name, ndarray). dtype f32, bf16 or f16."""
    header = {}
    blobs = []
    off = 0
    for name, a in tensors:
        a = np.asarray(a, dtype=np.float32)
        if dtype == "bf16":
            b = f32_to_bf16_bits(a).tobytes()
            dt = "BF16"
        elif dtype == "f16":
            b = np.ascontiguousarray(a, dtype="<f2").tobytes()
            dt = "F16"
        else:
            b = np.ascontiguousarray(a, dtype="<f4").tobytes()
            dt = "F32"
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------- tokenizer
def bytes_to_unicode():
    """GPT-2's byte -> printable unicode map (in its canonical order)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) \
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return list(zip(bs, [chr(c) for c in cs]))


def train_merges(n_merges):
    """Tiny BPE training on CORPUS (words split ASCII-GPT-2 style)."""
    b2u = dict(bytes_to_unicode())
    words = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+",
                       CORPUS)
    freq = {}
    for w in words:
        key = tuple(b2u[b] for b in w.encode("utf-8"))
        freq[key] = freq.get(key, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in freq.items():
            for i in range(len(w) - 1):
                pairs[(w[i], w[i + 1])] = pairs.get((w[i], w[i + 1]), 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new = {}
        for w, c in freq.items():
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        freq = new
    if len(merges) < n_merges:
        raise RuntimeError("corpus too small for %d merges" % n_merges)
    return merges


def added(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def make_tokenizer(style, size):
    """style 'llama': <unk> <s> </s> then 256 bytes (byte order) then merges;
    Llama 3 Split regex + ByteLevel, <s> prepended. style 'qwen2': 256 bytes
    (GPT-2 order) then merges then <|endoftext|> <|im_start|> <|im_end|>;
    Qwen2 Split regex + ByteLevel. Returns (tokenizer.json dict, specials)."""
    b2u = bytes_to_unicode()
    vocab = {}
    if style == "llama":
        specials = ["<unk>", "<s>", "</s>"]
        for s in specials:
            vocab[s] = len(vocab)
        for b, u in sorted(b2u):
            vocab[u] = len(vocab)
        merges = train_merges(size - len(vocab))
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        for b, u in b2u:
            vocab[u] = len(vocab)
        merges = train_merges(size - len(vocab) - len(specials))
    for a, b in merges:
        vocab[a + b] = len(vocab)
    if style == "llama":
        add = [added(vocab[s], s) for s in specials]
        # Llama 3's pre-tokenizer: its split regex (digits in runs of up to 3), then ByteLevel
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT.replace(r"\p{N}|", r"\p{N}{1,3}|", 1)},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        post = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
        norm = None
    else:
        add = []
        for s in specials:
            vocab_id = len(vocab) + len(add)
            add.append(added(vocab_id, s))
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        norm = {"type": "NFC"}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": add,
        "normalizer": norm,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": ["%s %s" % m for m in merges]},
    }
    return tok, {a["content"]: a["id"] for a in add}


# ---------------------------------------------------------------- configs
def config_for(kind, dtype):
    td = {"bf16": "bfloat16", "f16": "float16"}.get(dtype, "float32")
    if kind == "qwen3-tok":
        cfg = config_for("qwen3", dtype)
        cfg.update({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 151936, "max_position_embeddings": 512,
                    "max_window_layers": 1, "bos_token_id": 151643, "eos_token_id": 151645})
        return cfg
    if kind in ("qwen3", "qwen3-tied"):
        tied = kind == "qwen3-tied"
        return {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 1 if tied else 2,
            "head_dim": 16 if tied else 32, "vocab_size": 320,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
            "attention_dropout": 0.0, "sliding_window": None, "max_window_layers": 2,
            "use_sliding_window": False, "tie_word_embeddings": tied,
            "bos_token_id": 297, "eos_token_id": [5, 6],
            "initializer_range": 0.02, "torch_dtype": td, "use_cache": True,
        }
    if kind == "mistral-spm":   # Mistral with a SentencePiece-style tokenizer of 32000 ids (Llama 2's)
        return dict(config_for("mistral", dtype), vocab_size=32000)
    if kind == "smollm":
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 72, "intermediate_size": 192, "num_hidden_layers": 2,
            "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 8, "vocab_size": 1024,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "rope_scaling": None,
            "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
            "pretraining_tp": 1, "is_llama_config": True, "rope_interleaved": False, "tie_word_embeddings": True,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "initializer_range": 0.02,
            "torch_dtype": td, "use_cache": True,
        }
    if kind == "mistral":
        return {
            "architectures": ["MistralForCausalLM"], "model_type": "mistral",
            "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 300,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
            "hidden_act": "silu", "attention_dropout": 0.0, "sliding_window": 512,
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
            "initializer_range": 0.02, "torch_dtype": td, "use_cache": True,
        }
    if kind == "qwen2-tok":
        return {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 151936,
            "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "rope_scaling": None, "hidden_act": "silu", "attention_dropout": 0.0,
            "sliding_window": 512, "max_window_layers": 1, "use_sliding_window": False,
            "tie_word_embeddings": False, "bos_token_id": 151643, "eos_token_id": 151645,
            "initializer_range": 0.02, "torch_dtype": td, "use_cache": True,
        }
    if kind == "qwen2-tied":
        return {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 320,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "rope_scaling": None, "hidden_act": "silu", "attention_dropout": 0.0,
            "sliding_window": 256, "max_window_layers": 2, "use_sliding_window": False,
            "tie_word_embeddings": True, "bos_token_id": 297, "eos_token_id": [5, 6],
            "initializer_range": 0.02, "torch_dtype": td, "use_cache": True,
        }
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
        "mlp_bias": False, "pretraining_tp": 1, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
        "torch_dtype": td, "use_cache": True,
    }
    if kind == "llama-linear":
        cfg.update({"head_dim": 32, "rope_scaling": {"type": "linear", "factor": 2.0},
                    "attention_bias": True, "mlp_bias": True})
    if kind == "llama-k":
        cfg.update({"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4, "head_dim": 64,
                    "rope_scaling": None})
    return cfg


def layout_v5(cfg):
    """config.json as transformers 5 writes it: rope_theta and rope_scaling inside
    rope_parameters, dtype for torch_dtype, layer_types for Qwen2/Qwen3
    (checked against save_pretrained by scripts/gen_family_expected.py)."""
    cfg = dict(cfg)
    rp = {"rope_theta": cfg.pop("rope_theta", 10000.0)}
    rs = cfg.pop("rope_scaling", None)
    if rs:
        rs = dict(rs)
        rp["rope_type"] = rs.pop("rope_type", rs.pop("type", "default"))
        rp.update(rs)
    else:
        rp["rope_type"] = "default"
    cfg["rope_parameters"] = rp
    cfg["dtype"] = cfg.pop("torch_dtype")
    cfg.setdefault("pad_token_id", None)
    if cfg["model_type"] in ("qwen2", "qwen3"):
        cfg["layer_types"] = ["full_attention"] * cfg["num_hidden_layers"]
        if not cfg.get("use_sliding_window"):
            cfg["sliding_window"] = None
    if cfg["model_type"] == "llama":
        cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg["transformers_version"] = "5.25.0"
    return dict(sorted(cfg.items()))


def gen_config_for(kind):
    if kind == "qwen2-tied":
        return {"bos_token_id": 297, "eos_token_id": [5, 6], "pad_token_id": 297,
                "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                "repetition_penalty": 1.05}
    if kind in ("qwen3", "qwen3-tied"):
        return {"bos_token_id": 297, "eos_token_id": [5, 6], "do_sample": False}
    if kind == "smollm":
        return {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "do_sample": False}
    if kind == "llama-linear":
        return {"bos_token_id": 1, "eos_token_id": 2, "do_sample": True,
                "temperature": 0.6, "top_p": 0.9}
    return {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}


# ---------------------------------------------------------------- weights
def make_weights(cfg, rng):
    H = cfg["hidden_size"]
    I = cfg["intermediate_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    V = cfg["vocab_size"]
    qwen = cfg["model_type"] == "qwen2"
    qk_norm = cfg["model_type"] == "qwen3"
    attn_b = qwen or cfg.get("attention_bias", False)
    mlp_b = cfg.get("mlp_bias", False)

    # Tied embeddings make a random model echo its input token (logit of t is
    # ~|e_t|^2); for qwen2-tied a small embedding and 3x larger residual-branch
    # outputs (o_proj, down_proj) keep greedy decoding from looping on one id.
    out_gain = 3.0 if qwen else 1.0

    def lin(o, i, gain=1.0):
        std = gain * min(0.1, max(0.02, 0.7 / np.sqrt(i)))
        return rng.normal(0.0, std, size=(o, i)).astype(np.float32)

    def bias(n):
        return rng.normal(0.0, 0.02, size=(n,)).astype(np.float32)

    def norm(n):
        return (1.0 + rng.normal(0.0, 0.05, size=(n,))).astype(np.float32)

    if cfg["tie_word_embeddings"]:
        out_gain = 3.0
    t = [("model.embed_tokens.weight", rng.normal(0.0, 0.05 if qwen or cfg["tie_word_embeddings"] else 0.1,
                                                  size=(V, H)).astype(np.float32))]
    for li in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % li
        t.append((p + "input_layernorm.weight", norm(H)))
        for name, o, i in (("q_proj", nh * hd, H), ("k_proj", nkv * hd, H),
                           ("v_proj", nkv * hd, H), ("o_proj", H, nh * hd)):
            t.append((p + "self_attn.%s.weight" % name,
                      lin(o, i, out_gain if name == "o_proj" else 1.0)))
            if attn_b and not (qwen and name == "o_proj"):
                t.append((p + "self_attn.%s.bias" % name, bias(o)))
        if qk_norm:
            t.append((p + "self_attn.q_norm.weight", norm(hd)))
            t.append((p + "self_attn.k_norm.weight", norm(hd)))
        t.append((p + "post_attention_layernorm.weight", norm(H)))
        for name, o, i in (("gate_proj", I, H), ("up_proj", I, H), ("down_proj", H, I)):
            t.append((p + "mlp.%s.weight" % name,
                      lin(o, i, out_gain if name == "down_proj" else 1.0)))
            if mlp_b:
                t.append((p + "mlp.%s.bias" % name, bias(o)))
    t.append(("model.norm.weight", norm(H)))
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", rng.normal(0.0, 0.1, size=(V, H)).astype(np.float32)))
    if V > IM_END and cfg["model_type"] == "qwen2":   # qwen2-tok: emit <|im_end|> after ids that are multiples of 5
        emb, head = t[0][1], t[-1][1]
        emb[:, 0] = np.where(np.arange(V) % 5 == 0, 4.0, -2.0)
        head[:, 0] = 0.0
        head[IM_END, 0] = 50.0
    return t


def rig_qwen3_chain(t, H):
    """qwen3-tok: each id of QWEN3_CHAIN but the last has an embedding dimension of its own, which only the
    next id's lm_head row reads; everything else in the layer is small, so greedy decoding follows the chain."""
    w = dict(t)
    emb, head = w["model.embed_tokens.weight"], w["lm_head.weight"]
    n = len(QWEN3_CHAIN) - 1
    emb[:, :n] = 0.0
    head[:, :n] = 0.0
    for d, (cur, nxt) in enumerate(zip(QWEN3_CHAIN, QWEN3_CHAIN[1:])):
        emb[cur, :] = 0.0
        emb[cur, d] = 1.0
        head[nxt, d] = 50.0
    for name, a in t:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            a *= 0.01


def make(kind, out, dtype="f32", seed=0, tokenizer_dir=None, layout=None):
    all_kinds = KINDS + EXTRA_KINDS
    if kind not in all_kinds:
        raise ValueError("KIND must be one of %s" % ", ".join(all_kinds))
    if kind == "mistral-spm" and not tokenizer_dir:
        raise SystemExit("make_fixture.py: mistral-spm takes its tokenizer from --tokenizer-dir "
                         "(e.g. scripts/llama2_metaspace.py first DIR)")
    if kind in ("qwen2-tok", "qwen3-tok"):
        tokenizer_dir = tokenizer_dir or (QWEN_TOK_DIR if kind == "qwen2-tok" else QWEN3_TOK_DIR)
        need = [os.path.join(tokenizer_dir, fn) for fn in ("tokenizer.json", "tokenizer_config.json")]
        need.append(os.path.join(tokenizer_dir, "generation_config.json") if kind == "qwen2-tok" else QWEN3_GEN_CONFIG)
        for fn in need:
            if not os.path.exists(fn):
                raise SystemExit("make_fixture.py: %s is absent (see --tokenizer-dir)" % fn)
    os.makedirs(out, exist_ok=True)
    # seed depends on the kind too, so fixtures differ from one another
    rng = np.random.default_rng([seed, all_kinds.index(kind)])
    cfg = config_for(kind, dtype)
    weights = make_weights(cfg, rng)
    if kind == "qwen3-tok":
        rig_qwen3_chain(weights, cfg["hidden_size"])
    write_safetensors(os.path.join(out, "model.safetensors"), weights, dtype)
    if (layout or ("v5" if kind in FAMILY_KINDS + ("qwen3-tok", "mistral-spm") else "v4")) == "v5":
        cfg = layout_v5(cfg)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if kind in ("qwen2-tok", "qwen3-tok"):
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(tokenizer_dir, fn), os.path.join(out, fn))
        shutil.copyfile(os.path.join(tokenizer_dir, "generation_config.json") if kind == "qwen2-tok" else QWEN3_GEN_CONFIG,
                        os.path.join(out, "generation_config.json"))
        return cfg
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen_config_for(kind), f, indent=2)
    if kind == "smollm":
        data = os.path.join(ROOT, "tests", "data")
        shutil.copyfile(os.path.join(data, "gpt2_tokenizer.json"), os.path.join(out, "tokenizer.json"))
        shutil.copyfile(os.path.join(data, "smollm2-instruct.chat_template.jinja"), os.path.join(out, "chat_template.jinja"))
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "TokenizersBackend", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                       "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>",
                       "model_max_length": cfg["max_position_embeddings"]}, f, indent=2)
        return cfg
    if kind == "mistral-spm":
        for fn in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if os.path.exists(os.path.join(tokenizer_dir, fn)):
                shutil.copyfile(os.path.join(tokenizer_dir, fn), os.path.join(out, fn))
        return cfg
    if kind in ("qwen2-tied", "qwen3", "qwen3-tied"):
        tok, sp = make_tokenizer("qwen2", 300)
        assert sp["<|endoftext|>"] == cfg["bos_token_id"], sp
        tc = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None,
              "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "add_bos_token": False, "add_eos_token": False,
              "model_max_length": cfg["max_position_embeddings"], "chat_template": CHATML}
    else:
        tok, sp = make_tokenizer("llama", cfg["vocab_size"])
        tc = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
              "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "add_eos_token": False, "model_max_length": cfg["max_position_embeddings"]}
    tc["added_tokens_decoder"] = {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                  for a in tok["added_tokens"]}
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description="tiny seeded HF checkpoints for llmcc's tests")
    ap.add_argument("kind", choices=KINDS + EXTRA_KINDS)
    ap.add_argument("outdir")
    ap.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="f32")
    ap.add_argument("--layout", choices=("v4", "v5"), help="config.json as transformers 4.x or 5 writes it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-dir", help="qwen2-tok, qwen3-tok, mistral-spm: where the tokenizer files come from")
    a = ap.parse_args(argv)
    make(a.kind, a.outdir, a.dtype, a.seed, a.tokenizer_dir, a.layout)
    print("wrote %s (%s, %s, seed %d)" % (a.outdir, a.kind, a.dtype, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
