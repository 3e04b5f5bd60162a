/* torch_expr.c: a recursive-descent parser for one PyTorch-style expression
 * (see torch_expr_supported), building its graph as it parses. Shapes are
 * checked as PyTorch checks them (broadcasting, matmul inner dims, module
 * sizes); dtypes follow torch's promotion only where they change a result
 * (RMSNorm's default eps is finfo(input dtype).eps). Every error is one line
 * naming the 1-based column where the offending construct starts. */
#include "torch_expr.h"
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char torch_expr_supported[] =
    "torch.randn/zeros/ones(*size, dtype=torch.float32|bfloat16|float16), nn.Linear(in, out, bias=True, "
    "dtype=...|llmcc.q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k: GGUF's block types), nn.RMSNorm(dim, eps=None), "
    "nn.Softmax(dim=-1), nn.SiLU(), F.silu, F.softmax(x, dim=-1), "
    "F.scaled_dot_product_attention(q, k, v, is_causal=False, scale=None), torch.matmul, "
    "torch.argmax(x, dim=-1) (the index as a float), torch.topk(x, k, dim=-1) (k <= 128; one tensor [..., 2, k]: "
    "the values, then their indices as floats), and + - * / @ "
    "with numbers and parentheses (torch.nn.functional. = F., torch.nn. = nn.)";

typedef enum { TK_END, TK_NUM, TK_NAME, TK_STR, TK_PUNCT } TokKind;
typedef struct { TokKind k; int col; const char *s; int len; double num; bool is_int; } Tok;

typedef enum { V_TENSOR, V_NUM, V_BOOL, V_NONE, V_DTYPE, V_STR, V_TUPLE, V_FUNC, V_MODULE } VKind;
typedef enum { M_LINEAR, M_RMSNORM, M_SOFTMAX, M_SILU } ModKind;

typedef struct Value {
    VKind k;
    int col;
    GNode *t; DType tdt;              /* tensor, and the dtype torch would give it */
    double num; bool is_int;          /* number */
    bool b;                           /* bool */
    DType dtype;                      /* dtype */
    int n; struct Value *items;       /* tuple / list */
    const char *name;                 /* function (canonical), module (for messages), string */
    ModKind mod;                      /* module and its constructor arguments */
    int64_t in, out; bool bias, affine, has_eps; double eps; int dim; DType wdt;
    GNode **params;                   /* a module bound to a variable: its weight and bias, made at the first call and
                                       * shared by every later one (PyTorch's module owns its parameters) */
} Value;

typedef struct {
    Arena *A;
    const char *src;
    int pos;
    Tok tok;
    Graph *g;
    int count[G_COUNT];               /* per op: names linear0, linear1, ... */
    int depth;                        /* of nested expressions: the parser recurses */
    int nvars;                        /* NAME = expr; bindings, in order */
    const char *var_name[16];
    Value var_val[16];
} P;

_Noreturn static void err(P *p, int col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void err(P *p, int col, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die_user("-c", arena_printf(p->A, "COL %d", col), "%s", msg);
}

/* ---- lexer ---- */
static void next(P *p) {
    const char *s = p->src;
    while (s[p->pos] == ' ' || s[p->pos] == '\t' || s[p->pos] == '\n' || s[p->pos] == '\r') p->pos++;
    Tok t = {TK_END, p->pos + 1, s + p->pos, 0, 0, false};
    char c = s[p->pos];
    if (!c) { p->tok = t; return; }
    if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)s[p->pos + 1]))) {
        char *end;
        t.k = TK_NUM;
        t.num = strtod(s + p->pos, &end);
        t.len = (int)(end - (s + p->pos));
        t.is_int = true;
        for (int i = 0; i < t.len; i++) if (strchr(".eE", s[p->pos + i])) t.is_int = false;
        if (isalpha((unsigned char)end[0]) || end[0] == '_')
            err(p, t.col, "'%.*s' is not a number", t.len + 1, s + p->pos);
    } else if (isalpha((unsigned char)c) || c == '_') {
        t.k = TK_NAME;
        while (isalnum((unsigned char)s[p->pos + t.len]) || s[p->pos + t.len] == '_') t.len++;
    } else if (c == '"' || c == '\'') {
        t.k = TK_STR;
        int i = 1;
        while (s[p->pos + i] && s[p->pos + i] != c) i++;
        if (!s[p->pos + i]) err(p, t.col, "unterminated string");
        t.s = s + p->pos + 1; t.len = i - 1;
        p->pos += i + 1;
        p->tok = t;
        return;
    } else if (strchr("+-*/@(),=.[];", c)) {
        t.k = TK_PUNCT; t.len = 1;
        if (c == '*' && s[p->pos + 1] == '*')
            err(p, t.col, "'**' is not supported (supported: %s)", torch_expr_supported);
    } else {
        err(p, t.col, "unexpected character '%c' (supported: %s)", c, torch_expr_supported);
    }
    p->pos += t.len;
    p->tok = t;
}
static bool is_punct(P *p, char c) { return p->tok.k == TK_PUNCT && p->tok.s[0] == c; }
static void expect(P *p, char c, const char *what) {
    if (!is_punct(p, c)) {
        if (p->tok.k == TK_END) err(p, p->tok.col, "expected '%c' %s, found the end of the expression", c, what);
        err(p, p->tok.col, "expected '%c' %s, found '%.*s'", c, what, p->tok.len ? p->tok.len : 1, p->tok.s);
    }
    next(p);
}

