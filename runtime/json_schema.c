/* json_schema.c: see json_schema.h. One rule per schema (r1, r2, ...), written after the rules it uses; the JSON
 * pieces every schema shares (a string's characters, a number, any value) once, under names beginning with j. */
#include "json_schema.h"
#include "buf.h"
#include "json.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEFS 256
#define MAX_DEPTH 64            /* schemas nested deeper are refused (the JSON reader allows 128) */
#define MAX_RULES 100000

static const char JSON_PIECES[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "jvalue ::= jobject | jarray | jstring | jnumber | (\"true\" | \"false\" | \"null\") ws\n"
    "jobject ::= \"{\" ws ( jstring \":\" ws jvalue (\",\" ws jstring \":\" ws jvalue)* )? \"}\" ws\n"
    "jarray ::= \"[\" ws ( jvalue (\",\" ws jvalue)* )? \"]\" ws\n"
    "jstring ::= \"\\\"\" jchar* \"\\\"\" ws\n"
    "jchar ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "jint ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "jfrac ::= (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,4})?\n"
    "jnumber ::= \"-\"? jint jfrac ws\n"
    "jdate ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"
    "jtime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "juuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n";

typedef struct {
    const Json *j;
    Buf out;
    int n_rules;
    char *err; size_t err_size;
    bool failed;
    int defs;                                  /* the root's $defs (or definitions) object token, or -1 */
    struct { int tok; int rule; } def[MAX_DEFS]; int n_def;
} Conv;

static void fail(Conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(Conv *c, const char *path, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = true;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_size, "%s%s%s", path, *path ? ": " : "", msg);
    /* names from the schema are in it: one line of printable ASCII, whatever they hold (or where %.100s cut them) */
    for (char *q = c->err; *q; q++) if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f) *q = '?';
}

