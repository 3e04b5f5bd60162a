/* util.c: arena, error reporting, string buffer, file helpers (see util.h). */
#include "util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct ArenaBlock { ArenaBlock *next; size_t cap, used; _Alignas(16) unsigned char data[]; };

void *arena_alloc(Arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->used + n > a->head->cap) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        ArenaBlock *b = xmalloc(sizeof(ArenaBlock) + cap);
        b->next = a->head; b->cap = cap; b->used = 0;
        a->head = b;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}
char *arena_strndup(Arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n); p[n] = 0;
    return p;
}
char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }
char *arena_printf(Arena *a, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt); va_copy(ap2, ap);
    char c;
    int n = vsnprintf(&c, 1, fmt, ap);   /* not NULL: gcc's -Wformat-truncation misfires on it under sanitizers */
    va_end(ap);
    char *p = arena_alloc(a, (size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}
void arena_grow(Arena *a, void **arr, int n, int *cap, size_t elem) {
    if (n < *cap) return;
    int ncap = *cap ? *cap * 2 : 256;
    void *na = arena_alloc(a, elem * (size_t)ncap);
    if (n) memcpy(na, *arr, elem * (size_t)n);
    *arr = na; *cap = ncap;
}
void arena_free(Arena *a) {
    for (ArenaBlock *b = a->head, *n; b; b = n) { n = b->next; free(b); }
    a->head = NULL;
}

void (*die_user_hook)(const char *line);

/* Appends at most max bytes of s to the message, control characters escaped:
 * a tensor name or JSON key holding "\n" must not break the one-line
 * contract, and a 10 kB name must not push the explanation out. */
static void msg_put(char *buf, size_t cap, size_t *n, const char *s, size_t max) {
    size_t lim = *n + max < cap - 8 ? *n + max : cap - 8;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain = c >= 0x20 && c != 0x7f;
        if (*n + (plain ? 1 : 4) > lim) break;
        if (plain) buf[(*n)++] = (char)c;
        else *n += (size_t)snprintf(buf + *n, cap - *n, "\\x%02x", c);
    }
    if (*s) { memcpy(buf + *n, "...", 3); *n += 3; }
    buf[*n] = 0;
}

_Noreturn void die_user(const char *file, const char *key, const char *fmt, ...) {
    /* fixed buffers: die_user is also what xmalloc calls when memory runs out */
    static char body[2048], line[4096];
    va_list ap; va_start(ap, fmt); vsnprintf(body, sizeof body, fmt, ap); va_end(ap);
    size_t n = 0;
    msg_put(line, sizeof line, &n, "llmcc: ", 8);
    if (file) { msg_put(line, sizeof line, &n, file, 1000); msg_put(line, sizeof line, &n, ": ", 2); }
    if (key) { msg_put(line, sizeof line, &n, key, 400); msg_put(line, sizeof line, &n, ": ", 2); }
    msg_put(line, sizeof line, &n, body, sizeof line);
    if (die_user_hook) die_user_hook(line);
    fflush(stdout);
    fputs(line, stderr);
    fputc('\n', stderr);
    exit(1);
}
_Noreturn void die_internal(const char *srcfile, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "llmcc: internal error at %s:%d: ", srcfile, line);
    va_list ap; va_start(ap, fmt); vfprintf(stderr, fmt, ap); va_end(ap);
    fputc('\n', stderr);
    if (die_user_hook) abort();   /* under a fuzzer: a failed CHECK is a finding, not an exit */
    exit(70);
}

static void *need(void *p, const char *msg, size_t n) { if (!p) die_user(NULL, NULL, msg, n); return p; }
void *xmalloc(size_t n) { return need(malloc(n ? n : 1), "out of memory (%zu bytes)", n); }
void *xcalloc(size_t n, size_t m) { return need(calloc(n ? n : 1, m ? m : 1), "out of memory", 0); }
void *xrealloc(void *p, size_t n) { return need(realloc(p, n ? n : 1), "out of memory (%zu bytes)", n); }

/* room for n more bytes and the NUL */
static void str_reserve(Str *b, size_t n) {
    if (b->len + n + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    b->s = xrealloc(b->s, cap); b->cap = cap;
}
void str_append(Str *b, const char *s, size_t n) {
    str_reserve(b, n);
    memcpy(b->s + b->len, s, n); b->len += n; b->s[b->len] = 0;
}
void str_vprintf(Str *b, const char *fmt, va_list ap) {
    va_list ap2; va_copy(ap2, ap);
    char c;
    int n = vsnprintf(&c, 1, fmt, ap);
    str_reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}
void str_printf(Str *b, const char *fmt, ...) { va_list ap; va_start(ap, fmt); str_vprintf(b, fmt, ap); va_end(ap); }
void str_free(Str *b) { free(b->s); b->s = NULL; b->len = b->cap = 0; }

char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) { cap *= 2; buf = xrealloc(buf, cap); }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); errno = EIO; return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
bool file_exists(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISREG(st.st_mode); }
bool dir_exists(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISDIR(st.st_mode); }
void write_file_atomic(const char *path, const void *data, size_t len) {
    size_t pl = strlen(path);
    char *tmp = xmalloc(pl + 8);
    memcpy(tmp, path, pl); memcpy(tmp + pl, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) die_user(path, NULL, "cannot write: %s", strerror(errno));
    if (fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        unlink(tmp); die_user(path, NULL, "write failed: %s", strerror(errno));
    }
    if (rename(tmp, path) != 0) { unlink(tmp); die_user(path, NULL, "cannot rename into place: %s", strerror(errno)); }
    free(tmp);
}
char *path_join(Arena *a, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    if (dl && dir[dl - 1] == '/') return arena_printf(a, "%s%s", dir, name);
    return arena_printf(a, "%s/%s", dir, name);
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}