/* Every tensor (inputs, weights, results, attention scores) is held whole:
 * more than 2^33 elements is refused (computed in double: dims may overflow int64). */
#define MAX_ELEMS 8589934592.0
static void check_elems(P *p, int col, const char *what, int nd, const int64_t *dims) {
    double e = 1;
    for (int i = 0; i < nd; i++) e *= (double)dims[i];
    if (e > MAX_ELEMS) err(p, col, "%s would have %.4g elements, more than llmcc handles (2^33)", what, e);
}

/* ---- values ---- */
static const char *shape_str(P *p, const GNode *n) {
    char b[128];
    shape_format(b, sizeof b, n->ndim, n->dims);
    return arena_strdup(p->A, b);
}
static const char *vkind_name(const Value *v) {
    static const char *const names[] = {[V_TENSOR] = "a tensor", [V_NUM] = "a number", [V_BOOL] = "a bool",
        [V_NONE] = "None", [V_DTYPE] = "a dtype", [V_STR] = "a string", [V_TUPLE] = "a tuple", [V_FUNC] = "a function",
        [V_MODULE] = "a module"};
    return names[v->k];
}
static GNode *node(P *p, GraphOp op, const char *base) {
    const char *name = arena_printf(p->A, "%s%d", base, p->count[op]++);
    return graph_add(p->A, p->g, op, name);
}
static Value tensor(GNode *n, DType tdt, int col) { return (Value){.k = V_TENSOR, .t = n, .tdt = tdt, .col = col}; }
static DType promote(DType a, DType b) { return a == b ? a : DT_F32; }
static const GNode *need_tensor(P *p, const Value *v, const char *what) {
    if (v->k != V_TENSOR) err(p, v->col, "%s expects a tensor, got %s", what, vkind_name(v));
    return v->t;
}
static int64_t need_int(P *p, const Value *v, const char *what, int64_t lo, int64_t hi) {
    if (v->k != V_NUM || !v->is_int)
        err(p, v->col, "%s expects an integer, got %s", what, v->k == V_NUM ? "a float" : vkind_name(v));
    if (v->num < (double)lo || v->num > (double)hi)
        err(p, v->col, "%s must be in %lld..%lld, got %.0f", what, (long long)lo, (long long)hi, v->num);
    return (int64_t)v->num;
}
static bool need_bool(P *p, const Value *v, const char *what) {
    if (v->k != V_BOOL) err(p, v->col, "%s expects True or False, got %s", what, vkind_name(v));
    return v->b;
}
static DType need_dtype(P *p, const Value *v, const char *what) {
    if (v->k != V_DTYPE)
        err(p, v->col, "%s expects a dtype (torch.float32, torch.bfloat16, torch.float16), got %s", what,
            vkind_name(v));
    if (dtype_is_quant(v->dtype))
        err(p, v->col, "%s: llmcc.%s is a block type of weights: only nn.Linear's dtype= takes it", what,
            dtype_names[v->dtype]);
    return v->dtype;
}
static void need_last_dim(P *p, int col, const char *op, int64_t dim, int nd) {
    if (dim != -1 && dim != nd - 1)
        err(p, col, "%s over dim %lld of a %d-D tensor is not supported yet (only the last dim, dim=-1)", op,
            (long long)dim, nd);
}
/* the argument dim= of op over x: a dim of x, and its last */
static void need_dim_last(P *p, const Value *d, const char *op, const GNode *x) {
    need_last_dim(p, d->col, op, need_int(p, d, "dim", -x->ndim, x->ndim - 1), x->ndim);
}
/* x's batch dims (all but the last two) as a shape */
static GNode batch_of(const GNode *x) {
    GNode b = {0};
    b.ndim = x->ndim - 2;
    memcpy(b.dims, x->dims, sizeof(int64_t) * (size_t)b.ndim);
    return b;
}

/* ---- arguments: positional, then keywords, bound to a parameter list ---- */
#define MAX_ARGS 12
typedef struct { int n; Value v[MAX_ARGS]; const char *kw[MAX_ARGS]; int kwlen[MAX_ARGS]; int col; } Args;

/* out[i] = the argument for params[i], or NULL. */
static void bind(P *p, const Args *a, const char *fname, const char *const *params, int np, int required, Value **out) {
    for (int i = 0; i < np; i++) out[i] = NULL;
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        const Value *v = &a->v[i];
        int slot = -1;
        if (!a->kw[i]) {
            if (pos >= np) err(p, v->col, "%s takes at most %d argument%s", fname, np, np == 1 ? "" : "s");
            slot = pos++;
        } else {
            for (int j = 0; j < np; j++)
                if ((int)strlen(params[j]) == a->kwlen[i] && !strncmp(params[j], a->kw[i], (size_t)a->kwlen[i]))
                    slot = j;
            if (slot < 0) {
                Str s = {0};
                for (int j = 0; j < np; j++) str_printf(&s, "%s%s", j ? ", " : "", params[j]);
                const char *list = arena_strdup(p->A, s.s ? s.s : "");
                str_free(&s);
                err(p, v->col, "%s has no argument '%.*s' (it takes %s)", fname, a->kwlen[i], a->kw[i], list);
            }
            if (out[slot]) err(p, v->col, "%s: argument '%s' given twice", fname, params[slot]);
        }
        out[slot] = (Value *)v;
    }
    for (int i = 0; i < required; i++)
        if (!out[i]) err(p, a->col, "%s needs the argument '%s'", fname, params[i]);
}
static bool is_none(const Value *v) { return !v || v->k == V_NONE; }

