/* json.c: see json.h. The only file that includes jsmn.h's implementation. */
#define JSMN_STRICT
#define JSMN_PARENT_LINKS
#define JSMN_STATIC
#include <jsmn.h>
#include "json.h"
#include <errno.h>
#include <math.h>
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

JsonError json_read(Json *j, const char *src, size_t len, size_t *at) {
    j->src = src; j->len = len; j->tok = NULL; j->ntok = 0;
    *at = 0;
    if (len > 0x7fffffffu) return JSON_ERR_TOO_LARGE;
    const char *nul = memchr(src, '\0', len);
    if (nul) { *at = (size_t)(nul - src); return JSON_ERR_NUL; }
    /* jsmn closes a bracket by walking up from the last token, so depth d costs d per bracket: a megabyte of
     * "[[[[" would take minutes. serde_json (Hugging Face's parser) stops at 128 levels too; real files use < 10. */
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (in_str) { if (c == '\\') i++; else if (c == '"') in_str = false; continue; }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > JSON_MAX_DEPTH) { *at = i; return JSON_ERR_DEEP; }
        } else if (c == ']' || c == '}') depth--;
    }
    if (in_str || depth > 0) return JSON_ERR_END;
    jsmn_parser p;
    jsmn_init(&p);
    int n = jsmn_parse(&p, src, len, NULL, 0);
    if (n == JSMN_ERROR_PART) return JSON_ERR_END;
    if (n < 0) { *at = p.pos; return JSON_ERR_SYNTAX; }
    if (n == 0) return JSON_ERR_EMPTY;
    j->tok = malloc((size_t)n * sizeof *j->tok);
    if (!j->tok) return JSON_ERR_OOM;
    jsmn_init(&p);
    int m = jsmn_parse(&p, src, len, (jsmntok_t *)j->tok, (unsigned)n);
    if (m < 0) { *at = p.pos; json_free(j); return JSON_ERR_SYNTAX; }
    j->ntok = m;
    /* jsmn accepts several top-level values; a document has one. */
    return json_next(j, 0) != m ? JSON_ERR_TRAILING : JSON_OK;
}

void json_free(Json *j) {
    free(j->tok);
    j->tok = NULL;
    j->ntok = 0;
}

/* jsmn (even strict) lets some invalid documents through and then builds tokens the lookups misread: a missing
 * comma makes a key with two values ({"a": 1 "b": 2}), a colon in an array gives an array element a child, "nul"
 * or "1.2.3" pass as primitives. Every token is checked here once, so the lookups can rely on: object children
 * are string keys with exactly one value, strings and primitives elsewhere have no children. A value after the
 * first at the top (JSON_ERR_TRAILING) is checked as a value too. */
int json_bad_token(const Json *j) {
    for (int t = 0; t < j->ntok; t++) {
        const JsonTok *k = &j->tok[t];
        int par = k->parent;
        int pt = par >= 0 && par < j->ntok ? j->tok[par].type : JSON_UNDEF;
        bool bad;
        if (par == -1) bad = false;
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
        if (bad) return t;
    }
    return -1;
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

bool json_number(const Json *j, int t, double *v) {
    if (json_type(j, t) != JSON_PRIMITIVE) return false;
    char buf[64];
    int n = j->tok[t].end - j->tok[t].start;
    const char *s = j->src + j->tok[t].start;
    /* the grammar first: strtod would also take '+', "inf", "nan", hex and leading zeros */
    if (n <= 0 || n >= (int)sizeof buf || !number_ok(s, s + n)) return false;
    memcpy(buf, s, (size_t)n);
    buf[n] = 0;
    errno = 0;
    double d = strtod(buf, NULL);
    if (!isfinite(d)) return false;
    *v = d;
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
/* bytes of one valid UTF-8 character at s[0..n), or 0 */
static int utf8_len(const unsigned char *s, size_t n) {
    unsigned char b = s[0];
    int len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1Fu : len == 3 ? b & 0x0Fu : b & 0x07u;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

size_t json_string_room(const Json *j, int t) {
    return json_type(j, t) == JSON_STRING ? (size_t)(j->tok[t].end - j->tok[t].start) + 1 : 0;
}

JsonError json_string(const Json *j, int t, char *out, size_t *len, bool strict, size_t *at) {
    const char *s = j->src + j->tok[t].start, *e = j->src + j->tok[t].end;
    char *o = out;
    while (s < e) {
        if (*s != '\\') {
            int n = strict ? utf8_len((const unsigned char *)s, (size_t)(e - s)) : 1;
            if (!n) { *at = (size_t)(s - j->src); return JSON_ERR_UTF8; }
            memcpy(o, s, (size_t)n);
            o += n;
            s += n;
            continue;
        }
        *at = (size_t)(s - j->src);
        s++;
        if (s >= e) break;
        char c = *s++;
        /* the one-character escapes, and what each stands for */
        static const char esc[] = "\"\\/bfnrt", chr[] = "\"\\/\b\f\n\r\t";
        const char *k = c ? strchr(esc, c) : NULL;
        if (k) { *o++ = chr[k - esc]; continue; }
        int u = c == 'u' ? hex4(s, e) : -1;
        if (u < 0) return JSON_ERR_ESCAPE;
        s += 4;
        uint32_t cp = (uint32_t)u;
        if (cp >= 0xD800 && cp < 0xDC00 && e - s >= 6 && s[0] == '\\' && s[1] == 'u') {
            int lo = hex4(s + 2, e);
            if (lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                s += 6;
            }
        }
        if (cp >= 0xD800 && cp < 0xE000) {   /* a lone surrogate: refused, or replaced as the compiler reads */
            if (strict) return JSON_ERR_UTF8;
            cp = 0xFFFD;
        }
        o += put_utf8(o, cp);
    }
    *o = 0;
    *len = (size_t)(o - out);
    return JSON_OK;
}
