/* cpu_quant_q8.h: the CPU target's decode dot products of block-type weights with the activations rounded to
 * 8 bits (knob cpu_qdot_q8, the default; the cpu_rows schedule's `qdot ... acts q8`). llama.cpp's CPU path works
 * the same way (its Q8_0 / Q8_K activations): integer products of the weights' integers and the activations'
 * are exact, so a block costs a few integer multiply-adds and one f32 multiply-add by the two scales, where the
 * f32 path of cpu_quant.h widens every value to f32 first (about three times the instructions per value).
 *
 * The rounding, which a reference must model (tests/test_quant.py, interp.c, tests/ref_forward.py): the
 * activation row is cut into blocks of 32 (the weights' blocks, or the K-quants' sub-blocks, line up with them);
 * a block's scale is d = max|x| / 127 and its values q = x * (1 / d) rounded to the nearest integer, ties to even
 * (d = 0: every q is 0), all in f32. The dot product is then, per block, d_w * d * sum(q_w * q) (exact integers)
 * plus the weights' offset or minimum times d * sum(q), summed in f32.
 *
 * A kernel quantizes a row once per thread (cpu_acts_q8_begin at the kernel's start forgets the last kernel's),
 * whatever the number of weight rows its tasks multiply by it.
 *
 * Two implementations: AVX2 (also on AVX-512 machines: maddubs / madd on 32 values; LLMCC_CPU_QDOT=c turns it
 * off) and portable C. Types as cpu_quant.h numbers them: 0 q8_0, 1 q4_0, 2 q4_1, 3 q4_k, 4 q5_k, 5 q6_k,
 * 6 q5_0, 7 q5_1. */
#ifndef LLMCC_CPU_QUANT_Q8_H
#define LLMCC_CPU_QUANT_Q8_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"   /* f16_at, kq_scale, kq_min */

/* An activation row rounded to 8 bits, one per thread */
typedef struct {
    const float *src;          /* the row these values are of (NULL: none since the kernel began) */
    int64_t k;                 /* its length, whole blocks of 32 */
    int8_t *q;                 /* [k] the values */
    float *d;                  /* [k / 32] each block's scale */
    float *ds;                 /* [k / 32] each block's d * sum(q): the offsets' and minimums' term, one multiply-add */
    int64_t cap;               /* values the arrays hold */
} CpuActsQ8;

/* at a kernel's start, in every thread: the row quantized for the last kernel may have changed since */
static inline CpuActsQ8 *cpu_acts_q8_begin(void) {
    static _Thread_local CpuActsQ8 acts;
    acts.src = NULL;
    return &acts;
}

static inline void cpu_acts_q8_quantize(CpuActsQ8 *a, const float *x, int64_t k) {
    if (k > a->cap) {
        free(a->q); free(a->d); free(a->ds);
        a->q = (int8_t *)aligned_alloc(64, (size_t)(k + 63) / 64 * 64);
        a->d = (float *)malloc((size_t)k / 32 * sizeof(float));
        a->ds = (float *)malloc((size_t)k / 32 * sizeof(float));
        if (!a->q || !a->d || !a->ds) {
            fprintf(stderr, "out of memory for %lld 8-bit activations\n", (long long)k);
            exit(1);
        }
        a->cap = k;
    }
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) {   /* fmaxf's value (a NaN is passed over), inline: fmaxf is a library call */
            const float v = fabsf(xb[j]);
            amax = v > amax ? v : amax;
        }
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int q = (int)lrintf(xb[j] * id);   /* the current rounding mode: to nearest, ties to even */
            a->q[32 * b + j] = (int8_t)q;
            sum += q;
        }
        a->d[b] = d;
        a->ds[b] = d * (float)sum;
    }
    a->src = x;
    a->k = k;
}

/* ---- portable C: per block the integer sum, then the scales */

