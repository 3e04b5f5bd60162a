#!/usr/bin/env python3
"""ref_forward.py: an independent numpy reference forward pass for Hugging Face
Llama / Qwen2 checkpoints (config.json + model.safetensors, or sharded with
model.safetensors.index.json). Written from transformers' modeling_llama.py,
modeling_qwen2.py, modeling_qwen3.py and modeling_rope_utils.py; shares no code with llmcc.

Precision: every weight is converted to float32 and all math is done in
float32 (numpy f32 matmuls), like llmcc's CPU target. RMSNorm, softmax and
RoPE tables are f32 too (HF computes them in f32 as well).

API:
    model = load(dir)
    logits_all(model, ids, bf16_x_rows=0) -> np.ndarray [n, vocab]   (full causal forward)
    greedy(model, prompt_ids, n_new, bf16_dots=False) -> (ids, logits_per_step)
        ids: the n_new generated ids; logits_per_step[k]: the [vocab] logits
        that produced ids[k] (incremental decode with a KV cache).

bf16 dot products: llmcc's cpu target multiplies bf16 weights in every call
(decode and prompt: runtime/cpu_dot16.h up to 32 tokens, runtime/cpu_gemm.h
above) with bf16 dot products, the activations rounded to bf16 (to nearest even)
first. bf16_x_rows=k rounds the inputs of every linear, the lm_head's too, in the
first k rows of the call; greedy(bf16_dots=True) rounds every row of every call.
model["bf16_lm_head"] = True (set by a caller whose decoder layers' linears are
block-type but whose lm_head stays bf16) rounds the lm_head's input in every call.

8-bit activations: llmcc's cpu target multiplies block-type (GGUF) weights in calls of at most
CPU_BF16_DOT_ABOVE tokens (decode) by integer dot products, each input row rounded to 8 bits per block of 32
(runtime/cpu_quant_q8.h: in f32, d = max|x| / 127, q = x * (1 / d) to nearest even). model["q8_linears"] = True
(set by the caller that made the decoder layers' linears block-type) makes greedy() round those linears'
inputs in such calls (q8_round); the lm_head is left alone.

CLI:
    python3 tests/ref_forward.py DIR --prompt-ids 1,2,3 -n 32 [--logits OUT.f32]
prints the greedy ids space-separated on one line; --logits writes raw
little-endian f32, vocab values per generated step.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

F32 = np.float32
CPU_BF16_DOT_ABOVE = 3   # llmcc's knob cpu_gemm_min_n: calls of more tokens of block-type weights run cpu_gemm


# ---------------------------------------------------------------- safetensors
def read_safetensors(path):
    """Returns {name: f32 ndarray}. Supports F32, F16, BF16, F64."""
    out = {}
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen).decode("utf-8"))
        data = f.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        dt = info["dtype"]
        shape = tuple(info["shape"])
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(F32)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(F32)
        elif dt == "F64":
            a = np.frombuffer(raw, dtype="<f8").astype(F32)
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(F32)
        else:
            raise ValueError("%s: unsupported dtype %s for %s" % (path, dt, name))
        out[name] = a.reshape(shape)
    return out


def read_weights(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        out = {}
        for fn in sorted(set(wm.values())):
            out.update(read_safetensors(os.path.join(d, fn)))
        return out
    return read_safetensors(os.path.join(d, "model.safetensors"))


# ---------------------------------------------------------------- RoPE
def rope_inv_freq(cfg, head_dim):
    """inv_freq as in modeling_rope_utils.py (default, linear, llama3), f32."""
    # transformers 5 writes rope_theta and the scaling inside rope_parameters
    rp = cfg.get("rope_parameters") or {}
    base = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    prf = float(cfg.get("partial_rotary_factor", 1.0))
    dim = int(head_dim * prf)
    # HF: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    # (torch computes the pow in f32)
    expo = (np.arange(0, dim, 2, dtype=np.int64).astype(F32) / F32(dim)).astype(F32)
    inv = (F32(1.0) / np.power(F32(base), expo, dtype=F32)).astype(F32)
    rs = rp if rp.get("rope_type", rp.get("type")) else cfg.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":
        return (inv / F32(rs["factor"])).astype(F32)
    if kind == "llama3":
        factor = float(rs["factor"])
        low = float(rs["low_freq_factor"])
        high = float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        low_wl = old / low
        high_wl = old / high
        wavelen = (F32(2 * math.pi) / inv).astype(F32)
        inv_l = np.where(wavelen > low_wl, inv / F32(factor), inv).astype(F32)
        smooth = ((F32(old) / wavelen - F32(low)) / F32(high - low)).astype(F32)
        smoothed = ((1 - smooth) * inv_l / F32(factor) + smooth * inv_l).astype(F32)
        medium = (~(wavelen < high_wl)) & (~(wavelen > low_wl))
        return np.where(medium, smoothed, inv_l).astype(F32)
    raise NotImplementedError("rope_scaling type %r is not in the reference" % kind)


def rope_cos_sin(model, positions):
    inv = model["inv_freq"]
    freqs = np.outer(np.asarray(positions, dtype=F32), inv).astype(F32)  # [n, d/2]
    emb = np.concatenate([freqs, freqs], axis=-1)  # [n, rot_dim]
    return np.cos(emb).astype(F32), np.sin(emb).astype(F32)


def apply_rope(x, cos, sin):
    """x: [heads, n, head_dim]; rotate-half over the first rot_dim dims."""
    rd = cos.shape[-1]
    xr, xp = x[..., :rd], x[..., rd:]
    h = rd // 2
    rot = np.concatenate([-xr[..., h:], xr[..., :h]], axis=-1)
    out = (xr * cos + rot * sin).astype(F32)
    if xp.shape[-1]:
        out = np.concatenate([out, xp], axis=-1)
    return out


# ---------------------------------------------------------------- model
def load(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    mt = cfg.get("model_type", "llama")
    if mt not in ("llama", "qwen2", "qwen3", "mistral"):
        raise NotImplementedError("model_type %r" % mt)
    w = read_weights(d)
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    if cfg.get("hidden_act", "silu") != "silu":
        raise NotImplementedError("hidden_act %r" % cfg.get("hidden_act"))
    L = cfg["num_hidden_layers"]
    layers = []
    for i in range(L):
        p = "model.layers.%d." % i
        lay = {}
        for k in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            lay[k] = w[p + k]
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            lay[proj] = w[p + "self_attn.%s.weight" % proj]
            lay[proj + ".b"] = w.get(p + "self_attn.%s.bias" % proj)
        # Qwen3: RMSNorm over each head of q and k, before RoPE
        lay["q_norm"] = w.get(p + "self_attn.q_norm.weight")
        lay["k_norm"] = w.get(p + "self_attn.k_norm.weight")
        if mt == "qwen3":
            assert lay["q_norm"] is not None and lay["k_norm"] is not None, "qwen3 without q_norm / k_norm"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            lay[proj] = w[p + "mlp.%s.weight" % proj]
            lay[proj + ".b"] = w.get(p + "mlp.%s.bias" % proj)
        # sliding window (Qwen2): layers >= max_window_layers use it when enabled
        win = None
        if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
            if i >= cfg.get("max_window_layers", L):
                win = int(cfg["sliding_window"])
        lay["window"] = win
        layers.append(lay)
    emb = w["model.embed_tokens.weight"]
    if "lm_head.weight" in w:
        lm = w["lm_head.weight"]
    else:
        if cfg.get("tie_word_embeddings") is False:
            raise ValueError("no lm_head.weight and tie_word_embeddings is false")
        lm = emb
    m = {
        "cfg": cfg, "H": H, "nh": nh, "nkv": nkv, "hd": hd, "L": L,
        "eps": F32(cfg.get("rms_norm_eps", 1e-6)),
        "embed": emb, "lm_head": lm, "norm": w["model.norm.weight"],
        "layers": layers, "vocab": lm.shape[0],
    }
    m["inv_freq"] = rope_inv_freq(cfg, hd)
    assert emb.shape == (cfg["vocab_size"], H), emb.shape
    return m


def rmsnorm(x, w, eps):
    # HF: x.float(); var = x.pow(2).mean(-1); x * rsqrt(var + eps); w * x.to(dtype)
    var = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
    return (w * (x * (F32(1.0) / np.sqrt(var + eps)))).astype(F32)


def linear(x, wt, b):
    y = x @ wt.T
    if b is not None:
        y = y + b
    return y.astype(F32)


def bf16_rows(x, rows):
    """x with its first rows rounded to bf16 (nearest even), as the bf16 dot product takes them."""
    if rows <= 0:
        return x
    x = np.array(x, dtype=F32, copy=True)
    bits = x[:rows].view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    x[:rows] = bits.view(F32)
    return x


def bf16_round(x):
    """x (any shape) rounded to bf16 (nearest even) from f32, as a bf16 KV cache stores it."""
    x = np.asarray(x, dtype=F32)
    return bf16_rows(x.reshape(-1, 1), x.size).reshape(x.shape)


def q8_round(x):
    """x [n, K] (K whole blocks of 32) as the 8-bit activations see it: d * q per block, in f32"""
    x = np.asarray(x, dtype=F32)
    blocks = x.reshape(x.shape[0], -1, 32)
    d = (np.max(np.abs(blocks), axis=-1, keepdims=True) / F32(127)).astype(F32)
    inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    q = np.rint((blocks * inv).astype(F32))
    return (d.astype(np.float64) * q).astype(F32).reshape(x.shape)


def silu(x):
    return (x / (F32(1.0) + np.exp(-x))).astype(F32)


def new_cache(model):
    return [{"k": None, "v": None} for _ in range(model["L"])]


def forward(model, ids, cache=None, start=0, bf16_x_rows=0, q8=False, kv_bf16=False):
    """Causal forward of ids at positions start..start+n-1. cache: from
    new_cache (extended in place) or None (no history). bf16_x_rows, q8
    (round the decoder layers' linears' inputs to 8 bits): see the module's doc. kv_bf16: keys (rotated)
    and values rounded to bf16, as a bf16 KV cache (llmcc build --kv-dtype bf16) holds them. Returns [n, vocab]."""
    rx = bf16_x_rows
    lin = (lambda x, w, b: linear(q8_round(x), w, b)) if q8 else linear
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    nh, nkv, hd = model["nh"], model["nkv"], model["hd"]
    grp = nh // nkv
    x = model["embed"][ids].astype(F32)  # [n, H]
    cos, sin = rope_cos_sin(model, np.arange(start, start + n))
    scale = F32(hd ** -0.5)
    for li, lay in enumerate(model["layers"]):
        h = bf16_rows(rmsnorm(x, lay["input_layernorm.weight"], model["eps"]), rx)
        q = lin(h, lay["q_proj"], lay["q_proj.b"]).reshape(n, nh, hd).transpose(1, 0, 2)
        k = lin(h, lay["k_proj"], lay["k_proj.b"]).reshape(n, nkv, hd).transpose(1, 0, 2)
        v = lin(h, lay["v_proj"], lay["v_proj.b"]).reshape(n, nkv, hd).transpose(1, 0, 2)
        if lay["q_norm"] is not None:
            q = rmsnorm(q, lay["q_norm"], model["eps"])
            k = rmsnorm(k, lay["k_norm"], model["eps"])
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if kv_bf16:
            k, v = bf16_round(k), bf16_round(v)
        if cache is not None:
            c = cache[li]
            if c["k"] is not None:
                k = np.concatenate([c["k"], k], axis=1)
                v = np.concatenate([c["v"], v], axis=1)
            c["k"], c["v"] = k, v
        T = k.shape[1]
        past = T - n
        # causal mask: query i (absolute past+i) sees keys j <= past+i
        qi = np.arange(n)[:, None] + past
        kj = np.arange(T)[None, :]
        allowed = kj <= qi
        if lay["window"] is not None:
            allowed &= (qi - kj) < lay["window"]
        # GQA: query head h uses kv head h // grp (repeat_kv)
        kr = np.repeat(k, grp, axis=0)  # [nh, T, hd]
        vr = np.repeat(v, grp, axis=0)
        s = (q @ kr.transpose(0, 2, 1)).astype(F32) * scale  # [nh, n, T]
        s = np.where(allowed[None], s, F32(-np.inf))
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s).astype(F32)
        p = (p / p.sum(axis=-1, keepdims=True, dtype=F32)).astype(F32)
        o = (p @ vr).astype(F32)  # [nh, n, hd]
        o = o.transpose(1, 0, 2).reshape(n, nh * hd)
        x = (x + lin(bf16_rows(o, rx), lay["o_proj"], lay["o_proj.b"])).astype(F32)
        h = bf16_rows(rmsnorm(x, lay["post_attention_layernorm.weight"], model["eps"]), rx)
        g = lin(h, lay["gate_proj"], lay["gate_proj.b"])
        u = lin(h, lay["up_proj"], lay["up_proj.b"])
        x = (x + lin(bf16_rows(silu(g) * u, rx), lay["down_proj"], lay["down_proj.b"])).astype(F32)
    x = bf16_rows(rmsnorm(x, model["norm"], model["eps"]), n if model.get("bf16_lm_head") else rx)
    return (x @ model["lm_head"].T).astype(F32)


def logits_all(model, ids, bf16_x_rows=0):
    return forward(model, ids, None, 0, bf16_x_rows)


def greedy(model, prompt_ids, n_new, bf16_dots=False, kv_bf16=False):
    """Greedy decode n_new tokens after prompt_ids (incremental, KV cache); bf16_dots: the module's doc; kv_bf16:
    forward's (a bf16 KV cache, the GPU's default)."""
    cache = new_cache(model)
    prompt_ids = list(prompt_ids)
    if not prompt_ids:
        raise ValueError("empty prompt")
    rows = len(prompt_ids) if bf16_dots else 0
    q8 = bool(model.get("q8_linears"))
    lg = forward(model, prompt_ids, cache, 0, rows, q8 and len(prompt_ids) <= CPU_BF16_DOT_ABOVE, kv_bf16)[-1]
    pos = len(prompt_ids)
    ids, steps = [], []
    for k in range(n_new):
        t = int(np.argmax(lg))
        ids.append(t)
        steps.append(lg)
        if k + 1 < n_new:
            lg = forward(model, [t], cache, pos, 1 if bf16_dots else 0, q8, kv_bf16)[-1]
            pos += 1
    return ids, steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("-n", type=int, default=32, help="tokens to generate")
    ap.add_argument("--logits", help="write raw LE f32 logits, vocab per step")
    a = ap.parse_args(argv)
    prompt = [int(t) for t in a.prompt_ids.replace(" ", "").split(",") if t]
    model = load(a.dir)
    ids, steps = greedy(model, prompt, a.n)
    print(" ".join(str(t) for t in ids))
    if a.logits:
        arr = np.stack(steps).astype("<f4") if steps else np.zeros((0,), "<f4")
        with open(a.logits, "wb") as f:
            f.write(arr.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
