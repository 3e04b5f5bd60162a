#!/usr/bin/env python3
"""gen_config_classes.py: the keys transformers' config classes write, for
tests/test_config_keys.py (committed as tests/data/config_classes.json).

    python3 scripts/gen_config_classes.py        (needs transformers)

For LlamaConfig, Qwen2Config, Qwen3Config and MistralConfig: to_dict() of the
default instance (every key the class knows, with its default value) and the
config.json that save_pretrained writes for it (what a user's checkpoint holds)."""
import json
import os
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "config_classes.json")
CLASSES = [("LlamaConfig", "LlamaForCausalLM"), ("Qwen2Config", "Qwen2ForCausalLM"),
           ("Qwen3Config", "Qwen3ForCausalLM"), ("MistralConfig", "MistralForCausalLM")]


def main():
    import transformers
    out = {"generator": "scripts/gen_config_classes.py", "transformers": transformers.__version__, "classes": {}}
    for cls_name, arch in CLASSES:
        cfg = getattr(transformers, cls_name)(architectures=[arch])
        with tempfile.TemporaryDirectory() as t:
            cfg.save_pretrained(t)
            saved = json.load(open(os.path.join(t, "config.json")))
        out["classes"][cls_name] = {"architecture": arch, "to_dict": cfg.to_dict(), "saved": saved}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote %s" % OUT)


if __name__ == "__main__":
    main()
