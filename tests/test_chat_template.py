"""test_chat_template: the chat template as a program the executable runs (runtime/jinja.c), through
`llmcc chat-template`. References: Python's jinja2 configured as transformers' apply_chat_template configures it
(../shared/assets/chat-templates: 21 real templates x 16 conversations, rendered by jinja2 with and without the
generation prompt; and jinja2 itself, where installed, on small templates that exercise one feature each)."""
import json
import os
import re
import subprocess

from testlib import LLMCC, SHARED, Skip, run, tmpdir

CORPUS = os.path.join(SHARED, "chat-templates")
NOW = "2025-01-15T12:00:00"   # the corpus's fixed clock (its README)


def corpus():
    if not os.path.isdir(CORPUS):
        raise Skip("../shared/assets/chat-templates is absent")
    convs = {c["id"]: c for c in json.load(open(os.path.join(CORPUS, "public", "conversations.json")))["conversations"]}
    return convs, json.load(open(os.path.join(CORPUS, "public", "expected.json")))["records"]


def render(source, messages, tools=None, kwargs=None, agp=False, check=True):
    d = tmpdir("chat_template")
    tag = "%d-%d" % (os.getpid(), abs(hash((source, json.dumps(messages), json.dumps(tools), agp))))
    mpath = os.path.join(d, "m-%s.json" % tag)
    with open(mpath, "w") as f:
        json.dump(messages, f, ensure_ascii=False)
    args = [LLMCC, "chat-template", source, "--messages", mpath, "--now", NOW]
    if tools is not None:
        tpath = os.path.join(d, "t-%s.json" % tag)
        with open(tpath, "w") as f:
            json.dump(tools, f, ensure_ascii=False)
        args += ["--tools", tpath]
    if kwargs:
        args += ["--kwargs", json.dumps(kwargs, ensure_ascii=False)]
    if agp:
        args.append("--add-generation-prompt")
    p = subprocess.run(args, capture_output=True)
    if check:
        assert p.returncode == 0, (source, p.stderr.decode())
    return p


def test_corpus_renders_as_jinja2():
    """Every template of the corpus, every conversation, with and without the generation prompt: the text jinja2
    renders, byte for byte; where jinja2 raises, exit 1 with one line (the template's own message where it called
    raise_exception)"""
    convs, records = corpus()
    failures = []
    for r in records:
        c = convs[r["conversation_id"]]
        src = os.path.join(CORPUS, "public", "templates", r["template_id"] + ".jinja")
        kwargs = dict(json.load(open(src[:-6] + ".json"))["context"])
        kwargs.update(c.get("kwargs", {}))
        p = render(src, c["messages"], c.get("tools"), kwargs, r["add_generation_prompt"], check=False)
        err = p.stderr.decode()
        where = (r["template_id"], r["conversation_id"], r["add_generation_prompt"])
        if r["ok"]:
            if p.returncode != 0 or p.stdout.decode() != r["text"]:
                failures.append((where, err or p.stdout.decode()[:400]))
        else:
            e = r["error"]
            said = "raise_exception: " + e["message"] if e["kind"] == "raise_exception" else ""
            if p.returncode != 1 or said not in err or err.count("\n") != 1 or p.stdout:
                failures.append((where, e, err))
    assert not failures, "%d of %d differ: %s" % (len(failures), len(records), failures[:5])
    assert len(records) == 672


def test_model_directory_and_its_tokens():
    """SOURCE a model directory: tokenizer_config.json's chat_template with its bos_token / eos_token (Qwen2.5's
    has no bos: the template does not print one); --kwargs replace them"""
    d = os.path.join(SHARED, "tokenizers", "qwen2.5-instruct")
    if not os.path.isdir(d):
        raise Skip("../shared/assets/tokenizers/qwen2.5-instruct is absent")
    msgs = [{"role": "user", "content": "Hi"}]
    out = render(d, msgs, agp=True).stdout.decode()
    assert out == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                   "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"), out
    tpl = os.path.join(tmpdir("chat_template"), "tokens.jinja")
    with open(tpl, "w") as f:
        f.write("{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}")
    assert render(tpl, msgs).stdout.decode() == "||True|True"   # a template file has no tokens of its own
    assert render(tpl, msgs, kwargs={"bos_token": "<s>", "eos_token": "</s>"}).stdout.decode() == "<s>|</s>|True|True"
    # every tokenizer directory's own template, as jinja2 renders it with the directory's tokens
    env = jinja2_env()
    for name in ("qwen2.5-instruct", "llama3-instruct", "qwen3"):
        d = os.path.join(SHARED, "tokenizers", name)
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
        tok = {k: cfg[k] if isinstance(cfg[k], str) else cfg[k]["content"] for k in ("bos_token", "eos_token")
               if cfg.get(k)}
        for agp in (False, True):
            msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}]
            want = env.from_string(cfg["chat_template"]).render(messages=msgs, tools=None, documents=None,
                                                                 add_generation_prompt=agp, **tok)
            assert render(d, msgs, agp=agp).stdout.decode() == want, name


