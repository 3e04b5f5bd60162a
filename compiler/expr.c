/* expr.c: expression trees shared by every IR level: builders (with integer
 * constant folding, so index arithmetic stays readable in the dumps),
 * substitution, equality, the printer and the verifier. */
#include "ir.h"
#include <math.h>
#include <string.h>

const char *const dtype_names[] = {ALL_DTYPES(DTYPE_NAME)};
const int dtype_sizes[] = {ALL_DTYPES(DTYPE_BYTES)};
const int dtype_block[] = {ALL_DTYPES(DTYPE_BLOCK)};
/* the third entry of EXPR_KINDS (arity) */
#define X_THIRD(e, s, n, ...) n,
int64_t dtype_bytes(DType d, int64_t elems) {
    const bool whole = elems % dtype_block[d] == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK(whole, "%lld values of %s: not whole blocks", (long long)elems, dtype_names[d]);
    return elems / dtype_block[d] * dtype_sizes[d];
}
const char *const param_names[] = {PARAMS(X_NAME)};
const char *const bufkind_names[] = {BUFKINDS(X_NAME)};
const char *const expr_names[] = {EXPR_KINDS(X_NAME)};
const int expr_arity[] = {EXPR_KINDS(X_THIRD)};
#undef X_THIRD

static Expr *mk(Arena *A, ExprKind k, EType t, int nargs) {
    Expr *e = ARENA_NEW(A, Expr);
    e->k = k; e->t = t; e->nargs = nargs;
    if (nargs) e->a = ARENA_ARRAY(A, Expr *, nargs);
    return e;
}
Expr *e_f(Arena *A, double v) { Expr *e = mk(A, EX_FCONST, T_F32, 0); e->f = v; return e; }
Expr *e_i(Arena *A, int64_t v) { Expr *e = mk(A, EX_ICONST, T_I64, 0); e->i = v; return e; }
Expr *e_var(Arena *A, Var *v) { Expr *e = mk(A, EX_VAR, T_I64, 0); e->var = v; return e; }
Expr *e_param(Arena *A, ParamId p) { Expr *e = mk(A, EX_PARAM, T_I64, 0); e->i = p; return e; }
Expr *e_acc(Arena *A) { return mk(A, EX_ACC, T_F32, 0); }
Expr *e_acc_slot(Arena *A, int slot) { Expr *e = mk(A, EX_ACC, T_F32, 0); e->i = slot; return e; }
Expr *e_leaf(Arena *A, ExprKind k, EType t, int64_t i) { Expr *e = mk(A, k, t, 0); e->i = i; return e; }
Expr *e_velem(Arena *A, Var *vec, int64_t j) { Expr *e = mk(A, EX_VELEM, T_F32, 0); e->var = vec; e->i = j; return e; }

Expr *e_load(Arena *A, Buffer *b, int nidx, Expr **idx) {
    Expr *e = mk(A, EX_LOAD, b->dtype == DT_I32 ? T_I64 : T_F32, nidx);
    e->buf = b;
    for (int i = 0; i < nidx; i++) e->a[i] = idx[i];
    return e;
}
Expr *e_load1(Arena *A, Buffer *b, Expr *i0) { return e_load(A, b, 1, &i0); }
Expr *e_load2(Arena *A, Buffer *b, Expr *i0, Expr *i1) { Expr *v[2] = {i0, i1}; return e_load(A, b, 2, v); }
Expr *e_load3(Arena *A, Buffer *b, Expr *i0, Expr *i1, Expr *i2) { return e_load(A, b, 3, (Expr *[]){i0, i1, i2}); }

int64_t dims_elems(const int64_t *dims, int n) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= dims[i];
    return p;
}

bool expr_is_const(const Expr *e, int64_t *v) {
    if (e->k != EX_ICONST) return false;
    if (v) *v = e->i;
    return true;
}

