/* gguf.h: reader for GGUF checkpoints (llama.cpp's single-file format,
 * versions 2 and 3, little-endian). The file is mmapped read-only; the header,
 * every metadata key/value and every tensor info is validated on open, so a
 * bad file is a one-line user error naming the file and the key or tensor,
 * and what gguf_open accepts can be used without further checks: strings and
 * tensor bytes lie inside the mapping, shapes do not overflow, tensors are
 * aligned and do not overlap. Values stay in the mapping (little-endian,
 * unaligned); the getters below decode them. */
#ifndef LLMCC_GGUF_H
#define LLMCC_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "util.h"

/* Metadata value types: X(enum, name, id on disk, size in bytes; 0 = variable) */
#define GGUF_VALUE_TYPES(X) \
    X(GGUF_UINT8, "UINT8", 0, 1) X(GGUF_INT8, "INT8", 1, 1) X(GGUF_UINT16, "UINT16", 2, 2) \
    X(GGUF_INT16, "INT16", 3, 2) X(GGUF_UINT32, "UINT32", 4, 4) X(GGUF_INT32, "INT32", 5, 4) \
    X(GGUF_FLOAT32, "FLOAT32", 6, 4) X(GGUF_BOOL, "BOOL", 7, 1) X(GGUF_STRING, "STRING", 8, 0) \
    X(GGUF_ARRAY, "ARRAY", 9, 0) X(GGUF_UINT64, "UINT64", 10, 8) X(GGUF_INT64, "INT64", 11, 8) \
    X(GGUF_FLOAT64, "FLOAT64", 12, 8)

typedef enum {
#define GGUF_X_ENUM(e, name, id, size) e = id,
    GGUF_VALUE_TYPES(GGUF_X_ENUM)
#undef GGUF_X_ENUM
    GGUF_VALUE_TYPE_COUNT
} GgufValueType;

/* ggml tensor types: X(enum, name, id on disk, elements per block, bytes per block), as
 * gguf-py's GGML_QUANT_SIZES has them. Ids missing here (4, 5, 31-33, 36-38) were removed from ggml. */
#define GGML_TYPES(X) \
    X(GGML_TYPE_F32, "F32", 0, 1, 4) X(GGML_TYPE_F16, "F16", 1, 1, 2) \
    X(GGML_TYPE_Q4_0, "Q4_0", 2, 32, 18) X(GGML_TYPE_Q4_1, "Q4_1", 3, 32, 20) \
    X(GGML_TYPE_Q5_0, "Q5_0", 6, 32, 22) X(GGML_TYPE_Q5_1, "Q5_1", 7, 32, 24) \
    X(GGML_TYPE_Q8_0, "Q8_0", 8, 32, 34) X(GGML_TYPE_Q8_1, "Q8_1", 9, 32, 40) \
    X(GGML_TYPE_Q2_K, "Q2_K", 10, 256, 84) X(GGML_TYPE_Q3_K, "Q3_K", 11, 256, 110) \
    X(GGML_TYPE_Q4_K, "Q4_K", 12, 256, 144) X(GGML_TYPE_Q5_K, "Q5_K", 13, 256, 176) \
    X(GGML_TYPE_Q6_K, "Q6_K", 14, 256, 210) X(GGML_TYPE_Q8_K, "Q8_K", 15, 256, 292) \
    X(GGML_TYPE_IQ2_XXS, "IQ2_XXS", 16, 256, 66) X(GGML_TYPE_IQ2_XS, "IQ2_XS", 17, 256, 74) \
    X(GGML_TYPE_IQ3_XXS, "IQ3_XXS", 18, 256, 98) X(GGML_TYPE_IQ1_S, "IQ1_S", 19, 256, 50) \
    X(GGML_TYPE_IQ4_NL, "IQ4_NL", 20, 32, 18) X(GGML_TYPE_IQ3_S, "IQ3_S", 21, 256, 110) \
    X(GGML_TYPE_IQ2_S, "IQ2_S", 22, 256, 82) X(GGML_TYPE_IQ4_XS, "IQ4_XS", 23, 256, 136) \
    X(GGML_TYPE_I8, "I8", 24, 1, 1) X(GGML_TYPE_I16, "I16", 25, 1, 2) \
    X(GGML_TYPE_I32, "I32", 26, 1, 4) X(GGML_TYPE_I64, "I64", 27, 1, 8) \
    X(GGML_TYPE_F64, "F64", 28, 1, 8) X(GGML_TYPE_IQ1_M, "IQ1_M", 29, 256, 56) \
    X(GGML_TYPE_BF16, "BF16", 30, 1, 2) X(GGML_TYPE_TQ1_0, "TQ1_0", 34, 256, 54) \
    X(GGML_TYPE_TQ2_0, "TQ2_0", 35, 256, 66) X(GGML_TYPE_MXFP4, "MXFP4", 39, 32, 17) \
    X(GGML_TYPE_NVFP4, "NVFP4", 40, 64, 36) X(GGML_TYPE_Q1_0, "Q1_0", 41, 128, 18)

