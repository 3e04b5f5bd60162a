/* cpu_gemm.h: the f32 GEMM micro-kernel of llmcc's native CPU target, for
 * prefill (many tokens at once), the BLIS / llamafile-tinyBLAS way: the
 * emitted code packs A and B into slivers, and an MR x NR register tile of C
 * is accumulated over k with one broadcast of A and NR / 8 vector loads of B
 * per step.
 *
 * Portable C: GCC / Clang vector extensions (f32x8 of 32 bytes), no
 * intrinsics, so the same source becomes AVX2 + FMA with -march=x86-64-v3,
 * SSE2 at baseline x86-64 (each f32x8 split in two xmm halves) and NEON on
 * aarch64 (two q registers). Loads and stores go through __builtin_memcpy, so
 * no pointer needs any alignment. On x86-64 the file also holds what a CPU may
 * add, chosen when the program runs (each with an environment switch): an
 * 8 x 32 f32 tile in AVX-512's zmm registers, bf16 products on AVX512_BF16's
 * vdpbf16ps and on AMX tiles (the sections below say how and what they gained).
 *
 * Why 6 x 16 (MR x NR) for AVX2: x86-64 has 16 ymm registers. 6 rows x 2
 * vectors of 8 columns = 12 accumulators, + 2 for the B row + 1 for the
 * broadcast A value = 15, all in registers (BLIS's Haswell sgemm shape).
 * 12 independent FMA chains cover FMA latency x FMA ports (4-5 x 2 = 8-10
 * from Haswell to Zen 4); per k step it issues 12 FMAs against 8 loads
 * (2 of B, 6 broadcasts), under the 2-3 loads a cycle the cores sustain, so
 * the FMA ports bound it. 4 x 24 would also fit (12 + 3 + 1 = 16) but leaves
 * no spare register, and NR = 16 divides every hidden size llmcc meets
 * (multiples of 64), so only the m (token) edge is ragged. On NEON's 32 q
 * registers the split tile is 24 + 4 + 1 and still fits; on SSE2's 16 xmm it
 * spills: correct, not tuned (a baseline build is the fallback, not the
 * target).
 *
 * What the -O2 -march=x86-64-v3 assembly shows (gcc 12.2, `gcc -S`): the k
 * loop, unrolled by 4, is 48 FMAs on ymm registers (41 vfmadd231ps and 7
 * vfmadd132ps, the same FMA with the register roles swapped where gcc chose
 * to rotate which register holds a B vector), 8 vmovdqu loads of B, 24
 * vbroadcastss of A, one register-to-register vmovaps and the pointer and
 * counter updates: no access to the stack inside the loop, so the 12
 * accumulators stay in ymm registers from before the loop to the stores after
 * it. Clang 14 for aarch64 (`--target=aarch64-linux-gnu -S`, no gcc cross
 * compiler was at hand) gives 96 fmla on q registers in the unrolled loop,
 * with 4 stores and 4 reloads of one q register to the stack per 4 k steps:
 * its schedule loads B ahead and runs one register short; not tuned there.
 *
 * FMA: -std=c11 turns GCC's -ffp-contract off, so `c += a * b` would be a
 * vmulps + vaddps (half the peak); the kernel functions set
 * fp-contract=fast for GCC (Clang contracts within one expression already).
 *
 * k is walked in blocks of CPU_GEMM_KC = 2048, not BLIS's L1-sized 256: on
 * the Zen 4 this was tuned on (scripts/bench_cpu_gemm, m = 64, n = 4864 /
 * 896, k = 896 / 4864), blocks of 128 to 512 ran at 65-80% of the peak at
 * the measured clock, against 80-85% for 1024 and up or for none at all. A small block reloads and stores C
 * once per block and restarts the hardware prefetchers' streams more often,
 * while the k loop's 88 bytes per 6 cycles come from L2 easily. The block
 * still bounds the B sliver (128 KiB) to what an L2 holds once k grows to a
 * large model's intermediate size (18944: a 1.2 MiB sliver unblocked). */
#ifndef LLMCC_CPU_GEMM_H
#define LLMCC_CPU_GEMM_H
#include <stdbool.h>
#include <stdint.h>

#define CPU_GEMM_MR 6  /* rows of A per register tile: 6 x 2 accumulators + 3 = 15 of AVX2's 16 ymm */
#define CPU_GEMM_NR 16 /* columns of B per register tile: two f32x8 */
/* k block: a B sliver's block (16 x 2048 x 4 = 128 KiB) and an A sliver's (48 KiB) stay in L2 however large
 * k is (the header comment says why not an L1-sized block) */
#define CPU_GEMM_KC 2048
#define CPU_GEMM_DOT_MR 8  /* rows of the dot16 tile: 8 x 2 accumulators of 16 lanes, + 2 for B, + 1 for A */
#define CPU_GEMM_DOT_NR 32 /* columns of the dot16 tile: two vectors of 16 pairs */

/* A kernel of the cpu target (model.c's k_*, cpu_gemm_packed): on x86-64 with GCC compiled three times, for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline (SSE2), the best the CPU runs chosen once when
 * the program starts (an ifunc: GCC's target_clones); elsewhere (aarch64: NEON is the baseline) once. The
 * kernels call no function of another instruction set, and their OpenMP loops are `omp for` inside the
 * caller's parallel region, so no code of theirs is outlined out of the clones. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(LLMCC_ONE_CLONE)
/* -DLLMCC_ONE_CLONE=4 (or 3): that clone alone, the same code (tests/conftest.py builds so: a third of the time) */
#if LLMCC_ONE_CLONE == 4
#define CPU_KERNEL __attribute__((target("arch=x86-64-v4")))
#else
#define CPU_KERNEL __attribute__((target("arch=x86-64-v3")))
#endif
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(LLMCC_NO_CLONES)
#define CPU_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_KERNEL
#endif

/* CPU_GEMM_SIZES_ONLY: the tile's sizes alone (the compiler's cpu_gemm schedule packs for them) */
#ifndef CPU_GEMM_SIZES_ONLY
#include "kernels.h"   /* f16_at: a GGUF block's f16 scale, widened; kq_scale, kq_min */
#if defined(__GNUC__) && !defined(__clang__)
/* contract c += a * b into one FMA despite -std=c11 (see the header comment) */
#define CPU_GEMM_FN static __attribute__((optimize("fp-contract=fast"), unused))
#else
#define CPU_GEMM_FN static __attribute__((unused))
#endif

typedef float cpu_gemm_f32x8 __attribute__((vector_size(32)));

/* Unaligned load / store of 8 floats. Macros, not functions: a function passing an f32x8 by value changes the
 * ABI where AVX is off, which GCC warns about (-Wpsabi) at baseline x86-64. */
#define CPU_GEMM_LD8(v, p) __builtin_memcpy(&(v), (p), sizeof(v))
#define CPU_GEMM_ST8(p, v) __builtin_memcpy((p), &(v), sizeof(v))

/* One k step of the 6 x 16 tile: row r's broadcast A value times both B vectors. Kept a macro, not an
 * array of accumulators, so that nothing depends on the compiler turning an array into registers. */
