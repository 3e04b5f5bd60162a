/* test_cpu_gemm.c: runtime/cpu_gemm.h's cpu_gemm_packed against a plain
 * double-precision triple loop, on random values, over shapes that cover
 * ragged m and n edges (not multiples of MR / NR), m = 1, n = 1, k = 0, 1,
 * odd k, k over one CPU_GEMM_KC block with a remainder, accumulate 0 and 1,
 * ldc = n and ldc > n. tests/test_cpu_gemm.py builds it twice (baseline -O2;
 * -O2 -march=x86-64-v3 with ASan + UBSan) and runs both.
 *
 * Checks:
 * - every element of the m x n corner within tolerance of the reference;
 * - nothing else written: c sits inside a buffer of guard values, with a
 *   guard row above and below and, where ldc > n, guard columns on the right;
 * - the padding of the packed slivers is NaN, not zero, so a corner element
 *   that read padding would show up as NaN.
 *
 * The runtime's own packing (the cpu_gemm schedule's pack statement) is checked
 * the same way: cpu_gemm_pack_f32, and for bf16 weights cpu_gemm_pack_bf16
 * followed by cpu_gemm_packed (activations f32) or by cpu_gemm_dot (activations
 * rounded to bf16 to nearest even, the reference rounding them the same way:
 * the bf16 dot product where the CPU has AVX512_BF16, else its f32 stand-in;
 * run once more with LLMCC_CPU_BF16_DOT=0 for the stand-in). The weight rows
 * sit ldw = k + 5 apart with NaN between them, so a packed word read past a
 * row's end shows up, and in runs of RUN rows GAP rows apart (as a RoPE
 * pair's halves), NaN rows between the runs.
 *
 * Tolerance: |got - ref| <= (k + 2) * 2^-24 * (sum_kk |a * b| + |c before|)
 * + 1e-30. The kernel sums in f32 in its own order (an FMA chain per k block,
 * blocks added in turn, then the accumulate add), the reference in double;
 * (k + 2) u is the classical worst-case bound for such a recursive f32 sum
 * (Higham's gamma), so the test cannot flake on rounding, while any wrong
 * element, index or missed term is off by about the size of a term, far
 * above it. A bound relative to |ref| alone would not do: under
 * cancellation |ref| is much smaller than the terms' rounding errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"

#define GUARD 7777.0f

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_cpu_gemm: out of memory\n");
        exit(1);
    }
    return p;
}

static uint16_t to_bf16(float f) /* round to nearest even, independent of cpu_gemm.h's */
{
    uint32_t b;
    memcpy(&b, &f, 4);
    b += 0x7fff + ((b >> 16) & 1);
    return (uint16_t)(b >> 16);
}
static float from_bf16(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* How the operands reach the kernel: the test's own packing (A packed or in place), or the runtime's pack
 * statement for f32 weights, bf16 weights with f32 activations, bf16 weights and bf16-rounded activations */
enum { OWN_PACKED, OWN_IN_PLACE, PACK_F32, PACK_BF16, PACK_BF16_DOT, VARIANTS };
static const char *const variant_names[] = {"packed", "in place", "pack_f32", "pack_bf16", "pack_bf16 dot"};

/* one case; returns the number of bad elements (printing the first few). OWN_IN_PLACE and the pack variants
 * pass A as a row-major matrix (lda = k + 3, the 3 columns past k NaN; exactly m rows, so that ASan sees a
 * read past them) */
static int check(int64_t m, int64_t n, int64_t k, int64_t ldc, int accumulate, int variant)
{
    const int64_t MR = CPU_GEMM_MR, NR = CPU_GEMM_NR;
    int64_t mp = (m + MR - 1) / MR * MR, np = (n + NR - 1) / NR * NR;
    float *a = xmalloc(m * k * sizeof *a), *b = xmalloc(n * k * sizeof *b);
    float *ap = xmalloc(mp * k * sizeof *ap), *bp = xmalloc(np * k * sizeof *bp);
    /* c with a guard row above and below; columns n..ldc-1 of each row are guards too */
    int64_t rows = m + 2;
    float *buf = xmalloc(rows * ldc * sizeof *buf), *c = buf + ldc, *c0 = xmalloc(m * n * sizeof *c0);
    for (int64_t i = 0; i < m * k; i++)
        a[i] = rnd();
    for (int64_t i = 0; i < n * k; i++)
        b[i] = rnd();
    enum { RUN = 5, GAP = 7 };
    const int64_t ldw = k + 5, phys = n ? (n - 1) / RUN * GAP + (n - 1) % RUN + 1 : 0;
    uint16_t *wb = xmalloc(phys * ldw * sizeof *wb); /* bf16 weights, NaN between rows and runs */
    float *wf = xmalloc(phys * ldw * sizeof *wf);    /* f32 weights, likewise */
    for (int64_t i = 0; i < phys * ldw; i++) {
        wb[i] = 0x7fc0;
        wf[i] = NAN;
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t kk = 0; kk < k; kk++) {
            int64_t at = (j / RUN * GAP + j % RUN) * ldw + kk;
            if (variant >= PACK_BF16) b[j * k + kk] = from_bf16(to_bf16(b[j * k + kk]));
            wb[at] = to_bf16(b[j * k + kk]);
            wf[at] = b[j * k + kk];
        }
    /* a panel large enough for either layout (slivers of 16 f32, or of 32 bf16 pairs) */
    int64_t panel_floats = ((n + 31) / 32 * 32) * k + 1;
    float *panel = xmalloc(panel_floats * sizeof *panel), *scratch = xmalloc(((m + 7) / 8 * 8) * k * sizeof *scratch + 1);
    for (int64_t i = 0; i < mp * k; i++)
        ap[i] = NAN;
    for (int64_t i = 0; i < np * k; i++)
        bp[i] = NAN;
    for (int64_t i = 0; i < m; i++)
        for (int64_t kk = 0; kk < k; kk++)
            ap[(i / MR) * MR * k + kk * MR + i % MR] = a[i * k + kk];
    const int64_t lda = k + 3;
    float *arow = xmalloc(m * lda * sizeof *arow);
    for (int64_t i = 0; i < m; i++)
        for (int64_t kk = 0; kk < lda; kk++)
            arow[i * lda + kk] = kk < k ? a[i * k + kk] : NAN;
    for (int64_t j = 0; j < n; j++)
        for (int64_t kk = 0; kk < k; kk++)
            bp[(j / NR) * NR * k + kk * NR + j % NR] = b[j * k + kk];
    for (int64_t i = 0; i < rows * ldc; i++)
        buf[i] = GUARD;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            c[i * ldc + j] = c0[i * n + j] = accumulate ? rnd() : NAN; /* NaN: must be overwritten, not added */

    int64_t rows16 = (n + NR - 1) / NR * NR, rows32 = (n + 31) / 32 * 32;
    for (int64_t i = 0; i < panel_floats; i++)
        panel[i] = NAN;
    if (variant == OWN_PACKED) cpu_gemm_packed(m, n, k, ap, 0, bp, c, ldc, accumulate);
    else if (variant == OWN_IN_PLACE) cpu_gemm_packed(m, n, k, arow, lda, bp, c, ldc, accumulate);
    else if (variant == PACK_F32) {
        cpu_gemm_pack_f32(n, rows16, k, wf, ldw, RUN, GAP, panel, 0);
        cpu_gemm_packed(m, n, k, arow, lda, panel, c, ldc, accumulate);
    } else if (variant == PACK_BF16) {
        cpu_gemm_pack_bf16(n, rows16, k, wb, ldw, RUN, GAP, 0, panel, 0);
        cpu_gemm_packed(m, n, k, arow, lda, panel, c, ldc, accumulate);
    } else {
        cpu_gemm_pack_bf16(n, rows32, k, wb, ldw, RUN, GAP, 1, panel, 0);
        cpu_gemm_dot(m, n, k, arow, lda, scratch, panel, c, ldc, accumulate);
        for (int64_t i = 0; i < m * k; i++) /* the reference's activations: rounded as the kernel's */
            a[i] = from_bf16(to_bf16(a[i]));
    }

    int bad = 0;
    const double u = 1.0 / (1 << 24);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = accumulate ? c0[i * n + j] : 0.0, mag = accumulate ? fabs(c0[i * n + j]) : 0.0;
            for (int64_t kk = 0; kk < k; kk++) {
                ref += (double)a[i * k + kk] * b[j * k + kk];
                mag += fabs((double)a[i * k + kk] * b[j * k + kk]);
            }
            double got = c[i * ldc + j], tol = (k + 2) * u * mag + 1e-30;
            if (!(fabs(got - ref) <= tol) && bad++ < 5)
                fprintf(stderr, "m=%lld n=%lld k=%lld ldc=%lld acc=%d %s: c[%lld][%lld] = %.9g, "
                        "reference %.9g (tol %.3g)\n", (long long)m, (long long)n, (long long)k, (long long)ldc,
                        accumulate, variant_names[variant], (long long)i, (long long)j, got, ref, tol);
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < ldc; j++) {
            int64_t i = r - 1;
            if (i >= 0 && i < m && j < n)
                continue;
            if (memcmp(&buf[r * ldc + j], &(float){GUARD}, sizeof(float)) && bad++ < 5)
                fprintf(stderr, "m=%lld n=%lld k=%lld ldc=%lld acc=%d: wrote outside the corner at row %lld col %lld\n",
                        (long long)m, (long long)n, (long long)k, (long long)ldc, accumulate, (long long)i,
                        (long long)j);
        }
    free(a);
    free(b);
    free(ap);
    free(arow);
    free(bp);
    free(buf);
    free(c0);
    free(wb);
    free(wf);
    free(panel);
    free(scratch);
    return bad;
}

