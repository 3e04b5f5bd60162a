"""test_fuzz_regressions: replays every input the fuzzers found a crash with
(tests/fuzz/regressions/TARGET/*) and every seed (tests/fuzz/corpus/TARGET/*)
through the same harness (tests/fuzz/fuzz_TARGET.c), linked with
tests/fuzz/replay_main.c and built by gcc (with sanitizers under make
test-asan) instead of libFuzzer. The harness aborts on a crash, on a failed
check (e.g. a message that is not one line, or does not name the file), so
each replay must exit 0. Each kept crash is also run through the real
command line where it has one (llmcc inspect), asserting exit 1 and one line
(every kept one is a bad input that must be rejected)."""
import os
import shutil

import testlib

FUZZ = os.path.join(testlib.ROOT, "tests", "fuzz")
SRCS = {
    "safetensors": ["compiler/util.c", "compiler/json.c", "runtime/json.c", "compiler/safetensors.c"],
    "config": ["compiler/util.c", "compiler/json.c", "runtime/json.c", "compiler/config.c"],
    "tokenizer_json": ["compiler/util.c", "compiler/json.c", "runtime/json.c", "compiler/tokenizer_pack.c", "runtime/tokenizer.c",
                       "runtime/jinja.c"],
    "encoder": ["compiler/util.c", "compiler/json.c", "runtime/json.c", "compiler/tokenizer_pack.c", "runtime/tokenizer.c",
                "runtime/jinja.c"],
    "tokblob": ["compiler/util.c", "runtime/tokenizer.c", "runtime/json.c", "runtime/jinja.c"],
    "jinja": ["runtime/jinja.c", "runtime/json.c"],
    "request": ["runtime/openai.c", "runtime/json.c", "runtime/buf.c", "runtime/tokenizer.c", "runtime/jinja.c",
                "runtime/json_schema.c"],
    "grammar": ["runtime/grammar.c"],
    "gguf_model": ["compiler/util.c", "compiler/json.c", "runtime/json.c", "compiler/safetensors.c", "compiler/config.c",
                   "compiler/tokenizer_pack.c", "runtime/tokenizer.c", "compiler/gguf.c", "runtime/jinja.c",
                   "compiler/gguf_model.c", "compiler/tokenizer_gguf.c", "compiler/graph.c", "compiler/quant.c",
                   "compiler/expr.c", "compiler/frontend.c"],
}


def replay_bin(target):
    extra = ["-Wno-error=format-truncation"] if os.environ.get("LLMCC_SANITIZE") == "1" else []
    return testlib.build_c("fuzz_replay_" + target, ["tests/fuzz/replay_main.c", "tests/fuzz/fuzz_%s.c" % target] + SRCS[target],
                           extra=extra, libs=("-lutf8proc", "-lm"))


def inputs(target, kind):
    d = os.path.join(FUZZ, kind, target)
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(d, f) for f in os.listdir(d) if not f.startswith("."))


def replay(target, files, env=None):
    if not files:
        return
    p = testlib.run([replay_bin(target)] + files, check=False, env=env, timeout=300)
    assert p.returncode == 0, "replay of %s failed (rc=%d)\nstdout: %s\nstderr: %s" % (
        target, p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    assert p.stdout.count("\nok ") + p.stdout.startswith("ok ") == len(files), p.stdout
    assert "runtime error" not in p.stderr and "AddressSanitizer" not in p.stderr, p.stderr[-4000:]


def test_replay_safetensors():
    replay("safetensors", inputs("safetensors", "regressions") + inputs("safetensors", "corpus"))


def test_replay_config():
    replay("config", inputs("config", "regressions") + inputs("config", "corpus"))


def test_replay_tokenizer_json():
    replay("tokenizer_json", inputs("tokenizer_json", "regressions") + inputs("tokenizer_json", "corpus"))


def test_replay_tokblob():
    replay("tokblob", inputs("tokblob", "regressions") + inputs("tokblob", "corpus"))


def test_replay_jinja():
    replay("jinja", inputs("jinja", "regressions") + inputs("jinja", "corpus"))


def test_replay_request():
    replay("request", inputs("request", "regressions") + inputs("request", "corpus"))


def test_replay_grammar():
    replay("grammar", inputs("grammar", "regressions") + inputs("grammar", "corpus"))


def test_replay_gguf_model():
    replay("gguf_model", inputs("gguf_model", "regressions") + inputs("gguf_model", "corpus"))


def test_replay_encoder():
    qwen = testlib.shared("tokenizers", "qwen2.5-instruct")
    llama3 = testlib.shared("tokenizers", "llama3-instruct")
    spm = os.path.join(testlib.tmpdir("fuzz"), "spm")
    if not os.path.exists(os.path.join(spm, "tokenizer.json")):
        testlib.run(["python3", os.path.join(testlib.ROOT, "scripts", "convert_llama2c.py"), "--tokenizer-only",
                     testlib.shared("aidreams260K", "tok512.bin"), spm])
    replay("encoder", inputs("encoder", "regressions") + inputs("encoder", "corpus"),
           env={"LLMCC_FUZZ_TOKDIRS": ":".join([qwen, llama3, spm])})


def test_kept_crashes_through_the_cli():
    """Each kept safetensors / config crash through `llmcc inspect`: exit 1, one line naming the file."""
    n = 0
    for target, fname in (("safetensors", "model.safetensors"), ("config", "config.json")):
        for f in inputs(target, "regressions"):
            d = os.path.join(testlib.TMP, "fuzz_cli", target, os.path.basename(f))
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            data = open(f, "rb").read()
            if target == "config":
                data = data.split(b"\0")[0]
            else:
                open(os.path.join(d, "config.json"), "w").write(
                    '{"model_type": "llama", "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,'
                    ' "num_attention_heads": 2, "vocab_size": 4}')
            open(os.path.join(d, fname), "wb").write(data)
            p = testlib.run([testlib.LLMCC, "inspect", d], check=False)
            lines = p.stderr.splitlines()
            assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("llmcc: " + d), (f, p.returncode, p.stderr)
            n += 1
    assert n >= 1, "no kept crash went through the command line"
