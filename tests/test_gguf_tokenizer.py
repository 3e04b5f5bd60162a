"""test_gguf_tokenizer: the tokenizer of a GGUF file (compiler/tokenizer_gguf.c) through
tests/c/tokenizer_driver.c and `llmcc tokenize / detokenize FILE.gguf`.

References, none of them our code:
- SmolLM2-135M-Instruct's real Q4_1 GGUF (scripts/fetch_smollm2's cache): transformers'
  AutoTokenizer.from_pretrained(dir, gguf_file=...) over the corpus of tests/data/tokenizer_expected.json
  (ids, decoded text) and its apply_chat_template for one question.
- GGUF files written here by gguf-py, the way llama.cpp's convert_hf_to_gguf.py writes them
  (get_vocab_base's tokens and types, then gguf.SpecialVocab's merges, special ids, add_*_token flags
  and chat template), from the real tokenizers in ../shared/assets/tokenizers and from the GPT-2-style
  fixture of test_tokenizer.py: the ids `tokenizers` gave for the original tokenizer.json
  (tests/data/tokenizer_expected.json), llama.cpp's test vectors (../shared/assets/llamacpp-vocab-tests),
  and transformers' apply_chat_template on the original directory.
- A tiny GGUF written here whose ids are worked out by hand; broken copies of it must be one-line
  user errors naming the key (exit 1).
Skips without gguf-py, transformers, the shared assets or the cached GGUF."""
import importlib.util
import json
import os
import shutil
import struct

import testlib
from testlib import Skip, run, shared, tmpdir
import test_tokenizer as tt

DIR = os.path.join(testlib.TMP, "gguf_tok")
QUESTION = "What is the capital of France?"
# tokenizer.ggml.pre as convert_hf_to_gguf.py's get_vocab_base_pre names these tokenizers (by the hash of
# their ids on its check text): Qwen2 / Qwen2.5 / Qwen3 "qwen2", Llama 3 "llama-bpe", SmolLM "smollm"
REAL = {"qwen2.5": ("qwen2.5-instruct", "qwen2"), "llama3": ("llama3-instruct", "llama-bpe"),
        "qwen3": ("qwen3", "qwen2")}


def need(*mods):
    for m in mods:
        if importlib.util.find_spec(m) is None:
            raise Skip("%s (PyPI) is not installed" % m)


