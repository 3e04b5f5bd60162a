#!/usr/bin/env python3
"""train_tiny.py: trains llmcc's default model, a tiny Llama (grouped-query
attention, RoPE, SwiGLU, tied embeddings) on Jane Austen's six novels, with a
byte-level BPE tokenizer it trains too, and writes a standard Hugging Face
model directory (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json) plus loss.csv and loss.png.

    python3 scripts/train_tiny.py OUTDIR [--minutes M | --steps N] [--threads 2] [--resume]

With --minutes the run lasts M minutes of wall time and the learning-rate
schedule follows elapsed time rather than steps, so a run on a loaded machine
still ends with a fully decayed learning rate (it just takes fewer steps).

A developer step, not part of `make` or `make test`: models/austen-2m/ holds
the committed result and its MODEL_CARD.md.

Corpus: Debian's r-cran-janeaustenr (Jane Austen's complete novels for GNU R;
the package is MIT, the 1811-1818 texts are in the public domain). The script
fetches the .deb itself with `apt-get download` (no root and no R needed: it
reads R's lazy-load database directly) unless --deb names one, or the package
is installed.

Dependencies (PyPI): pip install torch tokenizers safetensors numpy matplotlib
(PyPI's default torch wheel runs on the CPU; so does Debian's python3-torch).

Restartable: OUTDIR/work/ keeps the corpus, the tokenizer, a checkpoint every
--ckpt-every steps and the loss log; --resume continues from the checkpoint.
"""
import argparse
import glob
import gzip
import json
import math
import os
import re
import struct
import subprocess
import sys
import time
import zlib

import numpy as np

PKG = "r-cran-janeaustenr"
RDATA = "usr/lib/R/site-library/janeaustenr/data/Rdata"
BOOKS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"]

# Llama 3's pre-tokenizer regex: one of the two compiler/tokenizer_pack.c accepts
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BOS, EOS = "<s>", "</s>"

MODEL = dict(vocab_size=2048, hidden_size=192, intermediate_size=512, num_hidden_layers=4,
             num_attention_heads=6, num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5,
             max_position_embeddings=512)


# ---------------------------------------------------------------- corpus
class RReader:
    """Just enough of R's XDR serialization format (R Internals, 'Serialization
    Formats') to read character vectors and the lazy-load index."""

    def __init__(self, b):
        self.b, self.p, self.refs = b, 0, []
        if self.raw(2) != b"X\n":
            raise ValueError("not an XDR R serialization")
        ver = self.int()
        self.int(), self.int()
        if ver == 3:
            self.raw(self.int())   # native encoding name

    def int(self):
        v = struct.unpack_from(">i", self.b, self.p)[0]
        self.p += 4
        return v

    def raw(self, n):
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def item(self):
        f = self.int()
        t, has_attr, has_tag = f & 0xFF, f & (1 << 9), f & (1 << 10)
        if t == 254:                      # NILVALUE_SXP
            return None
        if t == 255:                      # REFSXP
            return self.refs[(f >> 8) - 1]
        if t == 1:                        # SYMSXP
            v = self.item()
            self.refs.append(v)
            return v
        if t == 9:                        # CHARSXP; bit 3 of the levels is UTF-8
            n = self.int()
            return None if n < 0 else self.raw(n).decode("utf-8" if (f >> 12) & 8 else "latin-1")
        if t == 2:                        # LISTSXP (pairlist): [(tag, value), ...]
            if has_attr:
                self.item()
            tag = self.item() if has_tag else None
            car = self.item()
            return [(tag, car)] + (self.item() or [])
        if t in (16, 19, 20):             # STRSXP, VECSXP, EXPRSXP
            v = [self.item() for _ in range(self.int())]
        elif t in (10, 13):               # LGLSXP, INTSXP
            n = self.int()
            v = list(struct.unpack_from(">%di" % n, self.b, self.p))
            self.p += 4 * n
        else:
            raise ValueError("R type %d is not needed here" % t)
        if has_attr:
            attrs = dict(self.item())
            if "names" in attrs:
                v = dict(zip(attrs["names"], v))
        return v


def find_rdata(work, deb):
    if os.path.exists("/" + RDATA + ".rdb") and not deb:
        return "/" + RDATA
    x = os.path.join(work, "deb")
    if not os.path.exists(os.path.join(x, RDATA + ".rdb")):
        if not deb:
            subprocess.run(["apt-get", "download", PKG], cwd=work, check=True)
            deb = sorted(glob.glob(os.path.join(work, PKG + "_*.deb")))[-1]
        subprocess.run(["dpkg-deb", "-x", deb, x], check=True)
    return os.path.join(x, RDATA)


def load_books(rdata):
    with open(rdata + ".rdx", "rb") as f:
        index = RReader(gzip.decompress(f.read())).item()
    with open(rdata + ".rdb", "rb") as f:
        db = f.read()
    books = {}
    for name in BOOKS:
        off, n = index["variables"][name]
        # each entry: 4-byte big-endian raw length, then a zlib stream
        books[name] = RReader(zlib.decompress(db[off + 4:off + n])).item()
    return books


