"""test_gguf: the GGUF reader (compiler/gguf.c) through `llmcc inspect FILE.gguf`.
Good files are written by gguf-py (GGUFWriter: every metadata type, arrays,
every ggml type with a few blocks, quantized ones made by gguf.quants, a
non-default alignment, version 2) and the whole of inspect's output is
compared with what gguf-py's GGUFReader reads from the same file: the
reference is independent of our code. Bad files (written here with struct,
or good ones cut or patched) must exit 1 with one line naming the file and
the key or tensor. Also: the fuzz harness (tests/fuzz/fuzz_gguf.c) replays
its seeds and kept crashes, and SmolLM2-135M's Q4_1 GGUF from
scripts/fetch_smollm2's cache is compared with GGUFReader when it is there.
Skips when gguf-py is not installed (pip install gguf)."""
import os
import shutil
import struct

import testlib
from testlib import Skip

try:
    import numpy as np
    import gguf
    from gguf import GGUFReader, GGUFValueType as VT, GGMLQuantizationType as QT
except ImportError:   # the raw writer below (used by tests/fuzz/make_seeds.py) needs neither
    gguf = None

DIR = os.path.join(testlib.TMP, "gguf")
ARRAY_SHOWN = 8   # gguf.h's GGUF_PRINT_ARRAY_ELEMS


def need_gguf():
    if gguf is None:
        raise Skip("gguf-py is not installed (pip install gguf)")


def fresh(name):
    d = os.path.join(DIR, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


# ---- raw GGUF writing (struct), for files gguf-py would not write ----
# value type ids: UINT8 0, INT8 1, UINT16 2, INT16 3, UINT32 4, INT32 5, FLOAT32 6, BOOL 7, STRING 8,
# ARRAY 9, UINT64 10, INT64 11, FLOAT64 12

def raw_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def raw_kv(key, vtype, payload):
    """One metadata entry: payload is the value's encoded bytes."""
    return raw_str(key) + struct.pack("<I", vtype) + payload


def raw_tensor(name, ne, ggml_type, offset):
    return raw_str(name) + struct.pack("<I%dQIQ" % len(ne), len(ne), *ne, ggml_type, offset)


def raw_gguf(kvs=(), tensors=(), data=b"", version=3, alignment=32, n_tensors=None, n_kv=None):
    """A GGUF file from encoded entries; the data section starts at the next multiple of alignment."""
    b = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                              len(kvs) if n_kv is None else n_kv)
    b += b"".join(kvs) + b"".join(tensors)
    return b + b"\0" * (-len(b) % alignment) + data


def u32(key, v):
    return raw_kv(key, 4, struct.pack("<I", v))


def small_raw():
    """A valid file: two metadata entries, an F32 [4] and a Q8_0 [32, 2] tensor."""
    kvs = [raw_kv("general.architecture", 8, raw_str("llama")), u32("llama.block_count", 1)]
    tensors = [raw_tensor("a", [4], 0, 0), raw_tensor("b", [32, 2], 8, 32)]
    return raw_gguf(kvs, tensors, struct.pack("<4f", 1, 2, 3, 4) + b"\0" * 16 + bytes(range(68)))


# ---- what inspect should print, from gguf-py's reader ----

def fmt_elem(vtype, v, raw=None):
    if vtype == VT.STRING:
        out = []
        for c in bytes(raw):
            if c < 0x20 or c == 0x7f:
                out.append("\\x%02x" % c)
            elif c in b'\\"':
                out.append("\\" + chr(c))
            else:
                out.append(chr(c))
        return '"' + bytes("".join(out), "latin-1").decode("utf-8", "replace") + '"'
    if vtype == VT.BOOL:
        return "true" if v else "false"
    if vtype == VT.FLOAT32:
        return "%.9g" % float(v)
    if vtype == VT.FLOAT64:
        return "%.17g" % float(v)
    return str(int(v))