/* ---- building nodes ---- */
static void add_sizes(P *p, const Value *v, int64_t *dims, int *nd) {
    int n = v->k == V_TUPLE ? v->n : 1;
    for (int j = 0; j < n; j++) {
        const Value *d = v->k == V_TUPLE ? &v->items[j] : v;
        if (*nd >= MAX_DIMS) err(p, d->col, "at most %d dimensions are supported", MAX_DIMS);
        dims[(*nd)++] = need_int(p, d, "a size", 1, (int64_t)1 << 31);
    }
}

static Value make_input(P *p, const Args *a, const char *fname, FillKind fill, int col) {
    int64_t dims[MAX_DIMS];
    int nd = 0;
    DType dt = DT_F32;
    for (int i = 0; i < a->n; i++) {
        const Value *v = &a->v[i];
        if (!a->kw[i]) add_sizes(p, v, dims, &nd);
        else if (a->kwlen[i] == 5 && !strncmp(a->kw[i], "dtype", 5)) dt = need_dtype(p, v, "dtype=");
        else if (a->kwlen[i] == 4 && !strncmp(a->kw[i], "size", 4)) add_sizes(p, v, dims, &nd);
        else if (a->kwlen[i] == 6 && !strncmp(a->kw[i], "device", 6)) {
            /* the target decides where it runs */
            if (v->k != V_STR && v->k != V_NONE) err(p, v->col, "device= expects a string");
        }
        else err(p, v->col, "%s has no argument '%.*s' (it takes *size, dtype, device)", fname, a->kwlen[i], a->kw[i]);
    }
    if (!nd) err(p, a->col, "%s needs a size, e.g. %s(2, 3)", fname, fname);
    check_elems(p, col, fname, nd, dims);
    GNode *n = node(p, G_INPUT, "input");
    n->ndim = nd;
    memcpy(n->dims, dims, sizeof(int64_t) * (size_t)nd);
    n->dtype = dt;
    n->fill = fill;
    return tensor(n, dt, col);
}

static GNode *weight(P *p, int col, const char *base, const char *what, int64_t d0, int64_t d1, DType dt,
                     FillKind fill, double lo, double hi) {
    const char *name = arena_printf(p->A, "%s.%s", base, what);
    int64_t d[2] = {d0, d1};
    check_elems(p, col, name, d1 ? 2 : 1, d);
    GNode *w = graph_add(p->A, p->g, G_WEIGHT, name);
    w->ndim = d1 ? 2 : 1; w->dims[0] = d0; w->dims[1] = d1;
    w->dtype = dt; w->fill = fill; w->fill_lo = lo; w->fill_hi = hi;
    return w;
}

static GNode *result_like(P *p, GraphOp op, const char *base, const GNode *x) {
    GNode *n = node(p, op, base);
    n->ndim = x->ndim;
    memcpy(n->dims, x->dims, sizeof n->dims);
    n->in[n->nin++] = (GNode *)x;
    return n;
}

static Value apply_module(P *p, const Value *m, const Args *a) {
    static const char *const one[] = {"input"};
    Value *arg[1];
    bind(p, a, m->name, one, 1, 1, arg);
    const GNode *x = need_tensor(p, arg[0], m->name);
    int col = m->col;
    if ((m->mod == M_LINEAR || m->mod == M_RMSNORM) && x->dims[x->ndim - 1] != m->in)
        err(p, arg[0]->col, "%s expects the last dimension to be %lld, the input has shape %s", m->name,
            (long long)m->in, shape_str(p, x));
    switch (m->mod) {
    case M_LINEAR: {
        const char *base = arena_printf(p->A, "linear%d", p->count[G_LINEAR]);
        double bound = 1.0 / sqrt((double)m->in);   /* PyTorch's default init bounds */
        GNode *w = m->params ? m->params[0] : NULL, *b = m->params ? m->params[1] : NULL;
        if (!w) {
            w = weight(p, col, base, "weight", m->out, m->in, m->wdt, FILL_UNIFORM, -bound, bound);
            DType bdt = dtype_is_quant(m->wdt) ? DT_F32 : m->wdt;
            b = m->bias ? weight(p, col, base, "bias", m->out, 0, bdt, FILL_UNIFORM, -bound, bound) : NULL;
            if (m->params) { m->params[0] = w; m->params[1] = b; }
        }
        GNode *n = result_like(p, G_LINEAR, "linear", x);
        n->dims[n->ndim - 1] = m->out;
        check_elems(p, col, "the result", n->ndim, n->dims);
        n->in[n->nin++] = w;
        if (b) n->in[n->nin++] = b;
        return tensor(n, arg[0]->tdt, col);
    }
    case M_RMSNORM: {
        const char *base = arena_printf(p->A, "rmsnorm%d", p->count[G_RMSNORM]);
        /* PyTorch initialises the weight to ones; random values around 1 test the multiply */
        GNode *w = m->params ? m->params[0] : NULL;
        if (!w && m->affine) {
            w = weight(p, col, base, "weight", m->in, 0, m->wdt, FILL_UNIFORM, 0.5, 1.5);
            if (m->params) m->params[0] = w;
        }
        GNode *n = result_like(p, G_RMSNORM, "rmsnorm", x);
        if (w) n->in[n->nin++] = w;
        /* torch: eps=None means torch.finfo(input.dtype).eps */
        DType t = arg[0]->tdt;
        n->eps = m->has_eps ? m->eps : t == DT_BF16 ? 0.0078125 : t == DT_F16 ? 0.0009765625 : 1.1920928955078125e-07;
        return tensor(n, arg[0]->tdt, col);
    }
    case M_SOFTMAX:
        need_last_dim(p, m->col, "softmax", m->dim, x->ndim);
        return tensor(result_like(p, G_SOFTMAX, "softmax", x), arg[0]->tdt, col);
    case M_SILU:
        return tensor(result_like(p, G_SILU, "silu", x), arg[0]->tdt, col);
    }
    UNREACHABLE();
}

