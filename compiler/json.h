/* json.h: the compiler's JSON: runtime/json.h's reader (the one the server reads requests with), and the
 * compiler's way with what it finds: a document that is not JSON, or a string that does not decode, ends the
 * run with one line, "llmcc: PATH: what is wrong"; strings and raw text go to an arena. */
#ifndef LLMCC_JSON_H
#define LLMCC_JSON_H
#include "../runtime/json.h"
#include "util.h"

/* Parses src; on invalid JSON dies with "llmcc: PATH: invalid JSON (...)". */
void json_parse(Arena *a, Json *j, const char *path, const char *src, size_t len);
/* Reads and parses a file; dies with a user error if missing or invalid. */
void json_load_file(Arena *a, Json *j, const char *path);

bool json_get_double(const Json *j, int t, double *v);    /* false also where the number underflows */
bool json_get_int64(const Json *j, int t, int64_t *v);    /* false unless an integral number */
/* The decoded string (escapes, \uXXXX and surrogate pairs resolved, a lone surrogate U+FFFD); NULL if not a
 * string. *len (may be NULL) gets the byte length; the result may contain NUL bytes. */
char *json_get_str(Arena *a, const Json *j, int t, size_t *len);
/* Raw text of a token (not decoded), for messages. */
const char *json_raw(Arena *a, const Json *j, int t);
#endif
