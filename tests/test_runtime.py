"""test_runtime: the hand-written runtime (run.c, payload_rt.c, append_payload.c,
compiler/pack.c, templates/Makefile.cpu) around a mock model: a bigram table
(tests/c/mock_model.c) whose logits are row ids[-1] of the one tensor in the
payload. Builds the project the way `llmcc build` lays it out."""
import os
import re
import shutil
import struct
import subprocess

import numpy as np

from testlib import ROOT, CFLAGS, Skip, build_c, is_static, run, tmpdir

V = 300
EOS = (2, 3)
NAME = "bigram"
SANITIZE = os.environ.get("LLMCC_SANITIZE") == "1"
_proj = None


def project():
    """Builds build/tests/runtime_proj/bigram once; returns its directory."""
    global _proj
    if _proj:
        return _proj
    d = tmpdir("runtime_proj")
    for sub in ("runtime", "obj"):
        shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
    os.makedirs(os.path.join(d, "runtime"))
    for fn in os.listdir(os.path.join(ROOT, "runtime")):
        if fn.endswith((".c", ".h")):
            shutil.copy(os.path.join(ROOT, "runtime", fn), os.path.join(d, "runtime", fn))
    shutil.copy(os.path.join(ROOT, "tests", "c", "mock_model.c"), os.path.join(d, "model.c"))
    mk = build_c("mk_payload", ["tests/c/mk_payload.c", "compiler/pack.c", "compiler/quant.c", "compiler/util.c"])
    run([mk, os.path.join(d, "payload.bin")])
    with open(os.path.join(ROOT, "templates", "Makefile.cpu")) as f:
        mf = f.read()
    assert "@NAME@" in mf
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write(mf.replace("@NAME@", NAME).replace("@TARGET@", "cpu").replace("@MODEL_CFLAGS@", "")
                .replace("@MADE_BY@", "llmcc (tests/test_runtime.py)"))
    args = ["make", "-C", d, "-j8", "-s"]
    if SANITIZE:
        san = "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
        args += ["CFLAGS=-Werror " + san, "LDFLAGS=" + san, "STATIC=0"]
    else:
        args += ["CFLAGS=-Werror -Wextra"]
    run(["make", "-C", d, "-s", "clean"])
    run(args)
    _proj = d
    return d


def exe():
    return os.path.join(project(), NAME)


def bx(*args, check=False, env=None, path=None):
    """Runs the mock executable (or a copy of it at path); returns CompletedProcess."""
    return run([path or exe()] + [str(a) for a in args], check=check, env=env)


def table():
    """The bigram table, read from payload.bin through its header."""
    with open(os.path.join(project(), "payload.bin"), "rb") as f:
        b = f.read()
    magic, ver, n, table_off, tok_off, tok_size, data_off, total = struct.unpack_from("<8sII5Q", b, 0)
    assert magic == b"LLMCCWT1" and ver == 1 and n == 1 and total == len(b)
    name = b[table_off:table_off + 112].split(b"\0")[0]
    dtype, ndim, s0, s1, s2, s3, off, nbytes = struct.unpack_from("<II6Q", b, table_off + 112)
    assert name == b"bigram.weight" and dtype == 0 and ndim == 2 and (s0, s1) == (V, V)
    assert off % 65536 == 0 and off >= data_off and nbytes == V * V * 4 and off + nbytes == total
    return np.frombuffer(b, dtype="<f4", count=V * V, offset=off).reshape(V, V)


def greedy(prompt, n, penalty=1.0, ctx=64):
    w = table()
    hist = list(prompt)
    out = []
    # every token but the last generated one is fed back, so at most ctx + 1 in all
    while len(out) < n and len(hist) <= ctx:
        x = w[hist[-1]].astype(np.float64).copy()
        if penalty != 1.0:
            for t in set(hist):
                x[t] = x[t] / penalty if x[t] > 0 else x[t] * penalty
        t = int(np.argmax(x))
        if t in EOS:
            break
        out.append(t)
        hist.append(t)
    return out


def ids_of(p):
    assert p.returncode == 0, p.stderr
    return [int(x) for x in p.stdout.split()]


