/* kernels.h: what the kernels llmcc emits call beyond C (model.c / model.cu of `llmcc build`, the harness of
 * `llmcc run -c`; compiler/emit.c writes the #include): dtype conversions and loads, and the warp-level
 * instructions the schedules use, as inline PTX for CUDA and, for the CPU, as emulations that follow the PTX
 * ISA's fragment layouts and fault where the GPU would (a misaligned vector load, an ldmatrix row or cp.async
 * outside shared memory). The host side is apart: a model's in model_host.h, the harness's in harness.h.
 * Everything is static inline: what a model's kernels do not call costs nothing and draws no warning. */
#ifndef LLMCC_KERNELS_H
#define LLMCC_KERNELS_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define MINI(a, b) ((a) < (b) ? (a) : (b))
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <unistd.h>   /* sysconf: the staged upload's threads */
#include "stage.h"
#define DEVFN static __device__ __forceinline__
/* the stream launches go to: the default one, but in a model's host code (model.cu: the model's own) */
#define STREAM 0
#else
#define DEVFN static inline
#endif

/* model_penalize's update of one logit (runtime/model_api.h; sample.c's order and operations, each rounded on
 * its own: CUDA's FMA contraction cannot join them) */
DEVFN float penalize_logit(float x, float sub, float rep) {
    if (rep != 1.0f) x = x > 0 ? x / rep : x * rep;
    return x - sub;
}
/* bf16 / f16 weights are widened to f32 at each load */
DEVFN float bf16_to_f32(uint32_t h) { uint32_t u = h << 16; float f; memcpy(&f, &u, 4); return f; }
DEVFN float ld_bf16(const uint16_t *p, int64_t i) { return bf16_to_f32(p[i]); }
/* exact for every half (NaN, infinities, subnormals), without a loop so that it inlines: called, a CPU kernel's
 * AVX-512 clone paid about 40 cycles a call on an Intel Xeon (a baseline SSE function: the SSE / AVX transition),
 * half of a Q4_1 prompt's time in cpu_gemm's weight pack */
DEVFN float f16_to_f32(uint32_t h) {
    uint32_t u = (h & 0x7fffu) << 13;          /* exponent and mantissa, in place for f32 */
    const uint32_t e = u & 0x0f800000u;
    float f;
    if (e == 0x0f800000u) u += 0x70000000u;    /* infinity / NaN: the exponent all ones */
    else if (e) u += 0x38000000u;              /* normal: rebias 15 -> 127 */
    else {                                     /* zero / subnormal m * 2^-24 = 2^-14 * (1 + m / 1024) - 2^-14, exact */
        u += 0x38800000u;
        memcpy(&f, &u, 4);
        f -= 6.103515625e-05f;
        memcpy(&u, &f, 4);
    }
    u |= (h & 0x8000u) << 16;
    memcpy(&f, &u, 4);
    return f;
}
DEVFN float ld_f16(const uint16_t *p, int64_t i) { return f16_to_f32(p[i]); }

/* GGUF's block types (ggml-common.h's block_q8_0, block_q4_0, block_q4_1; block_q5_0, block_q5_1 below),
 * dequantized in registers: the value at
 * flat index i of a weight whose rows are whole blocks of 32 is value i % 32 of block i / 32. A block's f16 scale
 * (and minimum) is read byte by byte: blocks of 34 or 18 bytes leave it unaligned. */
DEVFN float f16_at(const uint8_t *b) { return f16_to_f32((uint32_t)b[0] | (uint32_t)b[1] << 8); }
/* {f16 d; int8 qs[32]}: d * qs[j] */
DEVFN float ld_q8_0(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 5) * 34;
    return f16_at(b) * (float)(int8_t)b[2 + (i & 31)];
}
/* {f16 d; uint8 qs[16]}: value j < 16 is qs[j]'s low nibble, value j >= 16 qs[j - 16]'s high one; d * (q - 8) */
DEVFN float ld_q4_0(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 5) * 18;
    const int j = (int)(i & 31), q = (b[2 + (j & 15)] >> (j & 16 ? 4 : 0)) & 15;
    return f16_at(b) * (float)(q - 8);
}
/* {f16 d; f16 m; uint8 qs[16]}: the nibbles as q4_0's, unsigned; d * q + m */
DEVFN float ld_q4_1(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 5) * 20;
    const int j = (int)(i & 31), q = (b[4 + (j & 15)] >> (j & 16 ? 4 : 0)) & 15;
    return f16_at(b) * (float)q + f16_at(b + 2);
}
/* {f16 d; uint8 qh[4]; uint8 qs[16]} (block_q5_0): q4_0's nibble plus 16 times bit j of qh, a little-endian
 * uint32; d * (q - 16) */
DEVFN int q5_high(const uint8_t *qh, int j) { return (qh[j >> 3] >> (j & 7) & 1) << 4; }
DEVFN float ld_q5_0(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 5) * 22;
    const int j = (int)(i & 31), q = ((b[6 + (j & 15)] >> (j & 16 ? 4 : 0)) & 15) | q5_high(b + 2, j);
    return f16_at(b) * (float)(q - 16);
}
/* {f16 d; f16 m; uint8 qh[4]; uint8 qs[16]} (block_q5_1): q5_0's integer, unsigned; d * q + m */
DEVFN float ld_q5_1(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 5) * 24;
    const int j = (int)(i & 31), q = ((b[8 + (j & 15)] >> (j & 16 ? 4 : 0)) & 15) | q5_high(b + 4, j);
    return f16_at(b) * (float)q + f16_at(b + 2);
}

