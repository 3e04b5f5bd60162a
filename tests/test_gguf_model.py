"""test_gguf_model: models built from GGUF files (compiler/gguf_model.c) against the same checkpoints built
from their Hugging Face directories.

The GGUF files are made from the project's fixtures (scripts/make_fixture.py: llama with GQA and llama3 RoPE,
llama with linear RoPE, head_dim 32 and every bias, Qwen2 with q/k/v biases and tied embeddings, Qwen3 with q/k
norms) by llama.cpp's own converter, convert_hf_to_gguf.py (../shared/tools/peer-llamacpp --convert; run by
tests/llamacpp_convert.py, which only names the fixtures' toy pre-tokenizer), with --outtype f32, f16 and bf16.
Where the converter cannot run (no peer-llamacpp, no torch) the files are written by write_gguf below with
gguf-py's GGUFWriter, following the converter's code; test_gguf_py_writer_matches_llama_cpp checks the two agree
where both run. Both builds use --target cpu and --prompt-ids / --ids (the GGUF tokenizer is a later increment):
f32 files give the same greedy ids and logits as the directory (bit for bit where the RoPE frequencies are
computed the same way; within 1e-5 with llama3's frequencies, which GGUF stores as rope_freqs.weight factors),
f16 / bf16 files made from f16 / bf16 checkpoints likewise. llama's attn_q / attn_k rows, which the converter
permutes for ggml's RoPE, come back in Hugging Face's order: `llmcc run --layer --dump` writes the weights it
read, compared with the checkpoint's, and a llama file written without the permutation gives other ids.
Bad files (GGUFWriter rewrites of a good one) are refused in one line naming the file and the key or tensor.
Skips when gguf-py is not installed (pip install gguf)."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np

import testlib
from testlib import LLMCC, ROOT, Skip, build_exe, model_fixture, run, tmpdir

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_fixture  # noqa: E402
from ref_forward import read_safetensors  # noqa: E402

try:
    import gguf
    from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as QT, GGUFValueType as VT
except ImportError:
    gguf = None

DIR = os.path.join(testlib.TMP, "gguf_model")
PEER = os.path.normpath(os.path.join(ROOT, "..", "shared", "tools", "peer-llamacpp"))
PROMPT = [1, 4, 7, 10, 13]
STEPS = 16
_converter = []   # [path or None], found once


def need_gguf():
    if gguf is None:
        raise Skip("gguf-py is not installed (pip install gguf)")


def converter():
    """convert_hf_to_gguf.py's path when it can run here, else None."""
    if not _converter:
        path = None
        if os.access(PEER, os.X_OK):
            p = run([PEER, "--convert"], check=False)
            cand = p.stdout.strip()
            if p.returncode == 0 and os.path.exists(cand):
                probe = run([sys.executable, "-c", "import torch, sentencepiece"], check=False)
                path = cand if probe.returncode == 0 else None
        _converter.append(path)
    return _converter[0]


def fixture(kind, dtype="f32", seed=3):
    return model_fixture(kind, dtype, seed=seed)


# ---- gguf-py's writer, following convert_hf_to_gguf.py (base.py's TextModel.set_gguf_parameters, llama.py's
# LlamaModel: set_gguf_parameters, permute, generate_extra_tensors; qwen.py's Qwen2Model / Qwen3Model) ----