static Value module(ModKind mk, const char *name, int col) {
    Value m = {0};
    m.k = V_MODULE; m.mod = mk; m.name = name; m.col = col; m.wdt = DT_F32; m.bias = true; m.affine = true; m.dim = -1;
    return m;
}

static Value binary(P *p, char op, Value a, Value b, int col);

static Value matmul(P *p, const Value *va, const Value *vb, int col) {
    const GNode *a = need_tensor(p, va, "matmul"), *b = need_tensor(p, vb, "matmul");
    if (a->ndim < 2 || b->ndim < 2)
        err(p, col, "matmul of a %d-D and a %d-D tensor is not supported yet (both need 2 or more dims)", a->ndim,
            b->ndim);
    if (a->dims[a->ndim - 1] != b->dims[b->ndim - 2])
        err(p, col, "matmul shapes %s and %s: inner dimensions %lld and %lld differ", shape_str(p, a), shape_str(p, b),
            (long long)a->dims[a->ndim - 1], (long long)b->dims[b->ndim - 2]);
    GNode ba = batch_of(a), bb = batch_of(b);
    int nb;
    int64_t bd[MAX_DIMS];
    if (!shape_broadcast(&ba, &bb, &nb, bd))
        err(p, col, "matmul shapes %s and %s: batch dimensions do not broadcast", shape_str(p, a), shape_str(p, b));
    GNode *n = node(p, G_MATMUL, "matmul");
    n->ndim = nb + 2;
    memcpy(n->dims, bd, sizeof(int64_t) * (size_t)nb);
    n->dims[nb] = a->dims[a->ndim - 2]; n->dims[nb + 1] = b->dims[b->ndim - 1];
    check_elems(p, col, "the matmul's result", n->ndim, n->dims);
    n->in[n->nin++] = (GNode *)a; n->in[n->nin++] = (GNode *)b;
    return tensor(n, promote(va->tdt, vb->tdt), col);
}

static Value sdpa(P *p, const Args *a, const char *fname) {
    static const char *const params[] = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                                         "enable_gqa"};
    Value *v[8];
    bind(p, a, fname, params, 8, 3, v);
    const GNode *q = need_tensor(p, v[0], "query"), *k = need_tensor(p, v[1], "key");
    const GNode *vv = need_tensor(p, v[2], "value");
    if (!is_none(v[3])) err(p, v[3]->col, "attn_mask is not supported yet (is_causal=True gives the causal mask)");
    if (v[4] && (v[4]->k != V_NUM || v[4]->num != 0))
        err(p, v[4]->col, "dropout_p must be 0 (dropout is not supported)");
    if (v[7] && need_bool(p, v[7], "enable_gqa")) err(p, v[7]->col, "enable_gqa=True is not supported yet");
    for (int i = 0; i < 3; i++)
        if (v[i]->t->ndim < 2)
            err(p, v[i]->col, "%s needs 2 or more dimensions, has shape %s", params[i], shape_str(p, v[i]->t));
    int64_t E = q->dims[q->ndim - 1], S = k->dims[k->ndim - 2];
    if (k->dims[k->ndim - 1] != E)
        err(p, v[1]->col, "key's last dimension %lld differs from query's %lld (shapes %s, %s)",
            (long long)k->dims[k->ndim - 1], (long long)E, shape_str(p, q), shape_str(p, k));
    if (vv->dims[vv->ndim - 2] != S)
        err(p, v[2]->col, "value has %lld positions, key has %lld (shapes %s, %s)", (long long)vv->dims[vv->ndim - 2],
            (long long)S, shape_str(p, k), shape_str(p, vv));
    GNode b[3] = {batch_of(q), batch_of(k), batch_of(vv)};
    GNode qk = {0}, all = {0};
    if (!shape_broadcast(&b[0], &b[1], &qk.ndim, qk.dims) || !shape_broadcast(&qk, &b[2], &all.ndim, all.dims))
        err(p, a->col, "the batch dimensions of query %s, key %s and value %s do not broadcast", shape_str(p, q),
            shape_str(p, k), shape_str(p, vv));
    GNode *n = node(p, G_SDPA, "sdpa");
    n->ndim = all.ndim + 2;
    memcpy(n->dims, all.dims, sizeof(int64_t) * (size_t)all.ndim);
    n->dims[all.ndim] = q->dims[q->ndim - 2]; n->dims[all.ndim + 1] = vv->dims[vv->ndim - 1];
    int64_t sd[MAX_DIMS];
    memcpy(sd, n->dims, sizeof sd);
    sd[all.ndim + 1] = S;
    check_elems(p, a->col, "the attention scores", n->ndim, sd);
    check_elems(p, a->col, "the result", n->ndim, n->dims);
    n->in[0] = (GNode *)q; n->in[1] = (GNode *)k; n->in[2] = (GNode *)vv; n->nin = 3;
    n->causal = v[5] && need_bool(p, v[5], "is_causal");
    n->scale = 1.0 / sqrt((double)E);
    if (!is_none(v[6])) {
        if (v[6]->k != V_NUM) err(p, v[6]->col, "scale expects a number");
        n->scale = v[6]->num;
    }
    return tensor(n, promote(promote(v[0]->tdt, v[1]->tdt), v[2]->tdt), a->col);
}