/* bdot_<type>(w, i, stride, x, nb): the gemv schedule's block dot product of one lane (kernel IR statement bdot):
 * the sum over u < nb and j < 32 of the weight's value at flat index i + u * stride + j (i a block's first, stride
 * a multiple of 32) times x[u * stride + j]. Every block's bytes are loaded first, all nb of them (nb at most
 * BDOT_MAX, a constant once inlined: ptxas keeps them all in flight), with the widest loads the block's alignment
 * allows (q4_1, q5_1: 20 and 24 bytes, 4-byte words; q8_0, q4_0, q5_0: 34, 18, 22 bytes, 2-byte halves), the
 * scale once per block; then the values are dequantized in registers as ld_q8_0 ... do, each product summed in
 * order.
 * bdot_<type>_x<G>(w, i, stride, x, nb): the same over groups of G consecutive blocks (u < nb groups of G * 32
 * values, i a group's first value, stride a multiple of G * 32) where a weight row is whole groups and a group's
 * bytes a multiple of 16 (or 8): each group loaded with 16-byte (8-byte) loads, the blocks' halves and words then
 * picked from the loaded words at constant offsets (BDOT_R). The sums are the same, in the same order, as
 * bdot_<type> over the group's blocks one at a time. The C backend faults on a misaligned load, as the GPU would. */
#define BDOT_MAX 8
#ifdef __CUDACC__
/* asm volatile: the front end keeps the loads in this order, ahead of the products (plain loads it sinks next to
 * their first use; ptxas may still interleave them with the products: scripts/sass_report measures what it keeps) */
DEVFN uint32_t bdot_ld32(const uint8_t *p) {
    uint32_t v;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
DEVFN uint32_t bdot_ld16(const uint8_t *p) {
    unsigned short v;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
/* 16 and 8 bytes into words r[0..3], r[0..1] */
DEVFN void bdot_ld128(const uint8_t *p, uint32_t *r) {
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}
DEVFN void bdot_ld64(const uint8_t *p, uint32_t *r) {
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
}
/* an empty asm volatile that "changes" a loaded word: placed after all of a lane's loads, it keeps the front end
 * from moving any product (which reads the word through it) between the loads (asm volatile statements keep their
 * order); it emits no instruction */
DEVFN void bdot_hold(uint32_t *v) { asm volatile("" : "+r"(*v)); }
/* 0, through a value ptxas cannot know (the dynamic shared memory is never 4 GiB): what reads it waits for all */
DEVFN uint32_t zero_after(uint32_t all) {
    uint32_t z;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(z));
    return z == 0xffffffffu ? all : 0u;
}
DEVFN float bdot_zero_after(uint32_t all) { return __uint_as_float(zero_after(all)); }
/* the hardware's conversion (exact, as f16_to_f32): no branches between the loads and their uses */
DEVFN float bdot_h2f(uint32_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
}
#else
static inline float bdot_h2f(uint32_t h) { return f16_to_f32(h & 0xffff); }
static inline void bdot_hold(uint32_t *v) { (void)v; }
static inline float bdot_zero_after(uint32_t all) { (void)all; return 0.0f; }
static inline void bdot_fault(const uint8_t *p, int bytes) {
    fprintf(stderr, "llmcc: bdot: misaligned %d-byte load at %p\n", bytes, (const void *)p);
    abort();
}
/* n little-endian 4-byte words at p, which must be 4n-byte aligned */
static inline void bdot_ld_words(const uint8_t *p, uint32_t *r, int n) {
    if ((uintptr_t)p % (4 * n)) bdot_fault(p, 4 * n);
    for (int c = 0; c < n; c++) r[c] = (uint32_t)p[4 * c] | (uint32_t)p[4 * c + 1] << 8 |
                                      (uint32_t)p[4 * c + 2] << 16 | (uint32_t)p[4 * c + 3] << 24;
}
static inline uint32_t bdot_ld32(const uint8_t *p) {
    uint32_t v;
    bdot_ld_words(p, &v, 1);
    return v;
}
static inline uint32_t bdot_ld16(const uint8_t *p) {
    if ((uintptr_t)p % 2) bdot_fault(p, 2);
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
static inline void bdot_ld128(const uint8_t *p, uint32_t *r) { bdot_ld_words(p, r, 4); }
static inline void bdot_ld64(const uint8_t *p, uint32_t *r) { bdot_ld_words(p, r, 2); }
#endif
/* BDOT_R(k): unit k (a 4-byte word where the block's loads are words, else a 2-byte half) of the block being
 * summed: in bdot_<T> (step 0) rw[k], the block's own load k; in bdot_<T>_x<G>, picked from the group's words rw
 * at the block's byte offset ro (constants once the loops are unrolled, so the words stay in registers) */
DEVFN uint32_t bdot_unit(const uint32_t *rw, int ro, int step, int k) {
    const int o = ro + step * k;
    return step == 0 ? rw[k] : step == 4 ? rw[o >> 2] : (rw[o >> 2] >> (8 * (o & 2))) & 0xffff;
}
#define BDOT_R(k) bdot_unit(rw, ro, step, (k))
#ifdef __CUDACC__
#define BDOT_UNROLL _Pragma("unroll")
#else
#define BDOT_UNROLL
#endif
/* Every form F (bdot_q4_1, bdot_q4_1_x4, bdot_q4_k_h ...) is three steps over a bdot_raw_F of registers, so that
 * a pair (two weights' rows, the same activations: gate/up, a RoPE pair) issues both rows' loads before either's
 * products (emit.c writes the steps for a pair): bdot_F_load(&r, w, i, stride, nb) issues the loads;
 * bdot_F_hold(&r, nb) returns the XOR of the loaded words (each through bdot_hold); bdot_F_dot(&r, i, stride, x,
 * nb, z) sums the products from z = bdot_zero_after(the holds' XOR), 0.0f once every load is issued. bdot_F(w, i,
 * stride, x, nb) is the three for one row. */
#define BDOT_WRAP(F)                                                                                             \
    DEVFN float bdot_##F(const uint8_t *w, int64_t i, int64_t stride, const float *x, int nb) {                 \
        bdot_raw_##F r;                                                                                          \
        bdot_##F##_load(&r, w, i, stride, nb);                                                                   \
        return bdot_##F##_dot(&r, i, stride, x, nb, bdot_zero_after(bdot_##F##_hold(&r, nb)));                  \
    }
/* the hold of rounds u < nb of raw[ROUNDS][WORDS] */
#define BDOT_HOLD_FN(F, ROUNDS, WORDS)                                                                           \
    DEVFN uint32_t bdot_##F##_hold(bdot_raw_##F *r, int nb) {                                                    \
        uint32_t all = 0;                                                                                        \
        BDOT_UNROLL                                                                                              \
        for (int u = ROUNDS - 1; u >= 0; u--)                                                                    \
            if (u < nb)                                                                                          \
                BDOT_UNROLL                                                                                      \
                for (int c = WORDS - 1; c >= 0; c--) { bdot_hold(&r->w[u][c]); all ^= r->w[u][c]; }             \
        return all;                                                                                              \
    }
