/* payload_rt.c: maps the payload from /proc/self/exe (or LLMCC_PAYLOAD) and
 * checks that everything the header points at lies inside it. */
#include "payload_rt.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_msg[4400];

#define DAMAGED "the executable is truncated or damaged (payload "

uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

const char *payload_dtype_name(uint32_t dtype) {
    switch (dtype) {
    case PDT_F32: return "f32";
    case PDT_F16: return "f16";
    case PDT_BF16: return "bf16";
    case PDT_I32: return "i32";
    default: return "?";
    }
}
size_t payload_dtype_size(uint32_t dtype) {
    switch (dtype) {
    case PDT_F32: case PDT_I32: return 4;
    case PDT_F16: case PDT_BF16: return 2;
    default: return 0;
    }
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

static const char *check_header(Payload *p) {
    const uint8_t *b = p->base;
    uint64_t size = p->size;
    if (size < sizeof(PayloadHeader)) {
        snprintf(g_msg, sizeof g_msg, DAMAGED "of %llu bytes is shorter than its header)", (unsigned long long)size);
        return g_msg;
    }
    const PayloadHeader *h = (const PayloadHeader *)b;
    if (memcmp(h->magic, PAYLOAD_MAGIC, 8) != 0) return DAMAGED "header magic is wrong)";
    if (h->version != PAYLOAD_VERSION) {
        snprintf(g_msg, sizeof g_msg, "the payload is version %u, this runtime reads version %u", h->version, PAYLOAD_VERSION);
        return g_msg;
    }
    if (h->total_size != size) {
        snprintf(g_msg, sizeof g_msg, DAMAGED "is %llu bytes, its header says %llu)",
                 (unsigned long long)size, (unsigned long long)h->total_size);
        return g_msg;
    }
    if (h->table_off < sizeof(PayloadHeader) || h->table_off > size ||
        h->n_tensors > (size - h->table_off) / sizeof(PayloadTensor))
        return DAMAGED "tensor table lies outside the payload)";
    if (h->table_off % 8 != 0) return DAMAGED "tensor table is misaligned)";
    if (h->tok_off > size || h->tok_size > size - h->tok_off) return DAMAGED "tokenizer lies outside the payload)";
    if (h->data_off > size) return DAMAGED "data offset lies outside the payload)";
    const PayloadTensor *t = (const PayloadTensor *)(b + h->table_off);
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        const PayloadTensor *e = &t[i];
        if (memchr(e->name, 0, sizeof e->name) == NULL) {
            snprintf(g_msg, sizeof g_msg, DAMAGED "tensor %u has no valid name)", i);
            return g_msg;
        }
        size_t es = payload_dtype_size(e->dtype);
        if (es == 0 || e->ndim > 4) {
            snprintf(g_msg, sizeof g_msg, DAMAGED "tensor %s has dtype %u, ndim %u)", e->name, e->dtype, e->ndim);
            return g_msg;
        }
        uint64_t count = 1;
        for (uint32_t d = 0; d < e->ndim; d++) {
            if (e->shape[d] != 0 && count > UINT64_MAX / e->shape[d]) { count = UINT64_MAX; break; }
            count *= e->shape[d];
        }
        if (count > UINT64_MAX / es || count * es != e->nbytes || e->offset % PAYLOAD_ALIGN != 0 ||
            e->offset < h->data_off || e->offset > size || e->nbytes > size - e->offset) {
            snprintf(g_msg, sizeof g_msg, DAMAGED "tensor %s lies outside the payload or has a wrong size)", e->name);
            return g_msg;
        }
    }
    p->hdr = h;
    p->tensors = t;
    p->tok_size = h->tok_size;
    p->tok_blob = h->tok_size ? b + h->tok_off : NULL;
    return NULL;
}

const char *payload_open(Payload *p, const char *argv0) {
    memset(p, 0, sizeof *p);
    const char *env = getenv("LLMCC_PAYLOAD");
    int fd;
    if (env && *env) {
        snprintf(p->path, sizeof p->path, "%s", env);
        fd = open(env, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(g_msg, sizeof g_msg, "LLMCC_PAYLOAD=%s: %s", env, strerror(errno));
            return g_msg;
        }
    } else {
        snprintf(p->path, sizeof p->path, "/proc/self/exe");
        fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (fd < 0) fd = open_argv0(argv0, p->path, sizeof p->path);
        if (fd < 0) {
            snprintf(g_msg, sizeof g_msg, "cannot open the executable to read its weights (/proc/self/exe: %s)", strerror(errno));
            return g_msg;
        }
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(g_msg, sizeof g_msg, "%s: %s", p->path, strerror(errno));
        close(fd);
        return g_msg;
    }
    uint64_t fsize = (uint64_t)st.st_size, off = 0, size = fsize;
    if (!env || !*env) {
        PayloadFooter f;
        if (fsize < sizeof f || pread(fd, &f, sizeof f, (off_t)(fsize - sizeof f)) != (ssize_t)sizeof f ||
            memcmp(f.magic, FOOTER_MAGIC, 8) != 0) {
            close(fd);
            return DAMAGED "footer not found at the end of the file)";
        }
        if (f.version != PAYLOAD_VERSION) {
            close(fd);
            snprintf(g_msg, sizeof g_msg, "the payload footer is version %u, this runtime reads version %u", f.version, PAYLOAD_VERSION);
            return g_msg;
        }
        if (f.payload_offset % PAYLOAD_ALIGN != 0 || f.payload_offset > fsize - sizeof f ||
            f.payload_size != fsize - sizeof f - f.payload_offset) {
            close(fd);
            return DAMAGED "offset or size in the footer does not match the file)";
        }
        off = f.payload_offset;
        size = f.payload_size;
        p->has_footer = true;
        p->checksum = f.checksum;
    }
    if (size == 0) {
        close(fd);
        return DAMAGED "is empty)";
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, (off_t)off);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(g_msg, sizeof g_msg, "cannot map the weights (%llu bytes): %s", (unsigned long long)size, strerror(e));
        return g_msg;
    }
    p->base = m;
    p->size = size;
    const char *err = check_header(p);
    if (err) { payload_close(p); return err; }
    return NULL;
}

const char *payload_verify(const Payload *p, uint64_t *sum) {
    uint64_t h = FNV1A64_INIT;
    madvise((void *)p->base, (size_t)p->size, MADV_SEQUENTIAL);
    const size_t chunk = 64u << 20;
    for (uint64_t o = 0; o < p->size; o += chunk) {
        size_t n = p->size - o < chunk ? (size_t)(p->size - o) : chunk;
        h = fnv1a64(h, p->base + o, n);
        madvise((void *)(p->base + o), n, MADV_DONTNEED);   /* read-only private map: only drops the cache */
    }
    if (sum) *sum = h;
    if (p->has_footer && h != p->checksum) return DAMAGED "checksum mismatch)";
    return NULL;
}

void payload_close(Payload *p) {
    if (p->base) munmap((void *)p->base, (size_t)p->size);
    p->base = NULL;
    p->hdr = NULL;
    p->tensors = NULL;
    p->tok_blob = NULL;
}
