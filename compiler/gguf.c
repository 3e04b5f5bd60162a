/* gguf.c: the GGUF reader of gguf.h. The layout (llama.cpp's gguf.cpp and
 * gguf-py's GGUFReader agree on it):
 *   "GGUF" u32 version, u64 tensor_count, u64 kv_count
 *   kv_count x   { string key, u32 value type, value }
 *   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset }
 *   padding to general.alignment, then the data section (tensor offsets count from its start)
 * with string = u64 length + bytes, and array = u32 element type + u64 count + elements.
 * Every read goes through take(), which refuses to step past the end of the
 * mapping, so a truncated or lying file stops with a message, never a crash.
 * At the end, gguf_print: the text of `llmcc inspect FILE.gguf`. */
#include "gguf.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Keeps counts in int (and arena arrays sane) long before any real file gets near it. */
#define GGUF_MAX_ENTRIES (1 << 24)

static const struct { const char *name; unsigned char size; } value_types[] = {
#define GGUF_X(e, name, id, size) [id] = {name, size},
    GGUF_VALUE_TYPES(GGUF_X)
#undef GGUF_X
};

static const struct { const char *name; int block, bytes; } ggml_types[GGML_TYPE_ID_END] = {
#define GGML_X(e, name, id, block, bytes) [id] = {name, block, bytes},
    GGML_TYPES(GGML_X)
#undef GGML_X
};

static bool ggml_type_known(uint32_t t) { return t < GGML_TYPE_ID_END && ggml_types[t].name; }
const char *ggml_type_name(GgmlType t) { return ggml_type_known(t) ? ggml_types[t].name : NULL; }
int ggml_type_block_size(GgmlType t) { return ggml_type_known(t) ? ggml_types[t].block : 0; }
int ggml_type_block_bytes(GgmlType t) { return ggml_type_known(t) ? ggml_types[t].bytes : 0; }
const char *gguf_value_type_name(GgufValueType t) {
    return (unsigned)t < GGUF_VALUE_TYPE_COUNT ? value_types[t].name : "?";
}

/* ---- little-endian reads from the mapping (unaligned, whatever the host's byte order) ---- */

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

typedef struct {
    const char *path;
    const uint8_t *base;
    uint64_t size, pos;
} Cursor;

/* The next n bytes, or a user error naming key and what was being read. */
static const uint8_t *take(Cursor *c, uint64_t n, const char *key, const char *what) {
    if (n > c->size - c->pos)
        die_user(c->path, key, "%s goes past the end of the file (%" PRIu64 " bytes at offset %" PRIu64
                 ", the file is %" PRIu64 " bytes)", what, n, c->pos, c->size);
    const uint8_t *p = c->base + c->pos;
    c->pos += n;
    return p;
}
static uint32_t take_u32(Cursor *c, const char *key, const char *what) {
    return (uint32_t)load_le(take(c, 4, key, what), 4);
}
static uint64_t take_u64(Cursor *c, const char *key, const char *what) { return load_le(take(c, 8, key, what), 8); }

static GgufStr take_str(Cursor *c, const char *key, const char *what) {
    uint64_t len = take_u64(c, key, what);
    return (GgufStr){ (const char *)take(c, len, key, what), len };
}

/* A key or tensor name as a C string: empty ones and ones holding a NUL could not be looked up. */
static const char *take_name(Arena *a, Cursor *c, const char *where, const char *what) {
    GgufStr s = take_str(c, where, what);
    if (s.len == 0) die_user(c->path, where, "%s is empty", what);
    const char *name = arena_strndup(a, s.s, (size_t)s.len);
    if (memchr(s.s, '\0', (size_t)s.len)) die_user(c->path, where, "%s contains a NUL byte after \"%s\"", what, name);
    return name;
}

/* ---- name -> index tables (open addressing; items start with their name, see find_slot) ---- */