/* the dot of F's rounds u < nb (at most ROUNDS) of G blocks of BYTES each: a block's units BDOT_R(k) as step says
 * (0: the block's own loads, one block a round) */
#define BDOT_DOT_FN(F, ROUNDS, G, BYTES, STEP, SCALES, VALUE)                                                     \
    DEVFN float bdot_##F##_dot(const bdot_raw_##F *r, int64_t i, int64_t stride, const float *x, int nb,         \
                               float sum) {                                                                      \
        (void)i;                                                                                                 \
        BDOT_UNROLL                                                                                              \
        for (int u = 0; u < ROUNDS; u++) {                                                                       \
            if (u >= nb) break;                                                                                  \
            BDOT_UNROLL                                                                                          \
            for (int b = 0; b < G; b++) {                                                                        \
                const uint32_t *rw = r->w[u];                                                                    \
                const int ro = b * BYTES, step = STEP;                                                           \
                SCALES;                                                                                          \
                const float *xu = x + u * stride + 32 * b;                                                       \
                for (int j = 0; j < 32; j++) sum += xu[j] * (VALUE);                                             \
            }                                                                                                    \
        }                                                                                                        \
        return sum;                                                                                              \
    }
/* bdot_<T>: WORDS loads of LD (STEP bytes each) a block of BYTES; SCALES reads the block's scale (and minimum) from
 * its units BDOT_R(k), VALUE is value j of the block */
#define BDOT_FN(T, WORDS, BYTES, LD, STEP, SCALES, VALUE)                                                         \
    typedef struct { uint32_t w[BDOT_MAX][WORDS]; } bdot_raw_##T;                                                \
    DEVFN void bdot_##T##_load(bdot_raw_##T *r, const uint8_t *w, int64_t i, int64_t stride, int nb) {          \
        BDOT_UNROLL                                                                                              \
        for (int u = 0; u < BDOT_MAX; u++)                                                                       \
            if (u < nb)                                                                                          \
                for (int c = 0; c < WORDS; c++) r->w[u][c] = LD(w + ((i + u * stride) >> 5) * BYTES + STEP * c); \
    }                                                                                                            \
    BDOT_HOLD_FN(T, BDOT_MAX, WORDS)                                                                             \
    BDOT_DOT_FN(T, BDOT_MAX, 1, BYTES, 0, SCALES, VALUE)                                                         \
    BDOT_WRAP(T)
/* bdot_<T>_x<G>: groups of G blocks (GBYTES = G * BYTES, a multiple of LW), each loaded as GBYTES / LW loads of LW
 * bytes (bdot_ld128 or bdot_ld64), up to GMAX groups a lane */