def fresh(name):
    d = os.path.join(DIR, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def smollm2_gguf():
    cache = os.environ.get("LLMCC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "llmcc")
    p = os.path.join(cache, "smollm2-gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(p):
        raise Skip("%s is absent (scripts/fetch_smollm2 fetches it)" % p)
    return p


def llmcc(*args, check=True):
    return run([testlib.LLMCC] + list(args), check=check)


def chat_ids(tok, messages):
    r = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(r["input_ids"] if hasattr(r, "keys") else r)


# ---------------------------------------------------------------- convert_hf_to_gguf.py's way
def looks_special(t):
    """convert_hf_to_gguf.py's does_token_look_special."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<\uff5c") and t.endswith("\uff5c>")) or (t.startswith("<unused") and t.endswith(">")))


def write_converted(src, out, pre):
    """OUT: a vocabulary-only GGUF of the tokenizer in SRC, as convert_hf_to_gguf.py's _set_vocab_gpt2 writes
    it: get_vocab_base (ids up to config.json's vocab_size, "[PADi]" UNUSED for the ids without a token,
    added tokens CONTROL when special or special-looking, else USER_DEFINED), then gguf.SpecialVocab.
    Returns the transformers tokenizer of SRC."""
    import gguf
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(src)
    vocab = tok.get_vocab()
    size = len(vocab)
    cfg = os.path.join(src, "config.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            size = json.load(f).get("vocab_size", size)
    assert max(vocab.values()) < size
    reverse = {i: t for t, i in vocab.items()}
    added, decoder = tok.get_added_vocab(), tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(size):
        if i not in reverse:
            tokens.append("[PAD%d]" % i)
            types.append(gguf.TokenType.UNUSED)
            continue
        t = reverse[i]
        if t in added:
            if not decoder[i].normalized:
                t = tok.decode(tok.encode(t, add_special_tokens=False))
            if decoder[i].special or looks_special(t):
                types.append(gguf.TokenType.CONTROL)
            else:
                t = t.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)
    w = gguf.GGUFWriter(out, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(src, load_merges=True).add_to_gguf(w, quiet=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return tok


_converted = {}


def converted(key):
    """(GGUF path, transformers tokenizer of the original) for REAL[key], written once per run."""
    if key not in _converted:
        need("gguf", "transformers")
        name, pre = REAL[key]
        src = shared("tokenizers", name)
        tt.check_sha(key, src)
        out = os.path.join(fresh("real_" + name), name + ".gguf")
        _converted[key] = (out, write_converted(src, out, pre))
    return _converted[key]


# ---------------------------------------------------------------- converted real tokenizers
def test_qwen25_gguf_matches_tokenizers():
    path, _ = converted("qwen2.5")
    tt.check_corpus("qwen2.5", shared("tokenizers", "qwen2.5-instruct"), packed_from=path)


def test_llama3_gguf_matches_tokenizers():
    path, _ = converted("llama3")
    tt.check_corpus("llama3", shared("tokenizers", "llama3-instruct"), packed_from=path)


def test_qwen3_gguf_matches_tokenizers():
    # Qwen3's <think>, </think>, <tool_call>... are USER_DEFINED: split out of the text, shown when decoding
    path, _ = converted("qwen3")
    tt.check_corpus("qwen3", shared("tokenizers", "qwen3"), packed_from=path)


def test_converted_llamacpp_vectors():
    """llama.cpp's own test vectors (made with HF AutoTokenizer) for the Qwen2 and Llama 3 vocabularies."""
    shared("llamacpp-vocab-tests")
    tt.llamacpp_vectors(converted("qwen2.5")[0], "ggml-vocab-qwen2.gguf")
    tt.llamacpp_vectors(converted("llama3")[0], "ggml-vocab-llama-bpe.gguf")


def test_converted_chat_prompts_match_transformers():
    """The chat template in tokenizer.chat_template, rendered as from tokenizer_config.json."""
    for key in REAL:
        path, tok = converted(key)
        msgs = [{"role": "user", "content": QUESTION}]
        want = chat_ids(tok, msgs)
        got = [int(x) for x in llmcc("tokenize", path, "--chat", QUESTION).stdout.split()]
        print("    %s: %d chat prompt ids" % (key, len(got)))
        assert got == want, (key, got, want)


def test_unused_ids_decode_to_nothing():
    """Qwen2.5's model has more rows (config.json's vocab_size) than its tokenizer has ids (151665):
    convert_hf_to_gguf.py writes "[PADi]"
    UNUSED tokens for the rest, which are no tokens, as in tokenizer.json (`tokenizers` decodes them to "")."""
    need("tokenizers")
    from tokenizers import Tokenizer
    path, _ = converted("qwen2.5")
    src = shared("tokenizers", "qwen2.5-instruct")
    with open(os.path.join(src, "config.json")) as f:
        rows = json.load(f)["vocab_size"]
    hf = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    unused = [str(i) for i in (151665, 151700, rows - 1)]
    assert hf.get_vocab_size(with_added_tokens=True) == 151665 < rows and hf.decode([int(i) for i in unused]) == ""
    assert llmcc("detokenize", path, "--show-special", *unused).stdout == ""
    assert llmcc("detokenize", path, "9707", "151700").stdout == hf.decode([9707])
    # the model's rows are the id space: one past them is refused
    p = llmcc("detokenize", path, str(rows), check=False)
    assert p.returncode == 1 and "outside the vocabulary (size %d)" % rows in p.stderr, p.stderr


# ---------------------------------------------------------------- the GPT-2-style fixture
def check_fixture(variant, pre):
    need("gguf", "transformers")
    src = tt.write_gpt2_fixture(variant, os.path.join(DIR, "fixture_" + variant))
    out = os.path.join(fresh("fixture_%s_gguf" % variant), "fixture.gguf")
    write_converted(src, out, pre)
    tt.check_corpus(variant, src, packed_from=out)


def test_gpt2_fixture_pre_gpt2():
    # ByteLevel(use_regex) alone is llama.cpp's "gpt-2"
    check_fixture("gpt2_plain", "gpt-2")


def test_gpt2_fixture_pre_smollm():
    # [Digits(individual_digits), ByteLevel(use_regex)] is llama.cpp's "smollm" ("\p{N}", then GPT-2's regex)
    check_fixture("gpt2_digits", "smollm")


# ---------------------------------------------------------------- SmolLM2's real GGUF
_smollm2 = {}


def smollm2_ref():
    need("gguf", "transformers")
    path = smollm2_gguf()
    if "tok" not in _smollm2:
        from transformers import AutoTokenizer
        _smollm2["tok"] = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    return path, _smollm2["tok"]


def test_smollm2_gguf_matches_transformers():
    """Its tokenizer.ggml.pre is "smollm": llama.cpp splits each numeric character off first ("\\p{N}"), as the
    [Digits(individual_digits), ByteLevel] of SmolLM2's tokenizer.json on the Hub does. transformers' GGUF loader
    keeps GPT2Tokenizer's ByteLevel alone for that name, so the reference is its tokenizer with the Digits step
    put back; texts without a numeric character must match it unchanged too."""
    from tokenizers import pre_tokenizers
    path, tok = smollm2_ref()
    plain = tok.backend_tokenizer.pre_tokenizer
    assert plain.__getstate__() == pre_tokenizers.ByteLevel(add_prefix_space=False).__getstate__(), plain
    texts = tt.load_expected()["texts"]
    # SmolLM2's vocabulary lacks some bytes' tokens (0x04, 0x1D, ...): both drop them
    texts = texts + ["a\x04b \x1d\x1d 12\x06", "\x13\x14\x16 x"]
    bad = []
    for special in (False, True):
        got = tt.encode_all(path, texts, special)
        for t, (ids, _) in zip(texts, got):
            if not any(c.isnumeric() for c in t) and ids != tok(t, add_special_tokens=special)["input_ids"]:
                bad.append("unchanged transformers, %s %r" % (special, t[:40]))
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
        try:
            for t, (ids, _) in zip(texts, got):
                want = tok(t, add_special_tokens=special)["input_ids"]
                if ids != want:
                    bad.append("%s %r: %s vs %s" % (special, t[:40], ids[:12], want[:12]))
        finally:
            tok.backend_tokenizer.pre_tokenizer = plain
    idss = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    dec = tt.decode_all(path, idss)
    for t, ids, d in zip(texts, idss, dec):
        want = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if d != want:
            bad.append("decode %r: %r vs %r" % (t[:40], d[:40], want[:40]))
    print("    SmolLM2 GGUF: %d texts, %d differ from transformers" % (len(texts), len(bad)))
    assert not bad, "\n".join(bad[:8])


def test_smollm2_gguf_round_trip():
    """decode(encode(text)) is the text, for every corpus text that is valid UTF-8 and uses only bytes the
    vocabulary has; with the CLI too."""
    path = smollm2_gguf()
    texts = tt.load_expected()["texts"]
    got = tt.encode_all(path, texts)
    bad = [t for t, (_, ok) in zip(texts, got) if not ok and not any(c in t for c in "\x04\x1d")]
    print("    %d/%d texts round-trip" % (len(texts) - len(bad), len(texts)))
    assert not bad, bad[:5]
    text = "Hello, world! 12 caf\u00e9 \u65e5\u672c <|im_end|>"
    ids = llmcc("tokenize", path, text).stdout.split()
    assert [int(x) for x in ids] == tt.encode_all(path, [text], True)[0][0]
    assert llmcc("detokenize", path, "--show-special", *ids).stdout == text
    assert llmcc("detokenize", path, *ids).stdout == text.replace("<|im_end|>", "")


def test_smollm2_gguf_chat_prompt():
    path, tok = smollm2_ref()
    want = chat_ids(tok, [{"role": "user", "content": QUESTION}])
    got = [int(x) for x in llmcc("tokenize", path, "--chat", QUESTION).stdout.split()]
    assert got == want, (got, want)
    # --no-chat's packing: a template llmcc does not know is no error without --chat
    assert llmcc("tokenize", path, "--no-special", "hi").stdout.split() == [str(i) for i in tok("hi")["input_ids"]]


# ---------------------------------------------------------------- a tiny GGUF, good and broken
def bytes_to_unicode():
    """GPT-2's byte -> character map (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTES = [bytes_to_unicode()[b] for b in range(256)]
# ids: 0..255 the bytes (GPT-2's spelling, in byte order), 256 "he", 257 "Ġt", 258 "Ġthe",
# 259 <|endoftext|> (CONTROL), 260 <think> (USER_DEFINED), 261 [PAD261] (UNUSED)
TINY_TOKENS = BYTES + ["he", "\u0120t", "\u0120the", "<|endoftext|>", "<think>", "[PAD261]"]
TINY_TYPES = [1] * 259 + [3, 4, 5]
TINY_MERGES = ["h e", "\u0120 t", "\u0120t he"]


def tiny(name, drop=(), **kv):
    """A vocabulary-only GGUF: the tiny tokenizer above, KEY=VALUE pairs replaced (the key's dots as
    underscores after tokenizer_ggml_ / tokenizer_), keys in DROP left out."""
    need("gguf")
    vals = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": TINY_TOKENS,
            "tokenizer.ggml.token_type": TINY_TYPES, "tokenizer.ggml.merges": TINY_MERGES,
            "tokenizer.ggml.bos_token_id": 259, "tokenizer.ggml.eos_token_id": 259}
    return write_vocab(os.path.join(DIR, "tiny", name + ".gguf"), vals, drop, kv)


def write_vocab(path, vals, drop, kv):
    """A vocabulary-only GGUF of the metadata VALS, KEY=VALUE pairs of KV replacing them (the key's dots as
    underscores after tokenizer_ggml_ / tokenizer_), keys in DROP left out."""
    import gguf
    for k, v in kv.items():
        vals[k.replace("tokenizer_ggml_", "tokenizer.ggml.").replace("tokenizer_chat", "tokenizer.chat")] = v
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, "llama")
    for k, v in vals.items():
        if k in drop:
            continue
        if k == "tokenizer.ggml.scores":
            w.add_array(k, [float(x) for x in v])   # FLOAT32, as add_token_scores writes them
        elif k == "tokenizer.ggml.token_type":
            w.add_array(k, v)   # gguf-py writes a list of ints as INT32, as add_token_types does
        elif isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_array(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def ids_of(path, text, *flags):
    return [int(x) for x in llmcc("tokenize", path, *flags, text).stdout.split()]


def test_tiny_by_hand():
    p = tiny("good")
    t = TINY_TOKENS.index("t")
    # GPT-2's regex: "the", " the", " then"; merges by rank: h+e, Ġ+t, Ġt+he
    assert ids_of(p, "the the then") == [t, 256, 258, 258, ord("n")]
    # control and user-defined tokens are split out before BPE, whatever surrounds them
    assert ids_of(p, "t<|endoftext|>he<think> t") == [t, 259, 256, 260, 257]
    # no add_bos_token: none added (llama.cpp's default for "gpt-2")
    assert ids_of(p, "he") == [256]
    assert llmcc("detokenize", p, "--show-special", "258", "259", "260", "261").stdout == " the<|endoftext|><think>"
    assert llmcc("detokenize", p, "258", "259", "260").stdout == " the<think>"
    # chosen by its magic without the .gguf name
    q = p[:-5] + ".bin"
    shutil.copyfile(p, q)
    assert ids_of(q, "he the") == [256, 258]


def test_tiny_add_bos():
    p = tiny("add_bos", tokenizer_ggml_add_bos_token=True, tokenizer_ggml_add_eos_token=True)
    assert ids_of(p, "he") == [259, 256, 259] and ids_of(p, "he", "--no-special") == [256]
    # llama.cpp adds BOS for "llama-bpe" unless the file says otherwise (and ignores merges for vocabulary words)
    p = tiny("llama_bpe", tokenizer_ggml_pre="llama-bpe")
    assert ids_of(p, "he") == [259, 256]
    p = tiny("llama_bpe_no_bos", tokenizer_ggml_pre="llama-bpe", tokenizer_ggml_add_bos_token=False)
    assert ids_of(p, "he") == [256]


def test_tiny_chat():
    smol = os.path.join(testlib.ROOT, "tests", "data", "smollm2-instruct.chat_template.jinja")
    with open(smol, encoding="utf-8") as f:
        tpl = f.read()
    toks = TINY_TOKENS[:-1] + ["<|im_start|>", "<|im_end|>"]
    p = tiny("chatml", tokenizer_ggml_tokens=toks, tokenizer_ggml_token_type=TINY_TYPES[:-1] + [3, 3],
             tokenizer_chat_template=tpl)
    out = llmcc("tokenize", p, "--chat", "--text", "hi").stdout
    assert out.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), out
    # llmcc chat-template reads the GGUF file's template too
    m = os.path.join(testlib.tmpdir("gguf_tok"), "hi.json")
    with open(m, "w") as f:
        json.dump([{"role": "user", "content": "hi"}], f)
    assert llmcc("chat-template", p, "--messages", m, "--add-generation-prompt").stdout == out
    # a template whose markers are not tokens of this vocabulary renders all the same (the markers as text)
    out = llmcc("tokenize", tiny("chatml_no_tokens", tokenizer_chat_template=tpl), "--chat", "--text", "hi").stdout
    assert out.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), out
    # the file's template as it is (Python's repr of the messages here), or one line naming its line and column
    out = llmcc("tokenize", tiny("chat_repr", tokenizer_chat_template="{{ messages }}"), "--chat", "--text", "hi").stdout
    assert out == "[{'role': 'user', 'content': 'hi'}]", out
    expect_error(tiny("chat_bad", tokenizer_chat_template="{% if messages %}"), "tokenizer.chat_template",
                 "line 1, column 4: 'if' is never closed", "--chat")
    expect_error(tiny("chat_none"), "tokenizer.chat_template", "none", "--chat")


def expect_error(path, key, what, *flags):
    """`llmcc tokenize PATH` exits 1 with one line `llmcc: PATH: KEY: ...what...`, nothing on stdout."""
    p = llmcc("tokenize", path, *flags, "hi", check=False)
    lines = p.stderr.splitlines()
    assert p.returncode == 1 and len(lines) == 1 and p.stdout == "", (path, p.returncode, p.stdout[:200], p.stderr)
    prefix = "llmcc: %s: %s: " % (path, key)
    assert lines[0].startswith(prefix) and what in lines[0], (lines[0], prefix, what)
    assert "internal error" not in p.stderr and "Sanitizer" not in p.stderr


# ---------------------------------------------------------------- SentencePiece ("llama")
def spm_vocab(path):
    """A llama2.c tokenizer.bin (int32 max piece length, then per piece f32 score, int32 length, bytes) as
    convert_hf_to_gguf.py's _set_vocab_sentencepiece lists the SentencePiece model behind it: the pieces
    (U+2581 for a space), their scores and types (<unk> unknown, <s> </s> control, <0xNN> byte, the rest
    normal)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    off, toks, scores, types = 4, [], [], []
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        piece = data[off + 8:off + 8 + n].decode("utf-8")
        off += 8 + n
        i = len(toks)
        if i < 3:
            toks.append(("<unk>", "<s>", "</s>")[i])
            types.append((2, 3, 3)[i])
        else:
            toks.append(piece.replace(" ", "\u2581"))
            types.append(6 if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">") else 1)
        scores.append(score)
    return toks, scores, types


def llama2_gguf(name, drop=(), **kv):
    """Llama 2's tokenizer as a vocabulary-only "llama" GGUF, as convert_hf_to_gguf.py writes it from
    tokenizer.model (spm_vocab, from llama2.c's export of the same model: every piece and score), with the
    special ids and add_bos_token. KEY=VALUE pairs replace metadata as in tiny(); keys in DROP are left out."""
    need("gguf")
    toks, scores, types = spm_vocab(shared("tokenizers", "llama2", "tokenizer.bin"))
    vals = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": toks, "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.add_eos_token": False}
    return write_vocab(os.path.join(DIR, "llama2", name + ".gguf"), vals, drop, kv)


def test_llama2_spm_gguf_matches_tokenizers():
    """A SentencePiece GGUF keeps no merges: llmcc builds them from the scores (compiler/tokenizer_gguf.c
    spm_merges). Against `tokenizers` on Llama 2's tokenizer.json (tests/data/tokenizer_expected.json "llama2",
    the corpus with and without special tokens, and decoding) and llama.cpp's Llama 2 test vectors (made by
    HF AutoTokenizer from meta-llama/Llama-2-7b-hf)."""
    path = llama2_gguf("llama2")
    tt.check_corpus("llama2", tt.convert_llama2(tmpdir("gguf_tok_llama2_json")), packed_from=path)
    tt.llamacpp_vectors(path, "ggml-vocab-llama-spm.gguf")
    # BOS by add_bos_token (true: llama.cpp's default for SentencePiece); a space in front; bytes for the rest
    assert ids_of(path, "Hello world") == [1, 15043, 3186]
    # (the ids `tokenizers` gives: no piece for U+2603, so its UTF-8 bytes as <0xE2> <0x98> <0x83>, ids byte + 3)
    assert ids_of(path, "\u2603\x07") == [1, 29871, 229, 155, 134, 10]
    assert llmcc("detokenize", path, "1", "15043", "3186", "8").stdout == "Hello world\x05"
    p = llama2_gguf("llama2_no_bos", tokenizer_ggml_add_bos_token=False)
    assert ids_of(p, "Hello world") == [15043, 3186]


def test_tinyllama_spm_gguf_chat_ids():
    """TinyLlama-1.1B-Chat's GGUF: the Llama 2 vocabulary with its Zephyr template in tokenizer.chat_template gives
    the ids of transformers' apply_chat_template (tests/data/chat_expected.json "tinyllama", as test_chat.py)."""
    import test_chat
    test_chat.check_family("tinyllama", llama2_gguf("tinyllama_chat", tokenizer_chat_template=test_chat.ZEPHYR))


def test_llama2_spm_gguf_errors():
    S, K = "tokenizer.ggml.scores", "tokenizer.ggml."
    expect_error(llama2_gguf("scores_absent", drop=(S,)), S, "absent: a SentencePiece vocabulary needs its scores")
    expect_error(llama2_gguf("scores_short", tokenizer_ggml_scores=[0.0] * 31999), S, "31999 scores for 32000 tokens")
    expect_error(llama2_gguf("no_space_prefix", tokenizer_ggml_add_space_prefix=False), K + "add_space_prefix",
                 "false is not supported yet")
    expect_error(llama2_gguf("extra_spaces", tokenizer_ggml_remove_extra_whitespaces=True),
                 K + "remove_extra_whitespaces", "true is not supported yet")
    # (ids 3..258 are byte tokens, no merges: the first normal piece's score is the first read)
    expect_error(llama2_gguf("scores_nan", tokenizer_ggml_scores=[float("nan")] * 32000), S + "[259]",
                 "nan is not a finite score")


def test_tiny_errors():
    M, P, MG = "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.merges"
    expect_error(tiny("model_bert", tokenizer_ggml_model="bert"), M, '"bert" is not supported yet')
    expect_error(tiny("model_absent", drop=(M,)), M, "absent: this GGUF file has no tokenizer")
    expect_error(tiny("pre_deepseek", tokenizer_ggml_pre="deepseek-llm"), P, '"deepseek-llm" is not supported yet')
    # llama.cpp's "default" (and what it takes when the key is absent) is not GPT-2's regex
    expect_error(tiny("pre_default", tokenizer_ggml_pre="default"), P, '"default" is not supported yet')
    expect_error(tiny("pre_absent", drop=(P,)), P, "absent")
    expect_error(tiny("merges_absent", drop=(MG,)), MG, "absent")
    # an empty list of merges (gguf-py writes none: the count patched to 0): every multi-byte token out of reach
    one = tiny("merges_one", tokenizer_ggml_merges=["h e"])
    data = bytearray(open(one, "rb").read())
    at = data.find(MG.encode()) + len(MG) + 8   # past the key, its value type (ARRAY) and element type (STRING)
    assert struct.unpack_from("<Q", data, at)[0] == 1
    struct.pack_into("<Q", data, at, 0)
    del data[at + 8:at + 8 + 8 + 3]             # the one string: its u64 length and "h e"
    empty = one.replace("merges_one", "merges_empty")
    with open(empty, "wb") as f:
        f.write(data)
    expect_error(empty, MG, "empty, for 262 tokens: BPE needs its merges")
    expect_error(tiny("merge_unknown", tokenizer_ggml_merges=TINY_MERGES + ["h qq"]), MG + "[3]",
                 '"h" + "qq": the right part is not in tokenizer.ggml.tokens')
    expect_error(tiny("merge_result_unknown", tokenizer_ggml_merges=["t h"]), MG + "[0]", "the merged token")
    expect_error(tiny("merge_no_space", tokenizer_ggml_merges=["he"]), MG + "[0]", 'is not "left right"')
    expect_error(tiny("types_short", tokenizer_ggml_token_type=TINY_TYPES[:-1]), "tokenizer.ggml.token_type",
                 "261 types for 262 tokens")
    expect_error(tiny("type_bad", tokenizer_ggml_token_type=TINY_TYPES[:-1] + [7]),
                 "tokenizer.ggml.token_type[261]", "7 is not a token type")
    expect_error(tiny("types_strings", tokenizer_ggml_token_type=TINY_TOKENS), "tokenizer.ggml.token_type",
                 "expected ARRAY[an integer type]")
    expect_error(tiny("bos_out_of_range", tokenizer_ggml_bos_token_id=262), "tokenizer.ggml.bos_token_id",
                 "262 is not a token id (tokenizer.ggml.tokens has 262 tokens)")
    expect_error(tiny("add_bos_without_bos", drop=("tokenizer.ggml.bos_token_id",),
                      tokenizer_ggml_add_bos_token=True), "tokenizer.ggml.add_bos_token", "true but there is no")
    expect_error(tiny("llama_bpe_without_bos", drop=("tokenizer.ggml.bos_token_id",), tokenizer_ggml_pre="llama-bpe"),
                 "tokenizer.ggml.add_bos_token", "llama.cpp's default")
    expect_error(tiny("tokens_absent", drop=("tokenizer.ggml.tokens", "tokenizer.ggml.token_type")),
                 "tokenizer.ggml.tokens", "absent")
    # detokenize reads the same metadata
    p = llmcc("detokenize", tiny("model_llama2", tokenizer_ggml_model="t5"), "1", check=False)
    assert p.returncode == 1 and "tokenizer.ggml.model: \"t5\" is not supported yet" in p.stderr, p.stderr
