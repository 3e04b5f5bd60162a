"""test_tokenizer.py: parity of runtime/tokenizer.c (+ compiler/tokenizer_pack.c)
with Hugging Face `tokenizers`.

Expected ids come from the real `tokenizers` package, never from our code:
scripts/gen_tokenizer_expected.py writes tests/data/tokenizer_expected.json
(a corpus encoded by Qwen2.5, Llama 3, a converted Llama 2, the small
SentencePiece-style fixture below and the GPT-2-style fixture
tests/data/gpt2_tokenizer.json, trained by that script with `tokenizers`, in the
pre-tokenizer variants of GPT2_VARIANTS); llama.cpp's vectors in
../shared/assets/llamacpp-vocab-tests were made by HF AutoTokenizer too.
The C side runs through tests/c/tokenizer_driver.c."""
import hashlib
import json
import os
import struct
import sys

from testlib import ROOT, Skip, build_c, lock, run, shared, tmpdir, write_atomic

SOURCES = ["tests/c/tokenizer_driver.c", "runtime/tokenizer.c", "compiler/tokenizer_pack.c",
           "compiler/json.c", "runtime/json.c", "compiler/util.c", "compiler/tokenizer_gguf.c", "compiler/gguf.c",
           "runtime/jinja.c"]
EXPECTED = os.path.join(ROOT, "tests", "data", "tokenizer_expected.json")
VOCAB_TESTS = ("llamacpp-vocab-tests",)
SPM = "\u2581"
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def driver():
    return build_c("tokenizer_driver", SOURCES, libs=("-lutf8proc", "-lm"))


# ---------------------------------------------------------------- fixture
_SPM_SAMPLE = ("the quick brown fox jumps over the lazy dog. The rain in Spain stays mainly in the plain. "
               "hello world, hello there! it's a test of the tokenizer: 12 + 34 = 46. "
               "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e\u306e\u30c6\u30b9\u30c8 there then these those other brother")


def spm_fixture_json():
    """A small Llama-2-style tokenizer.json (BPE + byte_fallback, legacy
    Prepend/Replace normalizer, no pre-tokenizer), trained by a tiny
    deterministic BPE on _SPM_SAMPLE so every merge result is in the vocab."""
    vocab = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    norm = SPM + _SPM_SAMPLE.replace(" ", SPM)
    words = [SPM + w for w in norm.split(SPM) if w]
    for c in sorted(set(norm)):
        vocab.append(c)
    seqs = [list(w) for w in words]
    merges = []
    have = set(vocab)
    for _ in range(160):
        counts = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        (a, b), n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        if n < 2:
            break
        merges.append((a, b))
        if a + b not in have:
            vocab.append(a + b)
            have.add(a + b)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i:i + 2] = [a + b]
                i += 1
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPM},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPM}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPM}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(vocab)},
                  "merges": ["%s %s" % m for m in merges]},
    }


GPT2_FIXTURE = os.path.join(ROOT, "tests", "data", "gpt2_tokenizer.json")
# Pre-tokenizers put on the trained GPT-2-style fixture (vocab and merges unchanged):
# SmolLM's [Digits(individual_digits), ByteLevel(use_regex)] as trained, digit runs,
# ByteLevel's add_prefix_space (after Digits: every piece gets its space), ByteLevel alone.
_BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
GPT2_VARIANTS = {
    "gpt2_digits": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BL]},
    "gpt2_digit_runs": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": False}, _BL]},
    "gpt2_prefix_space": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                                dict(_BL, add_prefix_space=True)]},
    "gpt2_plain": _BL,
}


def gpt2_fixture_json(variant):
    with open(GPT2_FIXTURE, encoding="utf-8") as f:
        t = json.load(f)
    t["pre_tokenizer"] = GPT2_VARIANTS[variant]
    return t


def write_gpt2_fixture(variant, d=None):
    """The fixture with VARIANT's pre-tokenizer as DIR/tokenizer.json (the bytes the
    expected ids' sha256 was taken of); skips where the fixture is absent."""
    if not os.path.exists(GPT2_FIXTURE):
        raise Skip("tests/data/gpt2_tokenizer.json is absent (python3 scripts/gen_tokenizer_expected.py --retrain)")
    d = d or tmpdir("tok_" + variant)
    os.makedirs(d, exist_ok=True)
    write_atomic(os.path.join(d, "tokenizer.json"), json.dumps(gpt2_fixture_json(variant), ensure_ascii=False))
    return d


