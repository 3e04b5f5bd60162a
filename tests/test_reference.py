"""test_reference: the numpy reference forward pass (tests/ref_forward.py),
the fixture generator (scripts/make_fixture.py) and the llama2.c converter
(scripts/convert_llama2c.py).

Cross-check done once by hand (not a dependency of this suite): in a throwaway
venv with transformers 5.24.0 / torch 2.15.0 (CPU, f32, eager attention), for
llama-gqa, qwen2-tied, llama-linear (f32 and bf16, seed 0) and the converted
aidreams260K, logits over 100 random ids (positions 0..99, past llama3's
original_max_position_embeddings 32) matched logits_all() to max |diff| <= 7e-6
(relative 7e-7), argmax agreed at every position, and 40-token greedy
generate() (repetition_penalty 1.0) equalled greedy(); AutoTokenizer loaded
every tokenizer.json / tokenizer_config.json written here.
"""
import json
import os
import struct
import sys

import numpy as np

import testlib
from testlib import Skip

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(testlib.ROOT, "scripts"))
import ref_forward as R  # noqa: E402
import llama2c_encode  # noqa: E402
import make_fixture  # noqa: E402
import convert_llama2c  # noqa: E402

KINDS = make_fixture.KINDS
TEXTS = ["Once upon a time", "Hello world! How are you?", "  two  spaces\nnewline\ttab",
         "\u65e5\u672c\u8a9e \u00fcn\u00efc\u00f6d\u00e9 \U0001f999 emoji",
         "I'm 123,456.78 - \"quoted\"", "a", "the quick brown fox. THE END"]


def _ids(path):
    with open(path) as f:
        return [int(t) for t in f.read().split()]


def _aidreams():
    d = testlib.shared("aidreams260K")
    out = os.path.join(testlib.tmpdir("ref"), "aidreams260K-hf")
    convert_llama2c.convert(os.path.join(d, "aidreams260K.bin"), os.path.join(d, "tok512.bin"), out)
    return d, out


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise Skip("python package tokenizers is not installed (pip install tokenizers)")
    return tokenizers


# ------------------------------------------------------------ (a) llama2.c model
def test_aidreams_greedy_prompt():
    d, hf = _aidreams()
    ref = _ids(os.path.join(d, "ref_greedy_prompt.ids.txt"))
    assert len(ref) == 64
    tok = llama2c_encode.Llama2cTokenizer(os.path.join(d, "tok512.bin"), 512)
    prompt = tok.encode("Once upon a time", bos=True)
    assert prompt[0] == 1
    k = len(prompt) - 1  # run.c lists prompt tokens after BOS, then the generated ones
    assert ref[:k] == prompt[1:], (ref[:k], prompt)
    model = R.load(hf)
    ids, steps = R.greedy(model, prompt, len(ref) - k)
    assert ids == ref[k:], "first mismatch at %d: %s vs %s" % (
        next(i for i, (a, b) in enumerate(zip(ids, ref[k:])) if a != b), ids, ref[k:])
    assert len(steps) == len(ids) and steps[0].shape == (512,)


def test_aidreams_greedy_noprompt():
    d, hf = _aidreams()
    ref = _ids(os.path.join(d, "ref_greedy_noprompt.ids.txt"))
    assert len(ref) == 128
    assert ref[:10] == [319, 459, 355, 260, 275, 429, 339, 315, 374, 327]
    ids, _ = R.greedy(R.load(hf), [1], len(ref))
    assert ids == ref, "first mismatch at %d" % next(
        i for i, (a, b) in enumerate(zip(ids, ref)) if a != b)


def test_aidreams_converted_files():
    _, hf = _aidreams()
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["hidden_size"] == 64 and cfg["intermediate_size"] == 172
    assert cfg["num_hidden_layers"] == 4 and cfg["vocab_size"] == 512
    assert cfg["max_position_embeddings"] == 128 and cfg["tie_word_embeddings"] is True
    w = R.read_weights(hf)
    assert "lm_head.weight" not in w
    assert w["model.layers.3.mlp.down_proj.weight"].shape == (64, 172)
    with open(os.path.join(hf, "tokenizer_config.json")) as f:
        tc = json.load(f)
    assert tc["add_bos_token"] is True and tc["add_eos_token"] is False
    assert "chat_template" not in tc
    with open(os.path.join(hf, "generation_config.json")) as f:
        assert json.load(f)["eos_token_id"] == 2