_Static_assert(offsetof(GgufKV, key) == 0 && offsetof(GgufTensor, name) == 0, "find_slot reads the name first");

static size_t table_cap(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* The slot holding name, or the empty slot where it would go. */
static size_t find_slot(const int *table, size_t cap, const void *items, size_t stride, const char *name) {
    size_t mask = cap - 1, i = (size_t)fnv1a(name, strlen(name)) & mask;
    for (; table[i]; i = (i + 1) & mask) {
        const char *other = *(const char *const *)((const char *)items + (size_t)(table[i] - 1) * stride);
        if (strcmp(other, name) == 0) break;
    }
    return i;
}

static const void *table_find(const int *table, size_t cap, const void *items, size_t stride, const char *name) {
    if (!cap) return NULL;
    size_t i = find_slot(table, cap, items, stride, name);
    return table[i] ? (const char *)items + (size_t)(table[i] - 1) * stride : NULL;
}

/* The free slot for a new name; a user error when the name is already there. */
static size_t claim_slot(const Cursor *c, int *table, size_t cap, const void *items, size_t stride, const char *name,
                         const char *twice) {
    size_t i = find_slot(table, cap, items, stride, name);
    if (table[i]) die_user(c->path, name, "%s", twice);
    return i;
}

const GgufKV *gguf_find_kv(const GgufFile *g, const char *key) {
    return table_find(g->kv_hash, g->kv_hash_cap, g->kv, sizeof *g->kv, key);
}
const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name) {
    return table_find(g->tensor_hash, g->tensor_hash_cap, g->tensors, sizeof *g->tensors, name);
}

/* ---- parsing ---- */

static void check_bools(const char *path, const char *key, const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1) die_user(path, key, "BOOL value %u is neither 0 nor 1", p[i]);
}

static GgufValueType take_value_type(Cursor *c, const char *key, const char *what) {
    uint32_t t = take_u32(c, key, what);
    if (t >= GGUF_VALUE_TYPE_COUNT) die_user(c->path, key, "%s %" PRIu32 " is unknown (0 to 12 are)", what, t);
    return (GgufValueType)t;
}

static void parse_value(Arena *a, Cursor *c, GgufKV *kv) {
    const char *key = kv->key;
    kv->type = kv->elem_type = take_value_type(c, key, "value type");
    kv->count = 1;
    if (kv->type == GGUF_STRING) {
        kv->data = c->base + c->pos;
        kv->str = take_str(c, key, "STRING value");
    } else if (kv->type != GGUF_ARRAY) {
        kv->data = take(c, value_types[kv->type].size, key, "value");
        if (kv->type == GGUF_BOOL) check_bools(c->path, key, kv->data, 1);
    } else {
        kv->elem_type = take_value_type(c, key, "array element type");
        if (kv->elem_type == GGUF_ARRAY) die_user(c->path, key, "arrays of arrays are not supported");
        kv->count = take_u64(c, key, "array length");
        kv->data = c->base + c->pos;
        uint64_t left = c->size - c->pos;
        if (kv->elem_type == GGUF_STRING) {
            /* every string takes at least its 8-byte length: a count beyond that cannot be true */
            if (kv->count > left / 8)
                die_user(c->path, key, "array of %" PRIu64 " strings goes past the end of the file (%" PRIu64
                         " bytes left)", kv->count, left);
            kv->strs = ARENA_ARRAY(a, GgufStr, kv->count ? kv->count : 1);
            for (uint64_t i = 0; i < kv->count; i++) kv->strs[i] = take_str(c, key, "array string");
        } else {
            uint64_t size = value_types[kv->elem_type].size;
            if (kv->count > left / size)
                die_user(c->path, key, "array of %" PRIu64 " %s goes past the end of the file (%" PRIu64
                         " bytes left)", kv->count, value_types[kv->elem_type].name, left);
            take(c, kv->count * size, key, "array");
            if (kv->elem_type == GGUF_BOOL) check_bools(c->path, key, kv->data, kv->count);
        }
    }
}