Expr *e_bin(Arena *A, ExprKind k, Expr *x, Expr *y) {
    int64_t a = 0, b = 0;
    if (x->t == T_I64 && y->t == T_I64) {
        bool ca = expr_is_const(x, &a), cb = expr_is_const(y, &b);
        if (ca && cb) {
            switch (k) {
            case EX_ADD: return e_i(A, a + b);
            case EX_SUB: return e_i(A, a - b);
            case EX_MUL: return e_i(A, a * b);
            case EX_DIV: if (b) return e_i(A, a / b); break;
            case EX_MOD: if (b) return e_i(A, a % b); break;
            case EX_MIN: return e_i(A, a < b ? a : b);
            case EX_MAX: return e_i(A, a > b ? a : b);
            default: break;
            }
        }
        if (k == EX_ADD && ca && a == 0) return y;
        if ((k == EX_ADD || k == EX_SUB) && cb && b == 0) return x;
        if (k == EX_MUL && ((ca && a == 0) || (cb && b == 0))) return e_i(A, 0);
        if (k == EX_MUL && ca && a == 1) return y;
        if ((k == EX_MUL || k == EX_DIV) && cb && b == 1) return x;
        if (k == EX_MOD && cb && b == 1) return e_i(A, 0);
    }
    EType t = (k == EX_LT || k == EX_LE || k == EX_EQ) ? T_BOOL : x->t;
    Expr *e = mk(A, k, t, 2);
    e->a[0] = x; e->a[1] = y;
    return e;
}
Expr *e_un(Arena *A, ExprKind k, Expr *x) {
    Expr *e = mk(A, k, k == EX_TOF ? T_F32 : k == EX_TOI ? T_I64 : x->t, 1);
    e->a[0] = x;
    return e;
}
Expr *e_select(Arena *A, Expr *c, Expr *x, Expr *y) {
    Expr *e = mk(A, EX_SELECT, x->t, 3);
    e->a[0] = c; e->a[1] = x; e->a[2] = y;
    return e;
}

static Expr *rebuild(Arena *A, const Expr *e, Expr **args) {
    switch (e->k) {
    case EX_LOAD: return e_load(A, e->buf, e->nargs, args);
    case EX_SELECT: return e_select(A, args[0], args[1], args[2]);
    case EX_SLOAD: { Expr *r = e_un(A, EX_SLOAD, args[0]); r->i = e->i; r->t = e->t; return r; }
    default:
        if (e->nargs == 2) return e_bin(A, e->k, args[0], args[1]);
        if (e->nargs == 1) return e_un(A, e->k, args[0]);
        UNREACHABLE();
    }
}
static Expr *subst(Arena *A, Expr *e, Var *v, Expr *r, Expr *const *acc, int nacc) {
    if (e->k == EX_VAR && v && e->var == v) return r;
    if (e->k == EX_ACC && e->i < nacc && acc[e->i]) return acc[e->i];
    if (!e->nargs) return e;
    Expr *args[MAX_DIMS + 4];
    CHECK(e->nargs <= MAX_DIMS + 4, "too many args");
    bool changed = false;
    for (int i = 0; i < e->nargs; i++) { args[i] = subst(A, e->a[i], v, r, acc, nacc); changed |= args[i] != e->a[i]; }
    return changed ? rebuild(A, e, args) : e;
}
Expr *expr_subst(Arena *A, Expr *e, Var *v, Expr *r) { return subst(A, e, v, r, NULL, 0); }
Expr *expr_subst_acc(Arena *A, Expr *e, Expr *acc) { return subst(A, e, NULL, NULL, &acc, 1); }
Expr *expr_subst_accs(Arena *A, Expr *e, Expr *const *acc, int n) { return subst(A, e, NULL, NULL, acc, n); }
Expr *expr_subst_vars(Arena *A, Expr *e, Var *const *from, Expr *const *to, int n) {
    for (int i = 0; i < n; i++) e = expr_subst(A, e, from[i], to[i]);
    return e;
}