#define CPU_GEMM_ROW(r, A, B0, B1) do { \
        float a_ = (A)[(r) * rs]; \
        acc##r##0 += a_ * (B0); \
        acc##r##1 += a_ * (B1); \
    } while (0)
#define CPU_GEMM_STEP(A, B) do { \
        cpu_gemm_f32x8 b0_, b1_; \
        CPU_GEMM_LD8(b0_, B); \
        CPU_GEMM_LD8(b1_, (B) + 8); \
        CPU_GEMM_ROW(0, A, b0_, b1_); CPU_GEMM_ROW(1, A, b0_, b1_); CPU_GEMM_ROW(2, A, b0_, b1_); \
        CPU_GEMM_ROW(3, A, b0_, b1_); CPU_GEMM_ROW(4, A, b0_, b1_); CPU_GEMM_ROW(5, A, b0_, b1_); \
    } while (0)
#define CPU_GEMM_OUT(r) do { \
        float *c_ = c + (r) * ldc; \
        if (accumulate) { \
            cpu_gemm_f32x8 c0_, c1_; \
            CPU_GEMM_LD8(c0_, c_); \
            CPU_GEMM_LD8(c1_, c_ + 8); \
            acc##r##0 += c0_; \
            acc##r##1 += c1_; \
        } \
        CPU_GEMM_ST8(c_, acc##r##0); \
        CPU_GEMM_ST8(c_ + 8, acc##r##1); \
    } while (0)

/* The whole 6 x 16 tile: c (row stride ldc) = (accumulate ? c : 0) + MR rows of A (element (r, kk) at
 * a[r * rs + kk * ks]: a packed sliver has rs = 1, ks = MR; rows of a row-major matrix rs = lda, ks = 1)
 * times a b sliver (k x NR). Writes all MR x NR elements: the caller routes edge tiles through a local
 * tile. */
CPU_KERNEL CPU_GEMM_FN void cpu_gemm_tile(int64_t k, const float *a, int64_t rs, int64_t ks, const float *b,
                                          float *c, int64_t ldc, int accumulate) {
    cpu_gemm_f32x8 acc00 = {0}, acc01 = {0}, acc10 = {0}, acc11 = {0}, acc20 = {0}, acc21 = {0};
    cpu_gemm_f32x8 acc30 = {0}, acc31 = {0}, acc40 = {0}, acc41 = {0}, acc50 = {0}, acc51 = {0};
    int64_t kk = 0;
    /* C's rows are touched only after the k loop; asking for them now hides a miss to L3 (a C of 64 x 4864
     * floats does not fit L2) under the FMAs. Both ends of a row: 16 floats span two lines unless aligned. */
    for (int r = 0; r < CPU_GEMM_MR; r++) {
        __builtin_prefetch(c + r * ldc, 1);
        __builtin_prefetch(c + r * ldc + CPU_GEMM_NR - 1, 1);
    }
    /* unrolled by 4: a quarter of the loop counter and pointer updates, and more freedom to schedule
     * the next step's loads under this step's FMAs */
    for (; kk + 4 <= k; kk += 4, a += 4 * ks, b += 4 * CPU_GEMM_NR) {
        CPU_GEMM_STEP(a, b);
        CPU_GEMM_STEP(a + ks, b + CPU_GEMM_NR);
        CPU_GEMM_STEP(a + 2 * ks, b + 2 * CPU_GEMM_NR);
        CPU_GEMM_STEP(a + 3 * ks, b + 3 * CPU_GEMM_NR);
    }
    for (; kk < k; kk++, a += ks, b += CPU_GEMM_NR)
        CPU_GEMM_STEP(a, b);
    CPU_GEMM_OUT(0); CPU_GEMM_OUT(1); CPU_GEMM_OUT(2);
    CPU_GEMM_OUT(3); CPU_GEMM_OUT(4); CPU_GEMM_OUT(5);
}
#undef CPU_GEMM_ROW
#undef CPU_GEMM_STEP
#undef CPU_GEMM_OUT

/* Layouts (the caller writes the packed ones, zero-padded to whole slivers):
 *   a, lda = 0: m rows packed in slivers of MR: element (i, kk) at a[(i / MR) * MR * k + kk * MR + i % MR]
 *   a, lda > 0: a row-major matrix read in place: element (i, kk) at a[i * lda + kk] (the cpu_gemm schedule
 *               passes its activations so: no panel to pack in every task)
 *   bpack: n columns in slivers of NR: element (j, kk) at bpack[(j / NR) * NR * k + kk * NR + j % NR]
 * c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0) + sum_kk a(i, kk) * bpack(j, kk), for i < m, j < n.
 * Only the m x n corner of c is written (edge tiles go through a local tile). cpu_gemm_packed (below) runs this
 * portable form or, for what it can, the AVX-512 one. */
CPU_KERNEL CPU_GEMM_FN void cpu_gemm_packed_v(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                              const float *bpack, float *c, int64_t ldc, int accumulate) {
    /* an in-place A has no rows past m: its last, partial sliver of rows is packed (zero-padded) once per k block
     * here, for every B sliver to use */
    int64_t edge = lda ? m % CPU_GEMM_MR : 0, edge0 = m - edge;
    float sliver[CPU_GEMM_MR * CPU_GEMM_KC];
    /* k = 0 still has to clear c when not accumulating, so the block loop runs at least once */
    for (int64_t p0 = 0; p0 < k || p0 == 0; p0 += CPU_GEMM_KC) {
        int64_t kc = k - p0 < CPU_GEMM_KC ? k - p0 : CPU_GEMM_KC;
        int acc = accumulate || p0 > 0; /* later k blocks add to what the earlier ones wrote */
        for (int64_t kk = 0; edge && kk < kc; kk++)
            for (int64_t r = 0; r < CPU_GEMM_MR; r++)
                sliver[kk * CPU_GEMM_MR + r] = r < edge ? a[(edge0 + r) * lda + p0 + kk] : 0.0f;
        /* j outer, i inner: a B sliver's block, hot in L1 / L2 after the first tile, serves every A sliver
         * in turn; A's block (m x kc) is walked once per B sliver from L2 or L3 */
        for (int64_t j0 = 0; j0 < n; j0 += CPU_GEMM_NR) {
            const float *b = bpack + j0 * k + p0 * CPU_GEMM_NR;
            int64_t nr = n - j0 < CPU_GEMM_NR ? n - j0 : CPU_GEMM_NR;
            for (int64_t i0 = 0; i0 < m; i0 += CPU_GEMM_MR) {
                const float *ai = lda ? a + i0 * lda + p0 : a + i0 * k + p0 * CPU_GEMM_MR;
                int64_t rs = lda ? lda : 1, ks = lda ? 1 : CPU_GEMM_MR;
                int64_t mr = m - i0 < CPU_GEMM_MR ? m - i0 : CPU_GEMM_MR;
                float *ct = c + i0 * ldc + j0;
                if (mr == CPU_GEMM_MR && nr == CPU_GEMM_NR) {
                    cpu_gemm_tile(kc, ai, rs, ks, b, ct, ldc, acc);
                    continue;
                }
                /* an edge tile: the full tile into a local one, then only its mr x nr corner into c (an in-place
                 * A's partial rows from the sliver packed above) */
                float t[CPU_GEMM_MR * CPU_GEMM_NR];
                if (lda && mr < CPU_GEMM_MR) {
                    cpu_gemm_tile(kc, sliver, 1, CPU_GEMM_MR, b, t, CPU_GEMM_NR, 0);
                } else {
                    cpu_gemm_tile(kc, ai, rs, ks, b, t, CPU_GEMM_NR, 0);
                }
                for (int64_t i = 0; i < mr; i++)
                    for (int64_t j = 0; j < nr; j++)
                        ct[i * ldc + j] = (acc ? ct[i * ldc + j] : 0.0f) + t[i * CPU_GEMM_NR + j];
            }
        }
    }
}

/* ---- the weight panel, packed by the runtime (the cpu_gemm schedule's `pack` statement) ----
 * Packing turns nb rows of W (row-major, contiguous in k) into slivers whose k-th line holds one element of
 * each of the sliver's columns: a transposition. Done element by element (row outer) every store lands in
 * another cache line of a panel larger than L1; here 8 rows x 8 elements are loaded as 8 vectors, transposed
 * in registers (3 rounds of 8 two-vector shuffles, vunpck / vshufps / vperm2f128 on AVX2) and stored as 8
 * whole vectors, each the next 8 columns of one line. Rows past the weights' end (the last task's) are zero. */
typedef uint32_t cpu_gemm_u32x8 __attribute__((vector_size(32)));
typedef uint16_t cpu_gemm_u16x8 __attribute__((vector_size(16)));
typedef int8_t cpu_gemm_i8x8 __attribute__((vector_size(8)));
typedef uint8_t cpu_gemm_u8x8 __attribute__((vector_size(8)));
#define CPU_GEMM_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
/* r[0..7] (8 rows of 8 32-bit words) become their transpose in place */
#define CPU_GEMM_TRANSPOSE8(r) do { \
        cpu_gemm_u32x8 t_[8], u_[8]; \
        for (int q_ = 0; q_ < 8; q_ += 2) { \
            t_[q_] = CPU_GEMM_SHUF(r[q_], r[q_ + 1], 0, 8, 1, 9, 4, 12, 5, 13); \
            t_[q_ + 1] = CPU_GEMM_SHUF(r[q_], r[q_ + 1], 2, 10, 3, 11, 6, 14, 7, 15); \
        } \
        for (int q_ = 0; q_ < 8; q_ += 4) \
            for (int h_ = 0; h_ < 2; h_++) { \
                u_[q_ + 2 * h_] = CPU_GEMM_SHUF(t_[q_ + h_], t_[q_ + h_ + 2], 0, 1, 8, 9, 4, 5, 12, 13); \
                u_[q_ + 2 * h_ + 1] = CPU_GEMM_SHUF(t_[q_ + h_], t_[q_ + h_ + 2], 2, 3, 10, 11, 6, 7, 14, 15); \
            } \
        for (int q_ = 0; q_ < 4; q_++) { \
            r[q_] = CPU_GEMM_SHUF(u_[q_], u_[q_ + 4], 0, 1, 2, 3, 8, 9, 10, 11); \
            r[q_ + 4] = CPU_GEMM_SHUF(u_[q_], u_[q_ + 4], 4, 5, 6, 7, 12, 13, 14, 15); \
        } \
    } while (0)

