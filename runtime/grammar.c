/* grammar.c: see grammar.h. Three parts: the GBNF reader (text -> rules of elements, character classes turned
 * into UTF-8 byte sequences, repetitions into rules), the automaton (interned stack nodes and sets of them, the
 * memoized byte transitions), and the masks (the vocabulary's byte trie walked from a set's context, the set's
 * stacks cut at one depth; cached per context and per set). */
#include "grammar.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES 65536
#define MAX_REPEAT 1000         /* {m,n}: bounds at most this */
#define MAX_NODES (1 << 20)     /* interned stack nodes and sets at most: a parse past them is refused */
#define MASK_BUDGET (1L << 26)  /* stacks expanded while computing one mask at most (a hostile grammar's cost) */
#define MASK_CACHE 256          /* masks kept, each a bit per token; as many contexts' masks besides */
#define CONTEXT_FRAMES 3        /* a set's stacks cut below this many frames: the context its mask is walked in */
#define DENSE_SETS 4096         /* sets whose byte transitions are a table (1 KiB each), not a hash map */
#define ACCEPT 0                /* node 0: the root is complete */
#define BOUNDARY 1              /* node 1: below here the stack is not known (a context's bottom) */

/* ---------------------------------------------------------------- small hash map: uint64 key -> int32 value */
typedef struct { uint64_t *keys; int32_t *vals; size_t cap, n; } Map;

static uint64_t mix(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33;
    return k;
}

static int32_t map_get(const Map *m, uint64_t key) {
    if (!m->cap) return -2;
    for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->vals[i] == -2) return -2;
        if (m->keys[i] == key) return m->vals[i];
    }
}

static bool map_put(Map *m, uint64_t key, int32_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        uint64_t *keys = malloc(cap * sizeof *keys);
        int32_t *vals = malloc(cap * sizeof *vals);
        if (!keys || !vals) { free(keys); free(vals); return false; }
        for (size_t i = 0; i < cap; i++) vals[i] = -2;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->vals[i] == -2) continue;
            size_t j = mix(m->keys[i]) & (cap - 1);
            while (vals[j] != -2) j = (j + 1) & (cap - 1);
            keys[j] = m->keys[i];
            vals[j] = m->vals[i];
        }
        free(m->keys); free(m->vals);
        m->keys = keys; m->vals = vals; m->cap = cap;
    }
    size_t i = mix(key) & (m->cap - 1);
    while (m->vals[i] != -2 && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (m->vals[i] == -2) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return true;
}

static void map_free(Map *m) { free(m->keys); free(m->vals); memset(m, 0, sizeof *m); }

/* ---------------------------------------------------------------- growable int32 arrays */
typedef struct { int32_t *p; size_t n, cap; bool oom; } Ints;

static void ints_push(Ints *a, int32_t v) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->p, cap * sizeof *p);
        if (!p) { a->oom = true; return; }
        a->p = p; a->cap = cap;
    }
    a->p[a->n++] = v;
}

/* ---------------------------------------------------------------- the compiled grammar */
enum { E_END, E_BYTES, E_REF };
typedef struct { uint8_t kind; int32_t arg; } Elem;   /* E_BYTES: a byte set's index; E_REF: a rule */

struct Grammar {
    Elem *elems; size_t n_elems, cap_elems;
    uint64_t (*sets)[4]; size_t n_bytesets, cap_bytesets;   /* 256-bit byte sets */
    Ints *alts;                          /* per rule: its alternatives' first elements */
    char **names; int n_rules;
    int root;
    /* the automaton: node 0 is "the root is complete"; node i: elem, parent */
    Ints node_elem, node_parent, node_depth;   /* depth: frames down to the root (ACCEPT and BOUNDARY 0) */
    Map node_of;                         /* elem << 32 | parent -> node */
    Ints set_start, set_pool;            /* set i: set_pool[set_start[i] .. set_start[i + 1]) sorted node ids */
    Map set_of;                          /* hash -> first set with it (a chain through set_next) */
    Ints set_next;
    Map trans;                           /* set << 8 | byte -> set, or -1 */
    int32_t **dense; size_t n_dense;     /* the same for sets below n_dense: a row of 256, -2 not yet known */
    int start;                           /* the first set */
    /* the masks: per set, the cache's slot */
    Map mask_of;
    uint64_t *masks; int mask_words; int32_t mask_set[MASK_CACHE]; int mask_clock;
    /* per context (a set cut at CONTEXT_FRAMES): the tokens certain to be taken, and those that reach the cut with
     * bytes left, which only the whole stack decides */
    Map ctx_of;
    uint64_t *ctx_masks; Ints ctx_unsure[MASK_CACHE]; int32_t ctx_set[MASK_CACHE]; int ctx_clock;
    const GrammarVocab *mask_vocab;
    GrammarStats stats;
    long budget;                         /* expansions left to the mask being computed (MASK_BUDGET) */
    Map seen; int32_t gen;               /* (elem, parent) -> the expansion that last reached it: each pair is
                                          * expanded once per step (empty alternatives would otherwise multiply) */
    bool oom;                            /* out of memory or past a bound: every call fails from then on */
};

/* ---------------------------------------------------------------- the reader */
typedef struct {
    Grammar *g;
    const char *src, *p, *end;
    char *err; size_t err_size;
    bool failed;
    Ints *bodies;                        /* per rule under construction: elements of every alternative, END each */
} Reader;