def one_line_error(p, *words):
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(NAME + ": "), p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_build_and_ldd():
    d = project()
    assert os.access(exe(), os.X_OK)
    if SANITIZE:
        raise Skip("ldd check skipped in sanitizer builds")
    # statically linked (STATIC=1): ldd finds nothing to load
    p = run(["ldd", exe()], check=False)
    assert "not a dynamic executable" in p.stdout + p.stderr, (p.stdout, p.stderr)
    # the footer: payload at a 64 KiB offset, checksum over it
    with open(exe(), "rb") as f:
        b = f.read()
    magic, ver, _, off, size, _sum = struct.unpack_from("<8sIIQQQ", b, len(b) - 64)
    assert magic == b"LLMCCEND" and ver == 1 and off % 65536 == 0 and off + size + 64 < len(b)
    assert b[off:off + size] == open(os.path.join(d, "payload.bin"), "rb").read()
    # the payload and a copy of the footer are the ELF section .llmcc.payload (strip keeps it)
    assert b[off + size:off + size + 64] == b[-64:]
    sec = elf_section(b, ".llmcc.payload")
    assert sec == (off, size + 64, 65536), sec


def test_greedy_chain_and_chunked_prefill():
    for prompt in ([10, 11], [9], list(range(20, 31))):   # 11 ids: prefill chunks of 4, 4, 3
        p = bx("--prompt-ids", ",".join(map(str, prompt)), "--ids", "--temperature", 0, "-n", 30)
        assert ids_of(p) == greedy(prompt, 30), (prompt, p.stdout)


def test_logits_file():
    out = os.path.join(tmpdir("runtime"), "logits.bin")
    p = bx("--prompt-ids", "10,11", "--ids", "-n", 7, "--logits", out, "--temperature", 0)
    ids = ids_of(p)
    w = table()
    got = np.fromfile(out, dtype="<f4")
    assert got.size == len(ids) * V, (got.size, len(ids))
    got = got.reshape(len(ids), V)
    hist = [11] + ids
    for i in range(len(ids)):
        assert np.array_equal(got[i], w[hist[i]])


def test_max_tokens():
    chain = greedy([10, 11], 64)
    for n in (0, 1, 3):
        assert ids_of(bx("--prompt-ids", "10,11", "--ids", "-n", n)) == chain[:n]


def test_eos_stop():
    out = os.path.join(tmpdir("runtime"), "logits_eos.bin")
    p = bx("--prompt-ids", "5", "--ids", "-n", 10, "--logits", out)
    assert ids_of(p) == [6, 7]                      # 7 -> 2 (EOS), not printed
    assert os.path.getsize(out) == 2 * V * 4
    assert ids_of(bx("--prompt-ids", "7", "--ids")) == []


def test_context_end_and_too_long_prompt():
    prompt = [10, 11, 12]
    p = bx("--prompt-ids", "10,11,12", "--ids", "--ctx", 8, "-n", 100)
    assert ids_of(p) == greedy(prompt, 100, ctx=8)
    assert len(ids_of(p)) <= 6
    one_line_error(bx("--prompt-ids", "1,2,3,4,5", "--ids", "--ctx", 4), "longer than the context")
    one_line_error(bx("--prompt-ids", ",".join(["9"] * 65), "--ids"), "longer than the context")


def test_seed_reproducible():
    a = ids_of(bx("--prompt-ids", "10", "--ids", "-n", 30, "--temperature", 1, "--seed", 42))
    b = ids_of(bx("--prompt-ids", "10", "--ids", "-n", 30, "--temperature", 1, "--seed", 42))
    c = ids_of(bx("--prompt-ids", "10", "--ids", "-n", 30, "--temperature", 1, "--seed", 43))
    assert a == b and a != c and len(a) > 5


def test_filters_that_reduce_to_greedy():
    g = greedy([10], 20)
    for extra in (["--top-k", 1], ["--min-p", 1], ["--top-p", "0.000001"]):
        p = bx("--prompt-ids", "10", "--ids", "-n", 20, "--temperature", 1, "--seed", 1, *extra)
        assert ids_of(p) == g, extra
    # a temperature too small to sample with (logit / 1e-45 overflows) is greedy: below 1e-4, on every path
    for extra in ([], ["--top-k", 5], ["--top-k", 5, "--device-topk"], ["--repeat-penalty", "1.5"]):
        p = bx("--prompt-ids", "10", "--ids", "-n", 20, "--temperature", "1e-45", "--seed", 1, *extra)
        assert ids_of(p) == (greedy([10], 20, penalty=1.5) if "--repeat-penalty" in extra else g), extra
    # top-k 3 only ever picks one of the 3 best of each row
    w = table()
    ids = ids_of(bx("--prompt-ids", "10", "--ids", "-n", 40, "--temperature", 5, "--top-k", 3, "--seed", 7))
    hist = [10] + ids
    for prev, t in zip(hist, ids):
        assert t in np.argsort(-w[prev])[:3]


