/* json.c: jsmn wrapper (see json.h). The only file that includes jsmn.h's
 * implementation. */
#define JSMN_STRICT
#define JSMN_PARENT_LINKS
#define JSMN_STATIC
#include <jsmn.h>
#include "json.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(JsonTok) == sizeof(jsmntok_t), "JsonTok mirrors jsmntok_t");
_Static_assert(JSON_STRING == (int)JSMN_STRING && JSON_PRIMITIVE == (int)JSMN_PRIMITIVE &&
               JSON_ARRAY == (int)JSMN_ARRAY, "types match");

/* JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool number_ok(const char *s, const char *e) {
    if (s < e && *s == '-') s++;
    if (s >= e) return false;
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9') while (s < e && *s >= '0' && *s <= '9') s++;
    else return false;
    if (s < e && *s == '.') {
        s++;
        if (s >= e || *s < '0' || *s > '9') return false;
        while (s < e && *s >= '0' && *s <= '9') s++;
    }
    if (s < e && (*s == 'e' || *s == 'E')) {
        s++;
        if (s < e && (*s == '+' || *s == '-')) s++;
        if (s >= e || *s < '0' || *s > '9') return false;
        while (s < e && *s >= '0' && *s <= '9') s++;
    }
    return s == e;
}

/* jsmn (even strict) lets some invalid documents through and then builds
 * tokens our walkers misread: a missing comma makes a key with two values
 * ({"a": 1 "b": 2}), a colon in an array gives an array element a child,
 * "nul" or "1.2.3" pass as primitives. Every token is checked here once, so
 * the lookups can rely on: object children are string keys with exactly one
 * value, strings and primitives elsewhere have no children. */
static void json_check_shape(const Json *j) {
    for (int t = 0; t < j->ntok; t++) {
        const JsonTok *k = &j->tok[t];
        int par = k->parent;
        int pt = par >= 0 && par < j->ntok ? j->tok[par].type : JSON_UNDEF;
        bool bad;
        if (t == 0) bad = par != -1;
        else if (pt == JSON_OBJECT) bad = k->type != JSON_STRING || k->size != 1;
        else if (pt == JSON_ARRAY ||
                 (pt == JSON_STRING && j->tok[par].size == 1 && json_type(j, j->tok[par].parent) == JSON_OBJECT))
            bad = (k->type == JSON_STRING || k->type == JSON_PRIMITIVE) && k->size != 0;
        else bad = true;
        if (!bad && k->type == JSON_PRIMITIVE) {
            const char *s = j->src + k->start, *e = j->src + k->end;
            size_t n = (size_t)(e - s);
            bad = !((n == 4 && !memcmp(s, "true", 4)) || (n == 5 && !memcmp(s, "false", 5)) ||
                    (n == 4 && !memcmp(s, "null", 4)) || number_ok(s, e));
        }
        if (bad) die_user(j->path, NULL, "invalid JSON (syntax error at byte %d)", k->start);
    }
}

void json_parse(Arena *a, Json *j, const char *path, const char *src, size_t len) {
    j->path = path; j->src = src; j->len = len;
    if (len > 0x7fffffffu) die_user(path, NULL, "JSON file too large (%zu bytes)", len);
    /* jsmn stops at a NUL: without this, "{...}\0garbage" would pass as valid */
    const char *nul = memchr(src, '\0', len);
    if (nul) die_user(path, NULL, "invalid JSON (NUL byte at offset %ld)", (long)(nul - src));
    /* jsmn closes a bracket by walking up from the last token, so depth d
     * costs d per bracket: a megabyte of "[[[[" would take minutes. serde_json
     * (Hugging Face's parser) stops at 128 levels too; real files use < 10. */
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (in_str) { if (c == '\\') i++; else if (c == '"') in_str = false; continue; }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > JSON_MAX_DEPTH)
                die_user(path, NULL, "JSON nested more than %d levels deep (at byte %zu)", JSON_MAX_DEPTH, i);
        } else if (c == ']' || c == '}') depth--;
    }
    if (in_str || depth > 0) die_user(path, NULL, "invalid JSON (unexpected end of input)");
    jsmn_parser p;
    jsmn_init(&p);
    int n = jsmn_parse(&p, src, len, NULL, 0);
    if (n == JSMN_ERROR_PART) die_user(path, NULL, "invalid JSON (unexpected end of input)");
    if (n < 0) die_user(path, NULL, "invalid JSON (syntax error at byte %u)", p.pos);
    if (n == 0) die_user(path, NULL, "invalid JSON (empty document)");
    j->tok = ARENA_ARRAY(a, JsonTok, n);
    jsmn_init(&p);
    int m = jsmn_parse(&p, src, len, (jsmntok_t *)j->tok, (unsigned)n);
    if (m < 0) die_user(path, NULL, "invalid JSON (syntax error at byte %u)", p.pos);
    j->ntok = m;
    /* jsmn accepts several top-level values; a document has one. */
    if (json_next(j, 0) != m) die_user(path, NULL, "invalid JSON (trailing data after the top-level value)");
    json_check_shape(j);
}

void json_load_file(Arena *a, Json *j, const char *path) {
    size_t len;
    char *src = read_file(path, &len);
    if (!src) die_user(path, NULL, "cannot read: %s", strerror(errno));
    char *copy = arena_strndup(a, src, len);
    free(src);
    json_parse(a, j, path, copy, len);
}

