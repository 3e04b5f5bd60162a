/* cpu_quant.h: the dot product of a weight row in one of GGUF's block types
 * (Q8_0, Q4_0, Q4_1: runtime/kernels.h gives their layout) with an f32
 * activation row, for the CPU target's linears (the cpu_rows schedule's
 * qdot statement). The blocks are dequantized in registers and multiplied by
 * the f32 activations; nothing is expanded in memory and the activations are
 * not rounded, so the result is the dequantized weights' product within f32
 * summation (what gguf-py's dequantization followed by a matmul gives).
 *
 * Per block of 32 weights: value j of the block is d * q_j (+ m for Q4_1),
 * so sum_j x_j w_j = d * sum_j x_j q_j (+ m * sum_j x_j): the integers are
 * widened to f32 and multiplied by x, one multiply-add by the scale per
 * block, and the lanes are summed once per row.
 *
 * Three implementations, chosen once per process: AVX-512 (16 lanes: a Q4
 * block's low and high nibbles are one vector each), AVX2 + FMA (8 lanes),
 * and portable C for everything else (aarch64 included, not tuned). Each
 * needs F16C for the block scales. LLMCC_CPU_QDOT=avx2|c in the environment
 * caps the choice (tests run every path on one machine). */
#ifndef LLMCC_CPU_QUANT_H
#define LLMCC_CPU_QUANT_H
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"   /* f16_at: a block's f16 scale, widened */

/* portable: one block at a time, the 32 products summed in f32 */
static inline float cpu_qdot_c(int type, const uint8_t *b, const float *x, int64_t nblocks) {
    float acc = 0;
    for (int64_t i = 0; i < nblocks; i++, x += 32) {
        float s = 0, sx = 0;
        if (type == 0) {   /* q8_0 */
            for (int j = 0; j < 32; j++) s += x[j] * (float)(int8_t)b[2 + j];
            acc += f16_at(b) * s;
            b += 34;
            continue;
        }
        const uint8_t *q = b + (type == 2 ? 4 : 2);
        const int off = type == 1 ? 8 : 0;
        for (int j = 0; j < 16; j++) {
            s += x[j] * (float)((q[j] & 15) - off) + x[j + 16] * (float)((q[j] >> 4) - off);
            sx += x[j] + x[j + 16];
        }
        acc += f16_at(b) * s + (type == 2 ? f16_at(b + 2) * sx : 0.0f);
        b += type == 2 ? 20 : 18;
    }
    return acc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_QUANT_V4 static __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma"), unused))
#define CPU_QUANT_V3 static __attribute__((target("avx2,f16c,fma"), unused))
/* the block's d (and m) broadcast: the f16 pair at b converted by vcvtph2ps */
CPU_QUANT_V4 float cpu_qdot_v4(int type, const uint8_t *b, const float *x, int64_t nblocks) {
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    const __m128i low = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < nblocks; i++, x += 32) {
        int32_t dm;
        memcpy(&dm, b, 4);
        const __m512 scales = _mm512_cvtph_ps(_mm256_castsi128_si256(_mm_set1_epi32(dm)));   /* d, m, d, m, ... */
        const __m512 d = _mm512_permutexvar_ps(_mm512_setzero_si512(), scales);
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        __m512 s;
        if (type == 0) {
            const __m128i q0 = _mm_loadu_si128((const __m128i *)(b + 2));
            const __m128i q1 = _mm_loadu_si128((const __m128i *)(b + 18));
            s = _mm512_fmadd_ps(x1, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)),
                                _mm512_mul_ps(x0, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
            b += 34;
        } else {
            const __m128i q = _mm_loadu_si128((const __m128i *)(b + (type == 2 ? 4 : 2)));
            __m128i lo = _mm_and_si128(q, low), hi = _mm_and_si128(_mm_srli_epi16(q, 4), low);
            if (type == 1) { lo = _mm_sub_epi8(lo, eight); hi = _mm_sub_epi8(hi, eight); }
            s = _mm512_fmadd_ps(x1, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)),
                                _mm512_mul_ps(x0, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
            if (type == 2)
                accm = _mm512_fmadd_ps(_mm512_add_ps(x0, x1), _mm512_permutexvar_ps(_mm512_set1_epi32(1), scales),
                                       accm);
            b += type == 2 ? 20 : 18;
        }
        acc = _mm512_fmadd_ps(s, d, acc);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc, accm));
}
CPU_QUANT_V3 __m256 cpu_qdot_v3_8(__m128i q8, const float *x) {   /* 8 int8 (the low half of q8) times x[0..8) */
    return _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
}
CPU_QUANT_V3 float cpu_qdot_v3(int type, const uint8_t *b, const float *x, int64_t nblocks) {
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    const __m128i low = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < nblocks; i++, x += 32) {
        int32_t dm;
        memcpy(&dm, b, 4);
        const __m128 scales = _mm_cvtph_ps(_mm_set1_epi32(dm));   /* d, m, d, m */
        __m128i q0, q1;   /* values 0..15 and 16..31 as int8 */
        if (type == 0) {
            q0 = _mm_loadu_si128((const __m128i *)(b + 2)); q1 = _mm_loadu_si128((const __m128i *)(b + 18));
            b += 34;
        } else {
            const __m128i q = _mm_loadu_si128((const __m128i *)(b + (type == 2 ? 4 : 2)));
            q0 = _mm_and_si128(q, low); q1 = _mm_and_si128(_mm_srli_epi16(q, 4), low);
            if (type == 1) { q0 = _mm_sub_epi8(q0, eight); q1 = _mm_sub_epi8(q1, eight); }
        }
        const __m256 s0 = _mm256_add_ps(cpu_qdot_v3_8(q0, x), cpu_qdot_v3_8(_mm_srli_si128(q0, 8), x + 8));
        const __m256 s = _mm256_add_ps(s0, _mm256_add_ps(cpu_qdot_v3_8(q1, x + 16),
                                                         cpu_qdot_v3_8(_mm_srli_si128(q1, 8), x + 24)));
        acc = _mm256_fmadd_ps(s, _mm256_broadcastss_ps(scales), acc);
        if (type == 2) {
            const __m256 xs = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                                            _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
            accm = _mm256_fmadd_ps(xs, _mm256_broadcastss_ps(_mm_movehdup_ps(scales)), accm);
        }
        if (type != 0) b += type == 2 ? 20 : 18;
    }
    const __m256 t = _mm256_add_ps(acc, accm);
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}
#endif