/* value j of a 32-block of type 0, 1, 2, 6, 7 as its integer (the offset and minimum apart) */
static inline int cpu_q8_weight_int(int type, const uint8_t *b, int j) {
    switch (type) {
    case 0: return (int8_t)b[2 + j];
    case 1: return (b[2 + (j & 15)] >> (j & 16 ? 4 : 0)) & 15;
    case 2: return (b[4 + (j & 15)] >> (j & 16 ? 4 : 0)) & 15;
    default: {   /* q5_0 {f16 d; uint8 qh[4]; uint8 qs[16]}, q5_1 {f16 d; f16 m; uint8 qh[4]; uint8 qs[16]} */
        const uint8_t *qh = b + (type == 6 ? 2 : 4), *qs = qh + 4;
        return ((qs[j & 15] >> (j & 16 ? 4 : 0)) & 15) | ((qh[j >> 3] >> (j & 7)) & 1) << 4;
    }
    }
}
static inline float cpu_qdot_q8_c(int type, const uint8_t *b, const CpuActsQ8 *a, int64_t nblocks) {
    static const int8_t offset[8] = {0, 8, 0, 0, 0, 0, 16, 0};
    static const int8_t bytes[8] = {34, 18, 20, 0, 0, 0, 22, 24};
    float acc = 0;
    for (int64_t i = 0; i < nblocks; i++, b += bytes[type]) {
        int32_t s = 0, sx = 0;
        for (int j = 0; j < 32; j++) {
            s += cpu_q8_weight_int(type, b, j) * a->q[32 * i + j];
            sx += a->q[32 * i + j];
        }
        acc += f16_at(b) * a->d[i] * (float)(s - offset[type] * sx);
        if (type == 2 || type == 7) acc += f16_at(b + 2) * a->d[i] * (float)sx;
    }
    return acc;
}
static inline float cpu_qdot_q8_k_c(int type, const uint8_t *b, const CpuActsQ8 *a, int64_t nsuper) {
    float acc = 0;
    for (int64_t i = 0; i < nsuper; i++) {
        const int8_t *xq = a->q + 256 * i;
        const float *dx = a->d + 8 * i;
        if (type == 5) {   /* q6_k: 16 sub-blocks of 16, value q - 32 */
            for (int e0 = 0; e0 < 256; e0 += 16) {
                int32_t s = 0;
                for (int e = e0; e < e0 + 16; e++) s += (q6_k_int(b, e) - 32) * xq[e];
                acc += f16_at(b + 208) * (float)(int8_t)b[192 + e0 / 16] * dx[e0 / 32] * (float)s;
            }
            b += 210;
            continue;
        }
        const uint8_t *qs = b + (type == 4 ? 48 : 16);
        for (int sb = 0; sb < 8; sb++) {   /* q4_k, q5_k: 8 sub-blocks of 32, value d * sc * q - dmin * m */
            int32_t s = 0, sx = 0;
            for (int j = 0; j < 32; j++) {
                int q = (qs[32 * (sb >> 1) + j] >> (sb & 1 ? 4 : 0)) & 15;
                if (type == 4) q |= ((b[16 + j] >> sb) & 1) << 4;
                s += q * xq[32 * sb + j];
                sx += xq[32 * sb + j];
            }
            acc += dx[sb] * (f16_at(b) * (float)kq_scale(b + 4, sb) * (float)s -
                             f16_at(b + 2) * (float)kq_min(b + 4, sb) * (float)sx);
        }
        b += type == 4 ? 176 : 144;
    }
    return acc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_Q8_V3 static inline __attribute__((target("avx2,f16c,fma"), unused))
/* 8 int32 lanes, each the sum of 4 products of unsigned u and signed s bytes (|products| < 2^15 in pairs: u at
 * most 128 when s is an activation) */
CPU_Q8_V3 __m256i cpu_q8_dot_us(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
/* the same for two signed operands: |w| times x with w's sign */
CPU_Q8_V3 __m256i cpu_q8_dot_ss(__m256i w, __m256i x) {
    return cpu_q8_dot_us(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
/* 32 nibbles from 16 bytes: the low ones (values 0-15), then the high ones (16-31) */
CPU_Q8_V3 __m256i cpu_q8_nibbles(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), low = _mm_set1_epi8(15);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, low)),
                                   _mm_and_si128(_mm_srli_epi16(q, 4), low), 1);
}
/* 16 in byte j where bit j of the 32 bits at qh is set (Q5_0 / Q5_1's fifth bits), else 0 */
CPU_Q8_V3 __m256i cpu_q8_fifth_bits(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    /* byte j of the spread holds byte j / 8 of the bits; the mask picks bit j % 8 */
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0));
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
    return _mm256_and_si256(set, _mm256_set1_epi8(16));
}
/* an f16 scale by F16C (kernels.h's f16_at converts in software: too slow per block) */
CPU_Q8_V3 float cpu_q8_f16(const uint8_t *b) {
    uint16_t h;
    memcpy(&h, b, 2);
    return _cvtsh_ss(h);
}
CPU_Q8_V3 float cpu_q8_hsum(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}
/* types 0, 1, 2, 6, 7: acc plus a block's integer sums in 8 lanes, widened, times d_w * d; the offset (q4_0,
 * q5_0) and the minimum (q4_1, q5_1) times d * sum(q) added to *side. The type is a constant where this is inlined
 * (cpu_qdot_q8_v3's switch), so every branch on it folds away. */