static void fail(Reader *r, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(Reader *r, const char *at, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = true;
    int line = 1, col = 1;
    for (const char *q = r->src; q < at && q < r->end; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->err_size, "line %d, column %d: %s", line, col, msg);
}

static int byteset_new(Grammar *g, const uint64_t bits[4]) {
    for (size_t i = 0; i < g->n_bytesets; i++)
        if (!memcmp(g->sets[i], bits, sizeof g->sets[i])) return (int)i;
    if (g->n_bytesets == g->cap_bytesets) {
        size_t cap = g->cap_bytesets ? g->cap_bytesets * 2 : 64;
        void *p = realloc(g->sets, cap * sizeof *g->sets);
        if (!p) { g->oom = true; return 0; }
        g->sets = p; g->cap_bytesets = cap;
    }
    memcpy(g->sets[g->n_bytesets], bits, sizeof g->sets[0]);
    return (int)g->n_bytesets++;
}

static int rule_find(Reader *r, const char *name, size_t n, bool create) {
    Grammar *g = r->g;
    for (int i = 0; i < g->n_rules; i++)
        if (g->names[i] && strlen(g->names[i]) == n && !memcmp(g->names[i], name, n)) return i;
    if (!create) return -1;
    if (g->n_rules >= MAX_RULES) { fail(r, r->p, "more than %d rules", MAX_RULES); return 0; }
    char **names = realloc(g->names, (size_t)(g->n_rules + 1) * sizeof *names);
    Ints *bodies = realloc(r->bodies, (size_t)(g->n_rules + 1) * sizeof *bodies);
    char *copy = malloc(n + 1);
    if (names) g->names = names;
    if (bodies) r->bodies = bodies;
    if (!names || !bodies || !copy) { free(copy); g->oom = true; fail(r, r->p, "out of memory"); return 0; }
    memcpy(copy, name, n);
    copy[n] = 0;
    g->names[g->n_rules] = copy;
    memset(&r->bodies[g->n_rules], 0, sizeof r->bodies[0]);
    return g->n_rules++;
}

/* A rule of its own for a generated body (groups, repetitions, classes): "name~N" cannot clash with a user's */
static int rule_generated(Reader *r, const char *base) {
    char name[96];
    snprintf(name, sizeof name, "%.60s~%d", base, r->g->n_rules);
    return rule_find(r, name, strlen(name), true);
}

static void put(Reader *r, int rule, uint8_t kind, int32_t arg) {
    ints_push(&r->bodies[rule], kind);
    ints_push(&r->bodies[rule], arg);
    if (r->bodies[rule].oom) { r->g->oom = true; fail(r, r->p, "out of memory"); }
}

static void skip_space(Reader *r) {
    for (;;) {
        while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r' || *r->p == '\n')) r->p++;
        if (r->p < r->end && *r->p == '#') { while (r->p < r->end && *r->p != '\n') r->p++; continue; }
        return;
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* At a name followed by ::= : the next rule begins (a rule's body may span lines) */
static bool at_rule_head(const Reader *r) {
    const char *q = r->p;
    while (q < r->end && is_name_char(*q)) q++;
    if (q == r->p) return false;
    while (q < r->end && (*q == ' ' || *q == '\t')) q++;
    return r->end - q >= 3 && !memcmp(q, "::=", 3);
}

/* A character of the source in a message: itself where printable ASCII, else \xNN (the message is one line) */
static const char *shown(char c, char buf[8]) {
    if (c > 0x20 && c < 0x7f) snprintf(buf, 8, "%c", c);
    else snprintf(buf, 8, "\\x%02x", (unsigned char)c);
    return buf;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                                                       : -1;
}

/* One character of a literal or class (UTF-8 decoded, escapes read); -1 after fail */
static long read_char(Reader *r) {
    const unsigned char *q = (const unsigned char *)r->p;
    if (r->p >= r->end) { fail(r, r->p, "unexpected end"); return -1; }
    if (*q == '\\') {
        if (r->p + 1 >= r->end) { fail(r, r->p, "an escape at the end"); return -1; }
        char e = r->p[1];
        r->p += 2;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            long v = 0;
            for (int i = 0; i < digits; i++) {
                int h = r->p < r->end ? hexval(*r->p) : -1;
                if (h < 0) { fail(r, r->p, "\\%c takes %d hex digits", e, digits); return -1; }
                v = v * 16 + h;
                r->p++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { fail(r, r->p, "U+%lX is no character", v); return -1; }
            return v;
        }
        switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': return e;
        default:
            if (e > 0x20 && e < 0x7f) fail(r, r->p - 2, "unknown escape \\%c", e);
            else fail(r, r->p - 2, "a backslash before the byte \\x%02x (no escape)", (unsigned char)e);
            return -1;
        }
    }
    int n = *q < 0x80 ? 1 : (*q & 0xE0) == 0xC0 ? 2 : (*q & 0xF0) == 0xE0 ? 3 : (*q & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || r->end - r->p < n) { fail(r, r->p, "not UTF-8"); return -1; }
    long v = n == 1 ? *q : n == 2 ? *q & 0x1F : n == 3 ? *q & 0x0F : *q & 0x07;
    for (int i = 1; i < n; i++) {
        if ((q[i] & 0xC0) != 0x80) { fail(r, r->p, "not UTF-8"); return -1; }
        v = v << 6 | (q[i] & 0x3F);
    }
    r->p += n;
    return v;
}

static int utf8_encode(long c, uint8_t *out) {
    if (c < 0x80) { out[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { out[0] = (uint8_t)(0xC0 | c >> 6); out[1] = (uint8_t)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | c >> 12); out[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | c >> 18); out[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)); out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

static void put_byte_range(Reader *r, int rule, int lo, int hi) {
    uint64_t bits[4] = {0};
    for (int b = lo; b <= hi; b++) bits[b >> 6] |= 1ULL << (b & 63);
    put(r, rule, E_BYTES, byteset_new(r->g, bits));
}

/* Codepoints lo..hi (one UTF-8 length, no surrogates) as alternatives of byte ranges, one per position, into
 * rule (Russ Cox's and Rust's utf8-ranges split) */
static void utf8_ranges(Reader *r, int rule, long lo, long hi, uint64_t ascii[4]) {
    if (lo > hi) return;
    static const long top[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= top[i] && hi > top[i]) {
            utf8_ranges(r, rule, lo, top[i], ascii);
            utf8_ranges(r, rule, top[i] + 1, hi, ascii);
            return;
        }
    if (hi < 0x80) {   /* one byte: gathered into one set, one alternative */
        for (long b = lo; b <= hi; b++) ascii[b >> 6] |= 1ULL << (b & 63);
        return;
    }
    uint8_t a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        long max = (1L << (6 * i)) - 1;
        if ((lo & ~max) != (hi & ~max)) {
            if (lo & max) {
                utf8_ranges(r, rule, lo, lo | max, ascii);
                utf8_ranges(r, rule, (lo | max) + 1, hi, ascii);
                return;
            }
            if ((hi & max) != max) {
                utf8_ranges(r, rule, lo, (hi & ~max) - 1, ascii);
                utf8_ranges(r, rule, hi & ~max, hi, ascii);
                return;
            }
        }
    }
    utf8_encode(hi, b);
    for (int i = 0; i < n; i++) put_byte_range(r, rule, a[i], b[i]);
    put(r, rule, E_END, 0);
}

/* Codepoint ranges [lo, hi] (n of them, sorted, disjoint, surrogates left out) as a rule */
static int class_rule(Reader *r, const long (*ranges)[2], int n) {
    int rule = rule_generated(r, "class");
    uint64_t ascii[4] = {0};
    for (int i = 0; i < n && !r->failed; i++) utf8_ranges(r, rule, ranges[i][0], ranges[i][1], ascii);
    if (ascii[0] | ascii[1]) {
        put(r, rule, E_BYTES, byteset_new(r->g, ascii));
        put(r, rule, E_END, 0);
    }
    if (!r->bodies[rule].n) {   /* no character at all: a set of no byte */
        put(r, rule, E_BYTES, byteset_new(r->g, (uint64_t[4]){0}));
        put(r, rule, E_END, 0);
    }
    return rule;
}

static int cmp_range(const void *x, const void *y) {
    const long *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* [...] or [^...] at r->p (after '['), or '.' (any) */
static int read_class(Reader *r, bool any) {
    long (*ranges)[2] = NULL;
    int n = 0, cap = 0;
    bool negate = false;
    if (any) negate = true;
    else {
        if (r->p < r->end && *r->p == '^') { negate = true; r->p++; }
        while (!r->failed && r->p < r->end && *r->p != ']') {
            long lo = read_char(r), hi = lo;
            if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') { r->p++; hi = read_char(r); }
            if (r->failed) break;
            if (hi < lo) { fail(r, r->p, "the range's end comes before its start"); break; }
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                void *p = realloc(ranges, (size_t)cap * sizeof *ranges);
                if (!p) { fail(r, r->p, "out of memory"); break; }
                ranges = p;
            }
            ranges[n][0] = lo; ranges[n][1] = hi; n++;
        }
        if (!r->failed && r->p >= r->end) fail(r, r->p, "a class without its ']'");
        if (!r->failed) r->p++;
    }
    if (r->failed) { free(ranges); return 0; }
    /* sorted and merged; negated against every character; surrogates out */
    if (n) qsort(ranges, (size_t)n, sizeof *ranges, cmp_range);
    long (*out)[2] = malloc((size_t)(n + 2) * 2 * sizeof *out);
    if (!out) { free(ranges); fail(r, r->p, "out of memory"); return 0; }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && ranges[i][0] <= out[m - 1][1] + 1) {
            if (ranges[i][1] > out[m - 1][1]) out[m - 1][1] = ranges[i][1];
        } else {
            out[m][0] = ranges[i][0]; out[m][1] = ranges[i][1]; m++;
        }
    }
    free(ranges);
    if (negate) {
        long (*neg)[2] = malloc((size_t)(m + 1) * sizeof *neg);
        if (!neg) { free(out); fail(r, r->p, "out of memory"); return 0; }
        int k = 0;
        long next = 0;
        for (int i = 0; i < m; i++) {
            if (out[i][0] > next) { neg[k][0] = next; neg[k][1] = out[i][0] - 1; k++; }
            next = out[i][1] + 1;
        }
        if (next <= 0x10FFFF) { neg[k][0] = next; neg[k][1] = 0x10FFFF; k++; }
        free(out);
        out = neg;
        m = k;
    }
    long (*clean)[2] = malloc((size_t)(2 * m + 1) * sizeof *clean);
    if (!clean) { free(out); fail(r, r->p, "out of memory"); return 0; }
    int c = 0;
    for (int i = 0; i < m; i++) {   /* without U+D800..U+DFFF */
        long lo = out[i][0], hi = out[i][1];
        if (lo < 0xD800 && hi >= 0xD800) { clean[c][0] = lo; clean[c][1] = 0xD7FF; c++; lo = 0xE000; }
        if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
        if (lo <= hi) { clean[c][0] = lo; clean[c][1] = hi; c++; }
    }
    free(out);
    int rule = class_rule(r, (const long (*)[2])clean, c);
    free(clean);
    return rule;
}

static void read_alternatives(Reader *r, int rule, bool nested);

/* One element with its repetition, appended to rule's current alternative */
static void read_element(Reader *r, int rule) {
    const char *at = r->p;
    int ref = -1;   /* the element as a rule reference (groups, classes, names); -1: bytes already put */
    char c = *r->p;
    if (c == '"') {
        r->p++;
        int lit = rule_generated(r, "literal");
        while (!r->failed && r->p < r->end && *r->p != '"') {
            long ch = read_char(r);
            if (r->failed) return;
            uint8_t b[4];
            int n = utf8_encode(ch, b);
            for (int i = 0; i < n; i++) put_byte_range(r, lit, b[i], b[i]);
        }
        if (r->p >= r->end) { fail(r, at, "a literal without its closing quote"); return; }
        r->p++;
        put(r, lit, E_END, 0);
        ref = lit;
    } else if (c == '[') {
        r->p++;
        ref = read_class(r, false);
    } else if (c == '.') {
        r->p++;
        ref = read_class(r, true);
    } else if (c == '(') {
        r->p++;
        int group = rule_generated(r, "group");
        read_alternatives(r, group, true);
        if (r->failed) return;
        if (r->p >= r->end || *r->p != ')') { fail(r, at, "a '(' without its ')'"); return; }
        r->p++;
        ref = group;
    } else if (is_name_char(c)) {
        const char *s = r->p;
        while (r->p < r->end && is_name_char(*r->p)) r->p++;
        ref = rule_find(r, s, (size_t)(r->p - s), true);
    } else {
        char b[8];
        fail(r, at, "unexpected '%s'", shown(c, b));
        return;
    }
    if (r->failed) return;
    /* the repetition: x* is R ::= x R | (nothing), the recursion in tail position (no stack grows) */
    long lo = 1, hi = 1;
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
        lo = *r->p == '+';
        hi = *r->p == '?' ? 1 : -1;
        r->p++;
    } else if (r->p < r->end && *r->p == '{') {
        const char *b = r->p++;
        lo = 0;
        for (; r->p < r->end && *r->p >= '0' && *r->p <= '9'; r->p++) if (lo <= MAX_REPEAT) lo = lo * 10 + *r->p - '0';
        hi = lo;
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            hi = -1;
            if (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
                hi = 0;
                for (; r->p < r->end && *r->p >= '0' && *r->p <= '9'; r->p++)
                    if (hi <= MAX_REPEAT) hi = hi * 10 + *r->p - '0';
            }
        }
        if (r->p >= r->end || *r->p != '}') { fail(r, b, "a repetition is {m}, {m,} or {m,n}"); return; }
        r->p++;
        if (lo > MAX_REPEAT || hi > MAX_REPEAT) { fail(r, b, "repetitions are bounded at %d", MAX_REPEAT); return; }
        if (hi >= 0 && hi < lo) { fail(r, b, "{%ld,%ld}: the bound comes before the start", lo, hi); return; }
    }
    for (long i = 0; i < lo; i++) put(r, rule, E_REF, ref);
    if (hi < 0) {   /* star ::= ref star | */
        int star = rule_generated(r, "star");
        put(r, star, E_REF, ref); put(r, star, E_REF, star); put(r, star, E_END, 0);
        put(r, star, E_END, 0);
        put(r, rule, E_REF, star);
    } else if (hi > lo) {   /* opt_k ::= ref opt_{k-1} | ; nested so that at most hi - lo more are read */
        int inner = -1;
        for (long i = lo; i < hi; i++) {
            int opt = rule_generated(r, "opt");
            put(r, opt, E_REF, ref);
            if (inner >= 0) put(r, opt, E_REF, inner);
            put(r, opt, E_END, 0);
            put(r, opt, E_END, 0);
            inner = opt;
        }
        put(r, rule, E_REF, inner);
    }
}

