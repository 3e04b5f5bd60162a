/* stage.h: the weights' upload to a GPU at start-up, through two staging buffers.
 *
 * A copy from pageable memory (the payload's mapping) makes the CUDA driver copy it into pinned memory of its own
 * and wait for each piece before the next: the host's page faults, its memcpy and the PCIe transfer take turns.
 * Here the host fills one pinned buffer from the mapping while the GPU copies the other (each buffer's copies on
 * a stream of its own), so the upload takes about the longer of the two, not their sum. The loop is separate from
 * CUDA (the copy and the wait are the caller's) so that tests/c/test_stage.c checks it on the CPU with copies that
 * land only when waited for, as a DMA's do, and scripts/bench_startup times its host side. */
#ifndef LLMCC_STAGE_H
#define LLMCC_STAGE_H
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
} Stager;

/* bytes from src (host memory, e.g. the payload's mapping) to dst (device memory), a buffer's worth at a time,
 * the two buffers in turn; 0, or -1 when a copy or a wait failed (nothing is left in flight either way) */
static inline int stage_upload(const Stager *s, uint8_t *dst, const uint8_t *src, size_t bytes) {
    int k = 0, failed = 0;
    for (size_t off = 0; off < bytes && !failed; off += s->size, k ^= 1) {
        size_t len = bytes - off < s->size ? bytes - off : s->size;
        failed = s->wait(s->ctx, k);   /* buffer k's previous copy has landed: refill it */
        if (!failed) memcpy(s->buf[k], src + off, len);
        failed = failed || s->copy(s->ctx, k, dst + off, s->buf[k], len);
    }
    /* both streams waited for, also after a failure: the caller frees the buffers next */
    int wait0 = s->wait(s->ctx, 0), wait1 = s->wait(s->ctx, 1);
    return failed || wait0 || wait1 ? -1 : 0;
}
#endif