#define BDOT_GROUP_FN(T, G, GMAX, BYTES, LW, STEP, SCALES, VALUE)                                                \
    typedef struct { uint32_t w[GMAX][G * BYTES / 4]; } bdot_raw_##T##_x##G;                                     \
    DEVFN void bdot_##T##_x##G##_load(bdot_raw_##T##_x##G *r, const uint8_t *w, int64_t i, int64_t stride,      \
                                      int nb) {                                                                  \
        BDOT_UNROLL                                                                                              \
        for (int u = 0; u < GMAX; u++)                                                                           \
            if (u < nb)                                                                                          \
                BDOT_UNROLL                                                                                      \
                for (int c = 0; c < G * BYTES / LW; c++) {                                                      \
                    const uint8_t *p = w + ((i + u * stride) >> 5) * BYTES + LW * c;                            \
                    if (LW == 16) bdot_ld128(p, r->w[u] + 4 * c);                                                \
                    else bdot_ld64(p, r->w[u] + 2 * c);                                                          \
                }                                                                                                \
    }                                                                                                            \
    BDOT_HOLD_FN(T##_x##G, GMAX, G * BYTES / 4)                                                                  \
    BDOT_DOT_FN(T##_x##G, GMAX, G, BYTES, STEP, SCALES, VALUE)                                                   \
    BDOT_WRAP(T##_x##G)
/* each type's block form, then its group form (GROUP: G, at most GMAX groups a lane, LW-byte loads; the gemv
 * schedule's table bdot_groups in compiler/schedules/gemv.c names the same) */
#define BDOT_TYPE(T, WORDS, BYTES, LD, STEP, G, GMAX, LW, SCALES, VALUE) \
    BDOT_FN(T, WORDS, BYTES, LD, STEP, SCALES, VALUE)                    \
    BDOT_GROUP_FN(T, G, GMAX, BYTES, LW, STEP, SCALES, VALUE)
/* q4_1: {d, m} in word 0, value j the nibble (j & 15) of words 1..4, high for j >= 16: d * q + m */
BDOT_TYPE(q4_1, 5, 20, bdot_ld32, 4, 4, 2, 16,
          const float d = bdot_h2f(BDOT_R(0)); const float m = bdot_h2f(BDOT_R(0) >> 16),
          d * (float)((BDOT_R(1 + (j & 15) / 4) >> (8 * (j & 3) + (j & 16 ? 4 : 0))) & 15) + m)
/* q4_0: d in half 0, the nibbles in halves 1..8: d * (q - 8); groups of 8 with 16-byte loads, and of 4 with 8-byte
 * loads (a pair's, whose activations for 2 x 8 blocks would not fit the registers) */
#define BDOT_Q4_0_SCALES const float d = bdot_h2f(BDOT_R(0))
#define BDOT_Q4_0_VALUE d * (float)((int)((BDOT_R(1 + (j & 15) / 2) >> (8 * (j & 1) + (j & 16 ? 4 : 0))) & 15) - 8)
BDOT_TYPE(q4_0, 9, 18, bdot_ld16, 2, 8, 1, 16, BDOT_Q4_0_SCALES, BDOT_Q4_0_VALUE)
BDOT_GROUP_FN(q4_0, 4, 2, 18, 8, 2, BDOT_Q4_0_SCALES, BDOT_Q4_0_VALUE)
/* q8_0: d in half 0, the int8 values in halves 1..16: d * q */
BDOT_TYPE(q8_0, 17, 34, bdot_ld16, 2, 4, 1, 8, const float d = bdot_h2f(BDOT_R(0)),
          d * (float)(int8_t)(BDOT_R(1 + j / 2) >> (8 * (j & 1))))
/* q5_1: {d, m} in word 0, the fifth bits in word 1 (bit j for value j), the nibbles in words 2..5 as q4_1's */
BDOT_TYPE(q5_1, 6, 24, bdot_ld32, 4, 2, 3, 16,
          const float d = bdot_h2f(BDOT_R(0)); const float m = bdot_h2f(BDOT_R(0) >> 16),
          d * (float)(((BDOT_R(2 + (j & 15) / 4) >> (8 * (j & 3) + (j & 16 ? 4 : 0))) & 15) |
                      ((BDOT_R(1) >> j) & 1) << 4) + m)
/* q5_0: d in half 0, the fifth bits in halves 1..2, the nibbles in halves 3..10: d * (q - 16) */
BDOT_TYPE(q5_0, 11, 22, bdot_ld16, 2, 4, 1, 8, const float d = bdot_h2f(BDOT_R(0)),
          d * (float)((int)(((BDOT_R(3 + (j & 15) / 2) >> (8 * (j & 1) + (j & 16 ? 4 : 0))) & 15) |
                            (((BDOT_R(1) | BDOT_R(2) << 16) >> j) & 1) << 4) - 16))

/* The K-quants (ggml-common.h's block_q4_K, block_q5_K, block_q6_K; ggml-quants.c's dequantize_row_q4_K ...):
 * super-blocks of 256 values, the value at flat index i of a weight whose rows are whole super-blocks is value
 * i % 256 of super-block i / 256. Q4_K and Q5_K: 8 sub-blocks of 32, sub-block s with a 6-bit scale and minimum
 * packed in 12 bytes (kq_scale, kq_min: ggml's get_scale_min_k4), value d * scale * q - dmin * min. Every product
 * is exact in f32 (d has 11 significant bits, the scale 6, q at most 5; Q6_K's d * scale * q at most 23), so the
 * one rounding is Q4_K / Q5_K's subtraction, as in ggml's and gguf-py's dequantization. */
DEVFN int kq_scale(const uint8_t *sc, int s) { return s < 4 ? sc[s] & 63 : (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4; }
DEVFN int kq_min(const uint8_t *sc, int s) { return s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | (sc[s] >> 6) << 4; }
/* {f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]}: q of value j of sub-block s is the low (s even) or high
 * (s odd) nibble of qs[32 * (s / 2) + j] */
DEVFN float ld_q4_k(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 8) * 144;
    const int e = (int)(i & 255), s = e >> 5, q = (b[16 + (s >> 1) * 32 + (e & 31)] >> (s & 1 ? 4 : 0)) & 15;
    return f16_at(b) * (float)kq_scale(b + 4, s) * (float)q - f16_at(b + 2) * (float)kq_min(b + 4, s);
}
/* {f16 d; f16 dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}: q4_k's nibble plus 16 times bit s of qh[j] */
DEVFN float ld_q5_k(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 8) * 176;
    const int e = (int)(i & 255), s = e >> 5, j = e & 31;
    const int q = ((b[48 + (s >> 1) * 32 + j] >> (s & 1 ? 4 : 0)) & 15) | ((b[16 + j] >> s) & 1) << 4;
    return f16_at(b) * (float)kq_scale(b + 4, s) * (float)q - f16_at(b + 2) * (float)kq_min(b + 4, s);
}
/* {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d}: value e in half h = e / 128, quarter t = e / 32 % 4,
 * position j = e % 32 is d * scales[e / 16] * (q - 32), q's low 4 bits the low (t < 2) or high nibble of
 * ql[64 h + 32 (t % 2) + j], its high 2 bits bits 2t and 2t + 1 of qh[32 h + j] */
DEVFN int q6_k_int(const uint8_t *b, int e) {   /* q of value e of the super-block at b, 0..63 */
    const int h = e >> 7, t = (e >> 5) & 3, j = e & 31;
    return ((b[64 * h + 32 * (t & 1) + j] >> (t & 2 ? 4 : 0)) & 15) | ((b[128 + 32 * h + j] >> 2 * t) & 3) << 4;
}
DEVFN float ld_q6_k(const uint8_t *p, int64_t i) {
    const uint8_t *b = p + (i >> 8) * 210;
    const int e = (int)(i & 255);
    return f16_at(b + 208) * (float)(int8_t)b[192 + (e >> 4)] * (float)(q6_k_int(b, e) - 32);
}

/* bdot_<k-type>_h(w, i, stride, x, nb): the gemv schedule's block dot product over halves of super-blocks (kernel IR
 * bdot with rounds of 128 values): the sum over u < nb and j < 128 of the weight's value at flat index i + u * stride
 * + j (i a half's first: a multiple of 128; stride a multiple of 256) times x[u * stride + j], each value as ld_q4_k
 * ... compute it. A half's bytes are loaded first, every round's before the first product (bdot_zero_after): q4_k
 * the 16-byte head {d, dmin, scales} and the half's 64 bytes of nibbles (5 loads of 16 bytes), q5_k also the 32
 * bytes of fifth bits (7), q6_k (210-byte super-blocks, 2-aligned) the half's 64 bytes of low bits, 32 of high
 * bits and 8 scales in 4-byte words from the aligned word at or before each, realigned by a funnel shift where the
 * super-block starts 2 bytes past a word, and d in a 2-byte load. Two lanes read a super-block's head. */
#define BDOT_KMAX 2
DEVFN uint32_t bdot_byte(const uint32_t *rw, int o) { return (rw[o >> 2] >> (8 * (o & 3))) & 255; }
/* q4_k / q5_k: sub-block s's 6-bit scale and minimum from the head's words (kq_scale, kq_min) */
DEVFN float bdot_kq_scale(const uint32_t *hd, int s) {
    return (float)(s < 4 ? bdot_byte(hd, 4 + s) & 63 : (bdot_byte(hd, 8 + s) & 15) | (bdot_byte(hd, s) >> 6) << 4);
}
DEVFN float bdot_kq_min(const uint32_t *hd, int s) {
    return (float)(s < 4 ? bdot_byte(hd, 8 + s) & 63 : (bdot_byte(hd, 8 + s) >> 4) | (bdot_byte(hd, 4 + s) >> 6) << 4);
}
#ifdef __CUDACC__
DEVFN uint32_t bdot_shift16(uint32_t lo, uint32_t hi, int by) { return by ? __funnelshift_r(lo, hi, 16) : lo; }
#else
static inline uint32_t bdot_shift16(uint32_t lo, uint32_t hi, int by) { return by ? lo >> 16 | hi << 16 : lo; }
#endif
/* q4_k (Q5 = 0) and q5_k (Q5 = 1): w[u] = the head's 4 words, q5_k's 8 words of qh, the half's 16 words of qs */
#define BDOT_KQ_FN(T, BYTES, Q5)                                                                                  \
    typedef struct { uint32_t w[BDOT_KMAX][4 + 8 * Q5 + 16]; } bdot_raw_##T##_h;                                 \
    DEVFN void bdot_##T##_h_load(bdot_raw_##T##_h *r, const uint8_t *w, int64_t i, int64_t stride, int nb) {    \
        const int h = (int)((i >> 7) & 1);                                                                       \
        BDOT_UNROLL                                                                                              \
        for (int u = 0; u < BDOT_KMAX; u++)                                                                      \
            if (u < nb) {                                                                                        \
                const uint8_t *b = w + ((i + u * stride) >> 8) * BYTES;                                          \
                bdot_ld128(b, r->w[u]);                                                                          \
                if (Q5) { bdot_ld128(b + 16, r->w[u] + 4); bdot_ld128(b + 32, r->w[u] + 8); }                   \
                BDOT_UNROLL                                                                                      \
                for (int c = 0; c < 4; c++)                                                                      \
                    bdot_ld128(b + 16 + 32 * Q5 + 64 * h + 16 * c, r->w[u] + 4 + 8 * Q5 + 4 * c);                \
            }                                                                                                    \
    }                                                                                                            \
    BDOT_HOLD_FN(T##_h, BDOT_KMAX, 4 + 8 * Q5 + 16)                                                              \
    DEVFN float bdot_##T##_h_dot(const bdot_raw_##T##_h *r, int64_t i, int64_t stride, const float *x, int nb,   \
                                 float sum) {                                                                    \
        const int h = (int)((i >> 7) & 1);                                                                       \
        BDOT_UNROLL                                                                                              \
        for (int u = 0; u < BDOT_KMAX; u++) {                                                                    \
            if (u >= nb) break;                                                                                  \
            const uint32_t *rw = r->w[u];                                                                        \
            const float d = bdot_h2f(rw[0]), dmin = bdot_h2f(rw[0] >> 16);                                       \
            BDOT_UNROLL                                                                                          \
            for (int s4 = 0; s4 < 4; s4++) {                                                                     \
                const int sb = 4 * h + s4;                                                                       \
                const float sc = bdot_kq_scale(rw, sb), mn = bdot_kq_min(rw, sb);                                \
                const float *xs = x + u * stride + 32 * s4;                                                      \
                for (int j = 0; j < 32; j++) {                                                                   \
                    int q = (bdot_byte(rw + 4 + 8 * Q5, 32 * (s4 >> 1) + j) >> (s4 & 1 ? 4 : 0)) & 15;           \
                    if (Q5) q |= ((bdot_byte(rw + 4, j) >> sb) & 1) << 4;                                        \
                    sum += xs[j] * (d * sc * (float)q - dmin * mn);                                              \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
        return sum;                                                                                              \
    }                                                                                                            \
    BDOT_WRAP(T##_h)
BDOT_KQ_FN(q4_k, 144, 0)
BDOT_KQ_FN(q5_k, 176, 1)
/* q6_k: the half's pieces ql (64 bytes at 64 h), qh (32 at 128 + 32 h), scales (8 at 192 + 8 h): w[u] = their
 * words and one more each (the word after the piece where the super-block starts 2 bytes past a word, mis[u]:
 * then realigned as they are read), d[u] the scale */
enum { BDOT_Q6_QL = 0, BDOT_Q6_QH = 17, BDOT_Q6_SC = 26, BDOT_Q6_WORDS = 29 };
typedef struct { uint32_t w[BDOT_KMAX][BDOT_Q6_WORDS], d[BDOT_KMAX]; int mis[BDOT_KMAX]; } bdot_raw_q6_k_h;
DEVFN void bdot_q6_k_h_load(bdot_raw_q6_k_h *r, const uint8_t *w, int64_t i, int64_t stride, int nb) {
    const int h = (int)((i >> 7) & 1);
    BDOT_UNROLL
    for (int u = 0; u < BDOT_KMAX; u++)
        if (u < nb) {
            const uint8_t *b = w + ((i + u * stride) >> 8) * 210;
            const int mis = r->mis[u] = (int)((uintptr_t)b & 2);
            const uint8_t *a = b - mis;
            uint32_t *rw = r->w[u];
            BDOT_UNROLL
            for (int c = 0; c < 16; c++) rw[BDOT_Q6_QL + c] = bdot_ld32(a + 64 * h + 4 * c);
            /* the word after a piece: needed where the super-block starts past a word; else word 0 again (no
             * branch, no read past the super-block) */
            rw[BDOT_Q6_QL + 16] = bdot_ld32(a + 64 * h + (mis ? 64 : 0));
            BDOT_UNROLL
            for (int c = 0; c < 8; c++) rw[BDOT_Q6_QH + c] = bdot_ld32(a + 128 + 32 * h + 4 * c);
            rw[BDOT_Q6_QH + 8] = bdot_ld32(a + 128 + 32 * h + (mis ? 32 : 0));
            rw[BDOT_Q6_SC] = bdot_ld32(a + 192 + 8 * h);
            rw[BDOT_Q6_SC + 1] = bdot_ld32(a + 196 + 8 * h);
            rw[BDOT_Q6_SC + 2] = bdot_ld32(a + 192 + 8 * h + (mis ? 8 : 0));
            r->d[u] = bdot_ld16(b + 208);
        }
}
DEVFN uint32_t bdot_q6_k_h_hold(bdot_raw_q6_k_h *r, int nb) {
    uint32_t all = 0;
    BDOT_UNROLL
    for (int u = BDOT_KMAX - 1; u >= 0; u--)
        if (u < nb) {
            BDOT_UNROLL
            for (int c = BDOT_Q6_WORDS - 1; c >= 0; c--) { bdot_hold(&r->w[u][c]); all ^= r->w[u][c]; }
            bdot_hold(&r->d[u]);
            all ^= r->d[u];
        }
    return all;
}
DEVFN float bdot_q6_k_h_dot(const bdot_raw_q6_k_h *r, int64_t i, int64_t stride, const float *x, int nb, float sum) {
    (void)i;
    BDOT_UNROLL
    for (int u = 0; u < BDOT_KMAX; u++) {
        if (u >= nb) break;
        const uint32_t *rw = r->w[u];
        uint32_t ql[16], qh[8], sc[2];
        BDOT_UNROLL
        for (int c = 0; c < 16; c++) ql[c] = bdot_shift16(rw[BDOT_Q6_QL + c], rw[BDOT_Q6_QL + c + 1], r->mis[u]);
        BDOT_UNROLL
        for (int c = 0; c < 8; c++) qh[c] = bdot_shift16(rw[BDOT_Q6_QH + c], rw[BDOT_Q6_QH + c + 1], r->mis[u]);
        BDOT_UNROLL
        for (int c = 0; c < 2; c++) sc[c] = bdot_shift16(rw[BDOT_Q6_SC + c], rw[BDOT_Q6_SC + c + 1], r->mis[u]);
        const float d = bdot_h2f(r->d[u]);
        BDOT_UNROLL
        for (int t = 0; t < 4; t++)
            BDOT_UNROLL
            for (int j16 = 0; j16 < 2; j16++) {
                const float dsc = d * (float)(int8_t)bdot_byte(sc, 2 * t + j16);
                const float *xs = x + u * stride + 32 * t + 16 * j16;
                for (int jj = 0; jj < 16; jj++) {
                    const int j = 16 * j16 + jj;
                    const int q = ((bdot_byte(ql, 32 * (t & 1) + j) >> (t & 2 ? 4 : 0)) & 15) |
                                  ((bdot_byte(qh, j) >> 2 * t) & 3) << 4;
                    sum += xs[jj] * (dsc * (float)(q - 32));
                }
            }
    }
    return sum;
}
BDOT_WRAP(q6_k_h)

/* activations staged as bf16: round to nearest even (NaN stays NaN) */
DEVFN uint16_t f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
/* knob debug_kv_round's fault (a bf16 KV cache's stores): the low 16 bits dropped, no rounding */
DEVFN uint16_t f32_to_bf16_truncated(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }
/* activations staged as f16 (for f16 weights): round to nearest even; past 65504 -> inf, below 2^-14 subnormal */
DEVFN uint16_t f32_to_f16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);   /* rounds past 65504 */
    if (a < 0x38800000u) {   /* below 2^-14: a subnormal half, m * 2^-24 */
        if (a < 0x33000000u) return (uint16_t)s;   /* below 2^-25: rounds to 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;   /* value = m * 2^(e - 150) */
        uint32_t q = m >> sh, r = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        q += r > half || (r == half && (q & 1));
        return (uint16_t)(s | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1);   /* round the 13 dropped bits to nearest even */
    return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}

#ifdef __CUDACC__
/* vload_words(w, p, words): the 32-bit words at p (16-byte aligned where words >= 4, 8 where 2, else 4) by 16-,
 * 8- or 4-byte loads. vload_widen_<dtype>(v, w, n, z): the words' n elements as f32, each word XOR z first. A
 * run of vloads (the emitter's: a schedule's unrolled round) loads every vector's words, then z = zero_after(the
 * XOR of one word of each), then widens: z is 0, but ptxas cannot know it, so no conversion or product can start
 * before the run's last load has issued, and the whole run is in flight at once (without it ptxas moved the
 * products up between the loads: scripts/sass_report). vload_<dtype>(v, p, o, n): p[o .. o + n) as f32, alone. */
DEVFN void vload_words(uint32_t *w, const void *p, int words) {
    if (words >= 4) {
#pragma unroll
        for (int c = 0; c < words / 4; c++) {
            const uint4 q = ((const uint4 *)p)[c];
            w[4 * c] = q.x; w[4 * c + 1] = q.y; w[4 * c + 2] = q.z; w[4 * c + 3] = q.w;
        }
    } else if (words == 2) {
        const uint2 q = *(const uint2 *)p;
        w[0] = q.x; w[1] = q.y;
    } else w[0] = *(const uint32_t *)p;
}
template <int F16, int PER> DEVFN void vload_widen_(float *v, const uint32_t *w, int n, uint32_t z) {
#pragma unroll
    for (int i = 0; i < n / PER; i++)
        if (PER == 1) v[i] = __uint_as_float(w[i] ^ z);
        else if (F16) { v[2 * i] = f16_to_f32((w[i] ^ z) & 0xffffu); v[2 * i + 1] = f16_to_f32((w[i] ^ z) >> 16); }
        else { v[2 * i] = bf16_to_f32((w[i] ^ z) & 0xffffu); v[2 * i + 1] = bf16_to_f32((w[i] ^ z) >> 16); }
}
DEVFN void vload_widen_f32(float *v, const uint32_t *w, int n, uint32_t z) { vload_widen_<0, 1>(v, w, n, z); }
DEVFN void vload_widen_bf16(float *v, const uint32_t *w, int n, uint32_t z) { vload_widen_<0, 2>(v, w, n, z); }
DEVFN void vload_widen_f16(float *v, const uint32_t *w, int n, uint32_t z) { vload_widen_<1, 2>(v, w, n, z); }
template <int F16, typename T> DEVFN void vload_(float *v, const T *p, int64_t o, int n) {
    uint32_t w[16];
    const int per = 4 / (int)sizeof *p;   /* elements per 32-bit word */
    vload_words(w, p + o, n / per);
    if (per == 1) vload_widen_<0, 1>(v, w, n, 0u);
    else vload_widen_<F16, 2>(v, w, n, 0u);
}
DEVFN void vload_f32(float *v, const float *p, int64_t o, int n) { vload_<0>(v, p, o, n); }
DEVFN void vload_bf16(float *v, const uint16_t *p, int64_t o, int n) { vload_<0>(v, p, o, n); }
DEVFN void vload_f16(float *v, const uint16_t *p, int64_t o, int n) { vload_<1>(v, p, o, n); }

/* mma.sync m16n8k16 with f32 accumulators in place (compiler/kernel_ir.h gives the fragments' layout) */
#define MMA_M16N8K16(ty)                                                                                              \
    DEVFN void mma_m16n8k16_##ty(float &c0, float &c1, float &c2, float &c3, uint32_t a0, uint32_t a1, uint32_t a2,  \
                                 uint32_t a3, uint32_t b0, uint32_t b1) {                                            \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." #ty "." #ty ".f32 {%0, %1, %2, %3}, "                  \
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                                 \
                     : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1)); \
    }
MMA_M16N8K16(bf16)
MMA_M16N8K16(f16)

/* ldmatrix_xN(d0, .., dN-1, shared address of this lane's row) */
DEVFN void ldmatrix_x1(uint32_t &d0, const uint16_t *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(d0) : "r"((unsigned)__cvta_generic_to_shared(row)));
}
DEVFN void ldmatrix_x2(uint32_t &d0, uint32_t &d1, const uint16_t *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(d0), "=r"(d1) : "r"((unsigned)__cvta_generic_to_shared(row)));
}
DEVFN void ldmatrix_x4(uint32_t &d0, uint32_t &d1, uint32_t &d2, uint32_t &d3, const uint16_t *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3) : "r"((unsigned)__cvta_generic_to_shared(row)));
}

