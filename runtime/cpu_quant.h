/* cpu_quant.h: the dot product of a weight row in one of GGUF's block types
 * (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, and the K-quants Q4_K, Q5_K, Q6_K: runtime/kernels.h gives their layouts) with an f32
 * activation row, for the CPU target's linears (the cpu_rows schedule's
 * qdot statement). The blocks are dequantized in registers and multiplied by
 * the f32 activations; nothing is expanded in memory and the activations are
 * not rounded, so the result is the dequantized weights' product within f32
 * summation (what gguf-py's dequantization followed by a matmul gives).
 *
 * Per block of 32 weights: value j of the block is d * q_j (+ m for Q4_1 and Q5_1; Q5_0 / Q5_1's fifth bits of
 * the 32 integers are a word of their own, spread over the bytes with a compare),
 * so sum_j x_j w_j = d * sum_j x_j q_j (+ m * sum_j x_j): the integers are
 * widened to f32 and multiplied by x, one multiply-add by the scale per
 * block, and the lanes are summed once per row. The K-quants likewise per sub-block of a super-block
 * of 256: value j of sub-block s is d * sc_s * q_j (- dmin * m_s for Q4_K / Q5_K), so one multiply-add by
 * d * sc_s (exact in f32) per sub-block, and dmin * m_s times the sub-block's activation sum.
 *
 * Three implementations, chosen once per process: AVX-512 (16 lanes: a Q4
 * block's low and high nibbles are one vector each), AVX2 + FMA (8 lanes),
 * and portable C for everything else (aarch64 included, not tuned). Each
 * needs F16C for the block scales. LLMCC_CPU_QDOT=avx2|c in the environment
 * caps the choice (tests run every path on one machine).
 *
 * Speed, GB/s of blocks: a bench of cpu_qdot over rows of 1536 (~290 MB of blocks, far past the caches), the
 * rows split over 2 OpenMP threads, the best of 7 passes; this 2-core machine while another job kept it busy
 * (load 3; idle, Q8_0 runs ~29 and Q4_0 ~14: docs/gguf.md):
 *              Q8_0  Q4_0  Q4_K  Q5_K  Q6_K
 *   AVX-512    17.9   7.6   7.2   7.3   9.6
 *   AVX2       15.7   6.4   6.0   5.6   8.9
 *   C           1.5   0.8   0.5   0.5   0.4
 * Q5_0 and Q5_1 were not in that run. The same bench later, under a heavier load (7: Q8_0 6.2 and Q4_0 3.6 GB/s
 * on AVX-512 there), gave them about three quarters of Q4_0's rate:
 *              Q8_0  Q4_0  Q5_0  Q5_1
 *   AVX-512     6.2   3.6   2.6   3.0
 *   AVX2        6.4   2.7   1.9   2.6
 *   C           0.8   0.4   0.5   0.3
 * In values, 11-17 G/s for every type on AVX-512: each value is widened int8 -> int32 -> f32 before its
 * multiply-add, whatever its bits, so the fewer bytes of 4-bit blocks do not buy speed here. */
#ifndef LLMCC_CPU_QUANT_H
#define LLMCC_CPU_QUANT_H
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"   /* f16_at: a block's f16 scale, widened */

/* The types (cpu_qdot's numbers: DType's order from q8_0, runtime/payload.h's, Q5_0 and Q5_1 added last): blocks
 * of 32 (0 q8_0, 1 q4_0, 2 q4_1, 6 q5_0, 7 q5_1) or super-blocks of 256 (the K-quants 3 q4_k, 4 q5_k, 5 q6_k) */
static inline bool cpu_qdot_is_super(int type) { return type >= 3 && type <= 5; }
static inline int cpu_qdot_block_bytes(int type) {
    static const int16_t bytes[] = {34, 18, 20, 144, 176, 210, 22, 24};
    return bytes[type];
}
/* A 4- or 5-bit block of 32: {f16 d; [f16 m;] [uint8 qh[4];] uint8 qs[16]}, value j's integer the low (j < 16) or
 * high nibble of qs[j % 16], for Q5_0 / Q5_1 plus 16 times bit j of qh (a little-endian uint32); minus 8 (Q4_0) or
 * 16 (Q5_0), or for Q4_1 / Q5_1 unsigned with the minimum m added to each value */