/* alternatives: sequence ('|' sequence)*, each sequence ended by END; stops at ')' (nested), at the next rule's
 * head, or at the end */
static void read_alternatives(Reader *r, int rule, bool nested) {
    for (;;) {
        skip_space(r);
        while (!r->failed && r->p < r->end && *r->p != '|' && *r->p != ')' && !at_rule_head(r)) {
            read_element(r, rule);
            skip_space(r);
        }
        put(r, rule, E_END, 0);
        if (r->failed || r->p >= r->end || *r->p != '|') break;
        r->p++;
    }
    if (!nested && !r->failed && r->p < r->end && *r->p == ')') fail(r, r->p, "a ')' without its '('");
}

/* ---------------------------------------------------------------- checks after reading */
static void compute_nullable(const Grammar *g, bool *nullable) {
    memset(nullable, 0, (size_t)g->n_rules);
    for (bool changed = true; changed;) {
        changed = false;
        for (int rl = 0; rl < g->n_rules; rl++) {
            if (nullable[rl]) continue;
            for (size_t a = 0; a < g->alts[rl].n && !nullable[rl]; a++) {
                size_t e = (size_t)g->alts[rl].p[a];
                while (g->elems[e].kind == E_REF && nullable[g->elems[e].arg]) e++;
                if (g->elems[e].kind == E_END) nullable[rl] = changed = true;
            }
        }
    }
}