#else /* the CPU */
/* the GPU's vector loads need aligned addresses: the CPU build checks them */
static inline void vload_fault(const char *kernel, int64_t at) {
    fprintf(stderr, "llmcc: %s: misaligned vector load at element %lld\n", kernel, (long long)at);
    abort();
}
/* vload_<dtype>(v, p, o, n, align, kernel): p[o .. o + n) widened to f32 */
#define VLOAD(name, T, conv)                                                                            \
    static inline void vload_##name(float *v, const T *p, int64_t o, int n, int align, const char *kernel) { \
        if ((uintptr_t)(p + o) % align) vload_fault(kernel, o);                                          \
        for (int j = 0; j < n; j++) v[j] = conv(p[o + j]);                                               \
    }
VLOAD(f32, float, )
VLOAD(bf16, uint16_t, bf16_to_f32)
VLOAD(f16, uint16_t, f16_to_f32)

/* A warp shuffle over a block's lanes: every lane publishes, then reads its source lane's; a source lane
 * outside the warp (down, up) gives the lane its own value, as on the GPU */
enum { SHFL_down, SHFL_up, SHFL_xor, SHFL_idx };
static inline void shfl_block(float *dst, const float *src, float *lanebuf, int64_t block, int kind, int64_t a) {
    for (int64_t tid = 0; tid < block; tid++) lanebuf[tid] = src[tid];
    for (int64_t tid = 0; tid < block; tid++) {
        const int64_t lane = tid & 31;
        int64_t s = kind == SHFL_down ? lane + a : kind == SHFL_up ? lane - a : kind == SHFL_xor ? lane ^ a : a & 31;
        if ((kind == SHFL_down && (a < 0 || s > 31)) || (kind == SHFL_up && (a < 0 || s < 0)) ||
            (kind == SHFL_xor && (s < 0 || s > 31))) s = lane;
        dst[tid] = lanebuf[tid - lane + s];
    }
}