/* A count no file of this size could hold is refused at once; a smaller one that is still too large
 * shows as an entry cut short, which says more about a truncated file. */
static void check_count(const Cursor *c, const char *what, uint64_t n) {
    if (n > c->size || n > GGUF_MAX_ENTRIES)
        die_user(c->path, what, "%" PRIu64 " entries cannot fit in the file (%" PRIu64 " bytes)", n, c->size);
}

/* How many entries of at least min_bytes each the rest of the file can hold: the arrays are sized by
 * this, not by the count. A file claiming more runs out of bytes in take() before entry number `fit`. */
static uint64_t entries_that_fit(const Cursor *c, uint64_t n, uint64_t min_bytes) {
    uint64_t fit = (c->size - c->pos) / min_bytes;
    return n < fit ? n : fit;
}

static void parse_header(Cursor *c, GgufFile *g, uint64_t *n_tensors, uint64_t *n_kv) {
    if (c->size < 4 || memcmp(c->base, GGUF_MAGIC, 4) != 0) {
        uint8_t m[4] = {0};
        memcpy(m, c->base, c->size < 4 ? (size_t)c->size : 4);
        die_user(c->path, NULL, "not a GGUF file (it starts with bytes %02x %02x %02x %02x, not \"GGUF\")",
                 m[0], m[1], m[2], m[3]);
    }
    c->pos = 4;
    g->version = take_u32(c, "version", "header");
    /* A big-endian file has the same magic and a byte-swapped version (gguf-py tells them apart this way). */
    if ((g->version & 0xffff) == 0 && g->version)
        die_user(c->path, "version", "big-endian GGUF (version %" PRIu32 " byte-swapped) is not supported: "
                 "llmcc reads little-endian files", __builtin_bswap32(g->version));
    if (g->version < 2 || g->version > 3)
        die_user(c->path, "version", "GGUF version %" PRIu32 " is not supported (2 and 3 are)", g->version);
    *n_tensors = take_u64(c, "tensor_count", "header");
    *n_kv = take_u64(c, "kv_count", "header");
    check_count(c, "tensor_count", *n_tensors);
    check_count(c, "kv_count", *n_kv);
}

static void parse_kvs(Arena *a, Cursor *c, GgufFile *g, uint64_t n) {
    uint64_t fit = entries_that_fit(c, n, 13);   /* key length, a 1-byte key, value type, a 1-byte value */
    g->kv = ARENA_ARRAY(a, GgufKV, fit ? fit : 1);
    g->kv_hash_cap = table_cap(fit);
    g->kv_hash = ARENA_ARRAY(a, int, g->kv_hash_cap);
    for (uint64_t i = 0; i < n; i++) {
        GgufKV kv = { .key = take_name(a, c, arena_printf(a, "metadata entry %" PRIu64, i), "key") };
        size_t slot = claim_slot(c, g->kv_hash, g->kv_hash_cap, g->kv, sizeof kv, kv.key, "key appears twice");
        parse_value(a, c, &kv);
        CHECK(i < fit, "entry %" PRIu64 " of %" PRIu64 " read from fewer bytes than it needs", i, fit);
        g->kv[i] = kv;
        g->kv_hash[slot] = ++g->n_kv;
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKV *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_UINT32)   /* llama.cpp and gguf-py read it as a UINT32 only */
            die_user(c->path, al->key, "must be a UINT32, not %s", value_types[al->type].name);
        g->alignment = (uint32_t)load_le(al->data, 4);
        if (g->alignment == 0 || (g->alignment & (g->alignment - 1)))
            die_user(c->path, al->key, "alignment %" PRIu32 " is not a power of two", g->alignment);
    }
}

