/* kernel_cse.c: the name_indices stage. Schedules write each statement's indices out in full, so an unrolled
 * body repeats them: cpu_rows' fused q projection with RoPE computed ((p / 64) * 128 + p % 64) in all 32
 * statements of its body. Here an integer expression that a block of statements computes more than once
 * becomes a let before the first statement that needs it, and the statements read it by name; both targets
 * print the same kernel IR, so both get it.
 *
 * Only integer arithmetic of variables, thread and block indices and constants is named (no load, no float,
 * nothing that reads pos: the plan's _tokens variants look for pos + t where a kernel reads it), so nothing
 * computed changes. A block is a phase's statements or a loop's or an if's body; an expression is named in the
 * innermost block that holds all its uses (two of its statements use it, or one twice in its own expressions),
 * so that a name lives no longer than its uses need, and the largest first.
 *
 * Every kernel of both targets, but where ptxas (scripts/ptxas_report, Qwen2.5-7B) said a name costs registers:
 * gemm_tc names only its epilogue's indices, and none where an element has two stores (KKernel.name_*). On the
 * others the names saved registers (the gemv q projection 80 -> 72, v 56 -> 48, flash_decode 34 -> 32). */
#include "kernel_cse.h"
#include <string.h>

typedef struct {
    Arena *A;
    int next_var;              /* ids for the names made here, above the kernel's own */
} Cse;

static bool is_index(const Expr *e) {
    if (!e || e->t != T_I64) return false;
    switch (e->k) {
    case EX_ICONST: case EX_VAR: case EX_TID: case EX_BID: return true;
    case EX_PARAM: return e->i != P_POS;
    case EX_DIV: case EX_MOD:   /* by a constant: named ahead of a guard, it cannot divide by zero */
        return is_index(e->a[0]) && e->a[1]->k == EX_ICONST && e->a[1]->i != 0;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_MIN: case EX_MAX:
        return is_index(e->a[0]) && is_index(e->a[1]);
    default: return false;
    }
}
static int expr_size(const Expr *e) {
    int n = 1;
    for (int i = 0; i < e->nargs; i++) n += expr_size(e->a[i]);
    return n;
}
static bool has_var(const Expr *e) {
    if (e->k == EX_VAR || e->k == EX_TID || e->k == EX_BID || e->k == EX_PARAM) return true;
    for (int i = 0; i < e->nargs; i++) if (has_var(e->a[i])) return true;
    return false;
}
/* worth a name: an index of a variable with at least two operations (p % 64 alone reads as well as its name) */
static bool candidate(const Expr *e) { return e->nargs && is_index(e) && expr_size(e) >= 5 && has_var(e); }

/* ---- the variables a block's statements bind below the block itself: an expression using one cannot be
 * named at the block ---- */
typedef struct { const Var **v; int n, cap; } VarSet;
static void var_add(Arena *A, VarSet *s, const Var *v) {
    arena_grow(A, (void **)&s->v, s->n, &s->cap, sizeof *s->v);
    s->v[s->n++] = v;
}
static void bound_below(Arena *A, TStmt *const *b, int n, bool nested, VarSet *out) {
    for (int i = 0; i < n; i++) {
        if (b[i]->v && (nested || b[i]->k == TS_FOR)) var_add(A, out, b[i]->v);
        bound_below(A, b[i]->body, b[i]->nbody, true, out);
    }
}
static bool uses_any(const Expr *e, const VarSet *s) {
    if (e->k == EX_VAR) for (int i = 0; i < s->n; i++) if (s->v[i] == e->var) return true;
    for (int i = 0; i < e->nargs; i++) if (uses_any(e->a[i], s)) return true;
    return false;
}

/* ---- the expressions of a statement, to read and to replace ---- */
static int stmt_slots(TStmt *s, Expr ***slot) {
    int n = 0;
    Expr **own[4] = {&s->e, &s->lo, &s->step, &s->sidx};
    for (int i = 0; i < 4; i++) if (*own[i]) slot[n++] = own[i];
    for (int d = 0; s->idx && d < s->buf->ndim; d++) slot[n++] = &s->idx[d];
    return n;
}