/* Row r's 32-bit word q of the block at word kk, as f32 bits: f32 weights as they are, bf16 widened (its
 * bits are an f32's upper half), bf16 pairs (the dot16 layout: words of two bf16) as they are, GGUF's block
 * types (runtime/kernels.h gives their layout) dequantized (exactly: a scale times a small integer, plus
 * Q4_1 / Q5_1's minimum, in f32). A word past the row's end (an odd bf16 row in pairs) or a row past n is 0. The
 * block types' forms follow cpu_quant.h's type numbers (CPU_GEMM_W_Q8_0 + type). */
enum { CPU_GEMM_W_F32, CPU_GEMM_W_BF16, CPU_GEMM_W_BF16_PAIRS, CPU_GEMM_W_Q8_0, CPU_GEMM_W_Q4_0, CPU_GEMM_W_Q4_1,
       CPU_GEMM_W_Q4_K, CPU_GEMM_W_Q5_K, CPU_GEMM_W_Q6_K, CPU_GEMM_W_Q5_0, CPU_GEMM_W_Q5_1 };
static inline bool cpu_gemm_form_is_super(int form) { return form >= CPU_GEMM_W_Q4_K && form <= CPU_GEMM_W_Q6_K; }
static inline int64_t cpu_gemm_row_bytes(int form, int64_t k) {   /* bytes of k elements (block types: whole) */
    static const int16_t block_bytes[] = {34, 18, 20, 144, 176, 210, 22, 24};   /* Q8_0 .. Q5_1 */
    return form == CPU_GEMM_W_F32 ? 4 * k : form <= CPU_GEMM_W_BF16_PAIRS ? 2 * k
           : k / (cpu_gemm_form_is_super(form) ? 256 : 32) * block_bytes[form - CPU_GEMM_W_Q8_0];
}
/* element q of a block-type row, dequantized */
static inline float cpu_gemm_block_elem(int form, const uint8_t *row, int64_t q) {
    if (form == CPU_GEMM_W_Q4_K) return ld_q4_k(row, q);
    if (form == CPU_GEMM_W_Q5_K) return ld_q5_k(row, q);
    if (form == CPU_GEMM_W_Q6_K) return ld_q6_k(row, q);
    if (form == CPU_GEMM_W_Q5_0) return ld_q5_0(row, q);
    if (form == CPU_GEMM_W_Q5_1) return ld_q5_1(row, q);
    const uint8_t *b = row + cpu_gemm_row_bytes(form, q / 32 * 32);
    const int j = (int)(q % 32), qs = form == CPU_GEMM_W_Q4_1 ? 4 : 2;
    if (form == CPU_GEMM_W_Q8_0) return f16_at(b) * (float)(int8_t)b[2 + j];
    const int nib = (b[qs + j % 16] >> (j < 16 ? 0 : 4)) & 15;
    return form == CPU_GEMM_W_Q4_0 ? f16_at(b) * (float)(nib - 8)
                                   : f16_at(b) * (float)nib + f16_at(b + 2);
}
static inline uint32_t cpu_gemm_word(int form, const void *row, int64_t q, int64_t k) {
    if (form == CPU_GEMM_W_F32) { uint32_t v; __builtin_memcpy(&v, (const float *)row + q, 4); return v; }
    if (form == CPU_GEMM_W_BF16) return (uint32_t)((const uint16_t *)row)[q] << 16;
    if (form >= CPU_GEMM_W_Q8_0) {
        float f = cpu_gemm_block_elem(form, (const uint8_t *)row, q);
        uint32_t v;
        __builtin_memcpy(&v, &f, 4);
        return v;
    }
    const uint16_t *h = (const uint16_t *)row + 2 * q;
    return h[0] | (2 * q + 1 < k ? (uint32_t)h[1] << 16 : 0u);
}
typedef int32_t cpu_gemm_i32x8 __attribute__((vector_size(32)));
/* 8 small integers (8-bit lanes) as floats, through 32-bit integers: gcc 12 converts 8-bit lanes to float one
 * lane at a time (vpextrb + vcvtsi2ss, the most sampled instructions of a Q4_K_M prompt's weight pack), the
 * 32-bit ones in one vcvtdq2ps */