def write_spm_fixture():
    d = tmpdir("tok_spm_fixture")
    write_atomic(os.path.join(d, "tokenizer.json"), json.dumps(spm_fixture_json(), ensure_ascii=False))
    return d


def write_spm_metaspace():
    """The fixture with Metaspace(first, split) and the Metaspace decoder (always_split's form: every flag)."""
    d = tmpdir("tok_spm_metaspace")
    pre, dec = SPM_METASPACE_FORMS["first_split_default"][0], _meta(prepend_scheme="always", split=True)
    write_atomic(os.path.join(d, "tokenizer.json"), json.dumps(spm_metaspace_json(pre, dec), ensure_ascii=False))
    return d


def convert_llama2(out):
    """The Llama 2 tokenizer.json made by scripts/convert_llama2c.py (another
    module's converter); skips where it or the asset is absent."""
    conv = os.path.join(ROOT, "scripts", "convert_llama2c.py")
    if not os.path.exists(conv):
        raise Skip("scripts/convert_llama2c.py is absent")
    tb = shared("tokenizers", "llama2", "tokenizer.bin")
    run([sys.executable, conv, "--tokenizer-only", tb, out])
    return out


# The Llama 2 tokenizer with a Metaspace pre-tokenizer, as scripts/llama2_metaspace.py has
# transformers write it: prepend_scheme always (any Llama-2-style tokenizer saved by transformers 5),
# first (legacy=False), never (add_prefix_space=False), and first with split and the Metaspace decoder.
META_VARIANTS = ("always", "first", "never", "split")


def write_llama2_metaspace(variant, out=None, chat_template=None):
    """DIR with that tokenizer (and CHAT_TEMPLATE, a file); skips without transformers or the asset."""
    import importlib.util
    shared("tokenizers", "llama2", "tokenizer.bin")
    if importlib.util.find_spec("transformers") is None:
        raise Skip("transformers (PyPI) is not installed")
    out = out or tmpdir("tok_llama2_meta_" + variant)
    with lock(out):   # test_families and test_chat write these too
        run([sys.executable, os.path.join(ROOT, "scripts", "llama2_metaspace.py"), variant, out] +
            (["--chat-template", chat_template] if chat_template else []))
    return out


# ---------------------------------------------------------------- helpers
def encode_all(tokdir, texts, special=False):
    """Returns [(ids, roundtrip_ok)] per text."""
    recs = b"".join(struct.pack("<I", len(b)) + b for b in
                    (t if isinstance(t, bytes) else t.encode("utf-8") for t in texts))
    p = run([driver(), tokdir, "encode"] + ([] if special else ["--no-special"]), input=recs)
    lines = p.stdout.decode("utf-8").split("\n")
    assert len(lines) == len(texts) + 1, (len(lines), len(texts))
    res = []
    for ln in lines[:-1]:
        ids, rt = ln.split("\t")
        res.append(([int(x) for x in ids.split()], rt == "1"))
    return res


def decode_all(tokdir, idss, show_special=False):
    inp = "".join(" ".join(map(str, ids)) + "\n" for ids in idss).encode()
    p = run([driver(), tokdir, "decode-lines"] + (["--show-special"] if show_special else []), input=inp)
    out, i, res = p.stdout, 0, []
    while i < len(out):
        (n,) = struct.unpack_from("<I", out, i)
        res.append(out[i + 4:i + 4 + n].decode("utf-8"))
        i += 4 + n
    assert len(res) == len(idss)
    return res


def llamacpp_vectors(tokdir, name):
    base = shared("llamacpp-vocab-tests", name + ".inp")[:-4]
    with open(base + ".inp", encoding="utf-8", newline="") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    with open(base + ".out", encoding="utf-8", newline="") as f:
        outs = f.read().split("\n")
    got = encode_all(tokdir, texts)
    bad = []
    for i, t in enumerate(texts):
        exp = [int(x) for x in outs[i].split()]
        if got[i][0] != exp:
            bad.append("%r: got %s expected %s" % (t[:60], got[i][0][:20], exp[:20]))
    print("    %s: %d/%d llama.cpp vectors match" % (name, len(texts) - len(bad), len(texts)))
    assert not bad, "%d/%d mismatches:\n%s" % (len(bad), len(texts), "\n".join(bad[:10]))


