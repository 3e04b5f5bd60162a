/* test_stage.c: runtime/stage.h's upload loop, with a device that behaves as a GPU's copy engine may: a copy
 * reads its staging buffer and lands in device memory only when the stream is waited for (the latest moment a
 * DMA may read it), so a loop that refilled a buffer before its copy had finished would upload the wrong bytes.
 * For sizes around the buffers' (empty, one byte, a buffer's worth +-1, several with a tail): the device's
 * bytes equal the source's, every copy reads the buffer of its own stream, no stream holds two copies at once,
 * nothing is pending at the end; a failed copy or wait makes stage_upload fail, and a failed copy leaves nothing
 * in flight (the caller frees the buffers next). With one filling thread and with three (buffers of several
 * pages, so that each thread has a slice; sizes that do not split evenly). Prints "N passed, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include "../../runtime/stage.h"

static int passed, failed;
static void expect(int ok, const char *what, size_t bytes) {
    if (ok) passed++;
    else { failed++; printf("FAIL %s (%zu bytes)\n", what, bytes); }
}

typedef struct {
    void *buf[2];              /* the stager's buffers, to check each copy reads its own stream's */
    void *dst[2];              /* each stream's pending copy (NULL: none) */
    const void *from[2];
    size_t len[2];
    int misuse;                /* a copy from another buffer, or on a stream with one pending */
    int copies, fail_copy_at, fail_wait_at, waits;
} FakeDevice;

static int fake_copy(void *ctx, int k, void *dst, const void *from, size_t len) {
    FakeDevice *d = ctx;
    if (++d->copies == d->fail_copy_at) return -1;
    if (d->dst[k] || from != d->buf[k]) d->misuse = 1;
    d->dst[k] = dst;
    d->from[k] = from;
    d->len[k] = len;
    return 0;
}
static int fake_wait(void *ctx, int k) {   /* the copy happens now */
    FakeDevice *d = ctx;
    if (++d->waits == d->fail_wait_at) return -1;
    if (d->dst[k]) memcpy(d->dst[k], d->from[k], d->len[k]);
    d->dst[k] = NULL;
    return 0;
}

static int upload(size_t bytes, size_t size, int fillers, int fail_copy_at, int fail_wait_at, int *ok, int *pending) {
    uint8_t *src = malloc(bytes + 1), *dev = calloc(1, bytes + 1);
    FakeDevice d = { { malloc(size), malloc(size) }, { NULL, NULL }, { NULL, NULL }, { 0, 0 }, 0, 0,
                     fail_copy_at, fail_wait_at, 0 };
    for (size_t i = 0; i < bytes; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
    Stager s = { { d.buf[0], d.buf[1] }, size, &d, fake_copy, fake_wait, fillers };
    int r = stage_upload(&s, dev, src, bytes);
    *pending = d.dst[0] || d.dst[1];
    *ok = memcmp(dev, src, bytes) == 0 && !d.misuse && !*pending;
    free(src);
    free(dev);
    free(d.buf[0]);
    free(d.buf[1]);
    return r;
}

int main(void) {
    const struct { size_t size; int fillers; } runs[] = { { 4096, 1 }, { 3 * 4096 + 100, 3 } };
    for (int run = 0; run < 2; run++) {
        const size_t size = runs[run].size;
        const int fillers = runs[run].fillers;
        const size_t sizes[] = { 0, 1, size - 1, size, size + 1, 2 * size, 2 * size + 1, 5 * size + 3 };
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            int ok, pending;
            int r = upload(sizes[i], size, fillers, 0, 0, &ok, &pending);
            expect(r == 0, "stage_upload returned an error", sizes[i]);
            expect(ok, "the device's bytes differ, or a copy was misplaced or left pending", sizes[i]);
        }
        const size_t bytes = 5 * size + 3;
        int ok, pending;
        expect(upload(bytes, size, fillers, 3, 0, &ok, &pending) == -1, "a failed copy was not reported", bytes);
        expect(!pending, "a copy was left in flight after a failed copy", bytes);
        expect(upload(bytes, size, fillers, 0, 4, &ok, &pending) == -1, "a failed wait was not reported", bytes);
        expect(upload(bytes, size, fillers, 0, 8, &ok, &pending) == -1, "a failed last wait was not reported", bytes);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