int main(void)
{
    /* m, n, k: tile-exact, ragged edges, degenerate sizes, odd k, k across CPU_GEMM_KC blocks */
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 16, 7}, {6, 16, 1}, {6, 16, 4}, {6, 16, 5}, {12, 32, 64}, {7, 17, 5}, {5, 15, 3},
        {13, 33, 65}, {1, 100, 33}, {100, 1, 9}, {37, 70, 131}, {64, 48, 896}, {2, 3, 0}, {6, 16, 0},
        {7, 19, CPU_GEMM_KC}, {7, 19, CPU_GEMM_KC + 1}, {11, 21, 2 * CPU_GEMM_KC + 3},
        /* k a multiple of 32 (the AMX tiles' K, where the CPU has them): edges of their 16 x 16 and 32 x 32 blocks */
        {1, 1, 32}, {16, 16, 32}, {17, 33, 96}, {33, 47, 64}, {48, 128, 896}, {37, 70, 160},
    };
    int cases = 0, failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int accumulate = 0; accumulate < 2; accumulate++)
            for (int64_t pad = 0; pad <= 3; pad += 3)
                for (int variant = 0; variant < VARIANTS; variant++) {
                    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    cases++;
                    failed += check(m, n, k, n + pad, accumulate, variant) != 0;
                }
    printf("test_cpu_gemm: %d cases, %d failed (MR %d, NR %d, KC %d; bf16 dot products: %s)\n", cases, failed,
           CPU_GEMM_MR, CPU_GEMM_NR, CPU_GEMM_KC,
           !cpu_gemm_dot16_ok() ? "f32 stand-in" : cpu_gemm_amx_ok() ? "AMX where k % 32 == 0, else AVX512_BF16"
                                                                    : "AVX512_BF16");
    return failed != 0;
}