def write(name, text):
    path = os.path.join(tmpdir("chat_template"), name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_errors_name_line_and_column():
    """A template that is not Jinja llmcc reads: one line naming the file, the line and the column; a raise names
    the template's message; a bad --now, --messages or --kwargs: one line naming it"""
    cases = [
        ("{% if x %}\nno end", r"line 1, column 4: 'if' is never closed \(expected 'endif'\)"),
        ("ok\n{{ x + }}", r"line 2, column 8: unexpected '}}', expected an expression"),
        ("{% for x in y %}{% endif %}", r"line 1, column 20: unexpected 'endif' \(expected 'endfor'\)"),
        ("{% include 'x' %}", r"line 1, column 4: unknown tag 'include' \(not supported\)"),
        ("{{ 'abc }}", r"line 1, column 4: the string is not closed"),
        ("a\n  {# never closed", r"line 2, column 3: the comment is not closed \(expected '#}'\)"),
        ("{{ x | }}", r"line 1, column 8: unexpected '}}', expected a name"),
    ]
    for i, (text, want) in enumerate(cases):
        path = write("bad%d.jinja" % i, text)
        p = render(path, [], check=False)
        err = p.stderr.decode()
        assert p.returncode == 1 and err.count("\n") == 1 and re.match("llmcc: %s: %s\n" % (re.escape(path), want),
                                                                        err), (text, err)
    path = write("raises.jinja", "{% if messages | length < 2 %}\n{{ raise_exception('Need two, got ' ~ "
                                 "messages | length) }}{% endif %}")
    p = render(path, [{"role": "user", "content": "x"}], check=False)
    assert p.returncode == 1 and p.stderr.decode() == "llmcc: %s: line 2: raise_exception: Need two, got 1\n" % path
    for extra, want in [(["--now", "yesterday"], "llmcc: --now: 'yesterday' is not YYYY-MM-DDTHH:MM:SS"),
                        (["--kwargs", "[1]"], "llmcc: --kwargs: expected a JSON object")]:
        p = run([LLMCC, "chat-template", path, "--messages", os.devnull] + extra, check=False)
        assert p.returncode == 1, p.stderr
    mpath = write("notalist.json", '{"role": "user"}')
    p = run([LLMCC, "chat-template", path, "--messages", mpath], check=False)
    assert p.returncode == 1 and p.stderr == "llmcc: %s: --messages: expected a JSON list of messages\n" % mpath


def test_bounded():
    """A template that would run for ever or grow without end stops with one line saying which bound it met"""
    cases = [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "more than 10000000 loop iterations, calls and filter items"),
        ("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         "a text of more than 16777216 bytes"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "calls nested more than 64 deep"),
        ("{{ 'x' * 100000000 }}", "a string of more than 16777216 bytes"),
        ("{{ ('' * 2222222222) ~ ([] * 2222222222) | length }}{{ 'x' * 100000000 }}", "a string of more than 16777216"),
        ("{{ 2 ** 100 }}", "integer overflow"),
    ]
    for i, (text, want) in enumerate(cases):
        p = render(write("bounded%d.jinja" % i, text), [], check=False)
        err = p.stderr.decode()
        assert p.returncode == 1 and want in err and err.count("\n") == 1, (text, err)


# one feature each, rendered by jinja2 configured as transformers configures it and by llmcc
FEATURES = [
    # whitespace: trim_blocks, lstrip_blocks, - and +
    "a\n  {% if true %}\n  b\n  {% endif %}\nc\n",
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "x {{- ' y ' -}} z\n{# c #}\n  {#- d -#}  e",
    "  {%+ if true %}kept{% endif %}\n\t{% if true %}t{% endif %}",
    "{% for i in [1, 2] %}\n{{ i }}\n{% endfor %}\n",
    "line\r\n{% if true %}\r\nx{% endif %}",
    # literals, printing (Python's str and repr)
    "{{ 1 }} {{ 1.5 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 1e-7 }} {{ 123456789.0 }} {{ -0.0 }}",
    "{{ true }} {{ none }} {{ [1, 'a', none, true, 2.0] }} {{ {'k': \"it's\", 'q': 'a\"b'} }} {{ (1,) }} {{ () }}",
    "{{ 'a\\tb\\n' | tojson }} {{ 'caf\\u00e9 \\x41' }} {{ \"q'\" ~ 'x' }} {{ 'ab' 'cd' }}",
    "{{ v }} {{ v | tojson }} {{ v | tojson(indent=2) }} {{ v | tojson(sort_keys=true) }}",
    "{{ v | tojson(separators=(',', ':')) }} {{ [] | tojson(indent=2) }} {{ {} | tojson }} {{ v | tojson(indent='\t') }}",
    "{{ s | tojson }} {{ s | length }} {{ s[1] }} {{ s[1:3] }} {{ s[-2:] }} {{ s[::-1] }} {{ s | upper }}",
    "{{ l[::-2] }} {{ l[3:0:-1] }} {{ l[-10:10] }} {{ l[5:1] }} {{ s[10:] }} {{ s[:-1] }} {{ s[-3::-1] }} {{ l[1:-1] }}",
    # arithmetic and comparison
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7.5 // 2 }} {{ 'ab' * 3 }} {{ [1] * 2 }}",
    "{{ 1 < 2 < 3 }} {{ 1 < 2 > 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ 1 == 1.0 }}",
    "{{ not 0 }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or none }} {{ 'a' if 0 else 'b' }} {{ 'c' if 1 }}[{{ 'c' if 0 }}]",
    "{{ -x }} {{ +x }} {{ x - 1 }} {{ [1, 2] + [3] }} {{ 'a' ~ 1 ~ none ~ true }} {{ 1 + 2 * 3 - 4 / 2 }}",
    # variables, attributes and items
    "{{ d.a }} {{ d['a'] }} {{ d.missing is defined }} {{ d.b.c }} {{ l[0] }} {{ l[-1] }} {{ l[9] is defined }}",
    "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 5) }}",
    "{{ none.x is defined }} {{ l.0 }} {{ undefined_var }} {{ undefined_var is undefined }}",
    # loops
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
    "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.cycle('a', 'b') }}|{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.last }}{% else %}empty{% endfor %}{% for x in [] %}{% else %}E{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for c in 'héllo' %}[{{ c }}]{% endfor %}",
    "{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}{% for y in [0] %}{{ loop.depth }}{% endfor %},{% endfor %}",
    "{% set t = 'out' %}{% for x in l %}{% set t = x %}{% endfor %}{{ t }}",
    # set, namespace, macros, call, filter blocks
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set ns = namespace(n=0) %}{% for x in l %}{% set ns.n = ns.n + x %}"
    "{% endfor %}{{ ns.n }}",
    "{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]",
    "{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}",
    "{% macro w(x) %}[{{ caller() }}{{ x }}]{% endmacro %}{% call w(5) %}body{% endcall %}",
    "{% filter upper %}shout {{ 'this' }}{% endfilter %}",
    "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ range(3) | list }} {{ range(1, 10, 3) | list }}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %d %b %Y') }}",
    # filters
    "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ l | join(', ') }}|{{ l | first }}{{ l | last }}|{{ l | length }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | rejectattr('role', 'eq', 'user') "
    "| map(attribute='content') | join(',') }} {{ msgs | map(attribute='x', default='d') | list }}",
    "{{ l | select('odd') | list }} {{ l | reject('even') | list }} {{ [0, 1, '', 'a'] | select | list }}",
    "{{ x | default('d') }} {{ undefined_var | default('d') }} {{ '' | default('e', true) }} {{ none | string }}",
    "{{ 'Hello World' | lower }} {{ 'hello wORLD-x(y' | title }} {{ 'hello' | capitalize }} {{ 'a-b' | replace('-', '+') }}",
    "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}",
    "{{ d | items | list }} {{ d | dictsort }} {{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort(reverse=true) }}",
    "{{ [1, 2, 2, 1] | unique | list }} {{ l | sum }} {{ l | max }} {{ l | min }} {{ l | reverse | list }}",
    "{{ '3' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ 2.567 | round(2) }} {{ -3 | abs }} {{ '<&>' | e }}",
    "{{ 'one two  three' | wordcount }} {{ l | count }} {{ 'abc' | list }} {{ 5 | string }} {{ 'x' | safe }}",
    # tests
    "{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ 's' is string }}{{ d is mapping }}{{ l is iterable }}",
    "{{ l is sequence }}{{ none is none }}{{ true is boolean }}{{ false is false }}{{ 4 is divisibleby 2 }}"
    "{{ 3 is odd }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 'a' is in 'abc' }}",
    "{% macro m() %}{% endmacro %}{{ x is not defined }}{{ x is not none }}{{ m is callable }}",
    # str methods
    "{{ s.startswith('he') }}{{ s.endswith(('x', 'lo')) }}{{ '  a b  c '.split() }}{{ 'a,b,,c'.split(',') }}"
    "{{ 'a b c'.split(' ', 1) }}{{ ' x '.strip() }}|{{ 'xyx'.strip('x') }}|{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|",
    "{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'hello world'.title() }}{{ 'aaa'.replace('a', 'b', 2) }}"
    "{{ 'abc'.find('c') }}{{ 'abab'.count('ab') }}{{ '{} and {}'.format(1, 'x') }}{{ '-'.join(['a', 'b']) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }}{{ '12'.isdigit() }}{{ 'ÉCOLE'.lower() }}{{ 'straße'.upper() }}",
]
VARS = {"v": {"b": [1, 2.5, None, True, "é\"\\"], "a": {"x": "y"}}, "s": "héllo", "x": 5,
        "d": {"a": 1, "b": {"c": "deep"}}, "l": [1, 2, 3, 4],
        "msgs": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
                 {"role": "user", "content": "u2"}]}