static inline int cpu_qdot_has_min(int type) { return type == 2 || type == 7; }
static inline int cpu_qdot_is_q5(int type) { return type == 6 || type == 7; }
static inline int cpu_qdot_nibbles_at(int type) { return 2 + 2 * cpu_qdot_has_min(type) + 4 * cpu_qdot_is_q5(type); }
static inline int cpu_qdot_offset(int type) { return type == 1 ? 8 : type == 6 ? 16 : 0; }
static inline uint32_t cpu_qdot_qh(const uint8_t *qh) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* portable: one block at a time, the 32 products summed in f32 */
static inline float cpu_qdot_c(int type, const uint8_t *b, const float *x, int64_t nblocks) {
    float acc = 0;
    const int bytes = cpu_qdot_block_bytes(type), at = cpu_qdot_nibbles_at(type), off = cpu_qdot_offset(type);
    for (int64_t i = 0; i < nblocks; i++, x += 32, b += bytes) {
        float s = 0, sx = 0;
        if (type == 0) {   /* q8_0 */
            for (int j = 0; j < 32; j++) s += x[j] * (float)(int8_t)b[2 + j];
            acc += f16_at(b) * s;
            continue;
        }
        const uint8_t *q = b + at;
        const uint32_t qh = cpu_qdot_is_q5(type) ? cpu_qdot_qh(q - 4) : 0;
        for (int j = 0; j < 16; j++) {
            const int lo = (q[j] & 15) | (int)((qh >> j) & 1) << 4, hi = (q[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            s += x[j] * (float)(lo - off) + x[j + 16] * (float)(hi - off);
            sx += x[j] + x[j + 16];
        }
        acc += f16_at(b) * s + (cpu_qdot_has_min(type) ? f16_at(b + 2) * sx : 0.0f);
    }
    return acc;
}

/* The K-quants (type 3 q4_k, 4 q5_k, 5 q6_k; kernels.h's ld_q4_k ... gives the layouts), a super-block of 256 at
 * a time: per sub-block the products of the integers and the activations summed in f32, then one multiply-add by
 * the sub-block's scale d * sc (Q4_K / Q5_K: minus dmin * m times the activations' sum). */
static inline float cpu_qdot_k_c(int type, const uint8_t *b, const float *x, int64_t nsuper) {
    float acc = 0;
    for (int64_t i = 0; i < nsuper; i++, x += 256) {
        if (type == 5) {   /* q6_k: 16 sub-blocks of 16 */
            for (int e0 = 0; e0 < 256; e0 += 16) {
                float s = 0;
                for (int e = e0; e < e0 + 16; e++) s += x[e] * (float)(q6_k_int(b, e) - 32);
                acc += f16_at(b + 208) * (float)(int8_t)b[192 + e0 / 16] * s;
            }
            b += 210;
            continue;
        }
        const uint8_t *qs = b + (type == 4 ? 48 : 16);
        for (int sb = 0; sb < 8; sb++) {   /* q4_k, q5_k: 8 sub-blocks of 32 */
            float s = 0, sx = 0;
            for (int j = 0; j < 32; j++) {
                int q = (qs[32 * (sb >> 1) + j] >> (sb & 1 ? 4 : 0)) & 15;
                if (type == 4) q |= ((b[16 + j] >> sb) & 1) << 4;
                s += x[32 * sb + j] * (float)q;
                sx += x[32 * sb + j];
            }
            acc += f16_at(b) * (float)kq_scale(b + 4, sb) * s - f16_at(b + 2) * (float)kq_min(b + 4, sb) * sx;
        }
        b += type == 4 ? 176 : 144;
    }
    return acc;
}

/* Q4_K / Q5_K's 12 bytes of 6-bit scales and minimums as 16 bytes: the 8 scales, then the 8 minimums (ggml's own
 * unpacking in its dot products: sub-blocks 0-3 in the low 6 bits of bytes 0-7, 4-7 split between the nibbles
 * of bytes 8-11 and the top 2 bits of bytes 0-7) */
static inline void cpu_qdot_k_unpack(const uint8_t *sc, uint8_t out[16]) {
    uint32_t u[4];
    memcpy(u, sc, 12);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    u[3] = ((u[2] >> 4) & m4) | ((u[1] >> 6) & m2) << 4;   /* minimums 4-7 */
    const uint32_t mins03 = u[1] & m6;
    u[1] = (u[2] & m4) | ((u[0] >> 6) & m2) << 4;          /* scales 4-7 */
    u[2] = mins03;
    u[0] &= m6;                                            /* scales 0-3 */
    memcpy(out, u, 16);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_QUANT_V4 static __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma"), unused))
#define CPU_QUANT_V3 static __attribute__((target("avx2,f16c,fma"), unused))
/* The weights `ahead` bytes past a step of `bytes` at b, prefetched into L1 (ahead 0: none; the cpu_rows
 * schedule's prefetch, knob cpu_prefetch). A decode step reads each weight once, in long runs; on the Intel Xeon
 * (AMX) these numbers come from, the hardware prefetcher kept too few lines in flight behind the dot products'
 * loads: SmolLM2-135M's Q4_1 file, whose 97 MB of weights a token lie in the 480 MB L3, decoded at 54 tok/s
 * (5.3 GB/s) without and 136 with 4 KB ahead (1 KB: 110-129, 8 KB: 133). A step of at most 64 bytes takes one
 * prefetch (consecutive steps cover every line); prefetches do not fault past the weights' end. */
__attribute__((always_inline, unused)) static inline void cpu_prefetch_step(const uint8_t *b, int bytes,
                                                                            int64_t ahead) {
    if (ahead)
        for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)b + ahead + o, _MM_HINT_T0);
}
/* Q5_0 / Q5_1: 16 bits of qh (bit j: value j's fifth bit) as 16 bytes, 16 or 0 (each byte of the pair spread
 * over 8 lanes, each lane testing its bit) */
CPU_QUANT_V3 __m128i cpu_qdot_q5_high16(uint32_t bits) {
    const __m128i spread = _mm_shuffle_epi8(_mm_set1_epi16((short)bits), _mm_set_epi64x(0x0101010101010101, 0));
    const __m128i bit = _mm_set1_epi64x((long long)0x8040201008040201ull);
    return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(spread, bit), bit), _mm_set1_epi8(16));
}
/* A 4- or 5-bit block's 32 integers as int8: values 0..15 in *q0, 16..31 in *q1 */
CPU_QUANT_V3 void cpu_qdot_q45_16x2(int type, const uint8_t *b, __m128i *q0, __m128i *q1) {
    const __m128i low = _mm_set1_epi8(15), q = _mm_loadu_si128((const __m128i *)(b + cpu_qdot_nibbles_at(type)));
    *q0 = _mm_and_si128(q, low);
    *q1 = _mm_and_si128(_mm_srli_epi16(q, 4), low);
    if (cpu_qdot_is_q5(type)) {
        const uint32_t qh = cpu_qdot_qh(b + cpu_qdot_nibbles_at(type) - 4);
        *q0 = _mm_or_si128(*q0, cpu_qdot_q5_high16(qh));
        *q1 = _mm_or_si128(*q1, cpu_qdot_q5_high16(qh >> 16));
    }
    if (cpu_qdot_offset(type)) {
        const __m128i off = _mm_set1_epi8((char)cpu_qdot_offset(type));
        *q0 = _mm_sub_epi8(*q0, off);
        *q1 = _mm_sub_epi8(*q1, off);
    }
}
/* the block's d (and m) broadcast: the f16 pair at b converted by vcvtph2ps */
CPU_QUANT_V4 float cpu_qdot_v4(int type, const uint8_t *b, const float *x, int64_t nblocks,
                               int64_t prefetch) {
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    const int bytes = cpu_qdot_block_bytes(type);
    for (int64_t i = 0; i < nblocks; i++, x += 32, b += bytes) {
        cpu_prefetch_step(b, bytes, prefetch);
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
        } else {
            __m128i lo, hi;
            cpu_qdot_q45_16x2(type, b, &lo, &hi);
            s = _mm512_fmadd_ps(x1, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)),
                                _mm512_mul_ps(x0, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
            if (cpu_qdot_has_min(type))
                accm = _mm512_fmadd_ps(_mm512_add_ps(x0, x1), _mm512_permutexvar_ps(_mm512_set1_epi32(1), scales),
                                       accm);
        }
        acc = _mm512_fmadd_ps(s, d, acc);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc, accm));
}
CPU_QUANT_V3 __m256 cpu_qdot_v3_8(__m128i q8, const float *x) {   /* 8 int8 (the low half of q8) times x[0..8) */
    return _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
}
CPU_QUANT_V3 float cpu_qdot_v3(int type, const uint8_t *b, const float *x, int64_t nblocks,
                               int64_t prefetch) {
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    const int bytes = cpu_qdot_block_bytes(type);
    for (int64_t i = 0; i < nblocks; i++, x += 32) {
        cpu_prefetch_step(b, bytes, prefetch);
        int32_t dm;
        memcpy(&dm, b, 4);
        const __m128 scales = _mm_cvtph_ps(_mm_set1_epi32(dm));   /* d, m, d, m */
        __m128i q0, q1;   /* values 0..15 and 16..31 as int8 */
        if (type == 0) {
            q0 = _mm_loadu_si128((const __m128i *)(b + 2)); q1 = _mm_loadu_si128((const __m128i *)(b + 18));
        } else cpu_qdot_q45_16x2(type, b, &q0, &q1);
        const __m256 s0 = _mm256_add_ps(cpu_qdot_v3_8(q0, x), cpu_qdot_v3_8(_mm_srli_si128(q0, 8), x + 8));
        const __m256 s = _mm256_add_ps(s0, _mm256_add_ps(cpu_qdot_v3_8(q1, x + 16),
                                                         cpu_qdot_v3_8(_mm_srli_si128(q1, 8), x + 24)));
        acc = _mm256_fmadd_ps(s, _mm256_broadcastss_ps(scales), acc);
        if (cpu_qdot_has_min(type)) {
            const __m256 xs = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                                            _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
            accm = _mm256_fmadd_ps(xs, _mm256_broadcastss_ps(_mm_movehdup_ps(scales)), accm);
        }
        b += bytes;
    }
    const __m256 t = _mm256_add_ps(acc, accm);
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}
/* The K-quants' integers, 32 int8 at a time (shared by both paths; AVX2 instructions). Q6_K: values
 * 128 h + 32 t .. + 31 of a super-block from its half h's ql (64 bytes: ql0, ql1) and qh (32 bytes), minus 32 */