/* A rule that can begin with itself (through rules that may match nothing) would expand forever */
static int left_recursive(const Grammar *g, const bool *nullable) {
    int n = g->n_rules;
    uint8_t *mark = calloc((size_t)n, 1);   /* 0 unseen, 1 on the path, 2 done */
    int *stack = malloc((size_t)n * 2 * sizeof *stack), bad = -1;
    if (!mark || !stack) { free(mark); free(stack); return -2; }
    for (int s = 0; s < n && bad < 0; s++) {
        if (mark[s]) continue;
        int top = 0;
        stack[top++] = s; stack[top++] = 0;   /* rule, next leftmost reference to look at */
        mark[s] = 1;
        while (top && bad < 0) {
            int rl = stack[top - 2], k = stack[top - 1]++, seen = 0, next = -1;
            for (size_t a = 0; a < g->alts[rl].n && next < 0; a++)
                for (size_t e = (size_t)g->alts[rl].p[a]; g->elems[e].kind == E_REF; e++) {
                    if (seen++ == k) { next = g->elems[e].arg; break; }
                    if (!nullable[g->elems[e].arg]) break;
                }
            if (next < 0) { mark[rl] = 2; top -= 2; continue; }
            if (mark[next] == 1) bad = next;
            else if (!mark[next]) { mark[next] = 1; stack[top++] = next; stack[top++] = 0; }
        }
    }
    free(mark); free(stack);
    return bad;
}

/* ---------------------------------------------------------------- the automaton */
static int node(Grammar *g, int32_t elem, int32_t parent) {
    uint64_t key = (uint64_t)(uint32_t)elem << 32 | (uint32_t)parent;
    int32_t id = map_get(&g->node_of, key);
    if (id >= 0) return id;
    if (g->node_elem.n >= MAX_NODES) { g->oom = true; return -1; }
    id = (int32_t)g->node_elem.n;
    ints_push(&g->node_elem, elem);
    ints_push(&g->node_parent, parent);
    ints_push(&g->node_depth, parent <= BOUNDARY ? 1 : g->node_depth.p[parent] + 1);
    if (g->node_elem.oom || g->node_parent.oom || g->node_depth.oom || !map_put(&g->node_of, key, id)) {
        g->oom = true;
        return -1;
    }
    g->stats.nodes = id + 1;
    return id;
}

/* The stacks element elem (with parent below it) stands for, each with a byte set on top, into out */
static void expand(Grammar *g, int32_t elem, int32_t parent, Ints *out) {
    if (--g->budget < 0) { g->oom = true; return; }
    uint64_t key = (uint64_t)(uint32_t)elem << 32 | (uint32_t)parent;
    if (map_get(&g->seen, key) == g->gen) return;
    if (!map_put(&g->seen, key, g->gen)) { g->oom = true; return; }
    const Elem *e = &g->elems[elem];
    if (e->kind == E_BYTES) {
        int n = node(g, elem, parent);
        if (n >= 0) ints_push(out, n);
    } else if (e->kind == E_END) {   /* the rule is matched: back to its caller, or the root is (or the cut) */
        if (parent == ACCEPT || parent == BOUNDARY) ints_push(out, parent);
        else expand(g, g->node_elem.p[parent], g->node_parent.p[parent], out);
    } else {                          /* a rule: each alternative; a call in tail position pushes nothing */
        int32_t ret = g->elems[elem + 1].kind == E_END ? parent : node(g, elem + 1, parent);
        if (ret < 0) return;
        const Ints *alts = &g->alts[e->arg];
        for (size_t a = 0; a < alts->n; a++) expand(g, alts->p[a], ret, out);
    }
}

static int cmp_i32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

