/* stage.h: the weights' upload to a GPU at start-up, through two staging buffers.
 *
 * A copy from pageable memory (the payload's mapping) makes the CUDA driver copy it into pinned memory of its own
 * and wait for each piece before the next: the host's page faults, its memcpy and the PCIe transfer take turns.
 * Here the host fills one pinned buffer from the mapping while the GPU copies the other (each buffer's copies on
 * a stream of its own), so the upload takes about the longer of the two, not their sum. The loop is separate from
 * CUDA (the copy and the wait are the caller's) so that tests/c/test_stage.c checks it on the CPU with copies that
 * land only when waited for, as a DMA's do, and scripts/bench_startup times its host side.
 *
 * One thread filling fills at about 6 GB/s (page faults of the mapping and memcpy, measured by bench_startup), a
 * ninth of a PCIe 5.0 x16 link: `fillers` threads fill each buffer, a page-aligned slice each (so that each slice's
 * page faults are its own thread's). */
#ifndef LLMCC_STAGE_H
#define LLMCC_STAGE_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    void *buf[2];              /* the staging buffers, size bytes each (pinned on CUDA) */
    size_t size;
    void *ctx;                 /* the caller's (CUDA: the two streams) */
    /* starts copying len bytes of buf[k] to dst (asynchronously); 0, or -1 on an error */
    int (*copy)(void *ctx, int k, void *dst, const void *from, size_t len);
    /* returns once buffer k's last copy has finished (it may then be refilled); 0, or -1 on an error */
    int (*wait)(void *ctx, int k);
    int fillers;               /* threads filling a buffer (<= 1: the caller alone; STAGE_FILLERS_MAX at most) */
} Stager;

#define STAGE_FILLERS_MAX 16
typedef struct { uint8_t *dst; const uint8_t *src; size_t len; } StageSlice;
static inline void *stage_fill_slice(void *arg) {
    StageSlice *sl = (StageSlice *)arg;
    memcpy(sl->dst, sl->src, sl->len);
    return NULL;
}
/* len bytes from src to dst by `fillers` threads, slices of whole pages (4 KiB); a slice whose thread cannot be
 * started is copied by the calling thread */
static inline void stage_fill(uint8_t *dst, const uint8_t *src, size_t len, int fillers) {
    StageSlice slice[STAGE_FILLERS_MAX];
    pthread_t thread[STAGE_FILLERS_MAX];
    int started[STAGE_FILLERS_MAX] = { 0 };
    int n = fillers < 1 ? 1 : fillers > STAGE_FILLERS_MAX ? STAGE_FILLERS_MAX : fillers;
    size_t step = ((len + (size_t)n - 1) / (size_t)n + 4095) & ~(size_t)4095, off = 0;
    for (int t = 0; t < n; t++) {
        size_t this_len = off < len ? (len - off < step ? len - off : step) : 0;
        slice[t] = (StageSlice){ dst + off, src + off, this_len };
        off += this_len;
        if (t > 0 && this_len) started[t] = pthread_create(&thread[t], NULL, stage_fill_slice, &slice[t]) == 0;
    }
    for (int t = 0; t < n; t++)
        if (!started[t]) stage_fill_slice(&slice[t]);
    for (int t = 1; t < n; t++)
        if (started[t]) pthread_join(thread[t], NULL);
}

/* bytes from src (host memory, e.g. the payload's mapping) to dst (device memory), a buffer's worth at a time,
 * the two buffers in turn; 0, or -1 when a copy or a wait failed (nothing is left in flight either way) */
static inline int stage_upload(const Stager *s, uint8_t *dst, const uint8_t *src, size_t bytes) {
    int k = 0, failed = 0;
    for (size_t off = 0; off < bytes && !failed; off += s->size, k ^= 1) {
        size_t len = bytes - off < s->size ? bytes - off : s->size;
        failed = s->wait(s->ctx, k);   /* buffer k's previous copy has landed: refill it */
        if (!failed) stage_fill((uint8_t *)s->buf[k], src + off, len, s->fillers);
        failed = failed || s->copy(s->ctx, k, dst + off, s->buf[k], len);
    }
    /* both streams waited for, also after a failure: the caller frees the buffers next */
    int wait0 = s->wait(s->ctx, 0), wait1 = s->wait(s->ctx, 1);
    return failed || wait0 || wait1 ? -1 : 0;
}
#endif