/* bind() to the parameters named (the first `required` of them must be given) */
#define BIND(required, ...) bind(p, a, nm, (const char *const[]){__VA_ARGS__}, \
                                 (int)(sizeof (const char *const[]){__VA_ARGS__} / sizeof(char *)), required, v)
static Value call(P *p, const Value *f, const Args *a) {
    if (f->k == V_MODULE) return apply_module(p, f, a);
    if (f->k != V_FUNC) err(p, f->col, "%s is not callable", vkind_name(f));
    const char *nm = f->name;
    Value *v[8];
    if (!strcmp(nm, "torch.randn")) return make_input(p, a, nm, FILL_RANDN, f->col);
    if (!strcmp(nm, "torch.zeros")) return make_input(p, a, nm, FILL_ZEROS, f->col);
    if (!strcmp(nm, "torch.ones")) return make_input(p, a, nm, FILL_ONES, f->col);
    if (!strcmp(nm, "torch.matmul")) {
        BIND(2, "input", "other");
        return matmul(p, v[0], v[1], f->col);
    }
    if (!strcmp(nm, "F.silu")) {
        BIND(1, "input", "inplace");
        const GNode *x = need_tensor(p, v[0], nm);
        return tensor(result_like(p, G_SILU, "silu", x), v[0]->tdt, f->col);
    }
    if (!strcmp(nm, "F.softmax") || !strcmp(nm, "torch.softmax")) {
        BIND(1, "input", "dim");
        const GNode *x = need_tensor(p, v[0], nm);
        if (is_none(v[1])) err(p, a->col, "%s needs dim= (only dim=-1, the last dim, is supported yet)", nm);
        need_dim_last(p, v[1], "softmax", x);
        return tensor(result_like(p, G_SOFTMAX, "softmax", x), v[0]->tdt, f->col);
    }
    if (!strcmp(nm, "F.scaled_dot_product_attention")) return sdpa(p, a, nm);
    if (!strcmp(nm, "torch.argmax")) {
        BIND(2, "input", "dim", "keepdim");
        const GNode *x = need_tensor(p, v[0], nm);
        if (is_none(v[1])) err(p, a->col, "torch.argmax needs dim=-1 (the index over the last dim; no flattening yet)");
        need_dim_last(p, v[1], "argmax", x);
        if (v[2] && !is_none(v[2]) && (v[2]->k != V_BOOL || v[2]->b))
            err(p, v[2]->col, "keepdim=True is not supported yet");
        GNode *n = result_like(p, G_ARGMAX, "argmax", x);
        n->ndim = x->ndim > 1 ? x->ndim - 1 : 1;
        if (x->ndim == 1) n->dims[0] = 1;
        return tensor(n, DT_F32, f->col);
    }
    if (!strcmp(nm, "torch.topk")) {
        BIND(2, "input", "k", "dim", "largest", "sorted");
        const GNode *x = need_tensor(p, v[0], nm);
        int64_t len = x->dims[x->ndim - 1];
        if (x->ndim >= MAX_DIMS)
            err(p, v[0]->col, "torch.topk of a %d-D tensor is not supported (its result has a dimension more, "
                "at most %d)", x->ndim, MAX_DIMS);
        int64_t kk = need_int(p, v[1], "k", 1, (int64_t)1 << 31);
        if (kk > len)
            err(p, v[1]->col, "k=%lld is more than the %lld values of the last dim", (long long)kk, (long long)len);
        if (kk > 128) err(p, v[1]->col, "k=%lld: topk supports k up to 128", (long long)kk);
        if (v[2] && !is_none(v[2])) need_dim_last(p, v[2], "topk", x);
        if (v[3] && (v[3]->k != V_BOOL || !v[3]->b)) err(p, v[3]->col, "largest=False is not supported yet");
        if (v[4] && (v[4]->k != V_BOOL || !v[4]->b))
            err(p, v[4]->col, "sorted=False is not supported (the result is always sorted)");
        GNode *n = result_like(p, G_TOPK, "topk", x);
        n->topk = (int)kk;
        n->ndim = x->ndim + 1;
        n->dims[x->ndim - 1] = 2; n->dims[x->ndim] = kk;
        return tensor(n, DT_F32, f->col);
    }
    if (!strcmp(nm, "nn.Linear")) {
        BIND(2, "in_features", "out_features", "bias", "device", "dtype");
        Value m = module(M_LINEAR, nm, f->col);
        m.in = need_int(p, v[0], "in_features", 1, (int64_t)1 << 31);
        m.out = need_int(p, v[1], "out_features", 1, (int64_t)1 << 31);
        if (v[2]) m.bias = need_bool(p, v[2], "bias");
        if (!is_none(v[4]) && v[4]->k == V_DTYPE && dtype_is_quant(v[4]->dtype)) {
            /* GGUF's blocks (32 values; the K-quants 256) along each row of the weight; the bias stays f32 */
            m.wdt = v[4]->dtype;
            if (m.in % dtype_block[m.wdt])
                err(p, v[0]->col, "in_features=%lld: llmcc.%s weights need a multiple of %d", (long long)m.in,
                    dtype_names[m.wdt], dtype_block[m.wdt]);
        } else if (!is_none(v[4])) {
            m.wdt = need_dtype(p, v[4], "dtype=");
        }
        m.name = arena_printf(p->A, "nn.Linear(%lld, %lld)", (long long)m.in, (long long)m.out);
        return m;
    }
    if (!strcmp(nm, "nn.RMSNorm")) {
        BIND(1, "normalized_shape", "eps", "elementwise_affine", "device", "dtype");
        Value m = module(M_RMSNORM, nm, f->col);
        const Value *ns = v[0];
        if (ns->k == V_TUPLE) {
            if (ns->n != 1)
                err(p, ns->col, "normalized_shape over %d dims is not supported yet (only the last dim)", ns->n);
            ns = &ns->items[0];
        }
        m.in = need_int(p, ns, "normalized_shape", 1, (int64_t)1 << 31);
        if (!is_none(v[1])) {
            if (v[1]->k != V_NUM || v[1]->num <= 0) err(p, v[1]->col, "eps must be a positive number");
            m.has_eps = true; m.eps = v[1]->num;
        }
        if (v[2]) m.affine = need_bool(p, v[2], "elementwise_affine");
        if (!is_none(v[4])) m.wdt = need_dtype(p, v[4], "dtype=");
        m.name = arena_printf(p->A, "nn.RMSNorm(%lld)", (long long)m.in);
        return m;
    }
    if (!strcmp(nm, "nn.Softmax")) {
        BIND(0, "dim");
        Value m = module(M_SOFTMAX, nm, f->col);
        if (is_none(v[0])) err(p, a->col, "nn.Softmax needs dim= (only dim=-1, the last dim, is supported yet)");
        m.dim = (int)need_int(p, v[0], "dim", -MAX_DIMS, MAX_DIMS - 1);
        return m;
    }
    if (!strcmp(nm, "nn.SiLU")) {
        BIND(0, "inplace");
        return module(M_SILU, "nn.SiLU()", f->col);
    }
    err(p, f->col, "unknown function '%s' (supported: %s)", nm, torch_expr_supported);
}
#undef BIND