def jinja2_env():
    try:
        import jinja2.ext
        import jinja2.sandbox
    except ImportError:
        raise Skip("jinja2 (PyPI) is not installed (make deps)")
    from datetime import datetime
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):   # transformers' tojson
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, dict=dict, namespace=jinja2.utils.Namespace,
                       strftime_now=lambda fmt: datetime(2025, 1, 15, 12, 0, 0).strftime(fmt))
    return env


def test_features_as_jinja2_renders_them():
    """Small templates, one feature each (whitespace rules, literals and Python's printing of values, operators,
    loops, scopes, macros, filters, tests, str methods): the text jinja2 renders, configured as transformers does"""
    env = jinja2_env()
    for i, text in enumerate(FEATURES):
        want = env.from_string(text).render(messages=[], tools=None, documents=None, add_generation_prompt=False,
                                            **VARS)
        got = render(write("feature%d.jinja" % i, text), [], kwargs=VARS, check=False)
        assert got.returncode == 0 and got.stdout.decode() == want, (text, want, got.stdout.decode(),
                                                                     got.stderr.decode())


# what jinja2 raises at render time, llmcc refuses too (one line, exit 1)
RAISES = [
    "{{ undefined_var.attr }}", "{{ undefined_var + 1 }}", "{{ undefined_var() }}", "{% for x in none %}{% endfor %}",
    "{% for x in 5 %}{% endfor %}", "{{ 1 + 'a' }}", "{{ 1 / 0 }}", "{{ 1 < 'a' }}", "{{ [1] | tojson(indent=1.5) }}",
    "{% set a, b = [1] %}", "{{ 'x'.split('') }}", "{{ range(1, 2, 0) }}", "{{ raise_exception('custom') }}",
]


