"""test_bad_input: every kind of bad input of issue 5, through the real
command line (`llmcc build MODEL -o OUT`). Each case asserts: exit status 1,
stderr exactly one line of the shape `llmcc: FILE: KEY: what is wrong` with
the file (and the tensor or key) named, no sanitizer report or internal
error, and nothing written: OUT absent afterwards and no OUT.tmp-* left (or,
where OUT was an earlier llmcc project, OUT unchanged). The checkpoints are
variants of the tiny llama-gqa fixture of scripts/make_fixture.py, edited
here with struct + json. Also: a real fixture executable truncated or with a
byte flipped says so at start and under --verify. docs/errors.md lists the
same cases with their messages."""
import json
import os
import shutil
import struct

import testlib
from testlib import LLMCC, build_exe, model_fixture, run, tmpdir

BASE = os.path.join(testlib.TMP, "bad_input")


def base_model():
    """The tiny llama-gqa checkpoint (config, generation config, safetensors, tokenizer)."""
    return model_fixture("llama-gqa", "f32", seed=5)


def variant(name):
    """A fresh copy of the base model at BASE/NAME/model; returns its path."""
    top = os.path.join(BASE, name)
    shutil.rmtree(top, ignore_errors=True)
    d = os.path.join(top, "model")
    shutil.copytree(base_model(), d)
    return d


def read_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_st(path, hdr, data, raw=None):
    hb = raw if raw is not None else json.dumps(hdr).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)


def edit_st(d, fn, name="model.safetensors"):
    """Rewrites d/NAME with fn(header dict, data) -> (header, data)."""
    p = os.path.join(d, name)
    hdr, data = read_st(p)
    hdr, data = fn(hdr, data)
    write_st(p, hdr, data)
    return p


def edit_json(d, name, fn):
    p = os.path.join(d, name)
    with open(p) as f:
        obj = json.load(f)
    obj = fn(obj) or obj
    with open(p, "w") as f:
        json.dump(obj, f)
    return p


def write_raw(d, name, data):
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return p


def out_of(d):
    return os.path.join(os.path.dirname(d), "out")


def no_tmp_left(out):
    parent = os.path.dirname(out)
    left = [f for f in os.listdir(parent) if f.startswith(os.path.basename(out) + ".tmp") or
            f.startswith(os.path.basename(out) + ".old")]
    assert not left, "left behind: %s" % left


def build_fails(d, file, key, *needles, exact=None, out=None):
    """llmcc build d -o OUT must fail with `llmcc: FILE: KEY: ...` (KEY None: `llmcc: FILE: ...`)."""
    out = out or out_of(d)
    existed = os.path.exists(out)
    before = sorted(os.listdir(out)) if existed else None
    p = run([LLMCC, "build", d, "-o", out, "--target", "cpu"], check=False)
    lines = p.stderr.splitlines()
    assert p.returncode == 1, "rc=%d (want 1)\nstderr: %s" % (p.returncode, p.stderr[-3000:])
    assert len(lines) == 1, "want one stderr line, got:\n%s" % p.stderr[-3000:]
    line = lines[0]
    for bad in ("runtime error", "Sanitizer", "internal error", "Segmentation"):
        assert bad not in p.stderr, p.stderr
    prefix = "llmcc: %s: " % file + ("%s: " % key if key else "")
    assert line.startswith(prefix), "want prefix %r\n got %r" % (prefix, line)
    for n in needles:
        assert n in line, "%r not in %r" % (n, line)
    if exact is not None:
        assert line == exact, "want %r\n got %r" % (exact, line)
    if existed:
        assert sorted(os.listdir(out)) == before, "OUT changed: %s -> %s" % (before, sorted(os.listdir(out)))
    else:
        assert not os.path.exists(out), "OUT was written"
    no_tmp_left(out)
    return line


def st_path(d):
    return os.path.join(d, "model.safetensors")


# ---- the model directory ----