/* The interned set of out's nodes (sorted, without repeats); -1 for none */
static int32_t set_intern(Grammar *g, Ints *out) {
    if (!out->n || out->oom) { if (out->oom) g->oom = true; return -1; }
    qsort(out->p, out->n, sizeof *out->p, cmp_i32);
    size_t m = 1;
    for (size_t i = 1; i < out->n; i++) if (out->p[i] != out->p[m - 1]) out->p[m++] = out->p[i];
    out->n = m;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < m; i++) h = (h ^ (uint64_t)(uint32_t)out->p[i]) * 1099511628211ULL;
    for (int32_t s = map_get(&g->set_of, h); s >= 0; s = g->set_next.p[s]) {
        size_t b = (size_t)g->set_start.p[s], n = (size_t)g->set_start.p[s + 1] - b;
        if (n == m && !memcmp(g->set_pool.p + b, out->p, m * sizeof *out->p)) return s;
    }
    if (g->set_next.n >= MAX_NODES) { g->oom = true; return -1; }
    int32_t id = (int32_t)g->set_next.n;
    if (!g->set_start.n) ints_push(&g->set_start, 0);   /* set i: set_start[i] .. set_start[i + 1] */
    for (size_t i = 0; i < m; i++) ints_push(&g->set_pool, out->p[i]);
    ints_push(&g->set_start, (int32_t)g->set_pool.n);
    ints_push(&g->set_next, map_get(&g->set_of, h));
    if (g->set_pool.oom || g->set_start.oom || g->set_next.oom || !map_put(&g->set_of, h, id)) {
        g->oom = true;
        return -1;
    }
    g->stats.sets = id + 1;
    return id;
}

/* A new expansion: what the last one reached may be reached again */
static void next_gen(Grammar *g) {
    if (++g->gen == INT32_MAX) { map_free(&g->seen); g->gen = 0; }
}

/* The nodes of set s after byte b, unsorted, into out */
static void step_nodes(Grammar *g, const int32_t *nodes, size_t n, uint8_t b, Ints *out) {
    next_gen(g);
    for (size_t i = 0; i < n; i++) {
        int32_t nd = nodes[i];
        if (nd == ACCEPT || nd == BOUNDARY) continue;   /* the root complete, the cut: nothing read here */
        int32_t elem = g->node_elem.p[nd];
        if (g->sets[g->elems[elem].arg][b >> 6] >> (b & 63) & 1) expand(g, elem + 1, g->node_parent.p[nd], out);
    }
}

/* Set s after byte b (memoized); -1: dead */
static int32_t step(Grammar *g, int32_t s, uint8_t b) {
    /* the first DENSE_SETS sets a step starts from get a table of their 256 successors (a trie walk makes tens of
     * thousands of steps: a load each), the rest a hash map */
    if ((size_t)s >= g->n_dense && g->n_dense < DENSE_SETS) {
        size_t n = (size_t)s + 1 > 2 * g->n_dense ? (size_t)s + 1 : 2 * g->n_dense;
        if (n > DENSE_SETS) n = DENSE_SETS;
        if ((size_t)s < n) {
            int32_t **d = realloc(g->dense, n * sizeof *d);
            if (!d) { g->oom = true; return -1; }
            memset(d + g->n_dense, 0, (n - g->n_dense) * sizeof *d);
            g->dense = d;
            g->n_dense = n;
        }
    }
    int32_t *row = (size_t)s < g->n_dense ? g->dense[s] : NULL;
    if ((size_t)s < g->n_dense && !row) {
        if (!(row = g->dense[s] = malloc(256 * sizeof *row))) { g->oom = true; return -1; }
        for (int i = 0; i < 256; i++) row[i] = -2;
    }
    if (row && row[b] != -2) return row[b];
    uint64_t key = (uint64_t)(uint32_t)s << 8 | b;
    int32_t t = row ? -2 : map_get(&g->trans, key);
    if (t != -2) return t;
    Ints out = {0};
    size_t start = (size_t)g->set_start.p[s], n = (size_t)g->set_start.p[s + 1] - start;
    /* the nodes are copied: interning below may move the pool */
    int32_t *nodes = malloc((n ? n : 1) * sizeof *nodes);
    if (!nodes) { g->oom = true; return -1; }
    memcpy(nodes, g->set_pool.p + start, n * sizeof *nodes);
    step_nodes(g, nodes, n, b, &out);
    free(nodes);
    t = set_intern(g, &out);
    free(out.p);
    if (g->oom) return -1;   /* a transition cut short by a bound is not remembered */
    if (row) row[b] = t;
    else if (!map_put(&g->trans, key, t)) g->oom = true;
    return t;
}

/* ---------------------------------------------------------------- compile */
Grammar *grammar_compile(const char *src, size_t len, char *err, size_t err_size) {
    Grammar *g = calloc(1, sizeof *g);
    if (!g) { snprintf(err, err_size, "out of memory"); return NULL; }
    g->budget = MASK_BUDGET;
    Reader r = { .g = g, .src = src, .p = src, .end = src + len, .err = err, .err_size = err_size };
    bool *nullable = NULL;
    skip_space(&r);
    if (r.p >= r.end) fail(&r, r.p, "no rules");
    while (!r.failed && r.p < r.end) {
        const char *at = r.p;
        if (!at_rule_head(&r)) { fail(&r, at, "a rule begins with its name and ::="); break; }
        const char *s = r.p;
        while (is_name_char(*r.p)) r.p++;
        int rule = rule_find(&r, s, (size_t)(r.p - s), true);
        if (!r.failed && r.bodies[rule].n) { fail(&r, at, "rule '%s' is defined twice", g->names[rule]); break; }
        while (*r.p != ':') r.p++;   /* at_rule_head found "::=" after the name and blanks */
        r.p += 3;
        read_alternatives(&r, rule, false);
        if (!r.failed && !r.bodies[rule].n) put(&r, rule, E_END, 0);
        skip_space(&r);
    }
    if (!r.failed) {
        g->root = rule_find(&r, "root", 4, false);
        if (g->root < 0) fail(&r, r.end, "no rule named root");
    }
    for (int i = 0; !r.failed && i < g->n_rules; i++)
        if (!r.bodies[i].n) fail(&r, r.end, "rule '%s' is used but not defined", g->names[i]);
    /* the bodies into one element array: each alternative's elements, END after each */
    if (!r.failed) {
        g->alts = calloc((size_t)g->n_rules, sizeof *g->alts);
        size_t total = 1;
        for (int i = 0; i < g->n_rules; i++) total += r.bodies[i].n / 2 + 1;
        g->elems = malloc(total * sizeof *g->elems);
        if (!g->alts || !g->elems) fail(&r, r.end, "out of memory");
        for (int i = 0; !r.failed && i < g->n_rules; i++) {
            bool fresh = true;
            for (size_t k = 0; k < r.bodies[i].n; k += 2) {
                if (fresh) ints_push(&g->alts[i], (int32_t)g->n_elems);
                fresh = r.bodies[i].p[k] == E_END;
                g->elems[g->n_elems++] = (Elem){ (uint8_t)r.bodies[i].p[k], r.bodies[i].p[k + 1] };
            }
            if (g->alts[i].oom) fail(&r, r.end, "out of memory");
        }
        g->elems[g->n_elems++] = (Elem){ E_END, 0 };
    }
    if (!r.failed) {
        nullable = malloc((size_t)g->n_rules);
        if (!nullable) fail(&r, r.end, "out of memory");
        else {
            compute_nullable(g, nullable);
            int bad = left_recursive(g, nullable);
            if (bad == -2) fail(&r, r.end, "out of memory");
            else if (bad >= 0) fail(&r, r.end, "rule '%s' is left-recursive (it can begin with itself)",
                                    strchr(g->names[bad], '~') ? "a group or repetition" : g->names[bad]);
        }
    }
    if (!r.failed) {   /* node 0: the root is complete; the first set: the root's alternatives */
        for (int i = 0; i < 2; i++) {   /* ACCEPT, BOUNDARY */
            ints_push(&g->node_elem, -1);
            ints_push(&g->node_parent, -1);
            ints_push(&g->node_depth, 0);
        }
        Ints out = {0};
        next_gen(g);
        const Ints *alts = &g->alts[g->root];
        for (size_t a = 0; a < alts->n; a++) expand(g, alts->p[a], 0, &out);
        g->start = set_intern(g, &out);
        free(out.p);
        if (g->oom) fail(&r, r.end, "out of memory");
        if (g->start < 0 && !r.failed) fail(&r, r.end, "the root matches nothing");
    }
    for (int i = 0; i < g->n_rules && r.bodies; i++) free(r.bodies[i].p);
    free(r.bodies);
    free(nullable);
    if (r.failed) { grammar_free(g); return NULL; }
    return g;
}