CPU_QUANT_V3 __m256i cpu_qdot_q6_32(__m256i ql0, __m256i ql1, __m256i qh, int t) {
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(t & 1 ? ql1 : ql0, t & 2 ? 4 : 0), _mm256_set1_epi8(15));
    const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), _mm256_set1_epi8(3)), 4);
    return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
}
/* Q4_K / Q5_K: sub-block s's 32 integers from the 32 bytes of its pair's nibbles (s even: low) and, for Q5_K
 * (qh not null), 16 times bit s of qh's 32 bytes */
CPU_QUANT_V3 __m256i cpu_qdot_q45_32(__m256i nibbles, const __m256i *qh, int s) {
    const __m256i q = _mm256_and_si256(_mm256_srli_epi16(nibbles, s & 1 ? 4 : 0), _mm256_set1_epi8(15));
    if (!qh) return q;
    return _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(*qh, s), _mm256_set1_epi8(1)), 4));
}

/* AVX-512, the K-quants: a sub-block's 32 (Q6_K: 16) integers widened to f32 in 16 lanes, multiplied by the
 * activations, one multiply-add by the sub-block's scale; the scales widened 16 at a time (exact products) and
 * kept in a small array, broadcast from it */
CPU_QUANT_V4 __m512 cpu_qdot_v4_16(__m128i q8, const float *x) {   /* 16 int8 times x[0..16) */
    return _mm512_mul_ps(_mm512_loadu_ps(x), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8)));
}
CPU_QUANT_V4 float cpu_qdot_k_v4(int type, const uint8_t *b, const float *x, int64_t nsuper,
                                 int64_t prefetch) {
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    float sc[16];
    for (int64_t i = 0; i < nsuper; i++, x += 256) {
        cpu_prefetch_step(b, type == 5 ? 210 : type == 4 ? 176 : 144, prefetch);
        if (type == 5) {   /* q6_k: 16 int8 scales times d */
            const __m512 d = _mm512_set1_ps(_cvtsh_ss((uint16_t)(b[208] | b[209] << 8)));
            const __m512i s8 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)));
            _mm512_storeu_ps(sc, _mm512_mul_ps(_mm512_cvtepi32_ps(s8), d));
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
                for (int t = 0; t < 4; t++) {   /* sub-blocks 8 h + 2 t and the next */
                    const __m256i q = cpu_qdot_q6_32(ql0, ql1, qh, t);
                    const float *xt = x + 128 * h + 32 * t;
                    acc = _mm512_fmadd_ps(cpu_qdot_v4_16(_mm256_castsi256_si128(q), xt),
                                          _mm512_set1_ps(sc[8 * h + 2 * t]), acc);
                    acc = _mm512_fmadd_ps(cpu_qdot_v4_16(_mm256_extracti128_si256(q, 1), xt + 16),
                                          _mm512_set1_ps(sc[8 * h + 2 * t + 1]), acc);
                }
            }
            b += 210;
            continue;
        }
        /* q4_k, q5_k: the 8 scales times d, then the 8 minimums times dmin */
        uint8_t sm[16];
        cpu_qdot_k_unpack(b + 4, sm);
        int32_t dm;
        memcpy(&dm, b, 4);
        const __m512 dd = _mm512_cvtph_ps(_mm256_castsi128_si256(_mm_set1_epi32(dm)));   /* d, dmin, d, dmin, ... */
        const __m512 dsel = _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), dd);
        const __m512i smv = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sm));
        _mm512_storeu_ps(sc, _mm512_mul_ps(_mm512_cvtepi32_ps(smv), dsel));
        const uint8_t *qs = b + (type == 4 ? 48 : 16);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));   /* q5_k's high bits */
        for (int s = 0; s < 8; s++) {
            const __m256i q = cpu_qdot_q45_32(_mm256_loadu_si256((const __m256i *)(qs + 32 * (s / 2))),
                                              type == 4 ? &qh : NULL, s);
            const float *xs = x + 32 * s;
            const __m512 p = _mm512_add_ps(cpu_qdot_v4_16(_mm256_castsi256_si128(q), xs),
                                           cpu_qdot_v4_16(_mm256_extracti128_si256(q, 1), xs + 16));
            acc = _mm512_fmadd_ps(p, _mm512_set1_ps(sc[s]), acc);
            accm = _mm512_fmadd_ps(_mm512_add_ps(_mm512_loadu_ps(xs), _mm512_loadu_ps(xs + 16)),
                                   _mm512_set1_ps(sc[8 + s]), accm);
        }
        b += type == 4 ? 176 : 144;
    }
    return _mm512_reduce_add_ps(_mm512_sub_ps(acc, accm));
}
/* AVX2 + FMA, the K-quants: as cpu_qdot_k_v4 in 8 lanes */
CPU_QUANT_V3 __m256 cpu_qdot_v3_16(__m128i q, const float *x) {   /* 16 int8 times x[0..16) */
    return _mm256_add_ps(cpu_qdot_v3_8(q, x), cpu_qdot_v3_8(_mm_srli_si128(q, 8), x + 8));
}
CPU_QUANT_V3 float cpu_qdot_k_v3(int type, const uint8_t *b, const float *x, int64_t nsuper,
                                 int64_t prefetch) {
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    float sc[16];
    for (int64_t i = 0; i < nsuper; i++, x += 256) {
        cpu_prefetch_step(b, type == 5 ? 210 : type == 4 ? 176 : 144, prefetch);
        if (type == 5) {   /* q6_k */
            const __m256 d = _mm256_set1_ps(_cvtsh_ss((uint16_t)(b[208] | b[209] << 8)));
            const __m128i s8 = _mm_loadu_si128((const __m128i *)(b + 192));
            _mm256_storeu_ps(sc, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8)), d));
            _mm256_storeu_ps(sc + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8))), d));
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
                for (int t = 0; t < 4; t++) {
                    const __m256i q = cpu_qdot_q6_32(ql0, ql1, qh, t);
                    const float *xt = x + 128 * h + 32 * t;
                    acc = _mm256_fmadd_ps(cpu_qdot_v3_16(_mm256_castsi256_si128(q), xt),
                                          _mm256_broadcast_ss(&sc[8 * h + 2 * t]), acc);
                    acc = _mm256_fmadd_ps(cpu_qdot_v3_16(_mm256_extracti128_si256(q, 1), xt + 16),
                                          _mm256_broadcast_ss(&sc[8 * h + 2 * t + 1]), acc);
                }
            }
            b += 210;
            continue;
        }
        uint8_t sm[16];
        cpu_qdot_k_unpack(b + 4, sm);
        const __m128i smv = _mm_loadu_si128((const __m128i *)sm);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss((uint16_t)(b[0] | b[1] << 8)));
        const __m256 dmin = _mm256_set1_ps(_cvtsh_ss((uint16_t)(b[2] | b[3] << 8)));
        _mm256_storeu_ps(sc, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(smv)), d));
        _mm256_storeu_ps(sc + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(smv, 8))), dmin));
        const uint8_t *qs = b + (type == 4 ? 48 : 16);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
        for (int s = 0; s < 8; s++) {
            const __m256i q = cpu_qdot_q45_32(_mm256_loadu_si256((const __m256i *)(qs + 32 * (s / 2))),
                                              type == 4 ? &qh : NULL, s);
            const float *xs = x + 32 * s;
            const __m256 p = _mm256_add_ps(cpu_qdot_v3_16(_mm256_castsi256_si128(q), xs),
                                           cpu_qdot_v3_16(_mm256_extracti128_si256(q, 1), xs + 16));
            const __m256 sx = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xs), _mm256_loadu_ps(xs + 8)),
                                            _mm256_add_ps(_mm256_loadu_ps(xs + 16), _mm256_loadu_ps(xs + 24)));
            acc = _mm256_fmadd_ps(p, _mm256_broadcast_ss(&sc[s]), acc);
            accm = _mm256_fmadd_ps(sx, _mm256_broadcast_ss(&sc[8 + s]), accm);
        }
        b += type == 4 ? 176 : 144;
    }
    const __m256 t = _mm256_sub_ps(acc, accm);
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

