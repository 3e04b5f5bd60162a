/* json.h: the one JSON reader of llmcc, the compiler's (config.json, tokenizer.json, a safetensors header) and the
 * server's (request bodies), a thin layer over jsmn. A document is tokenized once; lookups walk the token array
 * without recursion, and a document nested deeper than JSON_MAX_DEPTH is refused before jsmn sees it, so
 * nesting costs neither stack nor time. Faults are returned, not reported: the compiler's wrapper
 * (compiler/json.c) makes them its one-line user errors, the server a 400 naming the field. */
#ifndef LLMCC_RUNTIME_JSON_H
#define LLMCC_RUNTIME_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { JSON_UNDEF = 0, JSON_OBJECT = 1, JSON_ARRAY = 2, JSON_STRING = 3, JSON_PRIMITIVE = 4 } JsonType;
typedef struct { int type, start, end, size, parent; } JsonTok;   /* mirrors jsmntok_t (parent links on) */

typedef struct {
    const char *path;       /* the document's name in the compiler's messages (the reader does not use it) */
    const char *src;
    size_t len;
    JsonTok *tok;
    int ntok;
} Json;

#define JSON_MAX_DEPTH 128   /* deeper documents are refused (as serde_json does) */

typedef enum {
    JSON_OK,
    JSON_ERR_TOO_LARGE,      /* over 2 GiB: jsmn's offsets are ints */
    JSON_ERR_NUL,            /* a NUL byte (at): jsmn would stop there and take the rest for valid */
    JSON_ERR_DEEP,           /* nested deeper than JSON_MAX_DEPTH (at: the bracket) */
    JSON_ERR_END,            /* unexpected end of input */
    JSON_ERR_SYNTAX,         /* at: where */
    JSON_ERR_EMPTY,          /* no value */
    JSON_ERR_TRAILING,       /* data after the top-level value (the tokens are read: json_bad_token still applies) */
    JSON_ERR_OOM,
    JSON_ERR_ESCAPE,         /* a string's escape (at), which jsmn already refuses */
    JSON_ERR_UTF8,           /* a string that is not valid UTF-8, a lone surrogate included (json_string strict) */
} JsonError;

/* Tokenizes src[0..len) into j (j->tok malloc'd: json_free); *at gets the fault's byte offset where it has one. */
JsonError json_read(Json *j, const char *src, size_t len, size_t *at);
void json_free(Json *j);
/* The first token that JSON forbids and jsmn (even strict) lets through, or -1: a key with no value or two, a
 * child of a string or a number (a colon in an array), a literal other than true, false, null or a number */
int json_bad_token(const Json *j);

JsonType json_type(const Json *j, int t);
int json_size(const Json *j, int t);               /* children of an array, keys of an object */
int json_next(const Json *j, int t);               /* the token after t's whole subtree */
int json_find(const Json *j, int obj, const char *key);   /* value token, or -1 (also when obj is not an object) */
int json_at(const Json *j, int arr, int i);        /* i-th element of an array, or -1 */
bool json_is_null(const Json *j, int t);
bool json_is_bool(const Json *j, int t, bool *v);
bool json_str_eq(const Json *j, int t, const char *s);    /* string token equals s (raw, no escapes) */
/* Iterate an object: for (k = json_obj_first(j,o); k >= 0; k = json_obj_next(j,o,k)): key tok k, value tok k+1 */
int json_obj_first(const Json *j, int obj);
int json_obj_next(const Json *j, int obj, int key);
/* A number as JSON writes one, finite; errno is ERANGE where it underflowed (strtod's) */
bool json_number(const Json *j, int t, double *v);
/* The string token t decoded (escapes, \uXXXX and surrogate pairs resolved) into out, which has room for
 * json_string_room(j, t) bytes, NUL-terminated; *len the bytes before the NUL (the text may hold NUL bytes).
 * strict: the text must be valid UTF-8 and a surrogate must be half of a pair (JSON_ERR_UTF8), as the server
 * asks of a request; else a lone surrogate becomes U+FFFD, as the compiler reads a checkpoint's files. */
JsonError json_string(const Json *j, int t, char *out, size_t *len, bool strict, size_t *at);
size_t json_string_room(const Json *j, int t);     /* 0: t is not a string */
#endif
