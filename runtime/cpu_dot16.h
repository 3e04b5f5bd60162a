/* cpu_dot16.h: the CPU target's decode dot products of bf16 weights (the cpu_rows schedule's dot16, knob
 * cpu_rows_bf16): each weight row, read as it is, against an activation row rounded to bf16 (to nearest even,
 * as cpu_gemm's bf16 dot products and llama.cpp's bf16 path round them), with f32 accumulation.
 *
 * vdpbf16ps (AVX512_BF16; cpu_gemm_dot16_ok) multiplies 32 pairs per instruction where an f32 FMA on widened
 * weights does 16, and needs no widening: a decode step streams the weights at the memory's speed, and a
 * batch of decoding sequences (model_forward_batch) gets eight or four tokens' products from each weight
 * load (cpu_dot16_rows, into the kernel's scratch array). One token's sum is the same instructions in the same
 * order alone (cpu_dot16_1) or in a group of four or eight: a batch's row is bit for bit the row alone. Without the
 * instruction (or with LLMCC_CPU_BF16_DOT=0) the same rounded values are summed in portable C, one token at a
 * time through one function, so the same holds there.
 *
 * The activations: a kernel rounds its whole input (n rows) once per thread at the first dot product
 * (cpu_acts16), kept for the kernel's other rows; cpu_acts16_begin at the kernel's start forgets the last
 * kernel's. Tests: tests/test_cpu_target.py, tests/test_serve.py (batched against alone). */
#ifndef LLMCC_CPU_DOT16_H
#define LLMCC_CPU_DOT16_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "cpu_gemm.h"   /* cpu_gemm_to_bf16, cpu_gemm_dot16_ok */

/* A kernel's input rounded to bf16, one per thread */
typedef struct {
    const float *src;          /* the values these are of (NULL: none since the kernel began) */
    int64_t len;               /* how many */
    uint16_t *x;               /* [len] the bf16 values, 64-byte aligned */
    int64_t cap;               /* values x holds */
} CpuActs16;

static inline CpuActs16 *cpu_acts16_begin(void) {
    static _Thread_local CpuActs16 acts;
    acts.src = NULL;
    return &acts;
}

/* x[0..len) rounded to bf16, at the first call of a kernel (the same x and len after that: as they were) */
static inline const uint16_t *cpu_acts16(CpuActs16 *a, const float *x, int64_t len) {
    if (a->src == x && a->len == len) return a->x;
    if (len > a->cap) {
        free(a->x);
        a->x = (uint16_t *)aligned_alloc(64, ((size_t)len * 2 + 63) / 64 * 64);
        if (!a->x) {
            fprintf(stderr, "out of memory for %lld bf16 activations\n", (long long)len);
            exit(1);
        }
        a->cap = len;
    }
    for (int64_t i = 0; i < len; i++) a->x[i] = cpu_gemm_to_bf16(x[i]);
    a->src = x;
    a->len = len;
    return a->x;
}

/* portable: one token's sum, in one function whichever way it is called */
__attribute__((noinline, unused)) static float cpu_dot16_c(const uint16_t *w, const uint16_t *x, int64_t k) {
    float s = 0;
    for (int64_t i = 0; i < k; i++) {
        uint32_t wb = (uint32_t)w[i] << 16, xb = (uint32_t)x[i] << 16;
        float wf, xf;
        __builtin_memcpy(&wf, &wb, 4);
        __builtin_memcpy(&xf, &xb, 4);
        s += wf * xf;
    }
    return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_DOT16_FN static __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), unused))
/* `prefetch` (the cpu_rows schedule's, knob cpu_prefetch): the weights that many bytes ahead of the loads are
 * prefetched into L2 (0: none; a prefetch past the weights' end is harmless: prefetches do not fault). A batch's
 * dot products take long enough per weight row that the hardware prefetcher, which follows the loads, keeps too
 * few lines in flight: 8 tokens per load (rows of 896, 2 threads, Zen 4) ran at 72 G multiply-adds/s (the
 * weights at 18 GB/s) without it, 100-111 with 3 KB into L1 and 111-124 with 8 KB into L2. One token alone
 * streamed at that Zen 4's memory speed without it (3 KB into L1 lowered it from 31-34 GB/s to 23-31); on an
 * Intel Xeon (AMX) it did not: Qwen2.5-0.5B's shapes in bf16 (988 MB a token) decoded at 17.4 tok/s without
 * and 21.1-21.5 with 2-4 KB into L2 (21 GB/s, of the 23.6 a plain 2-thread read reaches there). */
/* g tokens' rows (ldx apart) against one weight row: per token two accumulators over steps of 64, one step of
 * 32 into the first, the rest (masked) into the second, then their sum. g is a constant where it is inlined. */