def expected_lines(path, reader):
    """inspect's output for path as GGUFReader reads it."""
    lines = ["gguf: " + path, "version: %d" % reader.fields["GGUF.version"].parts[0][0],
             "alignment: %d" % reader.alignment, "data_offset: %d" % reader.data_offset]
    fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    lines.append("kv_count: %d" % len(fields))
    for f in fields:
        t = f.types[0]
        if t == VT.ARRAY:
            sub = f.types[-1]
            shown = [fmt_elem(sub, f.parts[i][0] if sub != VT.STRING else None, f.parts[i])
                     for i in f.data[:ARRAY_SHOWN]]
            if len(f.data) > ARRAY_SHOWN:
                shown.append("...")
            lines.append("kv: %s ARRAY[%s] %d [%s]" % (f.name, sub.name, len(f.data), ", ".join(shown)))
        else:
            part = f.parts[f.data[0]]
            lines.append("kv: %s %s %s" % (f.name, t.name, fmt_elem(t, part[0], part)))
    lines.append("tensor_count: %d" % len(reader.tensors))
    totals = {}
    for t in reader.tensors:
        lines.append("tensor: %s %s [%s] bytes=%d offset=%d" % (t.name, t.tensor_type.name,
                                                              ", ".join(str(int(x)) for x in t.shape), t.n_bytes,
                                                              t.data_offset - reader.data_offset))
        n, b = totals.get(t.tensor_type, (0, 0))
        totals[t.tensor_type] = (n + 1, b + t.n_bytes)
    for ty in sorted(totals):
        lines.append("type: %s tensors=%d bytes=%d" % (ty.name, totals[ty][0], totals[ty][1]))
    lines.append("tensor_bytes: %d" % sum(b for _, b in totals.values()))
    return lines


def inspect(path):
    p = testlib.run([testlib.LLMCC, "inspect", path], check=False)
    assert p.returncode == 0 and p.stderr == "", (path, p.returncode, p.stderr)
    return p.stdout.splitlines()


def check_against_reader(path):
    got, want = inspect(path), expected_lines(path, GGUFReader(path))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, "%s: line %d\n  llmcc:   %s\n  gguf-py: %s" % (path, i + 1, g, w)
    assert len(got) == len(want), (path, got[len(want):], want[len(got):])
    return got


# ---- good files ----

