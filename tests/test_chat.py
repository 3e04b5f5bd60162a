"""test_chat: chat templates (the checkpoint's, run by runtime/jinja.c through tokenizer_chat_apply, checked by
compiler/tokenizer_pack.c) against transformers' apply_chat_template(messages,
add_generation_prompt=True, tokenize=True), id for id, for the real Qwen2.5 and Llama 3
Instruct tokenizers in ../shared/assets/tokenizers, for Meta's Llama 3.1 / 3.2 Instruct
templates (tests/data/*.chat_template.jinja) on the Llama 3 tokenizer, for TinyLlama's
Zephyr template on the Llama 2 tokenizer and for SmolLM2-Instruct's ChatML template (its
own default system message) on the GPT-2-style fixture of tests/test_tokenizer.py. The expected ids and text come from scripts/gen_chat_expected.py
(tests/data/chat_expected.json), so this needs no transformers."""
import datetime
import json
import re
import os
import subprocess
import shutil
import sys
import time

from testlib import LLMCC, ROOT, Skip, build_exe, model_fixture, run, shared, tmpdir

EXPECTED = os.path.join(ROOT, "tests", "data", "chat_expected.json")

# TinyLlama-1.1B-Chat-v1.0's chat_template (alignment-handbook's Zephyr template)
ZEPHYR = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
          "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
          "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
          "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")

S, U, A = "system", "user", "assistant"
CASES = [
    ("user only", [(U, "Hello")]),
    ("system + user", [(S, "You are a terse assistant."), (U, "What is 2 + 2?")]),
    ("empty system", [(S, ""), (U, "hi")]),
    ("multi-turn", [(U, "Hi there!"), (A, "Hello! How can I help you today?"), (U, "Tell me a joke.")]),
    ("multi-turn with system", [(S, "Answer in French."), (U, "Good morning"), (A, "Bonjour !"),
                                (U, "And good night?"), (A, "Bonne nuit."), (U, "Thanks")]),
    ("whitespace around content", [(S, "  spaced system \n"), (U, "\n\n  padded question?  \t\n"),
                                   (A, " answer with spaces "), (U, "\u00a0nbsp and ideographic\u3000")]),
    ("unicode and code", [(U, "\u4f60\u597d\uff0c\u4e16\u754c\uff01 caf\u00e9 \U0001f600\ndef f(x):\n    return x * 2\n")]),
    ("special-token text in content", [(U, "What does <|im_end|> or <|eot_id|> or </s> mean?")]),
    ("empty user", [(U, "")]),
    ("later system message", [(U, "first"), (A, "ok"), (S, "New rules: be brief."), (U, "second")]),
    ("assistant last", [(U, "Continue"), (A, "Sure")]),
]

# Qwen3's template also rewrites assistant turns that hold reasoning (<think>...</think>): kept after the last
# user message, dropped before it
QWEN3_CASES = CASES + [
    ("reasoning in an earlier turn", [(U, "What is 2+2?"), (A, "<think>\nAdd them.\n</think>\n\n4"), (U, "And 3+3?")]),
    ("reasoning in the last turn", [(U, "Hi"), (A, "<think>\nGreet back.\n</think>\n\nHello!")]),
    ("two replies after the last query", [(U, "Q"), (A, "<think>\nfirst\n</think>\n\nA1"), (A, "plain A2")]),
    ("empty think block", [(S, "sys"), (U, "x"), (A, "<think>\n\n</think>\n\nshort"), (U, "y")]),
    ("several think tags", [(U, "x"), (A, "a<think>one</think>b<think>\n\ntwo\n</think>\n\n\nc")]),
    ("user text like a tool response", [(U, "real question"), (A, "<think>t</think>ans"),
                                        (U, "<tool_response>data</tool_response>")]),
    ("think tag without a close", [(U, "x"), (A, "<think>unfinished"), (U, "y")]),
]
# chat_expected.json keys for Qwen3: the template's default (thinking on), and enable_thinking given
QWEN3_MODES = {"qwen3": None, "qwen3 enable_thinking=true": True, "qwen3 enable_thinking=false": False}
TOKENIZERS = ("qwen2.5-instruct", "llama3-instruct", "llama3.1-instruct", "llama3.2-instruct", "tinyllama",
              "smollm2-instruct") + tuple(QWEN3_MODES)
# SmolLM2-135M-Instruct's chat_template, verbatim (provenance: scripts/gen_chat_expected.py)
SMOLLM2_TEMPLATE = "smollm2-instruct.chat_template.jinja"
# Meta's Llama 3.1 / 3.2 Instruct chat templates, verbatim (provenance: scripts/gen_chat_expected.py)
LLAMA31_TEMPLATES = {"llama3.1-instruct": "llama3.1-instruct.chat_template.jinja",
                     "llama3.2-instruct": "llama3.2-instruct.chat_template.jinja"}
# 3.2's template dates its system turn with strftime_now (today); the expected ids are
# rendered with date_string=CHAT_DATE and llmcc with LLMCC_CHAT_DATE=CHAT_DATE. 3.1's
# template has a fixed "26 Jul 2024", rendered without date_string.
CHAT_DATE = "09 Mar 2025"
PREAMBLE = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: "
# Where transformers 5 and `tokenizers` (straight from tokenizer.json) encode the same
# rendered text differently, llmcc follows tokenizer.json: transformers 5 rebuilds Llama
# tokenizers with Metaspace(prepend_scheme="always") instead of the file's legacy
# Prepend("▁") normalizer, so " mean" right after "</s>" loses one "▁". (Saved by transformers 5,
# tokenizer.json has that Metaspace too, and llmcc gives transformers' ids: test_tinyllama_metaspace_chat_ids.)
TOKENIZERS_DIFFER = {("tinyllama", "special-token text in content")}


def tinyllama_dir(out):
    """The Llama 2 tokenizer (llama2.c's tokenizer.bin via scripts/convert_llama2c.py)
    with TinyLlama-1.1B-Chat-v1.0's tokenizer_config settings and chat template."""
    tb = shared("tokenizers", "llama2", "tokenizer.bin")
    run([sys.executable, os.path.join(ROOT, "scripts", "convert_llama2c.py"), "--tokenizer-only", tb, out])
    p = os.path.join(out, "tokenizer_config.json")
    with open(p) as f:
        tc = json.load(f)
    tc["chat_template"] = ZEPHYR
    with open(p, "w") as f:
        json.dump(tc, f, indent=2)
    return out


