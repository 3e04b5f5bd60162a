"""test_config_keys: no key of config.json that changes the forward pass is
ignored silently (docs/errors.md, "Keys of config.json").

The keys come from transformers' own config classes (LlamaConfig, Qwen2Config,
Qwen3Config, MistralConfig: to_dict() of the default instance, and what
save_pretrained writes), recorded by scripts/gen_config_classes.py in
tests/data/config_classes.json. For each class: every key is classified by
`llmcc inspect --config-keys` (read, default-only or inert); changing an inert
key changes nothing llmcc reads; a value llmcc does not implement, for every
default-only key and for the read keys that have such values, is refused with
one line naming the key; an unknown key is refused unless --ignore-config-key
names it."""
import copy
import json
import os

from testlib import LLMCC, ROOT, run, tmpdir

CLASSES = json.load(open(os.path.join(ROOT, "tests", "data", "config_classes.json")))["classes"]
# small shapes, so that nothing but the keys matters (inspect --config-only reads no weights)
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300, "max_position_embeddings": 256}


def base_config(cls):
    c = copy.deepcopy(CLASSES[cls]["to_dict"])
    c.update({k: v for k, v in SMALL.items() if k in c or k != "head_dim"})
    if "layer_types" in c:
        c["layer_types"] = ["full_attention"] * SMALL["num_hidden_layers"]
    return c


def inspect(cls, cfg, name, extra=(), check=True):
    d = os.path.join(tmpdir("config_keys"), "%s-%s" % (cls, name))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return run([LLMCC, "inspect", d, "--config-only", "--config-keys"] + list(extra), check=check), d


def understood(out):
    """inspect's report without the per-key lines and the paths: what llmcc read."""
    return [l for l in out.splitlines() if not l.startswith(("config_key:", "dir:", "config_path:"))]


def refused(p, key):
    lines = p.stderr.strip().splitlines()
    return p.returncode == 1 and len(lines) == 1 and (": %s: " % key) in lines[0]


def other_value(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 1
    if isinstance(v, str):
        return v + "x"
    if v is None:
        return 7
    if isinstance(v, dict):
        return {"x": 1}
    return [1, 2]


def test_every_key_of_transformers_classes_is_classified():
    for cls, info in CLASSES.items():
        for which in ("to_dict", "saved"):
            cfg = base_config(cls) if which == "to_dict" else dict(info["saved"], **{
                k: v for k, v in SMALL.items() if k in info["saved"]})
            if "layer_types" in cfg:
                cfg["layer_types"] = ["full_attention"] * SMALL["num_hidden_layers"]
            p, _ = inspect(cls, cfg, which)
            classes = dict(l.split()[1:3] for l in p.stdout.splitlines() if l.startswith("config_key:"))
            assert set(classes) == set(cfg), (cls, which, set(cfg) ^ set(classes))
            bad = {k: c for k, c in classes.items() if c not in ("read", "default-only", "inert")}
            assert not bad, (cls, which, bad)
            assert "architecture: " + info["architecture"] in p.stdout, p.stdout


def test_inert_keys_change_nothing_llmcc_reads():
    for cls in CLASSES:
        cfg = base_config(cls)
        p, _ = inspect(cls, cfg, "base")
        want = understood(p.stdout)
        inert = [l.split()[1] for l in p.stdout.splitlines() if l.startswith("config_key:") and l.endswith(" inert")]
        assert "transformers_version" in inert and "initializer_range" in inert and "hidden_size" not in inert, inert
        for key in inert:
            changed = dict(cfg, **{key: other_value(cfg[key])})
            p, _ = inspect(cls, changed, "inert")
            assert understood(p.stdout) == want, (cls, key)


def test_values_llmcc_does_not_implement_are_refused():
    for cls in CLASSES:
        cfg = base_config(cls)
        p, _ = inspect(cls, cfg, "base")
        default_only = [l.split()[1] for l in p.stdout.splitlines() if l.endswith(" default-only")]
        bad_values = {
            # every default-only key at a value other than its default
            **{k: other_value(cfg[k]) for k in default_only if k != "layer_types"},
            "layer_types": ["full_attention", "sliding_attention"],
            # read keys with values llmcc does not implement
            "hidden_act": "gelu_pytorch_tanh",
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0},
            "num_key_value_heads": 3,
        }
        for key, value in bad_values.items():
            if key not in cfg and key != "rope_parameters":
                continue
            p, _ = inspect(cls, dict(cfg, **{key: value}), "bad", check=False)
            name = "rope_parameters.rope_type" if key == "rope_parameters" else key
            assert refused(p, name), (cls, key, value, p.returncode, p.stderr)
        if "layer_types" in cfg:
            assert "layer_types" in default_only and "use_sliding_window" in default_only, (cls, default_only)


def test_unknown_keys_refused_unless_ignored():
    for cls in CLASSES:
        cfg = dict(base_config(cls), my_new_scaling=2.0)
        p, d = inspect(cls, cfg, "unknown", check=False)
        want = ("llmcc: %s/config.json: my_new_scaling: unknown to llmcc for %s, which cannot tell whether it changes "
                "the model; if it does not, build with --ignore-config-key my_new_scaling"
                % (d, CLASSES[cls]["architecture"]))
        assert p.returncode == 1 and p.stderr.strip() == want, p.stderr
        p, _ = inspect(cls, cfg, "unknown", extra=["--ignore-config-key", "my_new_scaling"])
        assert "ignored_key: my_new_scaling" in p.stdout and "config_key: my_new_scaling ignored" in p.stdout
        # the same for build: refused before anything is written
        out = os.path.join(tmpdir("config_keys"), "out-" + cls)
        p = run([LLMCC, "build", d, "-o", out, "--random-weights", "1"], check=False)
        assert refused(p, "my_new_scaling") and not os.path.exists(out), p.stderr
    # a key llmcc reads cannot be ignored: it changes the model
    p, _ = inspect("LlamaConfig", base_config("LlamaConfig"), "ignore-read", extra=["--ignore-config-key", "hidden_size"],
                   check=False)
    assert p.returncode == 1 and "--ignore-config-key: hidden_size is read by llmcc" in p.stderr, p.stderr
    # a default-only key named by --ignore-config-key is built at its default
    cfg = dict(base_config("Qwen2Config"), use_sliding_window=True)
    p, _ = inspect("Qwen2Config", cfg, "ignore-default-only", extra=["--ignore-config-key", "use_sliding_window"])
    assert "architecture: Qwen2ForCausalLM" in p.stdout
    # a quantized checkpoint's quantization_config says what it is
    p, _ = inspect("LlamaConfig", dict(base_config("LlamaConfig"), quantization_config={"quant_method": "gguf"}),
                   "quantized", check=False)
    assert refused(p, "quantization_config") and "quantized checkpoints are not supported yet" in p.stderr, p.stderr


def test_real_configs_accepted():
    # every real config.json of ../shared/assets/hf-configs: no key refused
    from testlib import shared
    cfgs = shared("hf-configs")
    for fn in sorted(os.listdir(cfgs)):
        if not fn.endswith(".config.json"):
            continue
        cfg = json.load(open(os.path.join(cfgs, fn)))
        p, _ = inspect("real", cfg, fn.replace(".config.json", ""))
        assert "ignored" not in p.stdout, (fn, p.stdout)
