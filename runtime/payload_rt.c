/* payload_rt.c: maps the payload from /proc/self/exe (or LLMCC_PAYLOAD) and
 * checks that everything the header points at lies inside it. */
#include "payload_rt.h"
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef LLMCC_ZSTD
#include <pthread.h>
#include <zstd.h>
#endif

static char g_msg[4400];

#define DAMAGED "the executable is truncated or damaged (payload "

const char *payload_dtype_name(uint32_t dtype) {
    static const char *const names[] = {ALL_DTYPES(DTYPE_NAME)};
    return dtype < PDT_COUNT ? names[dtype] : "?";
}

/* argv[0] resolution when /proc is not mounted: a path, or a PATH search. */
static int open_argv0(const char *argv0, char *path, size_t cap) {
    if (!argv0 || !*argv0) return -1;
    if (strchr(argv0, '/')) {
        if (!realpath(argv0, path)) return -1;
        return open(path, O_RDONLY | O_CLOEXEC);
    }
    const char *pathenv = getenv("PATH");
    if (!pathenv) return -1;
    for (const char *s = pathenv; ; ) {
        const char *e = strchr(s, ':');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0) snprintf(path, cap, "./%s", argv0);
        else snprintf(path, cap, "%.*s/%s", (int)n, s, argv0);
        if (access(path, X_OK) == 0) return open(path, O_RDONLY | O_CLOEXEC);
        if (!e) break;
        s = e + 1;
    }
    return -1;
}

/* No footer at the file's end: strip or objcopy rewrote it, keeping the payload's section (payload.h). Its footer
 * copy into *f, with payload_offset where the section now is; NULL, or why not. */
static const char *find_section(int fd, uint64_t fsize, PayloadFooter *f) {
    static const char none[] = "the executable is truncated or damaged (no payload footer at its end, and no "
                               PAYLOAD_SECTION " section)";
    Elf64_Ehdr eh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum ||
        eh.e_shoff > fsize || (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > fsize - eh.e_shoff)
        return none;
    Elf64_Shdr names;
    if (pread(fd, &names, sizeof names, (off_t)(eh.e_shoff + eh.e_shstrndx * sizeof names)) != (ssize_t)sizeof names)
        return none;
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr s;
        char name[sizeof PAYLOAD_SECTION];
        if (pread(fd, &s, sizeof s, (off_t)(eh.e_shoff + i * sizeof s)) != (ssize_t)sizeof s ||
            s.sh_name >= names.sh_size || names.sh_size - s.sh_name < sizeof name ||
            pread(fd, name, sizeof name, (off_t)(names.sh_offset + s.sh_name)) != (ssize_t)sizeof name ||
            memcmp(name, PAYLOAD_SECTION, sizeof name))
            continue;
        if (s.sh_size < sizeof *f || s.sh_offset > fsize || s.sh_size > fsize - s.sh_offset ||
            pread(fd, f, sizeof *f, (off_t)(s.sh_offset + s.sh_size - sizeof *f)) != (ssize_t)sizeof *f ||
            memcmp(f->magic, FOOTER_MAGIC, 8) || f->payload_size != s.sh_size - sizeof *f)
            return DAMAGED "section " PAYLOAD_SECTION " does not hold it whole)";
        f->payload_offset = s.sh_offset;
        return NULL;
    }
    return none;
}

/* The message, formatted into g_msg. */
static const char *msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *msg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return g_msg;
}
static const char *bad_version(const char *what, uint32_t v) {
    return msg("the %s is version %u, this runtime reads version %u", what, v, PAYLOAD_VERSION);
}

