/* safetensors.h: header-only reader for Hugging Face .safetensors checkpoints
 * (single file, or shards listed by model.safetensors.index.json). Files are
 * mmapped read-only, so a 15 GB model costs address space, not memory; every
 * header field is validated and a bad one is a one-line user error.
 * Define SAFETENSORS_IMPLEMENTATION in exactly one .c file (safetensors.c). */
#ifndef LLMCC_SAFETENSORS_H
#define LLMCC_SAFETENSORS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "util.h"
#include "dtypes.h"

/* X(enum, name in the header, element size in bytes) */
#define ST_DTYPES(X) \
    X(ST_F32, "F32", 4) X(ST_F16, "F16", 2) X(ST_BF16, "BF16", 2) X(ST_I32, "I32", 4) \
    X(ST_I64, "I64", 8) X(ST_F64, "F64", 8) X(ST_I8, "I8", 1) X(ST_U8, "U8", 1) \
    X(ST_BOOL, "BOOL", 1) X(ST_I16, "I16", 2) X(ST_F8_E4M3, "F8_E4M3", 1) X(ST_F8_E5M2, "F8_E5M2", 1) \
    X(ST_U16, "U16", 2) X(ST_U32, "U32", 4) X(ST_U64, "U64", 8)

typedef enum {
#define ST_X_ENUM(e, n, s) e,
    ST_DTYPES(ST_X_ENUM)
#undef ST_X_ENUM
    ST_DTYPE_COUNT,
    /* GGUF's block types (runtime/dtypes.h's BLOCK_DTYPES: ST_Q8_0, ...): never in a safetensors file (the parser
     * knows only the names above), the dtype of a GGUF file's tensors (gguf_model.c) */
#define ST_BLOCK_ENUM(id, name, bytes, block, ggml) ST_##id,
    BLOCK_DTYPES(ST_BLOCK_ENUM)
#undef ST_BLOCK_ENUM
    ST_BLOCK_END
} StDtype;
/* a block type's StDtype, and whether d is one */
#define ST_FIRST_BLOCK (ST_DTYPE_COUNT + 1)
static inline bool st_is_block(StDtype d) { return d >= ST_FIRST_BLOCK && d < ST_BLOCK_END; }

const char *st_dtype_name(StDtype);
size_t st_dtype_size(StDtype);

#define ST_MAX_DIMS 8

typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const uint8_t *data;        /* inside the mmap; valid until st_close */
    size_t nbytes;
    const char *file;           /* path of the .safetensors file holding it */
} StTensor;

typedef struct { void *base; size_t size; const char *path; } StFile;

/* Zero-initialise before the first st_open_*: StModel m = {0}. Tensors are
 * in file order, files in open order. Pointers into t[] move when another
 * file is added; look tensors up again after st_open_file. */
typedef struct {
    int n, cap;
    StTensor *t;                /* malloc'd */
    int nfiles, capfiles;
    StFile *files;              /* malloc'd; mmaps to unmap */
    int *hash;                  /* open addressing: index+1 into t, 0 = empty */
    size_t hash_cap;            /* power of two */
    const char *index_path;     /* model.safetensors.index.json when sharded, else NULL */
} StModel;

/* Opens DIR/model.safetensors, or the shards named by
 * DIR/model.safetensors.index.json (weight_map), or else the single
 * *.safetensors file in DIR. Dies with a user error naming the file (and
 * tensor / key) on any problem, including when there are no weights. */
void st_open_dir(Arena *a, const char *dir, StModel *m);
/* Adds one file's tensors (duplicates of names already in m are errors). */
void st_open_file(Arena *a, const char *path, StModel *m);
/* Adds one tensor whose bytes another reader mapped (compiler/gguf_model.c: a GGUF file's tensors under the names
 * the graph builder uses). m does not own that mapping: st_close leaves it alone. t->name and t->file must outlive
 * m; a name already in m is a user error naming t->file. */
void st_add_tensor(StModel *m, const StTensor *t);
/* True when st_open_dir would find weight files to open (it may still fail on them). */
bool st_dir_has_weights(const char *dir);
const StTensor *st_find(const StModel *m, const char *name);   /* NULL if absent */
/* The file a message about an absent tensor should name: the index when
 * sharded, else the one .safetensors file (NULL when nothing is open). */
