"""test_loaders: the safetensors reader (compiler/safetensors.h), config.json /
generation_config.json parsing and model-directory resolution (compiler/config.c)
and `llmcc inspect` (compiler/cmd_inspect.c), driven through tests/c/st_dump.c.
Checkpoints are written here with struct + json only."""
import json
import os
import shutil
import struct

import testlib

SOURCES = ["tests/c/st_dump.c", "compiler/config.c", "compiler/safetensors.c", "compiler/cmd_inspect.c",
           "compiler/util.c", "compiler/json.c", "runtime/json.c"]
_bin = None


def dump_bin():
    global _bin
    if _bin is None:
        extra = []
        # gcc 12 flags util.c's vsnprintf(NULL, 0, ...) size query under -fsanitize (a false positive)
        if os.environ.get("LLMCC_SANITIZE") == "1":
            extra = ["-Wno-error=format-truncation"]
        _bin = testlib.build_c("st_dump", SOURCES, extra=extra)
    return _bin


def fresh(name):
    d = os.path.join(testlib.TMP, "loaders", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


# ---- safetensors writing ----

def f32(*xs):
    return struct.pack("<%df" % len(xs), *xs)


def f16(*xs):
    return struct.pack("<%de" % len(xs), *xs)


def bf16(*xs):
    return b"".join(struct.pack("<f", x)[2:] for x in xs)   # truncation: exact for these values


def write_st(path, tensors, metadata=None, header=None, raw_header=None, data=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)], stored in reverse order so offsets are not header order.
    header: dict replacing the computed one; raw_header: bytes replacing it."""
    hdr, blob = {}, b""
    for name, dt, shape, b in reversed(tensors):
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(b)]}
        blob += b
    if metadata is not None:
        hdr["__metadata__"] = metadata
    if header is not None:
        hdr = header
    hb = raw_header if raw_header is not None else json.dumps(hdr).encode()
    if pad and raw_header is None:
        hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + (blob if data is None else data))
    return path


GOOD = [
    ("model.embed_tokens.weight", "F32", [2, 3], f32(1, 2, 3, 4, 5, -6.5)),
    ("model.norm.weight", "F16", [4], f16(1, 0.5, -2, 65504)),
    ("lm_head.weight", "BF16", [2, 2], bf16(1, -1, 2, 0.25)),
    ("scalar", "F32", [], f32(3.0)),
    ("empty", "I32", [0, 4], b""),
    ("ids", "I64", [2], struct.pack("<2q", 7, -1)),
    ("mask", "BOOL", [3], b"\x01\x00\x01"),
]


def parse_dump(out):
    rows = {}
    for line in out.splitlines():
        p = line.split(" ")
        if len(p) == 6:
            rows[p[0]] = dict(dtype=p[1], shape=p[2], file=p[3], esize=int(p[4]), hex=p[5])
    return rows


def check_tensors(rows, tensors, file=None):
    for name, dt, shape, b in tensors:
        r = rows[name]
        assert r["dtype"] == dt, (name, r)
        assert r["shape"] == "[" + ",".join(map(str, shape)) + "]", (name, r)
        assert r["hex"] == b.hex(), (name, r["hex"], b.hex())
        if file:
            assert r["file"] == file, (name, r)


def run_dump(*args, env=None):
    return testlib.run([dump_bin()] + list(args), check=False, env=env)


def expect_error(args, *needles, env=None):
    p = run_dump(*args, env=env)
    assert p.returncode == 1, "rc=%d (want 1)\nstdout: %s\nstderr: %s" % (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1, "want one stderr line, got: %r" % p.stderr
    assert lines[0].startswith("llmcc: "), lines[0]
    for n in needles:
        assert n in lines[0], "%r not in %r" % (n, lines[0])
    return lines[0]


# ---- safetensors: good input ----

def test_st_single_file():
    d = fresh("st_single")
    write_st(os.path.join(d, "model.safetensors"), GOOD, metadata={"format": "pt"})
    p = run_dump("st", d)
    assert p.returncode == 0, p.stderr
    rows = parse_dump(p.stdout)
    check_tensors(rows, GOOD, "model.safetensors")
    assert rows["model.norm.weight"]["esize"] == 2 and rows["ids"]["esize"] == 8
    assert "missing NULL" in p.stdout
    assert "count %d files 1" % len(GOOD) in p.stdout


def test_st_unpadded_and_other_name():
    d = fresh("st_other")
    write_st(os.path.join(d, "weights.safetensors"), GOOD[:2], pad=False)
    p = run_dump("st", d)
    assert p.returncode == 0, p.stderr
    check_tensors(parse_dump(p.stdout), GOOD[:2], "weights.safetensors")


def test_st_many_tensors_hash():
    d = fresh("st_many")
    ts = [("model.layers.%d.w" % i, "F32", [1], f32(float(i))) for i in range(1000)]
    write_st(os.path.join(d, "model.safetensors"), ts)
    p = run_dump("st", d)
    assert p.returncode == 0, p.stderr
    check_tensors(parse_dump(p.stdout), ts)


def write_shards(d, index=None):
    a = GOOD[:3]
    b = GOOD[3:]
    write_st(os.path.join(d, "model-00001-of-00002.safetensors"), a)
    write_st(os.path.join(d, "model-00002-of-00002.safetensors"), b)
    wm = {t[0]: "model-00001-of-00002.safetensors" for t in a}
    wm.update({t[0]: "model-00002-of-00002.safetensors" for t in b})
    if index is None:
        index = {"metadata": {"total_size": 0}, "weight_map": wm}
    elif callable(index):
        index = index(wm)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)


def test_st_shards():
    d = fresh("st_shards")
    write_shards(d)
    p = run_dump("st", d)
    assert p.returncode == 0, p.stderr
    rows = parse_dump(p.stdout)
    check_tensors(rows, GOOD)
    assert rows["lm_head.weight"]["file"] == "model-00001-of-00002.safetensors"
    assert rows["scalar"]["file"] == "model-00002-of-00002.safetensors"
    assert "files 2" in p.stdout


# ---- safetensors: bad input ----

def bad_file(name, **kw):
    d = fresh("st_bad_" + name)
    return write_st(os.path.join(d, "model.safetensors"), kw.pop("tensors", GOOD[:2]), **kw)


def test_st_too_short():
    d = fresh("st_short")
    path = os.path.join(d, "model.safetensors")
    with open(path, "wb") as f:
        f.write(b"\x05\x00\x00")
    expect_error(["st", d], path, "too short")
    open(path, "wb").close()
    expect_error(["st", d], path, "0 bytes")


def test_st_header_length():
    d = fresh("st_hlen")
    path = os.path.join(d, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 1 << 40) + b"{}")
    expect_error(["st", d], path, "absurd")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 1000) + b"{}" + b" " * 90)
    expect_error(["st", d], path, "past the end of the file")


def test_st_bad_json():
    expect_error(["file", bad_file("json1", raw_header=b'{"a": {"dtype": "F32",')], "invalid JSON")
    expect_error(["file", bad_file("json2", raw_header=b'{"a": 1} {"b": 2}')], "invalid JSON")
    expect_error(["file", bad_file("json3", raw_header=b'[1, 2]')], "not a JSON object")
    expect_error(["file", bad_file("json4", raw_header=b'{"a\x00": 1}')], "NUL")
    expect_error(["file", bad_file("json5", raw_header=b'')], "invalid JSON")


def test_st_entry_not_object():
    path = bad_file("notobj", header={"w": [1, 2]})
    expect_error(["file", path], path, "w: entry is not an object")
    path = bad_file("meta", header={"__metadata__": 5})
    expect_error(["file", path], path, "__metadata__: must be an object")


def test_st_missing_fields():
    for field in ("dtype", "shape", "data_offsets"):
        e = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
        del e[field]
        path = bad_file("missing_" + field, header={"w": e}, data=b"\0" * 4)
        expect_error(["file", path], path, "w: ", 'missing "%s"' % field)


def test_st_unknown_dtype():
    path = bad_file("dtype", header={"w": {"dtype": "Q4_K", "shape": [1], "data_offsets": [0, 1]}}, data=b"\0")
    expect_error(["file", path], path, "w: ", '"Q4_K" is not supported', "BF16")
    path = bad_file("dtype2", header={"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 1]}}, data=b"\0")
    expect_error(["file", path], path, "w: dtype must be a string")


def test_st_bad_shape():
    for tag, shape in (("neg", [4, -1]), ("float", [1.5]), ("str", ["4"])):
        path = bad_file("shape_" + tag, header={"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4]}},
                        data=b"\0" * 64)
        expect_error(["file", path], path, "w: shape", "non-negative integers")
    path = bad_file("shape_dims", header={"w": {"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 4]}},
                    data=b"\0" * 4)
    expect_error(["file", path], path, "9 dimensions")
    path = bad_file("shape_huge", header={"w": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 4]}},
                    data=b"\0" * 4)
    expect_error(["file", path], path, "too large")


def test_st_bad_offsets():
    def hdr(off, shape=(4, 8), dt="BF16"):
        return {"model.layers.0.mlp.up_proj.weight": {"dtype": dt, "shape": list(shape), "data_offsets": off}}
    path = bad_file("off_mismatch", header=hdr([0, 100]), data=b"\0" * 100)
    line = expect_error(["file", path])
    assert line == ("llmcc: %s: model.layers.0.mlp.up_proj.weight: data_offsets [0, 100] do not match "
                    "shape [4, 8] x BF16 (64 bytes)" % path), line
    path = bad_file("off_reversed", header=hdr([64, 0]), data=b"\0" * 64)
    expect_error(["file", path], path, "up_proj.weight", "reversed")
    path = bad_file("off_past", header=hdr([0, 64]), data=b"\0" * 10)
    expect_error(["file", path], path, "up_proj.weight", "past the end")
    path = bad_file("off_neg", header=hdr([-64, 0]), data=b"\0" * 64)
    expect_error(["file", path], path, "up_proj.weight", "non-negative")
    path = bad_file("off_len", header=hdr([0]), data=b"\0" * 64)
    expect_error(["file", path], path, "up_proj.weight", "[begin, end]")


def test_st_overlap():
    h = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
         "z": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}}
    path = bad_file("overlap", header=h, data=b"\0" * 16)
    expect_error(["file", path], path, "overlap", "[0, 16]")


def test_st_duplicate_names():
    raw = (b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},'
           b' "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}')
    path = bad_file("dup", raw_header=raw, data=b"ab")
    expect_error(["file", path], path, "w: ", "twice")


def test_st_dir_problems():
    expect_error(["st", "/nonexistent/dir"], "/nonexistent/dir: not a directory")
    d = fresh("st_none")
    expect_error(["st", d], d, "no weights")
    write_st(os.path.join(d, "a.safetensors"), GOOD[:1])
    write_st(os.path.join(d, "b.safetensors"), GOOD[1:2])
    expect_error(["st", d], d, "2 *.safetensors files", "index")


def test_st_shard_problems():
    # the same tensor in both shards
    d = fresh("st_shard_dup")
    write_shards(d)
    write_st(os.path.join(d, "model-00002-of-00002.safetensors"), GOOD[3:] + GOOD[:1])
    expect_error(["st", d], "model-00002-of-00002.safetensors", GOOD[0][0], "also in", "model-00001")

    d = fresh("st_shard_missing")
    write_shards(d, index=lambda wm: {"weight_map": dict(wm, extra="model-00003-of-00003.safetensors")})
    expect_error(["st", d], "model.safetensors.index.json", "weight_map.extra", "model-00003-of-00003.safetensors",
                 "not found")

    d = fresh("st_shard_wrong")
    write_shards(d, index=lambda wm: {"weight_map": dict(wm, scalar="model-00001-of-00002.safetensors")})
    expect_error(["st", d], "model.safetensors.index.json", "weight_map.scalar",
                 "mapped to", "model-00001-of-00002", "found in", "model-00002-of-00002")

    d = fresh("st_shard_absent")
    write_shards(d, index=lambda wm: {"weight_map": dict(wm, ghost="model-00001-of-00002.safetensors")})
    expect_error(["st", d], "model.safetensors.index.json", "weight_map.ghost", "not in")

    d = fresh("st_shard_nomap")
    write_shards(d, index={"metadata": {}})
    expect_error(["st", d], "model.safetensors.index.json", "weight_map", "missing")

    d = fresh("st_shard_path")
    write_shards(d, index=lambda wm: {"weight_map": dict(wm, scalar="../x.safetensors")})
    expect_error(["st", d], "model.safetensors.index.json", "weight_map.scalar", "not a file name")

    d = fresh("st_shard_badjson")
    write_shards(d)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write('{"weight_map": {')
    expect_error(["st", d], "model.safetensors.index.json", "invalid JSON")


# ---- config.json ----

BASE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
    "bos_token_id": 1, "eos_token_id": 2,
}


def model_dir(name, cfg=None, gen=None, raw=None):
    d = fresh("cfg_" + name)
    if raw is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(raw)
    elif cfg is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
    if gen is not None:
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(gen, f)
    return d


def inspect(d, *extra):
    p = run_dump("inspect", d, *extra)
    assert p.returncode == 0, "rc=%d: %s" % (p.returncode, p.stderr)
    kv = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition(": ")
        if k != "tensor":
            kv[k] = v
    return kv, p.stdout


def cfg_with(**kw):
    c = dict(BASE)
    for k, v in kw.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return c


def cfg_error(name, cfg, *needles, gen=None):
    d = model_dir(name, cfg, gen)
    return expect_error(["inspect", d, "--config-only"], *needles)


def test_cfg_defaults():
    kv, _ = inspect(model_dir("defaults", cfg_with(num_key_value_heads=None, eos_token_id=[2, 3], bos_token_id=None)))
    assert kv["architecture"] == "LlamaForCausalLM" and kv["family"] == "llama"
    assert kv["num_key_value_heads"] == "4" and kv["head_dim"] == "16"
    assert kv["rms_norm_eps"] == "1e-06" and kv["rope_theta"] == "10000"
    assert kv["max_position_embeddings"] == "2048"
    assert kv["rope_type"] == "none"
    assert kv["tie_word_embeddings"] == "false" and kv["attention_bias"] == "false" and kv["mlp_bias"] == "false"
    assert kv["bos_token_id"] == "-1" and kv["eos_token_ids"] == "[2, 3]"
    # no generation_config.json: llama.cpp's sampling defaults
    assert kv["has_generation_config"] == "false" and kv["temperature"] == "0.8" and kv["top_k"] == "40"
    assert kv["top_p"] == "0.95" and kv["min_p"] == "0.05" and kv["repetition_penalty"] == "1"
    assert kv["torch_dtype"] == "(none)"
    assert kv["tensors"] == "none (no .safetensors files)"


def test_cfg_missing_and_invalid():
    d = model_dir("nocfg")
    expect_error(["inspect", d], os.path.join(d, "config.json"), "not found")
    d = model_dir("badjson", raw='{"hidden_size": 4,')
    expect_error(["inspect", d], os.path.join(d, "config.json"), "invalid JSON")
    d = model_dir("notobj", raw='[1]')
    expect_error(["inspect", d], os.path.join(d, "config.json"), "not a JSON object")


def test_cfg_required_keys():
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        cfg_error("req_" + k, cfg_with(**{k: None}), "config.json: %s: missing" % k)
        cfg_error("zero_" + k, cfg_with(**{k: 0}), "config.json: %s: must be positive" % k)
        cfg_error("neg_" + k, cfg_with(**{k: -3}), "config.json: %s: must be positive" % k)
        cfg_error("str_" + k, cfg_with(**{k: "64"}), "config.json: %s: must be an integer" % k)
    cfg_error("frac", cfg_with(hidden_size=64.5), "hidden_size: must be an integer")
    cfg_error("huge", cfg_with(vocab_size=1 << 40), "vocab_size: ", "too large")


def test_cfg_divisibility():
    cfg_error("heads", cfg_with(num_attention_heads=5, num_key_value_heads=None), "num_attention_heads: 5 does not divide hidden_size 64")
    cfg_error("kv", cfg_with(num_key_value_heads=3), "num_key_value_heads: 3 does not divide num_attention_heads 4")
    cfg_error("odd", cfg_with(head_dim=15), "head_dim: must be even")
    kv, _ = inspect(model_dir("hd", cfg_with(num_attention_heads=5, num_key_value_heads=1, head_dim=32)), "--config-only")
    assert kv["head_dim"] == "32"


def test_cfg_architectures():
    line = cfg_error("gemma", cfg_with(architectures=["GemmaForCausalLM"]))
    assert line.endswith('config.json: architectures: "GemmaForCausalLM" is not supported '
                         '(supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)'), line
    kv, _ = inspect(model_dir("mistral", cfg_with(architectures=["MistralForCausalLM"])), "--config-only")
    assert kv["architecture"] == "MistralForCausalLM" and kv["family"] == "mistral" and kv["attention_bias"] == "false"
    kv, _ = inspect(model_dir("qwen3", cfg_with(architectures=["Qwen3ForCausalLM"], head_dim=32)), "--config-only")
    assert kv["family"] == "qwen3" and kv["qk_norm"] == "true" and kv["head_dim"] == "32"
    kv, _ = inspect(model_dir("mt", cfg_with(architectures=None, model_type="qwen2")), "--config-only")
    assert kv["architecture"] == "Qwen2ForCausalLM" and kv["family"] == "qwen"
    assert kv["attention_bias"] == "true" and kv["o_bias"] == "false"
    cfg_error("mt_bad", cfg_with(architectures=None, model_type="gemma"), 'model_type: "gemma" is not supported')
    cfg_error("noarch", cfg_with(architectures=None, model_type=None), "architectures: missing")
    cfg_error("arch_str", cfg_with(architectures="LlamaForCausalLM"), "architectures: must be a non-empty list")
    cfg_error("swa", cfg_with(architectures=["Qwen2ForCausalLM"], use_sliding_window=True), "use_sliding_window", "not supported")
    cfg_error("act", cfg_with(hidden_act="gelu"), 'hidden_act: "gelu" is not supported')


def test_cfg_llama_biases():
    kv, _ = inspect(model_dir("bias", cfg_with(attention_bias=True, mlp_bias=True, tie_word_embeddings=True)), "--config-only")
    assert kv["attention_bias"] == "true" and kv["o_bias"] == "true" and kv["mlp_bias"] == "true"
    assert kv["tie_word_embeddings"] == "true"
    cfg_error("bias_bad", cfg_with(attention_bias="yes"), "attention_bias: must be true or false")


def test_cfg_rope():
    line = cfg_error("yarn", cfg_with(rope_scaling={"rope_type": "yarn", "factor": 4.0}))
    assert line.endswith('config.json: rope_scaling.rope_type: "yarn" is not supported (supported: default, linear, llama3)'), line
    cfg_error("dyn", cfg_with(rope_scaling={"type": "dynamic", "factor": 4.0}), 'rope_scaling.type: "dynamic" is not supported')
    kv, _ = inspect(model_dir("lin", cfg_with(rope_scaling={"type": "linear", "factor": 2.5})), "--config-only")
    assert kv["rope_type"] == "linear" and kv["rope_factor"] == "2.5"
    kv, _ = inspect(model_dir("deflt", cfg_with(rope_scaling={"rope_type": "default"})), "--config-only")
    assert kv["rope_type"] == "none"
    l3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
    kv, _ = inspect(model_dir("l3", cfg_with(rope_scaling=l3, rope_theta=500000.0)), "--config-only")
    assert kv["rope_type"] == "llama3" and kv["rope_factor"] == "8" and kv["rope_low_freq_factor"] == "1"
    assert kv["rope_high_freq_factor"] == "4" and kv["rope_original_max_pos"] == "8192" and kv["rope_theta"] == "500000"
    cfg_error("l3_missing", cfg_with(rope_scaling=dict(l3, low_freq_factor=None)), "rope_scaling.low_freq_factor: missing")
    cfg_error("l3_order", cfg_with(rope_scaling=dict(l3, high_freq_factor=0.5)), "rope_scaling.high_freq_factor: must be greater")
    cfg_error("lin_nofactor", cfg_with(rope_scaling={"rope_type": "linear"}), "rope_scaling.factor: missing")
    cfg_error("rope_notype", cfg_with(rope_scaling={"factor": 2.0}), "rope_scaling.rope_type: missing")
    cfg_error("rope_str", cfg_with(rope_scaling="linear"), "rope_scaling: must be an object")
    cfg_error("theta", cfg_with(rope_theta=-1), "rope_theta: must be > 0")


def test_cfg_token_ids():
    kv, _ = inspect(model_dir("eos_int", cfg_with(eos_token_id=7)), "--config-only")
    assert kv["eos_token_ids"] == "[7]" and kv["bos_token_id"] == "1"
    kv, _ = inspect(model_dir("eos_list", cfg_with(eos_token_id=[5, 6, 5], bos_token_id=[9])), "--config-only")
    assert kv["eos_token_ids"] == "[5, 6]" and kv["bos_token_id"] == "9"
    kv, _ = inspect(model_dir("eos_null", cfg_with(eos_token_id=None)), "--config-only")
    assert kv["eos_token_ids"] == "[]"
    cfg_error("eos_many", cfg_with(eos_token_id=list(range(9))), "eos_token_id: 9 ids")
    cfg_error("eos_range", cfg_with(eos_token_id=100), "eos_token_id: token id 100 is outside the vocabulary")
    cfg_error("bos_str", cfg_with(bos_token_id="1"), "bos_token_id: token ids must be integers")


def test_generation_config():
    gen = {"bos_token_id": 3, "eos_token_id": [4, 2], "do_sample": True, "temperature": 0.7, "top_p": 0.8,
           "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05}
    kv, _ = inspect(model_dir("gen", BASE, gen), "--config-only")
    assert kv["has_generation_config"] == "true" and kv["do_sample"] == "true"
    assert kv["bos_token_id"] == "3" and kv["eos_token_ids"] == "[4, 2]"
    assert (kv["temperature"], kv["top_p"], kv["top_k"], kv["min_p"], kv["repetition_penalty"]) == (
        "0.7", "0.8", "20", "0.05", "1.05")
    # no do_sample: greedy, as HF generate() does; ids not given keep config.json's
    kv, _ = inspect(model_dir("gen_greedy", BASE, {"temperature": 0.6, "max_length": 10}), "--config-only")
    assert kv["temperature"] == "0" and kv["do_sample"] == "false"
    assert kv["bos_token_id"] == "1" and kv["eos_token_ids"] == "[2]"
    cfg_error("gen_topp", BASE, "generation_config.json: top_p: must be <= 1", gen={"top_p": 1.5})
    cfg_error("gen_temp", BASE, "generation_config.json: temperature: must be >= 0", gen={"temperature": -1})
    d = model_dir("gen_bad", BASE)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        f.write("{")
    expect_error(["inspect", d], "generation_config.json", "invalid JSON")


def test_real_configs():
    src = testlib.shared("hf-configs")
    want = {
        "Qwen2.5-7B.config.json": dict(architecture="Qwen2ForCausalLM", hidden_size="3584", num_hidden_layers="28",
                                       num_attention_heads="28", num_key_value_heads="4", intermediate_size="18944",
                                       vocab_size="152064", max_position_embeddings="131072", head_dim="128",
                                       eos_token_ids="[151643]", attention_bias="true", o_bias="false",
                                       rope_theta="1000000", tie_word_embeddings="false"),
        "Qwen2.5-0.5B-Instruct.resaved.config.json": dict(hidden_size="896", head_dim="64", eos_token_ids="[151645]",
                                                          tie_word_embeddings="true", torch_dtype="float32"),
        "Llama-3.1-8B.config.json": dict(family="llama", rope_type="llama3", rope_factor="8", rope_original_max_pos="8192",
                                         num_key_value_heads="8", head_dim="128", rms_norm_eps="1e-05",
                                         bos_token_id="128000", eos_token_ids="[128001]", attention_bias="false"),
        "Llama-3.2-3B.config.json": dict(rope_factor="32", head_dim="128", tie_word_embeddings="true"),
        "TinyLlama-1.1B-Chat-v1.0.resaved.config.json": dict(hidden_size="2048", num_hidden_layers="22",
                                                             num_key_value_heads="4", head_dim="64", vocab_size="32000",
                                                             torch_dtype="float32", rope_type="none"),
    }
    n = 0
    for fn in sorted(os.listdir(src)):
        if not fn.endswith(".config.json"):
            continue
        base = fn[:-len(".config.json")]
        d = fresh("real_" + base)
        shutil.copy(os.path.join(src, fn), os.path.join(d, "config.json"))
        gen = os.path.join(src, base.replace(".resaved", "") + ".generation_config.json")
        if os.path.exists(gen):
            shutil.copy(gen, os.path.join(d, "generation_config.json"))
        kv, _ = inspect(d, "--config-only")
        for k, v in want.get(fn, {}).items():
            assert kv[k] == v, (fn, k, kv[k], v)
        if base.startswith("TinyLlama"):
            assert kv["has_generation_config"] == "true" and kv["temperature"] == "0"
        n += 1
    assert n >= 5, n


# ---- model resolution and inspect with weights ----

def test_resolve():
    root = fresh("resolve_root")
    os.makedirs(os.path.join(root, "models", "tiny"))
    with open(os.path.join(root, "models", "tiny", "config.json"), "w") as f:
        json.dump(BASE, f)
    p = run_dump("resolve", "tiny", root)
    assert p.returncode == 0 and p.stdout.strip() == os.path.join(root, "models", "tiny"), p
    p = run_dump("resolve", os.path.join(root, "models", "tiny"), "/nonexistent")
    assert p.returncode == 0 and p.stdout.strip() == os.path.join(root, "models", "tiny"), p

    hf = fresh("resolve_hf")
    repo = os.path.join(hf, "hub", "models--Org--Tiny-Model")
    for rev in ("aaaa", "bbbb"):
        os.makedirs(os.path.join(repo, "snapshots", rev))
        with open(os.path.join(repo, "snapshots", rev, "config.json"), "w") as f:
            json.dump(BASE, f)
    os.utime(os.path.join(repo, "snapshots", "aaaa"), (1, 1))   # bbbb is the newest
    env = {"HF_HOME": hf, "HF_HUB_CACHE": ""}
    p = run_dump("resolve", "Org/Tiny-Model", root, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("snapshots/bbbb"), p
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write("aaaa\n")
    p = run_dump("resolve", "Org/Tiny-Model", root, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("snapshots/aaaa"), p

    line = expect_error(["resolve", "Org/Missing", root], env=env)
    assert line == ("llmcc: Org/Missing: not found (looked for a directory, models/Org/Missing, and the Hugging Face "
                    "cache at %s)" % os.path.join(hf, "hub")), line
    expect_error(["resolve", "nothing-here", root], "nothing-here: not found",
                 os.path.join(hf, ".cache/huggingface/hub"), env={"HF_HOME": "", "HF_HUB_CACHE": "", "HOME": hf})


def test_inspect_with_weights():
    d = model_dir("inspect_w", BASE)
    write_st(os.path.join(d, "model.safetensors"), GOOD)
    kv, out = inspect(d)
    assert kv["tensors"] == str(len(GOOD)) and kv["files"] == "1"
    assert kv["tensor_bytes"] == str(sum(len(t[3]) for t in GOOD))
    assert "tensor: model.embed_tokens.weight F32 [2, 3] model.safetensors" in out
    assert "tensor: scalar F32 [] model.safetensors" in out
    kv, out = inspect(d, "--config-only")
    assert "tensors" not in kv and "tensor:" not in out
    expect_error(["inspect"], "usage")
    expect_error(["inspect", d, "--bogus"], "--bogus", "unknown option")


def test_json_strictness():
    """jsmn lets these through; compiler/json.c refuses them (found by tests/fuzz/, or next to what was)."""
    good = json.dumps(BASE)
    cases = [
        (good.replace(', "intermediate_size"', ' "intermediate_size"'), "invalid JSON (syntax error at byte"),  # missing comma
        (good.replace('"vocab_size": 100', '"vocab_size": [1: 2]'), "invalid JSON (syntax error at byte"),     # colon in an array
        (good.replace('"vocab_size": 100', '"vocab_size": 1.2.3'), "invalid JSON (syntax error at byte"),
        (good.replace('"vocab_size": 100', '"vocab_size": nul'), "invalid JSON (syntax error at byte"),
        (good.replace('"vocab_size": 100', '"vocab_size": 01'), "invalid JSON (syntax error at byte"),
        (good.replace('"vocab_size": 100', '"vocab_size": -'), "invalid JSON (syntax error at byte"),
        (good + "\0", "invalid JSON (NUL byte at offset %d)" % len(good)),
        (good[:-1], "invalid JSON (unexpected end of input)"),
        ('{"a": "unterminated', "invalid JSON (unexpected end of input)"),
        ('{"a": ' + "[" * 128 + "]" * 128 + "}", "JSON nested more than 128 levels deep (at byte 133)"),
    ]
    for i, (raw, needle) in enumerate(cases):
        d = model_dir("json_strict_%d" % i, raw=raw)
        expect_error(["inspect", d, "--config-only"], os.path.join(d, "config.json") + ": " + needle)
    # 127 nested arrays plus the top-level object: parsed; the value is then the wrong type
    d = model_dir("json_deep_ok", raw=good[:-1] + ', "task_specific_params": ' + "[" * 127 + "]" * 127 + "}")
    inspect(d, "--config-only")
    # messages show strings with their quotes: "64" is not 64
    for i, v in enumerate(('"64"', "[64]", "true")):
        d = model_dir("json_type_%d" % i, raw=good.replace('"hidden_size": 64', '"hidden_size": ' + v))
        expect_error(["inspect", d, "--config-only"], "hidden_size: must be an integer, got %s" % v)
