/* pack.c: payload writer (see pack.h, runtime/payload.h). Four ways a
 * tensor's bytes get to the file: copy_file_range from the checkpoint (the
 * common case: no copy through user space, no pages of the mapping touched),
 * a chunked convert from the mapping (--dtype), a chunked generator
 * (--random-weights), or row by row in another order (a GGUF file's llama
 * q/k rows, converted too where asked). Memory stays a few MiB whatever the
 * model size. */
#include "pack.h"
#include "payload.h"
#include "quant.h"
#include <math.h>
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t align_up(uint64_t x) { return (x + PAYLOAD_ALIGN - 1) / PAYLOAD_ALIGN * PAYLOAD_ALIGN; }

static bool is_float(uint32_t dt) { return dt == PDT_F32 || dt == PDT_F16 || dt == PDT_BF16; }

static void to_f32(float *dst, const void *src, uint32_t dt, size_t n) {
    const uint16_t *h = src;
    switch (dt) {
    case PDT_F32: memcpy(dst, src, n * 4); return;
    case PDT_BF16: for (size_t i = 0; i < n; i++) dst[i] = cvt_bf16_to_f32(h[i]); return;
    case PDT_F16: for (size_t i = 0; i < n; i++) dst[i] = cvt_f16_to_f32(h[i]); return;
    default:
        CHECK(dt < PDT_COUNT && payload_dtype_block(dt) > 1, "convert from dtype %u", dt);
        dequant_blocks(dt, src, n, dst);   /* a block type */
        return;
    }
}

static void from_f32(void *dst, const float *src, uint32_t dt, size_t n) {
    uint16_t *h = dst;
    switch (dt) {
    case PDT_F32: memcpy(dst, src, n * 4); return;
    case PDT_BF16: for (size_t i = 0; i < n; i++) h[i] = cvt_f32_to_bf16(src[i]); return;
    case PDT_F16: for (size_t i = 0; i < n; i++) h[i] = cvt_f32_to_f16(src[i]); return;
    default:   /* --quant: a block type (quant_blocks checks that it has a quantizer) */
        CHECK(dt < PDT_COUNT && payload_dtype_block(dt) > 1, "convert to dtype %u", dt);
        quant_blocks(dt, src, n, dst);
        return;
    }
}

/* ---- random weights: counter-based splitmix64, four 16-bit lanes per draw ---- */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t tensor_seed(uint64_t seed, const char *name) {
    return mix64(seed ^ mix64(fnv1a(name, strlen(name))));
}
/* elements [first, first + n) of a uniform(-a, a) tensor, a = 0.02 * sqrt(3): std 0.02 */
static void gen_random(float *dst, uint64_t tseed, uint64_t first, size_t n, float offset) {
    const float a = 0.034641016f, scale = 2.0f * a / 65536.0f, base = offset + 0.5f * scale - a;
    size_t i = 0;
    while (i < n) {
        uint64_t e = first + i;
        uint64_t r = mix64(tseed + ((e >> 2) + 1) * 0x9E3779B97F4A7C15ull);
        for (unsigned l = (unsigned)(e & 3); l < 4 && i < n; l++, i++)
            dst[i] = base + (float)((r >> (16 * l)) & 0xffffu) * scale;
    }
}

/* total bytes at out drawn from seed */
static void random_bytes(uint64_t seed, size_t total, uint8_t *out) {
    for (size_t i = 0; i < total; i += 8) {
        uint64_t r = mix64(seed + (i / 8 + 1) * 0x9E3779B97F4A7C15ull);
        for (size_t j = i; j < i + 8 && j < total; j++, r >>= 8) out[j] = (uint8_t)r;
    }
}

