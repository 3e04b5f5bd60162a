"""test_grammar: runtime/grammar.c, the constrained-decoding engine (GBNF -> a byte-level pushdown automaton, and
the mask of the tokens that keep the output inside the grammar), through tests/c/grammar_test.c.

References independent of the engine: which strings a grammar takes is checked against Python's json.loads (the
JSON-object grammar), re.fullmatch (the regular grammars, written again as regular expressions) and small
recursive-descent recognizers written here (arithmetic, brackets). The masks (a trie walk from an interned,
memoized state, cached per state) are checked against the brute force of grammar_mask_brute: every token's bytes
run through the grammar's stacks one by one, with no trie, set or cache, on 10 grammars and 100 states each
(random walks through allowed tokens), over the default model's vocabulary (SmolLM2's, 49,152 tokens, read from
its GGUF file by gguf-py) where it is at hand, else over a vocabulary made here."""
import json
import os
import random
import re

import testlib
from testlib import ROOT, Skip, build_c

GRAMMARS = os.path.join(ROOT, "tests", "data", "grammars")


def tool():
    return build_c("grammar_test", ["tests/c/grammar_test.c", "runtime/grammar.c", "runtime/json_schema.c",
                                    "runtime/json.c", "runtime/buf.c"])


def grammar_file(text, name="g"):
    path = os.path.join(testlib.tmpdir("grammar"), name + ".gbnf")
    with open(path, "w") as f:
        f.write(text)
    return path


def matches(grammar, strings):
    """Which of strings the grammar (a file, or "@json") takes whole."""
    inp = "".join(s.encode().hex() + "\n" for s in strings)
    p = testlib.run([tool(), "match", grammar], input=inp)
    got = [ln == "1" for ln in p.stdout.split()]
    assert len(got) == len(strings), p.stdout[-500:]
    return got


def test_compile_errors():
    """A grammar llmcc cannot read is one line naming where and what."""
    cases = [
        ("root ::= \"a", "line 1, column 10: a literal without its closing quote"),
        ("root ::= x", "rule 'x' is used but not defined"),
        ("start ::= \"a\"", "no rule named root"),
        ("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"),
        ("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive (it can begin with itself)"),
        ("root ::= x \"a\"\nx ::= \"b\"? root", "is left-recursive"),
        ("root ::= [a-", "a class without its ']'"),
        ("root ::= [z-a]", "the range's end comes before its start"),
        ("root ::= \"\\q\"", "line 1, column 11: unknown escape \\q"),
        ("root ::= \"a\"{3,2}", "{3,2}: the bound comes before the start"),
        ("root ::= \"a\"{2000}", "repetitions are bounded at 1000"),
        ("root ::= (\"a\"", "a '(' without its ')'"),
        ("root ::= \"a\")", "a ')' without its '('"),
        ("root ::= \"\\uD800\"", "U+D800 is no character"),
        ("= \"a\"", "line 1, column 1: a rule begins with its name and ::="),
        ("", "no rules"),
    ]
    for src, want in cases:
        p = testlib.run([tool(), "compile", grammar_file(src)], check=False)
        assert p.returncode == 1 and want in p.stdout and len(p.stdout.splitlines()) == 1, (src, p.stdout)