/* ---- simplification over known variable ranges ---- */
/* [*lo, *hi] (inclusive) bounds e's value where the ranges tell */
static bool range_of(const Expr *e, const VarRange *r, int nr, int64_t *lo, int64_t *hi) {
    int64_t a0, a1, b0, b1;
    switch (e->k) {
    case EX_ICONST: *lo = *hi = e->i; return true;
    case EX_VAR:
        for (int i = 0; i < nr; i++)
            if (r[i].v == e->var) { *lo = r[i].lo; *hi = r[i].hi - 1; return r[i].hi > r[i].lo; }
        return false;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_DIV: case EX_MOD:
        if (e->t != T_I64 || !range_of(e->a[0], r, nr, &a0, &a1) || !range_of(e->a[1], r, nr, &b0, &b1)) return false;
        switch (e->k) {
        case EX_ADD: *lo = a0 + b0; *hi = a1 + b1; return true;
        case EX_SUB: *lo = a0 - b1; *hi = a1 - b0; return true;
        case EX_MUL: {
            int64_t p[4] = {a0 * b0, a0 * b1, a1 * b0, a1 * b1};
            *lo = *hi = p[0];
            for (int i = 1; i < 4; i++) { if (p[i] < *lo) *lo = p[i]; if (p[i] > *hi) *hi = p[i]; }
            return true;
        }
        case EX_DIV: if (b0 != b1 || b0 <= 0 || a0 < 0) return false; *lo = a0 / b0; *hi = a1 / b0; return true;
        default:
            if (b0 != b1 || b0 <= 0 || a0 < 0) return false;
            if (a0 / b0 == a1 / b0) { *lo = a0 % b0; *hi = a1 % b0; } else { *lo = 0; *hi = b0 - 1; }
            return true;
        }
    default: return false;
    }
}
/* e as base + c (base NULL: the constant c alone) */
static void split_const(Expr *e, Expr **base, int64_t *c) {
    int64_t k;
    if (expr_is_const(e, &k)) { *base = NULL; *c = k; return; }
    if ((e->k == EX_ADD || e->k == EX_SUB) && expr_is_const(e->a[1], &k)) {
        *base = e->a[0]; *c = e->k == EX_ADD ? k : -k; return;
    }
    *base = e; *c = 0;
}
static Expr *plus_const(Arena *A, Expr *base, int64_t c) {
    if (!base) return e_i(A, c);
    return c >= 0 ? e_bin(A, EX_ADD, base, e_i(A, c)) : e_bin(A, EX_SUB, base, e_i(A, -c));
}
Expr *expr_simplify(Arena *A, Expr *e, const VarRange *r, int nr) {
    if (!e->nargs) return e;
    Expr *args[MAX_DIMS + 4];
    CHECK(e->nargs <= MAX_DIMS + 4, "too many args");
    for (int i = 0; i < e->nargs; i++) args[i] = expr_simplify(A, e->a[i], r, nr);
    int64_t lo, hi, blo, bhi;
    if (e->k == EX_SELECT && args[0]->k == EX_LT && range_of(args[0]->a[0], r, nr, &lo, &hi)
        && range_of(args[0]->a[1], r, nr, &blo, &bhi)) {
        if (hi < blo) return args[1];
        if (lo >= bhi) return args[2];
    }
    Expr *n = rebuild(A, e, args);
    if (n->t != T_I64) return n;
    if (range_of(n, r, nr, &lo, &hi) && lo == hi) return e_i(A, lo);
    if (n->k == EX_ADD || n->k == EX_SUB) {
        /* constants gathered to the right: (x + 16) + 16 and x + 32 compare equal */
        Expr *ba, *bb;
        int64_t ca, cb;
        split_const(n->a[0], &ba, &ca);
        split_const(n->a[1], &bb, &cb);
        if (n->k == EX_ADD) return plus_const(A, !bb ? ba : !ba ? bb : e_bin(A, EX_ADD, ba, bb), ca + cb);
        if (!bb) return plus_const(A, ba, ca - cb);
        return plus_const(A, e_bin(A, EX_SUB, ba ? ba : e_i(A, 0), bb), ca - cb);
    }
    int64_t m;
    if (n->k == EX_MOD && expr_is_const(n->a[1], &m) && m > 0 && range_of(n->a[0], r, nr, &lo, &hi) && lo >= 0
        && lo / m == hi / m)
        return expr_simplify(A, plus_const(A, n->a[0], -(lo / m) * m), r, nr);
    return n;
}

bool expr_equal(const Expr *x, const Expr *y) {
    if (x->k != y->k || x->t != y->t || x->nargs != y->nargs) return false;
    switch (x->k) {
    case EX_FCONST: if (memcmp(&x->f, &y->f, sizeof x->f)) return false; break;
    case EX_VAR: if (x->var != y->var) return false; break;
    case EX_VELEM: if (x->var != y->var || x->i != y->i) return false; break;
    case EX_LOAD: if (x->buf != y->buf) return false; break;
    default: if (x->i != y->i) return false;
    }
    for (int i = 0; i < x->nargs; i++) if (!expr_equal(x->a[i], y->a[i])) return false;
    return true;
}
bool expr_uses_var(const Expr *e, const Var *v) {
    if (e->k == EX_VAR || e->k == EX_VELEM) return e->var == v;
    for (int i = 0; i < e->nargs; i++) if (expr_uses_var(e->a[i], v)) return true;
    return false;
}
bool expr_reads_param(const Expr *e, ParamId p) {
    if (!e) return false;
    if (e->k == EX_PARAM && e->i == p) return true;
    for (int i = 0; i < e->nargs; i++) if (expr_reads_param(e->a[i], p)) return true;
    return false;
}
void expr_visit_loads(const Expr *e, void (*f)(void *ctx, Buffer *b), void *ctx) {
    if (e->k == EX_LOAD) f(ctx, e->buf);
    for (int i = 0; i < e->nargs; i++) expr_visit_loads(e->a[i], f, ctx);
}

