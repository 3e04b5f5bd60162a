/* json.c: see json.h. */
#include "json.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void json_parse(Arena *a, Json *j, const char *path, const char *src, size_t len) {
    size_t at;
    JsonError e = json_read(j, src, len, &at);
    j->path = path;
    switch (e) {
    case JSON_OK: break;
    case JSON_ERR_TOO_LARGE: die_user(path, NULL, "JSON file too large (%zu bytes)", len);
    case JSON_ERR_NUL: die_user(path, NULL, "invalid JSON (NUL byte at offset %zu)", at);
    case JSON_ERR_DEEP:
        die_user(path, NULL, "JSON nested more than %d levels deep (at byte %zu)", JSON_MAX_DEPTH, at);
    case JSON_ERR_SYNTAX: die_user(path, NULL, "invalid JSON (syntax error at byte %zu)", at);
    case JSON_ERR_EMPTY: die_user(path, NULL, "invalid JSON (empty document)");
    case JSON_ERR_TRAILING: die_user(path, NULL, "invalid JSON (trailing data after the top-level value)");
    case JSON_ERR_OOM: die_user(path, NULL, "out of memory");
    default: die_user(path, NULL, "invalid JSON (unexpected end of input)");
    }
    int bad = json_bad_token(j);
    if (bad >= 0) die_user(path, NULL, "invalid JSON (syntax error at byte %d)", j->tok[bad].start);
    /* the tokens live as long as the arena, as everything the compiler reads */
    JsonTok *tok = ARENA_ARRAY(a, JsonTok, j->ntok);
    memcpy(tok, j->tok, (size_t)j->ntok * sizeof *tok);
    int n = j->ntok;
    json_free(j);
    j->tok = tok;
    j->ntok = n;
}

void json_load_file(Arena *a, Json *j, const char *path) {
    size_t len;
    char *src = read_file(path, &len);
    if (!src) die_user(path, NULL, "cannot read: %s", strerror(errno));
    char *copy = arena_strndup(a, src, len);
    free(src);
    json_parse(a, j, path, copy, len);
}

bool json_get_double(const Json *j, int t, double *v) {
    double d;
    if (!json_number(j, t, &d) || errno == ERANGE) return false;
    *v = d;
    return true;
}
bool json_get_int64(const Json *j, int t, int64_t *v) {
    double d;
    if (!json_get_double(j, t, &d)) return false;
    if (d != floor(d) || d < -9.0e15 || d > 9.0e15) return false;
    *v = (int64_t)d;
    return true;
}

char *json_get_str(Arena *a, const Json *j, int t, size_t *len) {
    size_t room = json_string_room(j, t), n, at;
    if (!room) return NULL;
    char *out = arena_alloc(a, room);
    if (json_string(j, t, out, &n, false, &at) != JSON_OK) die_user(j->path, NULL, "invalid escape at byte %zu", at);
    if (len) *len = n;
    return out;
}

const char *json_raw(Arena *a, const Json *j, int t) {
    if (t < 0 || t >= j->ntok) return "(missing)";
    int n = j->tok[t].end - j->tok[t].start;
    /* jsmn's string tokens exclude the quotes: put them back, so that "64" does not read as 64 */
    const char *q = j->tok[t].type == JSON_STRING ? "\"" : "";
    if (n > 60) return arena_printf(a, "%s%.60s...", q, j->src + j->tok[t].start);
    return arena_printf(a, "%s%.*s%s", q, n, j->src + j->tok[t].start, q);
}
