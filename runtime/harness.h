/* harness.h: the host side of llmcc run's harness (compiler/emit_harness.c, after runtime/kernels.h): buffers
 * padded by 256 bytes, zeroed; any failure ends it. */
#ifndef LLMCC_HARNESS_H
#define LLMCC_HARNESS_H
#include "kernels.h"
#include <time.h>
#include <unistd.h>
#ifdef __CUDACC__
static inline void ck(cudaError_t e, const char *what) {
    if (e != cudaSuccess) { fprintf(stderr, "harness: %s: %s\n", what, cudaGetErrorString(e)); exit(1); }
}
static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    ck(cudaMalloc(&p, bytes + 256), "cudaMalloc");
    ck(cudaMemset(p, 0, bytes + 256), "cudaMemset");
    return p;
}
static inline void to_dev(void *d, const void *h, size_t bytes) {
    ck(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "copy to the GPU");
}
static inline void to_host(void *h, const void *d, size_t bytes) {
    ck(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "copy from the GPU");
}
static inline void sync_dev(void) { ck(cudaGetLastError(), "kernel launch"); ck(cudaDeviceSynchronize(), "kernel"); }
/* llmcc run --cold: bytes to write between timed calls so that what a call reads comes from memory (twice the L2) */
static inline size_t cache_flush_bytes(void) {
    int l2 = 0;
    ck(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "the L2's size");
    return 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
}
static inline void cache_flush(void *scratch, size_t bytes, int i) {
    ck(cudaMemset(scratch, i & 0xff, bytes), "the caches' flush");
}
/* --cold: a millisecond's wait on the GPU before a timed call, so that its launches and events are all queued
 * when the GPU reaches them (after a flush the GPU is idle: an event would time the host's launch too) */
static __global__ void k_hold(long long cycles) {
    long long t = clock64();
    while (clock64() - t < cycles) {}
}
static inline void cache_hold(void) {
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    k_hold<<<1, 1>>>((long long)(khz > 0 ? khz : 2000000));
}
#else
static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes + 256)) {
        fprintf(stderr, "harness: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    memset(p, 0, bytes + 256);
    return p;
}
static inline void to_dev(void *d, const void *h, size_t bytes) { memcpy(d, h, bytes); }
static inline void to_host(void *h, const void *d, size_t bytes) { memcpy(h, d, bytes); }
static inline void sync_dev(void) {}
/* llmcc run --cold: twice the last-level cache (64 MiB where the C library does not say) */
static inline size_t cache_flush_bytes(void) {
    long llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return 2 * (size_t)(llc > 0 ? llc : 32 << 20);
}
static inline void cache_flush(void *scratch, size_t bytes, int i) { memset(scratch, i & 0xff, bytes); }
static inline void cache_hold(void) {}   /* the C harness times each launch on the host */
#endif
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* DIR/NAME, bytes long, on the device */
static inline void *read_leaf(const char *dir, const char *name, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "harness: cannot open %s\n", path); exit(1); }
    void *h = malloc(bytes ? bytes : 1);
    if (!h || fread(h, 1, bytes, f) != bytes) {
        fprintf(stderr, "harness: %s is shorter than %zu bytes\n", path, bytes);
        exit(1);
    }
    fclose(f);
    void *d = dev_alloc(bytes);
    to_dev(d, h, bytes);
    free(h);
    return d;
}
#endif