/* ---- names ---- */
static const char *canonical(P *p, const char *s) {
    if (!strncmp(s, "torch.nn.functional.", 20)) return arena_printf(p->A, "F.%s", s + 20);
    if (!strncmp(s, "nn.functional.", 14)) return arena_printf(p->A, "F.%s", s + 14);
    if (!strncmp(s, "torch.nn.", 9)) return arena_printf(p->A, "nn.%s", s + 9);
    return s;
}
static Value name_value(P *p, const char *s, int col) {
    Value v = {0};
    v.col = col;
    if (!strcmp(s, "True") || !strcmp(s, "False")) { v.k = V_BOOL; v.b = s[0] == 'T'; return v; }
    if (!strcmp(s, "None")) { v.k = V_NONE; return v; }
    static const struct { const char *name; DType dt; } dts[] = {
        {"torch.float32", DT_F32}, {"torch.float", DT_F32}, {"torch.bfloat16", DT_BF16}, {"torch.float16", DT_F16},
        {"torch.half", DT_F16},
        /* not torch's: GGUF's block types, for nn.Linear's weights (llama.cpp's names: llmcc.q8_0, ...) */
#define LLMCC_BLOCK_DTYPE(id, name, bytes, block, ggml) {"llmcc." name, DT_##id},
        BLOCK_DTYPES(LLMCC_BLOCK_DTYPE)
#undef LLMCC_BLOCK_DTYPE
    };
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
        if (!strcmp(s, dts[i].name)) { v.k = V_DTYPE; v.dtype = dts[i].dt; return v; }
    static const char *const other_dtypes[] = {"float64", "double", "int8", "int16", "int32", "int64", "int", "long",
                                               "short", "uint8", "bool", "complex64", "complex128", "float8_e4m3fn",
                                               "float8_e5m2", "uint16", "uint32", "uint64"};
    for (size_t i = 0; i < sizeof other_dtypes / sizeof other_dtypes[0]; i++)
        if (!strncmp(s, "torch.", 6) && !strcmp(s + 6, other_dtypes[i]))
            err(p, col, "dtype %s is not supported (torch.float32, torch.bfloat16, torch.float16)", s);
    if (!strchr(s, '.')) {
        /* a variable: the same value (one graph node for every use: x read by two linears is one input) */
        for (int i = p->nvars - 1; i >= 0; i--)
            if (!strcmp(p->var_name[i], s)) { Value b = p->var_val[i]; b.col = col; return b; }
        err(p, col, "unknown name '%s' (assign it first: %s = torch.randn(...); ...)", s, s);
    }
    v.k = V_FUNC;
    v.name = canonical(p, s);
    return v;
}