GGUF_ARCH = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
LAYER_TENSORS = [("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                 ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                 ("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_norm", "attn_k_norm"),
                 ("post_attention_layernorm", "ffn_norm"), ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                 ("mlp.down_proj", "ffn_down")]


def gguf_name(hf):
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")
    layer, mod, suffix = parts[2], ".".join(parts[3:-1]), parts[-1]
    return "blk.%s.%s.%s" % (layer, dict(LAYER_TENSORS)[mod], suffix)


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute (numpy): each head's halves interleaved for ggml's RoPE."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_params(cfg):
    p = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = p.get("rope_theta", cfg.get("rope_theta", 10000.0))
    return theta, p.get("rope_type", p.get("type")), p


def write_gguf(d, out, outtype, permute_qk=True, spm=None):
    """d's checkpoint as a GGUF file the way the converter writes one; permute_qk=False leaves llama's q/k rows
    in Hugging Face's order (a wrong file, for the test that the permutation matters). spm: a SentencePiece
    tokenizer's (pieces, scores, types) to write as a "llama" tokenizer (else placeholder tokens, none)."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    arch = GGUF_ARCH[cfg["architectures"][0]]
    tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    w = GGUFWriter(out, arch)
    w.add_type("model")
    w.add_name(os.path.basename(d))
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    theta, rtype, rp = rope_params(cfg)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    if rtype == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if cfg.get("head_dim"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type({"f32": 0, "f16": 1, "bf16": 32}[outtype])
    if arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim)
    w.add_quantization_version(2)
    if spm:
        w.add_tokenizer_model("llama")
        w.add_token_list(spm[0])
        w.add_token_scores(spm[1])
        w.add_token_types(spm[2])
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
    else:
        w.add_token_list(["<t%d>" % i for i in range(cfg["vocab_size"])])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def add(name, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if a.ndim == 1 or outtype == "f32":   # the converter keeps 1-d tensors (norms, biases) f32
            w.add_tensor(name, a)
        elif outtype == "f16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, make_fixture.f32_to_bf16_bits(a), raw_shape=a.shape, raw_dtype=QT.BF16)

    if rtype == "llama3":
        freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
        factor, low, high, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], \
            rp["original_max_position_embeddings"]
        factors = []
        for f in freqs:
            wl = 2 * np.pi / f
            if wl < old / high:
                factors.append(1)
            elif wl > old / low:
                factors.append(factor)
            else:
                s = (old / wl - low) / (high - low)
                factors.append(1 / ((1 - s) / factor + s))
        w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    for hf, a in tensors.items():
        if arch == "llama" and permute_qk and (".q_proj." in hf or ".k_proj." in hf):
            a = permute(a, n_head if ".q_proj." in hf else n_kv)
        add(gguf_name(hf), a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_of(kind, outtype="f32", dtype="f32", seed=3, writer=None):
    """The fixture as a GGUF file: by llama.cpp's converter where it runs (writer "llama.cpp"), else (or with
    writer "gguf-py") by write_gguf."""
    need_gguf()
    d = fixture(kind, dtype, seed)
    conv = converter()
    writer = writer or ("llama.cpp" if conv else "gguf-py")
    out = os.path.join(DIR, "%s-%s-%s.gguf" % (os.path.basename(d), outtype, writer))

    def make(path):
        if writer == "llama.cpp":
            run([sys.executable, os.path.join(ROOT, "tests", "llamacpp_convert.py"), conv, d, "--outtype", outtype,
                 "--outfile", path], timeout=900)
        else:
            write_gguf(d, path, outtype)
    # made once for the fixture, the converter (or this file's writer) and the type
    return testlib.once(out, testlib.digest(("file", d), ("file", conv or __file__), outtype, writer), make)


def build(model, tag, args=()):
    return build_exe(model, "cpu", ["--name", "m"] + list(args), tag="gguf_model-" + tag)


def generate(out):
    lp = os.path.join(out, "logits.f32")
    p = run([os.path.join(out, "m"), "--prompt-ids", ",".join(map(str, PROMPT)), "-n", str(STEPS), "--temperature",
             "0", "--repeat-penalty", "1", "--ids", "--ignore-eos", "--logits", lp])
    return [int(x) for x in p.stdout.split()], np.fromfile(lp, dtype="<f4")


def kernels(out):
    """model.c without its header comment (it names the source, a path that may wrap it over more lines) and
    model_info (sampling defaults and stop ids come from generation_config.json in a directory, from the
    metadata in a GGUF file)."""
    src = open(os.path.join(out, "model.c")).read()
    src = src[src.index("*/") + 2:]
    a = src.index("const ModelInfo model_info = {")
    return src[:a] + src[src.index("};", a):]


def compare(kind, outtype="f32", dtype="f32", exact=True):
    """Builds the fixture's directory and its GGUF file: the same greedy ids; exact: the same kernels and logits
    bit for bit, else logits within 1e-5 of the largest."""
    g = gguf_of(kind, outtype, dtype)
    ref, got = build(fixture(kind, dtype), "%s-%s" % (kind, dtype)), build(g, os.path.basename(g)[:-5])
    (ids_r, log_r), (ids_g, log_g) = generate(ref), generate(got)
    assert len(ids_r) == STEPS and ids_g == ids_r, "%s: greedy ids differ\ndirectory %s\ngguf      %s" % (
        g, ids_r, ids_g)
    diff = float(np.max(np.abs(log_g - log_r)))
    if exact:
        assert diff == 0, "%s: logits differ by %g" % (g, diff)
        assert kernels(got) == kernels(ref), "%s: the kernels differ from the directory's" % g
    else:
        assert diff <= 1e-5 * float(np.max(np.abs(log_r))), "%s: logits differ by %g" % (g, diff)


def test_sentencepiece_file_tells_the_directories_story():
    """aidreams260K (a real pretrained tiny Llama, ../shared/assets) with its SentencePiece tokenizer (llama2.c's
    tok512.bin) as one GGUF file with a "llama" tokenizer (pieces and scores, no merges: compiler/tokenizer_gguf.c
    builds them): a text prompt gives the directory's ids and text (scripts/convert_llama2c.py's tokenizer.json,
    which `tokenizers` checks in test_tokenizer.py)."""
    need_gguf()
    import test_gguf_tokenizer
    ref = testlib.shared("aidreams260K")
    d = os.path.join(DIR, "aidreams260K")
    run([sys.executable, os.path.join(ROOT, "scripts", "convert_llama2c.py"), os.path.join(ref, "aidreams260K.bin"),
         os.path.join(ref, "tok512.bin"), d])
    g = d + "-spm.gguf"
    write_gguf(d, g, "f32", spm=test_gguf_tokenizer.spm_vocab(os.path.join(ref, "tok512.bin")))
    outs = []
    for model, tag in ((d, "aidreams260K"), (g, "aidreams260K-spm")):
        exe = os.path.join(build(model, tag), "m")
        args = ["--prompt", "Once upon a time, Lily saw a", "-n", "48", "--temperature", "0", "--ignore-eos"]
        outs.append((run([exe] + args + ["--ids"]).stdout, run([exe] + args).stdout))
    print("    %s" % outs[1][1][:80])
    assert outs[1] == outs[0] and len(outs[0][0].split()) == 48, outs
    assert outs[0][1].startswith("Once upon a time, Lily saw a"), outs[0][1]
    text = "Once upon a time, Lily saw a \u2603 (snowman) in the  garden.\n"
    tok = [run([LLMCC, "tokenize", m, text]).stdout for m in (d, g)]
    assert tok[1] == tok[0] and tok[0].startswith("1 "), tok


def test_f32_files_build_the_directories_model():
    # bit for bit: the same kernels over the same f32 weights (q/k rows of llama-linear un-permuted)
    for kind in ("llama-linear", "qwen2-tied", "qwen3"):
        compare(kind)


def test_f32_llama3_rope_from_rope_freqs():
    # GGUF keeps llama3's scaling as rope_freqs.weight, factors the frequencies are divided by (llama.cpp's way):
    # the same frequencies as transformers' within an f32 rounding
    compare("llama-gqa", exact=False)


def test_dtype_converts_permuted_rows():
    # --dtype converts while it puts llama's rows back in order (pack.c's write_rows): the directory converted
    # alike gives the same program and logits
    g, d = gguf_of("llama-linear"), fixture("llama-linear")
    outs = []
    for model, tag in ((g, "llama-linear-gguf-bf16"), (d, "llama-linear-dir-bf16")):
        out = os.path.join(DIR, "out-" + tag)
        run([LLMCC, "build", model, "-o", out, "--target", "cpu", "--name", "m", "--dtype", "bf16"])
        run(["make", "-C", out, "-j2"])
        outs.append(out)
    (ids_g, log_g), (ids_d, log_d) = generate(outs[0]), generate(outs[1])
    assert ids_g == ids_d and np.array_equal(log_g, log_d), (ids_g, ids_d)
    assert kernels(outs[0]) == kernels(outs[1])


def test_f16_and_bf16_files():
    # from f16 / bf16 checkpoints the converter keeps every matrix's bits and widens the 1-d tensors (norms,
    # biases) to f32 exactly: the same values, but the kernels load f32 where the directory's load f16 / bf16,
    # which the C compiler may schedule into other roundings (a few ulps of the logits)
    compare("llama-linear", "f16", "f16", exact=False)
    compare("qwen3", "bf16", "bf16", exact=False)


def test_compile_and_inspect():
    g = gguf_of("qwen3")
    d = fixture("qwen3")
    for level in ("graph", "kernel"):
        a = run([LLMCC, "compile", g, "--ir", level]).stdout
        b = run([LLMCC, "compile", d, "--ir", level]).stdout
        assert len(a) > 1000 and a == b, level
    a = run([LLMCC, "compile", g, "--layer", "1", "--ir", "tile"]).stdout
    assert a == run([LLMCC, "compile", d, "--layer", "1", "--ir", "tile"]).stdout
    # the config read from the metadata, against config.json itself
    for kind in ("llama-linear", "qwen2-tied", "qwen3"):
        cfg = json.load(open(os.path.join(fixture(kind), "config.json")))
        p = run([LLMCC, "inspect", gguf_of(kind), "--config-only"])
        kv = dict(line.split(": ", 1) for line in p.stdout.splitlines())
        heads = cfg["num_attention_heads"]
        want = {"hidden_size": cfg["hidden_size"], "intermediate_size": cfg["intermediate_size"],
                "num_hidden_layers": cfg["num_hidden_layers"], "num_attention_heads": heads,
                "num_key_value_heads": cfg["num_key_value_heads"],
                "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads, "vocab_size": cfg["vocab_size"],
                "max_position_embeddings": cfg["max_position_embeddings"],
                "rope_theta": "%.9g" % rope_params(cfg)[0],
                "tie_word_embeddings": str(cfg.get("tie_word_embeddings", False)).lower(),
                "qk_norm": str(kind == "qwen3").lower()}
        for k, v in want.items():
            assert kv[k] == str(v), (kind, k, kv[k], v)
        assert np.float32(kv["rms_norm_eps"]) == np.float32(cfg["rms_norm_eps"]), kind   # GGUF stores it f32
        if kind == "llama-linear":
            assert kv["rope_type"] == "linear" and kv["rope_factor"] == "2", kv
            assert kv["attention_bias"] == kv["o_bias"] == kv["mlp_bias"] == "true", kv
        if kind == "qwen2-tied":
            assert kv["attention_bias"] == "true" and kv["o_bias"] == kv["mlp_bias"] == "false", kv
    # without a flag inspect prints the file itself (tests/test_gguf.py checks that text)
    p = run([LLMCC, "inspect", gguf_of("qwen3")])
    assert p.stdout.startswith("gguf: ") and "tensor: blk.0.attn_q_norm.weight F32 [32]" in p.stdout, p.stdout[:300]
    p = run([LLMCC, "inspect", gguf_of("qwen3"), "--config-keys"])
    assert "config_key: qwen3.attention.key_length read" in p.stdout
    assert "config_key: general.name inert" in p.stdout


def test_run_layer_reads_llama_rows_in_hugging_face_order():
    # --dump writes the weights `llmcc run` read (and the kernels ran on): q/k (and their biases) as the
    # checkpoint has them, although the file stores them permuted
    for kind in ("llama-linear", "llama-gqa"):
        d = fixture(kind)
        dump = os.path.join(DIR, "dump-" + kind)
        shutil.rmtree(dump, ignore_errors=True)
        p = run([LLMCC, "run", gguf_of(kind), "--layer", "1", "--tokens", "4", "--target", "cpu", "--dump", dump])
        assert "matches the reference" in p.stdout, p.stdout
        st = read_safetensors(os.path.join(d, "model.safetensors"))
        names = [n for n in st if n.startswith("model.layers.1.")]
        assert any("q_proj.bias" in n for n in names) == (kind == "llama-linear")
        for n in names:
            got = np.load(os.path.join(dump, n + ".npy"))
            assert np.array_equal(got, st[n]), n
        # the file's rows are not in that order: the check above is not trivially true
        r = GGUFReader(gguf_of(kind))
        q = [t for t in r.tensors if t.name == "blk.1.attn_q.weight"][0]
        assert not np.array_equal(np.array(q.data), st["model.layers.1.self_attn.q_proj.weight"])


def test_unpermuted_llama_file_gives_other_ids():
    # the same checkpoint written without the converter's permutation: llmcc un-permutes rows that were never
    # permuted, so the model differs (the comparisons above would see a missing or wrong un-permutation)
    need_gguf()
    out = os.path.join(DIR, "llama-linear-unpermuted.gguf")
    write_gguf(fixture("llama-linear"), out, "f32", permute_qk=False)
    ids_bad, _ = generate(build(out, "llama-linear-unpermuted"))
    ids_ref, _ = generate(build(fixture("llama-linear"), "llama-linear-f32"))
    assert ids_bad != ids_ref, ids_ref


def test_gguf_py_writer_matches_llama_cpp():
    # the fallback writer writes what llama.cpp's converter writes, where both run
    if not converter():
        raise Skip("llama.cpp's convert_hf_to_gguf.py cannot run here (../shared/tools/peer-llamacpp, torch)")
    for kind, outtype, dtype in (("llama-gqa", "f32", "f32"), ("llama-linear", "f16", "f16"),
                                 ("qwen2-tied", "bf16", "f32"), ("qwen3", "f32", "f32")):
        a = GGUFReader(gguf_of(kind, outtype, dtype, writer="llama.cpp"))
        b = GGUFReader(gguf_of(kind, outtype, dtype, writer="gguf-py"))
        ta, tb = ({t.name: t for t in r.tensors} for r in (a, b))
        assert sorted(ta) == sorted(tb), (kind, sorted(set(ta) ^ set(tb)))
        for n in ta:
            assert ta[n].tensor_type == tb[n].tensor_type and list(ta[n].shape) == list(tb[n].shape), (kind, n)
            assert np.array_equal(np.array(ta[n].data), np.array(tb[n].data)), (kind, n)
        fa, fb = a.fields, b.fields
        for key in fa:
            # the header's counts, the tokenizer (the fixtures' toy one), the converter's descriptions
            if key.startswith(("GGUF.", "tokenizer.")) or (key.startswith("general.") and key not in (
                    "general.architecture", "general.type", "general.file_type", "general.quantization_version")):
                continue
            assert key in fb and fa[key].contents() == fb[key].contents(), (kind, key)


def llama_quantize():
    """llama.cpp's llama-quantize beside the converter (its build/bin), or None"""
    conv = converter()
    tool = conv and os.path.join(os.path.dirname(conv), "build", "bin", "llama-quantize")
    return tool if tool and os.access(tool, os.X_OK) else None