def test_no_config_json():
    d = variant("no_config")
    os.remove(os.path.join(d, "config.json"))
    build_fails(d, os.path.join(d, "config.json"), None, "not found (a Hugging Face model directory has config.json)")


def test_no_weights():
    d = variant("no_weights")
    os.remove(st_path(d))
    build_fails(d, d, None, "no weights (model.safetensors, model.safetensors.index.json or one *.safetensors file)")


def test_two_unindexed_weight_files():
    d = variant("two_files")
    shutil.copy(st_path(d), os.path.join(d, "a.safetensors"))
    os.rename(st_path(d), os.path.join(d, "b.safetensors"))
    build_fails(d, d, None, "2 *.safetensors files but no model.safetensors.index.json")


# ---- safetensors ----

def test_st_empty():
    d = variant("st_empty")
    write_raw(d, "model.safetensors", b"")
    build_fails(d, st_path(d), None, exact="llmcc: %s: file is 0 bytes, too short for a safetensors header" % st_path(d))


def test_st_truncated_data():
    d = variant("st_trunc_data")
    hdr, data = read_st(st_path(d))
    keep = len(data) // 2
    write_st(st_path(d), hdr, data[:keep])
    # the first tensor in header order that ends past the cut is named
    name, e = next((k, v) for k, v in hdr.items() if k != "__metadata__" and v["data_offsets"][1] > keep)
    b, en = e["data_offsets"]
    build_fails(d, st_path(d), name, exact="llmcc: %s: %s: data_offsets [%d, %d] go past the end of the file "
                "(the data section is %d bytes)" % (st_path(d), name, b, en, keep))


def test_st_truncated_header():
    d = variant("st_trunc_hdr")
    with open(st_path(d), "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    write_raw(d, "model.safetensors", b[:8 + n // 2])
    build_fails(d, st_path(d), None, exact="llmcc: %s: header length %d goes past the end of the file (%d bytes)" % (
        st_path(d), n, 8 + n // 2))


def test_st_header_length_absurd():
    d = variant("st_hlen_absurd")
    with open(st_path(d), "rb") as f:
        b = f.read()
    write_raw(d, "model.safetensors", struct.pack("<Q", 1 << 62) + b[8:])
    build_fails(d, st_path(d), None, "header length %d is absurd (more than 100 MB)" % (1 << 62))


def test_st_header_invalid_json():
    d = variant("st_json")
    write_st(st_path(d), None, b"", raw=b'{"model.embed_tokens.weight": {"dtype": "F32", ')
    build_fails(d, st_path(d), None, exact="llmcc: %s: invalid JSON (unexpected end of input)" % st_path(d))
    # found by fuzz_safetensors: jsmn took a missing comma as a key with two values
    d = variant("st_json_comma")
    write_st(st_path(d), None, b"\0" * 16, raw=b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]} '
             b'"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}')
    build_fails(d, st_path(d), None, "invalid JSON (syntax error at byte")
    d = variant("st_json_prim")
    write_st(st_path(d), None, b"\0" * 8, raw=b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0.0]}}')
    build_fails(d, st_path(d), None, "invalid JSON (syntax error at byte")


def test_st_header_deeply_nested():
    # a megabyte of brackets: refused at once (jsmn's closing walk would be quadratic)
    depth = 1000000
    d = variant("st_deep")
    write_st(st_path(d), None, b"", raw=b'{"w": ' + b"[" * depth + b"]" * depth + b"}")
    build_fails(d, st_path(d), None, exact="llmcc: %s: JSON nested more than 128 levels deep (at byte 133)" % st_path(d))
    d = variant("st_deep_open")
    write_st(st_path(d), None, b"", raw=b'{"w": ' + b"[" * depth)
    build_fails(d, st_path(d), None, "JSON nested more than 128 levels deep")
    # 100 levels are fine for the parser; the entry is then not a tensor
    d = variant("st_deep_ok")
    write_st(st_path(d), None, b"", raw=b'{"w": ' + b"[" * 100 + b"]" * 100 + b"}")
    build_fails(d, st_path(d), "w", "entry is not an object (got [[[[")