JsonType json_type(const Json *j, int t) { return (t >= 0 && t < j->ntok) ? (JsonType)j->tok[t].type : JSON_UNDEF; }
int json_size(const Json *j, int t) { return (t >= 0 && t < j->ntok) ? j->tok[t].size : 0; }

int json_next(const Json *j, int t) {
    if (t < 0 || t >= j->ntok) return j->ntok;
    int end = j->tok[t].end;
    int k = t + 1;
    /* tokens are ordered by start; the subtree is every token starting before t's end */
    if (j->tok[t].type == JSON_OBJECT || j->tok[t].type == JSON_ARRAY) {
        int lo = t + 1, hi = j->ntok;
        while (lo < hi) { int mid = lo + (hi - lo) / 2; if (j->tok[mid].start < end) lo = mid + 1; else hi = mid; }
        k = lo;
    }
    return k;
}

int json_obj_first(const Json *j, int obj) {
    if (json_type(j, obj) != JSON_OBJECT || j->tok[obj].size == 0) return -1;
    return obj + 1;
}
int json_obj_next(const Json *j, int obj, int key) {
    int n = json_next(j, key + 1);
    if (n >= j->ntok || j->tok[n].start >= j->tok[obj].end) return -1;
    return n;
}

/* token t is of the type and its text (a string's without the quotes) is s */
static bool tok_is(const Json *j, int t, JsonType type, const char *s) {
    if (json_type(j, t) != type) return false;
    size_t n = (size_t)(j->tok[t].end - j->tok[t].start);
    return strlen(s) == n && memcmp(j->src + j->tok[t].start, s, n) == 0;
}
bool json_str_eq(const Json *j, int t, const char *s) { return tok_is(j, t, JSON_STRING, s); }

int json_find(const Json *j, int obj, const char *key) {
    for (int k = json_obj_first(j, obj); k >= 0; k = json_obj_next(j, obj, k))
        if (json_str_eq(j, k, key)) return k + 1;
    return -1;
}

int json_at(const Json *j, int arr, int i) {
    if (json_type(j, arr) != JSON_ARRAY || i < 0 || i >= j->tok[arr].size) return -1;
    int k = arr + 1;
    for (int n = 0; n < i; n++) k = json_next(j, k);
    return k;
}

bool json_is_null(const Json *j, int t) { return tok_is(j, t, JSON_PRIMITIVE, "null"); }
bool json_is_bool(const Json *j, int t, bool *v) {
    if (tok_is(j, t, JSON_PRIMITIVE, "true")) { if (v) *v = true; return true; }
    if (tok_is(j, t, JSON_PRIMITIVE, "false")) { if (v) *v = false; return true; }
    return false;
}
bool json_get_double(const Json *j, int t, double *v) {
    if (json_type(j, t) != JSON_PRIMITIVE) return false;
    char c = j->src[j->tok[t].start];   /* JSON's numbers: no '+', "inf" or "nan", which strtod takes */
    if (c != '-' && (c < '0' || c > '9')) return false;
    char buf[64];
    int n = j->tok[t].end - j->tok[t].start;
    if (n <= 0 || n >= (int)sizeof buf) return false;
    memcpy(buf, j->src + j->tok[t].start, (size_t)n); buf[n] = 0;
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    if (*end || errno == ERANGE || !isfinite(d)) return false;
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

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
static int hex4(const char *s, const char *e) {
    if (e - s < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) { int h = hexval(s[i]); if (h < 0) return -1; v = v * 16 + h; }
    return v;
}
static size_t put_utf8(char *o, uint32_t c) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    size_t n = c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    for (size_t i = n - 1; i > 0; i--, c >>= 6) o[i] = (char)(0x80 | (c & 63));
    o[0] = (char)(((0xFF00 >> n) & 0xFF) | c);   /* 110xxxxx, 1110xxxx or 11110xxx */
    return n;
}

char *json_get_str(Arena *a, const Json *j, int t, size_t *len) {
    if (json_type(j, t) != JSON_STRING) return NULL;
    const char *s = j->src + j->tok[t].start, *e = j->src + j->tok[t].end;
    char *out = arena_alloc(a, (size_t)(e - s) + 1), *o = out;
    while (s < e) {
        if (*s != '\\') { *o++ = *s++; continue; }
        s++;
        if (s >= e) break;
        char c = *s++;
        /* the one-character escapes, and what each stands for */
        static const char esc[] = "\"\\/bfnrt", chr[] = "\"\\/\b\f\n\r\t";
        const char *k = c ? strchr(esc, c) : NULL;
        if (k) { *o++ = chr[k - esc]; continue; }
        if (c != 'u') die_user(j->path, NULL, "invalid escape '\\%c' at byte %ld", c, (long)(s - 1 - j->src));
        int u = hex4(s, e);
        if (u < 0) die_user(j->path, NULL, "invalid \\u escape at byte %ld", (long)(s - j->src));
        s += 4;
        uint32_t cp = (uint32_t)u;
        if (cp >= 0xD800 && cp < 0xDC00 && e - s >= 6 && s[0] == '\\' && s[1] == 'u') {
            int lo = hex4(s + 2, e);
            if (lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00); s += 6;
            }
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;   /* lone surrogate: as serde_json would reject, we replace */
        o += put_utf8(o, cp);
    }
    *o = 0;
    if (len) *len = (size_t)(o - out);
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
