/* bench_cpu_gemm.c: GFLOP/s of runtime/cpu_gemm.h's cpu_gemm_packed on one
 * core, for the shapes given as M N K triples on the command line (packed
 * operands made once, outside the timing: the emitted code packs B, the
 * weights, ahead of time). Each shape is timed 30 times over about 30 ms; the
 * best time counts, since the machine is shared and a slower time is mostly
 * another process's doing. scripts/bench_cpu_gemm compiles and runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu_gemm.h"

/* CPU time of this thread, not wall time: the machine is shared, and time spent descheduled is not the
 * kernel's (what sharing still costs, caches and clock, the best-of below mostly leaves out) */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The clock the core runs at now, in GHz: a chain of dependent integer adds (one cycle each on every
 * x86-64 and aarch64 core) timed like the GEMM, best of 30. The empty asm keeps each add in a register
 * and in order, so the compiler can neither fold the chain nor vectorize it. /proc/cpuinfo's figure is
 * the nominal one; a boosting core runs faster, and the peak has to use the clock it really had. */
static double measured_ghz(void)
{
    double best = 1e30;
    const long iters = 2000000;
    for (int run = 0; run < 30; run++) {
        unsigned long x = 0;
        double t0 = now();
        for (long i = 0; i < iters; i++) {
            x += 1; __asm__ volatile("" : "+r"(x)); x += 1; __asm__ volatile("" : "+r"(x));
            x += 1; __asm__ volatile("" : "+r"(x)); x += 1; __asm__ volatile("" : "+r"(x));
            x += 1; __asm__ volatile("" : "+r"(x)); x += 1; __asm__ volatile("" : "+r"(x));
            x += 1; __asm__ volatile("" : "+r"(x)); x += 1; __asm__ volatile("" : "+r"(x));
        }
        double t = now() - t0;
        if (x != 8ul * iters)
            abort();
        best = t < best ? t : best;
    }
    return 8.0 * iters / best * 1e-9;
}

static float *filled(int64_t count)
{
    float *p = malloc(count * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_cpu_gemm: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < count; i++)
        p[i] = (float)((double)rand() / RAND_MAX - 0.5);
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (argc - 1) % 3) {
        fprintf(stderr, "usage: bench_cpu_gemm M N K [M N K...]\n");
        return 2;
    }
    printf("clock %.3f\n", measured_ghz());
    for (int s = 1; s + 2 < argc; s += 3) {
        int64_t m = atoll(argv[s]), n = atoll(argv[s + 1]), k = atoll(argv[s + 2]);
        int64_t mp = (m + CPU_GEMM_MR - 1) / CPU_GEMM_MR * CPU_GEMM_MR;
        int64_t np = (n + CPU_GEMM_NR - 1) / CPU_GEMM_NR * CPU_GEMM_NR;
        float *a = filled(mp * k), *b = filled(np * k), *c = filled(m * n);
        double flops = 2.0 * m * n * k, best = 1e30;
        cpu_gemm_packed(m, n, k, a, 0, b, c, n, 0); /* warm the caches and the page tables */
        double t0 = now();
        int reps = 1;
        cpu_gemm_packed(m, n, k, a, 0, b, c, n, 0);
        double once = now() - t0;
        if (once < 0.03)
            reps = (int)(0.03 / (once > 1e-7 ? once : 1e-7));
        for (int run = 0; run < 30; run++) {
            t0 = now();
            for (int r = 0; r < reps; r++)
                cpu_gemm_packed(m, n, k, a, 0, b, c, n, 0);
            double t = (now() - t0) / reps;
            best = t < best ? t : best;
        }
        printf("gemm %lld %lld %lld %.2f\n", (long long)m, (long long)n, (long long)k, flops / best * 1e-9);
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