/* occurrences of e in x (x itself included) */
static int count_in(const Expr *x, const Expr *e) {
    if (expr_equal(x, e)) return 1;
    int c = 0;
    for (int i = 0; i < x->nargs; i++) c += count_in(x->a[i], e);
    return c;
}
static int count_own(TStmt *s, const Expr *e) {
    Expr **slot[TS_MAX_EXPRS];
    int c = 0;
    for (int j = 0, ns = stmt_slots(s, slot); j < ns; j++) c += count_in(*slot[j], e);
    return c;
}
static int count_stmts(TStmt *const *b, int n, const Expr *e) {
    int c = 0;
    for (int i = 0; i < n; i++) c += count_own(b[i], e) + count_stmts(b[i]->body, b[i]->nbody, e);
    return c;
}
/* whether block b is where e is named: two of its statements use it, or one twice in its own expressions */
static bool named_here(TStmt *const *b, int n, const Expr *e) {
    int users = 0;
    for (int i = 0; i < n; i++) {
        int own = count_own(b[i], e);
        if (own >= 2) return true;
        users += own + count_stmts(b[i]->body, b[i]->nbody, e) > 0;
    }
    return users >= 2;
}
/* the largest candidate in x that b's statements compute twice or more and that uses none of bound */
static void best_in(const Expr *x, TStmt *const *b, int n, const VarSet *bound, const Expr **best, int *best_size) {
    if (candidate(x) && expr_size(x) > *best_size && !uses_any(x, bound) && named_here(b, n, x)) {
        *best = x;
        *best_size = expr_size(x);
        return;   /* its parts are smaller */
    }
    for (int i = 0; i < x->nargs; i++) best_in(x->a[i], b, n, bound, best, best_size);
}
static void best_of(TStmt *const *b, int n, TStmt *const *all, int nall, const VarSet *bound, const Expr **best,
                    int *size) {
    for (int i = 0; i < n; i++) {
        Expr **slot[TS_MAX_EXPRS];
        for (int j = 0, ns = stmt_slots(b[i], slot); j < ns; j++) best_in(*slot[j], all, nall, bound, best, size);
        best_of(b[i]->body, b[i]->nbody, all, nall, bound, best, size);
    }
}

static Expr *replace(Arena *A, Expr *x, const Expr *e, Expr *name) {
    if (expr_equal(x, e)) return name;
    if (!x->nargs) return x;
    Expr **a = ARENA_ARRAY(A, Expr *, x->nargs);
    bool changed = false;
    for (int i = 0; i < x->nargs; i++) { a[i] = replace(A, x->a[i], e, name); changed |= a[i] != x->a[i]; }
    if (!changed) return x;
    Expr *c = ARENA_NEW(A, Expr);
    *c = *x;
    c->a = a;
    return c;
}
static void replace_stmts(Arena *A, TStmt **b, int n, const Expr *e, Expr *name) {
    for (int i = 0; i < n; i++) {
        if (b[i]->idx) {   /* cleanup's copies of a statement share its index array: this one gets its own */
            Expr **idx = ARENA_ARRAY(A, Expr *, b[i]->buf->ndim);
            memcpy(idx, b[i]->idx, sizeof *idx * (size_t)b[i]->buf->ndim);
            b[i]->idx = idx;
        }
        Expr **slot[TS_MAX_EXPRS];
        for (int j = 0, ns = stmt_slots(b[i], slot); j < ns; j++) *slot[j] = replace(A, *slot[j], e, name);
        replace_stmts(A, b[i]->body, b[i]->nbody, e, name);
    }
}

/* Names what block b[0..*n) computes twice, then its inner blocks'; returns the new list */
static TStmt **name_block(Cse *c, TStmt **b, int *n) {
    for (;;) {
        VarSet bound = {0};
        bound_below(c->A, b, *n, false, &bound);
        int size = 0;
        const Expr *e = NULL;
        best_of(b, *n, b, *n, &bound, &e, &size);
        if (!e) break;
        int first = 0;
        while (!count_stmts(&b[first], 1, e)) first++;
        Var *v = ARENA_NEW(c->A, Var);
        v->id = c->next_var++;
        v->name = "i";
        TStmt *let = ARENA_NEW(c->A, TStmt);
        let->k = TS_LET; let->v = v; let->e = (Expr *)e;
        Expr *name = e_var(c->A, v);
        replace_stmts(c->A, b, *n, e, name);
        TStmt **r = ARENA_ARRAY(c->A, TStmt *, *n + 2);
        for (int i = 0, j = 0; i < *n; i++) {
            if (i == first) r[j++] = let;
            r[j++] = b[i];
        }
        b = r;
        (*n)++;
    }
    for (int i = 0; i < *n; i++) b[i]->body = name_block(c, b[i]->body, &b[i]->nbody);
    return b;
}
static void name_kstmts(Cse *c, KStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        if (b[i]->k == KS_PHASE) b[i]->body = name_block(c, b[i]->body, &b[i]->nbody);
        else if (b[i]->k == KS_UFOR) name_kstmts(c, b[i]->kbody, b[i]->nk);
    }
}

/* the largest variable id a kernel's statements bind */
static int max_var(TStmt *const *b, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (b[i]->v && b[i]->v->id > m) m = b[i]->v->id;
        int inner = max_var(b[i]->body, b[i]->nbody);
        if (inner > m) m = inner;
    }
    return m;
}
static int max_kvar(KStmt *const *b, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        int inner = b[i]->k == KS_PHASE ? max_var(b[i]->body, b[i]->nbody) : max_kvar(b[i]->kbody, b[i]->nk);
        if (b[i]->v && b[i]->v->id > m) m = b[i]->v->id;
        if (inner > m) m = inner;
    }
    return m;
}

void kernel_name_indices(Arena *A, KProgram *kp) {
    for (int i = 0; i < kp->nk; i++) {
        KKernel *k = kp->kernels[i];
        if (k->name_none) continue;
        Cse c = {A, max_kvar(k->body, k->nbody) + 1};
        int first = 0;
        if (k->name_epilogue_only)
            for (first = k->nbody - 1; first > 0 && k->body[first]->k != KS_PHASE; first--) {}
        name_kstmts(&c, k->body + first, k->nbody - first);
    }
}