/* ---- grammar ----
 *   expr    := term (('+' | '-') term)*
 *   term    := unary (('*' | '/' | '@') unary)*
 *   unary   := ('-' | '+') unary | postfix
 *   postfix := primary ('(' args ')')*
 *   primary := NUMBER | STRING | NAME ('.' NAME)* | '(' expr ')' | '(' expr ',' ... ')' | '[' expr, ... ']' */
static Value expr(P *p);

static void parse_args(P *p, Args *a) {
    a->n = 0;
    a->col = p->tok.col;
    expect(p, '(', "to call");
    while (!is_punct(p, ')')) {
        if (a->n >= MAX_ARGS) err(p, p->tok.col, "too many arguments");
        a->kw[a->n] = NULL;
        if (p->tok.k == TK_NAME) {
            /* a keyword argument is NAME '=' */
            int save = p->pos;
            Tok t = p->tok;
            next(p);
            if (is_punct(p, '=')) {
                next(p);
                a->kw[a->n] = t.s; a->kwlen[a->n] = t.len;
            } else {
                p->pos = save; p->tok = t;
            }
        }
        if (!a->kw[a->n] && a->n && a->kw[a->n - 1])
            err(p, p->tok.col, "a positional argument follows a keyword argument");
        a->v[a->n++] = expr(p);
        if (!is_punct(p, ',')) break;
        next(p);
    }
    expect(p, ')', "to close the argument list");
}

static Value seq(P *p, char close, Value first, int col) {
    Value t = {0};
    t.k = V_TUPLE; t.col = col;
    Value items[MAX_DIMS * 2];
    int n = 0;
    items[n++] = first;
    while (is_punct(p, ',')) {
        next(p);
        if (is_punct(p, close)) break;
        if (n >= (int)(sizeof items / sizeof items[0])) err(p, p->tok.col, "tuple too long");
        items[n++] = expr(p);
    }
    expect(p, close, "to close the tuple");
    t.n = n;
    t.items = ARENA_ARRAY(p->A, Value, n);
    memcpy(t.items, items, sizeof(Value) * (size_t)n);
    return t;
}

static Value primary(P *p) {
    Tok t = p->tok;
    Value v = {0};
    v.col = t.col;
    switch (t.k) {
    case TK_END: err(p, t.col, "unexpected end of the expression");
    case TK_NUM: next(p); v.k = V_NUM; v.num = t.num; v.is_int = t.is_int; return v;
    case TK_STR: next(p); v.k = V_STR; v.name = arena_strndup(p->A, t.s, (size_t)t.len); return v;
    case TK_NAME: {
        Str s = {0};
        str_append(&s, t.s, (size_t)t.len);
        next(p);
        while (is_punct(p, '.')) {
            next(p);
            if (p->tok.k != TK_NAME) err(p, p->tok.col, "expected a name after '.'");
            str_printf(&s, ".%.*s", p->tok.len, p->tok.s);
            next(p);
        }
        const char *name = arena_strdup(p->A, s.s);
        str_free(&s);
        return name_value(p, name, t.col);
    }
    case TK_PUNCT:
        if (is_punct(p, '(')) {
            next(p);
            if (is_punct(p, ')')) err(p, p->tok.col, "empty parentheses");
            Value e = expr(p);
            if (is_punct(p, ',')) return seq(p, ')', e, t.col);
            expect(p, ')', "to close the parenthesis");
            e.col = t.col;
            return e;
        }
        if (is_punct(p, '[')) {
            next(p);
            Value e = expr(p);
            return seq(p, ']', e, t.col);
        }
        err(p, t.col, "unexpected '%c'", t.s[0]);
    }
    UNREACHABLE();
}

static Value postfix(P *p) {
    Value v = primary(p);
    while (is_punct(p, '(')) {
        Args *a = ARENA_NEW(p->A, Args);
        parse_args(p, a);
        v = call(p, &v, a);
    }
    if (is_punct(p, '.') && v.k == V_TENSOR && v.t->op == G_TOPK)
        err(p, p->tok.col, "torch.topk's result here is one tensor [..., 2, k]: the values at [..., 0, :], "
                           "then their indices (as floats) at [..., 1, :]; .values and .indices are not supported yet");
    if (is_punct(p, '.'))
        err(p, p->tok.col, "methods and attributes of values are not supported (use the torch./F. function)");
    return v;
}