typedef enum {
#define GGML_X_ENUM(e, name, id, block, bytes) e = id,
    GGML_TYPES(GGML_X_ENUM)
#undef GGML_X_ENUM
    GGML_TYPE_ID_END            /* one past the largest id */
} GgmlType;

/* NULL / 0 for an id that is not a known type */
const char *ggml_type_name(GgmlType);
int ggml_type_block_size(GgmlType);    /* elements per block */
int ggml_type_block_bytes(GgmlType);   /* bytes per block */
const char *gguf_value_type_name(GgufValueType);

/* A GGUF string: length-prefixed on disk, not NUL-terminated, may hold NULs. */
typedef struct { const char *s; uint64_t len; } GgufStr;

typedef struct {
    const char *key;            /* NUL-terminated copy (keys holding a NUL are refused) */
    GgufValueType type;
    GgufValueType elem_type;    /* ARRAY: the type of its elements (never ARRAY: nested arrays are refused) */
    uint64_t count;             /* ARRAY: number of elements; else 1 */
    const uint8_t *data;        /* the value's bytes in the mapping (ARRAY: the first element) */
    GgufStr str;                /* STRING */
    GgufStr *strs;              /* ARRAY of STRING: count strings (arena), so that any one is found at once */
} GgufKV;

#define GGUF_MAX_DIMS 4

typedef struct {
    const char *name;           /* NUL-terminated copy */
    GgmlType type;
    int n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ggml order: ne[0] is the row (contiguous); unused dims are 1 */
    uint64_t offset;            /* from the start of the data section; a multiple of the alignment */
    uint64_t nbytes;
    const uint8_t *data;        /* inside the mapping; valid until gguf_close */
} GgufTensor;

/* Zero-initialise (GgufFile g = {0}) before gguf_open; gguf_close it even after
 * a user error that was caught (the fuzzers longjmp out of gguf_open). */
typedef struct {
    const char *path;
    const uint8_t *base;        /* the mapping */
    size_t size;
    uint32_t version;
    uint32_t alignment;         /* general.alignment, default 32 */
    uint64_t data_offset;       /* file offset of the data section (aligned) */
    int n_kv, n_tensors;
    GgufKV *kv;                 /* file order (arena) */
    GgufTensor *tensors;        /* file order (arena) */
    int *kv_hash, *tensor_hash; /* open addressing: index+1, 0 = empty (arena) */
    size_t kv_hash_cap, tensor_hash_cap;
} GgufFile;

/* True when path names a GGUF file: a regular file starting with the magic, or a name ending in .gguf
 * (which gguf_open then judges). */
bool gguf_is_gguf_path(const char *path);
/* Opens and validates path; dies with a user error `llmcc: PATH: KEY: ...` on any problem. */
void gguf_open(Arena *a, const char *path, GgufFile *g);
void gguf_close(GgufFile *g);

const GgufKV *gguf_find_kv(const GgufFile *g, const char *key);            /* NULL if absent */
const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name);   /* NULL if absent */

/* Typed getters: false when the key is absent, a user error when it has another type.
 * _int takes any integer type (a UINT64 above INT64_MAX is an error); _float FLOAT32 or FLOAT64. */
bool gguf_get_int(const GgufFile *g, const char *key, int64_t *out);
bool gguf_get_float(const GgufFile *g, const char *key, double *out);
bool gguf_get_bool(const GgufFile *g, const char *key, bool *out);
bool gguf_get_str(const GgufFile *g, const char *key, GgufStr *out);
/* An array whose elements have type elem (any integer type when elem is GGUF_INT64). */
bool gguf_get_array(const GgufFile *g, const char *key, GgufValueType elem, const GgufKV **out);

/* Element i (< count) of an array, or the value of a scalar (i = 0), decoded. */
int64_t gguf_kv_int(const GgufKV *kv, uint64_t i);       /* integer types and BOOL */
uint64_t gguf_kv_uint(const GgufKV *kv, uint64_t i);     /* UINT64 without the sign */
double gguf_kv_float(const GgufKV *kv, uint64_t i);      /* FLOAT32, FLOAT64 */
GgufStr gguf_kv_str(const GgufKV *kv, uint64_t i);       /* STRING */

/* Arrays print their first GGUF_PRINT_ARRAY_ELEMS elements, then "..." (a vocabulary is 50k strings). */
#define GGUF_PRINT_ARRAY_ELEMS 8
/* The text of `llmcc inspect FILE.gguf`, one item a line: version, alignment, data_offset,
 * `kv: KEY TYPE VALUE` (strings quoted, \" \\ and \xNN escaped; floats with the digits that read
 * back exactly), `tensor: NAME TYPE [ne0, ...] bytes=N offset=M`, then the totals per ggml type. */
void gguf_print(const GgufFile *g, FILE *out);
#endif