def test_st_offsets_out_of_range():
    d = variant("st_off_range")
    name = "model.layers.0.self_attn.k_proj.weight"

    def f(h, data):
        h[name]["data_offsets"] = [h[name]["data_offsets"][0], 10 ** 12]
        return h, data
    edit_st(d, f)
    build_fails(d, st_path(d), name, "go past the end of the file")


def test_st_offsets_reversed():
    d = variant("st_off_rev")
    name = "model.layers.0.self_attn.k_proj.weight"

    def f(h, data):
        h[name]["data_offsets"] = h[name]["data_offsets"][::-1]
        return h, data
    edit_st(d, f)
    b, e = read_st(st_path(d))[0][name]["data_offsets"]
    build_fails(d, st_path(d), name, exact="llmcc: %s: %s: data_offsets [%d, %d] are reversed" % (st_path(d), name, b, e))


def test_st_offsets_overlap():
    d = variant("st_off_overlap")
    a, b = "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"

    def f(h, data):
        lo = h[a]["data_offsets"][0]
        h[b]["data_offsets"] = [lo + 4, lo + 4 + 256]   # same size, shifted by one float
        return h, data
    edit_st(d, f)
    line = build_fails(d, st_path(d), b, "overlap " + a)
    assert line.endswith("overlap %s [%d, %d]" % (a, *read_st(st_path(d))[0][a]["data_offsets"])), line


def test_st_offsets_not_shape_times_dtype():
    d = variant("st_off_size")
    name = "model.layers.1.mlp.up_proj.weight"

    def f(h, data):
        h[name]["shape"] = [172, 63]
        return h, data
    edit_st(d, f)
    b, e = read_st(st_path(d))[0][name]["data_offsets"]
    build_fails(d, st_path(d), name, exact="llmcc: %s: %s: data_offsets [%d, %d] do not match shape [172, 63] x F32 "
                "(43344 bytes)" % (st_path(d), name, b, e))


def test_st_unknown_dtype():
    d = variant("st_dtype")
    name = "model.norm.weight"

    def f(h, data):
        h[name]["dtype"] = "Q4_K"
        return h, data
    edit_st(d, f)
    build_fails(d, st_path(d), name, '"Q4_K" is not supported (known: F32, F16, BF16,')


def test_st_dtype_not_for_weights():
    # a dtype safetensors knows but llmcc does not compute with
    d = variant("st_dtype_i32")
    name = "model.norm.weight"

    def f(h, data):
        h[name]["dtype"] = "I32"
        return h, data
    edit_st(d, f)
    build_fails(d, st_path(d), name, "I32", "not supported")


def test_st_duplicate_name():
    d = variant("st_dup")
    h, data = read_st(st_path(d))
    name = "model.norm.weight"
    items = [json.dumps(k) + ": " + json.dumps(v) for k, v in h.items()]
    items.append(json.dumps(name) + ": " + json.dumps(h[name]))
    write_st(st_path(d), None, data, raw=("{" + ", ".join(items) + "}").encode())
    build_fails(d, st_path(d), name, exact="llmcc: %s: %s: tensor appears twice in the header" % (st_path(d), name))