#define CPU_GEMM_WIDEN8(q) __builtin_convertvector(__builtin_convertvector((q), cpu_gemm_i32x8), cpu_gemm_f32x8)
/* 8 values of a K-quant row from kk (a multiple of 8: one sub-block of 32, Q6_K's of 16), dequantized as
 * kernels.h's ld_q4_k ... does (the products exact, Q4_K / Q5_K's minimum subtracted with one rounding). Always
 * inlined into cpu_gemm_load8's clones: left to gcc it stayed a baseline function, 22% of a Q4_K_M prompt. */
__attribute__((always_inline)) static inline void cpu_gemm_load8_k(int form, const uint8_t *row, int64_t kk,
                                                                   cpu_gemm_u32x8 *v) {
    const uint8_t *b = row + cpu_gemm_row_bytes(form, kk / 256 * 256);
    const int e = (int)(kk % 256), j = e % 32;
    cpu_gemm_u8x8 lo, hi;
    cpu_gemm_f32x8 f;
    if (form == CPU_GEMM_W_Q6_K) {
        const int h = e / 128, t = e / 32 % 4;
        __builtin_memcpy(&lo, b + 64 * h + 32 * (t % 2) + j, 8);
        __builtin_memcpy(&hi, b + 128 + 32 * h + j, 8);
        const cpu_gemm_i8x8 q = (cpu_gemm_i8x8)(((lo >> (t < 2 ? 0 : 4)) & 15) | ((hi >> 2 * t) & 3) << 4) - 32;
        f = CPU_GEMM_WIDEN8(q) *
            (f16_at(b + 208) * (float)(int8_t)b[192 + e / 16]);
    } else {
        const int s = e / 32;
        __builtin_memcpy(&lo, b + (form == CPU_GEMM_W_Q5_K ? 48 : 16) + 32 * (s / 2) + j, 8);
        cpu_gemm_u8x8 q = (lo >> (s % 2 ? 4 : 0)) & 15;
        if (form == CPU_GEMM_W_Q5_K) {
            __builtin_memcpy(&hi, b + 16 + j, 8);
            q |= ((hi >> s) & 1) << 4;
        }
        f = CPU_GEMM_WIDEN8(q) * (f16_at(b) * (float)kq_scale(b + 4, s)) -
            f16_at(b + 2) * (float)kq_min(b + 4, s);
    }
    __builtin_memcpy(v, &f, 32);
}
/* Row r of the weights, in runs of `run` consecutive rows whose starts are `gap` rows apart (a RoPE pair's
 * halves: runs of head_dim / 2 rows, every head_dim; else one run) */
#define CPU_GEMM_ROW_AT(w, r) ((const char *)(w) + (((r) / run) * gap + (r) % run) * ldw_bytes)
/* The 8 x 8 block of words kk.. of the rows at rows[0..8) (NULL: a row past n, zero) into v (whole rows of 8
 * words within the row's end): f32 and bf16 (plain), then the block types. Both run in the pack's own ISA: plain
 * inlined, the block types (too long to inline for every form) a clone per ISA. A baseline function called from
 * the AVX-512 clone stored v in 16-byte halves that the clone's 32-byte loads could not take from the store
 * buffer: two thirds of the pack's time in a Qwen2.5-0.5B-shaped f32 prompt on an Intel Xeon. */
__attribute__((always_inline)) static inline void cpu_gemm_load8_plain(int form, const char *const rows[8],
                                                                       int64_t kk, cpu_gemm_u32x8 *v) {
    for (int q = 0; q < 8; q++) {
        const char *row = rows[q];
        if (!row) { cpu_gemm_u32x8 z = {0}; v[q] = z; }
        else if (form == CPU_GEMM_W_F32) __builtin_memcpy(&v[q], (const float *)row + kk, 32);
        else if (form == CPU_GEMM_W_BF16) {
            cpu_gemm_u16x8 h;
            __builtin_memcpy(&h, (const uint16_t *)row + kk, 16);
            v[q] = __builtin_convertvector(h, cpu_gemm_u32x8) << 16;
        } else __builtin_memcpy(&v[q], (const uint16_t *)row + 2 * kk, 32);
    }
}
CPU_KERNEL __attribute__((noinline, unused)) static void cpu_gemm_load8(int form, const char *const rows[8],
                                                                        int64_t kk, cpu_gemm_u32x8 *v) {
    for (int q = 0; q < 8; q++) {
        const char *row = rows[q];
        if (!row) { cpu_gemm_u32x8 z = {0}; v[q] = z; }
        else if (cpu_gemm_form_is_super(form)) cpu_gemm_load8_k(form, (const uint8_t *)row, kk, &v[q]);
        else {
            /* 8 values of one block (kk is a multiple of 8): 8 int8, or 8 nibbles of the low or high half (Q5_0 /
             * Q5_1: plus 16 times their 8 bits of qh, a little-endian uint32 after d and m) */
            const uint8_t *b = (const uint8_t *)row + cpu_gemm_row_bytes(form, kk / 32 * 32);
            const int j = (int)(kk % 32);
            const bool has_min = form == CPU_GEMM_W_Q4_1 || form == CPU_GEMM_W_Q5_1;
            const bool q5 = form == CPU_GEMM_W_Q5_0 || form == CPU_GEMM_W_Q5_1;
            cpu_gemm_i8x8 q8;
            if (form == CPU_GEMM_W_Q8_0) __builtin_memcpy(&q8, b + 2 + j, 8);
            else {
                cpu_gemm_i8x8 nib;
                const uint8_t *qs = b + (has_min ? 4 : 2) + (q5 ? 4 : 0);
                __builtin_memcpy(&nib, qs + j % 16, 8);
                q8 = (cpu_gemm_i8x8)(((cpu_gemm_u8x8)nib >> (j < 16 ? 0 : 4)) & 15);
                if (q5) {
                    const uint8_t h = qs[j / 8 - 4];   /* the bits of values j .. j + 7 */
                    const cpu_gemm_u8x8 bit = {0, 1, 2, 3, 4, 5, 6, 7}, high = {h, h, h, h, h, h, h, h};
                    q8 |= (cpu_gemm_i8x8)(((high >> bit) & 1) << 4);
                }
                if (form == CPU_GEMM_W_Q4_0) q8 -= 8;
                if (form == CPU_GEMM_W_Q5_0) q8 -= 16;
            }
            cpu_gemm_f32x8 f = CPU_GEMM_WIDEN8(q8) * f16_at(b);
            if (has_min) f += f16_at(b + 2);
            __builtin_memcpy(&v[q], &f, 32);
        }
    }
}
#define CPU_GEMM_PACK_AHEAD 512   /* bytes: how far ahead in each row the pack asks for f32 and bf16 weights */
/* Slivers of `width` columns (16: the f32 tile's NR; 32: the dot16 tile's two vectors of pairs), words words
 * long: word (j, q) at panel[(j / width) * width * words + q * width + j % width], j < rows (rows past n zero).
 * w: row 0's first element, rows ldw elements apart, in runs (CPU_GEMM_ROW_AT); k: elements per row; words: k
 * (f32 layouts) or (k + 1) / 2 (pairs). */