void grammar_free(Grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) {
        free(g->names[i]);
        if (g->alts) free(g->alts[i].p);
    }
    free(g->names); free(g->alts); free(g->elems); free(g->sets);
    free(g->node_elem.p); free(g->node_parent.p); free(g->node_depth.p); map_free(&g->node_of);
    free(g->set_start.p); free(g->set_pool.p); free(g->set_next.p); map_free(&g->set_of);
    map_free(&g->trans); map_free(&g->mask_of); free(g->masks); map_free(&g->seen);
    map_free(&g->ctx_of); free(g->ctx_masks);
    for (size_t i = 0; i < g->n_dense; i++) free(g->dense[i]);
    free(g->dense);
    for (int i = 0; i < MASK_CACHE; i++) free(g->ctx_unsure[i].p);
    free(g);
}

/* ---------------------------------------------------------------- states */
GrammarState grammar_start(Grammar *g) { return (GrammarState){ g, g->start }; }

/* The set after bytes, within the budget at hand; -1: dead (or past a bound) */
static int32_t advance_set(Grammar *g, int32_t set, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n && set >= 0; i++) set = step(g, set, bytes[i]);
    return g->oom ? -1 : set;
}

bool grammar_advance(GrammarState *s, const uint8_t *bytes, size_t n) {
    s->g->budget = MASK_BUDGET;
    s->set = s->g->oom ? -1 : advance_set(s->g, s->set, bytes, n);
    return s->set >= 0;
}

bool grammar_can_end(const GrammarState *s) {
    if (s->set < 0) return false;
    return s->g->set_pool.p[s->g->set_start.p[s->set]] == 0;   /* sorted: node 0 first */
}

bool grammar_must_end(const GrammarState *s) {
    return grammar_can_end(s) && s->g->set_start.p[s->set + 1] - s->g->set_start.p[s->set] == 1;
}

GrammarStats grammar_stats(const Grammar *g) { return g->stats; }

/* ---------------------------------------------------------------- the vocabulary and its masks */
struct GrammarVocab {
    int n;                       /* tokens */
    int words;                   /* of a mask */
    const uint8_t **bytes; int *lens;
    uint8_t *special;            /* never text */
    int32_t *stop; int n_stop;
    /* the trie: node i's children child[child_start[i] .. child_start[i + 1]) reached by child_byte; its tokens
     * tok[tok_start[i] .. tok_start[i + 1]) end there */
    int32_t *child_start, *child, *tok_start, *tok;
    uint8_t *child_byte;
    int n_nodes;
    /* the same tokens in the trie's depth-first order: node i's subtree holds order[sub_lo[i] .. sub_hi[i]), and
     * sub_bytes[i] every byte on an edge below it (a subtree all of whose bytes keep a set where it is is taken
     * whole, without a step) */
    int32_t *order, *sub_lo, *sub_hi;
    uint64_t (*sub_bytes)[4];
};

