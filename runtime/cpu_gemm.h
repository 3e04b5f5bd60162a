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
 * no pointer needs any alignment.
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
#include <stdint.h>

#define CPU_GEMM_MR 6  /* rows of A per register tile: 6 x 2 accumulators + 3 = 15 of AVX2's 16 ymm */
#define CPU_GEMM_NR 16 /* columns of B per register tile: two f32x8 */
/* k block: a B sliver's block (16 x 2048 x 4 = 128 KiB) and an A sliver's (48 KiB) stay in L2 however large
 * k is (the header comment says why not an L1-sized block) */
#define CPU_GEMM_KC 2048

/* A kernel of the cpu target (model.c's k_*, cpu_gemm_packed): on x86-64 with GCC compiled three times, for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline (SSE2), the best the CPU runs chosen once when
 * the program starts (an ifunc: GCC's target_clones); elsewhere (aarch64: NEON is the baseline) once. The
 * kernels call no function of another instruction set, and their OpenMP loops are `omp for` inside the
 * caller's parallel region, so no code of theirs is outlined out of the clones. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(LLMCC_NO_CLONES)
#define CPU_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_KERNEL
#endif

/* CPU_GEMM_SIZES_ONLY: the tile's sizes alone (the compiler's cpu_gemm schedule packs for them) */
#ifndef CPU_GEMM_SIZES_ONLY
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
 * Only the m x n corner of c is written (edge tiles go through a local tile). */
CPU_KERNEL CPU_GEMM_FN void cpu_gemm_packed(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                            const float *bpack, float *c, int64_t ldc, int accumulate) {
    /* k = 0 still has to clear c when not accumulating, so the block loop runs at least once */
    for (int64_t p0 = 0; p0 < k || p0 == 0; p0 += CPU_GEMM_KC) {
        int64_t kc = k - p0 < CPU_GEMM_KC ? k - p0 : CPU_GEMM_KC;
        int acc = accumulate || p0 > 0; /* later k blocks add to what the earlier ones wrote */
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
                /* an edge tile: the full tile into a local one, then only its mr x nr corner into c. An
                 * in-place A has no rows past m: its mr rows are packed into a zero-padded sliver first */
                float t[CPU_GEMM_MR * CPU_GEMM_NR];
                if (lda && mr < CPU_GEMM_MR) {
                    float sliver[CPU_GEMM_MR * CPU_GEMM_KC];
                    for (int64_t kk = 0; kk < kc; kk++)
                        for (int64_t r = 0; r < CPU_GEMM_MR; r++)
                            sliver[kk * CPU_GEMM_MR + r] = r < mr ? ai[r * lda + kk] : 0.0f;
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
#undef CPU_GEMM_FN
#undef CPU_GEMM_LD8
#undef CPU_GEMM_ST8
#endif /* CPU_GEMM_SIZES_ONLY */
#endif
