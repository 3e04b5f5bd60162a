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

/* one case; returns the number of bad elements (printing the first few). inplace: A passed as a row-major
 * matrix (lda = k + 3, the 3 columns past k NaN; exactly m rows, so that ASan sees a read past them) */
static int check(int64_t m, int64_t n, int64_t k, int64_t ldc, int accumulate, int inplace)
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

    if (inplace) cpu_gemm_packed(m, n, k, arow, lda, bp, c, ldc, accumulate);
    else cpu_gemm_packed(m, n, k, ap, 0, bp, c, ldc, accumulate);

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
                fprintf(stderr, "m=%lld n=%lld k=%lld ldc=%lld acc=%d inplace=%d: c[%lld][%lld] = %.9g, "
                        "reference %.9g (tol %.3g)\n", (long long)m, (long long)n, (long long)k, (long long)ldc,
                        accumulate, inplace, (long long)i, (long long)j, got, ref, tol);
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
    return bad;
}

int main(void)
{
    /* m, n, k: tile-exact, ragged edges, degenerate sizes, odd k, k across CPU_GEMM_KC blocks */
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 16, 7}, {6, 16, 1}, {6, 16, 4}, {6, 16, 5}, {12, 32, 64}, {7, 17, 5}, {5, 15, 3},
        {13, 33, 65}, {1, 100, 33}, {100, 1, 9}, {37, 70, 131}, {64, 48, 896}, {2, 3, 0}, {6, 16, 0},
        {7, 19, CPU_GEMM_KC}, {7, 19, CPU_GEMM_KC + 1}, {11, 21, 2 * CPU_GEMM_KC + 3},
    };
    int cases = 0, failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int accumulate = 0; accumulate < 2; accumulate++)
            for (int64_t pad = 0; pad <= 3; pad += 3)
                for (int inplace = 0; inplace < 2; inplace++) {
                    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    cases++;
                    failed += check(m, n, k, n + pad, accumulate, inplace) != 0;
                }
    printf("test_cpu_gemm: %d cases, %d failed (MR %d, NR %d, KC %d)\n", cases, failed, CPU_GEMM_MR, CPU_GEMM_NR,
           CPU_GEMM_KC);
    return failed != 0;
}