/* The CPU's tensor core: one warp's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (or f16), gathering
 * every lane's fragments per the PTX ISA's layouts, so a schedule that puts a value in the wrong register
 * computes a wrong product here as on the GPU. Products of bf16 are exact in f32; the 16 of one output are
 * summed in double and added to C with one rounding to f32 (the GPU's adder is at least f32 wide but
 * unspecified in order and rounding: results can differ in the last bits). */
static inline float mma_elem(int f16, uint32_t h) { return f16 ? f16_to_f32(h & 0xffffu) : bf16_to_f32(h & 0xffffu); }
static inline void mma_warp(int64_t w, int f16, const uint32_t *a0, const uint32_t *a1, const uint32_t *a2,
                            const uint32_t *a3, const uint32_t *b0, const uint32_t *b1, float *c0, float *c1,
                            float *c2, float *c3) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        const int64_t i = w + l;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = mma_elem(f16, a0[i] >> (16 * h));
            A[g + 8][2 * t + h] = mma_elem(f16, a1[i] >> (16 * h));
            A[g][2 * t + 8 + h] = mma_elem(f16, a2[i] >> (16 * h));
            A[g + 8][2 * t + 8 + h] = mma_elem(f16, a3[i] >> (16 * h));
            B[2 * t + h][g] = mma_elem(f16, b0[i] >> (16 * h));
            B[2 * t + 8 + h][g] = mma_elem(f16, b1[i] >> (16 * h));
        }
    }
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        float *c[4] = {c0 + w + l, c1 + w + l, c2 + w + l, c3 + w + l};
        for (int q = 0; q < 4; q++) {
            const int r = g + 8 * (q >> 1), col = 2 * t + (q & 1);
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)A[r][k] * (double)B[k][col];
            *c[q] = (float)((double)*c[q] + s);
        }
    }
}