static const char *shape_str(Arena *a, const GgufTensor *t) {
    Str b = {0};
    str_append(&b, "[", 1);
    for (int i = 0; i < t->n_dims; i++) str_printf(&b, "%s%" PRIu64, i ? ", " : "", t->ne[i]);
    str_append(&b, "]", 1);
    const char *r = arena_strdup(a, b.s);
    str_free(&b);
    return r;
}

static void parse_tensor_info(Arena *a, Cursor *c, GgufTensor *t) {
    const char *name = t->name, *path = c->path;
    uint32_t n_dims = take_u32(c, name, "n_dims");
    if (n_dims > GGUF_MAX_DIMS) die_user(path, name, "n_dims %" PRIu32 " is more than %d", n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < t->n_dims ? take_u64(c, name, "a dimension") : 1;
    uint32_t type = take_u32(c, name, "ggml type");
    t->offset = take_u64(c, name, "offset");
    if (!ggml_type_known(type)) die_user(path, name, "ggml type %" PRIu32 " is unknown", type);
    t->type = (GgmlType)type;

    /* ggml keeps ne in int64: a larger one, or a product that overflows, is no real tensor */
    uint64_t elems = 1;
    bool overflow = false;
    for (int d = 0; d < t->n_dims; d++)
        overflow |= t->ne[d] > INT64_MAX || __builtin_mul_overflow(elems, t->ne[d], &elems);
    if (overflow || elems > INT64_MAX) die_user(path, name, "shape %s is too large", shape_str(a, t));
    uint64_t block = (uint64_t)ggml_types[type].block;
    if (t->ne[0] % block)
        die_user(path, name, "rows of %" PRIu64 " elements are not a whole number of %s blocks (%" PRIu64 " each)",
                 t->ne[0], ggml_types[type].name, block);
    if (__builtin_mul_overflow(elems / block, (uint64_t)ggml_types[type].bytes, &t->nbytes))
        die_user(path, name, "shape %s of %s is too large", shape_str(a, t), ggml_types[type].name);
}

typedef struct { uint64_t begin, end; int idx; } Span;
static int span_cmp(const void *x, const void *y) {
    const Span *p = x, *q = y;
    if (p->begin != q->begin) return p->begin < q->begin ? -1 : 1;
    return p->end < q->end ? -1 : p->end > q->end;
}

/* After the data section's start is known: every tensor inside it, aligned, none overlapping. */
static void place_tensors(Arena *a, GgufFile *g) {
    uint64_t data_len = g->data_offset < g->size ? g->size - g->data_offset : 0;
    Span *spans = ARENA_ARRAY(a, Span, g->n_tensors ? g->n_tensors : 1);
    int n = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            die_user(g->path, t->name, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                     t->offset, g->alignment);
        if (t->offset > data_len || t->nbytes > data_len - t->offset)
            die_user(g->path, t->name, "bytes [%" PRIu64 ", %" PRIu64 "+%" PRIu64 ") of the data section go past the "
                     "end of the file (the data section is %" PRIu64 " bytes from offset %" PRIu64 ")",
                     t->offset, t->offset, t->nbytes, data_len, g->data_offset);
        t->data = g->base + g->data_offset + t->offset;
        if (t->nbytes) spans[n++] = (Span){ t->offset, t->offset + t->nbytes, i };
    }
    qsort(spans, (size_t)n, sizeof *spans, span_cmp);
    for (int i = 1; i < n; i++)
        if (spans[i].begin < spans[i - 1].end)
            die_user(g->path, g->tensors[spans[i].idx].name, "bytes [%" PRIu64 ", %" PRIu64 ") overlap %s [%" PRIu64
                     ", %" PRIu64 ")", spans[i].begin, spans[i].end, g->tensors[spans[i - 1].idx].name,
                     spans[i - 1].begin, spans[i - 1].end);
    /* writers put the tensors one after the other, each padded to the alignment: a wider gap means a tensor's
     * type or shape was edited to need fewer bytes than it was written with, and its bytes would be misread */
    for (int i = 0; i < n; i++) {
        uint64_t next = i + 1 < n ? spans[i + 1].begin : data_len;
        if (next - spans[i].end >= g->alignment)
            die_user(g->path, g->tensors[spans[i].idx].name, "its type and shape take %" PRIu64 " bytes, but %" PRIu64
                     " lie before the %s (a type or shape edited smaller?)", spans[i].end - spans[i].begin,
                     next - spans[i].begin, i + 1 < n ? "next tensor" : "end of the file");
    }
}

