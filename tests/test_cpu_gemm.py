"""test_cpu_gemm: runtime/cpu_gemm.h, the CPU target's packed GEMM
micro-kernel, against a double-precision triple loop (tests/c/test_cpu_gemm.c
says what it covers and why its tolerance); runtime/cpu_dot16.h, decode's bf16
dot products (tests/c/test_cpu_dot16.c: against a double sum, and the four- and eight-token
form bit for bit the one-token form). Built twice, since the same
vector-extension C becomes different code per target: at baseline x86-64
(SSE2) with -O2, and with -O2 -march=x86-64-v3 (AVX2 + FMA, the tuned
target) under ASan + UBSan. Each runs the bf16 dot product as the CPU has it (AMX tiles, else AVX512_BF16,
where present), with LLMCC_CPU_AMX=0 (the AVX512_BF16 tile on a CPU with AMX), with LLMCC_CPU_BF16_DOT=0
(the f32 stand-in every other CPU runs) and with LLMCC_CPU_AVX512=0 (the portable f32 tile where the zmm one
would run)."""
import platform
import subprocess

import numpy as np

from testlib import Skip, build_c, run

SRC = ["tests/c/test_cpu_gemm.c"]
SAN = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        return f.read().split()


def check(exe, stand_in="f32 stand-in", amx=False):
    """amx: the program names the AMX path where this CPU (and its kernel) has it, and not with LLMCC_CPU_AMX=0"""
    for env in ({}, {"LLMCC_CPU_AMX": "0"}, {"LLMCC_CPU_BF16_DOT": "0"}, {"LLMCC_CPU_AVX512": "0"}):
        p = run([exe], env=env)
        assert " 0 failed" in p.stdout, p.stdout + p.stderr
        if "LLMCC_CPU_BF16_DOT" in env:
            assert stand_in in p.stdout, p.stdout
        if amx:
            want = "amx_bf16" in cpu_flags() and "amx_tile" in cpu_flags() and env.get("LLMCC_CPU_AMX", "1") != "0" \
                and env.get("LLMCC_CPU_BF16_DOT", "1") != "0"
            assert ("AMX" in p.stdout) == want, (env, p.stdout)


def test_cpu_gemm_baseline():
    check(build_c("test_cpu_gemm_O2", SRC, extra=("-O2",)), amx=True)


def test_cpu_gemm_avx2_sanitized():
    if platform.machine() not in ("x86_64", "AMD64"):
        raise Skip("x86-64-v3 is an x86-64 target")
    flags = cpu_flags()
    if "avx2" not in flags or "fma" not in flags:
        raise Skip("this CPU has no AVX2 + FMA to run an x86-64-v3 build on")
    check(build_c("test_cpu_gemm_v3_san", SRC, extra=("-O2", "-march=x86-64-v3") + SAN), amx=True)


def test_f16_to_f32_every_half():
    """runtime/kernels.h's f16_to_f32 (GGUF block scales, f16 weights; inlined into the CPU kernels' clones) against
    numpy's conversion for all 65536 halves, bit for bit (NaN payloads kept as numpy keeps them), with the
    generated model's flags and without."""
    want = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    for name, extra in (("O0", ("-O0",)), ("O3_fast", ("-O3", "-ffp-contract=fast", "-fno-math-errno",
                                                       "-fassociative-math", "-fno-signed-zeros",
                                                       "-fno-trapping-math"))):
        exe = build_c("f16_all_" + name, ["tests/c/f16_all.c"], extra=extra)
        got = np.frombuffer(subprocess.run([exe], stdout=subprocess.PIPE, check=True).stdout, dtype=np.uint32)
        bad = np.flatnonzero(got != want)
        assert got.size == 65536 and bad.size == 0, "%s: %d differ, first 0x%04x: 0x%08x, numpy 0x%08x" % (
            name, bad.size, bad[0], got[bad[0]], want[bad[0]])


def test_cpu_dot16():
    src = ["tests/c/test_cpu_dot16.c"]
    check(build_c("test_cpu_dot16_O2", src, extra=("-O2",)), "portable C")
    if platform.machine() in ("x86_64", "AMD64"):   # the generated model's flags: reassociation allowed
        check(build_c("test_cpu_dot16_O3_san", src, extra=("-O3", "-ffp-contract=fast", "-fassociative-math",
                                                           "-fno-signed-zeros", "-fno-trapping-math") + SAN),
              "portable C")