const char *st_where(const StModel *m);
void st_close(StModel *m);

#ifdef SAFETENSORS_IMPLEMENTATION
#include "json.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Real headers are a few hundred KB even for 100B-parameter models. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

static const struct { const char *name; unsigned char size; } st_dtypes[] = {
#define ST_X(e, n, s) {n, s},
    ST_DTYPES(ST_X)
#undef ST_X
};

const char *st_dtype_name(StDtype d) {
#define ST_BLOCK_NAME(id, name, bytes, block, ggml) #id,
    static const char *const blocks[] = {BLOCK_DTYPES(ST_BLOCK_NAME)};
#undef ST_BLOCK_NAME
    if (st_is_block(d)) return blocks[d - ST_FIRST_BLOCK];
    return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].name : "?";
}
size_t st_dtype_size(StDtype d) { return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].size : 0; }

static void st_hash_insert(StModel *m, int idx) {
    size_t mask = m->hash_cap - 1, i = (size_t)fnv1a(m->t[idx].name, strlen(m->t[idx].name)) & mask;
    while (m->hash[i]) i = (i + 1) & mask;
    m->hash[i] = idx + 1;
}

static void st_hash_grow(StModel *m, size_t need) {
    if (need * 2 <= m->hash_cap) return;
    size_t cap = m->hash_cap ? m->hash_cap : 64;
    while (cap < need * 2) cap *= 2;
    free(m->hash);
    m->hash = xcalloc(cap, sizeof(int));
    m->hash_cap = cap;
    for (int i = 0; i < m->n; i++) st_hash_insert(m, i);
}

const StTensor *st_find(const StModel *m, const char *name) {
    if (!m->hash_cap) return NULL;
    size_t mask = m->hash_cap - 1, i = (size_t)fnv1a(name, strlen(name)) & mask;
    for (; m->hash[i]; i = (i + 1) & mask)
        if (strcmp(m->t[m->hash[i] - 1].name, name) == 0) return &m->t[m->hash[i] - 1];
    return NULL;
}

const char *st_where(const StModel *m) {
    if (m->index_path) return m->index_path;
    return m->nfiles ? m->files[0].path : NULL;
}

static const char *st_shape_str(Arena *a, const int64_t *shape, int ndim) {
    Str b = {0};
    str_append(&b, "[", 1);
    for (int i = 0; i < ndim; i++) str_printf(&b, "%s%" PRId64, i ? ", " : "", shape[i]);
    str_append(&b, "]", 1);
    const char *r = arena_strdup(a, b.s);
    str_free(&b);
    return r;
}

typedef struct { uint64_t begin, end; int idx; } StSpan;
static int st_span_cmp(const void *x, const void *y) {
    const StSpan *p = x, *q = y;
    if (p->begin != q->begin) return p->begin < q->begin ? -1 : 1;
    return p->end < q->end ? -1 : p->end > q->end;
}