def random_json(rng, depth=0):
    kind = rng.choice(["obj", "arr", "str", "num", "lit"] if depth < 4 else ["str", "num", "lit"])
    if kind == "obj":
        return {random_string(rng): random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if kind == "arr":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "str":
        return random_string(rng)
    if kind == "num":
        return rng.choice([0, -7, 12345, 3.25, -0.5, 1e10, 6.02e23, 2 ** 40])
    return rng.choice([True, False, None])


def random_string(rng):
    return "".join(rng.choice("ab \"\\/\n\t\u00e9\u65e5\U0001F600\x01") for _ in range(rng.randint(0, 6)))


def json_reference(s):
    """RFC 8259 as json.loads reads it (no NaN or Infinity), an object at the top, and what the grammar bounds
    besides: between two tokens nothing, a space, or a newline and up to 20 blanks; DEL not in strings; an integer
    part of at most 16 digits and an exponent of at most 4."""
    def no_constant(c):
        raise ValueError(c)
    try:
        v = json.loads(s, parse_constant=no_constant)
    except ValueError:
        return False
    if not isinstance(v, dict) or "\x7f" in s or not s.startswith("{"):
        return False
    outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', s)
    if any(not re.fullmatch(r" |\n[ \t]{0,20}", m.group()) for m in re.finditer(r"[ \t\n\r]+", outside)):
        return False
    for m in re.finditer(r"-?([0-9]+)(\.[0-9]+)?([eE][-+]?([0-9]+))?", outside):
        if len(m.group(1)) > 16 or (m.group(4) and len(m.group(4)) > 4):
            return False
    return True


def test_json_object_grammar_is_json_loads():
    """The built-in JSON-object grammar (response_format json_object) takes what json.loads takes as an object,
    within its whitespace and digit bounds: generated objects (compact and indented) and single-byte mutations."""
    rng = random.Random(5)
    cases = []
    for _ in range(300):
        v = {random_string(rng): random_json(rng) for _ in range(rng.randint(0, 4))}
        for text in (json.dumps(v), json.dumps(v, separators=(",", ":")), json.dumps(v, indent=2),
                     json.dumps(v, ensure_ascii=False)):
            cases.append(text)
            for _ in range(3):
                i = rng.randrange(len(text) + 1)
                op = rng.randrange(3)
                ch = rng.choice('{}[]",:0123456789.eE+-tfnrulsa\\ \u00e9')
                cases.append(text[:i] + ch + text[i:] if op == 0 else text[:i] + text[i + 1:] if op == 1
                             else text[:i] + ch + text[i + 1:])
    cases += ["{}", "[]", "{\"a\": 01}", "{\"a\": NaN}", "{\"a\": 1}\n", "{\"a\":\"\\u00e9\"}", "{\"a\":\"\\x\"}",
              "{\"a\": -}", "{\"a\": 1.}", "{\"a\": .5}", "{\"a\": 1e5}", "{\"a\"  : 1}", "{\"a\":\"\x7f\"}"]
    got = matches("@json", cases)
    for s, g in zip(cases, got):
        assert g == json_reference(s), (s, g)
    assert sum(got) > 1000 and len(got) - sum(got) > 1000, sum(got)


REGULAR = {   # the grammars of tests/data/grammars that are regular, as Python's regular expressions
    "list": r"- [a-zA-Z ]{1,40}(\n- [a-zA-Z ]{1,40}){0,9}",
    "unicode": r"[^\x00-\x7F]+|\u00e9[a-z]*\u2192[\u03b1-\u03c9]{2,5}|[\u4e00-\u9fff]{1,3}\u3002",
    "enum": r"\{\"color\": (\"red\"|\"green\"|\"blue\"), \"n\": [0-9]{1,3}\}",
    "csv": r'([a-z0-9]*|"[^"\n]*")(,([a-z0-9]*|"[^"\n]*")){2}(\n([a-z0-9]*|"[^"\n]*")(,([a-z0-9]*|"[^"\n]*")){2}){0,5}',
    "email": r"[a-z0-9._]+@[a-z0-9]+(\.[a-z]{2,4})+",
    "ambiguous": r"x*y|x+z?",
    "date": r"[0-9]{4}-(0[1-9]|1[0-2])-([0-2][0-9]|3[01])(T[0-2][0-9]:[0-5][0-9])?",
}


def arithmetic_reference(s):
    pos = 0

    def number():
        nonlocal pos
        m = re.match(r"[0-9]+(\.[0-9]+)?", s[pos:])
        if not m:
            return False
        pos += m.end()
        return True

    def factor():
        nonlocal pos
        if s[pos:pos + 1] == "(":
            pos += 1
            if not expr() or s[pos:pos + 1] != ")":
                return False
            pos += 1
            return True
        return number()

    def chain(item, ops):
        nonlocal pos
        if not item():
            return False
        while s[pos:pos + 1] in ops and s[pos:pos + 1]:
            pos += 1
            if not item():
                return False
        return True

    def term():
        return chain(factor, "*/")

    def expr():
        return chain(term, "+-")
    return expr() and pos == len(s)


def brackets_reference(s):
    stack = []
    for c in s:
        if c in "([{":
            stack.append(")]}"["([{".index(c)])
        elif not stack or stack.pop() != c:
            return False
    return not stack


def test_grammars_against_references():
    """Each grammar of tests/data/grammars takes what an independent recognizer takes: random strings over the
    grammar's own characters, and mutations of sentences."""
    rng = random.Random(11)
    refs = {name: (lambda rx: lambda s: re.fullmatch(rx, s) is not None)(rx) for name, rx in REGULAR.items()}
    refs["arithmetic"] = arithmetic_reference
    refs["brackets"] = brackets_reference
    seeds = {"list": ["- milk\n- eggs"], "unicode": ["\u00e9t\u00e9", "\u00e9ab\u2192\u03b1\u03b2", "\u65e5\u3002"],
             "enum": ['{"color": "red", "n": 42}'], "csv": ['a,b,"c d"\n1,,x'], "email": ["a.b@ex.com"],
             "ambiguous": ["xxy", "xxz", "y"], "date": ["2024-02-29T13:05"], "arithmetic": ["(1+2.5)*3/4-5"],
             "brackets": ["([]{()})"]}
    for name, ref in sorted(refs.items()):
        alphabet = sorted(set("".join(seeds[name])) | set("x-\n\u00e9"))
        cases = list(seeds[name])
        for _ in range(400):
            if rng.random() < 0.5:
                cases.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
            else:
                s = rng.choice(seeds[name])
                i = rng.randrange(len(s) + 1)
                cases.append(s[:i] + rng.choice(alphabet) + s[i + rng.randint(0, 1):])
        got = matches(os.path.join(GRAMMARS, name + ".gbnf"), cases)
        for s, g in zip(cases, got):
            assert g == ref(s), (name, s, g)
        assert any(got) and not all(got), name


def gpt2_byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocab_file():
    """The default model's vocabulary (SmolLM2's GGUF, byte-level BPE) as grammar_test reads it, or where that is
    not at hand one made here: every byte, pieces of JSON and words, special and stop tokens."""
    out = os.path.join(testlib.tmpdir("grammar"), "vocab.txt")
    cache = os.environ.get("LLMCC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "llmcc")
    gguf_path = os.path.join(cache, "smollm2-gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
    lines = None
    try:
        import gguf
    except ImportError:
        gguf = None
    if gguf and os.path.exists(gguf_path):
        f = gguf.GGUFReader(gguf_path).fields
        toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
        types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
        eos = int(f["tokenizer.ggml.eos_token_id"].parts[-1][0])
        dec = gpt2_byte_decoder()
        lines = []
        for i, (t, ty) in enumerate(zip(toks, types)):
            kind = "E" if i == eos else "S" if ty == 3 else "T"
            lines.append(kind + " " + (bytes(dec[c] for c in t) if kind == "T" else t.encode()).hex())
        assert len(lines) == 49152
    else:
        rng = random.Random(3)
        words = [bytes([b]) for b in range(256)] + [w.encode() for w in (
            '{"', '":', '", "', '"}', '[{', '}]', ' "', 'true', 'false', 'null', '0.', '12', '-1', 'e+', '\\n',
            '\\u', ' the', ' and', 'x', 'xx', 'xxy', 'red', '"red"', ' (', '))', '[]', '{}', '- ', '\n- ',
            '\u00e9', '\u2192', '\u03b1\u03b2', '\u65e5', '\u3002', '@ex', '.com', '2024', '-02', 'T1', ':0')]
        words += [bytes(rng.randrange(256) for _ in range(rng.randint(2, 5))) for _ in range(300)]
        lines = ["T " + w.hex() for w in words] + ["S " + b"<|im_start|>".hex(), "E " + b"<|im_end|>".hex()]
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return out, len(lines)


def test_masks_equal_brute_force():
    """On 10 grammars, 100 states each: the mask (trie walk, memoized transitions, a cache per state) is the brute
    force's, token for token, stop tokens exactly where the grammar may end."""
    vocab, n = vocab_file()
    names = ["@json"] + [os.path.join(GRAMMARS, f) for f in sorted(os.listdir(GRAMMARS)) if f.endswith(".gbnf")]
    assert len(names) == 10, names
    for seed, g in enumerate(names):
        p = testlib.run([tool(), "masks", g, vocab, "100", str(seed + 1)], check=False, timeout=600)
        assert p.returncode == 0 and p.stdout.startswith("states 100 "), (g, p.stdout, p.stderr[-2000:])
        assert "tokens %d " % n in p.stdout, p.stdout


def test_json_prefixes_keep_going():
    """Every prefix of a JSON object keeps the parse alive and only the whole can end: the property that makes
    masked decoding always finish inside the grammar."""
    text = '{"name": "Ada", "tags": ["x", "y\\n"], "n": -1.5e3, "ok": true, "none": null, "o": {}}'
    prefixes = [text[:i] for i in range(1, len(text) + 1)]
    p = testlib.run([tool(), "prefix", "@json"], input="".join(s.encode().hex() + "\n" for s in prefixes))
    assert p.stdout.split() == ["alive"] * (len(prefixes) - 1) + ["end"], p.stdout
    p = testlib.run([tool(), "prefix", "@json"], input="".join(s.encode().hex() + "\n" for s in ("{\"a\" x", " {")))
    assert p.stdout.split() == ["dead", "dead"], p.stdout


SCHEMAS = os.path.join(ROOT, "tests", "data", "schemas")


def test_schema_sentences_validate():
    """Each of the 20 JSON Schemas of tests/data/schemas becomes a grammar every sentence of which validates
    (jsonschema, PyPI): 60 random sentences each (random walks through the grammar's bytes); where the schema asks
    a format, the shape is checked too (the grammar's date does not check days against the month)."""
    try:
        import jsonschema
    except ImportError:
        raise Skip("jsonschema (PyPI) is not installed (make deps)")
    names = sorted(f for f in os.listdir(SCHEMAS) if f.endswith(".json"))
    assert len(names) == 20, names
    for i, name in enumerate(names):
        path = os.path.join(SCHEMAS, name)
        schema = json.load(open(path))
        p = testlib.run([tool(), "sample", "@schema:" + path, "60", str(i + 1)], timeout=300)
        texts = [bytes.fromhex(ln).decode() for ln in p.stdout.split()]
        assert len(texts) == 60, (name, p.stdout[-500:])
        for t in texts:
            v = json.loads(t)
            jsonschema.validate(v, schema)
            for m in re.finditer(r'"(day|at|id)": ?"([^"]*)"', t):
                rx = {"day": r"\d{4}-\d\d-\d\d", "id": r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
                      "at": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"}[m.group(1)]
                assert re.fullmatch(rx, m.group(2)), (name, t)
        assert len(set(texts)) > (3 if name == "empty_object.json" else 10), (name, texts[:5])


def test_schema_instances_match():
    """Valid instances written in the schema's order (required properties first) are sentences; invalid ones are
    not."""
    cases = {
        "person": (['{"name": "Ada", "age": 36}', '{"name":"x","age":0}'],
                   ['{"age": 36, "name": "Ada"}', '{"name": "Ada"}', '{"name": "Ada", "age": -1}',
                    '{"name": "Ada", "age": 1, "x": 2}', '{"name": 5, "age": 1}']),
        "optional_fields": (['{}', '{"b": 1.5}', '{"a": "x", "c": true}', '{"a": "", "b": -2, "c": false}'],
                            ['{"c": true, "a": "x"}', '{"d": 1}', '{"a": "x",}']),
        "array_bounds": (['[1, 2]', '[1,2,3,4]'], ['[1]', '[1,2,3,4,5]', '[1, "2"]']),
        "enum_color": (['{"color": "red"}', '{"color": "blue", "shade": null}'], ['{"color": "pink"}']),
        "recursive_tree": (['{"name": "a", "children": [{"name": "b"}, {"name": "c", "children": []}]}'],
                           ['{"name": "toolongname"}', '{"children": []}']),
        "anyof": (['{"value": "x"}', '{"value": 12}', '{"value": null}'], ['{"value": 1.5}', '{"value": true}']),
        "formats": (['{"day": "2024-02-29", "at": "2024-02-29T13:05:00Z", '
                     '"id": "123e4567-e89b-12d3-a456-426614174000"}'],
                    ['{"day": "2024-13-01", "at": "2024-02-29T13:05:00Z", '
                     '"id": "123e4567-e89b-12d3-a456-426614174000"}']),
        "any_value": (['{"a": [1, {"b": null}]}', '[1, 2]', '"x"', '3'], ['{', 'nul']),
    }
    for name, (good, bad) in cases.items():
        got = matches("@schema:" + os.path.join(SCHEMAS, name + ".json"), good + bad)
        assert got == [True] * len(good) + [False] * len(bad), (name, got)


def test_schema_refusals():
    """What the converter does not support is refused naming the keyword and where it is, never ignored."""
    cases = [
        ({"type": "string", "pattern": "^a"}, "pattern: not supported yet"),
        ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}}, "properties.n.maximum: not supported"),
        ({"allOf": [{"type": "string"}]}, "allOf: not supported yet"),
        ({"oneOf": [{"type": "string"}]}, "oneOf: not supported yet"),
        ({"type": "array", "prefixItems": [{"type": "string"}]}, "prefixItems: not supported yet"),
        ({"type": "object", "additionalProperties": {"type": "string"}}, "additionalProperties: a schema is not"),
        ({"type": "string", "format": "email"}, "format: not supported yet"),
        ({"type": "integer", "minimum": -5}, "minimum: -5 is not supported yet"),
        ({"enum": [{"a": 1}]}, "enum: only strings, numbers, booleans and null"),
        ({"$ref": "#/$defs/missing"}, "$ref: \"#/$defs/missing\" is not #/$defs/NAME of this schema"),
        ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "required[0]: names no property"),
        ({"type": "strin"}, "type: \"strin\" is not a JSON Schema type"),
        ({"type": "string", "maxLength": 2, "minLength": 3}, "maxLength: is less than minLength"),
        ({"items": {"type": "integer"}, "minItems": 5000}, "minItems: must be a whole number in 0..1000"),
    ]
    for schema, want in cases:
        path = os.path.join(testlib.tmpdir("grammar"), "bad_schema.json")
        with open(path, "w") as f:
            json.dump(schema, f)
        p = testlib.run([tool(), "schema", path], check=False)
        assert p.returncode == 1 and want in p.stdout and len(p.stdout.splitlines()) == 1, (schema, p.stdout)