/* random K-quant blocks (pack.h) */
void pack_random_kquant_blocks(uint32_t dt, uint64_t seed, float bound, size_t n, uint8_t *out) {
    const bool whole = n % 256 == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK(dt >= PDT_Q4_K && dt <= PDT_Q6_K && whole, "random blocks: %zu values of dtype %u", n, dt);
    const size_t bytes = payload_dtype_bytes(dt);
    random_bytes(seed, n / 256 * bytes, out);
    /* the f16 super-block scales from [bound / 2, bound] over the largest integer product, so values stay
     * within about +-bound: Q4_K / Q5_K's sub-block scale and minimum are at most 63 and q 15 or 31, Q6_K's
     * scale is an int8 and q - 32 in [-32, 31] */
    const float most = dt == PDT_Q4_K ? 63.0f * 15 : dt == PDT_Q5_K ? 63.0f * 31 : 128.0f * 32;
    for (size_t b = 0; b < n / 256; b++) {
        uint8_t *blk = out + b * bytes;
        const uint64_t r = mix64(seed ^ (b + 1) * 0xD6E8FEB86659FD93ull);
        const float u0 = 0.5f + 0.5f * (float)(r & 0xffff) / 65535.0f;
        const float u1 = 0.5f + 0.5f * (float)(r >> 16 & 0xffff) / 65535.0f;
        if (dt == PDT_Q6_K) { put16(blk + 208, cvt_f32_to_f16(bound * u0 / most)); continue; }
        put16(blk, cvt_f32_to_f16(bound * u0 / most));
        put16(blk + 2, cvt_f32_to_f16(bound * u1 / 63.0f));
    }
}

/* random Q5_0 / Q5_1 blocks (pack.h): every qh and qs byte drawn; d from [bound / 2, bound] over the largest
 * integer (Q5_0's q - 16 in [-16, 15], Q5_1's q in [0, 31]), Q5_1's minimum in [-bound / 2, -bound / 4], so the
 * values stay within +-bound */
void pack_random_q5_blocks(uint32_t dt, uint64_t seed, float bound, size_t n, uint8_t *out) {
    const bool whole = n % 32 == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK((dt == PDT_Q5_0 || dt == PDT_Q5_1) && whole, "random blocks: %zu values of dtype %u", n, dt);
    const size_t bytes = payload_dtype_bytes(dt);
    random_bytes(seed, n / 32 * bytes, out);
    for (size_t b = 0; b < n / 32; b++) {
        uint8_t *blk = out + b * bytes;
        const uint64_t r = mix64(seed ^ (b + 1) * 0xD6E8FEB86659FD93ull);
        const float u0 = 0.5f + 0.5f * (float)(r & 0xffff) / 65535.0f;
        const float u1 = 0.5f + 0.5f * (float)(r >> 16 & 0xffff) / 65535.0f;
        if (dt == PDT_Q5_0) { put16(blk, cvt_f32_to_f16(bound * u0 / 16.0f)); continue; }
        put16(blk, cvt_f32_to_f16(bound * u0 / 31.0f * 0.75f));
        put16(blk + 2, cvt_f32_to_f16(-bound * u1 / 2.0f));
    }
}

/* ---- the output file ---- */
typedef struct {
    int fd;
    const char *out, *tmp;
    uint64_t done, total;
    bool tty;
    double t0, last;
    uint8_t *buf;          /* small writes are gathered here */
    size_t nbuf;
} Writer;

#define WBUF (4u << 20)
#define CHUNK_ELEMS ((size_t)1 << 20)

static _Noreturn void fail(Writer *w, const char *what, const char *name) {
    int e = errno;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp);
    if (w->tty) fputc('\n', stderr);
    die_user(name ? name : w->out, NULL, "%s: %s", what, e ? strerror(e) : "write error");
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

static void write_all(Writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        errno = 0;
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fail(w, "cannot write the payload", NULL);
        p += k; n -= (size_t)k;
    }
}

static void flush(Writer *w) {
    if (w->nbuf) write_all(w, w->buf, w->nbuf);
    w->nbuf = 0;
}