def quantized_of(kind, ftype):
    """the fixture's f32 GGUF (the converter's) quantized by llama-quantize to ftype (Q4_K_M, ...)"""
    tool = llama_quantize()
    if not tool:
        raise Skip("llama.cpp's convert_hf_to_gguf.py or llama-quantize cannot run here")
    src = gguf_of(kind, writer="llama.cpp")
    out = "%s-%s.gguf" % (src[:-5], ftype)
    if not os.path.exists(out):
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(tool))
        run([tool, src, out + ".tmp", ftype], env=env)
        os.replace(out + ".tmp", out)
    return out


def dequantized_copy(path):
    """path with every block-type tensor dequantized to F32 by gguf-py (the reference: the same model as f32)"""
    r = GGUFReader(path)
    tensors = [(t.name, gguf.quants.dequantize(np.array(t.data), t.tensor_type), None) for t in r.tensors
               if t.tensor_type not in (QT.F32, QT.F16, QT.BF16)]
    return rewrite(path, path[:-5] + "-dequantized.gguf", tensors=tensors)


def quantized_file_against_its_dequantization(kind, ftype, want, layers, down_dims, more_bits_layer):
    """kind's GGUF file quantized by llama-quantize to ftype, whose 2-D tensors have the block types want, its
    ffn_down both (by layer), against the same file with every tensor dequantized by gguf-py: the same greedy ids
    and logits within f32 summation (the prompt's cpu_gemm packs the same f32 weights; the decode steps' dot
    products sum per block or sub-block, then scale); `llmcc run --layer more_bits_layer` (a layer whose attn_v
    and ffn_down have the higher type) against the interpreter on quant.c's dequantization"""
    q = quantized_of(kind, ftype)
    types = {t.name: t.tensor_type.name for t in GGUFReader(q).tensors if len(t.shape) == 2}
    assert set(types.values()) == want, (ftype, types)
    downs = {types["blk.%d.ffn_down.weight" % i] for i in range(layers)}
    assert downs == want, (ftype, downs)   # one field, two block types by layer
    got = build(q, "%s-%s" % (kind, ftype), ("--knob", "cpu_qdot_q8=0"))   # f32 activations: exact
    ref = build(dequantized_copy(q), "%s-%s-dequantized" % (kind, ftype))
    src = open(os.path.join(got, "model.c")).read()
    # the first layers have the lower type (llama.cpp's use_more_bits: the last half of the layers, and some more)
    assert "const uint8_t *mlp_down_proj_weight; /* %s/%s[%s] */" % (
        tuple(sorted(t.lower() for t in want)) + (down_dims,)) in src, ftype
    (ids_q, log_q), (ids_r, log_r) = generate(got), generate(ref)
    assert len(ids_r) == STEPS and ids_q == ids_r, "%s: greedy ids differ\n%s\n%s" % (ftype, ids_q, ids_r)
    diff = float(np.max(np.abs(log_q - log_r)))
    assert 0 < diff <= 1e-5 * float(np.max(np.abs(log_r))), "%s: logits differ by %g" % (ftype, diff)
    p = run([LLMCC, "run", q, "--layer", str(more_bits_layer), "--tokens", "4", "--target", "cpu"])
    assert "matches the reference" in p.stdout, p.stdout