static void parse_tensors(Arena *a, Cursor *c, GgufFile *g, uint64_t n) {
    uint64_t fit = entries_that_fit(c, n, 24);   /* name length, a 1-byte name, n_dims, type, offset */
    g->tensors = ARENA_ARRAY(a, GgufTensor, fit ? fit : 1);
    g->tensor_hash_cap = table_cap(fit);
    g->tensor_hash = ARENA_ARRAY(a, int, g->tensor_hash_cap);
    for (uint64_t i = 0; i < n; i++) {
        GgufTensor t = { .name = take_name(a, c, arena_printf(a, "tensor info %" PRIu64, i), "tensor name") };
        size_t slot = claim_slot(c, g->tensor_hash, g->tensor_hash_cap, g->tensors, sizeof t, t.name,
                                 "tensor appears twice");
        parse_tensor_info(a, c, &t);
        CHECK(i < fit, "entry %" PRIu64 " of %" PRIu64 " read from fewer bytes than it needs", i, fit);
        g->tensors[i] = t;
        g->tensor_hash[slot] = ++g->n_tensors;
    }
    g->data_offset = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
    place_tensors(a, g);
}

bool gguf_is_gguf_path(const char *path) {
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".gguf") == 0) return true;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    FILE *f = fopen(path, "rb");
    char m[4];
    bool ok = f && fread(m, 1, 4, f) == 4 && memcmp(m, GGUF_MAGIC, 4) == 0;
    if (f) fclose(f);
    return ok;
}

void gguf_open(Arena *a, const char *path, GgufFile *g) {
    memset(g, 0, sizeof *g);
    g->path = path = arena_strdup(a, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die_user(path, NULL, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); die_user(path, NULL, "cannot stat: %s", strerror(e)); }
    if (!S_ISREG(st.st_mode)) { close(fd); die_user(path, NULL, "not a regular file"); }
    if (st.st_size == 0) { close(fd); die_user(path, NULL, "file is empty, not a GGUF file"); }
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int merr = errno;
    close(fd);   /* the mapping keeps the file alive */
    if (base == MAP_FAILED) die_user(path, NULL, "cannot mmap: %s", strerror(merr));
    g->base = base;
    g->size = (size_t)st.st_size;

    Cursor c = { path, g->base, g->size, 0 };
    uint64_t n_tensors, n_kv;
    parse_header(&c, g, &n_tensors, &n_kv);
    parse_kvs(a, &c, g, n_kv);
    parse_tensors(a, &c, g, n_tensors);
}

void gguf_close(GgufFile *g) {
    if (g->base) munmap((void *)g->base, g->size);
    memset(g, 0, sizeof *g);
}

/* ---- typed access ---- */

static bool is_int_type(GgufValueType t) {
    return t <= GGUF_INT32 || t == GGUF_UINT64 || t == GGUF_INT64;
}

static const char *type_desc(const GgufKV *kv) {
    static char buf[32];
    if (kv->type != GGUF_ARRAY) return value_types[kv->type].name;
    snprintf(buf, sizeof buf, "ARRAY[%s]", value_types[kv->elem_type].name);
    return buf;
}