static void put(Writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        size_t k = WBUF - w->nbuf < n ? WBUF - w->nbuf : n;
        memcpy(w->buf + w->nbuf, p, k);
        w->nbuf += k; p += k; n -= k; w->done += k;
        if (w->nbuf == WBUF) flush(w);
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

/* Drops the pages of [p, p + n) from this process (a read-only private file
 * mapping: they stay in the page cache, nothing is lost). */
static void drop_pages(const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t m = ~(uintptr_t)(pg - 1), b = ((uintptr_t)p + (uintptr_t)pg - 1) & m, e = ((uintptr_t)p + n) & m;
    if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
}

/* In-kernel copy of a tensor from its checkpoint file. Returns false (having
 * written nothing) when the file system cannot do it; the caller then copies
 * through memory. */
static bool copy_range(Writer *w, const PackTensor *t, const PackSource *src) {
    errno = 0;
    int in = open(src->src_path, O_RDONLY | O_CLOEXEC);
    if (in < 0) fail(w, "cannot open", src->src_path);
    loff_t off = (loff_t)src->src_off;
    size_t left = t->nbytes;
    bool first = true;
    while (left) {
        size_t k = left < (64u << 20) ? left : (64u << 20);
        errno = 0;
        ssize_t r = copy_file_range(in, &off, w->fd, NULL, k, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && first &&
            (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP || errno == EPERM)) {
            close(in);
            return false;
        }
        if (r <= 0) {
            int e = errno; close(in); errno = e; fail(w, "cannot copy the weights into the payload", src->src_path);
        }
        first = false;
        left -= (size_t)r; w->done += (uint64_t)r;
        progress(w, false);
    }
    close(in);
    return true;
}

/* A tensor whose rows come in src->row_from's order: row by row through memory (no in-kernel copy: the rows are
 * not contiguous in the source), converted where asked, in chunks of at most CHUNK_ELEMS elements. */
static void write_rows(Writer *w, const PackTensor *t, const PackSource *src, float *fbuf, uint8_t *obuf) {
    uint64_t rows = (uint64_t)t->shape[0], count = 1;
    for (int d = 0; d < t->ndim; d++) count *= (uint64_t)t->shape[d];
    uint64_t row_elems = rows ? count / rows : 0;
    size_t in_row = rows ? t->nbytes / (size_t)rows : 0;
    int overflow;   /* (sizes were checked by pack_payload_ex) */
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *p = (const uint8_t *)t->data + (uint64_t)src->row_from[r] * in_row;
        if (!src->convert) { put(w, p, in_row); continue; }
        for (uint64_t e0 = 0; e0 < row_elems; e0 += CHUNK_ELEMS) {   /* rows are whole blocks */
            size_t k = row_elems - e0 < CHUNK_ELEMS ? (size_t)(row_elems - e0) : CHUNK_ELEMS;
            to_f32(fbuf, p + payload_tensor_bytes(src->src_dtype, e0, &overflow), src->src_dtype, k);
            from_f32(obuf, fbuf, t->dtype, k);
            put(w, obuf, payload_tensor_bytes(t->dtype, k, &overflow));
        }
    }
    if (src->src_path) drop_pages(t->data, t->nbytes);
}

static void write_tensor(Writer *w, const PackTensor *t, const PackSource *src, float *fbuf, uint8_t *obuf) {
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) count *= (uint64_t)t->shape[d];
    if (src->fill == PACK_DATA && src->row_from) { write_rows(w, t, src, fbuf, obuf); return; }
    if (src->fill == PACK_DATA && !src->convert) {
        if (!t->nbytes) return;
        flush(w);
        if (src->src_path && copy_range(w, t, src)) return;
        const uint8_t *p = t->data;
        for (size_t o = 0; o < t->nbytes; o += WBUF) {
            size_t k = t->nbytes - o < WBUF ? t->nbytes - o : WBUF;
            put(w, p + o, k);
            if (src->src_path) drop_pages(p + o, k);
        }
        return;
    }
    uint64_t tseed = tensor_seed(src->seed, t->name);
    int overflow;
    for (uint64_t e0 = 0; e0 < count; e0 += CHUNK_ELEMS) {   /* CHUNK_ELEMS: whole blocks of any block type */
        size_t k = count - e0 < CHUNK_ELEMS ? (size_t)(count - e0) : CHUNK_ELEMS;
        if (src->fill == PACK_DATA) {
            const uint8_t *p = (const uint8_t *)t->data + payload_tensor_bytes(src->src_dtype, e0, &overflow);
            to_f32(fbuf, p, src->src_dtype, k);
            if (src->src_path) drop_pages(p, payload_tensor_bytes(src->src_dtype, k, &overflow));
        } else {
            gen_random(fbuf, tseed, e0, k, src->fill == PACK_RANDOM_NORM ? 1.0f : 0.0f);
        }
        from_f32(obuf, fbuf, t->dtype, k);
        put(w, obuf, payload_tensor_bytes(t->dtype, k, &overflow));
    }
}

