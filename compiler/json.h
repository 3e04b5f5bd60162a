/* json.h: a thin layer over jsmn (the only JSON parser in llmcc). Parses a
 * whole document into tokens once; lookups walk the token array without
 * recursion, and documents nested deeper than JSON_MAX_DEPTH are refused
 * before jsmn sees them, so nesting costs neither stack nor time. */
#ifndef LLMCC_JSON_H
#define LLMCC_JSON_H
#include "util.h"

typedef enum { JSON_UNDEF = 0, JSON_OBJECT = 1, JSON_ARRAY = 2, JSON_STRING = 3, JSON_PRIMITIVE = 4 } JsonType;
typedef struct { int type, start, end, size, parent; } JsonTok;   /* mirrors jsmntok_t (parent links on) */

typedef struct {
    const char *path;       /* for error messages */
    const char *src;
    size_t len;
    JsonTok *tok;
    int ntok;
} Json;

#define JSON_MAX_DEPTH 128   /* deeper documents are refused (as serde_json does) */

/* Parses src; on invalid JSON dies with "llmcc: PATH: invalid JSON (...)". */
void json_parse(Arena *a, Json *j, const char *path, const char *src, size_t len);
/* Reads and parses a file; dies with a user error if missing or invalid. */
void json_load_file(Arena *a, Json *j, const char *path);

JsonType json_type(const Json *j, int t);
int json_size(const Json *j, int t);               /* children of an array, keys of an object */
int json_next(const Json *j, int t);               /* the token after t's whole subtree */
int json_find(const Json *j, int obj, const char *key);   /* value token, or -1 (also when obj is not an object) */
int json_at(const Json *j, int arr, int i);        /* i-th element of an array, or -1 */
bool json_is_null(const Json *j, int t);
bool json_is_bool(const Json *j, int t, bool *v);
bool json_get_double(const Json *j, int t, double *v);
bool json_get_int64(const Json *j, int t, int64_t *v);    /* false unless an integral number */
/* The decoded string (escapes, \uXXXX and surrogate pairs resolved); NULL if not a string.
 * *len (may be NULL) gets the byte length; the result may contain NUL bytes. */
char *json_get_str(Arena *a, const Json *j, int t, size_t *len);
bool json_str_eq(const Json *j, int t, const char *s);    /* string token equals s (raw, no escapes) */
/* Iterate an object: for (k = json_obj_first(j,o); k >= 0; k = json_obj_next(j,o,k)): key tok k, value tok k+1 */
int json_obj_first(const Json *j, int obj);
int json_obj_next(const Json *j, int obj, int key);
/* Raw text of a token (not decoded), for messages. */
const char *json_raw(Arena *a, const Json *j, int t);
#endif