int64_t gguf_kv_int(const GgufKV *kv, uint64_t i) {
    CHECK(i < kv->count && (is_int_type(kv->elem_type) || kv->elem_type == GGUF_BOOL), "%s", kv->key);
    int size = value_types[kv->elem_type].size;
    uint64_t v = load_le(kv->data + i * (uint64_t)size, size);
    switch (kv->elem_type) {
    case GGUF_INT8: return (int8_t)v;
    case GGUF_INT16: return (int16_t)v;
    case GGUF_INT32: return (int32_t)v;
    default: return (int64_t)v;   /* unsigned types, and INT64 (two's complement) */
    }
}

uint64_t gguf_kv_uint(const GgufKV *kv, uint64_t i) {
    CHECK(i < kv->count && kv->elem_type == GGUF_UINT64, "%s", kv->key);
    return load_le(kv->data + i * 8, 8);
}

double gguf_kv_float(const GgufKV *kv, uint64_t i) {
    CHECK(i < kv->count && (kv->elem_type == GGUF_FLOAT32 || kv->elem_type == GGUF_FLOAT64), "%s", kv->key);
    if (kv->elem_type == GGUF_FLOAT64) {
        uint64_t v = load_le(kv->data + i * 8, 8);
        double d;
        memcpy(&d, &v, 8);
        return d;
    }
    uint32_t v = (uint32_t)load_le(kv->data + i * 4, 4);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

GgufStr gguf_kv_str(const GgufKV *kv, uint64_t i) {
    CHECK(i < kv->count && kv->elem_type == GGUF_STRING, "%s", kv->key);
    return kv->type == GGUF_ARRAY ? kv->strs[i] : kv->str;
}

/* The key's entry if it is a scalar of an accepted type; a user error if it has another. */
static const GgufKV *get_scalar(const GgufFile *g, const char *key, bool (*accepts)(GgufValueType),
                                const char *expected) {
    const GgufKV *kv = gguf_find_kv(g, key);
    if (kv && (kv->type == GGUF_ARRAY || !accepts(kv->type)))
        die_user(g->path, key, "is %s, expected %s", type_desc(kv), expected);
    return kv;
}
static bool is_float_type(GgufValueType t) { return t == GGUF_FLOAT32 || t == GGUF_FLOAT64; }
static bool is_bool_type(GgufValueType t) { return t == GGUF_BOOL; }
static bool is_str_type(GgufValueType t) { return t == GGUF_STRING; }

bool gguf_get_int(const GgufFile *g, const char *key, int64_t *out) {
    const GgufKV *kv = get_scalar(g, key, is_int_type, "an integer");
    if (!kv) return false;
    if (kv->type == GGUF_UINT64 && gguf_kv_uint(kv, 0) > INT64_MAX)
        die_user(g->path, key, "%" PRIu64 " is too large", gguf_kv_uint(kv, 0));
    *out = gguf_kv_int(kv, 0);
    return true;
}

bool gguf_get_float(const GgufFile *g, const char *key, double *out) {
    const GgufKV *kv = get_scalar(g, key, is_float_type, "FLOAT32 or FLOAT64");
    if (kv) *out = gguf_kv_float(kv, 0);
    return kv != NULL;
}

bool gguf_get_bool(const GgufFile *g, const char *key, bool *out) {
    const GgufKV *kv = get_scalar(g, key, is_bool_type, "BOOL");
    if (kv) *out = kv->data[0] != 0;
    return kv != NULL;
}

bool gguf_get_str(const GgufFile *g, const char *key, GgufStr *out) {
    const GgufKV *kv = get_scalar(g, key, is_str_type, "STRING");
    if (kv) *out = kv->str;
    return kv != NULL;
}

bool gguf_get_array(const GgufFile *g, const char *key, GgufValueType elem, const GgufKV **out) {
    const GgufKV *kv = gguf_find_kv(g, key);
    if (!kv) return false;
    bool ok = kv->type == GGUF_ARRAY && (elem == GGUF_INT64 ? is_int_type(kv->elem_type) : kv->elem_type == elem);
    if (!ok)
        die_user(g->path, key, "is %s, expected ARRAY[%s]", type_desc(kv),
                 elem == GGUF_INT64 ? "an integer type" : value_types[elem].name);
    *out = kv;
    return true;
}

/* ---- the text of `llmcc inspect FILE.gguf` (gguf.h) ---- */

/* A GGUF string or name, one line: quotes and backslashes escaped when quoted, control bytes as \xNN. */
static void print_str(FILE *out, const char *s, uint64_t len, bool quoted) {
    if (quoted) fputc('"', out);
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) fprintf(out, "\\x%02x", c);
        else if (c == '\\' || (quoted && c == '"')) fprintf(out, "\\%c", c);
        else fputc(c, out);
    }
    if (quoted) fputc('"', out);
}

