/* jinja.c: see jinja.h. Four parts, in order: values (Python's, as jinja2 gives them to a template: None, bool,
 * int, float, str, list, tuple, dict, and jinja2's own Undefined, namespace and loop), the lexer (text and tags,
 * with jinja2's whitespace rules), the parser (statements and expressions into a tree) and the renderer (a walk of
 * the tree; errors leave it by longjmp, all memory is one arena per template and one per rendering). The filters,
 * tests and methods are tables by name at the end. Semantics follow Python where the texts depend on them: a
 * dict or list prints as repr(), strings slice and count by code point, `%` and `//` floor, str.split() without a
 * separator splits at runs of whitespace. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* localtime_r, strdup */
#endif
#include "jinja.h"
#include "json.h"
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---------------------------------------------------------------- memory: one arena, freed at once */

typedef struct Chunk { struct Chunk *next; size_t used, size; max_align_t data[]; } Chunk;
typedef struct { Chunk *head; size_t total, limit; } Arena;

static jmp_buf *oom_jump;   /* where an arena past its limit or out of memory goes (set by parse and render) */
static Arena *A_cur;        /* the arena values are made in: the template's while parsing, the rendering's after */

static void *arena_alloc(Arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->size - a->head->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (a->limit && a->total + size > a->limit) longjmp(*oom_jump, 2);
        Chunk *c = malloc(sizeof *c + size);
        if (!c) longjmp(*oom_jump, 1);
        c->next = a->head; c->used = 0; c->size = size;
        a->head = c;
        a->total += size;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

static void arena_free(Arena *a) {
    for (Chunk *c = a->head, *next; c; c = next) { next = c->next; free(c); }
    a->head = NULL;
    a->total = 0;
}

/* ---------------------------------------------------------------- values */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_LOOP, V_MACRO, V_FUNC,
               V_METHOD } VType;
static const char *const vtype_names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
                                          "Namespace", "LoopContext", "Macro", "builtin_function", "method"};

typedef struct Str Str;
typedef struct List List;
typedef struct Dict Dict;
typedef struct Loop Loop;
typedef struct Node Node;
typedef struct Value Value;
struct Value {
    VType t;
    int id;                    /* V_FUNC, V_METHOD: which one */
    union { bool b; int64_t i; double f; Str *s; List *l; Dict *d; Loop *loop; struct Macro *macro; Value *self; };
};
struct Str { size_t n; char p[]; };
struct List { int n, cap; bool tuple; Value *v; };
struct Dict { int n, cap; Value *k, *v; };

static const Value UNDEF = {.t = V_UNDEF}, NONE = {.t = V_NONE};

typedef struct Frame Frame;
/* a macro (or a call block's body, as caller) and the names it sees */
typedef struct Macro { const Node *node; Frame *closure; } Macro;

/* the state of one for loop, as `loop` shows it */
struct Loop { List *items; int index; int depth; };

/* ---------------------------------------------------------------- the renderer's state */

typedef struct {
    Arena A;                   /* this rendering's values */
    jmp_buf fail;
    JinjaError *err;
    char *out; size_t out_len, out_cap, max_output;
    long steps, max_steps;
    int depth, max_depth;
    int line;                  /* of the node being rendered, for messages */
    struct tm now;
    Frame *root;
} Render;

static Render *R;   /* the rendering in progress (one at a time per thread: jinja_render is not reentrant) */

static _Noreturn void fail_at(JinjaErrorKind kind, int line, const char *fmt, ...) {
    JinjaError *e = R->err;
    e->kind = kind;
    e->line = line;
    e->column = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    if (kind != JINJA_ERR_RAISE)   /* one line; raise_exception's message is the template's own, verbatim */
        for (char *c = e->message; *c; c++) if ((unsigned char)*c < 0x20) *c = ' ';
    longjmp(R->fail, 1);
}
#define FAIL(...) fail_at(JINJA_ERR_RUNTIME, R->line, __VA_ARGS__)
#define OVERFLOW "integer overflow (integers beyond 64 bits are not supported)"

static void step(void) {
    if (++R->steps > R->max_steps)
        fail_at(JINJA_ERR_LIMIT, R->line, "more than %ld loop iterations, calls and filter items", R->max_steps);
}

static Str *str_new(const char *p, size_t n) {
    Str *s = arena_alloc(A_cur, sizeof *s + n + 1);
    s->n = n;
    if (n) memcpy(s->p, p, n);
    s->p[n] = 0;
    return s;
}
static Value v_str(const char *p, size_t n) { Value v = {.t = V_STR}; v.s = str_new(p, n); return v; }
static Value v_cstr(const char *p) { return v_str(p, strlen(p)); }
static Value v_int(int64_t i) { Value v = {.t = V_INT}; v.i = i; return v; }
static Value v_float(double f) { Value v = {.t = V_FLOAT}; v.f = f; return v; }
static Value v_bool(bool b) { Value v = {.t = V_BOOL}; v.b = b; return v; }