/* Parses one "name": {...} entry into *t (data not yet set). */
static void st_parse_entry(Arena *a, const Json *j, int v, const char *path, const char *name,
                           uint64_t data_len, StTensor *t, uint64_t *begin_out) {
    if (json_type(j, v) != JSON_OBJECT)
        die_user(path, name, "entry is not an object (got %s)", json_raw(a, j, v));
    int dt = json_find(j, v, "dtype"), sh = json_find(j, v, "shape"), of = json_find(j, v, "data_offsets");
    if (dt < 0) die_user(path, name, "missing \"dtype\"");
    if (sh < 0) die_user(path, name, "missing \"shape\"");
    if (of < 0) die_user(path, name, "missing \"data_offsets\"");

    const char *ds = json_get_str(a, j, dt, NULL);
    if (!ds) die_user(path, name, "dtype must be a string, got %s", json_raw(a, j, dt));
    int d = -1;
    for (int i = 0; i < ST_DTYPE_COUNT; i++) if (strcmp(ds, st_dtypes[i].name) == 0) d = i;
    if (d < 0) {
        Str b = {0};
        for (int i = 0; i < ST_DTYPE_COUNT; i++) str_printf(&b, "%s%s", i ? ", " : "", st_dtypes[i].name);
        const char *known = arena_strdup(a, b.s);
        str_free(&b);
        die_user(path, name, "dtype \"%s\" is not supported (known: %s)", ds, known);
    }
    t->dtype = (StDtype)d;

    if (json_type(j, sh) != JSON_ARRAY) die_user(path, name, "shape must be an array, got %s", json_raw(a, j, sh));
    int nd = json_size(j, sh);
    if (nd > ST_MAX_DIMS)
        die_user(path, name, "shape %s has %d dimensions (at most %d supported)", json_raw(a, j, sh), nd, ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t elems = 1;
    bool overflow = false;
    for (int i = 0, e = sh + 1; i < nd; i++, e = json_next(j, e)) {
        int64_t x;
        if (!json_get_int64(j, e, &x) || x < 0)
            die_user(path, name, "shape %s: entries must be non-negative integers", json_raw(a, j, sh));
        t->shape[i] = x;
        if (__builtin_mul_overflow(elems, (uint64_t)x, &elems)) overflow = true;
    }
    uint64_t nbytes;
    if (overflow || __builtin_mul_overflow(elems, (uint64_t)st_dtypes[d].size, &nbytes))
        die_user(path, name, "shape %s is too large", st_shape_str(a, t->shape, nd));

    if (json_type(j, of) != JSON_ARRAY || json_size(j, of) != 2)
        die_user(path, name, "data_offsets must be an array [begin, end], got %s", json_raw(a, j, of));
    int64_t b, e;
    if (!json_get_int64(j, of + 1, &b) || !json_get_int64(j, json_next(j, of + 1), &e) || b < 0 || e < 0)
        die_user(path, name, "data_offsets %s must be non-negative integers", json_raw(a, j, of));
    if (b > e) die_user(path, name, "data_offsets [%" PRId64 ", %" PRId64 "] are reversed", b, e);
    if ((uint64_t)e > data_len)
        die_user(path, name, "data_offsets [%" PRId64 ", %" PRId64 "] go past the end of the file "
                 "(the data section is %" PRIu64 " bytes)", b, e, data_len);
    if ((uint64_t)(e - b) != nbytes)
        die_user(path, name, "data_offsets [%" PRId64 ", %" PRId64 "] do not match shape %s x %s (%" PRIu64 " bytes)",
                 b, e, st_shape_str(a, t->shape, nd), st_dtypes[d].name, nbytes);
    t->nbytes = (size_t)nbytes;
    *begin_out = (uint64_t)b;
}

void st_open_file(Arena *a, const char *path, StModel *m) {
    path = arena_strdup(a, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die_user(path, NULL, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); die_user(path, NULL, "cannot stat: %s", strerror(e)); }
    if (!S_ISREG(st.st_mode)) { close(fd); die_user(path, NULL, "not a regular file"); }
    uint64_t fsize = (uint64_t)st.st_size;
    if (fsize < 8) {
        close(fd); die_user(path, NULL, "file is %" PRIu64 " bytes, too short for a safetensors header", fsize);
    }
    void *base = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    int merr = errno;
    close(fd);   /* the mapping keeps the file alive */
    if (base == MAP_FAILED) die_user(path, NULL, "cannot mmap: %s", strerror(merr));
    if (m->nfiles == m->capfiles) {
        m->capfiles = m->capfiles ? m->capfiles * 2 : 8;
        m->files = xrealloc(m->files, sizeof(StFile) * (size_t)m->capfiles);
    }
    m->files[m->nfiles++] = (StFile){ base, (size_t)fsize, path };

    const uint8_t *p = base;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];   /* little-endian regardless of host */
    if (hlen > ST_MAX_HEADER)
        die_user(path, NULL, "header length %" PRIu64 " is absurd (more than 100 MB); not a safetensors file?", hlen);
    if (hlen > fsize - 8)
        die_user(path, NULL, "header length %" PRIu64 " goes past the end of the file (%" PRIu64 " bytes)", hlen,
                 fsize);
    const char *hdr = (const char *)p + 8;
    uint64_t data_len = fsize - 8 - hlen;
    const uint8_t *data = p + 8 + hlen;
    /* Writers pad the header to 8 bytes with spaces; some use NULs, which jsmn would stop at anyway. */
    size_t n = (size_t)hlen;
    while (n && (hdr[n - 1] == ' ' || hdr[n - 1] == '\0')) n--;
    if (memchr(hdr, '\0', n)) die_user(path, NULL, "invalid JSON in the header (NUL byte)");

    Json j;
    json_parse(a, &j, path, hdr, n);
    if (json_type(&j, 0) != JSON_OBJECT) die_user(path, NULL, "header is not a JSON object");

    int count = json_size(&j, 0);
    if (m->n + count > m->cap) {
        while (m->cap < m->n + count) m->cap = m->cap ? m->cap * 2 : 256;
        m->t = xrealloc(m->t, sizeof(StTensor) * (size_t)m->cap);
    }
    st_hash_grow(m, (size_t)(m->n + count));
    StSpan *spans = ARENA_ARRAY(a, StSpan, count ? count : 1);   /* arena: a user error mid-loop leaks nothing */
    int nspans = 0;
    for (int k = json_obj_first(&j, 0); k >= 0; k = json_obj_next(&j, 0, k)) {
        size_t nl;
        char *name = json_get_str(a, &j, k, &nl);
        if (strcmp(name, "__metadata__") == 0) {
            if (json_type(&j, k + 1) != JSON_OBJECT && !json_is_null(&j, k + 1))
                die_user(path, "__metadata__", "must be an object, got %s", json_raw(a, &j, k + 1));
            continue;
        }
        if (nl == 0) die_user(path, NULL, "a tensor has an empty name");
        if (nl != strlen(name)) die_user(path, json_raw(a, &j, k), "tensor name contains a NUL character");
        const StTensor *dup = st_find(m, name);
        if (dup) {
            if (strcmp(dup->file, path) == 0) die_user(path, name, "tensor appears twice in the header");
            die_user(path, name, "tensor is also in %s", dup->file);
        }
        StTensor *t = &m->t[m->n];
        memset(t, 0, sizeof *t);
        t->name = name;
        t->file = path;
        uint64_t begin;
        st_parse_entry(a, &j, k + 1, path, name, data_len, t, &begin);
        t->data = data + begin;
        if (t->nbytes) spans[nspans++] = (StSpan){ begin, begin + t->nbytes, m->n };
        st_hash_insert(m, m->n);
        m->n++;
    }
    /* Empty tensors take no bytes and may share an offset with anything. */
    qsort(spans, (size_t)nspans, sizeof *spans, st_span_cmp);
    for (int i = 1; i < nspans; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            const StTensor *x = &m->t[spans[i - 1].idx], *y = &m->t[spans[i].idx];
            uint64_t xb = spans[i - 1].begin, xe = spans[i - 1].end, yb = spans[i].begin, ye = spans[i].end;
            die_user(path, y->name, "data_offsets [%" PRIu64 ", %" PRIu64 "] overlap %s [%" PRIu64 ", %" PRIu64 "]",
                     yb, ye, x->name, xb, xe);
        }
    }
}