void pack_payload_ex(const char *out_path, const PackTensor *tensors, const PackSource *srcs, int n,
                     const uint8_t *tok_blob, size_t tok_size) {
    CHECK(n >= 0, "n = %d", n);
    static const PackSource plain;
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
        const PackSource *src = srcs ? &srcs[i] : &plain;
        PayloadTensor *e = &tab[i];
        size_t nl = strlen(t->name);
        if (nl >= sizeof e->name)
            die_user(NULL, t->name, "tensor name is %zu bytes, the payload allows %zu", nl, sizeof e->name - 1);
        memcpy(e->name, t->name, nl);
        CHECK(payload_dtype_bytes(t->dtype) != 0, "tensor %s: dtype %u", t->name, t->dtype);
        CHECK(t->ndim >= 0 && t->ndim <= 4, "tensor %s: ndim %d", t->name, t->ndim);
        CHECK((unsigned)src->fill < PACK_FILL_COUNT, "tensor %s: fill %d", t->name, (int)src->fill);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            CHECK(t->shape[d] >= 0, "tensor %s: negative dim", t->name);
            count *= (uint64_t)t->shape[d];
            e->shape[d] = (uint64_t)t->shape[d];
        }
        if (src->fill != PACK_DATA || src->convert)
            CHECK(is_float(t->dtype) || (t->dtype >= PDT_Q8_0 && t->dtype <= PDT_Q5_1),
                  "tensor %s: generated or converted into dtype %u", t->name, t->dtype);
        int overflow;
        if (src->fill == PACK_DATA) {
            uint32_t sdt = src->convert ? src->src_dtype : t->dtype;
            if (src->convert)   /* from a float or a block type (dequantized) */
                CHECK(is_float(sdt) || (sdt >= PDT_Q8_0 && sdt <= PDT_Q5_1), "tensor %s: converted from dtype %u",
                      t->name, sdt);
            uint64_t need = payload_tensor_bytes(sdt, count, &overflow);
            CHECK(!overflow && (need || !count), "tensor %s: %llu values of dtype %u", t->name,
                  (unsigned long long)count, sdt);
            if (need != t->nbytes)
                die_user(NULL, t->name, "tensor has %zu bytes of data, its shape and dtype need %llu",
                         t->nbytes, (unsigned long long)need);
            CHECK(t->data || t->nbytes == 0, "tensor %s: no data", t->name);
            /* a row order names one of the shape[0] source rows for each row (write_rows) */
            CHECK(!src->row_from || t->ndim >= 1, "tensor %s: a row order without rows", t->name);
            for (int64_t r = 0; src->row_from && r < t->shape[0]; r++)
                CHECK(src->row_from[r] >= 0 && src->row_from[r] < t->shape[0], "tensor %s: row %lld from row %lld",
                      t->name, (long long)r, (long long)src->row_from[r]);
        }
        e->dtype = t->dtype;
        e->ndim = (uint32_t)t->ndim;
        e->offset = off;
        e->nbytes = payload_tensor_bytes(t->dtype, count, &overflow);
        CHECK(!overflow && (e->nbytes || !count), "tensor %s: %llu values of dtype %u", t->name,
              (unsigned long long)count, t->dtype);
        end = off + e->nbytes;
        off = align_up(end);
    }
    h.total_size = end;

    char *tmp = xmalloc(strlen(out_path) + 5);
    sprintf(tmp, "%s.tmp", out_path);
    Writer w = { .fd = -1, .out = out_path, .tmp = tmp, .total = h.total_size, .tty = isatty(2) != 0 };
    w.t0 = w.last = now_s();
    w.buf = xmalloc(WBUF);
    float *fbuf = xmalloc(CHUNK_ELEMS * sizeof(float));
    uint8_t *obuf = xmalloc(CHUNK_ELEMS * sizeof(float));
    errno = 0;
    w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd < 0) fail(&w, "cannot create the payload file", NULL);
    put(&w, &h, sizeof h);
    put(&w, tab, (size_t)n * sizeof *tab);
    if (tok_size) put(&w, tok_blob, tok_size);
    for (int i = 0; i < n; i++) {
        pad_to(&w, tab[i].offset);
        write_tensor(&w, &tensors[i], srcs ? &srcs[i] : &plain, fbuf, obuf);
        CHECK(w.done == tab[i].offset + tab[i].nbytes, "tensor %s: wrote %llu bytes, expected %llu", tensors[i].name,
              (unsigned long long)(w.done - tab[i].offset), (unsigned long long)tab[i].nbytes);
    }
    flush(&w);
    CHECK(w.done == h.total_size, "wrote %llu of %llu bytes", (unsigned long long)w.done,
          (unsigned long long)h.total_size);
    int fd = w.fd;
    w.fd = -1;
    errno = 0;
    if (close(fd) != 0) fail(&w, "cannot write the payload", NULL);
    errno = 0;
    if (rename(tmp, out_path) != 0) fail(&w, "cannot rename the payload into place", NULL);
    progress(&w, true);
    free(w.buf);
    free(fbuf);
    free(obuf);
    free(tab);
    free(tmp);
}