def llama31_dir(name, out):
    """The Llama 3 Instruct tokenizer in ../shared/assets with Meta's Llama 3.1 or 3.2
    Instruct chat_template from tests/data. (3.1 / 3.2 share Llama 3's tokenizer.json but
    for the names of a few reserved special tokens, which text without tools never uses.)"""
    src = shared("tokenizers", "llama3-instruct", "tokenizer.json")
    os.makedirs(out, exist_ok=True)
    shutil.copyfile(src, os.path.join(out, "tokenizer.json"))
    with open(os.path.join(os.path.dirname(src), "tokenizer_config.json")) as f:
        tc = json.load(f)
    with open(os.path.join(ROOT, "tests", "data", LLAMA31_TEMPLATES[name])) as f:
        tc["chat_template"] = f.read()
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    return out


def smollm2_dir(out):
    """The GPT-2-style fixture tokenizer (tests/data/gpt2_tokenizer.json: Digits, then
    ByteLevel with GPT-2's regex, <|im_start|> / <|im_end|> as SmolLM2's) with SmolLM2's
    chat template in chat_template.jinja and tokenizer_config.json as transformers 5 saves
    them. tokenizer_class TokenizersBackend: transformers 5's GPT2Tokenizer, SmolLM2's class
    on the Hub, rebuilds the pre-tokenizer as ByteLevel alone (no Digits), where llmcc
    follows tokenizer.json."""
    import test_tokenizer
    test_tokenizer.write_gpt2_fixture("gpt2_digits", out)
    with open(os.path.join(ROOT, "tests", "data", SMOLLM2_TEMPLATE)) as f:
        tpl = f.read()
    with open(os.path.join(out, "chat_template.jinja"), "w") as f:
        f.write(tpl)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "TokenizersBackend", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                   "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>"}, f, indent=2)
    return out


def cases_of(name):
    return QWEN3_CASES if name in QWEN3_MODES else CASES


def think_args(name):
    t = QWEN3_MODES.get(name)
    return [] if t is None else ["--think" if t else "--no-think"]


def tok_dir(name):
    if name in QWEN3_MODES:
        return shared("tokenizers", "qwen3")
    if name == "smollm2-instruct":
        return smollm2_dir(tmpdir("chat_smollm2"))
    if name == "tinyllama":
        return tinyllama_dir(tmpdir("chat_tinyllama"))
    if name in LLAMA31_TEMPLATES:
        return llama31_dir(name, tmpdir("chat_" + name))
    return shared("tokenizers", name)


def chat_env(name):
    """LLMCC_CHAT_DATE as the expected ids were made: CHAT_DATE for 3.2, unset (empty) otherwise."""
    return {"LLMCC_CHAT_DATE": CHAT_DATE if name == "llama3.2-instruct" else ""}


def messages_file(msgs, name):
    p = os.path.join(tmpdir("chat"), name + ".json")
    with open(p, "w") as f:
        json.dump([{"role": r, "content": c} for r, c in msgs], f, ensure_ascii=False)
    return p


def messages_file_raw(content, name):
    p = os.path.join(tmpdir("chat"), name + ".json")
    with open(p, "w") as f:
        json.dump(content, f)
    return p


def expected():
    if not os.path.exists(EXPECTED):
        raise Skip("tests/data/chat_expected.json is absent (python3 scripts/gen_chat_expected.py)")
    with open(EXPECTED) as f:
        return json.load(f)


def check_family(name, d=None, transformers_ids=False):
    """transformers_ids: D's tokenizer.json is what transformers encoded with, so its ids are
    expected even where the original tokenizer.json encodes differently (TOKENIZERS_DIFFER)."""
    exp = expected()[name]
    d = d or tok_dir(name)
    cases, think = cases_of(name), think_args(name)
    # every conversation in one call: a list of them gives one line of ids each
    mf = os.path.join(tmpdir("chat"), name.replace(" ", "_") + "_all.json")
    with open(mf, "w") as f:
        json.dump([[{"role": r, "content": c} for r, c in msgs] for _, msgs in cases], f, ensure_ascii=False)
    env = chat_env(name)
    lines = run([LLMCC, "tokenize", d, "--chat-messages", mf] + think, env=env).stdout.split("\n")
    assert len(lines) == len(cases) + 1 and lines[-1] == "", lines
    for i, (title, msgs) in enumerate(cases):
        e = exp[title]
        want = e["ids"]
        if "ids_tokenizers" in e:
            assert (name, title) in TOKENIZERS_DIFFER, (name, title, "transformers and tokenizers differ")
            if not transformers_ids:
                want = e["ids_tokenizers"]
        ids = [int(x) for x in lines[i].split()]
        if ids != want:   # the rendered text tells a template fault from a tokenizer one
            text = run([LLMCC, "tokenize", d, "--chat-messages", messages_file(msgs, "%s_%d" % (name.replace(" ", "_"), i)),
                        "--text"] + think, env=env).stdout
            assert text == e["text"], (name, title, text, e["text"])
        assert ids == want, (name, title, ids, want)
        # single turn through --system / TEXT, as the executable takes it
        if title in ("user only", "system + user"):
            args = (["--system", msgs[0][1]] if msgs[0][0] == S else ["--chat"]) + think
            ids = [int(x) for x in run([LLMCC, "tokenize", d] + args + [msgs[-1][1]], env=env).stdout.split()]
            assert ids == want, (name, title, "--system", ids)


def test_qwen25_chat_ids():
    check_family("qwen2.5-instruct")


def test_qwen3_chat_ids():
    # thinking by the template's default, on and off; reasoning in assistant turns kept or dropped as Qwen3's
    # template does
    for name in QWEN3_MODES:
        check_family(name)


def test_llama3_chat_ids():
    check_family("llama3-instruct")


def test_llama31_chat_ids():
    check_family("llama3.1-instruct")


def test_llama32_chat_ids():
    check_family("llama3.2-instruct")


def test_tinyllama_zephyr_chat_ids():
    check_family("tinyllama")


def test_tinyllama_metaspace_chat_ids():
    """TinyLlama's tokenizer as transformers 5 saves it (scripts/llama2_metaspace.py: Metaspace with
    prepend_scheme always instead of the legacy normalizer, the template in chat_template.jinja):
    llmcc now encodes as transformers did, " mean" after "</s>" included (TOKENIZERS_DIFFER)."""
    from test_tokenizer import write_llama2_metaspace
    tpl = os.path.join(tmpdir("chat"), "zephyr.jinja")
    with open(tpl, "w") as f:
        f.write(ZEPHYR)
    d = write_llama2_metaspace("always", tmpdir("chat_tinyllama_metaspace"), chat_template=tpl)
    check_family("tinyllama", d, transformers_ids=True)