CPU_KERNEL CPU_GEMM_FN void cpu_gemm_pack_rows(int form, int64_t n, int64_t rows, int64_t k, const void *w,
                                               int64_t ldw, int64_t run, int64_t gap, int width, uint32_t *panel) {
    int64_t words = form == CPU_GEMM_W_BF16_PAIRS ? (k + 1) / 2 : k, row_bytes = cpu_gemm_row_bytes(form, k);
    int64_t ldw_bytes = cpu_gemm_row_bytes(form, ldw);
    /* The transposition reads 8 rows at once, 8 interleaved streams. f32 and bf16 rows: each row's line
     * CPU_GEMM_PACK_AHEAD bytes ahead is asked for as the block loop enters a line (step: words per line). Block
     * types: every line of the panel first, row after row (measured on Zen 4). On the Intel Xeon VM the block loop's
     * prefetches took a Qwen2.5-0.5B-shaped f32 prompt from 183 tok/s (everything first) or 197 (no prefetch) to
     * about 208 (256 to 2048 bytes ahead: 205-210, 190-201). */
    const int64_t step = form == CPU_GEMM_W_BF16 ? 32 : 16;
    for (int64_t r = 0; r < n && form > CPU_GEMM_W_BF16_PAIRS; r++)
        for (int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(CPU_GEMM_ROW_AT(w, r) + off, 0, 2);
    /* whole blocks of 8 words only where the row holds all their elements */
    int64_t whole = form == CPU_GEMM_W_BF16_PAIRS ? k / 2 / 8 * 8 : k / 8 * 8;
    for (int64_t j0 = 0; j0 < rows; j0 += width) {
        uint32_t *sl = panel + j0 * words;
        for (int64_t r0 = j0; r0 < j0 + width; r0 += 8) {
            /* the 8 rows' addresses once, not per 8 x 8 block (CPU_GEMM_ROW_AT divides by run twice a row: a
             * Qwen2.5-0.5B-shaped f32 prompt went from 66 to 73 tok/s on an Intel Xeon) */
            const char *rowp[8];
            for (int q = 0; q < 8; q++) rowp[q] = r0 + q < n ? CPU_GEMM_ROW_AT(w, r0 + q) : NULL;
            for (int64_t kk = 0; kk < whole; kk += 8) {
                cpu_gemm_u32x8 v[8];
                for (int q = 0; q < 8 && form <= CPU_GEMM_W_BF16_PAIRS && kk % step == 0; q++)
                    if (rowp[q]) __builtin_prefetch(rowp[q] + kk * 64 / step + CPU_GEMM_PACK_AHEAD, 0, 3);
                if (form <= CPU_GEMM_W_BF16_PAIRS) cpu_gemm_load8_plain(form, rowp, kk, v);
                else cpu_gemm_load8(form, rowp, kk, v);
                CPU_GEMM_TRANSPOSE8(v);
                for (int q = 0; q < 8; q++) __builtin_memcpy(sl + (kk + q) * width + (r0 - j0), &v[q], 32);
            }
            for (int64_t q = whole; q < words; q++)
                for (int64_t r = r0; r < r0 + 8; r++) {
                    /* memcpy: the panel is a float array, written here as words */
                    uint32_t v = r < n ? cpu_gemm_word(form, CPU_GEMM_ROW_AT(w, r), q, k) : 0;
                    __builtin_memcpy(sl + q * width + (r - j0), &v, 4);
                }
        }
    }
}
#undef CPU_GEMM_TRANSPOSE8
#undef CPU_GEMM_SHUF
#undef CPU_GEMM_ROW_AT

/* The cpu_gemm schedule's pack statement: W's rows [n, k) (rows ldw apart from w, in runs of run rows gap
 * apart) as accumulator columns col0 .. col0 + rows of the panel. f32: slivers of NR. bf16: the same,
 * widened, or for the bf16 dot product (dot, where the CPU has it: cpu_gemm_dot16_ok) pairs in slivers of
 * CPU_GEMM_DOT_NR. */
static int cpu_gemm_dot16_ok(void);
static inline void cpu_gemm_pack_f32(int64_t n, int64_t rows, int64_t k, const float *w, int64_t ldw, int64_t run,
                                     int64_t gap, float *panel, int64_t col0) {
    cpu_gemm_pack_rows(CPU_GEMM_W_F32, n, rows, k, w, ldw, run, gap, CPU_GEMM_NR,
                       (uint32_t *)(void *)(panel + col0 * k));
}
/* GGUF's block types (type 0 q8_0, 1 q4_0, 2 q4_1, 3 q4_k, 4 q5_k, 5 q6_k, 6 q5_0, 7 q5_1), dequantized into f32
 * slivers; w + first: row 0's first element (whole blocks), k whole blocks (the schedule's K steps are whole
 * blocks) */
static inline void cpu_gemm_pack_q(int type, int64_t n, int64_t rows, int64_t k, const uint8_t *w, int64_t first,
                                   int64_t ldw, int64_t run, int64_t gap, float *panel, int64_t col0) {
    int form = CPU_GEMM_W_Q8_0 + type;
    cpu_gemm_pack_rows(form, n, rows, k, w + cpu_gemm_row_bytes(form, first), ldw, run, gap, CPU_GEMM_NR,
                       (uint32_t *)(void *)(panel + col0 * k));
}
static inline void cpu_gemm_pack_bf16(int64_t n, int64_t rows, int64_t k, const uint16_t *w, int64_t ldw,
                                      int64_t run, int64_t gap, int dot, float *panel, int64_t col0) {
    if (dot && cpu_gemm_dot16_ok())
        cpu_gemm_pack_rows(CPU_GEMM_W_BF16_PAIRS, n, rows, k, w, ldw, run, gap, CPU_GEMM_DOT_NR,
                           (uint32_t *)(void *)(panel + col0 * ((k + 1) / 2)));
    else
        cpu_gemm_pack_rows(CPU_GEMM_W_BF16, n, rows, k, w, ldw, run, gap, CPU_GEMM_NR,
                           (uint32_t *)(void *)(panel + col0 * k));
}

/* ---- bf16 dot products: prefill at twice the multiply-adds of f32 FMAs ----
 * vdpbf16ps (AVX512_BF16: AMD Zen 4 on, Intel Cooper Lake and Sapphire Rapids on) multiplies 16 pairs of bf16
 * by 16 pairs and adds both products to each f32 lane: 32 multiply-adds per instruction where an f32 FMA does
 * 16. bf16 weights are exact in it; the activations are rounded to bf16 (to nearest even) first, as
 * PyTorch's bf16 matmul and llama.cpp's bf16 dot products do; accumulation stays f32 (the instruction
 * flushes subnormal inputs and results to zero). The cpu_gemm schedule uses it for bf16 weights at prefill
 * (knob cpu_gemm_bf16, on by default); a CPU without the instruction, or LLMCC_CPU_BF16_DOT=0 in the
 * environment, computes the same rounded activations with the f32 kernel above, so results agree within f32
 * accumulation on every machine. */
static inline uint16_t cpu_gemm_to_bf16(float f) {
    uint32_t b;
    __builtin_memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40); /* NaN stays a (quiet) NaN */
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
static inline float cpu_gemm_round_bf16(float f) {
    uint32_t b = (uint32_t)cpu_gemm_to_bf16(f) << 16;
    __builtin_memcpy(&f, &b, 4);
    return f;
}
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
/* ---- f32 on AVX-512: the register tile in zmm registers ----
 * The portable tile above is written in 8-lane vectors, which the x86-64-v4 clone keeps in ymm registers: half
 * an AVX-512 FMA's lanes (on the project's Xeon VM one core sustains 214 GFLOP/s of zmm FMAs, 137 of ymm). This
 * tile is 8 rows x 32 columns (two slivers of NR) in 16 zmm accumulators, + 2 for B, each A value a broadcast
 * from memory: 16 FMAs against 10 loads per k step, for an activation matrix read in place (lda > 0: every
 * model's linears); an FMA chain per element in k order, blocks of KC added in turn. Not bit for bit the portable
 * tile's as the model is built (its -fassociative-math lets gcc order that one's sums otherwise): a
 * Qwen2.5-0.5B-shaped f32 prompt's logits moved by at most 7.5e-6 (of 2.8). LLMCC_CPU_AVX512=0 in the environment
 * keeps the portable tile. */
/* The body of a function returning, once per process (every thread computes the same value), whether the CPU has a
 * path (`has`, evaluated once) and the environment variable `env` does not turn it off ("0") */
#define CPU_GEMM_PATH_OK(env, has) do { \
        static int ok_ = -1; \
        int v_ = __atomic_load_n(&ok_, __ATOMIC_RELAXED); \
        if (v_ < 0) { \
            const char *e_ = getenv(env); \
            __builtin_cpu_init(); \
            v_ = (!e_ || strcmp(e_, "0") != 0) && (has); \
            __atomic_store_n(&ok_, v_, __ATOMIC_RELAXED); \
        } \
        return v_; \
    } while (0)