def test_repeat_penalty():
    for pen in (1.5, 4.0):
        p = bx("--prompt-ids", "10,11", "--ids", "-n", 30, "--temperature", 0, "--repeat-penalty", pen)
        assert ids_of(p) == greedy([10, 11], 30, penalty=pen), pen


def test_no_prompt_starts_from_bos():
    assert ids_of(bx("--ids", "-n", 5)) == greedy([1], 5)


def test_info():
    p = bx("--info", check=True)
    for s in ("name: bigram", "architecture: BigramForTesting", "target: cpu", "vocab size: 300",
              "context: 64", "max batch: 4", "f32", "memory:", "payload: ",
              "launches per token: 1 (a one-token forward call's kernels)"):
        assert s in p.stdout, s
    assert "context: 16" in bx("--info", "--ctx", 16, check=True).stdout


def test_stats():
    p = bx("--prompt-ids", "10,11", "--ids", "-n", 5, "--stats", check=True)
    for s in ("prompt tokens: 2", "prompt:", "tok/s", "decode:", "time to first token",
              "launches per token: 1 (a one-token forward call's kernels)\n"):
        assert s in p.stderr, s
    # start-up: the mock's weights (V x V floats) mapped, and the first token after the model was ready
    up = re.search(r"start-up: ([\d.]+) ms \(the weights mapped in ([\d.]+) ms: ([\d.]+) MB, [\d.]+ GB/s\)\n", p.stderr)
    assert up and float(up.group(3)) == round(V * V * 4 / 1e6, 1) and float(up.group(2)) <= float(up.group(1)), p.stderr
    first = re.search(r"time to first token: ([\d.]+) ms \(([\d.]+) ms from the program's start\)\n", p.stderr)
    assert first and float(first.group(2)) >= float(up.group(1)) and float(first.group(2)) >= float(first.group(1))


def test_verify_ok_and_env_payload():
    p = bx("--verify", check=True)
    assert "payload ok" in p.stdout
    d = project()
    # LLMCC_PAYLOAD: the bare ELF runs with payload.bin beside it
    p = run([os.path.join(d, NAME + ".elf"), "--prompt-ids", "10,11", "--ids", "-n", "5"],
            env={"LLMCC_PAYLOAD": os.path.join(d, "payload.bin")})
    assert ids_of(p) == greedy([10, 11], 5)
    p = run([os.path.join(d, NAME + ".elf"), "--ids"], check=False)
    one_line_error(p, "truncated or damaged")


def _copy_exe(name):
    dst = os.path.join(tmpdir("runtime"), name)
    shutil.copy(exe(), dst)
    return dst