def test_llama2c_tokenizer_parity():
    """HF tokenizers on the converted tokenizer.json == llama2.c's encode."""
    tk = _tokenizers()
    cases = [(testlib.shared("aidreams260K", "tok512.bin"), 512),
             (testlib.shared("tokenizers", "llama2", "tokenizer.bin"), None)]
    for i, (tb, n) in enumerate(cases):
        out = testlib.tmpdir("ref/llama2c-tok%d" % i)
        convert_llama2c.write_tokenizer(tb, n, out)
        hf = tk.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        ours = llama2c_encode.Llama2cTokenizer(tb, n)
        for s in TEXTS:
            a = hf.encode(s).ids
            b = ours.encode(s, bos=True)
            assert a == b, (tb, s, a, b)
            assert hf.decode(a, skip_special_tokens=True) == s, (tb, s, hf.decode(a))


def test_llama2_tokenizer_matches_hf_vectors():
    """The converted Llama 2 tokenizer.bin reproduces HF Llama-2-7b-hf ids on
    llama.cpp's 46 test vectors (SentencePiece parity)."""
    tk = _tokenizers()
    tb = testlib.shared("tokenizers", "llama2", "tokenizer.bin")
    base = testlib.shared("llamacpp-vocab-tests", "ggml-vocab-llama-spm.gguf.inp")[:-4]
    out = testlib.tmpdir("ref/llama2c-tok1")
    convert_llama2c.write_tokenizer(tb, None, out)
    hf = tk.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    with open(base + ".inp", encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    with open(base + ".out") as f:
        outs = f.read().split("\n")
    n = 0
    for s, o in zip(texts, outs):
        if not s:
            continue
        want = [int(t) for t in o.split()]
        assert hf.encode(s, add_special_tokens=False).ids == want, repr(s)
        n += 1
    assert n >= 40


# ------------------------------------------------------------ converter: synthetic llama2.c files
def _llama2c_forward(hp, w, tokens):
    """numpy port of llama2.c run.c forward() (interleaved RoPE), f32; logits of the last token."""
    dim, nh, nkv = hp["dim"], hp["nh"], hp["nkv"]
    hs = dim // nh
    kvm = nh // nkv
    f32 = np.float32
    kc, vc = [[] for _ in range(hp["L"])], [[] for _ in range(hp["L"])]

    def rms(x, g):
        return (g * (x / np.sqrt(np.mean(x * x) + f32(1e-5)))).astype(f32)

    logits = None
    for pos, t in enumerate(tokens):
        x = w["emb"][t].copy()
        for li in range(hp["L"]):
            xb = rms(x, w["rms_att"][li])
            q = w["wq"][li] @ xb
            k = w["wk"][li] @ xb
            v = w["wv"][li] @ xb
            for i in range(0, dim, 2):
                hd = i % hs
                fr = 1.0 / 10000.0 ** (hd / hs)
                c, s = np.cos(pos * fr), np.sin(pos * fr)
                for vec in ((q, k) if i < nkv * hs else (q,)):
                    a, b = vec[i], vec[i + 1]
                    vec[i], vec[i + 1] = a * c - b * s, a * s + b * c
            kc[li].append(k)
            vc[li].append(v)
            out = np.zeros(dim, f32)
            for h in range(nh):
                qh = q[h * hs:(h + 1) * hs]
                kh = np.stack([kk[(h // kvm) * hs:(h // kvm + 1) * hs] for kk in kc[li]])
                vh = np.stack([vv[(h // kvm) * hs:(h // kvm + 1) * hs] for vv in vc[li]])
                att = kh @ qh / np.sqrt(hs)
                att = np.exp(att - att.max())
                att /= att.sum()
                out[h * hs:(h + 1) * hs] = att @ vh
            x = x + w["wo"][li] @ out
            xb = rms(x, w["rms_ffn"][li])
            h1 = w["w1"][li] @ xb
            h3 = w["w3"][li] @ xb
            x = x + w["w2"][li] @ ((h1 / (1 + np.exp(-h1))) * h3)
        x = rms(x, w["rms_final"])
        logits = (w.get("wcls", w["emb"]) @ x).astype(f32)
    return logits


def _write_llama2c(path, hp, w, rng):
    hs = hp["dim"] // hp["nh"]
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", hp["dim"], hp["hidden"], hp["L"], hp["nh"], hp["nkv"],
                            hp["vocab"] if hp["shared"] else -hp["vocab"], hp["seq"]))
        for k in ("emb", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final"):
            f.write(np.ascontiguousarray(w[k], "<f4").tobytes())
        f.write(rng.normal(size=(2, hp["seq"], hs // 2)).astype("<f4").tobytes())
        if not hp["shared"]:
            f.write(np.ascontiguousarray(w["wcls"], "<f4").tobytes())


def _write_tokenizer_bin(path, n=512):
    """A synthetic llama2.c tokenizer.bin: <unk>, <s>, </s> (as llama2.c's
    exporter writes them), 256 byte tokens, then pieces with falling scores."""
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % i for i in range(256)]
    scores = [0.0] * len(pieces)
    words = [bytes([c]) for c in range(32, 127)]
    for w in (b" t", b"th", b"he", b" the", b"in", b" a", b"an", b"er", b"on", b" o", b"nce",
              b" on", b" up", b"up", b" upon", b" time", b"ti", b"me", b"im", b" ti", b"Once",
              b" Once", b"On", b"ce", b"ll", b"lo", b" w", b"or", b"ld", b" world", b"el"):
        if w not in words:
            words.append(w)
    a = 0
    while len(pieces) + len(words) < n:  # filler pieces of two letters
        w = bytes([97 + a // 26, 97 + a % 26])
        if w not in words:
            words.append(w)
        a += 1
    for i, w in enumerate(words[:n - len(pieces)]):
        pieces.append(w)
        scores.append(-float(i))
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for p, sc in zip(pieces, scores):
            f.write(struct.pack("<fi", sc, len(p)) + p)


def test_convert_synthetic_gqa_untied():
    """A random llama2.c file with n_kv_heads < n_heads and an unshared
    classifier: HF-layout reference logits == a port of run.c's forward; the
    converted tokenizer encodes like llama2.c's encode."""
    tb = os.path.join(testlib.tmpdir("ref"), "synthetic-tok.bin")
    _write_tokenizer_bin(tb)
    rng = np.random.default_rng(3)
    for shared in (False, True):
        hp = dict(dim=48, hidden=100, L=2, nh=6, nkv=2, vocab=512, seq=16, shared=shared)
        dim, hd, L, kvd = 48, 100, 2, 2 * 8
        g = lambda *s: rng.normal(0, 0.15, size=s).astype(np.float32)  # noqa: E731
        w = dict(emb=g(512, dim), rms_att=1 + g(L, dim), wq=g(L, dim, dim), wk=g(L, kvd, dim),
                 wv=g(L, kvd, dim), wo=g(L, dim, dim), rms_ffn=1 + g(L, dim), w1=g(L, hd, dim),
                 w2=g(L, dim, hd), w3=g(L, hd, dim), rms_final=1 + g(dim))
        if not shared:
            w["wcls"] = g(512, dim)
        d = testlib.tmpdir("ref/synthetic-%s" % ("tied" if shared else "untied"))
        binp = os.path.join(d, "model.bin")
        _write_llama2c(binp, hp, w, rng)
        out = os.path.join(d, "hf")
        convert_llama2c.convert(binp, tb, out)
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        assert cfg["tie_word_embeddings"] is shared and cfg["num_key_value_heads"] == 2
        model = R.load(out)
        assert ("lm_head.weight" in R.read_weights(out)) is (not shared)
        toks = [1, 300, 17, 42, 511, 9, 100, 7]
        got = R.logits_all(model, toks)
        for n in (1, 4, len(toks)):
            want = _llama2c_forward(hp, w, toks[:n])
            err = np.abs(got[n - 1] - want).max()
            assert err < 1e-4 * max(1.0, np.abs(want).max()), (shared, n, err)
    try:
        import tokenizers
    except ImportError:
        return
    hf = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    ours = llama2c_encode.Llama2cTokenizer(tb, 512)
    for s in TEXTS + ["Once upon a time, hello world", "the other one"]:
        assert hf.encode(s).ids == ours.encode(s), (s, hf.encode(s).ids, ours.encode(s))


# ------------------------------------------------------------ (b) fixtures
def _fixture(kind, dtype="f32", seed=0):
    d = testlib.tmpdir("ref/fx-%s-%s-%d" % (kind, dtype, seed))
    testlib.run([sys.executable, os.path.join(testlib.ROOT, "scripts", "make_fixture.py"),
                 kind, d, "--dtype", dtype, "--seed", str(seed)])
    return d


def test_fixtures_configs_and_tensors():
    want = {
        "llama-gqa": dict(model_type="llama", hidden_size=64, intermediate_size=172, head_dim=16,
                          num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False),
        "qwen2-tied": dict(model_type="qwen2", hidden_size=64, intermediate_size=128,
                           num_key_value_heads=1, vocab_size=320, tie_word_embeddings=True,
                           rope_theta=1e6, rms_norm_eps=1e-6, eos_token_id=[5, 6]),
        "llama-linear": dict(model_type="llama", head_dim=32, attention_bias=True, mlp_bias=True,
                             rope_scaling={"type": "linear", "factor": 2.0}),
    }
    for kind in KINDS:
        for dt in ("f32", "bf16"):
            d = _fixture(kind, dt)
            for fn in ("config.json", "generation_config.json", "model.safetensors",
                       "tokenizer.json", "tokenizer_config.json"):
                assert os.path.exists(os.path.join(d, fn)), (d, fn)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            for k, v in want[kind].items():
                assert cfg[k] == v, (kind, k, cfg[k], v)
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                (hl,) = struct.unpack("<Q", f.read(8))
                hdr = json.loads(f.read(hl))
            dts = {v["dtype"] for k, v in hdr.items() if k != "__metadata__"}
            assert dts == {"BF16" if dt == "bf16" else "F32"}, dts
            names = set(hdr) - {"__metadata__"}
            assert ("lm_head.weight" in names) is (kind != "qwen2-tied")
            if kind == "qwen2-tied":
                assert "model.layers.0.self_attn.q_proj.bias" in names
                assert "model.layers.0.self_attn.o_proj.bias" not in names
                assert "model.layers.1.mlp.up_proj.bias" not in names
            if kind == "llama-linear":
                assert hdr["model.layers.1.self_attn.q_proj.weight"]["shape"] == [128, 64]
                assert hdr["model.layers.1.self_attn.o_proj.weight"]["shape"] == [64, 128]
                assert hdr["model.layers.1.self_attn.k_proj.weight"]["shape"] == [64, 64]
                assert "model.layers.1.self_attn.o_proj.bias" in names
                assert "model.layers.1.mlp.down_proj.bias" in names
            if kind == "llama-gqa":
                assert hdr["model.layers.0.mlp.gate_proj.weight"]["shape"] == [172, 64]
                assert hdr["model.layers.0.self_attn.k_proj.weight"]["shape"] == [32, 64]
                assert not any(n.endswith(".bias") for n in names)


def test_fixtures_deterministic_and_seeded():
    a = open(os.path.join(_fixture("llama-gqa", "f32", 0), "model.safetensors"), "rb").read()
    b = open(os.path.join(_fixture("llama-gqa", "f32", 0), "model.safetensors"), "rb").read()
    c = open(os.path.join(_fixture("llama-gqa", "f32", 1), "model.safetensors"), "rb").read()
    assert a == b and a != c


def test_bf16_rounding():
    x = np.array([1.0, 1.00390625, 1.005859375, 1.0078125 + 2 ** -8, -2.5, 3.0e38, 1e-40],
                 dtype=np.float32)
    bits = make_fixture.f32_to_bf16_bits(x)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    # bf16 spacing at 1 is 2^-7. 1+2^-8: tie -> even (1.0); 1+1.5*2^-8: nearest
    # (1+2^-7); 1+2^-7+2^-8: tie, 1+2^-7 is odd -> even (1+2^-6)
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == 1.0078125
    assert back[3] == 1.015625 and back[4] == -2.5
    assert np.isfinite(back[5]) and abs(back[5] / 3.0e38 - 1) < 2 ** -8


def test_fixtures_reference_runs():
    for kind in KINDS:
        for dt in ("f32", "bf16"):
            m = R.load(_fixture(kind, dt))
            V = m["vocab"]
            rng = np.random.default_rng(11)
            ids = [1] + list(rng.integers(3, 290, 47))  # past llama3's original 32 positions
            L = R.logits_all(m, ids)
            assert L.shape == (48, V) and L.dtype == np.float32
            assert np.isfinite(L).all()
            assert L.std(axis=1).min() > 0.05, (kind, L.std(axis=1).min())
            # logits vary by position
            assert np.abs(L[1:] - L[:-1]).max(axis=1).min() > 1e-3, kind
            assert len(set(L.argmax(axis=1).tolist())) >= 4, (kind, L.argmax(axis=1))
            # incremental decode (KV cache) == full causal forward
            g, steps = R.greedy(m, ids[:6], 24)
            full = R.logits_all(m, ids[:6] + g[:-1])
            for k, lg in enumerate(steps):
                assert np.abs(lg - full[5 + k]).max() < 1e-4, (kind, k)
                assert int(np.argmax(full[5 + k])) == g[k]
            assert len(set(g)) >= 2, (kind, dt, g)
            # a prefix's logits do not depend on later tokens (causality)
            assert np.abs(R.logits_all(m, ids[:10]) - L[:10]).max() < 1e-4


def test_fixtures_bf16_close_to_f32():
    for kind in KINDS:
        a = R.logits_all(R.load(_fixture(kind, "f32")), list(range(1, 40)))
        b = R.logits_all(R.load(_fixture(kind, "bf16")), list(range(1, 40)))
        assert 0 < np.abs(a - b).max() < 0.1 * np.abs(a).max(), kind


def test_fixture_tokenizers():
    tk = _tokenizers()
    for kind in KINDS:
        d = _fixture(kind)
        t = tk.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        for s in TEXTS:
            ids = t.encode(s).ids
            assert max(ids) < cfg["vocab_size"]
            if kind == "qwen2-tied":
                assert t.decode(ids) == s and ids[0] != cfg["bos_token_id"]
            else:
                assert ids[0] == 1 and t.decode(ids, skip_special_tokens=True) == s
        n = t.get_vocab_size(with_added_tokens=True)
        assert n == 300, (kind, n)
        once = t.encode("Once upon a time").ids
        assert len(once) < len("Once upon a time"), once  # merges are used
    q = tk.Tokenizer.from_file(os.path.join(_fixture("qwen2-tied"), "tokenizer.json"))
    assert q.encode("<|im_start|>user\nhi<|im_end|>").ids[0] == 298
    assert q.token_to_id("<|endoftext|>") == 297 and q.token_to_id("<|im_end|>") == 299


def test_ref_forward_cli():
    d = _fixture("llama-linear")
    out = os.path.join(testlib.tmpdir("ref"), "cli.f32")
    p = testlib.run([sys.executable, os.path.join(HERE, "ref_forward.py"), d,
                     "--prompt-ids", "1,50,60,70", "-n", "12", "--logits", out])
    ids = [int(t) for t in p.stdout.split()]
    g, steps = R.greedy(R.load(d), [1, 50, 60, 70], 12)
    assert ids == g
    lg = np.fromfile(out, dtype="<f4").reshape(12, 300)
    assert np.array_equal(lg, np.stack(steps))


def test_rope_scaling_llama3_regimes():
    cfg = {"rope_theta": 10000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
           "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}
    base = R.rope_inv_freq({"rope_theta": 10000.0}, 16)
    sc = R.rope_inv_freq(cfg, 16)
    wl = 2 * np.pi / base
    assert sc[0] == base[0] and wl[0] < 8  # high frequency kept
    assert np.allclose(sc[wl > 32], base[wl > 32] / 8)  # low frequency divided
    mid = (wl >= 8) & (wl <= 32)
    assert mid.any() and np.all((sc[mid] < base[mid]) & (sc[mid] > base[mid] / 8))
    lin = R.rope_inv_freq({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0}}, 32)
    assert np.allclose(lin, R.rope_inv_freq({"rope_theta": 1e4}, 32) / 2)