def test_raises_where_jinja2_raises():
    env = jinja2_env()
    for i, text in enumerate(RAISES):
        try:
            env.from_string(text).render(**VARS)
            raise AssertionError("jinja2 renders %r" % text)
        except Exception as e:
            assert not isinstance(e, AssertionError), e
        p = render(write("raises%d.jinja" % i, text), [], kwargs=VARS, check=False)
        assert p.returncode == 1 and p.stderr.decode().count("\n") == 1 and not p.stdout, (text, p.stderr.decode())


# Mistral-7B-Instruct-v0.3's control tokens, at the ids they have there (its vocabulary: Llama 2's 32000, then these)
MISTRAL_CONTROL = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                   "[/TOOL_RESULTS]"]


def mistral_v03_dir():
    """A Mistral-7B-Instruct-v0.3-shaped checkpoint: its config (../shared/assets/hf-configs) made small (hidden 64,
    2 layers; vocabulary, rope, norms as they are), Llama 2's SentencePiece vocabulary with Mistral's control tokens
    added, and its chat template from the corpus, as the checkpoint carries it; no weights (--random-weights)"""
    import shutil
    import sys
    from testlib import ROOT, shared
    tpl = os.path.join(CORPUS, "public", "templates", "mistral-7b-instruct-v0.3.jinja")
    cfg_path = shared("hf-configs", "Mistral-7B-v0.3.config.json")
    tok_bin = shared("tokenizers", "llama2", "tokenizer.bin")
    if not os.path.exists(tpl):
        raise Skip("../shared/assets/chat-templates is absent")
    d = os.path.join(tmpdir("chat_template"), "mistral-v0.3")
    shutil.rmtree(d, ignore_errors=True)
    run([sys.executable, os.path.join(ROOT, "scripts", "convert_llama2c.py"), "--tokenizer-only", tok_bin, d])
    with open(os.path.join(d, "tokenizer.json")) as f:
        tok = json.load(f)
    for i, t in enumerate(MISTRAL_CONTROL):
        tok["added_tokens"].append({"id": 32000 + i, "content": t, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)   # as HF writes it (the packer compares some strings as written)
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        tc = json.load(f)
    with open(tpl, encoding="utf-8", newline="") as f:
        tc.update(chat_template=f.read(), bos_token="<s>", eos_token="</s>")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.update(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return d


def test_mistral_v03_shaped_build_chats():
    """A checkpoint the fixed list of templates refused ([INST] ... [/INST]): built as it is, its template renders
    the corpus's conversations as jinja2 does, its end of turn is </s> (found by rendering), and the executable
    chats: a prompt, then two turns at -i, each the whole conversation rendered again"""
    from testlib import build_exe
    convs, records = corpus()
    d = mistral_v03_dir()
    for r in records:
        if r["template_id"] != "mistral-7b-instruct-v0.3" or not r["ok"] or r["conversation_id"] in \
                ("c16_date_string", "c15_enable_thinking_false"):
            continue
        c = convs[r["conversation_id"]]
        p = render(d, c["messages"], c.get("tools"), agp=r["add_generation_prompt"])
        assert p.stdout.decode() == r["text"], (r["conversation_id"], p.stdout.decode(), r["text"])
    text = run([LLMCC, "tokenize", d, "--chat", "--text", "Hi"]).stdout
    assert text == "<s>[INST] Hi[/INST]", text
    ids = [int(x) for x in run([LLMCC, "tokenize", d, "--chat", "Hi"]).stdout.split()]
    assert ids[:2] == [1, 32000] and ids[-1] == 32001, ids   # <s> [INST] ... [/INST]: the control tokens
    out = build_exe(d, "cpu", ["--random-weights", "1", "--ctx", "256", "--name", "m"])
    exe = os.path.join(out, "m")
    info = run([exe, "--info"]).stdout
    assert re.search(r"^chat template: the checkpoint's \(\d+ bytes of Jinja\), end of turn 2$", info, re.M), info
    assert [int(x) for x in run([exe, "--prompt", "Hi", "--tokenize"]).stdout.split()] == ids
    p = run([exe, "-i", "--temperature", "0", "-n", "3", "--ignore-eos", "--stats"], input="Hi\nAnd again?\n")
    assert p.returncode == 0 and "turns: 2" in p.stderr, p.stderr
    # a conversation the template refuses (two user turns in a row): one line, and the server's 400
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    said = "raise_exception: After the optional system message, conversation roles must alternate " \
           "user/assistant/user/assistant/..."
    p = run([LLMCC, "tokenize", d, "--chat-messages", write("two_users.json", json.dumps(two))], check=False)
    assert p.returncode == 1 and said in p.stderr, p.stderr
    import http.client
    srv = subprocess.Popen([exe, "--serve", "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "serving on" not in line and srv.poll() is None:
            line += srv.stderr.readline()
        port = int(re.search(r"serving on http://127\.0\.0\.1:(\d+)/v1", line).group(1))
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for msgs, status in ((two, 400), (two[:1], 200)):
            c.request("POST", "/v1/chat/completions", json.dumps({"messages": msgs, "max_tokens": 2}),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            body = json.loads(r.read())
            assert r.status == status, body
            if status == 400:
                assert body["error"]["param"] == "messages" and said in body["error"]["message"], body
    finally:
        srv.kill()
        srv.wait()