def clean(lines):
    """Project Gutenberg lines -> paragraphs: unwraps lines, drops the title
    block and chapter/volume headings, and the _underscores_ of italics."""
    paras, cur = [], []
    for ln in lines + [""]:
        ln = (ln or "").strip()
        if ln:
            cur.append(ln)
            continue
        if cur:
            p = re.sub(r"\s+", " ", " ".join(cur)).replace("_", "")
            if not re.match(r"^(CHAPTER|Chapter|VOLUME|Volume)\b", p) and len(p.split()) > 3:
                paras.append(p)
            cur = []
    return paras


def corpus(work, deb):
    path = os.path.join(work, "corpus.json")
    if not os.path.exists(path):
        books = load_books(find_rdata(work, deb))
        with open(path, "w") as f:
            json.dump({k: clean(v) for k, v in books.items()}, f)
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------- tokenizer
def train_tokenizer(paras, vocab_size, path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS], min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(paras, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single=BOS + " $A", pair=BOS + " $A " + BOS + " $B",
                                                       special_tokens=[(BOS, tok.token_to_id(BOS))])
    tok.save(path)
    return tok


# ---------------------------------------------------------------- model
def build_model(torch, cfg):
    nn, F = torch.nn, torch.nn.functional
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = H // nh
    eps = cfg["rms_norm_eps"]

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(H))

        def forward(self, x):
            return F.rms_norm(x, (H,), self.weight, eps)

    def rope(x, cos, sin):
        # transformers' Llama convention: rotate the two halves of each head
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), -1) * sin

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, nh * hd, bias=False)
            self.k_proj = nn.Linear(H, nkv * hd, bias=False)
            self.v_proj = nn.Linear(H, nkv * hd, bias=False)
            self.o_proj = nn.Linear(nh * hd, H, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            q = rope(self.q_proj(x).view(B, T, nh, hd).transpose(1, 2), cos, sin)
            k = rope(self.k_proj(x).view(B, T, nkv, hd).transpose(1, 2), cos, sin)
            v = self.v_proj(x).view(B, T, nkv, hd).transpose(1, 2)
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(y.transpose(1, 2).reshape(B, T, nh * hd))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(H, I, bias=False)
            self.up_proj = nn.Linear(H, I, bias=False)
            self.down_proj = nn.Linear(I, H, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attn()
            self.post_attention_layernorm = RMSNorm()
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, H)
            self.layers = nn.ModuleList([Layer() for _ in range(cfg["num_hidden_layers"])])
            self.norm = RMSNorm()

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Inner()
            inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            f = torch.outer(torch.arange(cfg["max_position_embeddings"], dtype=torch.float32), inv)
            f = torch.cat((f, f), -1)
            self.register_buffer("cos", f.cos(), persistent=False)
            self.register_buffer("sin", f.sin(), persistent=False)
            std = 0.02
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    # GPT-2's scaling of the residual-branch outputs by depth
                    s = std / math.sqrt(2 * cfg["num_hidden_layers"]) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                    nn.init.normal_(p, 0.0, s)

        def forward(self, ids):
            T = ids.shape[1]
            cos, sin = self.cos[:T], self.sin[:T]
            x = self.model.embed_tokens(ids)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            # tied embeddings: the output projection is the embedding matrix
            return self.model.norm(x) @ self.model.embed_tokens.weight.t()

    return Llama()


# ---------------------------------------------------------------- output
def hf_config(cfg, dtype):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": cfg["vocab_size"], "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"], "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": cfg["num_attention_heads"], "num_key_value_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"],
        "max_position_embeddings": cfg["max_position_embeddings"], "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_theta": cfg["rope_theta"], "rope_scaling": None, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
        "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 1, "initializer_range": 0.02,
        "torch_dtype": dtype, "use_cache": True,
    }


def write_model(torch, model, cfg, tok_path, out, dtype):
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    tdt = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    sd = {k: v.detach().to(tdt).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(cfg, dtype), f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "do_sample": True, "temperature": 0.8,
                   "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.1}, f, indent=2)
        f.write("\n")
    with open(tok_path) as f:
        tj = json.load(f)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
                   "model_max_length": cfg["max_position_embeddings"], "clean_up_tokenization_spaces": False},
                  f, indent=2)
        f.write("\n")