def load_expected():
    if not os.path.exists(EXPECTED):
        raise Skip("tests/data/tokenizer_expected.json is absent (run scripts/gen_tokenizer_expected.py)")
    with open(EXPECTED, encoding="utf-8") as f:
        return json.load(f)


def expected_of(key):
    """The expected entry of KEY with its null ids / ids_special filled in."""
    exp = load_expected()
    e = exp["tokenizers"][key]
    if "ids_base" in e:   # null ids: those of the base tokenizer; null ids_special: special_prefix + ids
        base = exp["tokenizers"][e["ids_base"]]["ids"]
        ids = [b if a is None else a for a, b in zip(e["ids"], base)]
        e = dict(e, ids=ids, ids_special=[e["special_prefix"] + i if s is None else s
                                          for s, i in zip(e["ids_special"], ids)])
    return e


def expected_ids(key, texts, special=False):
    """`tokenizers`' ids of TEXTS (corpus texts) for KEY."""
    exp, e = load_expected(), expected_of(key)
    f = "ids_special" if special else "ids"
    return [e[f][i] if e[f][i] is not None else e["ids"][i] for i in map(exp["texts"].index, texts)]


def check_sha(key, tokdir):
    """Skips where TOKDIR/tokenizer.json is not the file KEY's expected ids were made with."""
    with open(os.path.join(tokdir, "tokenizer.json"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != load_expected()["tokenizers"][key]["sha256"]:
        raise Skip("%s/tokenizer.json differs from the one the expected ids were made with; "
                   "rerun scripts/gen_tokenizer_expected.py" % tokdir)


def check_corpus(key, tokdir, packed_from=None):
    """KEY's expected ids and decoded texts over the corpus, from TOKDIR's tokenizer.json (the file they
    were made with), or from PACKED_FROM instead (a GGUF file converted from it) where given."""
    texts = load_expected()["texts"]
    e = expected_of(key)
    check_sha(key, tokdir)
    src = packed_from or tokdir
    bad = []
    # null entries in ids_special / decoded mean "same as ids" / "same as the text"
    for special, field in ((False, "ids"), (True, "ids_special")):
        got = encode_all(src, texts, special)
        for i, t in enumerate(texts):
            want = e[field][i] if e[field][i] is not None else e["ids"][i]
            if got[i][0] != want:
                bad.append("%s %r:\n   got %s\n   exp %s" % (field, t[:60], got[i][0][:24], want[:24]))
    # decoding (special tokens skipped) must equal HF decode
    dec = decode_all(src, e["ids"])
    for i, t in enumerate(texts):
        want = e["decoded"][i] if e["decoded"][i] is not None else t
        if dec[i] != want:
            bad.append("decode %r: got %r exp %r" % (t[:40], dec[i][:60], want[:60]))
    print("    %s%s: %d texts, %d mismatches" % (key, " (GGUF)" if packed_from else "", len(texts), len(bad)))
    assert not bad, "%d mismatches:\n%s" % (len(bad), "\n".join(bad[:12]))


# ---------------------------------------------------------------- tests
def test_qwen2_llamacpp_vectors():
    llamacpp_vectors(shared("tokenizers", "qwen2.5-instruct"), "ggml-vocab-qwen2.gguf")


def test_llama3_llamacpp_vectors():
    llamacpp_vectors(shared("tokenizers", "llama3-instruct"), "ggml-vocab-llama-bpe.gguf")


def test_llama2_spm_llamacpp_vectors():
    shared("llamacpp-vocab-tests")
    llamacpp_vectors(convert_llama2(tmpdir("tok_llama2")), "ggml-vocab-llama-spm.gguf")


def test_qwen2_hf_corpus():
    check_corpus("qwen2.5", shared("tokenizers", "qwen2.5-instruct"))


def test_qwen3_hf_corpus():
    # Qwen2's byte-level BPE with Qwen3's added tokens (<think>, </think>, <tool_response>, ...)
    check_corpus("qwen3", shared("tokenizers", "qwen3"))


def test_llama3_hf_corpus():
    check_corpus("llama3", shared("tokenizers", "llama3-instruct"))


def test_llama2_hf_corpus():
    check_corpus("llama2", convert_llama2(tmpdir("tok_llama2")))


def test_llama2_metaspace_always_hf_corpus():
    check_corpus("llama2_meta_always", write_llama2_metaspace("always"))


def test_llama2_metaspace_first_hf_corpus():
    check_corpus("llama2_meta_first", write_llama2_metaspace("first"))


def test_llama2_metaspace_never_hf_corpus():
    check_corpus("llama2_meta_never", write_llama2_metaspace("never"))


def test_llama2_metaspace_split_hf_corpus():
    check_corpus("llama2_meta_split", write_llama2_metaspace("split"))


def test_spm_fixture_hf_corpus():
    check_corpus("spm_fixture", write_spm_fixture())


def test_gpt2_digits_hf_corpus():
    check_corpus("gpt2_digits", write_gpt2_fixture("gpt2_digits"))


def test_gpt2_digit_runs_hf_corpus():
    check_corpus("gpt2_digit_runs", write_gpt2_fixture("gpt2_digit_runs"))


def test_gpt2_prefix_space_hf_corpus():
    check_corpus("gpt2_prefix_space", write_gpt2_fixture("gpt2_prefix_space"))


def test_gpt2_plain_hf_corpus():
    check_corpus("gpt2_plain", write_gpt2_fixture("gpt2_plain"))


# Texts for every alternative of GPT-2's regex and of Qwen2's ('s 't 're 've 'm 'll 'd, in either case; letters,
# numbers, other characters with and without a space before them; runs of spaces before a word and at the end;
# newlines, tabs, other scripts)
PRETOKEN_TEXTS = [
    "you'd he'll we've they're I'm it's don't", "YOU'D HE'LL WE'VE THEY'RE I'M IT'S DON'T", "'dog 'sun 'tree 'lly",
    "a  b   c    d\t\te\n\nf \n g  ", "x = 12 + 345;  y=-6.78e9 ", "  leading and trailing  ", "\u00e9t\u00e9 na\u00efve",
    "\u4f60\u597d\uff0c\u4e16\u754c 42\u4e2a", "tabs\tand\r\nlines\r\n\r\n", "!!! ?? ... --- ' '' '''", "don''t 'S 'T 'RE",
    "\U0001f600emoji\U0001f600 in words \u0663\u0664", "it's 'sno\u017ft' \u017f",
]


def boundary_tokenizer(name, pre_tokenizer, normalizer=None):
    """A byte-level BPE (the GPT-2 fixture's special tokens and 256 byte symbols) whose vocabulary holds every
    pre-token that `tokenizers` makes of the corpus and PRETOKEN_TEXTS with PRE_TOKENIZER, each merged left to
    right: nearly every pre-token becomes one token, so the ids show where the text was split (a boundary too many
    leaves two tokens; one too few, the token of two neighbours: see `across`). Returns (its
    directory, the texts, `tokenizers`' Tokenizer of it); skips without `tokenizers` or the fixture."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise Skip("tokenizers (PyPI) is not installed (make deps)")
    if not os.path.exists(GPT2_FIXTURE):
        raise Skip("tests/data/gpt2_tokenizer.json is absent")
    t = gpt2_fixture_json("gpt2_plain")
    t["pre_tokenizer"], t["normalizer"] = pre_tokenizer, normalizer
    base = sorted(t["model"]["vocab"].items(), key=lambda kv: kv[1])[:3 + 256]   # the specials, the 256 bytes
    vocab, merges = dict(base), []
    tok = Tokenizer.from_str(json.dumps(dict(t, model=dict(t["model"], vocab=vocab, merges=[]))))
    texts = load_expected()["texts"] + PRETOKEN_TEXTS
    across = []
    for text in texts:
        norm = tok.normalizer.normalize_str(text) if tok.normalizer else text
        words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(norm)]
        for word in words:
            for k in range(2, len(word) + 1):
                if word[:k] not in vocab:
                    vocab[word[:k]] = len(vocab)
                    merges.append([word[:k - 1], word[k - 1]])
        across += zip(words, words[1:])
    # and two neighbours as one token, merged after every pre-token is whole: `tokenizers` never merges across
    # a boundary, so only a split that misses one (e.g. "'dog" kept whole where "'d" ends a piece) takes them
    for a, b in across:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            merges.append([a, b])
    t["model"] = dict(t["model"], vocab=vocab, merges=merges)
    d = tmpdir("tok_boundaries_" + name)
    write_atomic(os.path.join(d, "tokenizer.json"), json.dumps(t, ensure_ascii=False))
    return d, texts, Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def check_boundaries(name, pre_tokenizer, normalizer=None):
    d, texts, ref = boundary_tokenizer(name, pre_tokenizer, normalizer)
    want = [ref.encode(t, add_special_tokens=False).ids for t in texts]
    bad = [(t, ids, w) for t, (ids, _), w in zip(texts, encode_all(d, texts), want) if ids != w]
    assert sum(len(w) for w in want) < sum(len(t.encode("utf-8")) for t in texts) / 2, "the merges join too little"
    assert not bad, "%s: %d of %d texts split otherwise than `tokenizers` splits them; the first: %r\nours %s\nref  %s" % (
        (name, len(bad), len(texts)) + bad[0])


def test_gpt2_regex_boundaries():
    """GPT-2's regex (ByteLevel with use_regex) splits every text where `tokenizers` does (boundary_tokenizer: the
    fixture's own 1,024 tokens have too few merges to show most boundaries; its ids stayed the same with GPT-2's
    'd contraction dropped), alone and after Digits, with add_prefix_space"""
    for variant in ("gpt2_plain", "gpt2_digits", "gpt2_prefix_space"):
        check_boundaries(variant, GPT2_VARIANTS[variant])


def test_qwen2_and_llama3_regex_boundaries():
    """The Split regexes and NFC of the real Qwen2.5 and Llama 3 tokenizer.json files split every text where
    `tokenizers` does (boundary_tokenizer)"""
    for name, tok in (("qwen2", "qwen2.5-instruct"), ("llama3", "llama3-instruct")):
        with open(shared("tokenizers", tok, "tokenizer.json"), encoding="utf-8") as f:
            real = json.load(f)
        check_boundaries(name, real["pre_tokenizer"], real["normalizer"])


def test_gpt2_empty_normalizer_sequence():
    """An empty normalizer Sequence (transformers' GGUF converter writes one) is no
    normalizer: the ids are those `tokenizers` gave without one."""
    exp = load_expected()
    d = tmpdir("tok_gpt2_empty_norm")
    t = gpt2_fixture_json("gpt2_digits")
    t["normalizer"] = {"type": "Sequence", "normalizers": []}
    write_atomic(os.path.join(d, "tokenizer.json"), json.dumps(t, ensure_ascii=False))
    got = encode_all(d, exp["texts"])
    want = exp["tokenizers"]["gpt2_digits"]["ids"]
    bad = [t for t, g, w in zip(exp["texts"], got, want) if g[0] != w]
    assert not bad, "%d texts differ, first %r" % (len(bad), bad[0])


def test_gpt2_missing_byte_tokens():
    """A byte-level vocabulary without some bytes' tokens (SmolLM2's lacks 21, 0x04 and
    0xF5..0xFF among them) is accepted; with no unk token such a byte is dropped. Expected
    ids from `tokenizers` (skips without it)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise Skip("tokenizers (PyPI) is not installed")
    t = gpt2_fixture_json("gpt2_digits")
    gone = {"\u0104", "\u011d", "\u00c0", "\u00ff"}   # bytes 0x04, 0x1D, 0xC0, 0xFF in GPT-2's byte map
    assert not any(a in gone or b in gone for a, b in (m.split(" ") if isinstance(m, str) else m
                                                       for m in t["model"]["merges"]))
    t["model"]["vocab"] = {k: v for k, v in t["model"]["vocab"].items() if k not in gone}
    d = tmpdir("tok_gpt2_missing_bytes")
    write_atomic(os.path.join(d, "tokenizer.json"), json.dumps(t, ensure_ascii=False))
    hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    texts = ["a\x04b", "\x04", "x \x1d\x1d y\x04", "caf\u00c0 \u00ff \x04\x041\x042", "plain text", "\x1d 12 \x04 "]
    got = encode_all(d, texts)
    for text, (ids, _) in zip(texts, got):
        want = hf.encode(text, add_special_tokens=False).ids
        assert ids == want, (text, ids, want)


def spm_metaspace_json(pre, decoder=None):
    """The SentencePiece-style fixture with the Metaspace pre-tokenizer PRE (no normalizer) and DECODER
    (default: the fixture's [Replace, ByteFallback, Fuse, Strip]), and two merges across a "▁"
    ("▁▁" as Llama 2 has, "e▁") so that Metaspace's split changes ids."""
    t = spm_fixture_json()
    t["normalizer"] = None
    v = t["model"]["vocab"]
    for a, b in ((SPM, SPM), ("e", SPM)):
        v[a + b] = len(v)
        t["model"]["merges"].append("%s %s" % (a, b))
    t["pre_tokenizer"] = pre
    if decoder is not None:
        t["decoder"] = decoder
    return t


def _meta(**kw):
    return dict({"type": "Metaspace", "replacement": SPM}, **kw)


# Metaspace as other writers spell it: tokenizers < 0.19 (add_prefix_space, no prepend_scheme, no split:
# split then defaults to true), both keys, the Metaspace decoder in each scheme, a decoder without Strip
SPM_METASPACE_FORMS = {
    "old_add_prefix_space": (_meta(add_prefix_space=True), _meta(add_prefix_space=True)),
    "never_both_keys": (_meta(add_prefix_space=False, prepend_scheme="never", split=False),
                        _meta(add_prefix_space=False, prepend_scheme="never")),
    "first_split_default": (_meta(prepend_scheme="first"), _meta(prepend_scheme="first", split=False)),
    "always_split": (_meta(prepend_scheme="always", split=True), _meta(prepend_scheme="always", split=True)),
    "first_no_strip": (_meta(prepend_scheme="first", split=False),
                       {"type": "Sequence", "decoders": [
                           {"type": "Replace", "pattern": {"String": SPM}, "content": " "},
                           {"type": "ByteFallback"}, {"type": "Fuse"}]}),
}


def test_spm_metaspace_forms():
    """The Metaspace pre-tokenizer and decoder in the spellings of SPM_METASPACE_FORMS on the
    SentencePiece-style fixture: ids and decoded text as `tokenizers` gives them (skips without it)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise Skip("tokenizers (PyPI) is not installed")
    texts = ["Hello world", " the  rain\n", "  x ", "</s> then<s>there", "<s> the", "caf\u00e9 \u65e5\u672c \U0001f600",
             "\u2581the \u2581\u2581x", "a</s>  b", "", " ", "\n\nthe", "zz\tq"]
    for name, (pre, dec) in SPM_METASPACE_FORMS.items():
        d = tmpdir("tok_spm_meta_" + name)
        write_atomic(os.path.join(d, "tokenizer.json"), json.dumps(spm_metaspace_json(pre, dec), ensure_ascii=False))
        hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        got = encode_all(d, texts)
        want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
        assert [g[0] for g in got] == want, (name, [(t, g[0], w) for t, g, w in zip(texts, got, want) if g[0] != w])
        for show in (False, True):
            dec_got = decode_all(d, want, show_special=show)
            dec_want = [hf.decode(i, skip_special_tokens=not show) for i in want]
            assert dec_got == dec_want, (name, show, [(a, b) for a, b in zip(dec_got, dec_want) if a != b])


def test_roundtrip():
    """decode(encode(x)) == x (special tokens shown) wherever NFC leaves x alone."""
    import unicodedata
    exp = load_expected()
    texts = [t for t in exp["texts"] if unicodedata.normalize("NFC", t) == t]
    dirs = []
    for d in ("qwen2.5-instruct", "llama3-instruct"):
        try:
            dirs.append(shared("tokenizers", d))
        except Skip:
            pass
    # the GPT-2-style fixture without add_prefix_space (whose space decodes back)
    dirs += [write_gpt2_fixture(v) for v in ("gpt2_digits", "gpt2_digit_runs", "gpt2_plain")]
    for d in dirs:
        res = encode_all(d, texts)
        bad = [t for t, (_, ok) in zip(texts, res) if not ok]
        assert not bad, "%s: round trip fails for %r" % (d, bad[:5])
    # SentencePiece: holds for text without special-token strings
    spm_texts = [t for t in texts if "<s>" not in t and "</s>" not in t and "<unk>" not in t]
    res = encode_all(write_spm_fixture(), spm_texts)
    bad = [t for t, (_, ok) in zip(spm_texts, res) if not ok]
    assert not bad, "spm fixture: round trip fails for %r" % bad[:5]
    # Metaspace: with prepend_scheme first / always, a leading space is lost as in `tokenizers`
    # (" x" and "x" are both "▁x"); with never, nothing is
    for v in ("always", "first", "never"):
        try:
            d = write_llama2_metaspace(v)
        except Skip:
            continue
        mt = [t for t in spm_texts if v == "never" or not t.startswith((" ", SPM))]
        res = encode_all(d, mt)
        bad = [t for t, (_, ok) in zip(mt, res) if not ok]
        assert not bad, "llama2 Metaspace %s: round trip fails for %r" % (v, bad[:5])


def test_invalid_utf8_and_odd_input():
    """Invalid UTF-8, NULs, lone continuation bytes: no crash, ids in range."""
    import random
    rnd = random.Random(7)
    texts = [b"\xff", b"\xc3", b"a\xc3", b"\xe4\xbd", b"\x80\x80abc", b"\x00\x00 x\x00", b"\xed\xa0\x80",
             b"<|im_start|\xff>", b"'\xff", b" \xff\n\xfe"]
    texts += [bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 80))) for _ in range(200)]
    dirs = [write_spm_fixture()] + [write_gpt2_fixture(v) for v in GPT2_VARIANTS] + [write_spm_metaspace()]
    for d in ("qwen2.5-instruct", "llama3-instruct"):
        try:
            dirs.append(shared("tokenizers", d))
        except Skip:
            pass
    for d in dirs:
        for ids, _ in encode_all(d, texts, special=True):
            assert all(i >= 0 for i in ids)
    # byte-level: raw bytes that happen to be valid UTF-8 round trip exactly
    ok = [t for t in texts if _valid(t)]
    for ids_rt in encode_all(dirs[1], ok):
        assert ids_rt[1]


def _valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_corrupt_blobs_do_not_crash():
    p = run([driver(), write_spm_fixture(), "fuzz", "3000"])
    assert "fuzz 3000" in p.stdout
    # the GPT-2-style blob: Digits and add_prefix_space flags in the header
    p = run([driver(), write_gpt2_fixture("gpt2_prefix_space"), "fuzz", "1000"])
    assert "fuzz 1000" in p.stdout
    # Metaspace (first, split) and its decoder: pre-tokenizer values and flags of their own
    p = run([driver(), write_spm_metaspace(), "fuzz", "1000"])
    assert "fuzz 1000" in p.stdout
    try:
        q = shared("tokenizers", "qwen2.5-instruct")
    except Skip:
        return
    run([driver(), q, "fuzz", "150"])


def test_load_speed_and_size():
    q = shared("tokenizers", "qwen2.5-instruct")
    info = dict(ln.split() for ln in run([driver(), q, "info"]).stdout.strip().split("\n"))
    print("    qwen2.5: blob %s bytes, load %s ms" % (info["blob_bytes"], info["load_ms_avg"]))
    assert int(info["blob_bytes"]) <= 4 * 1000 * 1000
    # a sanitizer build loads several times slower: the bound is for the normal build
    if os.environ.get("LLMCC_SANITIZE") != "1":
        assert float(info["load_ms_avg"]) < 100
    assert info["bos"] == "-1" and info["eos"] == "151645"
    l3 = dict(ln.split() for ln in run([driver(), shared("tokenizers", "llama3-instruct"), "info"]).stdout.strip().split("\n"))
    assert l3["bos"] == "128000" and l3["eos"] == "128009"


def _bad_dir(name, tok, files=None):
    d = tmpdir("tok_bad_" + name)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok if isinstance(tok, str) else json.dumps(tok, ensure_ascii=False))
    for fn, body in (files or {}).items():
        with open(os.path.join(d, fn), "w") as f:
            f.write(body)
    return d


def test_user_errors():
    base = spm_fixture_json()

    def variant(**kw):
        t = json.loads(json.dumps(base))
        for k, v in kw.items():
            cur = t
            path = k.split("__")
            for p in path[:-1]:
                cur = cur[p]
            cur[path[-1]] = v
        return t

    regex_tok = variant(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        normalizer=None)
    gpt2 = gpt2_fixture_json("gpt2_digits") if os.path.exists(GPT2_FIXTURE) else None

    def pre(*items):
        t = json.loads(json.dumps(gpt2))
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": list(items)}
        return t
    qwen_split = {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False}
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    meta = _meta(prepend_scheme="first", split=False)
    cases = [
        ("meta_rep", variant(normalizer=None, pre_tokenizer=dict(meta, replacement="_")),
         "pre_tokenizer.replacement: "),
        ("meta_scheme", variant(normalizer=None, pre_tokenizer=dict(meta, prepend_scheme="sometimes")),
         "pre_tokenizer.prepend_scheme: "),
        ("meta_aps", variant(normalizer=None, pre_tokenizer=dict(meta, add_prefix_space=False)),
         "pre_tokenizer.add_prefix_space: "),
        ("meta_norm", variant(pre_tokenizer=meta), "normalizer: "),
        ("meta_nfc", variant(normalizer={"type": "NFC"}, pre_tokenizer=meta), "normalizer.type: "),
        ("spm_nfc", variant(normalizer={"type": "NFC"}), "normalizer.type: \"NFC\" without a ByteLevel"),
        ("meta_split_type", variant(normalizer=None, pre_tokenizer=dict(meta, split="yes")), "pre_tokenizer.split: "),
        ("meta_dec_seq", variant(normalizer=None, pre_tokenizer=meta, decoder={"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, meta]}), "decoder.decoders[1]: "),
        ("meta_dec_rep", variant(normalizer=None, pre_tokenizer=meta, decoder=dict(meta, replacement=" ")),
         "decoder.replacement: "),
        ("json", "{ not json", None),
        ("unigram", variant(model__type="Unigram"), "model.type"),
        ("regex", regex_tok, "pre_tokenizer.pretokenizers[0].pattern.Regex: "),
        ("merge", variant(model__merges=["\u2581t zzz"]), "model.merges[0]"),
        ("vocab", variant(model__vocab=[1, 2]), "model.vocab"),
        ("norm", variant(normalizer={"type": "NFKC"}), "normalizer.type"),
        ("cfg", base, "tokenizer_config.json: eos_token"),
    ]
    if gpt2:   # the pre-tokenizers around GPT-2's that are still refused
        cases += [
            ("pre3", pre({"type": "Digits"}, qwen_split, bl), "pre_tokenizer.pretokenizers: only"),
            ("pre_ws", pre({"type": "Digits"}, {"type": "Whitespace"}), "pre_tokenizer.pretokenizers: only"),
            ("pre_meta", pre({"type": "Metaspace"}, bl), "pre_tokenizer.pretokenizers[0].type: \"Metaspace\""),
            ("split_regex", pre(qwen_split, dict(bl, use_regex=True)), "pre_tokenizer.pretokenizers[1].use_regex: "),
            ("split_prefix", pre(qwen_split, dict(bl, add_prefix_space=True)),
             "pre_tokenizer.pretokenizers[1].add_prefix_space: "),
            ("digits_bool", pre({"type": "Digits", "individual_digits": "yes"}, bl),
             "pre_tokenizer.pretokenizers[0].individual_digits: "),
            ("whitespace", dict(gpt2, pre_tokenizer={"type": "WhitespaceSplit"}), "pre_tokenizer.type: "),
        ]
    for name, tok, key in cases:
        files = {"tokenizer_config.json": '{"eos_token": "<nope>"}'} if name == "cfg" else None
        d = _bad_dir(name, tok, files)
        p = run([driver(), d, "info"], check=False)
        err = p.stderr.strip()
        assert p.returncode == 1, (name, p.returncode, err)
        assert err.startswith("llmcc: ") and "\n" not in err, (name, err)
        assert os.path.join(d, "tokenizer") in err, (name, err)
        if key:
            assert key in err, (name, err)
    empty = tmpdir("tok_none")
    p = run([driver(), empty, "info"], check=False)
    assert p.returncode == 3   # tokenizer_pack returned NULL: no tokenizer.json