def test_smollm2_chat_ids():
    check_family("smollm2-instruct")


def test_llama31_dates():
    """Without LLMCC_CHAT_DATE, 3.2's system turn carries today's date as transformers'
    strftime_now("%d %b %Y") writes it (Python's datetime.now().strftime, C locale);
    3.1's is its fixed "26 Jul 2024" (test_llama31_chat_ids). LLMCC_CHAT_DATE sets
    either, like apply_chat_template's date_string."""
    exp = expected()
    title, msgs = CASES[1]
    mf = messages_file(msgs, "dates")

    def text(name, date):
        return run([LLMCC, "tokenize", tok_dir(name), "--chat-messages", mf, "--text"], env={"LLMCC_CHAT_DATE": date}).stdout

    def with_date(name, date):
        e = exp[name][title]["text"]
        old = PREAMBLE + (CHAT_DATE if name == "llama3.2-instruct" else "26 Jul 2024") + "\n\n"
        assert e.startswith(old), e
        return e.replace(old, PREAMBLE + date + "\n\n", 1)

    before = datetime.datetime.now().strftime("%d %b %Y")
    got = text("llama3.2-instruct", "")
    after = datetime.datetime.now().strftime("%d %b %Y")   # a run across midnight may show either day
    assert got in (with_date("llama3.2-instruct", before), with_date("llama3.2-instruct", after)), (got, before)
    assert text("llama3.1-instruct", "1 Apr 2030") == with_date("llama3.1-instruct", "1 Apr 2030")


def test_rendered_text():
    """--text prints transformers' rendered text exactly (one conversation per family)."""
    exp = expected()
    for name in TOKENIZERS:
        title, msgs = CASES[5]
        text = run([LLMCC, "tokenize", tok_dir(name), "--chat-messages", messages_file(msgs, name.replace(" ", "_") + "_text"),
                    "--text"] + think_args(name), env=chat_env(name)).stdout
        assert text == exp[name][title]["text"], (name, text)


def test_expected_file_is_complete():
    exp = expected()
    assert sorted(exp) == sorted(TOKENIZERS)
    for name in TOKENIZERS:
        assert sorted(exp[name]) == sorted(t for t, _ in cases_of(name)), name
    # Qwen3: no default system prompt; enable_thinking=false opens the reply with an empty think block;
    # reasoning before the last user message is dropped
    assert exp["qwen3"]["user only"]["text"] == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert exp["qwen3 enable_thinking=false"]["user only"]["text"].endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "Add them" not in exp["qwen3"]["reasoning in an earlier turn"]["text"]
    assert "<think>\nGreet back.\n</think>\n\nHello!" in exp["qwen3"]["reasoning in the last turn"]["text"]
    # the Qwen2.5 default system prompt is in the prompt when none is given
    assert exp["qwen2.5-instruct"]["user only"]["text"].startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n")
    assert exp["llama3-instruct"]["user only"]["ids"][0] == 128000
    # SmolLM2's default system message, and none where the conversation brings its own
    assert exp["smollm2-instruct"]["user only"]["text"] == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    assert exp["smollm2-instruct"]["empty system"]["text"].startswith("<|im_start|>system\n<|im_end|>\n<|im_start|>user")
    # Llama 3.1 / 3.2: the system turn and its dates, with and without a system message
    assert exp["llama3.1-instruct"]["user only"]["text"] == (
        PREAMBLE + "26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert exp["llama3.2-instruct"]["system + user"]["text"].startswith(
        PREAMBLE + CHAT_DATE + "\n\nYou are a terse assistant.<|eot_id|>")


# ---------------------------------------------------------------- the executable
# scripts/make_fixture.py qwen2-tok: random weights, the real Qwen2.5 tokenizer and
# generation_config; after an id that is a multiple of 5 it emits <|im_end|> (151645).
IM_END = 151645


_exes = {}


def fixture_exe(kind, name, *assets):
    """Builds a make_fixture.py KIND fixture's CPU executable once per run; returns (exe, fixture dir)."""
    if kind not in _exes:
        for a in assets:
            shared(*a)
        fx = model_fixture(kind, "bf16", seed=0)
        out = build_exe(fx, "cpu", ["--ctx", "256", "--name", name])   # test_serve's too
        _exes[kind] = (os.path.join(out, name), fx)
    return _exes[kind]


def qwen_exe():
    return fixture_exe("qwen2-tok", "qwen", ("tokenizers", "qwen2.5-instruct", "tokenizer.json"))


def q(*args, input=None):
    # one thread: the model is tiny, and OpenMP's spinning threads only slow it on a busy machine
    return run([qwen_exe()[0]] + [str(a) for a in args], check=False, input=input, env={"OMP_NUM_THREADS": "1"})


def ids_out(p):
    assert p.returncode == 0, (p.returncode, p.stderr)
    return [[int(x) for x in ln.split()] for ln in p.stdout.splitlines()]


def test_exe_tokenize_matches_hf():
    """--tokenize without chat: Hugging Face tokenizers' ids (tests/data/tokenizer_expected.json);
    --prompt-ids echoes their text as HF decodes it (special tokens skipped)."""
    with open(os.path.join(ROOT, "tests", "data", "tokenizer_expected.json")) as f:
        exp = json.load(f)
    e = exp["tokenizers"]["qwen2.5"]
    picks = [0, 5, 44] + [i for i, t in enumerate(exp["texts"]) if "<|im_start|>" in t][:1] + [
        i for i, t in enumerate(exp["texts"]) if any(ord(c) > 0x4000 for c in t)][:2]
    for i in picks:
        text = exp["texts"][i]
        if not text:
            continue
        want = e["ids_special"][i] if e["ids_special"][i] is not None else e["ids"][i]
        got = ids_out(q("--no-chat", "--prompt", text, "--tokenize"))
        assert got == [want], (text, got, want)
        p = q("--prompt-ids", ",".join(map(str, e["ids"][i])), "-n", 0)
        dec = e["decoded"][i] if e["decoded"][i] is not None else text
        assert p.returncode == 0 and p.stdout == dec + "\n", (text, p.stdout, dec)