/* ldmatrix.sync.aligned.m8n8.xN.shared.b16 for one warp: lanes 8m..8m+7 give the rows of matrix m */
static inline void ldmatrix_warp(const char *kernel, int64_t w, const uint16_t *s, int64_t size, const int64_t *addr,
                                 int nmat, uint32_t *d0, uint32_t *d1, uint32_t *d2, uint32_t *d3) {
    uint32_t *d[4] = {d0, d1, d2, d3};
    for (int j = 0; j < 8 * nmat; j++) {
        const int64_t a = addr[w + j];
        if (a < 0 || a % 8 || a + 8 > size) {
            fprintf(stderr, "llmcc: %s: ldmatrix row at element %lld is outside shared memory or not 16-byte aligned\n",
                    kernel, (long long)a);
            abort();
        }
    }
    for (int l = 0; l < 32; l++)
        for (int m = 0; m < nmat; m++) {
            const int64_t o = addr[w + 8 * m + (l >> 2)] + 2 * (l & 3);
            d[m][w + l] = (uint32_t)s[o] | (uint32_t)s[o + 1] << 16;
        }
}

/* cp.async. A copy is queued when a thread issues it (after the alignment and bounds checks the GPU would
 * fault on) and performed only by the wait_group that completes its group, oldest first; commit and wait
 * are kernel-level statements, so the block's threads share one group count. A schedule that reads a stage
 * before waiting for it reads what was there before (the C backend fills shared memory with NaN at block
 * start), as it may on the GPU. */