GrammarVocab *grammar_vocab_new(int n, const uint8_t *const *bytes, const int *lens, const bool *special,
                                const int32_t *stop, int n_stop) {
    GrammarVocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n = n;
    v->words = (n + 63) / 64;
    v->bytes = malloc((size_t)n * sizeof *v->bytes);
    v->lens = malloc((size_t)n * sizeof *v->lens);
    v->special = malloc((size_t)n);
    v->stop = malloc((size_t)(n_stop ? n_stop : 1) * sizeof *v->stop);
    /* the trie, built by inserting every text token: a node per distinct prefix */
    Map edge = {0};   /* node << 8 | byte -> child */
    Ints parent = {0}, byte_of = {0}, tok_node = {0};
    ints_push(&parent, -1); ints_push(&byte_of, 0);
    bool ok = v->bytes && v->lens && v->special && v->stop;
    for (int t = 0; ok && t < n; t++) {
        v->bytes[t] = bytes[t]; v->lens[t] = lens[t]; v->special[t] = special && special[t];
        int32_t at = 0;
        if (v->special[t] || lens[t] <= 0) { ints_push(&tok_node, -1); continue; }
        for (int i = 0; ok && i < lens[t]; i++) {
            uint64_t key = (uint64_t)(uint32_t)at << 8 | bytes[t][i];
            int32_t c = map_get(&edge, key);
            if (c < 0) {
                c = (int32_t)parent.n;
                ints_push(&parent, at); ints_push(&byte_of, bytes[t][i]);
                ok = map_put(&edge, key, c);
            }
            at = c;
        }
        ints_push(&tok_node, at);
    }
    ok = ok && !parent.oom && !byte_of.oom && !tok_node.oom;
    if (ok) {
        int nn = v->n_nodes = (int)parent.n;
        v->child_start = calloc((size_t)nn + 1, sizeof *v->child_start);
        v->child = malloc((size_t)nn * sizeof *v->child);
        v->child_byte = malloc((size_t)nn);
        v->tok_start = calloc((size_t)nn + 1, sizeof *v->tok_start);
        v->tok = malloc((size_t)(n ? n : 1) * sizeof *v->tok);
        ok = v->child_start && v->child && v->child_byte && v->tok_start && v->tok;
        for (int i = 1; ok && i < nn; i++) v->child_start[parent.p[i] + 1]++;
        for (int i = 0; ok && i < nn; i++) v->child_start[i + 1] += v->child_start[i];
        for (int t = 0; ok && t < n; t++) if (tok_node.p[t] >= 0) v->tok_start[tok_node.p[t] + 1]++;
        for (int i = 0; ok && i < nn; i++) v->tok_start[i + 1] += v->tok_start[i];
        int32_t *fill = ok ? calloc((size_t)nn, sizeof *fill) : NULL;
        ok = ok && fill;
        for (int i = 1; ok && i < nn; i++) {
            int32_t p = parent.p[i], k = v->child_start[p] + fill[p]++;
            v->child[k] = i;
            v->child_byte[k] = (uint8_t)byte_of.p[i];
        }
        if (ok) memset(fill, 0, (size_t)nn * sizeof *fill);
        for (int t = 0; ok && t < n; t++) {
            int32_t at = tok_node.p[t];
            if (at >= 0) v->tok[v->tok_start[at] + fill[at]++] = t;
        }
        free(fill);
        if (ok && n_stop) memcpy(v->stop, stop, (size_t)n_stop * sizeof *stop);
        v->n_stop = n_stop;
        /* the depth-first order (a node's own tokens, then its children's subtrees) and the bytes below each node
         * (a child's index is above its parent's: one pass from the end) */
        v->order = malloc((size_t)(n ? n : 1) * sizeof *v->order);
        v->sub_lo = malloc((size_t)nn * sizeof *v->sub_lo);
        v->sub_hi = malloc((size_t)nn * sizeof *v->sub_hi);
        v->sub_bytes = calloc((size_t)nn, sizeof *v->sub_bytes);
        int32_t *stack = malloc((size_t)nn * 2 * sizeof *stack);
        ok = ok && v->order && v->sub_lo && v->sub_hi && v->sub_bytes && stack;
        for (int i = nn - 1; ok && i > 0; i--) {
            int32_t p = parent.p[i];
            for (int w = 0; w < 4; w++) v->sub_bytes[p][w] |= v->sub_bytes[i][w];
            v->sub_bytes[p][byte_of.p[i] >> 6] |= 1ULL << (byte_of.p[i] & 63);
        }
        int top = 0, pos = 0;
        if (ok) { stack[top++] = 0; stack[top++] = -1; }
        while (top) {   /* (node, its next child; -1: not entered yet) */
            int32_t k = stack[--top], at = stack[--top];
            if (k < 0) {
                v->sub_lo[at] = pos;
                for (int32_t j = v->tok_start[at]; j < v->tok_start[at + 1]; j++) v->order[pos++] = v->tok[j];
                k = v->child_start[at];
            }
            if (k < v->child_start[at + 1]) {
                stack[top++] = at; stack[top++] = k + 1;
                stack[top++] = v->child[k]; stack[top++] = -1;
            } else {
                v->sub_hi[at] = pos;
            }
        }
        free(stack);
    }
    map_free(&edge);
    free(parent.p); free(byte_of.p); free(tok_node.p);
    if (!ok) { grammar_vocab_free(v); return NULL; }
    return v;
}

void grammar_vocab_free(GrammarVocab *v) {
    if (!v) return;
    free(v->bytes); free(v->lens); free(v->special); free(v->stop);
    free(v->child_start); free(v->child); free(v->child_byte); free(v->tok_start); free(v->tok);
    free(v->order); free(v->sub_lo); free(v->sub_hi); free(v->sub_bytes);
    free(v);
}

static void set_bit(uint64_t *mask, int32_t id) { mask[id >> 6] |= 1ULL << (id & 63); }

/* The trie walked from context c (a set cut at CONTEXT_FRAMES): the tokens whose bytes keep a stack alive within
 * it into mask; those whose only way on goes past the cut with bytes left into unsure (the whole stack decides) */
static void walk(Grammar *g, const GrammarVocab *v, int32_t c, uint64_t *mask, Ints *unsure) {
    int32_t *stack = malloc((size_t)v->n_nodes * 3 * sizeof *stack);
    if (!stack) { g->oom = true; return; }
    /* the bytes that keep the context where it is (a JSON string's plain characters): a subtree of only those is
     * taken whole */
    uint64_t loop[4] = {0};
    for (int b = 0; b < 256; b++) if (step(g, c, (uint8_t)b) == c) loop[b >> 6] |= 1ULL << (b & 63);
    int top = 0;
    stack[top++] = 0; stack[top++] = c; stack[top++] = 0;
    while (top) {   /* (trie node, set or -1, whether a stack went past the cut on the way) */
        int32_t past = stack[--top], set = stack[--top], at = stack[--top];
        g->stats.trie_nodes_visited++;
        for (int32_t k = v->tok_start[at]; k < v->tok_start[at + 1]; k++) {
            if (set >= 0) set_bit(mask, v->tok[k]);
            else ints_push(unsure, v->tok[k]);
        }
        bool cut = past;
        if (set >= 0) {   /* sorted: ACCEPT, then BOUNDARY, first */
            const int32_t *nodes = g->set_pool.p + g->set_start.p[set];
            cut |= nodes[0] == BOUNDARY || (nodes[0] == ACCEPT && g->set_start.p[set + 1] - g->set_start.p[set] > 1 &&
                                            nodes[1] == BOUNDARY);
        }
        for (int32_t k = v->child_start[at]; k < v->child_start[at + 1]; k++) {
            int32_t next = set >= 0 ? step(g, set, v->child_byte[k]) : -1, ch = v->child[k];
            if (next == c) {
                const uint64_t *sb = v->sub_bytes[ch];
                if (!(sb[0] & ~loop[0]) && !(sb[1] & ~loop[1]) && !(sb[2] & ~loop[2]) && !(sb[3] & ~loop[3])) {
                    for (int32_t j = v->sub_lo[ch]; j < v->sub_hi[ch]; j++) set_bit(mask, v->order[j]);
                    continue;
                }
            }
            if (next >= 0 || cut) { stack[top++] = ch; stack[top++] = next; stack[top++] = cut; }
        }
    }
    free(stack);
    if (unsure->oom) g->oom = true;
}

/* Node n with the frames of its stack at depth `level` and below cut (ACCEPT stays: the root's end is known) */
static int32_t cut_node(Grammar *g, int32_t n, int level) {
    if (n == ACCEPT || n == BOUNDARY || n < 0) return n;
    if (g->node_depth.p[n] <= level) return BOUNDARY;
    int32_t below = cut_node(g, g->node_parent.p[n], level);
    return below < 0 ? -1 : node(g, g->node_elem.p[n], below);
}