static int cpu_gemm_avx512_ok(void) { CPU_GEMM_PATH_OK("LLMCC_CPU_AVX512", __builtin_cpu_supports("avx512f")); }
#define CPU_GEMM_Z_FN static __attribute__((target("avx512f"), unused))
/* The 8 x 32 tiles in zmm registers (this one and the bf16 dot product's below): 16 accumulators acc<row><half>,
 * a k step's 8 rows, and the stores (+ c where accumulating) */
#define CPU_GEMM_Z_ACCS __m512 acc00 = _mm512_setzero_ps(), acc01 = acc00, acc10 = acc00, acc11 = acc00, \
        acc20 = acc00, acc21 = acc00, acc30 = acc00, acc31 = acc00, acc40 = acc00, acc41 = acc00, acc50 = acc00, \
        acc51 = acc00, acc60 = acc00, acc61 = acc00, acc70 = acc00, acc71 = acc00
#define CPU_GEMM_Z_ROWS(ROW) do { ROW(0); ROW(1); ROW(2); ROW(3); ROW(4); ROW(5); ROW(6); ROW(7); } while (0)
#define CPU_GEMM_Z_OUT(r) do { \
        if (accumulate) { \
            acc##r##0 = _mm512_add_ps(_mm512_loadu_ps(c + (r) * ldc), acc##r##0); \
            acc##r##1 = _mm512_add_ps(_mm512_loadu_ps(c + (r) * ldc + 16), acc##r##1); \
        } \
        _mm512_storeu_ps(c + (r) * ldc, acc##r##0); \
        _mm512_storeu_ps(c + (r) * ldc + 16, acc##r##1); \
    } while (0)
#define CPU_GEMM_Z_ROW(r) do { \
        __m512 a_ = _mm512_set1_ps(a[(r) * lda]); \
        acc##r##0 = _mm512_fmadd_ps(a_, b0, acc##r##0); \
        acc##r##1 = _mm512_fmadd_ps(a_, b1, acc##r##1); \
    } while (0)
/* c (8 x 32, row stride ldc) (+)= 8 rows of a (lda apart) times slivers b and b + bnext, kc long */
CPU_GEMM_Z_FN void cpu_gemm_tile_z(int64_t kc, const float *a, int64_t lda, const float *b, int64_t bnext,
                                   float *c, int64_t ldc, int accumulate) {
    CPU_GEMM_Z_ACCS;
    for (int r = 0; r < 8; r++) __builtin_prefetch(c + r * ldc, 1), __builtin_prefetch(c + r * ldc + 31, 1);
    for (int64_t kk = 0; kk < kc; kk++, a++, b += CPU_GEMM_NR) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + bnext);
        CPU_GEMM_Z_ROWS(CPU_GEMM_Z_ROW);
    }
    CPU_GEMM_Z_ROWS(CPU_GEMM_Z_OUT);
}
#undef CPU_GEMM_Z_ROW
/* cpu_gemm_packed's whole 8 x 32 tiles (m and n multiples of 8 and 32) of an A read in place */
CPU_GEMM_Z_FN void cpu_gemm_packed_z(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                     const float *bpack, float *c, int64_t ldc, int accumulate) {
    for (int64_t p0 = 0; p0 < k || p0 == 0; p0 += CPU_GEMM_KC) {
        int64_t kc = k - p0 < CPU_GEMM_KC ? k - p0 : CPU_GEMM_KC;
        int acc = accumulate || p0 > 0;
        /* i outer: the 8 rows' block of A (kc floats each) stays in L1 while the B slivers stream from L2 */
        for (int64_t i0 = 0; i0 < m; i0 += 8)
            for (int64_t j0 = 0; j0 < n; j0 += 32)
                cpu_gemm_tile_z(kc, a + i0 * lda + p0, lda, bpack + j0 * k + p0 * CPU_GEMM_NR, CPU_GEMM_NR * k,
                                c + i0 * ldc + j0, ldc, acc);
    }
}
#undef CPU_GEMM_Z_FN
static int cpu_gemm_dot16_ok(void) { CPU_GEMM_PATH_OK("LLMCC_CPU_BF16_DOT", __builtin_cpu_supports("avx512bf16")); }
#define CPU_GEMM_DOT_FN static __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), unused))
#define CPU_GEMM_DOT_ROW(r) do { \
        int ai_; \
        __builtin_memcpy(&ai_, a + (r) * lda + p, 4); /* the scratch is a float array holding pairs */ \
        __m512bh a_ = (__m512bh)_mm512_set1_epi32(ai_); \
        acc##r##0 = _mm512_dpbf16_ps(acc##r##0, a_, b0); \
        acc##r##1 = _mm512_dpbf16_ps(acc##r##1, a_, b1); \
    } while (0)