def test_k_quant_files_against_their_dequantization():
    # llama.cpp's Q4_K_M (Q4_K, with Q6_K for output and for attn_v / ffn_down of some layers: the mixed file that
    # LayerWeights must hold) and Q5_K_M of the llama-k fixture, whose rows are whole super-blocks (llama-quantize
    # falls back to other types for the rest); layer 2 has Q6_K's attn_v and ffn_down. The quantized builds take f32
    # activations (knob cpu_qdot_q8=0): the 8-bit ones round differently by design (test_quant.py checks them)
    for ftype, want in (("Q4_K_M", {"Q4_K", "Q6_K"}), ("Q5_K_M", {"Q5_K", "Q6_K"})):
        quantized_file_against_its_dequantization("llama-k", ftype, want, 4, "256, 768", 2)
    # --dtype f32 dequantizes the blocks while packing (pack.c): the program and logits of gguf-py's dequantization
    out = os.path.join(DIR, "out-llama-k-Q4_K_M-as-f32")
    run([LLMCC, "build", quantized_of("llama-k", "Q4_K_M"), "-o", out, "--target", "cpu", "--name", "m", "--dtype",
         "f32"])
    run(["make", "-C", out, "-j2"])
    ref = build(dequantized_copy(quantized_of("llama-k", "Q4_K_M")), "llama-k-Q4_K_M-dequantized")
    (ids_c, log_c), (ids_r, log_r) = generate(out), generate(ref)
    assert ids_c == ids_r and np.array_equal(log_c, log_r) and kernels(out) == kernels(ref)