static const char *check_header(Payload *p) {
    const uint8_t *b = p->base;
    uint64_t size = p->size;
    if (size < sizeof(PayloadHeader))
        return msg(DAMAGED "of %llu bytes is shorter than its header)", (unsigned long long)size);
    const PayloadHeader *h = (const PayloadHeader *)b;
    if (memcmp(h->magic, PAYLOAD_MAGIC, 8) != 0) return DAMAGED "header magic is wrong)";
    if (h->version != PAYLOAD_VERSION) return bad_version("payload", h->version);
    if (h->total_size != size)
        return msg(DAMAGED "is %llu bytes, its header says %llu)", (unsigned long long)size,
                   (unsigned long long)h->total_size);
    if (h->table_off < sizeof(PayloadHeader) || h->table_off > size ||
        h->n_tensors > (size - h->table_off) / sizeof(PayloadTensor))
        return DAMAGED "tensor table lies outside the payload)";
    if (h->table_off % 8 != 0) return DAMAGED "tensor table is misaligned)";
    if (h->tok_off > size || h->tok_size > size - h->tok_off) return DAMAGED "tokenizer lies outside the payload)";
    if (h->data_off > size) return DAMAGED "data offset lies outside the payload)";
    const PayloadTensor *t = (const PayloadTensor *)(b + h->table_off);
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        const PayloadTensor *e = &t[i];
        if (memchr(e->name, 0, sizeof e->name) == NULL) return msg(DAMAGED "tensor %u has no valid name)", i);
        if (payload_dtype_bytes(e->dtype) == 0 || e->ndim > 4)
            return msg(DAMAGED "tensor %s has dtype %u, ndim %u)", e->name, e->dtype, e->ndim);
        uint64_t count = 1;
        int overflow = 0;
        for (uint32_t d = 0; d < e->ndim; d++) {
            if (e->shape[d] != 0 && count > UINT64_MAX / e->shape[d]) { overflow = 1; break; }
            count *= e->shape[d];
        }
        uint64_t bytes = overflow ? 0 : payload_tensor_bytes(e->dtype, count, &overflow);
        if (overflow || (bytes == 0 && count != 0) || bytes != e->nbytes || e->offset % PAYLOAD_ALIGN != 0 ||
            e->offset < h->data_off || e->offset > size || e->nbytes > size - e->offset)
            return msg(DAMAGED "tensor %s lies outside the payload or has a wrong size)", e->name);
    }
    p->hdr = h;
    p->tensors = t;
    p->tok_size = h->tok_size;
    p->tok_blob = h->tok_size ? b + h->tok_off : NULL;
    return NULL;
}

/* ---- compressed payloads ---- */
typedef struct {
    const Payload *p;
    const ZPayloadHeader *zh;
    const ZFrame *frames;
    uint8_t *dst;
    unsigned next;             /* the next frame to decode (atomic) */
    const char *err;
} Unpack;