def shard(d, dup=None, index_fn=None):
    """Splits model.safetensors into two shards + index; dup: a tensor put in both."""
    h, data = read_st(st_path(d))
    names = [k for k in h if k != "__metadata__"]
    parts = (names[:len(names) // 2], names[len(names) // 2:])
    files = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    wm = {}
    for fn, part in zip(files, parts):
        if dup and fn == files[1]:
            part = part + [dup]
        hdr, blob = {}, b""
        for k in part:
            b, e = h[k]["data_offsets"]
            hdr[k] = dict(h[k], data_offsets=[len(blob), len(blob) + e - b])
            blob += data[b:e]
            wm.setdefault(k, fn)
        write_st(os.path.join(d, fn), hdr, blob)
    os.remove(st_path(d))
    idx = {"metadata": {"total_size": len(data)}, "weight_map": wm}
    if index_fn:
        idx = index_fn(idx)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(idx, f)
    return [os.path.join(d, f) for f in files]


def test_st_duplicate_across_shards():
    d = variant("st_dup_shards")
    f1, f2 = shard(d, dup="model.embed_tokens.weight")
    build_fails(d, f2, "model.embed_tokens.weight", exact="llmcc: %s: model.embed_tokens.weight: tensor is also in %s" % (f2, f1))


def test_index_names_missing_shard():
    d = variant("st_missing_shard")
    f1, f2 = shard(d)
    os.remove(f2)
    idx = os.path.join(d, "model.safetensors.index.json")
    wm = json.load(open(idx))["weight_map"]
    first = next(k for k, v in wm.items() if v == os.path.basename(f2))
    build_fails(d, idx, "weight_map." + first, exact='llmcc: %s: weight_map.%s: shard "%s" not found (%s)' % (
        idx, first, os.path.basename(f2), f2))


def test_index_invalid():
    d = variant("st_index_bad")
    shard(d)
    idx = write_raw(d, "model.safetensors.index.json", '{"weight_map": [')
    build_fails(d, idx, None, "invalid JSON")
    d = variant("st_index_nomap")
    shard(d, index_fn=lambda i: {"metadata": i["metadata"]})
    build_fails(d, os.path.join(d, "model.safetensors.index.json"), "weight_map", exact="llmcc: %s: weight_map: missing" %
                os.path.join(d, "model.safetensors.index.json"))


# ---- config.json ----

def cfg_path(d):
    return os.path.join(d, "config.json")


def test_config_not_json():
    d = variant("cfg_notjson")
    write_raw(d, "config.json", "hidden_size = 64\n")
    build_fails(d, cfg_path(d), None, exact="llmcc: %s: invalid JSON (syntax error at byte 0)" % cfg_path(d))
    d = variant("cfg_notobj")
    write_raw(d, "config.json", "[64]")
    build_fails(d, cfg_path(d), None, exact="llmcc: %s: not a JSON object" % cfg_path(d))
    d = variant("cfg_nul")
    write_raw(d, "config.json", b'{"hidden_size": 64}\0garbage')
    build_fails(d, cfg_path(d), None, exact="llmcc: %s: invalid JSON (NUL byte at offset 19)" % cfg_path(d))


def test_config_deeply_nested():
    d = variant("cfg_deep")
    depth = 1000000
    write_raw(d, "config.json", '{"hidden_size": ' + "[" * depth + "]" * depth + "}")
    build_fails(d, cfg_path(d), None, exact="llmcc: %s: JSON nested more than 128 levels deep (at byte 143)" % cfg_path(d))
    d = variant("cfg_deep_ok")
    edit_json(d, "config.json", lambda c: c.__setitem__("hidden_size", [[[[64]]]]))
    build_fails(d, cfg_path(d), "hidden_size", "must be an integer, got [[[[64]]]]")


def test_config_missing_required():
    for key in ("hidden_size", "num_attention_heads", "vocab_size"):
        d = variant("cfg_missing_" + key)
        edit_json(d, "config.json", lambda c: c.pop(key) and None)
        build_fails(d, cfg_path(d), key, exact="llmcc: %s: %s: missing (required)" % (cfg_path(d), key))


def test_config_zero_and_negative_sizes():
    for key, v in (("num_hidden_layers", 0), ("intermediate_size", -5), ("hidden_size", 0), ("head_dim", -16),
                   ("num_key_value_heads", 0)):
        d = variant("cfg_%s_%d" % (key, v))
        edit_json(d, "config.json", lambda c: c.__setitem__(key, v))
        build_fails(d, cfg_path(d), key, exact="llmcc: %s: %s: must be positive, got %d" % (cfg_path(d), key, v))


def test_config_sizes_bounded_before_anything_is_sized():
    """A 4-byte edit costs nothing: a size past llmcc's limits (CONFIG_LIMITS, docs/errors.md) is refused at once,
    with --random-weights and compile too; layers the tensors do not hold, or tensors past the layers, are refused
    by name; a number past a double's range is not a finite one"""
    import time
    for key, v, limit in (("num_hidden_layers", 10 ** 9, 1024), ("vocab_size", 10 ** 9, 4194304),
                          ("hidden_size", 10 ** 6, 65536)):
        d = variant("cfg_huge_" + key)
        edit_json(d, "config.json", lambda c: c.__setitem__(key, v))
        t0 = time.time()
        build_fails(d, cfg_path(d), key, exact="llmcc: %s: %s: %d is more than llmcc takes (%d)" %
                    (cfg_path(d), key, v, limit))
        p = run([LLMCC, "compile", d, "--ir", "graph"], check=False)
        assert p.returncode == 1 and "is more than llmcc takes" in p.stderr, p.stderr
        assert time.time() - t0 < 5
    d = variant("cfg_layers_3")
    edit_json(d, "config.json", lambda c: c.__setitem__("num_hidden_layers", 3))
    build_fails(d, cfg_path(d), "num_hidden_layers", exact="llmcc: %s: num_hidden_layers: 3, but the checkpoint's "
                "tensors hold 2 layers: model.layers.2.* is missing" % cfg_path(d))
    d = variant("cfg_layers_1")
    edit_json(d, "config.json", lambda c: c.__setitem__("num_hidden_layers", 1))
    build_fails(d, cfg_path(d), "num_hidden_layers", exact="llmcc: %s: num_hidden_layers: 1, but the checkpoint's "
                "tensors hold 2 layers: model.layers.1.* and on are left over" % cfg_path(d))
    d = variant("cfg_eps_inf")
    write_raw(d, "config.json", open(cfg_path(d)).read().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e999')
              .replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e999'))
    build_fails(d, cfg_path(d), "rms_norm_eps", "must be a finite number, got 1e999")


def test_config_wrong_types():
    d = variant("cfg_str")
    edit_json(d, "config.json", lambda c: c.__setitem__("hidden_size", "64"))
    build_fails(d, cfg_path(d), "hidden_size", exact='llmcc: %s: hidden_size: must be an integer, got "64"' % cfg_path(d))
    d = variant("cfg_frac")
    edit_json(d, "config.json", lambda c: c.__setitem__("rms_norm_eps", "tiny"))
    build_fails(d, cfg_path(d), "rms_norm_eps", "must be a number")


def test_config_heads_do_not_divide_hidden():
    d = variant("cfg_heads")

    def f(c):
        c.pop("head_dim")
        c["num_attention_heads"] = 6
        c["num_key_value_heads"] = 2
    edit_json(d, "config.json", f)
    build_fails(d, cfg_path(d), "num_attention_heads",
                exact="llmcc: %s: num_attention_heads: 6 does not divide hidden_size 64 (and there is no head_dim)" % cfg_path(d))


def test_config_kv_heads_do_not_divide_heads():
    d = variant("cfg_kv")
    edit_json(d, "config.json", lambda c: c.__setitem__("num_key_value_heads", 3))
    build_fails(d, cfg_path(d), "num_key_value_heads",
                exact="llmcc: %s: num_key_value_heads: 3 does not divide num_attention_heads 4" % cfg_path(d))


def test_config_unsupported_architecture():
    d = variant("cfg_arch")
    edit_json(d, "config.json", lambda c: c.__setitem__("architectures", ["GemmaForCausalLM"]))
    build_fails(d, cfg_path(d), "architectures", exact='llmcc: %s: architectures: "GemmaForCausalLM" is not supported '
                '(supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)' % cfg_path(d))


def test_config_unsupported_rope_scaling():
    d = variant("cfg_rope")
    edit_json(d, "config.json", lambda c: c.__setitem__("rope_scaling", {"rope_type": "yarn", "factor": 4.0}))
    build_fails(d, cfg_path(d), "rope_scaling.rope_type",
                exact='llmcc: %s: rope_scaling.rope_type: "yarn" is not supported (supported: default, linear, llama3)' % cfg_path(d))


def test_generation_config_bad():
    d = variant("gen_bad")
    p = write_raw(d, "generation_config.json", '{"top_p": 2}')
    build_fails(d, p, "top_p", exact="llmcc: %s: top_p: must be <= 1, got 2" % p)


# ---- tensors against the config ----

def test_missing_tensor():
    d = variant("t_missing")
    name = "model.layers.1.mlp.down_proj.weight"

    def f(h, data):
        del h[name]
        return h, data
    edit_st(d, f)
    build_fails(d, st_path(d), name, exact="llmcc: %s: %s: tensor missing from the checkpoint (expected shape [64, 172])" % (
        st_path(d), name))


def test_missing_tensor_sharded():
    d = variant("t_missing_sharded")
    shard(d)
    f2 = os.path.join(d, "model-00002-of-00002.safetensors")
    name = "lm_head.weight"
    h, data = read_st(f2)
    assert name in h
    del h[name]
    write_st(f2, h, data)
    idx = os.path.join(d, "model.safetensors.index.json")
    edit_json(d, "model.safetensors.index.json", lambda i: i["weight_map"].pop(name) and None)
    build_fails(d, idx, name, exact="llmcc: %s: %s: tensor missing from the checkpoint (expected shape [300, 64])" % (idx, name))


def test_wrong_shape():
    d = variant("t_shape")
    name = "model.layers.0.mlp.gate_proj.weight"

    def f(h, data):
        h[name]["shape"] = h[name]["shape"][::-1]   # same byte count, transposed
        return h, data
    edit_st(d, f)
    build_fails(d, st_path(d), name, exact="llmcc: %s: %s: shape [64, 172], expected [172, 64]" % (st_path(d), name))


def add_tensor(h, data, name, shape):
    """h, data with an f32 tensor NAME of SHAPE appended (zeros)."""
    n = 4
    for x in shape:
        n *= x
    h[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + n]}
    return h, data + b"\0" * n


def test_unused_tensor_refused():
    """A tensor the config's graph does not read (q/k norms in a llama checkpoint) is refused, as GGUF refuses it:
    the config describes another model than the weights."""
    d = variant("t_unused")
    name = "model.layers.0.self_attn.q_norm.weight"
    edit_st(d, lambda h, data: add_tensor(h, data, name, [16]))
    build_fails(d, st_path(d), name, exact="llmcc: %s: %s: tensor not used by the LlamaForCausalLM model config.json "
                "describes (llmcc refuses what it would leave out, as transformers warns and llama.cpp refuses)" % (
                    st_path(d), name))


def test_tensors_transformers_ignores_are_listed():
    """rotary_emb.inv_freq (older checkpoints saved it) and a tied lm_head.weight are what transformers does not
    read either: built, with one line on stderr naming them."""
    d = variant("t_ignored")
    names = ["model.layers.%d.self_attn.rotary_emb.inv_freq" % i for i in range(2)]

    def f(h, data):
        for n in names:
            h, data = add_tensor(h, data, n, [8])
        return h, data
    edit_st(d, f)
    out = out_of(d)
    p = run([LLMCC, "build", d, "-o", out, "--target", "cpu"], check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    warn = [ln for ln in p.stderr.splitlines() if "not read" in ln]
    assert warn == ["llmcc: %s: 2 tensors not read, as transformers does not read them either (%s, ...)" % (
        st_path(d), names[0])], p.stderr


# ---- tokenizer.json ----

def tok_path(d):
    return os.path.join(d, "tokenizer.json")


def test_tokenizer_not_json():
    d = variant("tok_json")
    write_raw(d, "tokenizer.json", '{"model": {"type": "BPE", "vocab": {')
    build_fails(d, tok_path(d), None, exact="llmcc: %s: invalid JSON (unexpected end of input)" % tok_path(d))


def test_tokenizer_malformed():
    d = variant("tok_model")
    edit_json(d, "tokenizer.json", lambda t: t["model"].__setitem__("type", "Unigram"))
    build_fails(d, tok_path(d), "model.type", exact='llmcc: %s: model.type: "Unigram" is not supported yet (only BPE)' % tok_path(d))
    d = variant("tok_merge")
    edit_json(d, "tokenizer.json", lambda t: t["model"]["merges"].insert(0, "zz\u0100 q"))
    build_fails(d, tok_path(d), "model.merges[0]", "is not in model.vocab")
    d = variant("tok_vocab")
    edit_json(d, "tokenizer.json", lambda t: t["model"].__setitem__("vocab", [1, 2]))
    build_fails(d, tok_path(d), "model.vocab", exact="llmcc: %s: model.vocab: missing or not an object" % tok_path(d))
    d = variant("tok_pre")
    edit_json(d, "tokenizer.json", lambda t: t["pre_tokenizer"]["pretokenizers"][0].update(type="Metaspace"))
    build_fails(d, tok_path(d), "pre_tokenizer.pretokenizers[0].type", exact=(
        'llmcc: %s: pre_tokenizer.pretokenizers[0].type: "Metaspace" is not supported yet; only [Split(regex), '
        'ByteLevel], [Digits, ByteLevel] or [ByteLevel] is supported yet' % tok_path(d)))
    d = variant("tok_cfg")
    p = write_raw(d, "tokenizer_config.json", '{"bos_token": "<nope>"}')
    build_fails(d, p, "bos_token", exact='llmcc: %s: bos_token: token "<nope>" is not in tokenizer.json' % p)


# ---- the output directory ----

def test_failure_leaves_an_earlier_project_as_it_was():
    d = variant("out_keep")
    out = out_of(d)
    run([LLMCC, "build", d, "-o", out, "--target", "cpu"])
    marker = open(os.path.join(out, ".llmcc-project")).read()
    # fails late (tokenizer.json is read after the kernels are made)
    write_raw(d, "tokenizer.json", "{")
    build_fails(d, tok_path(d), None, "invalid JSON", out=out)
    assert open(os.path.join(out, ".llmcc-project")).read() == marker


def test_refuses_foreign_output():
    d = variant("out_foreign")
    out = out_of(d)
    os.makedirs(out)
    write_raw(out, "mine.txt", "keep")
    build_fails(d, out, None, exact="llmcc: %s: exists and was not made by llmcc build (no .llmcc-project): refusing to "
                "replace it" % out, out=out)
    assert os.listdir(out) == ["mine.txt"]
    os.remove(os.path.join(out, "mine.txt"))
    os.rmdir(out)
    write_raw(os.path.dirname(out), "out", "a file")
    p = run([LLMCC, "build", d, "-o", out, "--target", "cpu"], check=False)
    assert p.returncode == 1 and p.stderr == "llmcc: %s: exists and is not a directory\n" % out, p.stderr
    assert open(out).read() == "a file"
    no_tmp_left(out)


# ---- the executable ----

def fixture_exe():
    return os.path.join(build_exe(base_model(), "cpu", ["--name", "m"]), "m")


def one_line(p, *needles):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr
    return lines[0]


def damaged_copy(name, fn):
    with open(fixture_exe(), "rb") as f:
        b = bytearray(f.read())
    b = fn(b)
    p = os.path.join(BASE, "exe_" + name)
    with open(p, "wb") as f:
        f.write(b)
    os.chmod(p, 0o755)
    return p


def footer(b):
    magic, ver, _, off, size, _ = struct.unpack_from("<8sIIQQQ", b, len(b) - 64)
    assert magic == b"LLMCCEND", magic
    return off, size


def test_exe_intact():
    p = run([fixture_exe(), "--verify"])
    assert "ok" in p.stdout, p.stdout


def test_exe_truncated():
    # the last 64 bytes are a copy of the footer the payload's ELF section ends with (payload.h): without them the
    # runtime finds the section, as in a stripped file, and the weights are whole (--verify: their checksum holds)
    for cut in (1, 64):
        f = damaged_copy("trunc%d" % cut, lambda b: b[:len(b) - cut])
        assert "payload ok" in run([f, "--verify"]).stdout
    for cut in (100000, 300000):
        f = damaged_copy("trunc%d" % cut, lambda b: b[:len(b) - cut])
        for args in (["--prompt-ids", "1,2", "-n", "2", "--ids"], ["--verify"]):
            one_line(run([f] + args, check=False), "truncated or damaged")


def test_exe_modified():
    def weight_byte(b):
        off, size = footer(b)
        b[off + size - 100] ^= 0x10
        return b
    f = damaged_copy("flip_weight", weight_byte)
    # a weight byte: the cheap checks at start pass; --verify reads everything
    assert run([f, "--prompt-ids", "1,2", "-n", "2", "--ids"], check=False).returncode == 0
    one_line(run([f, "--verify"], check=False), "checksum")

    for at, what, needle in ((1, "magic", "truncated or damaged"), (8, "version", "version 0, this runtime reads version 1")):
        def header_byte(b):
            off, _ = footer(b)
            b[off + at] ^= 0x01
            return b
        f = damaged_copy("flip_header_" + what, header_byte)
        one_line(run([f, "--prompt-ids", "1,2", "-n", "2", "--ids"], check=False), needle)
        one_line(run([f, "--verify"], check=False), needle)

    def footer_byte(b):
        b[len(b) - 64] ^= 0x20   # footer magic
        return b
    f = damaged_copy("flip_footer", footer_byte)   # the section's copy of it serves (test_exe_truncated)
    assert "payload ok" in run([f, "--verify"]).stdout

    def both_footers(b):
        off, size = footer(b)
        b[len(b) - 64] ^= 0x20
        b[off + size] ^= 0x20   # the copy at the section's end
        return b
    f = damaged_copy("flip_footers", both_footers)
    one_line(run([f, "--prompt-ids", "1,2", "-n", "2", "--ids"], check=False), "truncated or damaged")

    def tokenizer_byte(b):
        off, _ = footer(b)
        tok_off, tok_size = struct.unpack_from("<QQ", b, off + 24)
        b[off + tok_off + 40] ^= 0xFF   # the blob's pool size
        return b
    f = damaged_copy("flip_tok", tokenizer_byte)
    one_line(run([f, "--verify"], check=False), "checksum")
    # the pool size no longer adds up to the blob's size: the tokenizer refuses to load it, in one line
    one_line(run([f, "--prompt", "hello", "-n", "2"], check=False), "tokenizer blob: size does not match its header")


def test_control_characters_stay_on_one_line():
    # a tensor name with a newline and an escape character: printed as \xNN, so the message stays one line
    d = variant("st_ctrl_name")

    def f(h, data):
        e = h.pop("model.norm.weight")
        h["model.norm\n\x1b[31m.weight"] = dict(e, data_offsets=e["data_offsets"][::-1])
        return h, data
    edit_st(d, f)
    line = build_fails(d, st_path(d), "model.norm\\x0a\\x1b[31m.weight", "are reversed")
    assert "\x1b" not in line


def test_long_name_keeps_the_explanation():
    d = variant("st_long_name")
    long = "model." + "x" * 10000 + ".weight"

    def f(h, data):
        e = h.pop("model.norm.weight")
        h[long] = dict(e, data_offsets=e["data_offsets"][::-1])
        return h, data
    edit_st(d, f)
    line = build_fails(d, st_path(d), None, "model." + "x" * 300, "x...: data_offsets", "are reversed")
    assert len(line) < 2000, len(line)


def test_a_file_that_is_no_model():
    """A file that is neither a GGUF file nor a model directory (llmcc build /etc/passwd) is named as such, not
    "not found"."""
    d = tmpdir("bad_not_a_model")
    path = os.path.join(d, "passwd")
    with open(path, "w") as f:
        f.write("root:x:0:0:root:/root:/bin/bash\n")
    build_fails(path, path, None, "not a GGUF file or model directory", out=os.path.join(d, "out"))