def test_q5_files_against_their_dequantization():
    # Qwen2.5-0.5B's case: rows that are not whole super-blocks of 256 (hidden 64 here, 896 there), where
    # llama-quantize's Q4_K_M falls back from Q4_K to Q5_0 and from Q6_K to Q8_0 (Q5_K_M: Q5_K to Q5_1), the tied
    # embedding Q8_0; layer 1 of 2 has Q8_0's attn_v and ffn_down
    for ftype, want in (("Q4_K_M", {"Q5_0", "Q8_0"}), ("Q5_K_M", {"Q5_1", "Q8_0"})):
        quantized_file_against_its_dequantization("qwen2-tied", ftype, want, 2, "64, 128", 1)


# ---- bad files: GGUFWriter rewrites of a good one ----

def rewrite(src, dst, arch=None, drop_keys=(), add_keys=(), drop_tensors=(), tensors=()):
    """src with keys dropped, keys added ((key, value, VT)), tensors dropped, tensors replaced or added
    ((name, f32 array in numpy order, QT or None))."""
    r = GGUFReader(src)
    w = GGUFWriter(dst, arch or r.fields["general.architecture"].contents())
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys:
            continue
        sub = f.types[-1] if f.types[0] == VT.ARRAY else None
        w.add_key_value(key, f.contents(), f.types[0], sub_type=sub)
    for key, value, vt in add_keys:
        w.add_key_value(key, value, vt)
    new = {n: (a, qt) for n, a, qt in tensors}
    for t in r.tensors:
        if t.name in drop_tensors or t.name in new:
            continue
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed([int(x) for x in t.shape])),
                     raw_dtype=t.tensor_type)
    for n, (a, qt) in new.items():
        if qt is None:
            w.add_tensor(n, np.ascontiguousarray(a, dtype=np.float32))
        else:
            # as bytes, rows of whole blocks: gguf-py turns the byte shape back into elements
            b = np.ascontiguousarray(gguf.quants.quantize(a, qt)).view(np.uint8).reshape(*a.shape[:-1], -1)
            w.add_tensor(n, b, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def expect_refused(path, key, message, cmd="build"):
    out = os.path.join(DIR, "refused")
    shutil.rmtree(out, ignore_errors=True)
    args = [LLMCC, "build", path, "-o", out, "--target", "cpu"] if cmd == "build" else \
        [LLMCC, "compile", path, "--ir", "graph"]
    p = run(args, check=False)
    want = "llmcc: %s: %s: %s" % (path, key, message)
    assert p.returncode == 1 and p.stderr == want + "\n", "%s\nwant %s\ngot  %s" % (path, want, p.stderr)
    assert not os.path.exists(out)


def test_bad_files_refused_in_one_line():
    good = gguf_of("llama-gqa")
    st = read_safetensors(os.path.join(fixture("llama-gqa"), "model.safetensors"))
    bad = tmpdir(os.path.join("gguf_model", "bad"))

    def case(name, **kw):
        return rewrite(good, os.path.join(bad, name + ".gguf"), **kw)

    expect_refused(case("arch", arch="gemma"), "general.architecture",
                   '"gemma" is not supported (supported: llama, qwen2, qwen3)')
    expect_refused(case("missing", drop_tensors=("blk.1.ffn_down.weight",)), "blk.1.ffn_down.weight",
                   "tensor missing (expected ne [172, 64])")
    gate = st["model.layers.0.mlp.gate_proj.weight"]
    expect_refused(case("shape", tensors=[("blk.0.ffn_gate.weight", gate.T, None)]), "blk.0.ffn_gate.weight",
                   "ne [172, 64], expected [64, 172]")
    expect_refused(case("key", add_keys=[("llama.attention.sliding_window", 64, VT.UINT32)]),
                   "llama.attention.sliding_window", "unknown to llmcc for GGUF architecture llama, which cannot "
                   "tell whether it changes the model; if it does not, build with --ignore-config-key "
                   "llama.attention.sliding_window")
    q = st["model.layers.0.self_attn.q_proj.weight"]
    expect_refused(case("mxfp4", tensors=[("blk.0.attn_q.weight", q, QT.MXFP4)]), "blk.0.attn_q.weight",
                   "type MXFP4 is not supported yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
                   "Q5_K, Q6_K)")
    expect_refused(case("yarn", add_keys=[("llama.rope.scaling.type", "yarn", VT.STRING),
                                          ("llama.rope.scaling.factor", 4.0, VT.FLOAT32)]),
                   "llama.rope.scaling.type", '"yarn" is not supported (supported: none, linear)')
    expect_refused(case("stray", tensors=[("blk.0.attn_qkv.weight", np.zeros((128, 64), np.float32), None)]),
                   "blk.0.attn_qkv.weight", "not a tensor llmcc knows for GGUF architecture llama (token_embd, "
                   "output_norm, output, blk.N.attn_* and blk.N.ffn_* of docs/gguf.md)")
    expect_refused(case("unused", tensors=[("blk.0.attn_q_norm.weight", np.ones(16, np.float32), None)]),
                   "blk.0.attn_q_norm.weight", "tensor not used by the llama model the metadata describes (llmcc "
                   "refuses what it would leave out, as llama.cpp does)", cmd="compile")
    expect_refused(case("layer2", tensors=[("blk.2.attn_norm.weight", np.ones(64, np.float32), None)]),
                   "blk.2.attn_norm.weight", "tensor not used by the llama model the metadata describes (llmcc "
                   "refuses what it would leave out, as llama.cpp does)")
    expect_refused(case("nokey", drop_keys=("llama.block_count",)), "llama.block_count", "missing (required)")
    expect_refused(case("rot", drop_keys=("llama.rope.dimension_count",),
                        add_keys=[("llama.rope.dimension_count", 8, VT.UINT32)]), "llama.rope.dimension_count",
                   "8 is not the head size 16: partial rotary embeddings are not supported")
    expect_refused(case("split", add_keys=[("split.count", 2, VT.UINT16)]), "split.count",
                   "a model split into 2 files is not supported yet (llama-gguf-split --merge makes one file)")
    expect_refused(case("vocab", drop_keys=("llama.vocab_size",), add_keys=[("llama.vocab_size", 301, VT.UINT32)]),
                   "llama.vocab_size", "301 differs from token_embd.weight's 300 rows")
    def replaced(key, value, vt):
        return dict(drop_keys=(key,), add_keys=[(key, value, vt)])

    # sizes are checked before anything is sized from them: a 4-byte edit costs no memory
    expect_refused(case("blocks", **replaced("llama.block_count", 10 ** 9, VT.UINT32)), "llama.block_count",
                   "1000000000 is more than llmcc takes (1024)")
    expect_refused(case("blocks3", **replaced("llama.block_count", 3, VT.UINT32)), "llama.block_count",
                   "3, but the file's tensors hold 2 layers: blk.2.* is missing")
    expect_refused(case("heads", **replaced("llama.attention.head_count", 5000, VT.UINT32)),
                   "llama.attention.head_count", "5000 is more than llmcc takes (1024)")
    expect_refused(case("epsinf", **replaced("llama.attention.layer_norm_rms_epsilon", float("inf"), VT.FLOAT32)),
                   "llama.attention.layer_norm_rms_epsilon", "must be a finite number, got inf")
    expect_refused(case("thetainf", **replaced("llama.rope.freq_base", float("inf"), VT.FLOAT32)),
                   "llama.rope.freq_base", "must be a finite number, got inf")
    expect_refused(case("kvtype", **replaced("llama.block_count", "2", VT.STRING)), "llama.block_count",
                   "is STRING, expected an integer")
    expect_refused(case("zero", **replaced("llama.block_count", 0, VT.UINT32)), "llama.block_count",
                   "must be positive, got 0")
    expect_refused(case("huge", **replaced("llama.context_length", 2 ** 32, VT.UINT64)), "llama.context_length",
                   "4294967296 is too large")
    expect_refused(case("adapter", **replaced("general.type", "adapter", VT.STRING)), "general.type",
                   '"adapter" is not a model (llmcc builds general.type "model"; an adapter or a projector is not one)')
    expect_refused(case("kv3", **replaced("llama.attention.head_count_kv", 3, VT.UINT32)),
                   "llama.attention.head_count_kv", "3 does not divide llama.attention.head_count 4")
    expect_refused(case("heads6", drop_keys=("llama.attention.head_count", "llama.attention.key_length",
                                             "llama.attention.value_length"),
                        add_keys=[("llama.attention.head_count", 6, VT.UINT32)]), "llama.attention.head_count",
                   "6 does not divide the embedding length 64 (and there is no llama.attention.key_length)")
    expect_refused(case("vlen", **replaced("llama.attention.value_length", 32, VT.UINT32)),
                   "llama.attention.value_length", "32 differs from the key length 16 (llmcc's attention has one "
                   "head size)")
    expect_refused(case("eos", **replaced("tokenizer.ggml.eos_token_id", 300, VT.UINT32)),
                   "tokenizer.ggml.eos_token_id", "token id 300 is outside the vocabulary (vocab_size 300)")
    toks = GGUFReader(good).fields["tokenizer.ggml.tokens"].contents()
    expect_refused(case("tokens", drop_keys=("tokenizer.ggml.tokens",),
                        add_keys=[("tokenizer.ggml.tokens", toks[:299], VT.ARRAY)]), "tokenizer.ggml.tokens",
                   "299 tokens, but token_embd.weight has 300 rows")
    expect_refused(case("freqs4", tensors=[("rope_freqs.weight", np.ones(4, np.float32), None)]), "rope_freqs.weight",
                   "ne [4], expected [8] (head size 16 / 2)")
    zero = np.ones(8, np.float32)
    zero[3] = 0
    expect_refused(case("freqs0", tensors=[("rope_freqs.weight", zero, None)]), "rope_freqs.weight",
                   "element 3 is 0, not a positive factor")
    # a tensor's type edited to a smaller one (F32 -> F16) in the header: its bytes would be misread, refused
    data = bytearray(open(good, "rb").read())
    name = b"blk.0.ffn_down.weight"
    at = data.find(name) + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    assert struct.unpack_from("<I", data, at + 4 + 8 * n_dims)[0] == 0   # F32
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, 1)                 # F16
    retyped = os.path.join(bad, "retyped.gguf")
    with open(retyped, "wb") as f:
        f.write(data)
    p = run([LLMCC, "inspect", retyped], check=False)
    assert p.returncode == 1 and p.stderr == "llmcc: %s: blk.0.ffn_down.weight: its type and shape take 22016 bytes, " \
        "but 44032 lie before the next tensor (a type or shape edited smaller?)\n" % retyped, p.stderr
    # an unknown key the user vouches for builds; a key llmcc reads cannot be vouched for
    k = os.path.join(bad, "key.gguf")
    p = run([LLMCC, "compile", k, "--ir", "graph", "--ignore-config-key", "llama.attention.sliding_window"])
    assert "attention" in p.stdout
    p = run([LLMCC, "compile", k, "--ir", "graph", "--ignore-config-key", "llama.block_count"], check=False)
    assert p.returncode == 1 and p.stderr == "llmcc: --ignore-config-key: llama.block_count is read by llmcc (it " \
        "changes the model); it cannot be ignored\n", p.stderr
    # inspect still prints a file it cannot build from
    p = run([LLMCC, "inspect", os.path.join(bad, "mxfp4.gguf")])
    assert "tensor: blk.0.attn_q.weight MXFP4 [64, 64]" in p.stdout
    p = run([LLMCC, "inspect", os.path.join(bad, "mxfp4.gguf"), "--config-only"])
    assert "hidden_size: 64" in p.stdout


