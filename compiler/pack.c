/* pack.c: payload writer (see pack.h, runtime/payload.h). */
#include "pack.h"
#include "payload.h"
#include "util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t align_up(uint64_t x) { return (x + PAYLOAD_ALIGN - 1) / PAYLOAD_ALIGN * PAYLOAD_ALIGN; }

static size_t dtype_size(uint32_t dt) {
    switch (dt) {
    case PDT_F32: case PDT_I32: return 4;
    case PDT_F16: case PDT_BF16: return 2;
    default: return 0;
    }
}

typedef struct {
    FILE *f;
    const char *out, *tmp;
    uint64_t done, total;
    bool tty;
    double t0, last;
} Writer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static _Noreturn void fail(Writer *w, const char *what) {
    int e = errno;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    if (w->tty) fputc('\n', stderr);
    die_user(w->out, NULL, "%s: %s", what, e ? strerror(e) : "write error");
}

static void progress(Writer *w, bool final) {
    if (!w->tty) return;
    double t = now_s();
    if (!final && t - w->last < 0.1) return;
    w->last = t;
    double el = t - w->t0, rate = el > 0 ? w->done / el : 0;
    double frac = w->total ? (double)w->done / w->total : 1;
    int bar = (int)(frac * 30);
    char b[31];
    for (int i = 0; i < 30; i++) b[i] = i < bar ? '#' : '.';
    b[30] = 0;
    double eta = rate > 0 ? (w->total - w->done) / rate : 0;
    fprintf(stderr, "\rpacking [%s] %7.1f / %.1f MiB  %6.1f MiB/s  ETA %3.0fs ", b,
            w->done / 1048576.0, w->total / 1048576.0, rate / 1048576.0, final ? 0.0 : eta);
    if (final) fputc('\n', stderr);
}

static void put(Writer *w, const void *data, size_t n) {
    const size_t chunk = 8u << 20;
    const uint8_t *p = data;
    while (n) {
        size_t k = n < chunk ? n : chunk;
        errno = 0;
        if (fwrite(p, 1, k, w->f) != k) fail(w, "cannot write the payload");
        p += k; n -= k; w->done += k;
        progress(w, false);
    }
}

static void pad_to(Writer *w, uint64_t off) {
    static const uint8_t zeros[4096];
    CHECK(off >= w->done, "pad backwards");
    while (w->done < off) {
        uint64_t k = off - w->done;
        put(w, zeros, k < sizeof zeros ? (size_t)k : sizeof zeros);
    }
}

void pack_payload(const char *out_path, const PackTensor *tensors, int n,
                  const uint8_t *tok_blob, size_t tok_size) {
    CHECK(n >= 0, "n = %d", n);
    PayloadHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, PAYLOAD_MAGIC, 8);
    h.version = PAYLOAD_VERSION;
    h.n_tensors = (uint32_t)n;
    h.table_off = sizeof(PayloadHeader);
    h.tok_off = h.table_off + (uint64_t)n * sizeof(PayloadTensor);
    h.tok_size = tok_size;
    h.data_off = align_up(h.tok_off + tok_size);
    PayloadTensor *tab = xcalloc((size_t)n ? (size_t)n : 1, sizeof *tab);
    uint64_t off = h.data_off, end = h.tok_off + tok_size;
    for (int i = 0; i < n; i++) {
        const PackTensor *t = &tensors[i];
        PayloadTensor *e = &tab[i];
        size_t nl = strlen(t->name);
        if (nl >= sizeof e->name)
            die_user(NULL, t->name, "tensor name is %zu bytes, the payload allows %zu", nl, sizeof e->name - 1);
        memcpy(e->name, t->name, nl);
        CHECK(dtype_size(t->dtype) != 0, "tensor %s: dtype %u", t->name, t->dtype);
        CHECK(t->ndim >= 0 && t->ndim <= 4, "tensor %s: ndim %d", t->name, t->ndim);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            CHECK(t->shape[d] >= 0, "tensor %s: negative dim", t->name);
            count *= (uint64_t)t->shape[d];
            e->shape[d] = (uint64_t)t->shape[d];
        }
        if (count * dtype_size(t->dtype) != t->nbytes)
            die_user(NULL, t->name, "tensor has %zu bytes of data, its shape and dtype need %llu",
                     t->nbytes, (unsigned long long)(count * dtype_size(t->dtype)));
        CHECK(t->data || t->nbytes == 0, "tensor %s: no data", t->name);
        e->dtype = t->dtype;
        e->ndim = (uint32_t)t->ndim;
        e->offset = off;
        e->nbytes = t->nbytes;
        end = off + t->nbytes;
        off = align_up(end);
    }
    h.total_size = end;

    size_t tl = strlen(out_path);
    char *tmp = xmalloc(tl + 5);
    memcpy(tmp, out_path, tl);
    memcpy(tmp + tl, ".tmp", 5);
    Writer w = { .out = out_path, .tmp = tmp, .total = h.total_size, .tty = isatty(2) != 0 };
    w.t0 = w.last = now_s();
    errno = 0;
    w.f = fopen(tmp, "wb");
    if (!w.f) fail(&w, "cannot create the payload file");
    put(&w, &h, sizeof h);
    put(&w, tab, (size_t)n * sizeof *tab);
    if (tok_size) put(&w, tok_blob, tok_size);
    for (int i = 0; i < n; i++) {
        pad_to(&w, tab[i].offset);
        if (tensors[i].nbytes) put(&w, tensors[i].data, tensors[i].nbytes);
    }
    CHECK(w.done == h.total_size, "wrote %llu of %llu bytes", (unsigned long long)w.done, (unsigned long long)h.total_size);
    errno = 0;
    if (fflush(w.f) != 0 || ferror(w.f)) fail(&w, "cannot write the payload");
    FILE *f = w.f;
    w.f = NULL;
    errno = 0;
    if (fclose(f) != 0) fail(&w, "cannot write the payload");
    errno = 0;
    if (rename(tmp, out_path) != 0) fail(&w, "cannot rename the payload into place");
    progress(&w, true);
    free(tab);
    free(tmp);
}