/* sum over k of x[k] * w[first + k], w of type 0 (q8_0), 1 (q4_0), 2 (q4_1), 3 (q4_k), 4 (q5_k), 5 (q6_k),
 * 6 (q5_0), 7 (q5_1); first and k whole blocks; the weights `prefetch` bytes ahead prefetched (x86 paths;
 * cpu_prefetch_step) */
static inline float cpu_qdot(int type, const uint8_t *w, int64_t first, const float *x, int64_t k,
                             int64_t prefetch) {
    const bool super = cpu_qdot_is_super(type);
    const uint8_t *b = w + first / (super ? 256 : 32) * cpu_qdot_block_bytes(type);
#if defined(__x86_64__) && defined(__GNUC__)
    const int isa = cpu_quant_isa();
    if (isa == 4)
        return super ? cpu_qdot_k_v4(type, b, x, k / 256, prefetch) : cpu_qdot_v4(type, b, x, k / 32, prefetch);
    if (isa == 3)
        return super ? cpu_qdot_k_v3(type, b, x, k / 256, prefetch) : cpu_qdot_v3(type, b, x, k / 32, prefetch);
#endif
    return super ? cpu_qdot_k_c(type, b, x, k / 256) : cpu_qdot_c(type, b, x, k / 32);
}

#include "cpu_quant_q8.h"   /* the same products with the activations rounded to 8 bits (the default) */
#endif