/* The 8 x 32 tile: c (+)= 8 rows of pairs a (rows lda words apart) times a sliver b of kp lines of 32 pairs */
CPU_GEMM_DOT_FN void cpu_gemm_dot_tile(int64_t kp, const int *a, int64_t lda, const uint32_t *b, float *c,
                                       int64_t ldc, int accumulate) {
    CPU_GEMM_Z_ACCS;
    for (int64_t p = 0; p < kp; p++, b += CPU_GEMM_DOT_NR) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
        CPU_GEMM_Z_ROWS(CPU_GEMM_DOT_ROW);
    }
    CPU_GEMM_Z_ROWS(CPU_GEMM_Z_OUT);
}
#undef CPU_GEMM_DOT_ROW
#undef CPU_GEMM_Z_ACCS
#undef CPU_GEMM_Z_ROWS
#undef CPU_GEMM_Z_OUT
/* x's rows [0, m) (ldx apart) as bf16 pairs in xs, (k + 1) / 2 words a row; rows [m, mp) zero */
CPU_GEMM_DOT_FN void cpu_gemm_dot_pairs(int64_t m, int64_t mp, int64_t k, const float *x, int64_t ldx, int *xs) {
    int64_t kp = (k + 1) / 2;
    for (int64_t i = 0; i < mp; i++) {
        int *row = xs + i * kp;
        const float *xr = x + i * ldx;
        int64_t whole = i < m ? k / 32 * 16 : 0; /* pairs converted 16 at a time */
        for (int64_t p = 0; p < whole; p += 16) /* 32 floats -> 32 bf16 in order: 16 pairs */
            _mm512_storeu_si512(row + p, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + 2 * p + 16),
                                                                     _mm512_loadu_ps(xr + 2 * p)));
        for (int64_t p = whole; p < kp; p++) {
            uint32_t lo = i < m ? cpu_gemm_to_bf16(xr[2 * p]) : 0;
            uint32_t hi = i < m && 2 * p + 1 < k ? cpu_gemm_to_bf16(xr[2 * p + 1]) : 0;
            uint32_t pair = lo | hi << 16;
            __builtin_memcpy(row + p, &pair, 4);
        }
    }
}
/* c[m x n] (+)= bf16(x[m x k]) x panel^T: x's rows into pairs in xs (rows padded to 8 with zeros), then the
 * tiles, j outer as cpu_gemm_packed's */
CPU_GEMM_DOT_FN void cpu_gemm_dot_avx512(int64_t m, int64_t n, int64_t k, const float *x, int64_t ldx, int *xs,
                                         const uint32_t *panel, float *c, int64_t ldc, int accumulate) {
    int64_t kp = (k + 1) / 2, mp = (m + CPU_GEMM_DOT_MR - 1) / CPU_GEMM_DOT_MR * CPU_GEMM_DOT_MR;
    cpu_gemm_dot_pairs(m, mp, k, x, ldx, xs);
    for (int64_t j0 = 0; j0 < n; j0 += CPU_GEMM_DOT_NR) {
        const uint32_t *b = panel + j0 * kp;
        int64_t nr = n - j0 < CPU_GEMM_DOT_NR ? n - j0 : CPU_GEMM_DOT_NR;
        for (int64_t i0 = 0; i0 < m; i0 += CPU_GEMM_DOT_MR) {
            int64_t mr = m - i0 < CPU_GEMM_DOT_MR ? m - i0 : CPU_GEMM_DOT_MR;
            if (mr == CPU_GEMM_DOT_MR && nr == CPU_GEMM_DOT_NR) {
                cpu_gemm_dot_tile(kp, xs + i0 * kp, kp, b, c + i0 * ldc + j0, ldc, accumulate);
                continue;
            }
            float t[CPU_GEMM_DOT_MR * CPU_GEMM_DOT_NR];
            cpu_gemm_dot_tile(kp, xs + i0 * kp, kp, b, t, CPU_GEMM_DOT_NR, 0);
            for (int64_t i = 0; i < mr; i++)
                for (int64_t j = 0; j < nr; j++)
                    c[(i0 + i) * ldc + j0 + j] = (accumulate ? c[(i0 + i) * ldc + j0 + j] : 0.0f) +
                                                 t[i * CPU_GEMM_DOT_NR + j];
        }
    }
}

/* ---- AMX: the same bf16 products on tile registers ----
 * Intel's Xeons from Sapphire Rapids on (AMX-BF16) multiply a 16 x 32 bf16 tile by a 32 x 16 one into a 16 x 16
 * f32 tile in one instruction (tdpbf16ps, 8192 multiply-adds): 3.1 TFLOP/s on one core of the project's Xeon VM,
 * where vdpbf16ps peaks near 0.4. The operands are already in its layouts: the panel's pairs are B's (a row of 16
 * columns' pairs per pair of k: 64 bytes, 128 apart in a sliver of 32 columns), the activations' pairs A's (a row
 * per token). Inputs as the vdpbf16ps tile takes them (bf16 rounded to nearest even, denormals as zero), f32
 * sums in another order: within f32 summation of the other paths. Linux lends a process the tiles' 8 KiB of state
 * only when asked (arch_prctl ARCH_REQ_XCOMP_PERM, kernel 5.16 on); where that fails, the CPU has no AMX or
 * LLMCC_CPU_AMX=0 is in the environment, the vdpbf16ps tile runs. Only K of whole tiles (k a multiple of 32,
 * every model's hidden sizes): a tile row of B past the panel's last pair would read the next sliver. */
#include <cpuid.h>
/* arch_prctl(code, arg) as the raw system call (number 158 on x86-64): glibc's syscall() is declared only with
 * _DEFAULT_SOURCE, which a strict -std=c11 build of the generated code does not have */
static inline long cpu_gemm_arch_prctl(long code, long arg) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(158L), "D"(code), "S"(arg) : "rcx", "r11", "memory");
    return ret;
}
/* CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE; then the kernel's permission for XTILEDATA (feature 18),
 * which is the process's, for every thread */
static int cpu_gemm_has_amx(void) {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 22 & 1) && (edx >> 24 & 1) &&
           cpu_gemm_arch_prctl(0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}
static int cpu_gemm_amx_ok(void) { CPU_GEMM_PATH_OK("LLMCC_CPU_AMX", cpu_gemm_dot16_ok() && cpu_gemm_has_amx()); }
/* ldtilecfg's 64 bytes: palette 1, then each tile register's bytes per row and rows */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} cpu_gemm_tile_config;
/* Accumulator tile T (0..3: rows +16 * (T / 2), columns +16 * (T % 2) of the 32 x 32 block at c) in or out: in
 * place where its 16 x 16 lie inside the m x n corner, else through edge[T] (only the corner copied) */