static List *list_new(int cap) {
    List *l = arena_alloc(A_cur, sizeof *l);
    l->n = 0; l->cap = cap > 4 ? cap : 4; l->tuple = false;
    l->v = arena_alloc(A_cur, sizeof(Value) * (size_t)l->cap);
    return l;
}
static void list_push(List *l, Value x) {
    if (l->n == l->cap) {
        Value *nv = arena_alloc(A_cur, sizeof(Value) * (size_t)l->cap * 2);
        memcpy(nv, l->v, sizeof(Value) * (size_t)l->n);
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = x;
}
static Value v_list(List *l) { Value v = {.t = V_LIST}; v.l = l; return v; }
static Dict *dict_new(void) {
    Dict *d = arena_alloc(A_cur, sizeof *d);
    d->n = 0; d->cap = 4;
    d->k = arena_alloc(A_cur, sizeof(Value) * 4);
    d->v = arena_alloc(A_cur, sizeof(Value) * 4);
    return d;
}
static Value v_dict(Dict *d) { Value v = {.t = V_DICT}; v.d = d; return v; }

static bool equal(Value a, Value b);
static int dict_index(const Dict *d, Value key) {
    for (int i = 0; i < d->n; i++) if (equal(d->k[i], key)) return i;
    return -1;
}
static int dict_index_str(const Dict *d, const char *key, size_t n) {
    for (int i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].s->n == n && !memcmp(d->k[i].s->p, key, n)) return i;
    return -1;
}
static void dict_set(Dict *d, Value key, Value val) {
    int i = dict_index(d, key);
    if (i >= 0) { d->v[i] = val; return; }
    if (d->n == d->cap) {
        Value *nk = arena_alloc(A_cur, sizeof(Value) * (size_t)d->cap * 2);
        Value *nv = arena_alloc(A_cur, sizeof(Value) * (size_t)d->cap * 2);
        memcpy(nk, d->k, sizeof(Value) * (size_t)d->n);
        memcpy(nv, d->v, sizeof(Value) * (size_t)d->n);
        d->k = nk; d->v = nv; d->cap *= 2;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

/* ---- text building: in the arena, so that an error leaving by longjmp leaks nothing (a grown buffer leaves its
 * old block behind: at most as much again as the text, freed with the arena) */

typedef struct { char *p; size_t n, cap; } Buf;
static void buf_add(Buf *b, const char *p, size_t n) {
    if (R && b->n + n > R->max_output)
        fail_at(JINJA_ERR_LIMIT, R->line, "a text of more than %zu bytes", R->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = arena_alloc(A_cur, cap);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }
static void buf_printf(Buf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
/* the buffer's text as a string value (the buffer is done with) */
static Value buf_value(Buf *b) {
    Value v = v_str(b->p ? b->p : "", b->n);
    *b = (Buf){0};
    return v;
}

/* ---- UTF-8 (strings index, slice and count by code point, as Python's do) */

static size_t utf8_len(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}
/* the byte offset of code point i (i <= the count) */
static size_t utf8_offset(const char *p, size_t n, size_t i) {
    size_t at = 0;
    while (i > 0 && at < n) {
        at++;
        while (at < n && ((unsigned char)p[at] & 0xC0) == 0x80) at++;
        i--;
    }
    return at;
}

/* ---- Python's float repr: the shortest digits that read back, fixed notation for 1e-4 <= |x| < 1e16 */
static void float_repr(Buf *b, double x) {
    if (isnan(x)) { buf_str(b, "nan"); return; }
    if (isinf(x)) { buf_str(b, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { buf_str(b, signbit(x) ? "-0.0" : "0.0"); return; }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0;
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    for (; *s && *s != 'e'; s++) if (*s != '.') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) buf_str(b, "-");
    if (exp >= -5 && exp < 16) {
        if (exp < 0) {
            buf_str(b, "0.");
            for (int i = 0; i < -exp - 1; i++) buf_str(b, "0");
            buf_add(b, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp; i++) buf_add(b, i < nd ? &digits[i] : "0", 1);
            buf_str(b, ".");
            if (nd > exp + 1) buf_add(b, digits + exp + 1, (size_t)(nd - exp - 1));
            else buf_str(b, "0");
        }
    } else {
        buf_add(b, digits, 1);
        if (nd > 1) { buf_str(b, "."); buf_add(b, digits + 1, (size_t)(nd - 1)); }
        buf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

/* Python's repr of a str: single quotes unless the text has one and no double quote */
static void str_repr(Buf *b, const Str *s) {
    bool dq = memchr(s->p, '\'', s->n) && !memchr(s->p, '"', s->n);
    char q = dq ? '"' : '\'';
    buf_add(b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->p[i];
        if (c == '\\') buf_str(b, "\\\\");
        else if (c == (unsigned char)q) { buf_str(b, "\\"); buf_add(b, &q, 1); }
        else if (c == '\n') buf_str(b, "\\n");
        else if (c == '\r') buf_str(b, "\\r");
        else if (c == '\t') buf_str(b, "\\t");
        else if (c < 0x20 || c == 0x7f) buf_printf(b, "\\x%02x", c);
        else buf_add(b, (const char *)&c, 1);
    }
    buf_add(b, &q, 1);
}

static void repr(Buf *b, Value v);
/* str(v): what {{ v }} prints */
static void to_text(Buf *b, Value v) {
    switch (v.t) {
    case V_UNDEF: return;
    case V_NONE: buf_str(b, "None"); return;
    case V_BOOL: buf_str(b, v.b ? "True" : "False"); return;
    case V_INT: buf_printf(b, "%lld", (long long)v.i); return;
    case V_FLOAT: float_repr(b, v.f); return;
    case V_STR: buf_add(b, v.s->p, v.s->n); return;
    default: repr(b, v);
    }
}
static void repr(Buf *b, Value v) {
    switch (v.t) {
    case V_STR: str_repr(b, v.s); return;
    case V_LIST:
        buf_str(b, v.l->tuple ? "(" : "[");
        for (int i = 0; i < v.l->n; i++) { if (i) buf_str(b, ", "); repr(b, v.l->v[i]); }
        buf_str(b, v.l->tuple ? (v.l->n == 1 ? ",)" : ")") : "]");
        return;
    case V_DICT:
        buf_str(b, "{");
        for (int i = 0; i < v.d->n; i++) {
            if (i) buf_str(b, ", ");
            repr(b, v.d->k[i]);
            buf_str(b, ": ");
            repr(b, v.d->v[i]);
        }
        buf_str(b, "}");
        return;
    case V_NS: buf_str(b, "<Namespace>"); return;
    case V_LOOP: buf_str(b, "<LoopContext>"); return;
    case V_MACRO: case V_FUNC: case V_METHOD: buf_str(b, "<function>"); return;
    default: to_text(b, v);
    }
}
static Value to_str(Value v) {
    if (v.t == V_STR) return v;
    Buf b = {0};
    to_text(&b, v);
    return buf_value(&b);
}

/* json.dumps(v, ensure_ascii=False, indent=indent, separators, sort_keys), transformers' tojson */
typedef struct { const char *indent; bool has_indent; const char *item_sep, *key_sep; bool sort_keys; } JsonStyle;
static int compare(Value a, Value b);
static void json_dump(Buf *b, Value v, const JsonStyle *st, int level) {
    switch (v.t) {
    case V_NONE: buf_str(b, "null"); return;
    case V_BOOL: buf_str(b, v.b ? "true" : "false"); return;
    case V_INT: case V_FLOAT:
        if (v.t == V_FLOAT && (isnan(v.f) || isinf(v.f))) {   /* json.dumps' allow_nan */
            buf_str(b, isnan(v.f) ? "NaN" : v.f < 0 ? "-Infinity" : "Infinity");
            return;
        }
        to_text(b, v);
        return;
    case V_STR:
        buf_str(b, "\"");
        for (size_t i = 0; i < v.s->n; i++) {
            unsigned char c = (unsigned char)v.s->p[i];
            switch (c) {
            case '"': buf_str(b, "\\\""); break;
            case '\\': buf_str(b, "\\\\"); break;
            case '\n': buf_str(b, "\\n"); break;
            case '\r': buf_str(b, "\\r"); break;
            case '\t': buf_str(b, "\\t"); break;
            case '\b': buf_str(b, "\\b"); break;
            case '\f': buf_str(b, "\\f"); break;
            default:
                if (c < 0x20) buf_printf(b, "\\u%04x", c);
                else buf_add(b, (const char *)&c, 1);
            }
        }
        buf_str(b, "\"");
        return;
    case V_LIST: case V_DICT: {
        bool dict = v.t == V_DICT;
        int n = dict ? v.d->n : v.l->n;
        if (n == 0) { buf_str(b, dict ? "{}" : "[]"); return; }
        if (level > 200) FAIL("tojson: nested more than 200 deep");
        int order[n];
        for (int i = 0; i < n; i++) order[i] = i;
        if (dict && st->sort_keys)   /* insertion sort: the dicts are small */
            for (int i = 1; i < n; i++)
                for (int j = i; j > 0 && compare(v.d->k[order[j - 1]], v.d->k[order[j]]) > 0; j--) {
                    int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
                }
        buf_str(b, dict ? "{" : "[");
        for (int i = 0; i < n; i++) {
            if (i) buf_str(b, st->item_sep);
            if (st->has_indent) {
                buf_str(b, "\n");
                for (int s = 0; s < level + 1; s++) buf_str(b, st->indent);
            }
            if (dict) {
                Value k = v.d->k[order[i]];
                if (k.t != V_STR) k = to_str(k);
                json_dump(b, k, st, level + 1);
                buf_str(b, st->key_sep);
                json_dump(b, v.d->v[order[i]], st, level + 1);
            } else {
                json_dump(b, v.l->v[i], st, level + 1);
            }
        }
        if (st->has_indent) {
            buf_str(b, "\n");
            for (int s = 0; s < level; s++) buf_str(b, st->indent);
        }
        buf_str(b, dict ? "}" : "]");
        return;
    }
    default: FAIL("Object of type %s is not JSON serializable", vtype_names[v.t]);
    }
}

static bool truthy(Value v) {
    switch (v.t) {
    case V_UNDEF: case V_NONE: return false;
    case V_BOOL: return v.b;
    case V_INT: return v.i != 0;
    case V_FLOAT: return v.f != 0;
    case V_STR: return v.s->n != 0;
    case V_LIST: return v.l->n != 0;
    case V_DICT: return v.d->n != 0;
    default: return true;
    }
}

static bool is_number(Value v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
static double as_double(Value v) { return v.t == V_FLOAT ? v.f : v.t == V_BOOL ? v.b : (double)v.i; }
static int64_t as_int(Value v) { return v.t == V_BOOL ? v.b : v.i; }

static bool equal(Value a, Value b) {
    if (is_number(a) && is_number(b)) {
        if (a.t == V_FLOAT || b.t == V_FLOAT) return as_double(a) == as_double(b);
        return as_int(a) == as_int(b);
    }
    if ((a.t == V_LIST) != (b.t == V_LIST) || (a.t != V_LIST && a.t != b.t)) return false;
    switch (a.t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a.s->n == b.s->n && !memcmp(a.s->p, b.s->p, a.s->n);
    case V_LIST:
        if (a.l->n != b.l->n || a.l->tuple != b.l->tuple) return false;
        for (int i = 0; i < a.l->n; i++) if (!equal(a.l->v[i], b.l->v[i])) return false;
        return true;
    case V_DICT:
        if (a.d->n != b.d->n) return false;
        for (int i = 0; i < a.d->n; i++) {
            int j = dict_index(b.d, a.d->k[i]);
            if (j < 0 || !equal(a.d->v[i], b.d->v[j])) return false;
        }
        return true;
    case V_NS: return a.d == b.d;
    case V_LOOP: return a.loop == b.loop;
    case V_MACRO: return a.macro->node == b.macro->node;
    default: return a.id == b.id;
    }
}

/* <, as Python orders: numbers with numbers, strings by code point (UTF-8's byte order is the same), lists
 * element by element; anything else is a TypeError */
static int compare(Value a, Value b) {
    if (is_number(a) && is_number(b)) {
        double x = as_double(a), y = as_double(b);
        if (a.t != V_FLOAT && b.t != V_FLOAT) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == V_STR && b.t == V_STR) {
        size_t n = a.s->n < b.s->n ? a.s->n : b.s->n;
        int c = memcmp(a.s->p, b.s->p, n);
        return c ? (c < 0 ? -1 : 1) : (a.s->n < b.s->n ? -1 : a.s->n > b.s->n);
    }
    if (a.t == V_LIST && b.t == V_LIST) {
        for (int i = 0; i < a.l->n && i < b.l->n; i++) {
            if (equal(a.l->v[i], b.l->v[i])) continue;
            return compare(a.l->v[i], b.l->v[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    FAIL("'<' not supported between instances of '%s' and '%s'", vtype_names[a.t], vtype_names[b.t]);
}

/* ---- JSON into values (the variables) */

static Value from_json(const Json *j, int t, int *next) {
    Value v = NONE;
    switch (json_type(j, t)) {
    case JSON_OBJECT: {
        Dict *d = dict_new();
        int n = json_size(j, t), k = t + 1;
        for (int i = 0; i < n; i++) {
            int after_key;
            Value key = from_json(j, k, &after_key);
            dict_set(d, key, from_json(j, after_key, &k));
        }
        *next = k;
        return v_dict(d);
    }
    case JSON_ARRAY: {
        int n = json_size(j, t), k = t + 1;
        List *l = list_new(n);
        for (int i = 0; i < n; i++) list_push(l, from_json(j, k, &k));
        *next = k;
        return v_list(l);
    }
    case JSON_STRING: {
        size_t room = json_string_room(j, t), len, at;
        char *s = arena_alloc(A_cur, room);
        if (json_string(j, t, s, &len, false, &at) != JSON_OK) fail_at(JINJA_ERR_VARS, 0, "a string's escape");
        v = v_str(s, len);
        break;
    }
    default: {
        bool b;
        double d;
        const char *p = j->src + j->tok[t].start;
        size_t n = (size_t)(j->tok[t].end - j->tok[t].start);
        if (json_is_bool(j, t, &b)) v = v_bool(b);
        else if (json_is_null(j, t)) v = NONE;
        else if (json_number(j, t, &d)) {
            bool integral = !memchr(p, '.', n) && !memchr(p, 'e', n) && !memchr(p, 'E', n);
            errno = 0;
            long long i = integral ? strtoll(p, NULL, 10) : 0;
            v = integral && errno == 0 ? v_int(i) : v_float(d);
        } else {
            fail_at(JINJA_ERR_VARS, 0, "'%.*s' is not a JSON value", (int)(n < 40 ? n : 40), p);
        }
    }
    }
    *next = t + 1;
    return v;
}

/* ---------------------------------------------------------------- lexer */

typedef enum { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
               T_EOF } TokKind;
static const char *const tok_names[] = {"text", "'{{'", "'}}'", "'{%'", "'%}'", "name", "string", "integer",
                                        "float", "operator", "end of template"};

typedef struct {
    TokKind k;
    int line, col;
    const char *p;             /* T_TEXT, T_NAME, T_OP: the source's bytes */
    size_t n;
    Str *s;                    /* T_STRING: decoded */
    int64_t i;
    double f;
} Tok;

typedef struct {
    const char *src;
    size_t len;
    Tok *toks;
    int n, cap, at;            /* the tokens; the parser's position */
    JinjaError *err;
    jmp_buf fail;
    int depth;                 /* of nested blocks and expressions: bounded, the parser recurses */
    size_t where_at;           /* where()'s last answer */
    int where_line, where_col;
} Parser;

static _Noreturn void syntax_at(Parser *P, int line, int col, const char *fmt, ...) {
    P->err->kind = JINJA_ERR_SYNTAX;
    P->err->line = line;
    P->err->column = col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err->message, sizeof P->err->message, fmt, ap);
    va_end(ap);
    for (char *c = P->err->message; *c; c++) if ((unsigned char)*c < 0x20) *c = ' ';   /* one line: quoted source */
    longjmp(P->fail, 1);
}

static Tok *tok_add(Parser *P, TokKind k, int line, int col, const char *p, size_t n) {
    if (P->n == P->cap) {
        P->cap = P->cap ? P->cap * 2 : 256;
        Tok *nt = realloc(P->toks, sizeof(Tok) * (size_t)P->cap);
        if (!nt) longjmp(*oom_jump, 1);
        P->toks = nt;
    }
    Tok *t = &P->toks[P->n++];
    memset(t, 0, sizeof *t);
    t->k = k; t->line = line; t->col = col; t->p = p; t->n = n;
    return t;
}

/* line and column of byte at (the lexer asks in order: counted on from the last answer) */
static void where(Parser *P, size_t at, int *line, int *col) {
    if (at < P->where_at) { P->where_at = 0; P->where_line = 1; P->where_col = 1; }
    for (size_t i = P->where_at; i < at && i < P->len; i++) {
        if (P->src[i] == '\n') { P->where_line++; P->where_col = 1; }
        else if (((unsigned char)P->src[i] & 0xC0) != 0x80) P->where_col++;
    }
    P->where_at = at;
    *line = P->where_line;
    *col = P->where_col;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* a string literal's body, Python's escapes resolved (jinja2 decodes with "unicode-escape"): \n \t \r \\ \' \"
 * \xNN \uNNNN \UNNNNNNNN \a \b \f \v \0; another escape keeps its backslash */
static Str *unescape(Parser *P, const char *p, size_t n, int line, int col) {
    Buf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 == n) { buf_add(&b, p + i, 1); continue; }
        char c = p[++i];
        static const char from[] = "ntr\\'\"abfv", to[] = "\n\t\r\\'\"\a\b\f\v";
        const char *simple = c ? strchr(from, c) : NULL;
        if (c == '\n') continue;   /* a backslash at the end of a line joins it to the next */
        if (c == '0') { buf_add(&b, "", 1); continue; }
        if (simple) { buf_add(&b, &to[simple - from], 1); continue; }
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            for (int d = 0; d < digits; d++) {
                char h = i + 1 + (size_t)d < n ? p[i + 1 + (size_t)d] : 0;
                int v = is_digit(h) ? h - '0' : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10 : -1;
                if (v < 0) syntax_at(P, line, col, "a truncated \\%c escape in a string", c);
                cp = cp * 16 + (uint32_t)v;
            }
            i += (size_t)digits;
            utf8proc_uint8_t u[4];
            utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, u);
            if (k <= 0) syntax_at(P, line, col, "\\%c escape of no character", c);
            buf_add(&b, (const char *)u, (size_t)k);
            continue;
        }
        buf_add(&b, p + i - 1, 2);
    }
    return str_new(b.p ? b.p : "", b.n);
}

/* the tokens of one tag's inside, from src[i]; returns the offset after its end delimiter (}} %}); *strip_after:
 * it ended with a '-' */
static size_t lex_tag(Parser *P, size_t i, char close, bool *strip_after) {
    const char *s = P->src;
    size_t n = P->len;
    int brackets = 0;
    for (;;) {
        while (i < n && is_space(s[i])) i++;
        int line, col;
        where(P, i, &line, &col);
        if (i >= n) syntax_at(P, line, col, "the tag is not closed (expected '%c}')", close);
        if (brackets == 0 && s[i] == '-' && i + 2 < n + 0 && s[i + 1] == close && s[i + 2] == '}') {
            *strip_after = true;
            return i + 3;
        }
        if (brackets == 0 && s[i] == close && i + 1 < n && s[i + 1] == '}') {
            *strip_after = false;
            return i + 2;
        }
        char c = s[i];
        if (is_name_start(c)) {
            size_t j = i;
            while (j < n && (is_name_start(s[j]) || is_digit(s[j]))) j++;
            tok_add(P, T_NAME, line, col, s + i, j - i);
            i = j;
        } else if (is_digit(c)) {
            size_t j = i;
            bool fl = false;
            while (j < n && (is_digit(s[j]) || s[j] == '_')) j++;
            if (j + 1 < n && s[j] == '.' && is_digit(s[j + 1])) {
                fl = true;
                j++;
                while (j < n && (is_digit(s[j]) || s[j] == '_')) j++;
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E') &&
                ((j + 1 < n && is_digit(s[j + 1])) ||
                 (j + 2 < n && (s[j + 1] == '+' || s[j + 1] == '-') && is_digit(s[j + 2])))) {
                fl = true;
                j += 2;
                while (j < n && is_digit(s[j])) j++;
            }
            char num[64];
            size_t k = 0;
            for (size_t q = i; q < j && k < sizeof num - 1; q++) if (s[q] != '_') num[k++] = s[q];
            num[k] = 0;
            Tok *t = tok_add(P, fl ? T_FLOAT : T_INT, line, col, s + i, j - i);
            errno = 0;
            if (fl) t->f = strtod(num, NULL);
            else t->i = strtoll(num, NULL, 10);
            if (errno) syntax_at(P, line, col, "the number %s is out of range", num);
            i = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) j += s[j] == '\\' ? 2 : 1;
            if (j >= n) syntax_at(P, line, col, "the string is not closed");
            Tok *t = tok_add(P, T_STRING, line, col, s + i, j + 1 - i);
            t->s = unescape(P, s + i + 1, j - i - 1, line, col);
            i = j + 1;
        } else {
            static const char *const two[] = {"**", "//", "==", "!=", "<=", ">="};
            size_t len = 0;
            for (size_t k = 0; k < sizeof two / sizeof *two; k++)
                if (i + 1 < n && s[i] == two[k][0] && s[i + 1] == two[k][1]) len = 2;
            if (!len && strchr("+-*/%~<>()[]{},.:|=", c) && c) len = 1;
            if (!len) syntax_at(P, line, col, "unexpected character '%c'", c);
            if (len == 1 && strchr("([{", c)) brackets++;
            if (len == 1 && strchr(")]}", c) && brackets > 0) brackets--;
            tok_add(P, T_OP, line, col, s + i, len);
            i += len;
        }
    }
}

/* the template's tokens, with jinja2's whitespace rules as transformers sets them: trim_blocks (the first newline
 * after a block or comment tag is dropped), lstrip_blocks (spaces and tabs from a line's start to a block or
 * comment tag are dropped, `{%+` keeps them), `{%-` / `-%}` (and {{- -}} {#- -#}) strip all whitespace on that
 * side; one newline at the end of the source is dropped (keep_trailing_newline off) */
static void lex(Parser *P) {
    const char *s = P->src;
    size_t n = P->len;
    if (n && s[n - 1] == '\n') n--;
    P->len = n;
    size_t pos = 0;
    bool strip_ws = false, trim_nl = false;
    while (pos <= n) {
        if (strip_ws) while (pos < n && is_space(s[pos])) pos++;
        else if (trim_nl && pos < n && s[pos] == '\n') pos++;
        strip_ws = trim_nl = false;
        size_t tag = pos;
        while (tag + 1 < n && !(s[tag] == '{' && (s[tag + 1] == '{' || s[tag + 1] == '%' || s[tag + 1] == '#'))) tag++;
        if (tag + 1 >= n) tag = n;
        size_t text_end = tag;
        char kind = tag < n ? s[tag + 1] : 0;
        char sign = tag + 2 < n ? s[tag + 2] : 0;
        if (kind && sign == '-') {
            while (text_end > pos && is_space(s[text_end - 1])) text_end--;
        } else if ((kind == '%' || kind == '#') && sign != '+') {
            size_t l = text_end;
            while (l > pos && (s[l - 1] == ' ' || s[l - 1] == '\t')) l--;
            if ((l > pos && s[l - 1] == '\n') || (l == pos && (pos == 0 || s[pos - 1] == '\n'))) text_end = l;
        }
        if (text_end > pos) {
            int line, col;
            where(P, pos, &line, &col);
            tok_add(P, T_TEXT, line, col, s + pos, text_end - pos);
        }
        if (!kind) break;
        int line, col;
        where(P, tag, &line, &col);
        size_t i = tag + 2 + (sign == '-' || sign == '+');
        bool strip_after = false;
        if (kind == '#') {
            size_t j = i;
            while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}')) j++;
            if (j + 1 >= n) syntax_at(P, line, col, "the comment is not closed (expected '#}')");
            strip_after = j > i && s[j - 1] == '-';
            pos = j + 2;
            trim_nl = true;
        } else if (kind == '{') {
            tok_add(P, T_VAR_BEGIN, line, col, s + tag, 2);
            pos = lex_tag(P, i, '}', &strip_after);
            where(P, pos - 2, &line, &col);
            tok_add(P, T_VAR_END, line, col, s + pos - 2, 2);
        } else {
            tok_add(P, T_BLOCK_BEGIN, line, col, s + tag, 2);
            pos = lex_tag(P, i, '%', &strip_after);
            where(P, pos - 2, &line, &col);
            tok_add(P, T_BLOCK_END, line, col, s + pos - 2, 2);
            trim_nl = true;
        }
        if (strip_after) { strip_ws = true; trim_nl = false; }
    }
    int line, col;
    where(P, n, &line, &col);
    tok_add(P, T_EOF, line, col, s + n, 0);
}

/* ---------------------------------------------------------------- parser: statements and expressions, one tree */

typedef enum {
    /* statements */
    N_SEQ, N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK, N_FILTER_BLOCK, N_BREAK, N_CONTINUE,
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_BIN, E_AND, E_OR, E_CMP,
    E_COND, E_LIST, E_TUPLE, E_DICT,
} NodeKind;

enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOT_IN };

/* One node shape for all: what each kind keeps where is said at its parse function. */
struct Node {
    NodeKind k;
    int line, col;
    Node *a, *b, *c, *d;
    Node **kids;               /* statements of a N_SEQ; arguments; items; targets; a macro's parameters */
    int nkids;
    const char **kw_names;     /* keyword arguments' names, their values in kw */
    Node **kw;
    int nkw;
    int *ops;                  /* E_CMP: kids[i] is compared to the one before by ops[i] */
    const char *name;          /* E_NAME, E_ATTR, filters', tests', macros' and sets' names */
    int op;                    /* E_BIN: + - * / % ~, 'F' //, 'P' ** */
    bool negate;               /* E_TEST: is not */
    Value lit;                 /* E_LIT, N_TEXT */
};

typedef struct { Node **v; int n, cap; } NodeList;
static void nl_push(NodeList *l, Node *x) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        Node **nv = arena_alloc(A_cur, sizeof(Node *) * (size_t)cap);
        if (l->n) memcpy(nv, l->v, sizeof(Node *) * (size_t)l->n);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static Tok *peek(Parser *P) { return &P->toks[P->at]; }
static Tok *next_tok(Parser *P) { Tok *t = &P->toks[P->at]; if (t->k != T_EOF) P->at++; return t; }
static bool is_op(const Tok *t, const char *op) {
    return t->k == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static bool is_name(const Tok *t, const char *name) {
    return t->k == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}
static bool accept_op(Parser *P, const char *op) { if (is_op(peek(P), op)) { P->at++; return true; } return false; }
static bool accept_name(Parser *P, const char *name) {
    if (is_name(peek(P), name)) { P->at++; return true; }
    return false;
}
static _Noreturn void unexpected(Parser *P, const Tok *t, const char *wanted) {
    if (t->k == T_EOF) syntax_at(P, t->line, t->col, "unexpected end of template, expected %s", wanted);
    if (t->k == T_BLOCK_END || t->k == T_VAR_END || t->k == T_BLOCK_BEGIN || t->k == T_VAR_BEGIN)
        syntax_at(P, t->line, t->col, "unexpected %s, expected %s", tok_names[t->k], wanted);
    syntax_at(P, t->line, t->col, "unexpected '%.*s', expected %s", (int)(t->n > 40 ? 40 : t->n), t->p, wanted);
}
static void expect_op(Parser *P, const char *op) {
    if (!accept_op(P, op)) { char w[16]; snprintf(w, sizeof w, "'%s'", op); unexpected(P, peek(P), w); }
}
static void expect(Parser *P, TokKind k) { if (peek(P)->k != k) unexpected(P, peek(P), tok_names[k]); P->at++; }
static const char *tok_cstr(const Tok *t) {
    char *s = arena_alloc(A_cur, t->n + 1);
    memcpy(s, t->p, t->n);
    s[t->n] = 0;
    return s;
}
static const char *expect_name(Parser *P) {
    Tok *t = peek(P);
    if (t->k != T_NAME) unexpected(P, t, "a name");
    P->at++;
    return tok_cstr(t);
}

static Node *node(Parser *P, NodeKind k, const Tok *at) {
    Node *n = arena_alloc(A_cur, sizeof *n);
    memset(n, 0, sizeof *n);
    n->k = k;
    n->line = at ? at->line : 0;
    n->col = at ? at->col : 0;
    (void)P;
    return n;
}

static void deeper(Parser *P, const Tok *t) {
    if (++P->depth > 200) syntax_at(P, t->line, t->col, "nested more than 200 deep");
}

static Node *parse_expression(Parser *P, bool with_cond);
static Node *parse_or(Parser *P);
static Node *parse_unary(Parser *P, bool with_filter);

/* a tuple where a comma makes one (a, b = ...; for ... in a, b; (a, b)); else the expression alone */
static Node *parse_tuple(Parser *P, bool with_cond, const Tok *at) {
    NodeList items = {0};
    bool comma = false;
    for (;;) {
        if (items.n && (peek(P)->k == T_BLOCK_END || peek(P)->k == T_VAR_END || is_op(peek(P), ")"))) break;
        nl_push(&items, parse_expression(P, with_cond));
        if (!accept_op(P, ",")) break;
        comma = true;
    }
    if (!comma) return items.v[0];
    Node *n = node(P, E_TUPLE, at);
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

/* call arguments after '(': positional, then name=value; into n's kids and kw */
static void parse_args(Parser *P, Node *n) {
    NodeList pos = {0}, kw = {0};
    const char **names = NULL;
    int nnames = 0, cap = 0;
    while (!accept_op(P, ")")) {
        if (pos.n + kw.n) expect_op(P, ",");
        if (accept_op(P, ")")) break;   /* a trailing comma */
        if (peek(P)->k == T_NAME && is_op(&P->toks[P->at + 1], "=")) {
            const char *name = expect_name(P);
            P->at++;
            if (nnames == cap) {
                cap = cap ? cap * 2 : 4;
                const char **nn = arena_alloc(A_cur, sizeof(char *) * (size_t)cap);
                if (nnames) memcpy(nn, names, sizeof(char *) * (size_t)nnames);
                names = nn;
            }
            names[nnames++] = name;
            nl_push(&kw, parse_expression(P, true));
        } else {
            if (kw.n) unexpected(P, peek(P), "a keyword argument (name=value) after keyword arguments");
            if (is_op(peek(P), "*")) syntax_at(P, peek(P)->line, peek(P)->col, "*args calls are not supported");
            nl_push(&pos, parse_expression(P, true));
        }
    }
    n->kids = pos.v; n->nkids = pos.n;
    n->kw = kw.v; n->kw_names = names; n->nkw = kw.n;
}

static Node *parse_primary(Parser *P) {
    Tok *t = peek(P);
    deeper(P, t);
    Node *n;
    if (t->k == T_NAME) {
        P->at++;
        n = node(P, E_LIT, t);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = (Value){.t = V_BOOL, .b = true};
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = (Value){.t = V_BOOL, .b = false};
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = NONE;
        else { n->k = E_NAME; n->name = tok_cstr(t); }
    } else if (t->k == T_STRING) {
        n = node(P, E_LIT, t);
        Buf b = {0};
        while (peek(P)->k == T_STRING) { Str *s = next_tok(P)->s; buf_add(&b, s->p, s->n); }   /* "a" "b" is "ab" */
        n->lit.t = V_STR;
        n->lit.s = str_new(b.p ? b.p : "", b.n);
    } else if (t->k == T_INT || t->k == T_FLOAT) {
        P->at++;
        n = node(P, E_LIT, t);
        n->lit = t->k == T_INT ? (Value){.t = V_INT, .i = t->i} : (Value){.t = V_FLOAT, .f = t->f};
    } else if (is_op(t, "(")) {
        P->at++;
        if (accept_op(P, ")")) { n = node(P, E_TUPLE, t); }
        else {
            n = parse_tuple(P, true, t);
            expect_op(P, ")");
        }
    } else if (is_op(t, "[")) {
        P->at++;
        n = node(P, E_LIST, t);
        NodeList items = {0};
        while (!accept_op(P, "]")) {
            if (items.n) expect_op(P, ",");
            if (accept_op(P, "]")) break;
            nl_push(&items, parse_expression(P, true));
        }
        n->kids = items.v; n->nkids = items.n;
    } else if (is_op(t, "{")) {
        P->at++;
        n = node(P, E_DICT, t);
        NodeList items = {0};
        while (!accept_op(P, "}")) {
            if (items.n) expect_op(P, ",");
            if (accept_op(P, "}")) break;
            nl_push(&items, parse_expression(P, true));
            expect_op(P, ":");
            nl_push(&items, parse_expression(P, true));
        }
        n->kids = items.v; n->nkids = items.n;
    } else {
        unexpected(P, t, "an expression");
    }
    P->depth--;
    return n;
}

/* E_CALL: a the callee, kids and kw the arguments */
static Node *parse_call(Parser *P, const Tok *t, Node *callee) {
    P->at++;
    Node *m = node(P, E_CALL, t);
    m->a = callee;
    parse_args(P, m);
    return m;
}

/* x.name, x[i], x[a:b:c], x(args) */
static Node *parse_postfix(Parser *P, Node *n) {
    for (;;) {
        Tok *t = peek(P);
        if (is_op(t, ".")) {
            P->at++;
            Tok *a = peek(P);
            if (a->k == T_INT) {   /* x.0 is x[0] */
                P->at++;
                Node *m = node(P, E_ITEM, t);
                m->a = n;
                m->b = node(P, E_LIT, a);
                m->b->lit = (Value){.t = V_INT, .i = a->i};
                n = m;
                continue;
            }
            Node *m = node(P, E_ATTR, t);
            m->a = n;
            m->name = expect_name(P);
            n = m;
        } else if (is_op(t, "[")) {
            P->at++;
            Node *parts[3] = {0};
            int nparts = 1;
            bool slice = false;
            for (;;) {
                if (is_op(peek(P), ":")) {
                    if (nparts == 3) unexpected(P, peek(P), "']'");
                    P->at++;
                    slice = true;
                    nparts++;
                    continue;
                }
                if (is_op(peek(P), "]")) break;
                if (parts[nparts - 1]) unexpected(P, peek(P), "':' or ']'");
                parts[nparts - 1] = parse_expression(P, true);
            }
            P->at++;
            Node *m = node(P, slice ? E_SLICE : E_ITEM, t);
            m->a = n;
            if (!slice && !parts[0]) unexpected(P, t, "an index");
            m->b = parts[0]; m->c = parts[1]; m->d = parts[2];
            n = m;
        } else if (is_op(t, "(")) {
            n = parse_call(P, t, n);
        } else {
            return n;
        }
    }
}

/* x | f(args) | g, x is [not] test [arg], and calls after them */
static Node *parse_filter_expr(Parser *P, Node *n) {
    for (;;) {
        Tok *t = peek(P);
        if (is_op(t, "|")) {
            P->at++;
            Node *m = node(P, E_FILTER, t);
            m->a = n;
            m->name = expect_name(P);
            if (accept_op(P, "(")) parse_args(P, m);
            n = m;
        } else if (is_name(t, "is")) {
            P->at++;
            Node *m = node(P, E_TEST, t);
            m->a = n;
            m->negate = accept_name(P, "not");
            m->name = expect_name(P);
            Tok *u = peek(P);
            if (accept_op(P, "(")) parse_args(P, m);
            else if ((u->k == T_NAME || u->k == T_STRING || u->k == T_INT || u->k == T_FLOAT || is_op(u, "[") ||
                      is_op(u, "{")) && !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and") &&
                     !is_name(u, "if") && !is_name(u, "in") && !is_name(u, "not")) {
                if (is_name(u, "is")) syntax_at(P, u->line, u->col, "tests cannot be chained with 'is'");
                m->kids = arena_alloc(A_cur, sizeof(Node *));
                m->kids[0] = parse_postfix(P, parse_primary(P));
                m->nkids = 1;
            }
            n = m;
        } else if (is_op(t, "(")) {
            n = parse_call(P, t, n);
        } else {
            return n;
        }
    }
}

static Node *parse_unary(Parser *P, bool with_filter) {
    Tok *t = peek(P);
    deeper(P, t);
    Node *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        P->at++;
        n = node(P, is_op(t, "-") ? E_NEG : E_POS, t);
        n->a = parse_unary(P, false);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static Node *binary(Parser *P, const Tok *t, int op, Node *a, Node *b) {
    Node *n = node(P, E_BIN, t);
    n->op = op; n->a = a; n->b = b;
    return n;
}
static Node *parse_pow(Parser *P) {
    Node *n = parse_unary(P, true);
    while (is_op(peek(P), "**")) { Tok *t = next_tok(P); n = binary(P, t, 'P', n, parse_unary(P, true)); }
    return n;
}
static Node *parse_math2(Parser *P) {
    Node *n = parse_pow(P);
    for (;;) {
        Tok *t = peek(P);
        int op = is_op(t, "*") ? '*' : is_op(t, "/") ? '/' : is_op(t, "//") ? 'F' : is_op(t, "%") ? '%' : 0;
        if (!op) return n;
        P->at++;
        n = binary(P, t, op, n, parse_pow(P));
    }
}
static Node *parse_concat(Parser *P) {
    Node *n = parse_math2(P);
    while (is_op(peek(P), "~")) { Tok *t = next_tok(P); n = binary(P, t, '~', n, parse_math2(P)); }
    return n;
}
static Node *parse_math1(Parser *P) {
    Node *n = parse_concat(P);
    for (;;) {
        Tok *t = peek(P);
        int op = is_op(t, "+") ? '+' : is_op(t, "-") ? '-' : 0;
        if (!op) return n;
        P->at++;
        n = binary(P, t, op, n, parse_concat(P));
    }
}
static Node *parse_compare(Parser *P) {
    Tok *start = peek(P);
    Node *first = parse_math1(P);
    NodeList rest = {0};
    int ops[64], nops = 0;
    for (;;) {
        Tok *t = peek(P);
        int op = is_op(t, "==") ? CMP_EQ : is_op(t, "!=") ? CMP_NE : is_op(t, "<") ? CMP_LT : is_op(t, "<=") ? CMP_LE
               : is_op(t, ">") ? CMP_GT : is_op(t, ">=") ? CMP_GE : is_name(t, "in") ? CMP_IN : -1;
        if (op < 0 && is_name(t, "not") && is_name(&P->toks[P->at + 1], "in")) { op = CMP_NOT_IN; P->at++; }
        if (op < 0) break;
        P->at++;
        if (nops == 64) syntax_at(P, t->line, t->col, "more than 64 comparisons in a chain");
        ops[nops++] = op;
        nl_push(&rest, parse_math1(P));
    }
    if (!nops) return first;
    Node *n = node(P, E_CMP, start);
    n->a = first;
    n->kids = rest.v; n->nkids = rest.n;
    n->ops = arena_alloc(A_cur, sizeof(int) * (size_t)nops);
    memcpy(n->ops, ops, sizeof(int) * (size_t)nops);
    return n;
}
static Node *parse_not(Parser *P) {
    Tok *t = peek(P);
    if (is_name(t, "not")) {
        P->at++;
        deeper(P, t);
        Node *n = node(P, E_NOT, t);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}
static Node *parse_and(Parser *P) {
    Node *n = parse_not(P);
    while (is_name(peek(P), "and")) {
        Tok *t = next_tok(P);
        Node *m = node(P, E_AND, t);
        m->a = n; m->b = parse_not(P);
        n = m;
    }
    return n;
}
static Node *parse_or(Parser *P) {
    Node *n = parse_and(P);
    while (is_name(peek(P), "or")) {
        Tok *t = next_tok(P);
        Node *m = node(P, E_OR, t);
        m->a = n; m->b = parse_and(P);
        n = m;
    }
    return n;
}
/* E_COND: a if b [else c] (c NULL: undefined) */
static Node *parse_expression(Parser *P, bool with_cond) {
    Tok *t0 = peek(P);
    deeper(P, t0);
    Node *n = parse_or(P);
    while (with_cond && is_name(peek(P), "if")) {
        Tok *t = next_tok(P);
        Node *m = node(P, E_COND, t);
        m->a = n;
        m->b = parse_or(P);
        if (accept_name(P, "else")) m->c = parse_expression(P, true);
        n = m;
    }
    P->depth--;
    return n;
}

/* ---- statements */

static Node *parse_body(Parser *P, const char *const *ends, int *which, const Tok *opened, const char *what);

static void end_tag(Parser *P) { expect(P, T_BLOCK_END); }

/* the statements up to {% END %}, that tag consumed */
static Node *body_until(Parser *P, const char *end, const Tok *opened, const char *what) {
    const char *const ends[] = {end, NULL};
    int which;
    Node *body = parse_body(P, ends, &which, opened, what);
    end_tag(P);
    return body;
}

/* a for's or set's targets: NAME or NAME, NAME... (E_NAME nodes) */
static int parse_targets(Parser *P, Node ***out) {
    NodeList l = {0};
    do {
        Tok *t = peek(P);
        Node *n = node(P, E_NAME, t);
        n->name = expect_name(P);
        nl_push(&l, n);
    } while (accept_op(P, ","));
    *out = l.v;
    return l.n;
}

/* N_FOR: kids targets, a the sequence, d the filter (or NULL), b the body, c the else body (or NULL) */
static Node *parse_for(Parser *P, const Tok *t) {
    Node *n = node(P, N_FOR, t);
    n->nkids = parse_targets(P, &n->kids);
    if (!accept_name(P, "in")) unexpected(P, peek(P), "'in'");
    n->a = parse_tuple(P, false, peek(P));
    if (accept_name(P, "if")) n->d = parse_expression(P, true);
    if (accept_name(P, "recursive")) syntax_at(P, t->line, t->col, "recursive loops are not supported");
    end_tag(P);
    static const char *const ends[] = {"endfor", "else", NULL};
    int which;
    n->b = parse_body(P, ends, &which, t, "for");
    end_tag(P);
    if (which == 1) {
        n->c = body_until(P, "endfor", t, "for");
    }
    return n;
}

/* N_IF: a the condition, b the body, c the else (N_SEQ, or a N_IF for elif, or NULL) */
static Node *parse_if(Parser *P, const Tok *t) {
    Node *n = node(P, N_IF, t);
    n->a = parse_expression(P, true);
    end_tag(P);
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    int which;
    n->b = parse_body(P, ends, &which, t, "if");
    if (which == 1) {
        n->c = parse_if(P, &P->toks[P->at - 1]);   /* the elif's own chain takes the endif */
        return n;
    }
    end_tag(P);
    if (which == 2) {
        n->c = body_until(P, "endif", t, "if");
    }
    return n;
}

/* N_SET: kids targets (or a: ns.attr's E_ATTR), b the value. N_SET_BLOCK: name, b the body */
static Node *parse_set(Parser *P, const Tok *t) {
    Tok *first = peek(P);
    if (first->k == T_NAME && is_op(&P->toks[P->at + 1], ".")) {
        Node *n = node(P, N_SET, t);
        Node *target = node(P, E_ATTR, first);
        Node *obj = node(P, E_NAME, first);
        obj->name = expect_name(P);
        P->at++;
        target->a = obj;
        target->name = expect_name(P);
        n->a = target;
        expect_op(P, "=");
        n->b = parse_tuple(P, true, peek(P));
        end_tag(P);
        return n;
    }
    Node *n = node(P, N_SET, t);
    n->nkids = parse_targets(P, &n->kids);
    if (accept_op(P, "=")) {
        n->b = parse_tuple(P, true, peek(P));
        end_tag(P);
        return n;
    }
    if (n->nkids != 1) unexpected(P, peek(P), "'='");
    if (is_op(peek(P), "|")) syntax_at(P, peek(P)->line, peek(P)->col, "a filtered block set is not supported");
    end_tag(P);
    n->k = N_SET_BLOCK;
    n->name = n->kids[0]->name;
    n->b = body_until(P, "endset", t, "set");
    return n;
}

/* parameters of a macro or a call block's caller: NAME or NAME=default (E_NAME nodes, a: the default) */
static void parse_params(Parser *P, Node *n) {
    NodeList l = {0};
    while (!accept_op(P, ")")) {
        if (l.n) expect_op(P, ",");
        if (accept_op(P, ")")) break;
        Tok *t = peek(P);
        Node *p = node(P, E_NAME, t);
        p->name = expect_name(P);
        if (accept_op(P, "=")) p->a = parse_expression(P, true);
        nl_push(&l, p);
    }
    n->kids = l.v;
    n->nkids = l.n;
}

static Node *parse_statement(Parser *P) {
    Tok *begin = next_tok(P);   /* {% */
    Tok *t = peek(P);
    if (t->k != T_NAME) unexpected(P, t, "a statement");
    P->at++;
    deeper(P, t);
    Node *n;
    if (is_name(t, "for")) n = parse_for(P, t);
    else if (is_name(t, "if")) n = parse_if(P, t);
    else if (is_name(t, "set")) n = parse_set(P, t);
    else if (is_name(t, "macro")) {   /* N_MACRO: name, kids parameters, b the body */
        n = node(P, N_MACRO, t);
        n->name = expect_name(P);
        expect_op(P, "(");
        parse_params(P, n);
        end_tag(P);
        n->b = body_until(P, "endmacro", t, "macro");
    } else if (is_name(t, "call")) {   /* N_CALL_BLOCK: kids the caller's parameters, a the call, b the body */
        n = node(P, N_CALL_BLOCK, t);
        if (accept_op(P, "(")) parse_params(P, n);
        n->a = parse_expression(P, true);
        if (n->a->k != E_CALL) syntax_at(P, t->line, t->col, "a call block needs a call (name(args))");
        end_tag(P);
        n->b = body_until(P, "endcall", t, "call");
    } else if (is_name(t, "filter")) {   /* N_FILTER_BLOCK: a the filters (the innermost's a NULL), b the body */
        n = node(P, N_FILTER_BLOCK, t);
        Node *chain = NULL;
        do {
            Tok *f = peek(P);
            Node *m = node(P, E_FILTER, f);
            m->a = chain;
            m->name = expect_name(P);
            if (accept_op(P, "(")) parse_args(P, m);
            chain = m;
        } while (accept_op(P, "|"));
        n->a = chain;
        end_tag(P);
        n->b = body_until(P, "endfilter", t, "filter");
    } else if (is_name(t, "generation")) {   /* transformers' tag: its body is rendered as it is */
        end_tag(P);
        n = body_until(P, "endgeneration", t, "generation");
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        n = node(P, is_name(t, "break") ? N_BREAK : N_CONTINUE, t);
        end_tag(P);
    } else {
        (void)begin;
        syntax_at(P, t->line, t->col, "unknown tag '%.*s'%s", (int)(t->n > 40 ? 40 : t->n), t->p,
                  is_name(t, "include") || is_name(t, "extends") || is_name(t, "import") || is_name(t, "from") ||
                  is_name(t, "raw") || is_name(t, "block") || is_name(t, "with") || is_name(t, "do")
                      ? " (not supported)" : "");
    }
    P->depth--;
    return n;
}

/* statements until {% END %} for END one of ends (which: its index; the tag's name consumed, its rest is the
 * caller's) or the template's end where ends is NULL */
static Node *parse_body(Parser *P, const char *const *ends, int *which, const Tok *opened, const char *what) {
    Node *seq = node(P, N_SEQ, opened);
    NodeList l = {0};
    for (;;) {
        Tok *t = peek(P);
        if (t->k == T_EOF) {
            if (!ends) break;
            syntax_at(P, opened->line, opened->col, "'%s' is never closed (expected '%s')", what, ends[0]);
        }
        if (t->k == T_TEXT) {
            P->at++;
            Node *n = node(P, N_TEXT, t);
            n->lit.t = V_STR;
            n->lit.s = str_new(t->p, t->n);
            nl_push(&l, n);
        } else if (t->k == T_VAR_BEGIN) {
            P->at++;
            Node *n = node(P, N_OUT, t);
            n->a = parse_tuple(P, true, t);
            expect(P, T_VAR_END);
            nl_push(&l, n);
        } else if (t->k == T_BLOCK_BEGIN) {
            Tok *kw = &P->toks[P->at + 1];
            int w = -1;
            for (int i = 0; ends && ends[i]; i++) if (is_name(kw, ends[i])) w = i;
            if (w >= 0) { P->at += 2; *which = w; break; }
            if (kw->k == T_NAME && (kw->n > 3 && !memcmp(kw->p, "end", 3) ? true : is_name(kw, "else") ||
                                                                               is_name(kw, "elif")))
                syntax_at(P, kw->line, kw->col, "unexpected '%.*s'%s%s%s", (int)(kw->n > 40 ? 40 : kw->n), kw->p,
                          ends ? " (expected '" : "", ends ? ends[0] : "", ends ? "')" : "");
            nl_push(&l, parse_statement(P));
        } else {
            unexpected(P, t, "text or a tag");
        }
    }
    seq->kids = l.v;
    seq->nkids = l.n;
    return seq;
}

/* ---------------------------------------------------------------- renderer */

/* Names in scope: a frame per for loop, macro call and call block; `set` writes the innermost, lookups walk out.
 * jinja2's rule that a set inside a loop does not leak out of it follows. */
struct Frame { Frame *parent; int n, cap; const char **names; Value *vals; };

static Frame *frame_new(Frame *parent) {
    Frame *f = arena_alloc(A_cur, sizeof *f);
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}
static void frame_set(Frame *f, const char *name, Value v) {
    for (int i = 0; i < f->n; i++) if (!strcmp(f->names[i], name)) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        const char **nn = arena_alloc(A_cur, sizeof(char *) * (size_t)cap);
        Value *nv = arena_alloc(A_cur, sizeof(Value) * (size_t)cap);
        if (f->n) {
            memcpy(nn, f->names, sizeof(char *) * (size_t)f->n);
            memcpy(nv, f->vals, sizeof(Value) * (size_t)f->n);
        }
        f->names = nn; f->vals = nv; f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

/* the global functions */
#define JINJA_FUNCS(X) X(RAISE_EXCEPTION, "raise_exception") X(STRFTIME_NOW, "strftime_now") \
    X(NAMESPACE, "namespace") X(DICT, "dict") X(RANGE, "range") X(CALLER_BODY, "")
#define FUNC_ENUM(e, s) F_##e,
enum { JINJA_FUNCS(FUNC_ENUM) F_COUNT };
#define FUNC_NAME(e, s) s,
static const char *const func_names[] = {JINJA_FUNCS(FUNC_NAME)};

static Value lookup(Frame *f, const char *name) {
    for (; f; f = f->parent)
        for (int i = f->n - 1; i >= 0; i--) if (!strcmp(f->names[i], name)) return f->vals[i];
    for (int i = 0; i < F_CALLER_BODY; i++)
        if (!strcmp(name, func_names[i])) return (Value){.t = V_FUNC, .id = i};
    return UNDEF;
}

typedef enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE } Flow;
static Flow render_seq(const Node *n, Frame *f, Buf *out);
static Value eval(const Node *n, Frame *f);

/* a call's evaluated arguments */
typedef struct { Value *pos; int npos; const char **kw_names; Value *kw; int nkw; } Args;

static Args eval_args(const Node *n, Frame *f, int skip) {
    Args a = {0};
    a.npos = n->nkids - skip;
    a.pos = arena_alloc(A_cur, sizeof(Value) * (size_t)(a.npos + 1));
    for (int i = 0; i < a.npos; i++) a.pos[i] = eval(n->kids[i + skip], f);
    a.nkw = n->nkw;
    a.kw_names = n->kw_names;
    a.kw = arena_alloc(A_cur, sizeof(Value) * (size_t)(a.nkw + 1));
    for (int i = 0; i < a.nkw; i++) a.kw[i] = eval(n->kw[i], f);
    return a;
}
/* the argument at position i or named name, else dflt */
static Value arg(const Args *a, int i, const char *name, Value dflt) {
    if (i >= 0 && i < a->npos) return a->pos[i];
    for (int k = 0; k < a->nkw; k++) if (name && !strcmp(a->kw_names[k], name)) return a->kw[k];
    return dflt;
}

static Str *need_str(Value v, const char *what) {
    if (v.t != V_STR) FAIL("%s: expected a string, got %s", what, vtype_names[v.t]);
    return v.s;
}

/* a sequence as a list of items: a list's, a dict's keys, a string's characters; Undefined is empty */
static List *iterate(Value v, const char *what) {
    switch (v.t) {
    case V_LIST: return v.l;
    case V_DICT: {
        List *l = list_new(v.d->n);
        for (int i = 0; i < v.d->n; i++) list_push(l, v.d->k[i]);
        return l;
    }
    case V_STR: {
        List *l = list_new((int)(v.s->n < 1024 ? v.s->n : 1024));
        for (size_t i = 0; i < v.s->n;) {
            size_t j = utf8_offset(v.s->p + i, v.s->n - i, 1);
            list_push(l, v_str(v.s->p + i, j));
            i += j;
            step();
        }
        return l;
    }
    case V_UNDEF: return list_new(0);
    default: FAIL("%s'%s' object is not iterable", what, vtype_names[v.t]);
    }
}

static int64_t length_of(Value v) {
    switch (v.t) {
    case V_STR: return (int64_t)utf8_len(v.s->p, v.s->n);
    case V_LIST: return v.l->n;
    case V_DICT: case V_NS: return v.d->n;
    case V_UNDEF: return 0;
    default: FAIL("object of type '%s' has no len()", vtype_names[v.t]);
    }
}

/* ---- Python's str methods (ASCII whitespace and case; utf8proc for the case of other letters) */

/* Python's str.isspace of the character p[0..n): Unicode's White_Space and the separators U+001C..U+001F */
static bool py_space(const char *p, size_t n) {
    utf8proc_int32_t c;
    if (utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &c) <= 0) return false;
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool in_chars(const Str *chars, const char *p, size_t n) {
    if (!chars) return py_space(p, n);
    for (size_t i = 0; i + n <= chars->n;) {
        size_t k = utf8_offset(chars->p + i, chars->n - i, 1);
        if (k == n && !memcmp(chars->p + i, p, n)) return true;
        i += k;
    }
    return false;
}
/* strip(chars): which ends, 1 left, 2 right */
static Value str_strip(const Str *s, const Str *chars, int ends) {
    size_t a = 0, b = s->n;
    while ((ends & 1) && a < b) {
        size_t k = utf8_offset(s->p + a, b - a, 1);
        if (!in_chars(chars, s->p + a, k)) break;
        a += k;
    }
    while ((ends & 2) && b > a) {
        size_t k = 1;
        while (k < b - a && ((unsigned char)s->p[b - k] & 0xC0) == 0x80) k++;
        if (!in_chars(chars, s->p + b - k, k)) break;
        b -= k;
    }
    return v_str(s->p + a, b - a);
}

static Value str_case(const Str *s, int how) {   /* 0 lower, 1 upper, 2 title (Python's), 3 capitalize */
    Buf b = {0};
    bool prev_cased = false;
    for (size_t i = 0; i < s->n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s->p + i, (utf8proc_ssize_t)(s->n - i), &cp);
        if (k <= 0) { buf_add(&b, s->p + i, 1); i++; continue; }
        bool upper = how == 1 || (how == 2 && !prev_cased) || (how == 3 && i == 0);
        utf8proc_int32_t to = upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
        bool cased = utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
        prev_cased = cased;
        if (cp == 0xDF && upper) {   /* Python's full mapping where utf8proc's simple one differs: ß is SS (Ss) */
            buf_str(&b, how == 1 ? "SS" : "Ss");
            i += (size_t)k;
            continue;
        }
        utf8proc_uint8_t u[4];
        utf8proc_ssize_t m = utf8proc_encode_char(to, u);
        buf_add(&b, (const char *)u, (size_t)m);
        i += (size_t)k;
    }
    return buf_value(&b);
}

static Value str_replace(const Str *s, const Str *old, const Str *new_, int64_t count) {
    Buf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old->n == 0) {   /* Python: the new text between every two characters and at both ends */
        for (;;) {
            if (count < 0 || done < count) { buf_add(&b, new_->p, new_->n); done++; }
            if (i >= s->n) break;
            size_t k = utf8_offset(s->p + i, s->n - i, 1);
            buf_add(&b, s->p + i, k);
            i += k;
        }
        return buf_value(&b);
    }
    while (i < s->n) {
        if ((count < 0 || done < count) && i + old->n <= s->n && !memcmp(s->p + i, old->p, old->n)) {
            buf_add(&b, new_->p, new_->n);
            i += old->n;
            done++;
        } else {
            buf_add(&b, s->p + i, 1);
            i++;
        }
    }
    return buf_value(&b);
}

/* str.split(sep=None, maxsplit=-1) */
static Value str_split(const Str *s, const Str *sep, int64_t maxsplit) {
    List *l = list_new(4);
    size_t i = 0, n = s->n;
    if (!sep) {   /* runs of whitespace (Python's isspace) separate, none at the ends */
#define CH(at) utf8_offset(s->p + (at), n - (at), 1)
        for (;;) {
            while (i < n && py_space(s->p + i, CH(i))) i += CH(i);
            if (i >= n) break;
            if (maxsplit >= 0 && l->n >= maxsplit) {
                Value rest = str_strip(str_new(s->p + i, n - i), NULL, 2);
                list_push(l, rest);
                break;
            }
            size_t j = i;
            while (j < n && !py_space(s->p + j, CH(j))) j += CH(j);
            list_push(l, v_str(s->p + i, j - i));
            step();
            i = j;
        }
#undef CH
        return v_list(l);
    }
    if (sep->n == 0) FAIL("empty separator");
    for (;;) {
        const char *hit = NULL;
        if (maxsplit < 0 || l->n < maxsplit)
            for (size_t j = i; j + sep->n <= n; j++) if (!memcmp(s->p + j, sep->p, sep->n)) { hit = s->p + j; break; }
        if (!hit) { list_push(l, v_str(s->p + i, n - i)); break; }
        list_push(l, v_str(s->p + i, (size_t)(hit - s->p) - i));
        step();
        i = (size_t)(hit - s->p) + sep->n;
    }
    return v_list(l);
}

static bool starts_ends(const Str *s, Value affix, bool end) {
    if (affix.t == V_LIST) {
        for (int i = 0; i < affix.l->n; i++) if (starts_ends(s, affix.l->v[i], end)) return true;
        return false;
    }
    const Str *a = need_str(affix, end ? "endswith" : "startswith");
    return a->n <= s->n && !memcmp(s->p + (end ? s->n - a->n : 0), a->p, a->n);
}

static Value join(List *l, const Str *sep, const char *attribute) {
    Buf b = {0};
    for (int i = 0; i < l->n; i++) {
        if (i) buf_add(&b, sep->p, sep->n);
        Value v = l->v[i];
        if (attribute) {
            int k = v.t == V_DICT ? dict_index_str(v.d, attribute, strlen(attribute)) : -1;
            v = k >= 0 ? v.d->v[k] : UNDEF;
        }
        to_text(&b, v);
        step();
    }
    return buf_value(&b);
}

/* ---- methods: x.name(args) on a str, dict, list or loop */
#define JINJA_METHODS(X) \
    X(STARTSWITH, V_STR, "startswith") X(ENDSWITH, V_STR, "endswith") X(SPLIT, V_STR, "split") \
    X(RSPLIT, V_STR, "rsplit") X(STRIP, V_STR, "strip") X(LSTRIP, V_STR, "lstrip") X(RSTRIP, V_STR, "rstrip") \
    X(UPPER, V_STR, "upper") X(LOWER, V_STR, "lower") X(TITLE, V_STR, "title") X(CAPITALIZE, V_STR, "capitalize") \
    X(REPLACE, V_STR, "replace") X(FIND, V_STR, "find") X(COUNT, V_STR, "count") X(FORMAT, V_STR, "format") \
    X(JOIN, V_STR, "join") X(SPLITLINES, V_STR, "splitlines") X(ISDIGIT, V_STR, "isdigit") \
    X(ISSPACE, V_STR, "isspace") X(ITEMS, V_DICT, "items") X(KEYS, V_DICT, "keys") X(VALUES, V_DICT, "values") \
    X(GET, V_DICT, "get") X(INDEX, V_LIST, "index") X(LIST_COUNT, V_LIST, "count") X(CYCLE, V_LOOP, "cycle")
#define METHOD_ENUM(e, t, s) M_##e,
enum { JINJA_METHODS(METHOD_ENUM) METHOD_COUNT };
#define METHOD_TYPE(e, t, s) t,
static const VType method_types[] = {JINJA_METHODS(METHOD_TYPE)};
#define METHOD_NAME(e, t, s) s,
static const char *const method_names[] = {JINJA_METHODS(METHOD_NAME)};

static Value find_method(Value self, const char *name) {
    for (int m = 0; m < METHOD_COUNT; m++)
        if (method_types[m] == (self.t == V_NS ? V_DICT : self.t) && !strcmp(method_names[m], name)) {
            Value v = {.t = V_METHOD, .id = m};
            v.self = arena_alloc(A_cur, sizeof(Value));
            *v.self = self;
            return v;
        }
    return UNDEF;
}

static Value call_method(int m, Value self, const Args *a) {
    Value none_v = NONE;
    switch (m) {
    case M_STARTSWITH: case M_ENDSWITH: return v_bool(starts_ends(self.s, arg(a, 0, "prefix", UNDEF), m == M_ENDSWITH));
    case M_SPLIT: case M_RSPLIT: {
        Value sep = arg(a, 0, "sep", none_v), max = arg(a, 1, "maxsplit", v_int(-1));
        if (m == M_RSPLIT && as_int(max) >= 0) FAIL("rsplit with maxsplit is not supported");
        return str_split(self.s, sep.t == V_NONE ? NULL : need_str(sep, "split"), as_int(max));
    }
    case M_STRIP: case M_LSTRIP: case M_RSTRIP: {
        Value chars = arg(a, 0, "chars", none_v);
        return str_strip(self.s, chars.t == V_NONE ? NULL : need_str(chars, method_names[m]),
                         m == M_STRIP ? 3 : m == M_LSTRIP ? 1 : 2);
    }
    case M_UPPER: return str_case(self.s, 1);
    case M_LOWER: return str_case(self.s, 0);
    case M_TITLE: return str_case(self.s, 2);
    case M_CAPITALIZE: return str_case(self.s, 3);
    case M_REPLACE:
        return str_replace(self.s, need_str(arg(a, 0, "old", UNDEF), "replace"),
                           need_str(arg(a, 1, "new", UNDEF), "replace"), as_int(arg(a, 2, "count", v_int(-1))));
    case M_FIND: case M_COUNT: {
        const Str *sub = need_str(arg(a, 0, "sub", UNDEF), method_names[m]);
        int64_t count = 0;
        for (size_t i = 0; i + sub->n <= self.s->n;) {
            if (!memcmp(self.s->p + i, sub->p, sub->n)) {
                if (m == M_FIND) return v_int((int64_t)utf8_len(self.s->p, i));
                count++;
                i += sub->n ? sub->n : 1;
            } else {
                i++;
            }
        }
        return v_int(m == M_FIND ? -1 : count);
    }
    case M_FORMAT: {   /* "{}" and "{0}" fields only */
        Buf b = {0};
        int next = 0;
        for (size_t i = 0; i < self.s->n; i++) {
            char c = self.s->p[i];
            if (c == '{' && i + 1 < self.s->n && self.s->p[i + 1] == '{') { buf_str(&b, "{"); i++; continue; }
            if (c == '}' && i + 1 < self.s->n && self.s->p[i + 1] == '}') { buf_str(&b, "}"); i++; continue; }
            if (c != '{') { buf_add(&b, &c, 1); continue; }
            size_t j = i + 1;
            int idx = -1;
            while (j < self.s->n && is_digit(self.s->p[j]) && idx < 100000)
                idx = (idx < 0 ? 0 : idx * 10) + self.s->p[j++] - '0';
            if (j >= self.s->n || self.s->p[j] != '}') FAIL("format: only {} and {N} fields are supported");
            if (idx < 0) idx = next++;
            if (idx >= a->npos) FAIL("Replacement index %d out of range for positional args tuple", idx);
            to_text(&b, a->pos[idx]);
            i = j;
        }
        return buf_value(&b);
    }
    case M_JOIN: return join(iterate(arg(a, 0, "iterable", UNDEF), ""), self.s, NULL);
    case M_SPLITLINES: {
        List *l = list_new(4);
        size_t i = 0;
        while (i < self.s->n) {
            size_t j = i;
            while (j < self.s->n && self.s->p[j] != '\n' && self.s->p[j] != '\r') j++;
            list_push(l, v_str(self.s->p + i, j - i));
            if (j < self.s->n && self.s->p[j] == '\r' && j + 1 < self.s->n && self.s->p[j + 1] == '\n') j++;
            i = j + 1;
        }
        return v_list(l);
    }
    case M_ISDIGIT: case M_ISSPACE: {
        bool ok = self.s->n > 0;
        for (size_t i = 0; i < self.s->n; i++) ok &= m == M_ISDIGIT ? is_digit(self.s->p[i]) : is_space(self.s->p[i]);
        return v_bool(ok);
    }
    case M_ITEMS: case M_KEYS: case M_VALUES: {
        List *l = list_new(self.d->n);
        for (int i = 0; i < self.d->n; i++) {
            if (m == M_KEYS) { list_push(l, self.d->k[i]); continue; }
            if (m == M_VALUES) { list_push(l, self.d->v[i]); continue; }
            List *pair = list_new(2);
            pair->tuple = true;
            list_push(pair, self.d->k[i]);
            list_push(pair, self.d->v[i]);
            list_push(l, v_list(pair));
        }
        return v_list(l);
    }
    case M_GET: {
        int i = dict_index(self.d, arg(a, 0, "key", UNDEF));
        return i >= 0 ? self.d->v[i] : arg(a, 1, "default", NONE);
    }
    case M_INDEX: case M_LIST_COUNT: {
        Value x = arg(a, 0, "value", UNDEF);
        int64_t count = 0;
        for (int i = 0; i < self.l->n; i++)
            if (equal(self.l->v[i], x)) { if (m == M_INDEX) return v_int(i); count++; }
        if (m == M_INDEX) FAIL("value is not in list");
        return v_int(count);
    }
    case M_CYCLE:
        if (a->npos == 0) FAIL("no items for cycling given");
        return a->pos[self.loop->index % a->npos];
    }
    FAIL("unknown method");
}

/* ---- attribute and item access, as jinja2's getattr / getitem: a missing one is Undefined, but anything of an
 * Undefined raises */

static Value get_item(Value obj, Value key);

static Value get_attr(Value obj, const char *name) {
    if (obj.t == V_UNDEF) FAIL("'%s' is undefined", name);
    if (obj.t == V_LOOP) {
        Loop *L = obj.loop;
        int n = L->items->n, i = L->index;
        if (!strcmp(name, "index")) return v_int(i + 1);
        if (!strcmp(name, "index0")) return v_int(i);
        if (!strcmp(name, "revindex")) return v_int(n - i);
        if (!strcmp(name, "revindex0")) return v_int(n - i - 1);
        if (!strcmp(name, "first")) return v_bool(i == 0);
        if (!strcmp(name, "last")) return v_bool(i == n - 1);
        if (!strcmp(name, "length")) return v_int(n);
        if (!strcmp(name, "depth")) return v_int(L->depth);
        if (!strcmp(name, "depth0")) return v_int(L->depth - 1);
        if (!strcmp(name, "previtem")) return i > 0 ? L->items->v[i - 1] : UNDEF;
        if (!strcmp(name, "nextitem")) return i + 1 < n ? L->items->v[i + 1] : UNDEF;
        return find_method(obj, name);
    }
    Value m = find_method(obj, name);
    if (m.t != V_UNDEF) return m;
    if (obj.t == V_DICT || obj.t == V_NS) {
        int i = dict_index_str(obj.d, name, strlen(name));
        return i >= 0 ? obj.d->v[i] : UNDEF;
    }
    return UNDEF;
}

/* Python's index i of a sequence of n: negative from the end; -1 where out of range */
static int64_t seq_index(int64_t i, int64_t n) {
    if (i < 0) i += n;
    return i < 0 || i >= n ? -1 : i;
}

static Value get_item(Value obj, Value key) {
    if (obj.t == V_UNDEF) FAIL("an item of an undefined value");
    if ((obj.t == V_LIST || obj.t == V_STR) && (key.t == V_INT || key.t == V_BOOL)) {
        if (obj.t == V_LIST) {
            int64_t i = seq_index(as_int(key), obj.l->n);
            return i < 0 ? UNDEF : obj.l->v[i];
        }
        int64_t i = seq_index(as_int(key), (int64_t)utf8_len(obj.s->p, obj.s->n));
        if (i < 0) return UNDEF;
        size_t at = utf8_offset(obj.s->p, obj.s->n, (size_t)i);
        return v_str(obj.s->p + at, utf8_offset(obj.s->p + at, obj.s->n - at, 1));
    }
    if (obj.t == V_DICT || obj.t == V_NS) {
        int i = dict_index(obj.d, key);
        if (i >= 0) return obj.d->v[i];
    }
    if (key.t == V_STR) return get_attr(obj, key.s->p);   /* jinja2 tries the attribute when the item is missing */
    return UNDEF;
}

/* a slice's bound as Python clamps it: missing, the end the step starts or stops at; negative, from the end */
static int64_t slice_bound(Value v, int64_t n, int64_t step, bool start) {
    if (v.t == V_NONE || v.t == V_UNDEF) return start ? (step > 0 ? 0 : n - 1) : (step > 0 ? n : -1);
    if (!is_number(v) || v.t == V_FLOAT) FAIL("slice indices must be integers or None");
    int64_t i = as_int(v);
    if (i < 0) { i += n; if (i < 0) i = step > 0 ? 0 : -1; }
    else if (i >= n) i = step > 0 ? n : n - 1;
    return i;
}

/* x[a:b:c] of a list or string (by code point), Python's rules for missing and negative bounds */
static Value slice(Value obj, Value va, Value vb, Value vc) {
    if (obj.t != V_LIST && obj.t != V_STR) FAIL("'%s' object is not subscriptable", vtype_names[obj.t]);
    int64_t n = obj.t == V_LIST ? obj.l->n : (int64_t)utf8_len(obj.s->p, obj.s->n);
    int64_t st = vc.t == V_NONE || vc.t == V_UNDEF ? 1 : as_int(vc);
    if (st == 0) FAIL("slice step cannot be zero");
    int64_t lo = slice_bound(va, n, st, true), hi = slice_bound(vb, n, st, false);
    if (obj.t == V_STR && st == 1) {
        if (hi < lo) hi = lo;
        size_t a = utf8_offset(obj.s->p, obj.s->n, (size_t)lo), b = utf8_offset(obj.s->p, obj.s->n, (size_t)hi);
        return v_str(obj.s->p + a, b - a);
    }
    List *src = obj.t == V_LIST ? obj.l : iterate(obj, "");
    List *l = list_new(4);
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) list_push(l, src->v[i]);
    if (obj.t == V_LIST) { l->tuple = obj.l->tuple; return v_list(l); }
    Buf b = {0};
    for (int i = 0; i < l->n; i++) buf_add(&b, l->v[i].s->p, l->v[i].s->n);
    return buf_value(&b);
}

/* ---- tests: x is name(args) */
#define JINJA_TESTS(X) X(DEFINED, "defined") X(UNDEFINED, "undefined") X(NONE, "none") X(BOOLEAN, "boolean") \
    X(TRUE, "true") X(FALSE, "false") X(INTEGER, "integer") X(FLOAT, "float") X(NUMBER, "number") \
    X(STRING, "string") X(MAPPING, "mapping") X(ITERABLE, "iterable") X(SEQUENCE, "sequence") \
    X(CALLABLE, "callable") X(EQ, "eq") X(EQUALTO, "equalto") X(EQEQ, "==") X(NE, "ne") X(NEQ, "!=") X(GT, "gt") \
    X(GTOP, ">") X(GE, "ge") X(GEOP, ">=") X(LT, "lt") X(LTOP, "<") X(LE, "le") X(LEOP, "<=") X(IN, "in") \
    X(DIVISIBLEBY, "divisibleby") X(EVEN, "even") X(ODD, "odd") X(LOWER, "lower") X(UPPER, "upper") \
    X(SAMEAS, "sameas")
#define TEST_ENUM(e, s) TEST_##e,
enum { JINJA_TESTS(TEST_ENUM) TEST_COUNT };
#define TEST_NAME(e, s) s,
static const char *const test_names[] = {JINJA_TESTS(TEST_NAME)};

static bool contains(Value container, Value x);

static bool run_test(const char *name, Value v, const Args *a) {
    int t = 0;
    while (t < TEST_COUNT && strcmp(test_names[t], name)) t++;
    Value o = arg(a, 0, NULL, UNDEF);
    switch (t) {
    case TEST_DEFINED: return v.t != V_UNDEF;
    case TEST_UNDEFINED: return v.t == V_UNDEF;
    case TEST_NONE: return v.t == V_NONE;
    case TEST_BOOLEAN: return v.t == V_BOOL;
    case TEST_TRUE: return v.t == V_BOOL && v.b;
    case TEST_FALSE: return v.t == V_BOOL && !v.b;
    case TEST_INTEGER: return v.t == V_INT;
    case TEST_FLOAT: return v.t == V_FLOAT;
    case TEST_NUMBER: return is_number(v);
    case TEST_STRING: return v.t == V_STR;
    case TEST_MAPPING: return v.t == V_DICT;
    case TEST_ITERABLE: return v.t == V_STR || v.t == V_LIST || v.t == V_DICT;
    case TEST_SEQUENCE: return v.t == V_STR || v.t == V_LIST || v.t == V_DICT;
    case TEST_CALLABLE: return v.t == V_MACRO || v.t == V_FUNC || v.t == V_METHOD;
    case TEST_EQ: case TEST_EQUALTO: case TEST_EQEQ: return equal(v, o);
    case TEST_NE: case TEST_NEQ: return !equal(v, o);
    case TEST_GT: case TEST_GTOP: return compare(v, o) > 0;
    case TEST_GE: case TEST_GEOP: return compare(v, o) >= 0;
    case TEST_LT: case TEST_LTOP: return compare(v, o) < 0;
    case TEST_LE: case TEST_LEOP: return compare(v, o) <= 0;
    case TEST_IN: return contains(o, v);
    case TEST_DIVISIBLEBY:
        if (!is_number(v) || !is_number(o) || as_int(o) == 0) FAIL("divisibleby: expected numbers");
        return as_int(v) % as_int(o) == 0;
    case TEST_EVEN: case TEST_ODD:
        if (v.t != V_INT) FAIL("%s: expected an integer", name);
        return (v.i % 2 == 0) == (t == TEST_EVEN);
    case TEST_LOWER: case TEST_UPPER: {
        if (v.t != V_STR) return false;
        Value c = str_case(v.s, t == TEST_UPPER);
        return equal(c, v);
    }
    case TEST_SAMEAS: return v.t == o.t && (v.t == V_NONE || v.t == V_BOOL ? equal(v, o) : v.l == o.l);
    }
    FAIL("no test named '%s'", name);
}

static bool contains(Value c, Value x) {
    switch (c.t) {
    case V_STR: {
        const Str *s = need_str(x, "'in <string>'");
        if (s->n == 0) return true;
        for (size_t i = 0; i + s->n <= c.s->n; i++) if (!memcmp(c.s->p + i, s->p, s->n)) return true;
        return false;
    }
    case V_LIST: for (int i = 0; i < c.l->n; i++) if (equal(c.l->v[i], x)) return true; return false;
    case V_DICT: case V_NS: return dict_index(c.d, x) >= 0;
    case V_UNDEF: return false;
    default: FAIL("argument of type '%s' is not iterable", vtype_names[c.t]);
    }
}

/* ---- filters: x | name(args) */
#define JINJA_FILTERS(X) X(ABS, "abs") X(CAPITALIZE, "capitalize") X(COUNT, "count") X(DEFAULT, "default") \
    X(D, "d") X(DICTSORT, "dictsort") X(ESCAPE, "escape") X(E, "e") X(FIRST, "first") X(FLOAT, "float") \
    X(INDENT, "indent") X(INT, "int") X(ITEMS, "items") X(JOIN, "join") X(LAST, "last") X(LENGTH, "length") \
    X(LIST, "list") X(LOWER, "lower") X(MAP, "map") X(MAX, "max") X(MIN, "min") X(REJECT, "reject") \
    X(REJECTATTR, "rejectattr") X(REPLACE, "replace") X(REVERSE, "reverse") X(ROUND, "round") X(SAFE, "safe") \
    X(SELECT, "select") X(SELECTATTR, "selectattr") X(SORT, "sort") X(STRING, "string") X(SUM, "sum") \
    X(TITLE, "title") X(TOJSON, "tojson") X(TRIM, "trim") X(UNIQUE, "unique") X(UPPER, "upper") \
    X(WORDCOUNT, "wordcount")
#define FILTER_ENUM(e, s) FILTER_##e,
enum { JINJA_FILTERS(FILTER_ENUM) FILTER_COUNT_ };
#define FILTER_NAME(e, s) s,
static const char *const filter_names[] = {JINJA_FILTERS(FILTER_NAME)};

static Value apply_filter(const char *name, Value v, const Args *a);

/* an attribute path "a.b" of x (selectattr, map, sort, join, sum), as jinja2's make_attrgetter */
static Value attr_path(Value x, const char *path) {
    const char *p = path;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char part[128];
        if (n >= sizeof part) FAIL("attribute name too long");
        memcpy(part, p, n);
        part[n] = 0;
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= is_digit(part[i]);
        x = digits ? get_item(x, v_int(atoll(part))) : get_item(x, v_cstr(part));
        p += n + (dot != NULL);
    }
    return x;
}

/* select / reject / selectattr / rejectattr: the items whose test (or truth) is want */
static Value select_items(Value v, const Args *a, bool by_attr, bool want) {
    List *src = iterate(v, ""), *l = list_new(src->n);
    int first_arg = by_attr ? 1 : 0;
    const char *attr = by_attr ? need_str(arg(a, 0, NULL, UNDEF), "selectattr")->p : NULL;
    Value test = arg(a, first_arg, NULL, UNDEF);
    Args rest = {a->pos + first_arg + 1, a->npos > first_arg + 1 ? a->npos - first_arg - 1 : 0, a->kw_names, a->kw,
                 a->nkw};
    for (int i = 0; i < src->n; i++) {
        step();
        Value x = by_attr ? attr_path(src->v[i], attr) : src->v[i];
        bool ok = test.t == V_UNDEF ? truthy(x) : run_test(need_str(test, "select")->p, x, &rest);
        if (ok == want) list_push(l, src->v[i]);
    }
    return v_list(l);
}

static int sort_cmp(Value x, Value y, bool case_sensitive) {
    if (!case_sensitive && x.t == V_STR && y.t == V_STR) return compare(str_case(x.s, 0), str_case(y.s, 0));
    return compare(x, y);
}

static Value filter_tojson(Value v, const Args *a) {
    Value indent = arg(a, 0, "indent", NONE);
    JsonStyle st = {.has_indent = indent.t != V_NONE, .item_sep = ", ", .key_sep = ": "};
    if (st.has_indent) {   /* json.dumps: a number of spaces, or the string itself */
        if (indent.t == V_STR) st.indent = indent.s->p;
        else if (indent.t == V_INT) {
            static const char spaces[] = "                                                                ";
            st.indent = spaces + sizeof spaces - 1 - (indent.i < 0 ? 0 : indent.i > 64 ? 64 : indent.i);
        } else {
            FAIL("tojson: indent must be an integer or a string");
        }
        st.item_sep = ",";
    }
    Value seps = arg(a, -1, "separators", NONE);
    if (seps.t == V_LIST && seps.l->n == 2) {
        st.item_sep = need_str(seps.l->v[0], "separators")->p;
        st.key_sep = need_str(seps.l->v[1], "separators")->p;
    }
    st.sort_keys = truthy(arg(a, -1, "sort_keys", v_bool(false)));
    Buf b = {0};
    json_dump(&b, v, &st, 0);
    return buf_value(&b);
}

static Value filter_indent(Value v, const Args *a) {
    Value w = arg(a, 0, "width", v_int(4));
    Buf pad = {0};
    if (w.t == V_STR) buf_add(&pad, w.s->p, w.s->n);
    else for (int64_t i = 0; i < as_int(w) && i < 256; i++) buf_str(&pad, " ");
    Value padv = buf_value(&pad);
    bool first = truthy(arg(a, 1, "first", v_bool(false))), blank = truthy(arg(a, 2, "blank", v_bool(false)));
    Value s = to_str(v);
    List *lines = call_method(M_SPLITLINES, s, &(Args){0}).l;
    Buf b = {0};
    if (first) buf_add(&b, padv.s->p, padv.s->n);
    for (int i = 0; i < lines->n; i++) {
        const Str *line = lines->v[i].s;
        if (i) {
            buf_str(&b, "\n");
            if (line->n || blank) buf_add(&b, padv.s->p, padv.s->n);
        }
        buf_add(&b, line->p, line->n);
    }
    if (s.s->n && s.s->p[s.s->n - 1] == '\n' && lines->n) buf_str(&b, "\n");
    return buf_value(&b);
}

/* Python's int(x) of a float, within 64 bits (truncated toward zero) */
static int64_t float_to_int(double x) {
    if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0)) FAIL(isnan(x) ? "cannot convert float NaN to "
                                                                             "integer" : OVERFLOW);
    return (int64_t)x;
}

static Value apply_filter(const char *name, Value v, const Args *a) {
    int f = 0;
    while (f < FILTER_COUNT_ && strcmp(filter_names[f], name)) f++;
    switch (f) {
    case FILTER_ABS:
        if (v.t == V_INT && v.i == INT64_MIN) FAIL(OVERFLOW);
        if (v.t == V_INT) return v_int(v.i < 0 ? -v.i : v.i);
        if (v.t == V_FLOAT) return v_float(fabs(v.f));
        FAIL("bad operand type for abs(): '%s'", vtype_names[v.t]);
    case FILTER_CAPITALIZE: return str_case(to_str(v).s, 3);
    case FILTER_COUNT: case FILTER_LENGTH: return v_int(length_of(v));
    case FILTER_DEFAULT: case FILTER_D: {
        bool boolean = truthy(arg(a, 1, "boolean", v_bool(false)));
        return v.t == V_UNDEF || (boolean && !truthy(v)) ? arg(a, 0, "default_value", v_cstr("")) : v;
    }
    case FILTER_DICTSORT: {
        if (v.t != V_DICT) FAIL("dictsort: expected a dict");
        Value items = call_method(M_ITEMS, v, &(Args){0});
        List *l = items.l;
        bool by_value = v.t == V_DICT && arg(a, 1, "by", v_cstr("key")).t == V_STR &&
                        !strcmp(arg(a, 1, "by", v_cstr("key")).s->p, "value");
        bool cs = truthy(arg(a, 0, "case_sensitive", v_bool(false)));
        for (int i = 1; i < l->n; i++)
            for (int j = i; j > 0 && sort_cmp(l->v[j - 1].l->v[by_value], l->v[j].l->v[by_value], cs) > 0; j--) {
                Value t = l->v[j]; l->v[j] = l->v[j - 1]; l->v[j - 1] = t;
            }
        return items;
    }
    case FILTER_ESCAPE: case FILTER_E: {
        Value s = to_str(v);
        Buf b = {0};
        for (size_t i = 0; i < s.s->n; i++) {
            char c = s.s->p[i];
            const char *rep = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;"
                            : c == '\'' ? "&#39;" : NULL;
            if (rep) buf_str(&b, rep); else buf_add(&b, &c, 1);
        }
        return buf_value(&b);
    }
    case FILTER_FIRST: case FILTER_LAST: {
        List *l = iterate(v, "");
        return l->n ? l->v[f == FILTER_FIRST ? 0 : l->n - 1] : UNDEF;
    }
    case FILTER_FLOAT: case FILTER_INT: {
        Value dflt = arg(a, 0, "default", f == FILTER_INT ? v_int(0) : v_float(0));
        if (v.t == V_INT || v.t == V_BOOL) return f == FILTER_INT ? v_int(as_int(v)) : v_float((double)as_int(v));
        if (v.t == V_FLOAT) return f == FILTER_INT ? v_int(float_to_int(v.f)) : v;
        if (v.t == V_STR) {
            char *end;
            errno = 0;
            long long i = strtoll(v.s->p, &end, 10);   /* a whole number: exact (a double would round it) */
            while (*end && is_space(*end)) end++;
            if (f == FILTER_INT && end != v.s->p && !*end) {
                if (errno) FAIL(OVERFLOW);
                return v_int(i);
            }
            errno = 0;
            double d = strtod(v.s->p, &end);
            while (*end && is_space(*end)) end++;
            if (end == v.s->p || *end || (errno && !isinf(d))) return dflt;
            return f == FILTER_INT ? v_int(float_to_int(d)) : v_float(d);
        }
        return dflt;
    }
    case FILTER_INDENT: return filter_indent(v, a);
    case FILTER_ITEMS:
        if (v.t == V_UNDEF) return v_list(list_new(0));
        if (v.t != V_DICT) FAIL("items: expected a mapping, got %s", vtype_names[v.t]);
        return call_method(M_ITEMS, v, &(Args){0});
    case FILTER_JOIN: {
        Value sep = arg(a, 0, "d", v_cstr("")), at = arg(a, 1, "attribute", NONE);
        return join(iterate(v, ""), to_str(sep).s, at.t == V_STR ? at.s->p : NULL);
    }
    case FILTER_LIST: {
        List *src = iterate(v, ""), *l = list_new(src->n);
        for (int i = 0; i < src->n; i++) list_push(l, src->v[i]);
        return v_list(l);
    }
    case FILTER_LOWER: return str_case(to_str(v).s, 0);
    case FILTER_UPPER: return str_case(to_str(v).s, 1);
    case FILTER_MAP: {
        List *src = iterate(v, ""), *l = list_new(src->n);
        Value at = arg(a, -1, "attribute", UNDEF);
        for (int i = 0; i < src->n; i++) {
            step();
            if (at.t != V_UNDEF) {
                Value x = attr_path(src->v[i], to_str(at).s->p);
                list_push(l, x.t == V_UNDEF ? arg(a, -1, "default", UNDEF) : x);
            } else {
                Args rest = {a->pos + 1, a->npos > 1 ? a->npos - 1 : 0, a->kw_names, a->kw, a->nkw};
                list_push(l, apply_filter(need_str(arg(a, 0, NULL, UNDEF), "map")->p, src->v[i], &rest));
            }
        }
        return v_list(l);
    }
    case FILTER_MAX: case FILTER_MIN: {
        List *l = iterate(v, "");
        if (!l->n) return UNDEF;
        Value best = l->v[0];
        for (int i = 1; i < l->n; i++) {
            int c = sort_cmp(l->v[i], best, false);
            if (f == FILTER_MAX ? c > 0 : c < 0) best = l->v[i];
        }
        return best;
    }
    case FILTER_REJECT: return select_items(v, a, false, false);
    case FILTER_REJECTATTR: return select_items(v, a, true, false);
    case FILTER_SELECT: return select_items(v, a, false, true);
    case FILTER_SELECTATTR: return select_items(v, a, true, true);
    case FILTER_REPLACE: {
        Value cnt = arg(a, 2, "count", NONE);
        return str_replace(to_str(v).s, to_str(arg(a, 0, "old", UNDEF)).s, to_str(arg(a, 1, "new", UNDEF)).s,
                           cnt.t == V_NONE ? -1 : as_int(cnt));
    }
    case FILTER_REVERSE: {
        if (v.t == V_STR) return slice(v, NONE, NONE, v_int(-1));
        List *src = iterate(v, ""), *l = list_new(src->n);
        for (int i = src->n - 1; i >= 0; i--) list_push(l, src->v[i]);
        return v_list(l);
    }
    case FILTER_ROUND: {
        double x = as_double(v), p = pow(10, (double)as_int(arg(a, 0, "precision", v_int(0))));
        Value how = arg(a, 1, "method", v_cstr("common"));
        const char *m = to_str(how).s->p;
        double r = !strcmp(m, "ceil") ? ceil(x * p) / p : !strcmp(m, "floor") ? floor(x * p) / p : round(x * p) / p;
        return v_float(r);
    }
    case FILTER_SAFE: return v;
    case FILTER_SORT: {
        List *src = iterate(v, ""), *l = list_new(src->n);
        for (int i = 0; i < src->n; i++) list_push(l, src->v[i]);
        bool rev = truthy(arg(a, 0, "reverse", v_bool(false))), cs = truthy(arg(a, 1, "case_sensitive", v_bool(false)));
        Value at = arg(a, 2, "attribute", NONE);
        for (int i = 1; i < l->n; i++)
            for (int j = i; j > 0; j--) {
                Value x = l->v[j - 1], y = l->v[j];
                if (at.t == V_STR) { x = attr_path(x, at.s->p); y = attr_path(y, at.s->p); }
                int c = sort_cmp(x, y, cs);
                if (rev ? c >= 0 : c <= 0) break;
                Value t = l->v[j]; l->v[j] = l->v[j - 1]; l->v[j - 1] = t;
                step();
            }
        return v_list(l);
    }
    case FILTER_STRING: return to_str(v);
    case FILTER_SUM: {
        List *l = iterate(v, "");
        Value at = arg(a, 0, "attribute", NONE), total = arg(a, 1, "start", v_int(0));
        for (int i = 0; i < l->n; i++) {
            Value x = at.t == V_STR ? attr_path(l->v[i], at.s->p) : l->v[i];
            if (!is_number(x) || !is_number(total)) FAIL("sum: expected numbers");
            total = total.t == V_FLOAT || x.t == V_FLOAT ? v_float(as_double(total) + as_double(x))
                                                        : v_int(as_int(total) + as_int(x));
        }
        return total;
    }
    case FILTER_TITLE: {   /* jinja2's: a capital after the start and after - whitespace ( { [ < */
        Value s = to_str(v);
        Buf b = {0};
        bool start = true;
        for (size_t i = 0; i < s.s->n;) {
            size_t k = utf8_offset(s.s->p + i, s.s->n - i, 1);
            char c = s.s->p[i];
            bool sep = c == '-' || is_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
            Value ch = str_case(str_new(s.s->p + i, k), sep ? 0 : start ? 1 : 0);
            buf_add(&b, ch.s->p, ch.s->n);
            start = sep;
            i += k;
        }
        return buf_value(&b);
    }
    case FILTER_TOJSON: return filter_tojson(v, a);
    case FILTER_TRIM: {
        Value chars = arg(a, 0, "chars", NONE);
        return str_strip(to_str(v).s, chars.t == V_NONE ? NULL : need_str(chars, "trim"), 3);
    }
    case FILTER_UNIQUE: {
        List *src = iterate(v, ""), *l = list_new(src->n);
        for (int i = 0; i < src->n; i++) if (!contains(v_list(l), src->v[i])) list_push(l, src->v[i]);
        return v_list(l);
    }
    case FILTER_WORDCOUNT: return v_int(str_split(to_str(v).s, NULL, -1).l->n);
    }
    FAIL("no filter named '%s'", name);
}

/* ---- operators */


static Value arith(int op, Value x, Value y) {
    if (op == '~') {
        Buf b = {0};
        to_text(&b, x);
        to_text(&b, y);
        return buf_value(&b);
    }
    if (x.t == V_UNDEF || y.t == V_UNDEF) FAIL("an undefined value in an arithmetic expression ('%c')", op);
    if (op == '+' && x.t == V_STR && y.t == V_STR) {
        Buf b = {0};
        buf_add(&b, x.s->p, x.s->n);
        buf_add(&b, y.s->p, y.s->n);
        return buf_value(&b);
    }
    if (op == '+' && x.t == V_LIST && y.t == V_LIST) {
        List *l = list_new(x.l->n + y.l->n);
        for (int i = 0; i < x.l->n; i++) list_push(l, x.l->v[i]);
        for (int i = 0; i < y.l->n; i++) list_push(l, y.l->v[i]);
        return v_list(l);
    }
    if (op == '*' && ((x.t == V_STR || x.t == V_LIST) && (y.t == V_INT || y.t == V_BOOL))) {
        int64_t times = as_int(y);
        if (times <= 0 || (x.t == V_STR ? x.s->n == 0 : x.l->n == 0))   /* '' * 10**9 is '' at once */
            return x.t == V_STR ? v_str("", 0) : v_list(list_new(0));
        if (x.t == V_STR) {
            if (times > 0 && x.s->n * (uint64_t)times > R->max_output)
                fail_at(JINJA_ERR_LIMIT, R->line, "a string of more than %zu bytes", R->max_output);
            Buf b = {0};
            for (int64_t i = 0; i < times; i++) buf_add(&b, x.s->p, x.s->n);
            return buf_value(&b);
        }
        List *l = list_new(4);
        for (int64_t i = 0; i < times; i++) for (int k = 0; k < x.l->n; k++) { step(); list_push(l, x.l->v[k]); }
        return v_list(l);
    }
    if (op == '%' && x.t == V_STR) FAIL("printf-style string formatting ('%%') is not supported");
    if (!is_number(x) || !is_number(y))
        FAIL("unsupported operand type(s) for %c: '%s' and '%s'", op == 'F' ? '/' : op == 'P' ? '*' : op,
             vtype_names[x.t], vtype_names[y.t]);
    bool fl = x.t == V_FLOAT || y.t == V_FLOAT;
    if ((op == '/' || op == 'F' || op == '%') && as_double(y) == 0) FAIL("division by zero");
    if (op == '/') return v_float(as_double(x) / as_double(y));
    if (fl) {
        double a = as_double(x), b = as_double(y);
        switch (op) {
        case '+': return v_float(a + b);
        case '-': return v_float(a - b);
        case '*': return v_float(a * b);
        case 'F': return v_float(floor(a / b));
        case '%': { double m = fmod(a, b); if (m != 0 && (m < 0) != (b < 0)) m += b; return v_float(m); }
        case 'P': return v_float(pow(a, b));
        }
    }
    int64_t a = as_int(x), b = as_int(y), r;
    switch (op) {
    case '+': if (__builtin_add_overflow(a, b, &r)) FAIL(OVERFLOW); return v_int(r);
    case '-': if (__builtin_sub_overflow(a, b, &r)) FAIL(OVERFLOW); return v_int(r);
    case '*': if (__builtin_mul_overflow(a, b, &r)) FAIL(OVERFLOW); return v_int(r);
    case 'F': case '%': {
        if (a == INT64_MIN && b == -1) FAIL(OVERFLOW);
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) { q--; m += b; }
        return v_int(op == 'F' ? q : m);
    }
    case 'P': {
        if (b < 0) return v_float(pow((double)a, (double)b));
        if (a == 0 || a == 1) return v_int(b == 0 ? 1 : a);
        if (a == -1) return v_int(b % 2 ? -1 : 1);
        r = 1;   /* |a| >= 2: past 63 factors it has overflowed */
        for (int64_t i = 0; i < b; i++) if (__builtin_mul_overflow(r, a, &r)) FAIL(OVERFLOW);
        return v_int(r);
    }
    }
    FAIL("unknown operator");
}

/* ---- calls: macros, global functions, methods */

static Value call_macro(const Macro *m, const Args *a, const Macro *caller);

static Value call_value(Value fn, const Args *a, Frame *f) {
    (void)f;
    if (fn.t == V_METHOD) return call_method(fn.id, *fn.self, a);
    if (fn.t == V_MACRO) return call_macro(fn.macro, a, NULL);
    if (fn.t != V_FUNC) FAIL("'%s' object is not callable", vtype_names[fn.t]);
    switch (fn.id) {
    case F_RAISE_EXCEPTION: {
        Value msg = to_str(arg(a, 0, "message", v_cstr("")));
        fail_at(JINJA_ERR_RAISE, R->line, "%s", msg.s->p);
    }
    case F_STRFTIME_NOW: {
        const Str *fmt = need_str(arg(a, 0, "format", UNDEF), "strftime_now");
        char out[512];
        size_t n = fmt->n && fmt->n < 200 ? strftime(out, sizeof out, fmt->p, &R->now) : 0;
        return v_str(out, n);
    }
    case F_NAMESPACE: case F_DICT: {
        Value v = {.t = fn.id == F_NAMESPACE ? V_NS : V_DICT};
        v.d = dict_new();
        for (int i = 0; i < a->npos; i++) {   /* namespace({...}) / dict({...}): its items first */
            if (a->pos[i].t != V_DICT) FAIL("%s: expected keyword arguments", func_names[fn.id]);
            for (int k = 0; k < a->pos[i].d->n; k++) dict_set(v.d, a->pos[i].d->k[k], a->pos[i].d->v[k]);
        }
        for (int i = 0; i < a->nkw; i++) dict_set(v.d, v_cstr(a->kw_names[i]), a->kw[i]);
        return v;
    }
    case F_RANGE: {
        int64_t lo = 0, hi, st = 1;
        for (int i = 0; i < a->npos; i++)
            if (a->pos[i].t != V_INT) FAIL("range: expected integers");
        if (a->npos == 1) hi = a->pos[0].i;
        else if (a->npos >= 2) { lo = a->pos[0].i; hi = a->pos[1].i; if (a->npos == 3) st = a->pos[2].i; }
        else FAIL("range expected at least 1 argument");
        if (st == 0) FAIL("range() arg 3 must not be zero");
        List *l = list_new(4);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) { step(); list_push(l, v_int(i)); }
        return v_list(l);
    }
    }
    FAIL("'%s' is not callable", vtype_names[fn.t]);
}

/* what a macro's body renders, its parameters bound (positional, then by name, then the defaults) in a frame
 * over the names it saw where it was defined; `caller` bound to a call block's body where there is one */
static Value call_macro(const Macro *m, const Args *a, const Macro *caller) {
    const Node *n = m->node;
    if (++R->depth > R->max_depth) fail_at(JINJA_ERR_LIMIT, R->line, "calls nested more than %d deep", R->max_depth);
    step();
    if (a->npos > n->nkids) FAIL("macro '%s' takes not more than %d argument(s)", n->name, n->nkids);
    for (int k = 0; k < a->nkw; k++) {
        bool known = false;
        for (int i = 0; i < n->nkids; i++) known |= !strcmp(n->kids[i]->name, a->kw_names[k]);
        if (!known) FAIL("macro '%s' takes no keyword argument '%s'", n->name, a->kw_names[k]);
    }
    Frame *f = frame_new(m->closure);
    for (int i = 0; i < n->nkids; i++) {
        const Node *p = n->kids[i];
        Value v = arg(a, i, p->name, UNDEF);
        if (v.t == V_UNDEF && p->a) v = eval(p->a, f);
        frame_set(f, p->name, v);
    }
    if (caller) {
        Value cv = {.t = V_MACRO};
        cv.macro = (Macro *)caller;
        frame_set(f, "caller", cv);
    }
    Buf b = {0};
    int line = R->line;
    render_seq(n->b, f, &b);
    R->line = line;
    R->depth--;
    return buf_value(&b);
}

/* ---- expressions */

static Value eval(const Node *n, Frame *f) {
    R->line = n->line ? n->line : R->line;
    switch (n->k) {
    case E_LIT: return n->lit;
    case E_NAME: return lookup(f, n->name);
    case E_ATTR: return get_attr(eval(n->a, f), n->name);
    case E_ITEM: return get_item(eval(n->a, f), eval(n->b, f));
    case E_SLICE: {
        Value obj = eval(n->a, f);
        return slice(obj, n->b ? eval(n->b, f) : NONE, n->c ? eval(n->c, f) : NONE, n->d ? eval(n->d, f) : NONE);
    }
    case E_CALL: {
        Value fn = eval(n->a, f);
        Args a = eval_args(n, f, 0);
        if (fn.t == V_UNDEF)
            FAIL("'%s' is undefined", n->a->k == E_NAME || n->a->k == E_ATTR ? n->a->name : "the callee");
        return call_value(fn, &a, f);
    }
    case E_FILTER: {
        Value v = eval(n->a, f);
        Args a = eval_args(n, f, 0);
        return apply_filter(n->name, v, &a);
    }
    case E_TEST: {
        Value v = eval(n->a, f);
        Args a = eval_args(n, f, 0);
        return v_bool(run_test(n->name, v, &a) != n->negate);
    }
    case E_NEG: case E_POS: {
        Value v = eval(n->a, f);
        if (!is_number(v)) FAIL("bad operand type for unary %c: '%s'", n->k == E_NEG ? '-' : '+', vtype_names[v.t]);
        if (n->k == E_POS) return v.t == V_BOOL ? v_int(v.b) : v;
        if (v.t == V_FLOAT) return v_float(-v.f);
        if (as_int(v) == INT64_MIN) FAIL(OVERFLOW);
        return v_int(-as_int(v));
    }
    case E_NOT: return v_bool(!truthy(eval(n->a, f)));
    case E_BIN: return arith(n->op, eval(n->a, f), eval(n->b, f));
    case E_AND: { Value x = eval(n->a, f); return truthy(x) ? eval(n->b, f) : x; }
    case E_OR: { Value x = eval(n->a, f); return truthy(x) ? x : eval(n->b, f); }
    case E_CMP: {
        Value x = eval(n->a, f);
        for (int i = 0; i < n->nkids; i++) {
            Value y = eval(n->kids[i], f);
            bool ok;
            switch (n->ops[i]) {
            case CMP_EQ: ok = equal(x, y); break;
            case CMP_NE: ok = !equal(x, y); break;
            case CMP_LT: ok = compare(x, y) < 0; break;
            case CMP_LE: ok = compare(x, y) <= 0; break;
            case CMP_GT: ok = compare(x, y) > 0; break;
            case CMP_GE: ok = compare(x, y) >= 0; break;
            case CMP_IN: ok = contains(y, x); break;
            default: ok = !contains(y, x); break;
            }
            if (!ok) return v_bool(false);
            x = y;
        }
        return v_bool(true);
    }
    case E_COND: return truthy(eval(n->b, f)) ? eval(n->a, f) : n->c ? eval(n->c, f) : UNDEF;
    case E_LIST: case E_TUPLE: {
        List *l = list_new(n->nkids);
        l->tuple = n->k == E_TUPLE;
        for (int i = 0; i < n->nkids; i++) list_push(l, eval(n->kids[i], f));
        return v_list(l);
    }
    case E_DICT: {
        Dict *d = dict_new();
        for (int i = 0; i + 1 < n->nkids; i += 2) dict_set(d, eval(n->kids[i], f), eval(n->kids[i + 1], f));
        return v_dict(d);
    }
    default: FAIL("internal: not an expression");
    }
}

/* ---- statements */

static void assign(Frame *f, Node **targets, int n, Value v) {
    if (n == 1) { frame_set(f, targets[0]->name, v); return; }
    List *l = iterate(v, "cannot unpack non-iterable ");
    if (l->n != n) FAIL("%s values to unpack (expected %d, got %d)", l->n > n ? "too many" : "not enough", n, l->n);
    for (int i = 0; i < n; i++) frame_set(f, targets[i]->name, l->v[i]);
}

static Flow render_for(const Node *n, Frame *f, Buf *out) {
    Value seq = eval(n->a, f);
    if (seq.t == V_NONE || seq.t == V_INT || seq.t == V_FLOAT || seq.t == V_BOOL)
        FAIL("'%s' object is not iterable", vtype_names[seq.t]);
    List *items = iterate(seq, "");
    Frame *body = frame_new(f);
    if (n->d) {   /* for x in xs if cond: the loop (and loop.*) sees only the items that pass */
        List *kept = list_new(items->n);
        for (int i = 0; i < items->n; i++) {
            step();
            assign(body, n->kids, n->nkids, items->v[i]);
            if (truthy(eval(n->d, body))) list_push(kept, items->v[i]);
        }
        items = kept;
    }
    Loop *L = arena_alloc(A_cur, sizeof *L);
    L->items = items;
    L->depth = 1;   /* the depth of a recursive loop's recursion: 1 in every loop llmcc reads */
    Value lv = {.t = V_LOOP};
    lv.loop = L;
    for (int i = 0; i < items->n; i++) {
        step();
        L->index = i;
        assign(body, n->kids, n->nkids, items->v[i]);
        frame_set(body, "loop", lv);
        Flow fl = render_seq(n->b, body, out);
        if (fl == FLOW_BREAK) break;
    }
    if (items->n == 0 && n->c) return render_seq(n->c, f, out);
    return FLOW_NORMAL;
}

static Flow render_node(const Node *n, Frame *f, Buf *out) {
    R->line = n->line ? n->line : R->line;
    switch (n->k) {
    case N_SEQ: return render_seq(n, f, out);
    case N_TEXT: buf_add(out, n->lit.s->p, n->lit.s->n); return FLOW_NORMAL;
    case N_OUT: to_text(out, eval(n->a, f)); return FLOW_NORMAL;
    case N_IF:
        if (truthy(eval(n->a, f))) return render_seq(n->b, f, out);
        return n->c ? render_node(n->c, f, out) : FLOW_NORMAL;
    case N_FOR: return render_for(n, f, out);
    case N_SET:
        if (n->a) {   /* ns.attr = value */
            Value ns = lookup(f, n->a->a->name);
            if (ns.t != V_NS) FAIL("cannot assign attribute on non-namespace object");
            dict_set(ns.d, v_cstr(n->a->name), eval(n->b, f));
        } else {
            assign(f, n->kids, n->nkids, eval(n->b, f));
        }
        return FLOW_NORMAL;
    case N_SET_BLOCK: {
        Buf b = {0};
        render_seq(n->b, f, &b);
        frame_set(f, n->name, buf_value(&b));
        return FLOW_NORMAL;
    }
    case N_MACRO: {
        Macro *m = arena_alloc(A_cur, sizeof *m);
        m->node = n;
        m->closure = f;
        Value v = {.t = V_MACRO};
        v.macro = m;
        frame_set(f, n->name, v);
        return FLOW_NORMAL;
    }
    case N_CALL_BLOCK: {   /* caller(): a macro of the block's body and parameters, seeing the names here */
        const Node *call = n->a;
        Value fn = eval(call->a, f);
        if (fn.t != V_MACRO) FAIL("a call block calls a macro");
        Args a = eval_args(call, f, 0);
        Node *body = arena_alloc(A_cur, sizeof *body);
        *body = *n;
        body->k = N_MACRO;
        body->name = "caller";
        Macro caller = {body, f};
        Value v = call_macro(fn.macro, &a, &caller);
        buf_add(out, v.s->p, v.s->n);
        return FLOW_NORMAL;
    }
    case N_FILTER_BLOCK: {
        Buf b = {0};
        render_seq(n->b, f, &b);
        Value v = buf_value(&b);
        const Node *chain[64];
        int k = 0;
        for (const Node *x = n->a; x && k < 64; x = x->a) chain[k++] = x;
        while (k > 0) {
            const Node *x = chain[--k];
            Args a = eval_args(x, f, 0);
            v = apply_filter(x->name, v, &a);
        }
        to_text(out, v);
        return FLOW_NORMAL;
    }
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default: FAIL("internal: not a statement");
    }
}

static Flow render_seq(const Node *n, Frame *f, Buf *out) {
    if (n->k != N_SEQ) return render_node(n, f, out);
    for (int i = 0; i < n->nkids; i++) {
        Flow fl = render_node(n->kids[i], f, out);
        if (fl != FLOW_NORMAL) return fl;
    }
    return FLOW_NORMAL;
}

/* ---------------------------------------------------------------- the interface */

struct JinjaTemplate { Arena A; Node *body; };

JinjaTemplate *jinja_parse(const char *src, size_t len, JinjaError *err) {
    memset(err, 0, sizeof *err);
    JinjaTemplate *volatile t = calloc(1, sizeof *t);
    if (!t) { err->kind = JINJA_ERR_LIMIT; snprintf(err->message, sizeof err->message, "out of memory"); return NULL; }
    Parser P = {.src = src, .len = len, .err = err, .where_line = 1, .where_col = 1};
    jmp_buf oom;
    jmp_buf *saved = oom_jump;
    Arena *saved_arena = A_cur;
    Render *saved_r = R;
    R = NULL;
    A_cur = &t->A;
    t->A.limit = 256u << 20;
    oom_jump = &oom;
    volatile bool ok = false;
    if (setjmp(oom)) {
        err->kind = JINJA_ERR_LIMIT;
        snprintf(err->message, sizeof err->message, "out of memory parsing the template");
    } else if (!setjmp(P.fail)) {
        if (memchr(src, 0, len)) {
            int line, col;
            where(&P, (size_t)((const char *)memchr(src, 0, len) - src), &line, &col);
            syntax_at(&P, line, col, "a NUL byte");
        }
        /* jinja2 reads \r\n and \r as \n (its newline_sequence) in the template's text and strings */
        char *norm = arena_alloc(A_cur, len + 1);
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
            if (src[i] == '\r') { norm[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
            else norm[n++] = src[i];
        }
        P.src = norm;
        P.len = n;
        lex(&P);
        int which;
        t->body = parse_body(&P, NULL, &which, &P.toks[0], "template");
        ok = true;
    }
    free(P.toks);
    oom_jump = saved;
    A_cur = saved_arena;
    R = saved_r;
    if (!ok) { jinja_free(t); return NULL; }
    return t;
}

void jinja_free(JinjaTemplate *t) {
    if (!t) return;
    arena_free(&t->A);
    free(t);
}

char *jinja_render(const JinjaTemplate *t, const char *vars, size_t vars_len, const struct tm *now,
                   const JinjaLimits *limits, size_t *len, JinjaError *err) {
    memset(err, 0, sizeof *err);
    Render r = {0};
    r.err = err;
    r.max_output = limits && limits->max_output ? limits->max_output : 16u << 20;
    r.max_steps = limits && limits->max_steps ? limits->max_steps : 10000000;
    r.max_depth = limits && limits->max_depth ? limits->max_depth : 64;
    r.A.limit = 64 * r.max_output + (256u << 20);
    if (now) r.now = *now;
    else { time_t tt = time(NULL); localtime_r(&tt, &r.now); }
    jmp_buf oom;
    jmp_buf *saved = oom_jump;
    Arena *saved_arena = A_cur;
    Render *saved_r = R;
    R = &r;
    A_cur = &r.A;
    oom_jump = &oom;
    Buf out = {0};
    Json j = {0};
    char *volatile result = NULL;
    if (setjmp(oom)) {
        err->kind = JINJA_ERR_LIMIT;
        err->line = r.line;
        snprintf(err->message, sizeof err->message, "out of memory rendering the template");
    } else if (!setjmp(r.fail)) {
        size_t at;
        JsonError je = json_read(&j, vars, vars_len, &at);
        if (je != JSON_OK || json_bad_token(&j) >= 0 || json_type(&j, 0) != JSON_OBJECT)
            fail_at(JINJA_ERR_VARS, 0, "the variables are not a JSON object");
        int next;
        Value globals = from_json(&j, 0, &next);
        r.root = frame_new(NULL);
        for (int i = 0; i < globals.d->n; i++) frame_set(r.root, globals.d->k[i].s->p, globals.d->v[i]);
        Frame *top = frame_new(r.root);   /* the template's own sets, over the variables */
        r.root = top;
        render_seq(t->body, top, &out);
        result = malloc(out.n + 1);   /* the text outlives the arena */
        if (!result) longjmp(oom, 1);
        memcpy(result, out.p ? out.p : "", out.n);
        result[out.n] = 0;
        *len = out.n;
    }
    json_free(&j);
    arena_free(&r.A);
    oom_jump = saved;
    A_cur = saved_arena;
    R = saved_r;
    return result;
}

void jinja_error_string(const JinjaError *err, char *out, size_t size) {
    if (err->line && err->column) snprintf(out, size, "line %d, column %d: %s", err->line, err->column, err->message);
    else if (err->line) snprintf(out, size, "line %d: %s", err->line, err->message);
    else snprintf(out, size, "%s", err->message);
}