def test_truncated_binary():
    # (10 or 64 bytes off the end take only the last footer, whose copy ends the payload's section: the weights are
    # whole then, as tests/test_bad_input.py::test_exe_truncated checks; here the section's end is cut too)
    _, off, size, _ = elf_sections(open(exe(), "rb").read())[".llmcc.payload"]
    for cut in (200000, os.path.getsize(exe()) - (off + size // 2)):   # the latter: half the payload left
        f = _copy_exe("trunc")
        size = os.path.getsize(f)
        with open(f, "r+b") as fh:
            fh.truncate(size - cut)
        for args in (["--ids"], ["--verify"], ["--info"]):
            one_line_error(run([f] + args, check=False), "truncated or damaged")


def test_flipped_byte():
    f = _copy_exe("flip")
    with open(f, "rb") as fh:
        b = bytearray(fh.read())
    _, _, _, off, size, _ = struct.unpack_from("<8sIIQQQ", b, len(b) - 64)
    # a weight byte: cheap checks pass, --verify catches it
    b[off + size - 1000] ^= 0x40
    with open(f, "wb") as fh:
        fh.write(b)
    assert run([f, "--prompt-ids", "10", "--ids", "-n", "3"], check=False).returncode == 0
    one_line_error(run([f, "--verify"], check=False), "checksum")
    # a header byte: every start catches it
    b[off + 1] ^= 0x01
    with open(f, "wb") as fh:
        fh.write(b)
    one_line_error(run([f, "--ids"], check=False), "truncated or damaged")


def test_closed_stdout():
    # the reader is gone before the first write
    r, w = os.pipe()
    os.close(r)
    p = subprocess.run([exe(), "--prompt-ids", "10", "--ids", "-n", "-1"], stdout=w, stderr=subprocess.PIPE, timeout=60)
    os.close(w)
    assert p.returncode == 0 and p.stderr == b"", (p.returncode, p.stderr)
    # and through a shell pipe
    p = subprocess.run("'%s' --prompt-ids 10 --ids -n -1 --temperature 1 --seed 7 --ignore-eos | head -c 3; exit ${PIPESTATUS[0]}" % exe(),
                       shell=True, executable="/bin/bash", capture_output=True, timeout=60)
    assert p.returncode == 0 and len(p.stdout) == 3 and b"rror" not in p.stderr, p


def test_help():
    p = bx("--help", check=True)
    assert p.stdout.startswith("usage: bigram") and "--prompt-ids" in p.stdout
    assert bx("-h", check=True).stdout == p.stdout


def test_bad_flags():
    for args, word in ((["--bogus"], "unknown option"), (["-n", "x"], "-n"), (["--temperature", "-1"], "--temperature"),
                       (["--top-p", "2"], "--top-p"), (["--ctx", "0"], "--ctx"), (["--ctx", "65"], "--ctx"),
                       (["--seed"], "needs a value"), (["--prompt-ids", "300", "--ids"], "outside the vocabulary"),
                       (["--prompt-ids", "1,x", "--ids"], "--prompt-ids"), (["--prompt-ids", ",", "--ids"], "no ids"),
                       (["--prompt", "hi", "--ids"], "no tokenizer"), (["--prompt-ids", "1"], "no tokenizer"),
                       (["--ids=1"], "takes no value"), (["stray"], "no tokenizer"),   # a positional prompt
                       (["--prompt", "a", "--prompt-ids", "1"], "not both"),
                       (["--prompt-ids", "1", "--ids", "--logits", "/nonexistent/dir/x"], "--logits")):
        one_line_error(bx(*args), word)


def test_append_payload_errors():
    d = project()
    t = tmpdir("runtime")
    ap = os.path.join(d, "append_payload")
    bad = os.path.join(t, "bad_payload.bin")
    with open(bad, "wb") as f:
        f.write(b"not a payload" * 10)
    out = os.path.join(t, "ap_out")
    p = run([ap, os.path.join(d, NAME + ".elf"), bad, out], check=False)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1
    assert not os.path.exists(out) and not os.path.exists(out + ".tmp")
    # a truncated payload.bin is refused too
    with open(os.path.join(d, "payload.bin"), "rb") as f:
        b = f.read()
    with open(bad, "wb") as f:
        f.write(b[:-5])
    p = run([ap, os.path.join(d, NAME + ".elf"), bad, out], check=False)
    assert p.returncode == 1 and "truncated" in p.stderr and not os.path.exists(out + ".tmp")
    p = run([ap, "/nonexistent", bad, out], check=False)
    assert p.returncode == 1 and not os.path.exists(out + ".tmp")


def test_make_clean_and_missing_compiler():
    d = project()
    p = run(["make", "-C", d, "-s", "-n", "CC=/nonexistent/cc"], check=False)
    assert p.returncode != 0 and "no C compiler" in p.stderr


def test_pack_small_cases():
    """pack_payload_ex layout with several tensors of different dtypes and a tokenizer blob."""
    src = os.path.join(tmpdir("runtime"), "pack_multi.c")
    with open(src, "w") as f:
        f.write(r'''
#include "pack.h"
#include "payload.h"
#include <stdint.h>
int main(int argc, char **argv) {
    (void)argc;
    static uint16_t a[3 * 5]; static float b[7]; static int32_t c[1];
    for (int i = 0; i < 15; i++) a[i] = (uint16_t)(i + 1);
    for (int i = 0; i < 7; i++) b[i] = (float)i / 2;
    c[0] = -5;
    PackTensor t[4] = {
        { "a", PDT_BF16, 2, { 3, 5 }, a, sizeof a },
        { "empty", PDT_F16, 1, { 0 }, 0, 0 },
        { "b", PDT_F32, 1, { 7 }, b, sizeof b },
        { "scalar", PDT_I32, 0, { 0 }, c, sizeof c },
    };
    const uint8_t blob[] = "tokenizer-bytes";
    pack_payload_ex(argv[1], t, NULL, 4, blob, sizeof blob);
    return 0;
}
''')
    exe_ = build_c("pack_multi", [src, "compiler/pack.c", "compiler/quant.c", "compiler/util.c"])
    out = os.path.join(tmpdir("runtime"), "multi.bin")
    run([exe_, out])
    assert not os.path.exists(out + ".tmp")
    b = open(out, "rb").read()
    magic, ver, n, table_off, tok_off, tok_size, data_off, total = struct.unpack_from("<8sII5Q", b, 0)
    assert (magic, ver, n, total) == (b"LLMCCWT1", 1, 4, len(b))
    assert b[tok_off:tok_off + tok_size] == b"tokenizer-bytes\0" and data_off % 65536 == 0
    ents = []
    for i in range(n):
        e = table_off + 168 * i
        name = b[e:e + 112].split(b"\0")[0].decode()
        dtype, ndim, s0, s1, s2, s3, off, nbytes = struct.unpack_from("<II6Q", b, e + 112)
        assert off % 65536 == 0 and off + nbytes <= total
        ents.append((name, dtype, ndim, off, nbytes))
    assert [e[0] for e in ents] == ["a", "empty", "b", "scalar"]
    a = ents[0]
    assert np.array_equal(np.frombuffer(b, "<u2", 15, a[3]), np.arange(1, 16))
    assert np.array_equal(np.frombuffer(b, "<f4", 7, ents[2][3]), np.arange(7) / 2)
    assert struct.unpack_from("<i", b, ents[3][3])[0] == -5 and ents[3][3] + 4 == total
    # an unwritable destination: one error line, nothing left behind
    p = run([exe_, "/nonexistent/dir/x.bin"], check=False)
    assert p.returncode == 1 and p.stderr.startswith("llmcc: ") and len(p.stderr.strip().splitlines()) == 1


# ---- with a tokenizer: a hand-made byte-level blob (runtime/tokenizer.h, v1) ----
# ids 0..3 specials <unk> <s> </s> <eot>; 4..259 the bytes 0..255; 260 "he"
# (merge h+e), 261 "ll" (merge l+l); 262..299 no text.
def tok_blob(add_bos=True):
    toks = [(b"<unk>", 3), (b"<s>", 3), (b"</s>", 3), (b"<eot>", 3)]
    toks += [(bytes([b]), 4) for b in range(256)]
    toks += [(b"he", 4), (b"ll", 4)]
    toks += [(b"", 0)] * (V - len(toks))
    merges = [(4 + ord("h"), 4 + ord("e"), 260), (4 + ord("l"), 4 + ord("l"), 261)]
    pool = b"".join(t for t, _ in toks)
    offs, o = [], 0
    for t, _ in toks:
        offs.append(o)
        o += len(t)
    offs.append(o)
    hdr = struct.pack("<IIIIIiiiIIII", 0x4B4F544C, 1, 0, 4 if add_bos else 0, 0, 1, 2, 0, V, len(merges), len(pool), 0)
    body = struct.pack("<%dI" % (V + 1), *offs) + bytes(f for _, f in toks)
    for m in merges:
        body += b"".join(x.to_bytes(3, "little") for x in m)
    return hdr + body + pool


def encode(text):
    """What the blob above encodes text to (BOS + bytes, he/ll merged)."""
    ids, i = [1], 0
    while i < len(text):
        if text[i:i + 2] == b"he":
            ids.append(260); i += 2
        elif text[i:i + 2] == b"ll":
            ids.append(261); i += 2
        else:
            ids.append(4 + text[i]); i += 1
    return ids


_tok_payloads = {}


def tok_env(add_bos=True):
    """LLMCC_PAYLOAD for the mock ELF with the bigram table and a tokenizer."""
    if add_bos not in _tok_payloads:
        t = tmpdir("runtime")
        blob = os.path.join(t, "tok%d.blob" % add_bos)
        with open(blob, "wb") as f:
            f.write(tok_blob(add_bos))
        out = os.path.join(t, "payload_tok%d.bin" % add_bos)
        run([build_c("mk_payload", ["tests/c/mk_payload.c", "compiler/pack.c", "compiler/quant.c", "compiler/util.c"]), out, blob])
        _tok_payloads[add_bos] = out
    return {"LLMCC_PAYLOAD": _tok_payloads[add_bos]}


def bt(*args, add_bos=True):
    return subprocess.run([os.path.join(project(), NAME + ".elf")] + [a if isinstance(a, bytes) else str(a) for a in args],
                          capture_output=True, timeout=60, env=dict(os.environ, **tok_env(add_bos)))


def test_text_prompt_encodes_and_echoes():
    for text in (b"hello", b"shell he", b"x"):
        p = bt("--prompt", text, "--ids", "-n", 12)
        assert p.returncode == 0, p.stderr
        ids = [int(x) for x in p.stdout.split()]
        assert ids == greedy(encode(text), 12), text
        p = bt("--prompt", text, "-n", 12)
        assert p.returncode == 0, p.stderr
        # the prompt comes first, the continuation after it, one newline at the end, all valid UTF-8
        assert p.stdout.startswith(text) and p.stdout.endswith(b"\n"), p.stdout
        p.stdout.decode("utf-8")
        want = b"".join(bytes([t - 4]) if 4 <= t < 260 else {260: b"he", 261: b"ll"}.get(t, b"") for t in ids)
        # exact: the bytes of the tokens, where they are not UTF-8 one U+FFFD per maximal invalid
        # subpart (Python's "replace", the Unicode standard's recommended practice)
        assert p.stdout == (text + want).decode("utf-8", "replace").encode("utf-8") + b"\n", (p.stdout, text + want)
    info = bt("--info")
    assert b"tokenizer: built in" in info.stdout


def test_text_prompt_edge_cases():
    p = bt("--prompt", "", "--ids", "-n", 5)
    assert [int(x) for x in p.stdout.split()] == greedy([1], 5), p.stderr   # BOS alone
    p = bt("--prompt", b"\xff\xfe\xc3 bad utf-8 \xe2\x82", "-n", 5)       # invalid UTF-8: no crash
    assert p.returncode == 0, p.stderr
    p.stdout.decode("utf-8")
    p = bt("--prompt", "", "--ids", add_bos=False)
    assert p.returncode == 1 and p.stderr.startswith(b"bigram: ") and b"empty" in p.stderr, p.stderr
    p = bt("--prompt", "x" * 100, "--ids")
    assert p.returncode == 1 and b"longer than the context" in p.stderr
    p = bt("--prompt-ids", "5", "-n", 5)          # ids in, text out: 6 7 are bytes 0x02 0x03
    assert p.returncode == 0 and p.stdout == b"\x01\x02\x03\n", p.stdout


def test_cuda_makefile():
    """templates/Makefile.cuda with a CUDA mock: builds without warnings, no libcudart.so; runs where a GPU is."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        raise Skip("nvcc not found")
    d = tmpdir("runtime_cuda_proj")
    shutil.rmtree(os.path.join(d, "runtime"), ignore_errors=True)
    shutil.copytree(os.path.join(project(), "runtime"), os.path.join(d, "runtime"))
    shutil.copy(os.path.join(ROOT, "tests", "c", "mock_model.cu"), os.path.join(d, "model.cu"))
    shutil.copy(os.path.join(project(), "payload.bin"), os.path.join(d, "payload.bin"))
    with open(os.path.join(ROOT, "templates", "Makefile.cuda")) as f:
        mf = f.read()
    assert "@NAME@" in mf and "@ARCH@" in mf
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write(mf.replace("@NAME@", NAME).replace("@ARCH@", "sm_90"))
    run(["make", "-C", d, "-s", "clean"])
    p = run(["make", "-C", d, "-j8", "NVCC=" + nvcc, "CFLAGS=-Werror -Wextra"])
    assert "warning" not in (p.stdout + p.stderr).lower(), p.stdout + p.stderr
    exe_ = os.path.join(d, NAME)
    libs = run(["ldd", exe_]).stdout
    assert "libcudart" not in libs, libs
    assert "name: bigram" in run([exe_, "--info"]).stdout
    r = run([exe_, "--prompt-ids", "10,11", "--ids", "-n", "8", "--temperature", "0"], check=False)
    if r.returncode == 1 and "no CUDA device" in r.stderr:
        raise Skip("built and checked; no GPU to run it on")
    assert ids_of(r) == greedy([10, 11], 8)


def test_stage_upload():
    """runtime/stage.h, the CUDA build's weight upload through two staging buffers (tests/c/test_stage.c: copies
    land only when their stream is waited for, so refilling a buffer too early uploads wrong bytes)"""
    exe_ = build_c("test_stage", ["tests/c/test_stage.c"], extra=("-O1", "-fsanitize=address,undefined",
                                                                 "-fno-sanitize-recover=all"))
    p = run([exe_])
    assert p.stdout.endswith(" 0 failed\n") and " passed" in p.stdout, p.stdout + p.stderr


# ---- bad input: each case's documented behaviour (docs/errors.md, "The executable") ----
def test_bad_sampling_values():
    base = ["--prompt-ids", "10", "--ids", "-n", 3]
    for flag, vals, words in (("--temperature", ("-1", "-0.001", "nan", "inf", "1e7", "x", ""), "0..1e6"),
                              ("--top-p", ("0", "-0.5", "1.5", "nan", "1.0000001"), "(0, 1]"),
                              ("--top-k", ("-1", "-100", "1.5", "x", "99999999999"), ">= 0"),
                              ("--min-p", ("-0.1", "1.1", "nan"), "[0, 1]"),
                              ("--repeat-penalty", ("0", "-1", "-0", "nan", "inf"), "> 0")):
        for v in vals:
            one_line_error(bx(*base, flag, v), flag, "'%s'" % v, words)
    # the edges that are accepted: greedy, off switches
    g = greedy([10], 3)
    for extra in (["--temperature", 0], ["--top-p", 1, "--temperature", 0], ["--top-k", 0, "--temperature", 0],
                  ["--min-p", 0, "--temperature", 0], ["--min-p", 1], ["--repeat-penalty", 1, "--temperature", 0]):
        assert ids_of(bx(*base, *extra)) == g, extra


def test_bad_numbers_and_flags():
    for args, words in ((["-n", "abc"], ("-n", "'abc'")), (["-n", "-2"], ("-n", "-1..")), (["-n", "1e3"], ("-n",)),
                        (["-n", "99999999999"], ("-n",)), (["--max-tokens="], ("--max-tokens",)),
                        (["--seed", "x"], ("--seed",)), (["--seed", "-1"], ("--seed",)), (["--ctx", "abc"], ("--ctx",)),
                        (["--ctx", "1.5"], ("--ctx",)), (["--prompt-ids", "1.5"], ("--prompt-ids",)),
                        (["--prompt-ids", "-1"], ("--prompt-ids",)), (["--bogus"], ("unknown option", "--bogus")),
                        (["-x"], ("unknown option",)), (["--ids", "--verbose"], ("--verbose",)),
                        (["--stats=yes"], ("takes no value",)), (["--top-k"], ("needs a value",))):
        one_line_error(bx(*args), *words)


def test_max_tokens_beyond_context():
    # accepted: generation stops at the context end, as with -n -1
    for n in (100000, 1 << 30, -1):
        p = bx("--prompt-ids", "10,11", "--ids", "--ctx", 8, "-n", n, "--ignore-eos", "--temperature", 0)
        assert p.returncode == 0 and p.stderr == "" and len(ids_of(p)) == 7, (n, p.stdout)   # 8 positions - 2 + 1


def test_closed_stdout_text():
    elf = os.path.join(project(), NAME + ".elf")
    env = dict(os.environ, **tok_env())
    p = subprocess.run("'%s' --prompt hello -n -1 --ignore-eos --temperature 1 --seed 3 | head -c 10; exit ${PIPESTATUS[0]}" % elf,
                       shell=True, executable="/bin/bash", capture_output=True, timeout=60, env=env)
    assert p.returncode == 0 and p.stdout.startswith(b"hello") and len(p.stdout) == 10 and p.stderr == b"", p


def test_invalid_utf8_prompt_accepted():
    """Accepted: the bytes are tokenized as they are (byte-level tokens / byte fallback), the echo
    shows U+FFFD for what is not UTF-8, and every byte reaches the model."""
    bad = b"ok\xff\xc3("
    p = bt("--prompt", bad, "--tokenize")
    assert p.returncode == 0 and [int(x) for x in p.stdout.split()] == encode(bad), p.stdout
    p = bt("--prompt", bad, "-n", 0)
    assert p.returncode == 0 and p.stdout == "ok\ufffd\ufffd(\n".encode(), p.stdout


def test_empty_prompt():
    # BOS alone when the tokenizer adds one (as with no --prompt); an error when it does not
    assert bt("--prompt", "", "--tokenize").stdout.split() == [b"1"]
    p = bt("--prompt", "", "--ids", add_bos=False)
    assert p.returncode == 1 and p.stderr == b"bigram: the prompt is empty and this model adds no BOS token: give a --prompt\n"
    # chat needs a template, which the mock's tokenizer lacks
    for args, word in ((["--chat", "--prompt", "x"], b"--chat"), (["--system", "s", "--prompt", "x"], b"--system"), (["-i"], b"-i")):
        p = bt(*args)
        assert p.returncode == 1 and b"no chat template" not in p.stderr and word in p.stderr and b"has none" in p.stderr, p.stderr


def elf_sections(b):
    """{name: (its header's offset in b, sh_offset, sh_size, sh_addralign)} of a 64-bit ELF file's bytes"""
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdr = [shoff + i * shentsize for i in range(shnum)]
    names_off, = struct.unpack_from("<Q", b, hdr[shstrndx] + 0x18)
    out = {}
    for h in hdr:
        name, = struct.unpack_from("<I", b, h)
        off, size = struct.unpack_from("<QQ", b, h + 0x18)
        align, = struct.unpack_from("<Q", b, h + 0x30)
        out[b[names_off + name:b.index(b"\0", names_off + name)].decode()] = (h, off, size, align)
    return out


def elf_section(b, name):
    return elf_sections(b)[name][1:]


def test_static_and_runs_in_an_empty_root():
    """The CPU executable is one statically linked file (STATIC=1, the default): it runs in a root that holds
    nothing else (a chroot without libc, /proc or /sys: the payload is found through argv[0]). A stripped copy
    answers the same: the weights are an ELF section strip keeps."""
    if SANITIZE:
        raise Skip("the sanitizers' builds link their runtimes dynamically (STATIC=0)")
    assert is_static(exe())
    if shutil.which("file"):
        assert "statically linked" in run(["file", "-L", exe()]).stdout
    want = greedy([10, 11], 30)
    root = tmpdir("empty_root")
    shutil.rmtree(root)
    os.makedirs(root)
    shutil.copy(exe(), os.path.join(root, NAME))
    if os.geteuid() != 0 or not shutil.which("chroot"):
        raise Skip("chroot needs root (and coreutils' chroot)")
    p = run(["chroot", root, "/" + NAME, "--prompt-ids", "10,11", "--ids", "--temperature", "0", "-n", "30"],
            check=False)
    assert ids_of(p) == want, (p.stdout, p.stderr)
    # strip keeps the weights' section (it drops the footer after the section headers and moves the section): the
    # stripped copy finds it, computes the same and its checksum holds
    stripped = os.path.join(root, "stripped")
    shutil.copy(exe(), stripped)
    run(["strip", stripped])
    assert os.path.getsize(stripped) < os.path.getsize(exe())
    b = open(stripped, "rb").read()
    assert b[-64:-56] != b"LLMCCEND" and ".llmcc.payload" in elf_sections(b)
    assert ids_of(bx("--prompt-ids", "10,11", "--ids", "--temperature", "0", "-n", "30", path=stripped)) == want
    assert "payload ok" in bx("--verify", path=stripped).stdout


def test_payload_section_off_the_page_alignment():
    """A tool that moves the payload's section to an offset mmap cannot map (not a multiple of the page): the
    runtime reads it into memory instead; the same ids, the checksum holds. Damage to the section is caught."""
    b = open(exe(), "rb").read()
    secs = elf_sections(b)
    _, off, size, _ = secs[".llmcc.payload"]
    shoff, = struct.unpack_from("<Q", b, 0x28)
    assert shoff > off
    moved = bytearray(b[:off] + b"\0" * 8 + b[off:-64])   # 8 bytes before the section; no footer at the end
    struct.pack_into("<Q", moved, 0x28, shoff + 8)
    for h, o, _, _ in secs.values():
        if o >= off:
            struct.pack_into("<Q", moved, h + 8 + 0x18, o + 8)
    path = os.path.join(tmpdir("moved_section"), NAME)
    with open(path, "wb") as f:
        f.write(moved)
    os.chmod(path, 0o755)
    assert ids_of(bx("--prompt-ids", "10,11", "--ids", "--temperature", "0", "-n", "30", path=path)) == greedy([10, 11], 30)
    assert "payload ok" in bx("--verify", path=path).stdout
    moved[off + 8 + 4096] ^= 1   # a byte of the payload
    with open(path, "wb") as f:
        f.write(moved)
    one_line_error(bx("--verify", path=path), "checksum")