void st_add_tensor(StModel *m, const StTensor *t) {
    if (st_find(m, t->name)) die_user(t->file, t->name, "tensor appears twice");
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 256;
        m->t = xrealloc(m->t, sizeof(StTensor) * (size_t)m->cap);
    }
    st_hash_grow(m, (size_t)m->n + 1);
    m->t[m->n] = *t;
    st_hash_insert(m, m->n);
    m->n++;
}

static bool st_has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* The lone *.safetensors in dir: *count gets how many there are; returns the first (sorted) name. */
static char *st_scan_dir(const char *dir, int *count) {
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *best = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !st_has_suffix(e->d_name, ".safetensors")) continue;
        size_t pl = strlen(dir) + strlen(e->d_name) + 2;
        char *full = xmalloc(pl);
        snprintf(full, pl, "%s/%s", dir, e->d_name);
        bool ok = file_exists(full);   /* stat follows the symlinks of HF cache snapshots */
        free(full);
        if (!ok) continue;
        (*count)++;
        if (!best || strcmp(e->d_name, best) < 0) {
            free(best); best = xmalloc(strlen(e->d_name) + 1); strcpy(best, e->d_name);
        }
    }
    closedir(d);
    return best;
}

bool st_dir_has_weights(const char *dir) {
    Arena a = {0};
    bool r = file_exists(path_join(&a, dir, "model.safetensors")) ||
             file_exists(path_join(&a, dir, "model.safetensors.index.json"));
    arena_free(&a);
    if (r) return true;
    int n;
    free(st_scan_dir(dir, &n));
    return n > 0;
}