def test_rope_freqs_only_for_llama():
    # llama3's frequency factors are llama's (llama.cpp's qwen2 and qwen3 do not read them)
    need_gguf()
    g = gguf_of("qwen2-tied")
    bad = tmpdir(os.path.join("gguf_model", "bad"))
    f = rewrite(g, os.path.join(bad, "qwen-rope-freqs.gguf"),
                tensors=[("rope_freqs.weight", np.ones(8, np.float32), None)])
    expect_refused(f, "rope_freqs.weight", "not a tensor llmcc knows for GGUF architecture qwen2 (token_embd, "
                   "output_norm, output, blk.N.attn_* and blk.N.ffn_* of docs/gguf.md)", cmd="compile")


def test_sampling_defaults_and_where_they_come_from():
    """A GGUF file without general.sampling.* keys: llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95,
    min-p 0.05), so that a free-form prompt gets sensible text; --info and --version say which settings are in force
    and where each came from (a flag overrides)."""
    out = build(gguf_of("llama-linear", "f32", "f32", writer="gguf-py"), "llama-linear-f32-s3-f32-gguf-py")
    m = os.path.join(out, "m")
    want = ("sampling: temperature 0.8 (llama.cpp's default), top-k 40 (llama.cpp's default), top-p 0.95 "
            "(llama.cpp's default), min-p 0.05 (llama.cpp's default), repetition penalty 1 (llama.cpp's default)")
    assert want in run([m, "--info"]).stdout.splitlines()
    v = run([m, "--version"]).stdout.splitlines()
    assert re.fullmatch(r"m: LlamaForCausalLM for cpu, built .+ by llmcc \d+\.\d+\.\d+( \(commit [0-9a-f]+\))?", v[0]), v
    assert v[1] == want, v
    assert "sampling: temperature 0 (--temperature), top-k 40 (llama.cpp's default)" in \
        run([m, "--info", "--temp", "0"]).stdout