static bool infix(ExprKind k) {
    return k == EX_ADD || k == EX_SUB || k == EX_MUL || k == EX_DIV || k == EX_MOD
           || k == EX_LT || k == EX_LE || k == EX_EQ;
}
void expr_print_ref(Str *o, const char *name, int n, Expr *const *idx) {
    str_printf(o, "%s[", name);
    for (int i = 0; i < n; i++) { if (i) str_printf(o, ", "); expr_print(o, idx[i]); }
    str_printf(o, "]");
}
void expr_print(Str *o, const Expr *e) {
    switch (e->k) {
    case EX_FCONST:
        if (isinf(e->f)) str_printf(o, "%sinf", e->f < 0 ? "-" : "");
        else str_printf(o, "%.9g", e->f);
        return;
    case EX_ICONST: str_printf(o, "%lld", (long long)e->i); return;
    case EX_VAR: str_printf(o, "%s", e->var->name); return;
    case EX_PARAM: str_printf(o, "%s", param_names[e->i]); return;
    case EX_ACC: str_printf(o, e->i ? "acc%lld" : "acc", (long long)e->i); return;
    case EX_TID: str_printf(o, "tid"); return;
    case EX_BID: str_printf(o, "bid"); return;
    case EX_REG: str_printf(o, "r%lld", (long long)e->i); return;
    case EX_SLOAD: str_printf(o, "smem%lld[", (long long)e->i); expr_print(o, e->a[0]); str_printf(o, "]"); return;
    case EX_VELEM: str_printf(o, "%s.%lld", e->var->name, (long long)e->i); return;
    default:
        if (infix(e->k)) {
            str_printf(o, "(");
            expr_print(o, e->a[0]);
            str_printf(o, " %s ", expr_names[e->k]);
            expr_print(o, e->a[1]);
            str_printf(o, ")");
            return;
        }
        if (e->k == EX_LOAD) { expr_print_ref(o, e->buf->name, e->nargs, e->a); return; }
        /* a function as name(x, y) */
        str_printf(o, "%s(", expr_names[e->k]);
        for (int i = 0; i < e->nargs; i++) { if (i) str_printf(o, ", "); expr_print(o, e->a[i]); }
        str_printf(o, ")");
    }
}

const char *expr_verify(Arena *A, const Expr *e) {
    if (e->k >= EX_COUNT) return "bad expression kind";
    int ar = expr_arity[e->k];
    if (ar >= 0 && e->nargs != ar)
        return arena_printf(A, "%s takes %d operands, has %d", expr_names[e->k], ar, e->nargs);
    for (int i = 0; i < e->nargs; i++) {
        const char *m = expr_verify(A, e->a[i]);
        if (m) return m;
    }
    switch (e->k) {
    case EX_LOAD:
        if (!e->buf) return "load without buffer";
        if (e->nargs != e->buf->ndim)
            return arena_printf(A, "load of %s has %d indices, buffer has %d dims", e->buf->name, e->nargs,
                                e->buf->ndim);
        for (int i = 0; i < e->nargs; i++)
            if (e->a[i]->t != T_I64) return arena_printf(A, "index %d of %s is not an integer", i, e->buf->name);
        break;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_DIV: case EX_MIN: case EX_MAX: case EX_LT: case EX_LE: case EX_EQ:
        if (e->a[0]->t != e->a[1]->t) return arena_printf(A, "operands of %s differ in type", expr_names[e->k]);
        break;
    case EX_MOD: if (e->a[0]->t != T_I64 || e->a[1]->t != T_I64) return "% needs integers"; break;
    case EX_EXP: case EX_RSQRT: case EX_COS: case EX_SIN:
        if (e->a[0]->t != T_F32) return arena_printf(A, "%s needs f32", expr_names[e->k]);
        break;
    case EX_TOF: if (e->a[0]->t != T_I64) return "f32() converts an integer"; break;
    /* i64() truncates; kernels convert exact small integers */
    case EX_TOI: if (e->a[0]->t != T_F32) return "i64() converts an f32"; break;
    case EX_SELECT:
        if (e->a[0]->t != T_BOOL) return "select condition is not boolean";
        if (e->a[1]->t != e->a[2]->t) return "select arms differ in type";
        break;
    case EX_VAR: if (!e->var) return "var without binding"; break;
    case EX_VELEM: if (!e->var || e->i < 0) return "vector element without a vector"; break;
    default: break;
    }
    return NULL;
}