static Value unary(P *p) {
    if (is_punct(p, '-') || is_punct(p, '+')) {
        int col = p->tok.col;
        bool neg = p->tok.s[0] == '-';
        next(p);
        if (++p->depth > 200) err(p, col, "the expression is nested too deeply (more than 200 levels)");
        Value x = unary(p);
        p->depth--;
        if (!neg) return x;
        if (x.k == V_NUM) { x.num = -x.num; x.col = col; return x; }
        Value m1 = {0};
        m1.k = V_NUM; m1.num = -1; m1.is_int = true; m1.col = col;
        return binary(p, '*', m1, x, col);
    }
    return postfix(p);
}

static Value binary(P *p, char op, Value a, Value b, int col) {
    if (op == '@') return matmul(p, &a, &b, col);
    if (a.k == V_NUM && b.k == V_NUM) {
        Value r = a;
        r.num = op == '+' ? a.num + b.num : op == '-' ? a.num - b.num : op == '*' ? a.num * b.num : a.num / b.num;
        r.is_int = a.is_int && b.is_int && op != '/';
        return r;
    }
    const Value *sides[2] = {&a, &b};
    GNode *in[2];
    for (int i = 0; i < 2; i++) {
        const Value *s = sides[i];
        if (s->k == V_TENSOR) { in[i] = s->t; continue; }
        if (s->k != V_NUM) err(p, s->col, "'%c' needs tensors or numbers, got %s", op, vkind_name(s));
        GNode *c = node(p, G_CONST, "const");
        c->value = s->num;
        in[i] = c;
    }
    int nd;
    int64_t dims[MAX_DIMS];
    if (!shape_broadcast(in[0], in[1], &nd, dims))
        err(p, col, "shapes %s and %s do not broadcast for '%c'", shape_str(p, in[0]), shape_str(p, in[1]), op);
    check_elems(p, col, "the result", nd, dims);
    GraphOp g = op == '+' ? G_ADD : op == '-' ? G_SUB : op == '*' ? G_MUL : G_DIV;
    GNode *n = node(p, g, graph_op_names[g]);
    n->ndim = nd;
    memcpy(n->dims, dims, sizeof(int64_t) * (size_t)nd);
    n->in[0] = in[0]; n->in[1] = in[1]; n->nin = 2;
    DType t = a.k == V_TENSOR && b.k == V_TENSOR ? promote(a.tdt, b.tdt) : a.k == V_TENSOR ? a.tdt : b.tdt;
    return tensor(n, t, col);
}

/* Left-associative operators among ops, between operands parsed by operand. */
static Value chain(P *p, const char *ops, Value (*operand)(P *)) {
    Value v = operand(p);
    while (p->tok.k == TK_PUNCT && strchr(ops, p->tok.s[0])) {
        char op = p->tok.s[0];
        int col = p->tok.col;
        next(p);
        Value r = operand(p);
        v = binary(p, op, v, r, col);
    }
    return v;
}
static Value term(P *p) { return chain(p, "*/@", unary); }

static Value expr(P *p) {
    if (++p->depth > 200) err(p, p->tok.col, "the expression is nested too deeply (more than 200 levels)");
    Value v = chain(p, "+-", term);
    p->depth--;
    return v;
}

void torch_expr_graph(Arena *A, const char *src, Graph *g) {
    memset(g, 0, sizeof *g);
    g->source = src;
    g->max_batch = 1;
    P p = {A, src, 0, {0}, g, {0}, 0, 0, {0}, {{0}}};
    next(&p);
    if (p.tok.k == TK_END) die_user("-c", NULL, "the expression is empty (supported: %s)", torch_expr_supported);
    /* NAME = expr; ... then the expression */
    for (;;) {
        int save = p.pos;
        Tok t = p.tok;
        if (t.k != TK_NAME) break;
        next(&p);
        if (!is_punct(&p, '=')) { p.pos = save; p.tok = t; break; }
        if (p.nvars == 16) err(&p, t.col, "more than 16 variables");
        next(&p);
        Value v = expr(&p);
        if (!is_punct(&p, ';')) err(&p, p.tok.col, "expected ';' after the assignment to %.*s", t.len, t.s);
        next(&p);
        if (v.k == V_MODULE && !v.params) v.params = ARENA_ARRAY(A, GNode *, 2);
        p.var_name[p.nvars] = arena_strndup(A, t.s, (size_t)t.len);
        p.var_val[p.nvars++] = v;
    }
    if (p.tok.k == TK_END) err(&p, p.tok.col, "the assignments are not followed by an expression to compute");
    Value v = expr(&p);
    if (p.tok.k != TK_END)
        err(&p, p.tok.col, "unexpected '%.*s' after the expression", p.tok.len ? p.tok.len : 1, p.tok.s);
    if (v.k == V_MODULE)
        err(&p, v.col, "the expression is the module %s, not a tensor: call it on one, e.g. %s(torch.randn(...))",
            v.name, v.name);
    if (v.k != V_TENSOR) err(&p, v.col, "the expression is %s, not a tensor", vkind_name(&v));
    if (v.t->op == G_INPUT) err(&p, v.col, "the expression computes nothing (it is an input): apply an op to it");
    g->logits = v.t;
}