static void print_element(FILE *out, const GgufKV *kv, uint64_t i) {
    switch (kv->elem_type) {
    case GGUF_FLOAT32: fprintf(out, "%.9g", gguf_kv_float(kv, i)); break;   /* 9 digits read a float32 back exactly */
    case GGUF_FLOAT64: fprintf(out, "%.17g", gguf_kv_float(kv, i)); break;
    case GGUF_BOOL: fprintf(out, "%s", gguf_kv_int(kv, i) ? "true" : "false"); break;
    case GGUF_UINT64: fprintf(out, "%" PRIu64, gguf_kv_uint(kv, i)); break;
    case GGUF_STRING: { GgufStr s = gguf_kv_str(kv, i); print_str(out, s.s, s.len, true); break; }
    default: fprintf(out, "%" PRId64, gguf_kv_int(kv, i)); break;
    }
}

static void print_kv(FILE *out, const GgufKV *kv) {
    fputs("kv: ", out);
    print_str(out, kv->key, strlen(kv->key), false);
    if (kv->type != GGUF_ARRAY) {
        fprintf(out, " %s ", gguf_value_type_name(kv->type));
        print_element(out, kv, 0);
    } else {
        fprintf(out, " ARRAY[%s] %" PRIu64 " [", gguf_value_type_name(kv->elem_type), kv->count);
        for (uint64_t i = 0; i < kv->count && i < GGUF_PRINT_ARRAY_ELEMS; i++) {
            if (i) fputs(", ", out);
            print_element(out, kv, i);
        }
        fprintf(out, "%s]", kv->count > GGUF_PRINT_ARRAY_ELEMS ? ", ..." : "");
    }
    fputc('\n', out);
}

void gguf_print(const GgufFile *g, FILE *out) {
    fprintf(out, "gguf: %s\nversion: %" PRIu32 "\nalignment: %" PRIu32 "\ndata_offset: %" PRIu64 "\n", g->path,
            g->version, g->alignment, g->data_offset);
    fprintf(out, "kv_count: %d\n", g->n_kv);
    for (int i = 0; i < g->n_kv; i++) print_kv(out, &g->kv[i]);
    fprintf(out, "tensor_count: %d\n", g->n_tensors);
    uint64_t count[GGML_TYPE_ID_END] = {0}, bytes[GGML_TYPE_ID_END] = {0}, total = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const GgufTensor *t = &g->tensors[i];
        fputs("tensor: ", out);
        print_str(out, t->name, strlen(t->name), false);
        fprintf(out, " %s [", ggml_type_name(t->type));
        for (int d = 0; d < t->n_dims; d++) fprintf(out, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
        fprintf(out, "] bytes=%" PRIu64 " offset=%" PRIu64 "\n", t->nbytes, t->offset);
        count[t->type]++;
        bytes[t->type] += t->nbytes;
        total += t->nbytes;
    }
    for (int ty = 0; ty < GGML_TYPE_ID_END; ty++)
        if (count[ty])
            fprintf(out, "type: %s tensors=%" PRIu64 " bytes=%" PRIu64 "\n", ggml_type_name(ty), count[ty], bytes[ty]);
    fprintf(out, "tensor_bytes: %" PRIu64 "\n", total);
}