/* which implementation runs: 4 (AVX-512), 3 (AVX2 + FMA), 0 (portable C); once per process */
static inline int cpu_quant_isa(void) {
    static int isa = -1;   /* every thread computes the same value */
    int v = __atomic_load_n(&isa, __ATOMIC_RELAXED);
    if (v < 0) {
        v = 0;
#if defined(__x86_64__) && defined(__GNUC__)
        const char *cap = getenv("LLMCC_CPU_QDOT");
        __builtin_cpu_init();
        bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        if (v3 && (!cap || strcmp(cap, "c") != 0)) v = 3;
        if (v == 3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && (!cap || strcmp(cap, "avx2") != 0))
            v = 4;
#endif
        __atomic_store_n(&isa, v, __ATOMIC_RELAXED);
    }
    return v;
}
static inline const char *cpu_quant_isa_name(void) {
    return cpu_quant_isa() == 4 ? "AVX-512" : cpu_quant_isa() == 3 ? "AVX2 + FMA" : "portable C";
}

/* sum over k of x[k] * w[first + k], w of type 0 (q8_0), 1 (q4_0), 2 (q4_1); first and k whole blocks */
static inline float cpu_qdot(int type, const uint8_t *w, int64_t first, const float *x, int64_t k) {
    const uint8_t *b = w + first / 32 * (type == 0 ? 34 : type == 1 ? 18 : 20);
#if defined(__x86_64__) && defined(__GNUC__)
    const int isa = cpu_quant_isa();
    if (isa == 4) return cpu_qdot_v4(type, b, x, k / 32);
    if (isa == 3) return cpu_qdot_v3(type, b, x, k / 32);
#endif
    return cpu_qdot_c(type, b, x, k / 32);
}
#endif