#define CPU_GEMM_AMX_C_IN(T) do { \
        if (!(T == 0 || (T == 1 && col1) || (T == 2 && row1) || (T == 3 && row1 && col1))) break; \
        int64_t mr_ = m - i0 - 16 * (T / 2), nr_ = n - j0 - 16 * (T % 2); \
        float *ct_ = c + (i0 + 16 * (T / 2)) * ldc + j0 + 16 * (T % 2); \
        if (mr_ >= 16 && nr_ >= 16) { \
            if (accumulate) _tile_loadd(T, ct_, ldc * 4); \
            else _tile_zero(T); \
            break; \
        } \
        for (int i_ = 0; i_ < 16; i_++) \
            for (int j_ = 0; j_ < 16; j_++) \
                edge[T][i_ * 16 + j_] = accumulate && i_ < mr_ && j_ < nr_ ? ct_[i_ * ldc + j_] : 0.0f; \
        _tile_loadd(T, edge[T], 64); \
    } while (0)
#define CPU_GEMM_AMX_C_OUT(T) do { \
        if (!(T == 0 || (T == 1 && col1) || (T == 2 && row1) || (T == 3 && row1 && col1))) break; \
        int64_t mr_ = m - i0 - 16 * (T / 2), nr_ = n - j0 - 16 * (T % 2); \
        float *ct_ = c + (i0 + 16 * (T / 2)) * ldc + j0 + 16 * (T % 2); \
        if (mr_ >= 16 && nr_ >= 16) { _tile_stored(T, ct_, ldc * 4); break; } \
        _tile_stored(T, edge[T], 64); \
        for (int i_ = 0; i_ < mr_ && i_ < 16; i_++) \
            for (int j_ = 0; j_ < nr_ && j_ < 16; j_++) ct_[i_ * ldc + j_] = edge[T][i_ * 16 + j_]; \
    } while (0)
/* c[m x n] (+)= xs (m pairs rows, padded with zero rows to a multiple of 16) x panel^T, kp a multiple of 16:
 * blocks of 32 x 32 (four accumulator tiles 0..3, A tiles 4 and 5, B tiles 6 and 7), j inner */
static __attribute__((target("amx-tile,amx-bf16"), unused)) void
cpu_gemm_dot_amx(int64_t m, int64_t n, int64_t kp, const int *xs, const uint32_t *panel, float *c, int64_t ldc,
                 int accumulate) {
    cpu_gemm_tile_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.bytes_per_row[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    float edge[4][16 * 16];
    for (int64_t i0 = 0; i0 < m; i0 += 32)
        for (int64_t j0 = 0; j0 < n; j0 += 32) {
            const bool row1 = m - i0 > 16, col1 = n - j0 > 16;   /* whether the second row / column of tiles is */
            const int *a = xs + i0 * kp;
            const uint32_t *b = panel + j0 * kp;
            CPU_GEMM_AMX_C_IN(0); CPU_GEMM_AMX_C_IN(1); CPU_GEMM_AMX_C_IN(2); CPU_GEMM_AMX_C_IN(3);
            for (int64_t p = 0; p < kp; p += 16) {
                _tile_loadd(4, a + p, kp * 4);
                _tile_loadd(6, b + p * CPU_GEMM_DOT_NR, CPU_GEMM_DOT_NR * 4);
                _tile_dpbf16ps(0, 4, 6);
                if (col1) {
                    _tile_loadd(7, b + p * CPU_GEMM_DOT_NR + 16, CPU_GEMM_DOT_NR * 4);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (row1) {
                    _tile_loadd(5, a + 16 * kp + p, kp * 4);
                    _tile_dpbf16ps(2, 5, 6);
                    if (col1) _tile_dpbf16ps(3, 5, 7);
                }
            }
            CPU_GEMM_AMX_C_OUT(0); CPU_GEMM_AMX_C_OUT(1); CPU_GEMM_AMX_C_OUT(2); CPU_GEMM_AMX_C_OUT(3);
        }
    _tile_release();   /* the tiles' state back to init: a context switch need not save it */
}
#undef CPU_GEMM_AMX_C_IN
#undef CPU_GEMM_AMX_C_OUT
#undef CPU_GEMM_DOT_FN
#else
static int cpu_gemm_dot16_ok(void) { return 0; }
static int cpu_gemm_amx_ok(void) { return 0; }
#endif
#undef CPU_GEMM_PATH_OK
/* The f32 GEMM of cpu_gemm_packed_v's layouts: where the CPU has AVX-512 and A is read in place, its whole 8 x 32
 * tiles by the zmm kernel and the rest (the last m % 8 rows, n % 32 columns) by the portable one */
static inline void cpu_gemm_packed(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *bpack,
                                   float *c, int64_t ldc, int accumulate) {
#if defined(__x86_64__) && defined(__GNUC__)
    int64_t m8 = m / 8 * 8, n32 = n / 32 * 32;
    if (lda && m8 && n32 && cpu_gemm_avx512_ok()) {
        cpu_gemm_packed_z(m8, n32, k, a, lda, bpack, c, ldc, accumulate);
        if (n32 < n) cpu_gemm_packed_v(m8, n - n32, k, a, lda, bpack + n32 * k, c + n32, ldc, accumulate);
        if (m8 < m) cpu_gemm_packed_v(m - m8, n, k, a + m8 * lda, lda, bpack, c + m8 * ldc, ldc, accumulate);
        return;
    }
#endif
    cpu_gemm_packed_v(m, n, k, a, lda, bpack, c, ldc, accumulate);
}
/* The cpu_gemm schedule's gemm statement for bf16 weights (dot): c[m x n] (+)= bf16(x) x panel^T, the
 * panel as cpu_gemm_pack_bf16 wrote it. xs: scratch of 8 * ceil(m / 8) x k floats (AMX's 16 * ceil(m / 16) rows of
 * k / 2 pairs fit in it). */
static inline void cpu_gemm_dot(int64_t m, int64_t n, int64_t k, const float *x, int64_t ldx, float *xs,
                                const float *panel, float *c, int64_t ldc, int accumulate) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (cpu_gemm_dot16_ok() && k % 32 == 0 && cpu_gemm_amx_ok()) {
        cpu_gemm_dot_pairs(m, (m + 15) / 16 * 16, k, x, ldx, (int *)(void *)xs);
        cpu_gemm_dot_amx(m, n, k / 2, (const int *)(const void *)xs, (const uint32_t *)(const void *)panel, c, ldc,
                         accumulate);
        return;
    }
    if (cpu_gemm_dot16_ok()) {
        cpu_gemm_dot_avx512(m, n, k, x, ldx, (int *)(void *)xs, (const uint32_t *)(const void *)panel, c, ldc,
                            accumulate);
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++)
        for (int64_t kk = 0; kk < k; kk++) xs[i * k + kk] = cpu_gemm_round_bf16(x[i * ldx + kk]);
    cpu_gemm_packed(m, n, k, xs, k, panel, c, ldc, accumulate);
}

#undef CPU_GEMM_FN
#undef CPU_GEMM_LD8
#undef CPU_GEMM_ST8
#endif /* CPU_GEMM_SIZES_ONLY */
#endif