__attribute__((always_inline)) CPU_Q8_V3 __m256 cpu_q8_block_v3(int type, const uint8_t *b, const CpuActsQ8 *a,
                                                               int64_t i, float *side, __m256 acc) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(a->q + 32 * i));
    const float dx = a->d[i], dwx = cpu_q8_f16(b) * dx;
    __m256i s;
    if (type == 0) s = cpu_q8_dot_ss(_mm256_loadu_si256((const __m256i *)(b + 2)), x);
    else if (type == 1 || type == 2) s = cpu_q8_dot_us(cpu_q8_nibbles(b + (type == 1 ? 2 : 4)), x);
    else {
        const uint8_t *qh = b + (type == 6 ? 2 : 4);
        s = cpu_q8_dot_us(_mm256_or_si256(cpu_q8_nibbles(qh + 4), cpu_q8_fifth_bits(qh)), x);
    }
    if (type != 0) {
        const float ds = a->ds[i];
        if (type == 1 || type == 6) *side -= cpu_q8_f16(b) * (float)(type == 1 ? 8 : 16) * ds;
        else *side += cpu_q8_f16(b + 2) * ds;
    }
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dwx), acc);
}
/* two blocks a step, each into its own sums: the multiply-adds of one do not wait for the other's */
__attribute__((always_inline)) CPU_Q8_V3 float cpu_qdot_q8_v3_type(int type, const uint8_t *b, const CpuActsQ8 *a,
                                                                  int64_t nblocks, int64_t prefetch) {
    const int bytes = type == 0 ? 34 : type == 1 ? 18 : type == 2 ? 20 : type == 6 ? 22 : 24;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float side0 = 0, side1 = 0;
    int64_t i = 0;
    for (; i + 2 <= nblocks; i += 2, b += 2 * bytes) {
        cpu_prefetch_step(b, 2 * bytes, prefetch);
        acc0 = cpu_q8_block_v3(type, b, a, i, &side0, acc0);
        acc1 = cpu_q8_block_v3(type, b + bytes, a, i + 1, &side1, acc1);
    }
    if (i < nblocks) acc0 = cpu_q8_block_v3(type, b, a, i, &side0, acc0);
    return cpu_q8_hsum(_mm256_add_ps(acc0, acc1)) + side0 + side1;
}
CPU_Q8_V3 float cpu_qdot_q8_v3(int type, const uint8_t *b, const CpuActsQ8 *a, int64_t nblocks,
                               int64_t prefetch) {
    switch (type) {
    case 0: return cpu_qdot_q8_v3_type(0, b, a, nblocks, prefetch);
    case 1: return cpu_qdot_q8_v3_type(1, b, a, nblocks, prefetch);
    case 2: return cpu_qdot_q8_v3_type(2, b, a, nblocks, prefetch);
    case 6: return cpu_qdot_q8_v3_type(6, b, a, nblocks, prefetch);
    default: return cpu_qdot_q8_v3_type(7, b, a, nblocks, prefetch);
    }
}
/* the K-quants: Q4_K / Q5_K per sub-block of 32 (one activation block): the integer sum widened, times d * sc *
 * d_x, the minimum's dmin * m * d_x * sum(q) in a scalar; Q6_K's signed values (q - 32) per pair of sub-blocks of
 * 16, each half of the lanes multiplied by its sub-block's scale in the integer multiply-add */