def write_all_types(path, alignment=None):
    """Every metadata type (scalars and arrays) and one tensor of every ggml type gguf-py knows."""
    w = gguf.GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 18446744073709551615)
    w.add_int64("t.i64", -9223372036854775808)
    w.add_float64("t.f64", -1.0 / 3.0)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", "h\u00e9llo \"quoted\" back\\slash\ttab\nnewline")
    w.add_string("t.empty", "")
    for vt, vals in ((VT.UINT8, [0, 1, 255]), (VT.INT8, [-1, 2]), (VT.UINT16, [7]), (VT.INT16, [-300, 300]),
                     (VT.UINT32, list(range(20))), (VT.INT32, [-5, 5, 0]), (VT.FLOAT32, [1.5, -2.25, 1e-7, 3e38]),
                     (VT.UINT64, [2 ** 63 + 1]), (VT.INT64, [-2 ** 40, 2 ** 40]), (VT.FLOAT64, [2.0 ** -1000, 0.1]),
                     (VT.BOOL, [True, False, True]), (VT.STRING, ["a", "", "c d", "\u4f60\u597d"] + ["t%d" % i for i in range(9)])):
        w.add_key_value("arr." + vt.name.lower(), vals, VT.ARRAY, sub_type=vt)
    rng = np.random.default_rng(1)
    for qt, (block, size) in gguf.GGML_QUANT_SIZES.items():
        shape = (3, 2 * block) if block > 1 else (2, 3, 5)    # numpy order; ne is the reverse
        x = rng.standard_normal(shape).astype(np.float32)
        try:
            b = gguf.quants.quantize(x, qt)                   # valid bytes where gguf-py can quantize
        except (NotImplementedError, TypeError, ValueError, AttributeError):
            b = rng.integers(0, 256, int(np.prod(shape)) // block * size, dtype=np.uint8)
        # as bytes, rows of shape[-1] // block * size: gguf-py turns the byte shape back into elements
        w.add_tensor("t_" + qt.name.lower(), np.ascontiguousarray(b).view(np.uint8).reshape(*shape[:-1], -1),
                     raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_every_type_matches_gguf_py():
    need_gguf()
    p = os.path.join(fresh("types"), "all.gguf")
    write_all_types(p)
    got = check_against_reader(p)
    assert "alignment: 32" in got
    assert len([x for x in got if x.startswith("tensor: ")]) == len(gguf.GGML_QUANT_SIZES)
    assert 'kv: t.str STRING "h\u00e9llo \\"quoted\\" back\\\\slash\\x09tab\\x0anewline"' in got


def test_alignment_64_and_version_2():
    need_gguf()
    d = fresh("align")
    p = os.path.join(d, "a64.gguf")
    write_all_types(p, alignment=64)
    got = check_against_reader(p)
    assert "alignment: 64" in got and "kv: general.alignment UINT32 64" in got
    offsets = [int(x.rsplit("=", 1)[1]) for x in got if x.startswith("tensor: ")]
    assert all(o % 64 == 0 for o in offsets) and any(o % 128 for o in offsets), offsets
    # version 2 differs from 3 only in what big-endian files may do
    b = bytearray(open(p, "rb").read())
    b[4:8] = struct.pack("<I", 2)
    p2 = os.path.join(d, "v2.gguf")
    open(p2, "wb").write(b)
    assert "version: 2" in check_against_reader(p2)


def test_no_tensors_and_raw_file():
    need_gguf()
    d = fresh("raw")
    p = os.path.join(d, "empty.gguf")
    open(p, "wb").write(raw_gguf())
    check_against_reader(p)
    p = os.path.join(d, "small.gguf")
    open(p, "wb").write(small_raw())
    got = check_against_reader(p)
    assert "tensor: b Q8_0 [32, 2] bytes=68 offset=32" in got, got


def test_gguf_extension_without_magic():
    p = os.path.join(fresh("ext"), "x.gguf")
    open(p, "wb").write(b'{"model_type": "llama"}')
    expect_error(p, "not a GGUF file")


# ---- bad files ----

def expect_error(path, what, key=None):
    """inspect exits 1 with one line `llmcc: PATH: [KEY: ]...what...`, nothing on stdout."""
    p = testlib.run([testlib.LLMCC, "inspect", path], check=False)
    lines = p.stderr.splitlines()
    assert p.returncode == 1 and len(lines) == 1 and p.stdout == "", (path, p.returncode, p.stdout[:500], p.stderr)
    prefix = "llmcc: %s: " % path + ("%s: " % key if key else "")
    assert lines[0].startswith(prefix) and what in lines[0], (lines[0], prefix, what)
    assert "internal error" not in lines[0] and "Sanitizer" not in p.stderr


def bad(name, data):
    p = os.path.join(DIR, "bad", name + ".gguf")
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "wb").write(data)
    return p


def test_truncated():
    need_gguf()
    good = os.path.join(fresh("truncated"), "good.gguf")
    write_all_types(good)
    data = open(good, "rb").read()
    r = GGUFReader(good)
    f = r.fields["t.str"]
    last = r.tensors[-1]
    cuts = [(0, "file is empty", None), (3, "not a GGUF file", None), (6, "goes past the end", "version"),
            (15, "goes past the end", "tensor_count"), (20, "goes past the end", "kv_count"),
            (f.offset + 5, "key goes past the end", "metadata entry %d" % (list(r.fields).index("t.str") - 3)),
            (f.offset + 8 + len("t.str") + 4 + 8 + 3, "STRING value goes past the end", "t.str"),
            (r.tensors[0].field.offset + 20, "goes past the end", r.tensors[0].name),
            (last.data_offset + 1, "go past the end of the file", last.name)]
    for n, what, key in cuts:
        expect_error(bad("cut%d" % n, data[:n]), what, key)


def test_header_errors():
    good = small_raw()
    expect_error(bad("magic", b"GGUG" + good[4:]), "not a GGUF file")
    expect_error(bad("v1", good[:4] + struct.pack("<I", 1) + good[8:]), "GGUF version 1 is not supported", "version")
    expect_error(bad("v4", good[:4] + struct.pack("<I", 4) + good[8:]), "GGUF version 4 is not supported", "version")
    expect_error(bad("big_tensor_count", raw_gguf(n_tensors=2 ** 62)), "entries cannot fit", "tensor_count")
    expect_error(bad("big_kv_count", raw_gguf(n_kv=2 ** 64 - 1)), "entries cannot fit", "kv_count")


def test_big_endian_refused():
    need_gguf()
    p = os.path.join(fresh("be"), "be.gguf")
    w = gguf.GGUFWriter(p, "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_uint32("x", 1)
    w.add_tensor("w", np.ones((2, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expect_error(p, "big-endian GGUF (version 3 byte-swapped) is not supported", "version")


def test_metadata_errors():
    s = raw_str
    cases = [
        ("string_len", [raw_kv("k", 8, struct.pack("<Q", 2 ** 63) + b"ab")], "STRING value goes past the end", "k"),
        ("key_len", [struct.pack("<Q", 1000) + b"key"], "key goes past the end", "metadata entry 0"),
        ("empty_key", [raw_kv("", 4, b"\0" * 4)], "key is empty", "metadata entry 0"),
        ("dup_key", [u32("k", 1), u32("k", 2)], "key appears twice", "k"),
        ("value_type", [raw_kv("k", 13, b"\0" * 8)], "value type 13 is unknown", "k"),
        ("bool", [raw_kv("k", 7, b"\2")], "BOOL value 2 is neither 0 nor 1", "k"),
        ("nested", [raw_kv("k", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 1) + b"\0" * 4)],
         "arrays of arrays are not supported", "k"),
        ("array_count", [raw_kv("k", 9, struct.pack("<IQ", 11, 2 ** 61) + b"\0" * 16)], "array of 2305843009213693952 INT64 goes past", "k"),
        ("string_array_count", [raw_kv("k", 9, struct.pack("<IQ", 8, 2 ** 40) + s("x"))], "strings goes past", "k"),
        ("string_in_array", [raw_kv("k", 9, struct.pack("<IQ", 8, 2) + s("x") + struct.pack("<Q", 99))],
         "array string goes past", "k"),
        ("align_type", [raw_kv("general.alignment", 5, struct.pack("<i", 64))], "must be a UINT32, not INT32",
         "general.alignment"),
        ("align_48", [u32("general.alignment", 48)], "alignment 48 is not a power of two", "general.alignment"),
        ("align_0", [u32("general.alignment", 0)], "alignment 0 is not a power of two", "general.alignment"),
    ]
    for name, kvs, what, key in cases:
        expect_error(bad(name, raw_gguf(kvs)), what, key)


def test_tensor_errors():
    f32x4 = b"\0" * 16
    cases = [
        ("out_of_range", [raw_tensor("w", [4], 0, 32)], f32x4, "go past the end of the file", "w"),
        ("misaligned", [raw_tensor("w", [4], 0, 16)], b"\0" * 64, "offset 16 is not a multiple of the alignment 32", "w"),
        ("unknown_type", [raw_tensor("w", [4], 4, 0)], f32x4, "ggml type 4 is unknown", "w"),
        ("unknown_type_99", [raw_tensor("w", [4], 99, 0)], f32x4, "ggml type 99 is unknown", "w"),
        ("n_dims_5", [raw_tensor("w", [1, 1, 1, 1, 4], 0, 0)], f32x4, "n_dims 5 is more than 4", "w"),
        ("dup_name", [raw_tensor("w", [4], 0, 0), raw_tensor("w", [4], 0, 32)], b"\0" * 48,
         "tensor appears twice", "w"),
        ("overlap", [raw_tensor("w", [16], 0, 0), raw_tensor("v", [4], 0, 32)], b"\0" * 64, "overlap w", "v"),
        ("partial_block", [raw_tensor("q", [16, 2], 2, 0)], b"\0" * 64, "not a whole number of Q4_0 blocks", "q"),
        ("dims_overflow", [raw_tensor("w", [2 ** 32, 2 ** 32, 2], 0, 0)], f32x4, "is too large", "w"),
        ("dim_over_int64", [raw_tensor("w", [2 ** 63], 24, 0)], f32x4, "is too large", "w"),
        ("bytes_overflow", [raw_tensor("w", [2 ** 62], 27, 0)], f32x4, "is too large", "w"),
        ("empty_name", [raw_tensor("", [4], 0, 0)], f32x4, "tensor name is empty", "tensor info 0"),
        ("nul_name", [raw_tensor("a\0b", [4], 0, 0)], f32x4, "tensor name contains a NUL byte after \"a\"",
         "tensor info 0"),
        ("name_len", [struct.pack("<Q", 2 ** 64 - 1) + b"\0" * 16], b"", "tensor name goes past the end",
         "tensor info 0"),
    ]
    for name, tensors, data, what, key in cases:
        expect_error(bad(name, raw_gguf([], tensors, data)), what, key)


# ---- the fuzz harness's seeds and kept crashes, replayed by gcc (with sanitizers under make test-asan) ----

def test_replay_fuzz_gguf():
    import test_fuzz_regressions as fr
    fr.SRCS["gguf"] = ["compiler/util.c", "compiler/gguf.c"]
    files = fr.inputs("gguf", "regressions") + fr.inputs("gguf", "corpus")
    assert files, "no seeds in tests/fuzz/corpus/gguf (python3 tests/fuzz/make_seeds.py gguf)"
    fr.replay("gguf", files)


def test_fuzz_seeds_match_gguf_py():
    """The seeds are valid files: inspect prints what GGUFReader reads; each kept crash is refused in one line."""
    need_gguf()
    import test_fuzz_regressions as fr
    for f in fr.inputs("gguf", "corpus"):
        check_against_reader(f)
    for f in fr.inputs("gguf", "regressions"):
        p = testlib.run([testlib.LLMCC, "inspect", f], check=False)
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, (f, p.returncode, p.stderr)
        assert p.stderr.startswith("llmcc: " + f), (f, p.stderr)


# ---- a real checkpoint ----

def test_smollm2_q4_1_matches_gguf_py():
    need_gguf()
    cache = os.environ.get("LLMCC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "llmcc")
    p = os.path.join(cache, "smollm2-gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(p):
        raise Skip("%s is absent (scripts/fetch_smollm2 fetches it)" % p)
    got = check_against_reader(p)
    assert "tensor_count: 272" in got and "type: Q4_1 tensors=210 bytes=66355200" in got
