/* test_cpu_dot16.c: runtime/cpu_dot16.h, decode's bf16 dot products. For row lengths around the kernel's
 * steps (64 per loop, one of 32, a masked rest): (1) cpu_dot16_1 against a double-precision sum of the same
 * bf16 values (weights, and the activations as cpu_acts16 rounds them), within f32 summation error; (2) each of
 * cpu_dot16_g's four and eight results bit for bit cpu_dot16_1's for that row (a batch's token is
 * the token alone), for rows that are consecutive (ldx = k) and further apart; (3) cpu_acts16 rounds to nearest
 * even and keeps its values for the same input. Prints "N passed, N failed" and the path (AVX512_BF16 or the portable C). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../../runtime/cpu_dot16.h"

static int passed, failed;
static void expect(int ok, const char *what, int64_t k) {
    if (ok) passed++;
    else { failed++; printf("FAIL %s (k = %lld)\n", what, (long long)k); }
}
static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t state = 12345;
static float uniform(void) {   /* [-1, 1) */
    state = state * 1664525u + 1013904223u;
    return (float)((state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

int main(void) {
    static const int64_t lengths[] = {1, 7, 31, 32, 33, 63, 64, 65, 96, 127, 128, 200, 896, 1000};
    enum { KMAX = 1000, ROWS = 8, GAP = 37 };
    static float x[ROWS * (KMAX + GAP)];
    static uint16_t w[KMAX];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = uniform() * 3.0f;
    /* (3) rounding: ties to even, and the cache */
    CpuActs16 *a = cpu_acts16_begin();
    const float probe[3] = {1.00390625f, 1.01171875f, -2.5f};   /* 1 + 2^-8 (a tie: down), 1 + 3 * 2^-8 (up) */
    const uint16_t *r = cpu_acts16(a, probe, 3);
    expect(r[0] == 0x3f80 && r[1] == 0x3f82 && r[2] == 0xc020, "cpu_acts16 rounds to nearest even", 3);
    expect(cpu_acts16(a, probe, 3) == r, "cpu_acts16 keeps its values for the same input", 3);
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        int64_t k = lengths[li];
        for (int64_t i = 0; i < k; i++) w[i] = cpu_gemm_to_bf16(uniform());
        for (int gap = 0; gap <= GAP; gap += GAP) {
            int64_t ldx = k + gap;
            a = cpu_acts16_begin();   /* a new kernel: the input rounded again */
            const uint16_t *xs = cpu_acts16(a, x, ROWS * ldx);
            float four[4], eight[8], one[ROWS];
            cpu_dot16_g(4, w, xs, ldx, k, 4096, four);
            cpu_dot16_g(8, w, xs, ldx, k, 4096, eight);
            for (int t = 0; t < ROWS; t++) {
                one[t] = cpu_dot16_1(w, xs + t * ldx, k, t % 2 ? 4096 : 0);   /* with and without prefetches */
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < k; i++) {
                    double p = (double)bf16_value(w[i]) * (double)bf16_value(xs[t * ldx + i]);
                    ref += p;
                    mag += fabs(p);
                }
                /* f32 accumulation of k products: k * 2^-24 of the magnitudes, twice for the partial sums */
                expect(fabs((double)one[t] - ref) <= 2.0 * (double)k * 0x1p-24 * mag + 1e-30, "cpu_dot16_1 sum", k);
                if (t < 4) expect(!memcmp(&one[t], &four[t], 4), "cpu_dot16_g (4) bit for bit cpu_dot16_1", k);
                expect(!memcmp(&one[t], &eight[t], 4), "cpu_dot16_g (8) bit for bit cpu_dot16_1", k);
            }
        }
    }
    printf("path: %s\n", cpu_gemm_dot16_ok() ? "AVX512_BF16" : "portable C");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
