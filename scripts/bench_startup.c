/* bench_startup.c: the host's side of a CUDA executable's start-up, timed where no GPU is (scripts/bench_startup
 * builds and runs it). The file is mapped afresh for each measurement, as the executable maps its payload:
 *   staged   runtime/stage.h's loop filling its two buffers from the mapping (page faults and memcpy), the copies
 *            to the device left out (they overlap the filling on a GPU): what the CUDA build's upload costs the host;
 *            "staged" by one thread, "staged-threads" by FILLERS threads (what the CUDA build uses: kernels.h)
 *   touched  MADV_POPULATE_READ of the mapping (what the cpu build does before its first prompt), for comparison
 * Prints one line per measurement: "NAME SECONDS BYTES".
 *
 *     bench_startup FILE [STAGE_MIB] [FILLERS] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* MADV_POPULATE_READ */
#endif
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../runtime/stage.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int no_copy(void *ctx, int k, void *dst, const void *from, size_t len) {
    (void)ctx; (void)k; (void)dst; (void)from; (void)len;
    return 0;
}
static int no_wait(void *ctx, int k) { (void)ctx; (void)k; return 0; }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_startup FILE [STAGE_MIB] [FILLERS]\n"); return 2; }
    size_t stage = (size_t)(argc > 2 ? atoi(argv[2]) : 32) << 20;
    int fillers = argc > 3 ? atoi(argv[3]) : 1;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) { perror(argv[1]); return 1; }
    size_t bytes = (size_t)st.st_size;
    Stager s = { { malloc(stage), malloc(stage) }, stage, NULL, no_copy, no_wait, 1 };
    if (!s.buf[0] || !s.buf[1]) { fprintf(stderr, "out of memory\n"); return 1; }
    memset(s.buf[0], 0, stage);   /* the buffers' own pages faulted in first: pinned memory is, once allocated */
    memset(s.buf[1], 0, stage);
    static const char *const names[] = { "staged", "staged-threads", "touched", "touched+staged" };
    for (int what = 0; what < 4; what++) {
        const uint8_t *p = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) { perror("mmap"); return 1; }
        double t0 = now_s();
#ifdef MADV_POPULATE_READ
        if (what > 1) (void)madvise((void *)p, bytes, MADV_POPULATE_READ);
#endif
        s.fillers = what == 0 ? 1 : fillers;
        if (what != 2) stage_upload(&s, (uint8_t *)p, p, bytes);   /* dst: never written (no_copy) */
        printf("%s %.6f %zu\n", names[what], now_s() - t0, bytes);
        munmap((void *)p, bytes);
    }
    free(s.buf[0]);
    free(s.buf[1]);
    close(fd);
    return 0;
}