static void st_open_index(Arena *a, const char *dir, const char *ipath, StModel *m) {
    Json j;
    json_load_file(a, &j, ipath);
    if (json_type(&j, 0) != JSON_OBJECT) die_user(ipath, NULL, "not a JSON object");
    int wm = json_find(&j, 0, "weight_map");
    if (wm < 0) die_user(ipath, "weight_map", "missing");
    if (json_type(&j, wm) != JSON_OBJECT)
        die_user(ipath, "weight_map", "must be an object, got %s", json_raw(a, &j, wm));
    if (json_size(&j, wm) == 0) die_user(ipath, "weight_map", "is empty");
    /* Open each shard once, in order of first mention. */
    int nshards = 0;
    const char **shards = ARENA_ARRAY(a, const char *, json_size(&j, wm));
    for (int k = json_obj_first(&j, wm); k >= 0; k = json_obj_next(&j, wm, k)) {
        const char *tn = json_get_str(a, &j, k, NULL);
        size_t sl;
        const char *sh = json_get_str(a, &j, k + 1, &sl);
        const char *key = arena_printf(a, "weight_map.%s", tn);
        if (!sh) die_user(ipath, key, "must be a shard file name, got %s", json_raw(a, &j, k + 1));
        if (sl == 0 || sl != strlen(sh) || strchr(sh, '/') || strcmp(sh, "..") == 0 || strcmp(sh, ".") == 0)
            die_user(ipath, key, "\"%s\" is not a file name in the model directory", sh);
        bool seen = false;
        for (int i = 0; i < nshards && !seen; i++) seen = strcmp(shards[i], sh) == 0;
        if (seen) continue;
        const char *sp = path_join(a, dir, sh);
        if (!file_exists(sp)) die_user(ipath, key, "shard \"%s\" not found (%s)", sh, sp);
        shards[nshards++] = sh;
    }
    m->index_path = ipath;
    for (int i = 0; i < nshards; i++) st_open_file(a, path_join(a, dir, shards[i]), m);
    for (int k = json_obj_first(&j, wm); k >= 0; k = json_obj_next(&j, wm, k)) {
        const char *tn = json_get_str(a, &j, k, NULL);
        const char *sp = path_join(a, dir, json_get_str(a, &j, k + 1, NULL));
        const StTensor *t = st_find(m, tn);
        const char *key = arena_printf(a, "weight_map.%s", tn);
        if (!t) die_user(ipath, key, "tensor is not in %s", sp);
        if (strcmp(t->file, sp) != 0) die_user(ipath, key, "tensor is mapped to %s but found in %s", sp, t->file);
    }
}

void st_open_dir(Arena *a, const char *dir, StModel *m) {
    if (!dir_exists(dir)) die_user(dir, NULL, "not a directory");
    const char *single = path_join(a, dir, "model.safetensors");
    if (file_exists(single)) { st_open_file(a, single, m); return; }
    const char *index = path_join(a, dir, "model.safetensors.index.json");
    if (file_exists(index)) { st_open_index(a, dir, index, m); return; }
    int n;
    char *one = st_scan_dir(dir, &n);
    if (n != 1) free(one);
    if (n == 0) die_user(dir, NULL, "no weights (model.safetensors, model.safetensors.index.json or one "
                         "*.safetensors file)");
    if (n > 1) die_user(dir, NULL, "%d *.safetensors files but no model.safetensors.index.json saying how they "
                        "fit together", n);
    const char *p = path_join(a, dir, one);
    free(one);
    st_open_file(a, p, m);
}

void st_close(StModel *m) {
    for (int i = 0; i < m->nfiles; i++) munmap(m->files[i].base, m->files[i].size);
    free(m->files);
    free(m->t);
    free(m->hash);
    memset(m, 0, sizeof *m);
}
#endif /* SAFETENSORS_IMPLEMENTATION */
#endif