def plot(loss_csv, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tr, va = [], []
    with open(loss_csv) as f:
        for ln in f.read().split("\n")[1:]:
            if ln:
                step, kind, loss = ln.split(",")[:3]
                (tr if kind == "train" else va).append((int(step), float(loss)))
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    ax.plot(*zip(*tr), lw=0.8, label="train (mean of 20 steps)")
    if va:
        ax.plot(*zip(*va), "o-", ms=3, label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("austen-2m training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)


# ---------------------------------------------------------------- training
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--minutes", type=float, default=0, help="wall-time budget (overrides --steps)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--deb", help="a downloaded %s .deb" % PKG)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--bench", type=int, default=0, help="time N steps and exit")
    a = ap.parse_args()

    # OpenMP threads that sleep instead of spinning at each barrier: on a shared
    # machine a spinning thread burns the CPU time its partner needs
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    cfg = dict(MODEL)

    books = corpus(work, a.deb)
    # held out: the last 40 paragraphs of each novel
    train_p = [p for b in BOOKS for p in books[b][:-40]]
    val_p = [p for b in BOOKS for p in books[b][-40:]]
    tok_path = os.path.join(work, "tokenizer.json")
    if os.path.exists(tok_path):
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(tok_path)
    else:
        tok = train_tokenizer(train_p, cfg["vocab_size"], tok_path)
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)

    def encode(paras):
        """One stream, paragraphs separated by a newline; the offsets where
        paragraphs start, where training windows begin (after a BOS, as the
        executable's prompts do)."""
        enc = tok.encode_batch([p + "\n" for p in paras], add_special_tokens=False)
        starts, ids = [], []
        for e in enc:
            starts.append(len(ids))
            ids.extend(e.ids)
        return np.array(ids, dtype=np.int64), np.array(starts, dtype=np.int64)

    tr_ids, tr_starts = encode(train_p)
    va_ids, va_starts = encode(val_p)
    nchar = sum(len(p) for p in train_p)
    print("corpus: %d paragraphs, %d chars, %d train tokens (%.2f chars/token), %d held-out tokens"
          % (len(train_p), nchar, len(tr_ids), nchar / len(tr_ids), len(va_ids)), flush=True)
    tr_starts = tr_starts[tr_starts + a.seq <= len(tr_ids)]
    va_starts = va_starts[va_starts + a.seq <= len(va_ids)]

    def batch(ids, starts, g, n):
        s = starts[torch.randint(len(starts), (n,), generator=g).numpy()]
        x = np.stack([ids[i:i + a.seq - 1] for i in s])
        y = np.stack([ids[i:i + a.seq] for i in s])
        x = np.concatenate([np.full((n, 1), bos), x], 1)
        return torch.from_numpy(x), torch.from_numpy(y)

    model = build_model(torch, cfg)
    nparam = sum(p.numel() for p in model.parameters())
    print("model: %d parameters" % nparam, flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    F = torch.nn.functional

    def progress(step):
        return (time.time() - t0) / (60 * a.minutes) if a.minutes else step / a.steps

    def lr_at(step):
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        t = min(1.0, progress(step))
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    @torch.no_grad()
    def evaluate():
        model.eval()
        g = torch.Generator().manual_seed(99)
        tot = 0.0
        for _ in range(8):
            x, y = batch(va_ids, va_starts, g, 16)
            tot += F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
        model.train()
        return tot / 8

    ckpt = os.path.join(work, "ckpt.pt")
    loss_csv = os.path.join(work, "loss.csv")
    step, elapsed = 0, 0.0
    g = torch.Generator().manual_seed(a.seed)
    if a.resume and os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        g.set_state(st["rng"])
        step, elapsed = st["step"], st["elapsed"]
        print("resumed at step %d (%.0f s)" % (step, elapsed), flush=True)
    elif not a.bench:
        with open(loss_csv, "w") as f:
            f.write("step,kind,loss,lr,elapsed_s\n")

    t0 = time.time() - elapsed
    acc, nacc = 0.0, 0
    while progress(step) < 1:
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step)
        x, y = batch(tr_ids, tr_starts, g, a.batch)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        acc += loss.item()
        nacc += 1
        if a.bench and step == a.bench:
            dt = time.time() - t0
            print("bench: %.3f s/step, %.0f tokens/s" % (dt / step, step * a.batch * a.seq / dt))
            return
        last = progress(step) >= 1
        if step % 20 == 0 or last:
            with open(loss_csv, "a") as f:
                f.write("%d,train,%.4f,%.6f,%.1f\n" % (step, acc / nacc, lr_at(step - 1), time.time() - t0))
            print("step %d loss %.4f lr %.2e %.0f s" % (step, acc / nacc, lr_at(step - 1), time.time() - t0), flush=True)
            acc, nacc = 0.0, 0
        if step % a.ckpt_every == 0 or last:
            v = evaluate()
            with open(loss_csv, "a") as f:
                f.write("%d,val,%.4f,%.6f,%.1f\n" % (step, v, lr_at(step - 1), time.time() - t0))
            print("step %d held-out loss %.4f" % (step, v), flush=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": g.get_state(),
                        "step": step, "elapsed": time.time() - t0}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)

    total = time.time() - t0
    write_model(torch, model, cfg, tok_path, a.out, a.dtype)
    plot(loss_csv, os.path.join(a.out, "loss.png"))
    with open(os.path.join(work, "summary.json"), "w") as f:
        json.dump({"parameters": nparam, "steps": step, "batch": a.batch, "seq": a.seq, "lr": a.lr,
                   "train_tokens": int(len(tr_ids)), "tokens_seen": step * a.batch * a.seq,
                   "train_seconds": round(total, 1), "cpu_seconds": round(time.process_time(), 1),
                   "final_val_loss": evaluate(),
                   "load_avg": os.getloadavg()}, f, indent=2)
    print("done: %d steps in %.0f s; wrote %s" % (step, total, a.out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