def test_exe_chat_tokenize_matches_transformers():
    exp = expected()["qwen2.5-instruct"]
    for title, args in (("user only", []), ("system + user", ["--system", CASES[1][1][0][1]])):
        msgs = dict(CASES)[title]
        got = ids_out(q("--prompt", msgs[-1][1], "--tokenize", *args))
        assert got == [exp[title]["ids"]], (title, got)
    # an empty prompt is an empty user message
    assert ids_out(q("--prompt", "", "--tokenize")) == [exp["empty user"]["ids"]]
    # --chat is the default here; --no-chat is the plain encoding
    assert ids_out(q("--chat", "--prompt", "Hello", "--tokenize")) == [exp["user only"]["ids"]]
    assert ids_out(q("--no-chat", "--prompt", "Hello", "--tokenize")) == [[9707]]


def test_exe_info_stop_ids():
    p = q("--info")
    assert p.returncode == 0, p.stderr
    assert "stop ids: 151645 151643" in p.stdout, p.stdout
    # the template as the checkpoint has it (Qwen2.5-Instruct's), its end of turn found by rendering it
    assert re.search(r"^chat template: the checkpoint's \(\d+ bytes of Jinja\), end of turn 151645$", p.stdout, re.M), \
        p.stdout


def test_exe_never_prints_im_end():
    # without chat, past the stop ids: the rigged model emits <|im_end|> and the text shows nothing of it
    ids = ids_out(q("--no-chat", "--prompt", "Hello", "--temperature", 0, "--ignore-eos", "-n", 12, "--ids"))[0]
    assert IM_END in ids, ids
    p = q("--no-chat", "--prompt", "Hello", "--temperature", 0, "--ignore-eos", "-n", 12)
    assert p.returncode == 0 and p.stdout.startswith("Hello") and "<|im_end|>" not in p.stdout and "<|" not in p.stdout, p.stdout
    # with chat, <|im_end|> ends the reply: the ids stop right before it
    ids = ids_out(q("--prompt", "Hello", "--temperature", 0, "--ids", "-n", 40))[0]
    assert ids and IM_END not in ids and ids[-1] % 5 == 0, ids
    p = q("--prompt", "Hello", "--temperature", 0, "-n", 40)
    assert p.returncode == 0 and "<|" not in p.stdout and "Hello" not in p.stdout, p.stdout   # the reply only
    # ids in, special ids in the echo print nothing
    p = q("--prompt-ids", "9707,151645,198,151644", "-n", 0)
    assert p.returncode == 0 and p.stdout == "Hello\n\n", repr(p.stdout)


def test_exe_interactive_keeps_the_cache():
    """-i: turn 2's reply equals a fresh run over the whole conversation's ids (turn 1's
    prompt, its reply, then the template's text for turn 2), so the KV cache kept between
    turns holds exactly those tokens."""
    exe, fx = qwen_exe()
    p = q("-i", "--temperature", 0, "--ids", "-n", 6, "--system", "Be brief.", input="Hi\n\nHow are you?\n")
    r1, r2 = ids_out(p)
    assert r1 and r2, p.stdout
    first = ids_out(q("--prompt", "Hi", "--system", "Be brief.", "--tokenize"))[0]
    assert first == expected_chat_ids([(S, "Be brief."), (U, "Hi")])
    # turn 1 stopped at <|im_end|> (or after -n 6): the next turn starts with the template's end of turn
    delta = [int(x) for x in run([LLMCC, "tokenize", fx, "<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n"]).stdout.split()]
    assert delta[0] == IM_END
    full = first + r1 + delta
    again = ids_out(q("--prompt-ids", ",".join(map(str, full)), "--temperature", 0, "--ids", "-n", 6))[0]
    assert again == r2, (again, r2)
    # the same reply when the first turn comes from --prompt
    p = q("-i", "--prompt", "Hi", "--temperature", 0, "--ids", "-n", 6, "--system", "Be brief.", input="How are you?\n")
    assert ids_out(p) == [r1, r2]


def expected_chat_ids(msgs):
    """Our rendering of msgs, checked against the transformers-made expected ids when it is one of CASES."""
    mf = messages_file(msgs, "exe_msgs")
    return [int(x) for x in run([LLMCC, "tokenize", qwen_exe()[1], "--chat-messages", mf]).stdout.split()]


# scripts/make_fixture.py qwen3-tok: random weights, the real Qwen3 tokenizer and template, Qwen3-8B's
# generation_config; rigged so that greedy decoding after "...assistant\n" replies "<think>I</think>\n\nHello".
def qwen3_exe():
    return fixture_exe("qwen3-tok", "qwen3", ("tokenizers", "qwen3", "tokenizer.json"),
                       ("hf-configs", "Qwen3-8B.generation_config.json"))


def q3(*args, input=None):
    return run([qwen3_exe()[0]] + [str(a) for a in args], check=False, input=input, env={"OMP_NUM_THREADS": "1"})