__attribute__((always_inline)) CPU_DOT16_FN inline void cpu_dot16_v(const int g, const uint16_t *w,
                                                                     const uint16_t *x, int64_t ldx, int64_t k,
                                                                     int64_t prefetch, float *out) {
    __m512 acc[8][2];
    for (int t = 0; t < g; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= k; i += 64) {
        if (prefetch) {   /* the step's 128 bytes */
            _mm_prefetch((const char *)(w + i) + prefetch, _MM_HINT_T1);
            _mm_prefetch((const char *)(w + i) + prefetch + 64, _MM_HINT_T1);
        }
        __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + i), w1 = (__m512bh)_mm512_loadu_si512(w + i + 32);
        for (int t = 0; t < g; t++) {
            acc[t][0] = _mm512_dpbf16_ps(acc[t][0], (__m512bh)_mm512_loadu_si512(x + t * ldx + i), w0);
            acc[t][1] = _mm512_dpbf16_ps(acc[t][1], (__m512bh)_mm512_loadu_si512(x + t * ldx + i + 32), w1);
        }
    }
    if (i + 32 <= k) {
        __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + i);
        for (int t = 0; t < g; t++)
            acc[t][0] = _mm512_dpbf16_ps(acc[t][0], (__m512bh)_mm512_loadu_si512(x + t * ldx + i), w0);
        i += 32;
    }
    if (i < k) {
        __mmask32 m = (__mmask32)((1ull << (k - i)) - 1);
        __m512bh w0 = (__m512bh)_mm512_maskz_loadu_epi16(m, w + i);
        for (int t = 0; t < g; t++)
            acc[t][1] = _mm512_dpbf16_ps(acc[t][1], (__m512bh)_mm512_maskz_loadu_epi16(m, x + t * ldx + i), w0);
    }
    for (int t = 0; t < g; t++) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
}
__attribute__((noinline)) CPU_DOT16_FN float cpu_dot16_1_v(const uint16_t *w, const uint16_t *x, int64_t k,
                                                           int64_t prefetch) {
    float r;
    cpu_dot16_v(1, w, x, 0, k, prefetch, &r);
    return r;
}
__attribute__((noinline)) CPU_DOT16_FN void cpu_dot16_4_v(const uint16_t *w, const uint16_t *x, int64_t ldx,
                                                          int64_t k, int64_t prefetch, float *out) {
    cpu_dot16_v(4, w, x, ldx, k, prefetch, out);
}
__attribute__((noinline)) CPU_DOT16_FN void cpu_dot16_8_v(const uint16_t *w, const uint16_t *x, int64_t ldx,
                                                          int64_t k, int64_t prefetch, float *out) {
    cpu_dot16_v(8, w, x, ldx, k, prefetch, out);
}
#undef CPU_DOT16_FN
#endif

/* one token: sum over i < k of w[i] * x[i]; the weights `prefetch` bytes ahead prefetched (above) */
static inline float cpu_dot16_1(const uint16_t *w, const uint16_t *x, int64_t k, int64_t prefetch) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (cpu_gemm_dot16_ok()) return cpu_dot16_1_v(w, x, k, prefetch);
#endif
    (void)prefetch;
    return cpu_dot16_c(w, x, k);
}

/* g = 4 or 8 tokens (rows of x, ldx apart) against one weight row: out[0 .. g), each as cpu_dot16_1 gives it */
static inline void cpu_dot16_g(int g, const uint16_t *w, const uint16_t *x, int64_t ldx, int64_t k,
                               int64_t prefetch, float *out) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (cpu_gemm_dot16_ok()) {
        if (g == 8) cpu_dot16_8_v(w, x, ldx, k, prefetch, out);
        else cpu_dot16_4_v(w, x, ldx, k, prefetch, out);
        return;
    }
#endif
    (void)prefetch;
    for (int t = 0; t < g; t++) out[t] = cpu_dot16_c(w, x + t * ldx, k);
}

/* m <= 8 tokens (rows of x, ldx apart) against one weight row: out[0 .. m), eight at once, else four at once and
 * the rest one at a time; each as cpu_dot16_1 gives it */
static inline void cpu_dot16_rows(const uint16_t *w, const uint16_t *x, int64_t ldx, int64_t k, int64_t prefetch,
                                  int64_t m, float *out) {
    int64_t t = 0;
    if (m == 8) { cpu_dot16_g(8, w, x, ldx, k, prefetch, out); return; }
    if (m >= 4) { cpu_dot16_g(4, w, x, ldx, k, prefetch, out); t = 4; }
    for (; t < m; t++) out[t] = cpu_dot16_1(w, x + t * ldx, k, prefetch);
}

#endif