/* path + ".name" (or "[i]"), into a buffer of the caller's */
static const char *sub(char *buf, size_t size, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static const char *sub(char *buf, size_t size, const char *path, const char *fmt, ...) {
    char tail[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    snprintf(buf, size, "%s%s%s", path, *path && tail[0] != '[' ? "." : "", tail);
    return buf;
}

/* fail() at path's key: "path.key: ..." */
static void fail_at(Conv *c, const char *path, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_at(Conv *c, const char *path, const char *key, const char *fmt, ...) {
    char where[300], msg[300];
    snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail(c, where, "%s", msg);
}

/* The decoded string token t (malloc'd, NUL-terminated), NULL where it is not a string */
static char *text_of(const Json *j, int t, size_t *len) {
    size_t room = json_string_room(j, t), at;
    char *s = room ? malloc(room) : NULL;
    if (s && json_string(j, t, s, len, true, &at) != JSON_OK) { free(s); s = NULL; }
    return s;
}

/* s[0..n) as a GBNF literal of its JSON text ("\"...\""): JSON's escapes, then GBNF's */
static void literal_json_string(Buf *b, const char *s, size_t n) {
    buf_str(b, "\"\\\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') buf_str(b, "\\\\\\\"");          /* JSON \" as GBNF: \\ \" */
        else if (ch == '\\') buf_str(b, "\\\\\\\\");    /* JSON \\ */
        else if (ch < 0x20) buf_fmt(b, "\\\\u%04x", ch);  /* JSON \u00XX */
        else buf_add(b, s + i, 1);
    }
    buf_str(b, "\\\"\"");
}

/* A scalar JSON value (enum, const) as a GBNF literal; false where it is an object or an array */
static bool literal_value(Conv *c, int t) {
    const Json *j = c->j;
    if (json_type(j, t) == JSON_STRING) {
        size_t n;
        char *s = text_of(j, t, &n);
        if (!s) return false;
        literal_json_string(&c->out, s, n);
        free(s);
        return true;
    }
    if (json_type(j, t) != JSON_PRIMITIVE) return false;
    const JsonTok *k = &j->tok[t];
    buf_str(&c->out, "\"");
    buf_add(&c->out, j->src + k->start, (size_t)(k->end - k->start));
    buf_str(&c->out, "\"");
    return true;
}

static int new_rule(Conv *c) {
    if (++c->n_rules > MAX_RULES) fail(c, "", "the schema makes more than %d rules", MAX_RULES);
    return c->n_rules;
}

static int schema_rule(Conv *c, int t, const char *path, int depth);

static const char *const KNOWN[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "anyOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "format", "minimum", "exclusiveMinimum",
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "strict",
};

static bool whole_in(Conv *c, int t, const char *path, const char *key, double lo, double hi, long *v) {
    int k = json_find(c->j, t, key);
    double d;
    if (k < 0) return false;
    char p[256];
    if (!json_number(c->j, k, &d) || d != floor(d) || d < lo || d > hi) {
        fail(c, sub(p, sizeof p, path, "%s", key), "must be a whole number in %.0f..%.0f", lo, hi);
        return false;
    }
    *v = (long)d;
    return true;
}

/* The expression for the value of one type (a schema's "type", or the type its keywords imply) into o; the rules it
 * uses go to c->out, whole lines */
static void type_body(Conv *c, int t, const char *type, const char *path, Buf *o) {
    const Json *j = c->j;
    char p[256];
    double d;
    int k;
    if (!strcmp(type, "string")) {
        k = json_find(j, t, "format");
        if (k >= 0) {
            const char *f = json_str_eq(j, k, "date") ? "jdate" : json_str_eq(j, k, "time") ? "jtime"
                          : json_str_eq(j, k, "date-time") ? "jdate \"T\" jtime" : json_str_eq(j, k, "uuid") ? "juuid"
                          : NULL;
            if (!f) { fail_at(c, path, "format", "not supported yet (date, time, date-time, uuid are)"); return; }
            buf_fmt(o, "\"\\\"\" %s \"\\\"\" ws", f);
            return;
        }
        long lo = 0, hi = -1;
        bool has_lo = whole_in(c, t, path, "minLength", 0, 1000, &lo);
        bool has_hi = whole_in(c, t, path, "maxLength", 0, 1000, &hi);
        if (has_hi && hi < lo) { fail_at(c, path, "maxLength", "is less than minLength"); return; }
        if (!has_lo && !has_hi) buf_str(o, "jstring");
        else if (has_hi) buf_fmt(o, "\"\\\"\" jchar{%ld,%ld} \"\\\"\" ws", lo, hi);
        else buf_fmt(o, "\"\\\"\" jchar{%ld,} \"\\\"\" ws", lo);
    } else if (!strcmp(type, "integer") || !strcmp(type, "number")) {
        bool integer = type[0] == 'i';
        const char *sign = "\"-\"? ";
        k = json_find(j, t, "minimum");
        int ek = json_find(j, t, "exclusiveMinimum");
        if (k >= 0 && ek >= 0) { fail_at(c, path, "exclusiveMinimum", "with minimum: give one"); return; }
        const char *int_part = "jint";
        if (k >= 0 || ek >= 0) {
            int b = k >= 0 ? k : ek;
            if (!json_number(j, b, &d)) {
                fail_at(c, path, k >= 0 ? "minimum" : "exclusiveMinimum", "must be a number");
                return;
            }
            bool positive = (k >= 0 && d == 1 && integer) || (ek >= 0 && d == 0 && integer);
            if (!(d == 0 && k >= 0) && !positive) {
                fail_at(c, path, k >= 0 ? "minimum" : "exclusiveMinimum", "%g is not supported yet "
                     "(minimum 0, and for integers minimum 1 or exclusiveMinimum 0, are)", d);
                return;
            }
            sign = "";
            if (positive) int_part = "[1-9] [0-9]{0,15}";
        }
        buf_fmt(o, "%s(%s)%s ws", sign, int_part, integer ? "" : " jfrac");
    } else if (!strcmp(type, "boolean")) {
        buf_str(o, "(\"true\" | \"false\") ws");
    } else if (!strcmp(type, "null")) {
        buf_str(o, "\"null\" ws");
    } else if (!strcmp(type, "array")) {
        long lo = 0, hi = -1;
        whole_in(c, t, path, "minItems", 0, 1000, &lo);
        bool has_hi = whole_in(c, t, path, "maxItems", 0, 1000, &hi);
        if (c->failed) return;
        if (has_hi && hi < lo) { fail_at(c, path, "maxItems", "is less than minItems"); return; }
        k = json_find(j, t, "items");
        int item = -1;
        if (k >= 0) {
            if (json_type(j, k) != JSON_OBJECT) { fail_at(c, path, "items", "must be a schema (an object)"); return; }
            item = schema_rule(c, k, sub(p, sizeof p, path, "items"), 1);
            if (c->failed) return;
        }
        char it[16];
        snprintf(it, sizeof it, item >= 0 ? "r%d" : "jvalue", item);
        if (hi == 0) { buf_str(o, "\"[\" ws \"]\" ws"); return; }
        buf_fmt(o, "\"[\" ws %s%s (\",\" ws %s){%ld,", lo ? "" : "(", it, it, lo ? lo - 1 : 0);
        if (has_hi) buf_fmt(o, "%ld", hi - 1);
        buf_fmt(o, "}%s \"]\" ws", lo ? "" : ")?");
    } else if (!strcmp(type, "object")) {
        int props = json_find(j, t, "properties"), req = json_find(j, t, "required");
        int add = json_find(j, t, "additionalProperties");
        bool extra = false;
        if (add >= 0 && !json_is_bool(j, add, &extra)) {
            fail_at(c, path, "additionalProperties", "a schema is not supported yet (true or false is)");
            return;
        }
        if (props >= 0 && json_type(j, props) != JSON_OBJECT) {
            fail_at(c, path, "properties", "must be an object");
            return;
        }
        if (req >= 0 && json_type(j, req) != JSON_ARRAY) {
            fail_at(c, path, "required", "must be an array of names");
            return;
        }
        int n = props >= 0 ? json_size(j, props) : 0;
        if (!n) { buf_str(o, extra || add < 0 ? "jobject" : "\"{\" ws \"}\" ws"); return; }
        if (extra) {
            fail_at(c, path, "additionalProperties", "true with properties is not supported yet (false is)");
            return;
        }
        /* each property's "key": value, required ones first */
        int *kv = malloc((size_t)n * sizeof *kv), *is_req = calloc((size_t)n, sizeof *is_req);
        int *key = malloc((size_t)n * sizeof *key);
        if (!kv || !is_req || !key) { free(kv); free(is_req); free(key); fail(c, path, "out of memory"); return; }
        int i = 0;
        for (int pk = json_obj_first(j, props); pk >= 0 && !c->failed; pk = json_obj_next(j, props, pk), i++) {
            key[i] = pk;
            size_t kl;
            char *name = text_of(j, pk, &kl);
            if (!name) { fail_at(c, path, "properties", "a name is not valid UTF-8"); break; }
            for (int r = 0; req >= 0 && r < json_size(j, req); r++)
                if (json_type(j, json_at(j, req, r)) == JSON_STRING) {
                    size_t rl;
                    char *rn = text_of(j, json_at(j, req, r), &rl);
                    is_req[i] |= rn && rl == kl && !memcmp(rn, name, kl);
                    free(rn);
                }
            if (json_type(j, pk + 1) != JSON_OBJECT) {
                fail(c, sub(p, sizeof p, path, "properties.%.100s", name), "must be a schema (an object)");
                free(name);
                break;
            }
            int value = schema_rule(c, pk + 1, sub(p, sizeof p, path, "properties.%.100s", name), 1);
            kv[i] = new_rule(c);
            buf_fmt(&c->out, "r%d ::= ", kv[i]);
            literal_json_string(&c->out, name, kl);
            buf_fmt(&c->out, " ws \":\" ws r%d\n", value);
            free(name);
        }
        for (int r = 0; req >= 0 && r < json_size(j, req) && !c->failed; r++) {   /* each required name a property */
            size_t rl;
            char *rn = json_type(j, json_at(j, req, r)) == JSON_STRING ? text_of(j, json_at(j, req, r), &rl) : NULL;
            bool found = false;
            for (int q = 0; rn && q < n && !found; q++) {
                size_t kl;
                char *name = text_of(j, key[q], &kl);
                found = name && kl == rl && !memcmp(name, rn, rl);
                free(name);
            }
            if (!found) fail(c, sub(p, sizeof p, path, "required[%d]", r), "names no property");
            free(rn);
        }
        if (c->failed) { free(kv); free(is_req); free(key); return; }
        /* the optional ones: an ordered choice, each after a comma once something came before */
        int n_req = 0;
        for (i = 0; i < n; i++) n_req += is_req[i];
        buf_str(o, "\"{\" ws");
        bool first = true;
        for (i = 0; i < n; i++)
            if (is_req[i]) { buf_fmt(o, " %sr%d", first ? "" : "\",\" ws ", kv[i]); first = false; }
        if (n_req) {
            for (i = 0; i < n; i++) if (!is_req[i]) buf_fmt(o, " (\",\" ws r%d)?", kv[i]);
            buf_str(o, " \"}\" ws");
        } else {   /* none required: some(i) ::= kv_i ("," ws some(i+1))? | some(i+1), i over the optional ones */
            int *some = malloc((size_t)n * sizeof *some);
            if (!some) { fail(c, path, "out of memory"); free(kv); free(is_req); free(key); return; }
            for (i = 0; i < n; i++) some[i] = new_rule(c);
            buf_fmt(o, " r%d? \"}\" ws", some[0]);
            for (i = n - 1; i >= 0; i--) {
                buf_fmt(&c->out, "r%d ::= r%d", some[i], kv[i]);
                if (i + 1 < n) buf_fmt(&c->out, " (\",\" ws r%d)? | r%d", some[i + 1], some[i + 1]);
                buf_str(&c->out, "\n");
            }
            free(some);
        }
        free(kv); free(is_req); free(key);
    } else {
        fail_at(c, path, "type", "\"%s\" is not a JSON Schema type", type);
    }
}

/* Schema token t as a rule of its own (written to c->out before it returns); its number */
static int schema_rule(Conv *c, int t, const char *path, int depth) {
    const Json *j = c->j;
    char p[256];
    if (c->failed) return 0;
    if (depth > MAX_DEPTH) { fail(c, path, "nested more than %d schemas deep", MAX_DEPTH); return 0; }
    if (json_type(j, t) != JSON_OBJECT) {
        bool b;
        if (json_is_bool(j, t, &b) && b) { int r = new_rule(c); buf_fmt(&c->out, "r%d ::= jvalue\n", r); return r; }
        fail(c, path, "a schema must be an object");
        return 0;
    }
    for (int k = json_obj_first(j, t); k >= 0; k = json_obj_next(j, t, k)) {
        bool known = false;
        for (size_t q = 0; q < sizeof KNOWN / sizeof *KNOWN && !known; q++) known = json_str_eq(j, k, KNOWN[q]);
        if (!known) {
            size_t kl;
            char *name = text_of(j, k, &kl);
            fail(c, sub(p, sizeof p, path, "%.100s", name ? name : "?"), "not supported yet");
            free(name);
            return 0;
        }
    }
    int ref = json_find(j, t, "$ref");
    if (ref >= 0) {   /* #/$defs/NAME: the definition's rule, made once (a recursive one refers to itself) */
        size_t n;
        char *target = text_of(j, ref, &n);
        const char *name = target && !strncmp(target, "#/$defs/", 8) ? target + 8
                         : target && !strncmp(target, "#/definitions/", 14) ? target + 14 : NULL;
        int def = name && c->defs >= 0 ? json_find(j, c->defs, name) : -1;
        if (def < 0) {
            fail_at(c, path, "$ref", "\"%.100s\" is not #/$defs/NAME of this schema", target ? target : "");
            free(target);
            return 0;
        }
        for (int q = 0; q < c->n_def; q++) if (c->def[q].tok == def) { free(target); return c->def[q].rule; }
        if (c->n_def == MAX_DEFS) { free(target); fail(c, path, "more than %d definitions", MAX_DEFS); return 0; }
        int r = new_rule(c);
        c->def[c->n_def].tok = def;
        c->def[c->n_def++].rule = r;
        sub(p, sizeof p, "$defs", "%.100s", name);
        free(target);
        int body = schema_rule(c, def, p, depth + 1);
        buf_fmt(&c->out, "r%d ::= r%d\n", r, body);
        return r;
    }
    int any = json_find(j, t, "anyOf");
    int en = json_find(j, t, "enum"), cn = json_find(j, t, "const");
    int r;
    if (any >= 0) {
        if (json_type(j, any) != JSON_ARRAY || !json_size(j, any)) {
            fail_at(c, path, "anyOf", "must be a non-empty array");
            return 0;
        }
        int n = json_size(j, any), *alt = malloc((size_t)n * sizeof *alt);
        if (!alt) { fail(c, path, "out of memory"); return 0; }
        for (int q = 0; q < n; q++)
            alt[q] = schema_rule(c, json_at(j, any, q), sub(p, sizeof p, path, "anyOf[%d]", q), depth + 1);
        r = new_rule(c);
        buf_fmt(&c->out, "r%d ::=", r);
        for (int q = 0; q < n; q++) buf_fmt(&c->out, "%s r%d", q ? " |" : "", alt[q]);
        buf_str(&c->out, "\n");
        free(alt);
        return r;
    }
    if (en >= 0 || cn >= 0) {
        if (en >= 0 && (json_type(j, en) != JSON_ARRAY || !json_size(j, en))) {
            fail_at(c, path, "enum", "must be a non-empty array");
            return 0;
        }
        r = new_rule(c);
        buf_fmt(&c->out, "r%d ::= (", r);
        int n = en >= 0 ? json_size(j, en) : 1;
        for (int q = 0; q < n; q++) {
            buf_str(&c->out, q ? " | " : "");
            if (!literal_value(c, en >= 0 ? json_at(j, en, q) : cn)) {
                fail(c, sub(p, sizeof p, path, en >= 0 ? "enum" : "const"), "only strings, numbers, booleans and null "
                     "are supported yet");
                return 0;
            }
        }
        buf_str(&c->out, ") ws\n");
        return r;
    }
    /* the types: given, or what the keywords imply, or any value */
    int ty = json_find(j, t, "type");
    const char *types[8];
    int n_types = 0;
    char *owned[8];
    int n_owned = 0;
    if (ty >= 0) {
        int n = json_type(j, ty) == JSON_ARRAY ? json_size(j, ty) : 1;
        for (int q = 0; q < n && q < 8; q++) {
            int e = json_type(j, ty) == JSON_ARRAY ? json_at(j, ty, q) : ty;
            size_t l;
            char *s = json_type(j, e) == JSON_STRING ? text_of(j, e, &l) : NULL;
            if (!s) { fail_at(c, path, "type", "must be a type name or a list of them"); break; }
            types[n_types++] = owned[n_owned++] = s;
        }
        if (n > 8) fail_at(c, path, "type", "more than 8 types");
    } else if (json_find(j, t, "properties") >= 0 || json_find(j, t, "additionalProperties") >= 0) {
        types[n_types++] = "object";
    } else if (json_find(j, t, "items") >= 0) {
        types[n_types++] = "array";
    }
    r = new_rule(c);
    Buf line = {0};   /* this rule's body: the types' expressions (their own rules go to c->out meanwhile) */
    for (int q = 0; q < n_types && !c->failed; q++) {
        buf_str(&line, q ? " | (" : "(");
        type_body(c, t, types[q], path, &line);
        buf_str(&line, ")");
    }
    buf_fmt(&c->out, "r%d ::= %s\n", r, n_types && line.p ? line.p : "jvalue");
    buf_free(&line);
    for (int q = 0; q < n_owned; q++) free(owned[q]);
    return r;
}

char *json_schema_to_gbnf(const char *schema, size_t len, char *err, size_t err_size) {
    Json j;
    size_t at;
    JsonError e = json_read(&j, schema, len, &at);
    if ((e != JSON_OK) || json_bad_token(&j) >= 0) {
        json_free(&j);
        snprintf(err, err_size, e == JSON_ERR_DEEP ? "nested too deep" : "not valid JSON");
        return NULL;
    }
    Conv c = { .j = &j, .err = err, .err_size = err_size, .defs = json_find(&j, 0, "$defs") };
    if (c.defs < 0) c.defs = json_find(&j, 0, "definitions");
    buf_str(&c.out, JSON_PIECES);
    int root = schema_rule(&c, 0, "", 0);
    buf_fmt(&c.out, "root ::= r%d\n", root);
    json_free(&j);
    if (c.failed || c.out.oom) {
        if (!c.failed) snprintf(err, err_size, "out of memory");
        buf_free(&c.out);
        return NULL;
    }
    return c.out.p;
}