def on_a_terminal(args):
    """Runs the Qwen3 executable with its stdout on a pseudo-terminal; returns what it wrote there."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([qwen3_exe()[0]] + [str(a) for a in args], stdout=slave, stderr=subprocess.PIPE,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:   # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=120) == 0, p.stderr.read()
    return out.decode().replace("\r\n", "\n")


def test_qwen3_exe_think_switch_prompts():
    # the prompt's ids equal transformers' apply_chat_template(enable_thinking=...) (tests/data/chat_expected.json)
    exp = expected()
    for name, args in (("qwen3", []), ("qwen3 enable_thinking=true", ["--think"]),
                       ("qwen3 enable_thinking=false", ["--no-think"])):
        assert ids_out(q3("--prompt", "Hello", "--tokenize", *args)) == [exp[name]["user only"]["ids"]], name
        sys_ids = ids_out(q3("--system", CASES[1][1][0][1], "--prompt", CASES[1][1][1][1], "--tokenize", *args))
        assert sys_ids == [exp[name]["system + user"]["ids"]], name
    # --chat-template-kwargs: any variable, enable_thinking among them (--no-think is its shorthand)
    kw = ids_out(q3("--prompt", "Hello", "--tokenize", "--chat-template-kwargs", '{"enable_thinking": false}'))
    assert kw == [exp["qwen3 enable_thinking=false"]["user only"]["ids"]]
    p = q3("--prompt", "Hello", "--tokenize", "--chat-template-kwargs", "[1]")
    assert p.returncode == 1 and "--chat-template-kwargs: '[1]' is not a JSON object" in p.stderr, p.stderr
    p = q3("--info")
    assert p.returncode == 0 and "stop ids: 151645 151643" in p.stdout, p.stdout
    assert re.search(r"^chat template: the checkpoint's \(\d+ bytes of Jinja\), end of turn 151645$", p.stdout, re.M)
    assert "thinking: the template's switch (enable_thinking; --think, --no-think)" in p.stdout


def test_qwen3_exe_reasoning_shown_apart():
    greedy = ["--prompt", "Hi", "--temperature", 0, "-n", 20]
    p = q3(*greedy)
    assert p.returncode == 0 and p.stdout == "<think>I</think>\n\nHello\n", repr(p.stdout)   # not a terminal: as is
    assert ids_out(q3(*greedy, "--ids")) == [[151667, 40, 151668, 271, 9707]]
    p = q3(*greedy, "--hide-thinking", "--stats")
    assert p.returncode == 0 and p.stdout == "Hello\n", repr(p.stdout)
    assert "reasoning tokens: 3 of the generated" in p.stderr and "generated tokens: 5" in p.stderr, p.stderr
    p = q3(*greedy, "--no-think", "--stats")
    assert p.returncode == 0 and p.stdout == "Hello\n" and "reasoning tokens: 0 of" in p.stderr, (p.stdout, p.stderr)
    # on a terminal the reasoning is dim (SGR 2 ... SGR 0); --hide-thinking leaves it out
    assert on_a_terminal(greedy) == "\033[2m<think>I</think>\033[0m\n\nHello\n"
    assert on_a_terminal(greedy + ["--hide-thinking"]) == "Hello\n"


def test_qwen3_exe_interactive_drops_old_reasoning():
    """-i: Qwen3's template drops an answered turn's reasoning, so turn 2 is the whole conversation rendered
    again; the cache is kept up to where it agrees (turn 1's prompt) and the rest is fed: the prompt tokens fed
    in all are turn 1's prompt plus the new rendering past that prefix."""
    exe, fx = qwen3_exe()
    for think, reply in (([], "<think>I</think>\n\nHello"), (["--no-think"], "Hello")):
        p = q3("-i", "--temperature", 0, "-n", 20, "--stats", *think, input="Hi\nagain\n")
        assert p.returncode == 0 and p.stdout == reply + "\n" + reply + "\n", repr(p.stdout)
        first = ids_out(q3("--prompt", "Hi", "--tokenize", *think))[0]
        conv = [(U, "Hi"), (A, reply), (U, "again")]
        mf = messages_file(conv, "qwen3_i" + "".join(think))
        whole = [int(x) for x in run([LLMCC, "tokenize", fx, "--chat-messages", mf] + think).stdout.split()]
        text = run([LLMCC, "tokenize", fx, "--chat-messages", mf, "--text"] + think).stdout
        assert "<think>" not in text.split("again")[0], text   # the answered turn's reasoning is gone
        cached = first + ids_out(q3("--prompt", "Hi", "--temperature", 0, "-n", 20, "--ids", *think))[0]
        keep = 0
        while keep < min(len(cached), len(whole)) and cached[keep] == whole[keep]:
            keep += 1
        assert keep <= len(first), (keep, first, whole)   # the cache is cut back to (or into) turn 1's prompt
        assert "prompt tokens: %d\n" % (len(first) + len(whole) - keep) in p.stderr, (p.stderr, len(first), len(whole), keep)
        assert "turns: 2" in p.stderr


def test_qwen3_exe_think_errors():
    p = q3("--prompt-ids", "1,2", "--think")
    assert p.returncode == 1 and "--prompt-ids are used as given: --think does not apply to them" in p.stderr, p.stderr
    p = q3("--no-chat", "--prompt", "x", "--no-think")
    assert p.returncode == 1 and "--no-think: the thinking switch is part of the chat template: drop --no-chat" in p.stderr
    p = q3("--think")
    assert p.returncode == 1 and "--think goes with the user's message: give --prompt TEXT or -i" in p.stderr, p.stderr
    p = q3("--think", "--no-think", "--prompt", "x")
    assert p.returncode == 1 and "give --think or --no-think once" in p.stderr, p.stderr
    # Qwen2.5's template has no thinking switch, its tokenizer no <think>
    p = q("--prompt", "x", "--think")
    assert p.returncode == 1 and "--think: this model's chat template has no thinking switch" in p.stderr, p.stderr
    p = q("--prompt", "x", "--hide-thinking")
    assert p.returncode == 1 and "--hide-thinking: this model's tokenizer has no <think> and </think> tokens" in p.stderr
    p = run([LLMCC, "tokenize", qwen_exe()[1], "--chat", "--think", "x"], check=False)
    assert p.returncode == 1 and "--think: this chat template has no thinking switch (enable_thinking)" in p.stderr, \
        p.stderr


def test_exe_chat_errors():
    for args, word in ((["--no-chat", "--system", "x", "--prompt", "hi"], "--no-chat"),
                       (["--no-chat", "-i"], "--no-chat"),
                       (["--system", "x"], "--prompt"),
                       (["--chat", "--no-chat", "--prompt", "x"], "not both"),
                       (["-i", "--tokenize"], "-i"),
                       (["-i", "--prompt-ids", "1"], "--prompt-ids"),
                       (["--chat", "--prompt-ids", "1"], "--prompt-ids")):
        p = q(*args, input="")
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("qwen: ") \
            and word in p.stderr, (args, p.stderr)
    # -i at the context's end: the oldest turns are left out (said once), and a message longer than the context
    # alone is left out itself; the chat goes on
    p = q("-i", "--ctx", 40, "--temperature", 0, "--ids", input="hi\nthere\n" + "word " * 60 + "\nagain\n")
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 3, (p.stdout, p.stderr)
    assert p.stderr.count("the conversation outgrew the context (40 tokens; see --ctx): its oldest turns are left out") \
        == 1 and "this message is " in p.stderr and "tokens, longer than the context (40 tokens; see --ctx): left out" \
        in p.stderr, p.stderr
    # -i with nothing on stdin: no turns, exit 0
    p = q("-i", input="")
    assert p.returncode == 0 and p.stdout == "", (p.returncode, p.stdout, p.stderr)


# ---------------------------------------------------------------- any template
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def template_dir(name, template, jinja_file=False):
    """The qwen2-tied fixture's small tokenizer (it has <|im_start|> and <|im_end|>) with another chat_template."""
    d = tmpdir("chat_tpl_" + name)
    if not os.path.exists(os.path.join(d, "config.json")):
        run([sys.executable, os.path.join(ROOT, "scripts", "make_fixture.py"), "qwen2-tied", d])
    p = os.path.join(d, "tokenizer_config.json")
    with open(p) as f:
        tc = json.load(f)
    tc.pop("chat_template", None)
    jf = os.path.join(d, "chat_template.jinja")
    if os.path.exists(jf):
        os.remove(jf)
    if jinja_file:
        with open(jf, "w") as f:
            f.write(template)
    else:
        tc["chat_template"] = template
    with open(p, "w") as f:
        json.dump(tc, f)
    return d


with open(os.path.join(ROOT, "tests", "data", LLAMA31_TEMPLATES["llama3.1-instruct"])) as _f:
    # one changed word in the tools branch, which the no-tools text never shows
    LLAMA31_VARIANT = _f.read().replace("Do not use variables.", "Do not use globals.")


def test_any_template_is_the_checkpoints():
    """The checkpoint's template, whatever it is, rendered as jinja2 renders it (tests/test_chat_template.py checks
    the interpreter itself): templates the fixed list of families refused before render now; a template that is not
    Jinja llmcc reads is refused naming its line and column and --no-chat; one that raises on the conversation names
    its message. Plain tokenizing never needs the template."""
    ok = {"plain ChatML": (CHATML, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
          "list form": ([{"name": "tool_use", "template": "{{ x }}"}, {"name": "default", "template": CHATML}],
                        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
          "Qwen2 default system": (CHATML.replace("{% for message in messages %}",
                                                  "{% for message in messages %}{% if loop.first and messages[0]['role'] "
                                                  "!= 'system' %}{{ '<|im_start|>system\\nYou are a helpful "
                                                  "assistant.<|im_end|>\\n' }}{% endif %}"),
                                   "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                   "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
          "content alone": ("{% for m in messages %}{{ m['content'] }}{% endfor %}", "hi"),
          "text outside tags": ("X" + CHATML, "X<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
          "thinking": (CHATML.replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant\\n<think>\\n'"),
                       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"),
          "Zephyr on one line": (ZEPHYR.replace("\n", ""), "<|user|>hi<|im_end|><|assistant|>")}   # eos: <|im_end|>
    for title, (tpl, want) in ok.items():
        d = template_dir("ok", tpl)
        text = run([LLMCC, "tokenize", d, "--chat", "--text", "hi"]).stdout
        assert text == want, (title, text)
    d = template_dir("jinja", CHATML, jinja_file=True)
    assert run([LLMCC, "tokenize", d, "--chat", "--text", "hi"]).stdout.startswith("<|im_start|>user\nhi")
    bad = {"not closed": ("{% for m in messages %}{{ m['content'] }}", "line 1, column 4: 'for' is never closed"),
           "unknown tag": ("{% include 'other.jinja' %}", "unknown tag 'include' (not supported)"),
           "list without default": ([{"name": "rag", "template": CHATML}], "default")}
    for title, (tpl, word) in bad.items():
        d = template_dir("bad", tpl)
        p = run([LLMCC, "tokenize", d, "--chat", "hi"], check=False)
        err = p.stderr.strip()
        assert p.returncode == 1 and len(err.splitlines()) == 1 and err.startswith("llmcc: ") and "chat_template" in err \
            and word in err, (title, p.returncode, err)
        assert "--no-chat" in err or title == "list without default", err
        # plain tokenizing does not need the template
        assert run([LLMCC, "tokenize", d, "hi"]).stdout.split() == \
            run([LLMCC, "tokenize", template_dir("ok", CHATML), "hi"]).stdout.split()
    d = template_dir("raises", "{% if messages[0]['role'] != 'system' %}{{ raise_exception('System first, "
                                "please') }}{% endif %}" + CHATML)
    p = run([LLMCC, "tokenize", d, "--chat", "hi"], check=False)
    assert p.returncode == 1 and p.stderr.strip().endswith("line 1: raise_exception: System first, please"), p.stderr
    # the messages go to the template as they are (any role, tool calls); a file that is not a list of them: one
    # line naming the place
    d = template_dir("ok", CHATML)
    text = run([LLMCC, "tokenize", d, "--text", "--chat-messages",
                messages_file_raw([{"role": "bot", "content": "x"}, {"role": "tool", "content": "42"}], "roles")]).stdout
    assert text == "<|im_start|>bot\nx<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n", text
    for title, content, word in (("nested", [[{"role": "user", "content": "x"}], []], "[1]: expected a list of messages"),
                                 ("empty", [], "expected a list of messages"),
                                 ("object", {"role": "user"}, "expected a list of messages")):
        p = run([LLMCC, "tokenize", d, "--chat-messages", messages_file_raw(content, "bad_" + title)], check=False)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and word in p.stderr, (title, p.stderr)
    # no template at all: --chat says so
    d = template_dir("none", None)
    p = run([LLMCC, "tokenize", d, "--chat", "hi"], check=False)
    assert p.returncode == 1 and "no chat template" in p.stderr, p.stderr


def _blob_chat_bytes(payload):
    with open(payload, "rb") as f:
        b = f.read()
    i = b.find(b"LTOK")
    assert i >= 0
    ver, nchat = int.from_bytes(b[i + 4:i + 8], "little"), int.from_bytes(b[i + 44:i + 48], "little")
    assert ver == 3
    return nchat


def _tokens_bytes(d):
    """the bytes of bos_token's and eos_token's texts in DIR's tokenizer_config.json (the blob keeps them)"""
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        tc = json.load(f)
    text = lambda v: v if isinstance(v, str) else (v or {}).get("content", "")
    return sum(len(text(tc.get(k)).encode()) for k in ("bos_token", "eos_token"))


def test_build_keeps_the_template():
    """llmcc build puts the checkpoint's template in the executable as it is; --no-chat leaves it out; one that is
    not Jinja llmcc reads is refused (one line naming its line and --no-chat); --chat-template FILE replaces it"""
    d = template_dir("build", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    out = os.path.join(tmpdir("chat_tpl_build_out"), "proj")
    run([LLMCC, "build", d, "-o", out, "--target", "cpu"])
    tpl = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert _blob_chat_bytes(os.path.join(out, "payload.bin")) == 20 + len(tpl) + _tokens_bytes(d)
    run([LLMCC, "build", d, "-o", out, "--target", "cpu", "--no-chat"])
    assert _blob_chat_bytes(os.path.join(out, "payload.bin")) == 0
    d = template_dir("build", "{% for m in messages %}{{ m['content'] }")
    p = run([LLMCC, "build", d, "-o", out, "--target", "cpu"], check=False)
    assert p.returncode == 1 and "--no-chat" in p.stderr and "line 1, column" in p.stderr and \
        len(p.stderr.strip().splitlines()) == 1, p.stderr
    f = os.path.join(tmpdir("chat_tpl_build_out"), "mine.jinja")
    with open(f, "w") as fh:
        fh.write(CHATML)
    run([LLMCC, "build", d, "-o", out, "--target", "cpu", "--chat-template", f])
    assert _blob_chat_bytes(os.path.join(out, "payload.bin")) == 20 + len(CHATML) + _tokens_bytes(d)


CHAT_FUZZ_C = r'''
/* packs DIR, then loads variants of the blob: as v1 without the chat section, and with
 * bytes of the chat section changed; every one must load or fail cleanly, and render. */
#include "tokenizer_pack.h"
#include "tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int try_blob(const uint8_t *b, size_t n) {
    Tokenizer *t;
    if (tokenizer_load(&t, b, n)) return 0;
    ChatMsg m[3] = { { "system", "s", 1 }, { "user", " u\n", 3 }, { "assistant", "a", 1 } };
    size_t len;
    char err[256];
    char *s = tokenizer_chat_render(t, m, 3, true, TOK_THINK_DEFAULT, NULL, &len, err, sizeof err);
    if (tokenizer_has_chat(t) && s && strlen(s) != len) { fprintf(stderr, "render\n"); exit(3); }
    free(s);
    tokenizer_free(t);
    return 1;
}
int main(int argc, char **argv) {
    (void)argc;
    Arena a = {0};
    size_t n;
    uint8_t *blob = tokenizer_pack(&a, argv[1], &n);
    uint32_t nchat = (uint32_t)blob[44] | (uint32_t)blob[45] << 8 | (uint32_t)blob[46] << 16 | (uint32_t)blob[47] << 24;
    uint8_t *b = malloc(n);
    /* v1: no chat section */
    memcpy(b, blob, n);
    b[4] = 1; memset(b + 44, 0, 4);
    Tokenizer *t;
    if (tokenizer_load(&t, b, n - nchat)) { fprintf(stderr, "v1 does not load\n"); return 4; }
    printf("v1 chat %d eot %d\n", tokenizer_has_chat(t), tokenizer_chat_eot(t));
    tokenizer_free(t);
    if (!tokenizer_load(&t, b, n)) { fprintf(stderr, "v1 with trailing bytes loads\n"); return 4; }
    int ok = 0;
    srand(7);
    for (int it = 0; it < 3000; it++) {
        memcpy(b, blob, n);
        size_t sz = n;
        if (it % 3 == 0) sz = n - 1 - (size_t)rand() % nchat;
        else for (int k = 1 + rand() % 3; k > 0; k--) b[n - nchat + (size_t)rand() % nchat] = (uint8_t)(rand() % 3 ? rand() : 0xFF);
        ok += try_blob(b, sz);
    }
    printf("chat fuzz: %d of 3000 loaded\n", ok);
    free(b);
    arena_free(&a);
    return 0;
}
'''


def test_chat_blob_versions_and_corruption():
    from testlib import build_c
    src = os.path.join(tmpdir("chat"), "chat_fuzz.c")
    with open(src, "w") as f:
        f.write(CHAT_FUZZ_C)
    exe = build_c("chat_fuzz", [src, "runtime/tokenizer.c", "compiler/tokenizer_pack.c", "compiler/json.c", "runtime/json.c",
                                "compiler/util.c", "runtime/jinja.c"],
                  libs=("-lutf8proc", "-lm"))
    d = template_dir("fuzz", CHATML.replace("{% for message in messages %}",
                                            "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                                            "{{ '<|im_start|>system\\nDefault.<|im_end|>\\n' }}{% endif %}"))
    p = run([exe, d])
    assert "v1 chat 0 eot -1" in p.stdout and "chat fuzz:" in p.stdout, p.stdout


# ---------------------------------------------------------------- the chat at a terminal
class Terminal:
    """An executable on a pseudo-terminal of its own (its controlling terminal: Ctrl-C is the terminal's SIGINT),
    stdin, stdout and stderr all on it, as a user runs it."""

    def __init__(self, argv):
        import pty
        self.pid, self.fd = pty.fork()
        if self.pid == 0:   # the child: the terminal is its stdin, stdout, stderr and controlling terminal
            os.execve(argv[0], argv, dict(os.environ, OMP_NUM_THREADS="1", TERM="xterm"))
        self.out = b""

    def read_until(self, pred, timeout=60):
        """Reads until pred(all output so far) holds; returns the output."""
        import select
        end = time.time() + timeout
        while not pred(self.out):
            left = end - time.time()
            assert left > 0, "timed out; the terminal shows: %r" % self.out[-2000:]
            if select.select([self.fd], [], [], min(left, 0.5))[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:   # EIO: the child is gone
                    chunk = b""
                assert chunk, "the program ended; the terminal shows: %r" % self.out[-2000:]
                self.out += chunk
        return self.out

    def prompts(self):
        return self.out.count(b"> ")

    def say(self, text):
        """Types a line, then waits for the reply's first id (--ids) after the echo of the line."""
        mark = len(self.out)
        os.write(self.fd, text.encode() + b"\r")
        self.read_until(lambda o: re.search(rb"\r\n\d+", o[mark:]) is not None)
        return mark

    def wait_editing(self, timeout=60):
        """Waits until libedit has the terminal (no line discipline of its own: ICANON off)."""
        import termios
        end = time.time() + timeout
        while termios.tcgetattr(self.fd)[3] & termios.ICANON:
            assert time.time() < end, "the terminal never left canonical mode"
            time.sleep(0.01)

    def wait_prompt(self, n):
        self.read_until(lambda o: o.count(b"> ") >= n)

    def replies(self, start=0):
        """The lines of ids printed after start (the terminal echoes a Ctrl-C as ^C)"""
        return [[int(x) for x in ln.split()]
                for ln in re.findall(rb"(?m)^(\d+(?: \d+)*)\r?$", self.out[start:].replace(b"^C", b""))]

    def wait(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:
                self.read_until(lambda o: False, timeout=0.2)
            except AssertionError:
                pass
        raise AssertionError("still running: %r" % self.out[-2000:])


def qwen_exe_1k():
    """The qwen2-tok fixture with a context of 1024: a reply long enough (~1 ms a token) to be stopped midway."""
    shared("tokenizers", "qwen2.5-instruct", "tokenizer.json")
    fx = model_fixture("qwen2-tok", "bf16", seed=0)
    return os.path.join(build_exe(fx, "cpu", ["--ctx", "1024", "--name", "qwen"]), "qwen"), fx


def test_chat_on_a_terminal_ctrl_c_stops_the_reply_and_keeps_the_conversation():
    """Three turns, each reply stopped by Ctrl-C midway; the third turn's reply is what a fresh run over the whole
    conversation's ids gives (so the first two turns, cut where they were, are in its cache); then Ctrl-C twice
    at the prompt leaves (rc 0)."""
    exe, fx = qwen_exe_1k()
    t = Terminal([exe, "-i", "--temperature", "0", "--ids", "--ignore-eos", "-n", "900"])
    t.wait_prompt(1)
    turns = []
    for k, msg in enumerate(("Hi", "How are you?", "again")):
        mark = t.say(msg)
        os.write(t.fd, b"\x03")
        t.wait_prompt(k + 2)
        (reply,) = t.replies(mark)
        assert 0 < len(reply) < 900 - 1, (k, len(reply))   # stopped midway
        turns.append((msg, reply))
    first = ids_out(q("--prompt", "Hi", "--tokenize"))[0]
    conv = first + turns[0][1]
    for msg, reply in turns[1:]:
        delta = [int(x) for x in run([LLMCC, "tokenize", fx, "<|im_end|>\n<|im_start|>user\n" + msg +
                                      "<|im_end|>\n<|im_start|>assistant\n"]).stdout.split()]
        prompt = conv + delta
        conv = prompt + reply
    n = min(6, len(turns[2][1]))
    again = ids_out(run([exe, "--prompt-ids", ",".join(map(str, prompt)), "--temperature", "0", "--ids",
                         "--ignore-eos", "-n", str(n)], check=False, env={"OMP_NUM_THREADS": "1"}))[0]
    assert again == turns[2][1][:n], (again, turns[2][1][:n])
    os.write(t.fd, b"\x03")
    t.read_until(lambda o: b"Ctrl-C again" in o)
    os.write(t.fd, b"\x03")
    assert t.wait() == 0


def test_chat_on_a_terminal_past_the_context_clear_and_bye():
    """--ctx 256: turns go on past the context (the oldest left out, said once); /clear starts afresh (the reply
    to "Hi" is the first turn's again); /help; /bye leaves with rc 0. Line editing: the left arrow moves the
    cursor (libedit), it does not type ^[[D."""
    exe, fx = qwen_exe_1k()
    t = Terminal([exe, "-i", "--ctx", "256", "--temperature", "0", "--ids", "--ignore-eos", "-n", "40"])
    t.wait_prompt(1)
    mark = t.say("Hi")
    t.wait_prompt(2)
    (hi,) = t.replies(mark)
    assert len(hi) == 40
    for k in range(8):
        t.say("turn %d" % k)
        t.wait_prompt(3 + k)
    assert t.out.count(b"the conversation outgrew the context (256 tokens") == 1, t.out
    assert len(t.replies(mark)) == 9
    os.write(t.fd, b"/clear\r")
    t.read_until(lambda o: b"the conversation is cleared" in o)
    t.wait_prompt(11)
    mark = t.say("Hi")
    t.wait_prompt(12)
    assert t.replies(mark) == [hi]
    t.wait_editing()   # typed ahead, the keys would be echoed by the terminal itself, before libedit reads them
    mark = t.say("H\x1b[Di\x1b[C")   # "H", left, "i" before it, right: "iH"
    t.read_until(lambda o: o.endswith(b"> "))
    assert b"^[[D" not in t.out[mark:] and b"iH" in t.out[mark:], t.out[mark:]
    os.write(t.fd, b"/help\r")
    t.read_until(lambda o: b"/system TEXT" in o)
    os.write(t.fd, b"/bye\r")
    assert t.wait() == 0


def test_chat_from_a_pipe_and_the_prompt_on_stdin():
    """Without a terminal: -i reads messages line by line (commands and \"\"\" blocks too); with no prompt at all
    the text on stdin is the prompt; a positional prompt and -f FILE are prompts too; --stop ends a reply."""
    exe, fx = qwen_exe()
    one = q("-p", "What is the capital of France?", "--temperature", 0, "--ids", "-n", 5)
    assert one.returncode == 0, one.stderr
    for args, inp in (([], "What is the capital of France?\n"), (["-p", "-"], "What is the capital of France?"),
                      (["What", "is", "the", "capital", "of", "France?"], None)):
        p = q(*args, "--temperature", 0, "--ids", "-n", 5, input=inp)
        assert p.returncode == 0 and p.stdout == one.stdout, (args, p.stdout, p.stderr)
    f = os.path.join(tmpdir("chat_file"), "prompt.txt")
    open(f, "w").write("What is the capital of France?")
    assert q("-f", f, "--temp", 0, "--ids", "-n", 5).stdout == one.stdout
    p = q("-i", "--temperature", 0, "--ids", "-n", 4, "--ignore-eos",
          input='Hi\n/help\n"""\nline one\n\nline two\n"""\n/nonsense\n/system Be brief.\nagain\n/bye\nnever\n')
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 3, (p.stdout, p.stderr)
    assert "unknown command /nonsense" in p.stderr and "/clear" in p.stderr, p.stderr
    # the block is one message of two lines with a blank one between
    block = ids_out(q("-i", "--temperature", 0, "--ids", "-n", 4, "--ignore-eos", input='"""\nline one\n\nline two\n"""\n'))
    same = ids_out(q("-p", "line one\n\nline two", "--temperature", 0, "--ids", "-n", 4, "--ignore-eos"))
    assert block == same, (block, same)
    # --stop: the reply (as text) ends right before the stop string
    full = q("-p", "Hi", "--temperature", 0, "-n", 12, "--ignore-eos", "--no-chat")
    assert full.returncode == 0 and len(full.stdout) > 4, full
    cut = full.stdout[2:4]
    p = q("-p", "Hi", "--temperature", 0, "-n", 12, "--ignore-eos", "--no-chat", "-r", cut)
    assert p.returncode == 0 and p.stdout == full.stdout[:full.stdout.index(cut)] + "\n", (p.stdout, full.stdout)