/* The context of set s: its stacks cut at one depth, CONTEXT_FRAMES frames under the shallowest stack's top (one
 * depth for all: a set that maps to itself, as a JSON string's plain characters do, keeps doing so). A JSON
 * string's characters at any depth, an object's next key at any depth, are one context: its walk serves them all. */
static int32_t context_of(Grammar *g, int32_t s) {
    Ints out = {0};
    size_t b = (size_t)g->set_start.p[s], n = (size_t)g->set_start.p[s + 1] - b;
    int shallowest = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t nd = g->set_pool.p[b + i];
        if (nd != ACCEPT && (shallowest < 0 || g->node_depth.p[nd] < shallowest)) shallowest = g->node_depth.p[nd];
    }
    int level = shallowest - 1 - CONTEXT_FRAMES;
    for (size_t i = 0; i < n; i++) {
        int32_t nd = g->set_pool.p[b + i];   /* the pool may move as nodes are interned: read it each time */
        int32_t c = nd == ACCEPT ? ACCEPT : node(g, g->node_elem.p[nd], cut_node(g, g->node_parent.p[nd], level));
        if (c >= 0) ints_push(&out, c);
    }
    int32_t c = set_intern(g, &out);
    free(out.p);
    return c;
}

bool grammar_ok(const Grammar *g) { return !g->oom; }

/* A cache slot for key in map (slots round robin, the oldest computed going first): *hit when key was there */
static int32_t cache_slot(Map *of, int32_t *owner, int *clock, int32_t key, bool *hit) {
    int32_t slot = map_get(of, (uint64_t)key);
    *hit = slot >= 0 && owner[slot] == key;
    if (*hit) return slot;
    slot = *clock;
    *clock = (*clock + 1) % MASK_CACHE;
    owner[slot] = -1;
    return slot;
}

const uint64_t *grammar_mask(GrammarState *st, const GrammarVocab *v) {
    Grammar *g = st->g;
    if (g->oom) return NULL;
    size_t words = (size_t)v->words;
    if (g->mask_vocab != v) {   /* the caches are per vocabulary: another one empties them */
        map_free(&g->mask_of); map_free(&g->ctx_of);
        free(g->masks); free(g->ctx_masks);
        g->masks = calloc((size_t)MASK_CACHE * words, sizeof *g->masks);
        g->ctx_masks = calloc((size_t)MASK_CACHE * words, sizeof *g->ctx_masks);
        if (!g->masks || !g->ctx_masks) { g->mask_vocab = NULL; g->oom = true; return NULL; }
        g->mask_words = v->words;
        g->mask_vocab = v;
        for (int i = 0; i < MASK_CACHE; i++) g->mask_set[i] = g->ctx_set[i] = -1;
        g->mask_clock = g->ctx_clock = 0;
    }
    bool hit;
    int32_t slot = cache_slot(&g->mask_of, g->mask_set, &g->mask_clock, st->set, &hit);
    uint64_t *mask = g->masks + (size_t)slot * words;
    if (hit) { g->stats.masks_cached++; return mask; }
    memset(mask, 0, words * sizeof *mask);
    if (st->set < 0) return mask;   /* dead: nothing */
    g->budget = MASK_BUDGET;
    /* the context's tokens, walked once for every set that has it */
    int32_t c = context_of(g, st->set);
    if (c < 0) { g->oom = true; return NULL; }
    int32_t cs = cache_slot(&g->ctx_of, g->ctx_set, &g->ctx_clock, c, &hit);
    uint64_t *certain = g->ctx_masks + (size_t)cs * words;
    Ints *unsure = &g->ctx_unsure[cs];
    if (!hit) {
        memset(certain, 0, words * sizeof *certain);
        unsure->n = 0;
        walk(g, v, c, certain, unsure);
        if (g->oom || !map_put(&g->ctx_of, (uint64_t)c, cs)) { g->oom = true; return NULL; }
        g->ctx_set[cs] = c;
        g->stats.contexts_computed++;
    }
    memcpy(mask, certain, words * sizeof *mask);
    for (size_t i = 0; i < unsure->n; i++) {   /* the whole stack decides the rest, within the same budget */
        int32_t id = unsure->p[i];
        g->stats.unsure_checked++;
        if (advance_set(g, st->set, v->bytes[id], (size_t)v->lens[id]) >= 0) set_bit(mask, id);
    }
    if (grammar_can_end(st)) for (int i = 0; i < v->n_stop; i++) set_bit(mask, v->stop[i]);
    if (g->oom || !map_put(&g->mask_of, (uint64_t)st->set, slot)) { g->oom = true; return NULL; }
    g->mask_set[slot] = st->set;
    g->stats.masks_computed++;
    return mask;
}

void grammar_mask_brute(const GrammarState *st, const GrammarVocab *v, uint64_t *mask) {
    Grammar *g = st->g;
    g->budget = MASK_BUDGET;
    memset(mask, 0, (size_t)v->words * sizeof *mask);
    if (st->set < 0) return;
    size_t b = (size_t)g->set_start.p[st->set], n = (size_t)g->set_start.p[st->set + 1] - b;
    Ints cur = {0}, next = {0};
    for (int t = 0; t < v->n; t++) {
        if (v->special[t] || v->lens[t] <= 0) continue;
        g->budget = MASK_BUDGET;   /* a token's bytes, as grammar_advance has them */
        cur.n = 0;
        for (size_t i = 0; i < n; i++) ints_push(&cur, g->set_pool.p[b + i]);
        for (int i = 0; i < v->lens[t] && cur.n; i++) {   /* the stacks byte by byte: no sets, no memo */
            next.n = 0;
            step_nodes(g, cur.p, cur.n, v->bytes[t][i], &next);
            Ints swap = cur; cur = next; next = swap;
        }
        if (cur.n) set_bit(mask, t);
    }
    free(cur.p); free(next.p);
    if (grammar_can_end(st)) for (int i = 0; i < v->n_stop; i++) set_bit(mask, v->stop[i]);
}

bool grammar_accept_token(GrammarState *s, const GrammarVocab *v, int32_t id) {
    if (id < 0 || id >= v->n || s->set < 0) return false;
    for (int i = 0; i < v->n_stop; i++) if (v->stop[i] == id) return grammar_can_end(s);
    if (v->special[id] || v->lens[id] <= 0) return false;
    return grammar_advance(s, v->bytes[id], (size_t)v->lens[id]);
}

const char grammar_json_object_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" char* \"\\\"\" ws\n"
    "char   ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,4})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