#ifdef LLMCC_ZSTD
static void *unpack_worker(void *arg) {
    Unpack *u = arg;
    uint8_t *scratch = NULL;
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    if (!dc) { u->err = "out of memory"; return NULL; }
    for (;;) {
        unsigned i = __atomic_fetch_add(&u->next, 1, __ATOMIC_RELAXED);
        if (i >= u->zh->n_frames || __atomic_load_n(&u->err, __ATOMIC_RELAXED)) break;
        const ZFrame *f = &u->frames[i];
        uint64_t ro = (uint64_t)i * u->zh->frame_size;
        uint64_t left = u->zh->raw_size - ro;
        size_t n = left < u->zh->frame_size ? (size_t)left : (size_t)u->zh->frame_size;
        uint8_t *out = u->dst + ro;
        if (f->planes == 2) {
            if (!scratch && !(scratch = malloc((size_t)u->zh->frame_size))) { u->err = "out of memory"; break; }
            out = scratch;
        }
        size_t r = ZSTD_decompressDCtx(dc, out, n, u->p->zbase + f->comp_off, (size_t)f->comp_size);
        if (ZSTD_isError(r) || r != n) {
            snprintf(g_msg, sizeof g_msg, DAMAGED "compressed frame %u does not decode: %s)", i,
                     ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong size");
            __atomic_store_n(&u->err, g_msg, __ATOMIC_RELAXED);
            break;
        }
        if (f->planes == 2) {
            uint8_t *d = u->dst + ro;
            size_t h = n / 2;
            for (size_t k = 0; k < h; k++) { d[2 * k] = scratch[k]; d[2 * k + 1] = scratch[h + k]; }
        }
    }
    free(scratch);
    ZSTD_freeDCtx(dc);
    return NULL;
}
#endif

/* p->zbase/zsize hold the compressed payload: decodes it into p->base/size. */
static const char *unpack(Payload *p) {
    const ZPayloadHeader *zh = (const ZPayloadHeader *)p->zbase;
    if (p->zsize < sizeof *zh) return DAMAGED "compressed header is cut short)";
    if (zh->version != PAYLOAD_VERSION) return bad_version("payload", zh->version);
    uint64_t tab = (uint64_t)zh->n_frames * sizeof(ZFrame);
    if (zh->frame_size == 0 || zh->frame_size % 2 || zh->frame_size > (1u << 30) || zh->raw_size == 0 ||
        (zh->raw_size + zh->frame_size - 1) / zh->frame_size != zh->n_frames || tab > p->zsize - sizeof *zh)
        return DAMAGED "compressed header is inconsistent)";
    const ZFrame *fr = (const ZFrame *)(p->zbase + p->zsize - tab);
    uint64_t end = p->zsize - tab;
    for (uint32_t i = 0; i < zh->n_frames; i++)
        if (fr[i].comp_off < sizeof *zh || fr[i].comp_off > end || fr[i].comp_size > end - fr[i].comp_off ||
            (fr[i].planes != 1 && fr[i].planes != 2))
            return msg(DAMAGED "compressed frame %u lies outside it)", i);
#ifndef LLMCC_ZSTD
    return "the payload is compressed and this runtime was built without zstd (LLMCC_ZSTD)";
#else
    void *m = mmap(NULL, (size_t)zh->raw_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return msg("cannot allocate %llu bytes to decompress the weights into: %s", (unsigned long long)zh->raw_size,
                   strerror(errno));
    Unpack u = { p, zh, fr, m, 0, NULL };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
    pthread_t th[64];
    int started = 0;
    for (; started < nt - 1; started++)
        if (pthread_create(&th[started], NULL, unpack_worker, &u) != 0) break;
    unpack_worker(&u);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (u.err) { munmap(m, (size_t)zh->raw_size); return u.err; }
    mprotect(m, (size_t)zh->raw_size, PROT_READ);
    p->base = m;
    p->size = zh->raw_size;
    return NULL;
#endif
}

/* Closes fd (its errno already read into the message) and returns the message. */
static const char *close_fd(int fd, const char *m) {
    close(fd);
    return m;
}

const char *payload_open(Payload *p, const char *argv0) {
    memset(p, 0, sizeof *p);
    const char *env = getenv("LLMCC_PAYLOAD");
    int fd;
    if (env && *env) {
        snprintf(p->path, sizeof p->path, "%s", env);
        fd = open(env, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return msg("LLMCC_PAYLOAD=%s: %s", env, strerror(errno));
    } else {
        snprintf(p->path, sizeof p->path, "/proc/self/exe");
        fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (fd < 0) fd = open_argv0(argv0, p->path, sizeof p->path);
        if (fd < 0) return msg("cannot open the executable to read its weights (/proc/self/exe: %s)", strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) return close_fd(fd, msg("%s: %s", p->path, strerror(errno)));
    uint64_t fsize = (uint64_t)st.st_size, off = 0, size = fsize;
    if (!env || !*env) {
        PayloadFooter f;
        if (fsize < sizeof f || pread(fd, &f, sizeof f, (off_t)(fsize - sizeof f)) != (ssize_t)sizeof f ||
            memcmp(f.magic, FOOTER_MAGIC, 8) != 0) {
            const char *err = find_section(fd, fsize, &f);
            if (err) return close_fd(fd, err);
        }
        if (f.version != PAYLOAD_VERSION) return close_fd(fd, bad_version("payload footer", f.version));
        if (f.payload_offset > fsize - sizeof f || f.payload_size > fsize - sizeof f - f.payload_offset)
            return close_fd(fd, DAMAGED "offset or size in the footer does not match the file)");
        off = f.payload_offset;
        size = f.payload_size;
        p->has_footer = true;
        p->checksum = f.checksum;
    }
    if (size == 0) return close_fd(fd, DAMAGED "is empty)");
    void *m;
    if (off % (uint64_t)sysconf(_SC_PAGESIZE) == 0)
        m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, (off_t)off);
    else {   /* a stripped file whose section moved off the alignment the tensors need: read into memory */
        m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        for (uint64_t o = 0; m != MAP_FAILED && o < size;) {
            ssize_t r = pread(fd, (uint8_t *)m + o, size - o < (1u << 30) ? (size_t)(size - o) : 1u << 30,
                              (off_t)(off + o));
            if (r <= 0) { munmap(m, (size_t)size); m = MAP_FAILED; errno = r ? errno : EIO; break; }
            o += (uint64_t)r;
        }
    }
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return msg("cannot map the weights (%llu bytes): %s", (unsigned long long)size, strerror(e));
    p->base = m;
    p->size = size;
    if (size >= 8 && memcmp(m, ZPAYLOAD_MAGIC, 8) == 0) {
        p->compressed = true;
        p->zbase = m;
        p->zsize = size;
        p->base = NULL;
        const char *err = unpack(p);
        if (err) { payload_close(p); return err; }
        madvise((void *)p->zbase, (size_t)p->zsize, MADV_DONTNEED);   /* decoded: its pages are only cache now */
    }
    const char *err = check_header(p);
    if (err) { payload_close(p); return err; }
    return NULL;
}

const char *payload_verify(const Payload *p, uint64_t *sum) {
    PayloadSum ps;
    payload_sum_init(&ps);
    const uint8_t *base = p->compressed ? p->zbase : p->base;
    uint64_t size = p->compressed ? p->zsize : p->size;
    madvise((void *)base, (size_t)size, MADV_SEQUENTIAL);
    const size_t chunk = 64u << 20;
    for (uint64_t o = 0; o < size; o += chunk) {
        size_t n = size - o < chunk ? (size_t)(size - o) : chunk;
        payload_sum_update(&ps, base + o, n);
        madvise((void *)(base + o), n, MADV_DONTNEED);   /* read-only private map: only drops the cache */
    }
    uint64_t h = payload_sum_final(&ps);
    if (sum) *sum = h;
    if (p->has_footer && h != p->checksum) return DAMAGED "checksum mismatch)";
    return NULL;
}

/* Demand paging maps a file mapping's pages a fault at a time (64 KiB around each): for Qwen2.5-0.5B's 1 GB
 * of bf16 weights that made its first 64-token prompt 278 ms against 236 ms prefaulted (medians of 6, the
 * 2-core VM this was measured on), the whole run no slower. One madvise maps them all in the kernel, in
 * the load time. A compressed payload was decoded into anonymous memory that is touched already. */
void payload_prefault(const Payload *p) {
#ifdef MADV_POPULATE_READ
    if (!p->compressed && p->base) (void)madvise((void *)p->base, (size_t)p->size, MADV_POPULATE_READ);
#else
    (void)p;
#endif
}

void payload_close(Payload *p) {
    if (p->base) munmap((void *)p->base, (size_t)p->size);
    if (p->zbase) munmap((void *)p->zbase, (size_t)p->zsize);
    memset(p, 0, sizeof *p);   /* nothing left pointing into the unmapped memory */
}