typedef struct { uint8_t *dst; const uint8_t *src; int bytes; int64_t group; } CpCopy;
typedef struct { CpCopy *q; int n, cap; int64_t groups; } CpQueue;
static inline void cp_async_issue(CpQueue *c, const char *kernel, void *smem, int64_t size, int64_t off,
                                  const void *src, int bytes) {
    if (off < 0 || off + bytes > size || (uintptr_t)((uint8_t *)smem + off) % bytes ||
        (src && (uintptr_t)src % bytes)) {
        fprintf(stderr, "llmcc: %s: %d-byte cp.async at shared byte %lld is outside shared memory or misaligned\n",
                kernel, bytes, (long long)off);
        abort();
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->q = (CpCopy *)realloc(c->q, (size_t)c->cap * sizeof *c->q);
        if (!c->q) { fprintf(stderr, "llmcc: %s: out of memory\n", kernel); abort(); }
    }
    c->q[c->n++] = (CpCopy){(uint8_t *)smem + off, (const uint8_t *)src, bytes, c->groups};
}
static inline void cp_async_commit(CpQueue *c) { c->groups++; }
static inline void cp_async_wait(CpQueue *c, int pending) {
    int keep = 0;
    for (int i = 0; i < c->n; i++) {
        const CpCopy *p = &c->q[i];
        if (p->group >= c->groups - pending) { c->q[keep++] = *p; continue; }
        if (p->src) memcpy(p->dst, p->src, (size_t)p->bytes);
        else memset(p->dst, 0, (size_t)p->bytes);
    }
    c->n = keep;
}
#endif
#endif