CPU_Q8_V3 float cpu_qdot_q8_k_v3(int type, const uint8_t *b, const CpuActsQ8 *a, int64_t nsuper,
                                 int64_t prefetch) {
    __m256 acc = _mm256_setzero_ps();
    float side = 0;
    for (int64_t i = 0; i < nsuper; i++) {
        cpu_prefetch_step(b, type == 5 ? 210 : type == 4 ? 176 : 144, prefetch);
        const int8_t *xq = a->q + 256 * i;
        const float *dx = a->d + 8 * i;
        if (type == 5) {
            const float d = cpu_q8_f16(b + 208);
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
                for (int t = 0; t < 4; t++) {   /* values 128 h + 32 t .. + 31: sub-blocks 8 h + 2 t and the next */
                    const __m256i w = cpu_qdot_q6_32(ql0, ql1, qh, t);
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 128 * h + 32 * t));
                    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
                    const int s = 8 * h + 2 * t;
                    const __m256i scales = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc[s])),
                                                                   _mm_set1_epi16(sc[s + 1]), 1);
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, scales)),
                                          _mm256_set1_ps(d * dx[4 * h + t]), acc);
                }
            }
            b += 210;
            continue;
        }
        uint8_t sm[16];   /* the 8 scales, then the 8 minimums */
        cpu_qdot_k_unpack(b + 4, sm);
        const float d = cpu_q8_f16(b), dmin = cpu_q8_f16(b + 2);
        const uint8_t *qs = b + (type == 4 ? 48 : 16);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));   /* q5_k's fifth bits */
        for (int s = 0; s < 8; s++) {
            const __m256i w = cpu_qdot_q45_32(_mm256_loadu_si256((const __m256i *)(qs + 32 * (s / 2))),
                                              type == 4 ? &qh : NULL, s);
            const __m256i p = cpu_q8_dot_us(w, _mm256_loadu_si256((const __m256i *)(xq + 32 * s)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * (float)sm[s] * dx[s]), acc);
            side -= dmin * (float)sm[8 + s] * a->ds[8 * i + s];
        }
        b += type == 4 ? 176 : 144;
    }
    return cpu_q8_hsum(acc) + side;
}
#endif

/* which implementation runs (cpu_quant_isa's choice: AVX2 on AVX2 and AVX-512 machines) */
static inline const char *cpu_quant_q8_isa_name(void) { return cpu_quant_isa() >= 3 ? "AVX2" : "portable C"; }

/* sum over k of x[k] * w[first + k] with x rounded to 8 bits (above), w of type `type`; first and k whole
 * blocks; a: the calling thread's row (cpu_acts_q8_begin), x quantized into it unless it holds x already; the
 * weights `prefetch` bytes ahead prefetched (cpu_quant.h's cpu_prefetch_step) */
static inline float cpu_qdot_q8(int type, const uint8_t *w, int64_t first, const float *x, int64_t k,
                                CpuActsQ8 *a, int64_t prefetch) {
    static const int16_t block_bytes[8] = {34, 18, 20, 144, 176, 210, 22, 24};
    const bool kquant = cpu_qdot_is_super(type);
    const int block = kquant ? 256 : 32;
    if (a->src != x || a->k != k) cpu_acts_q8_quantize(a, x, k);
    const uint8_t *b = w + first / block * block_bytes[type];
#if defined(__x86_64__) && defined(__GNUC__)
    if (cpu_quant_isa() >= 3)
        return kquant ? cpu_qdot_q8_k_v3(type, b, a, k / 256, prefetch) : cpu_qdot_q8_v3(type, b, a, k / 32, prefetch);
#endif
    return kquant ? cpu_qdot_q8_k_c(type, b, a, k / 256) : cpu_qdot_q8_c(type, b, a, k / 32);
}
#endif
