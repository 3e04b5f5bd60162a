/* loop_ir.c: tensor IR -> loop IR, printer and verifier. */
#include "loop_ir.h"
#include <string.h>

static LStmt *stmt(Arena *A, LStmtKind k) { LStmt *s = ARENA_NEW(A, LStmt); s->k = k; return s; }
static LStmt *loop(Arena *A, const Axis *ax, LoopKind lk, int nbody) {
    LStmt *s = stmt(A, LS_FOR);
    s->v = ax->v; s->extent = ax->extent; s->lk = lk;
    s->nbody = nbody; s->body = ARENA_ARRAY(A, LStmt *, nbody);
    return s;
}

static LoopNest *lower_op(Arena *A, const TOp *op) {
    LoopNest *nest = ARENA_NEW(A, LoopNest);
    nest->module = op->module; nest->kname = op->kname; nest->origin = op->kind;
    LStmt *store = stmt(A, LS_STORE);
    store->buf = op->out;
    store->idx = ARENA_ARRAY(A, Expr *, op->out->ndim);
    memcpy(store->idx, op->out_idx, sizeof(Expr *) * (size_t)op->out->ndim);
    LStmt *inner;
    if (op->kind == TOP_REDUCE) {
        LStmt *init = stmt(A, LS_ACC_INIT); init->red = op->red;
        LStmt *upd = stmt(A, LS_ACC); upd->red = op->red; upd->value = op->body;
        LStmt *r = upd;
        for (int i = op->nraxes - 1; i >= 0; i--) { LStmt *l = loop(A, &op->raxes[i], LOOP_REDUCE, 1); l->body[0] = r; r = l; }
        store->value = op->epilogue ? op->epilogue : e_acc(A);
        LStmt *blk = stmt(A, LS_FOR);   /* a body of three statements, wrapped below */
        blk->nbody = 3; blk->body = ARENA_ARRAY(A, LStmt *, 3);
        blk->body[0] = init; blk->body[1] = r; blk->body[2] = store;
        inner = blk;
    } else {
        store->value = op->body;
        inner = store;
    }
    /* wrap in the parallel loops, innermost last */
    LStmt *cur = NULL;
    for (int i = op->naxes - 1; i >= 0; i--) {
        LStmt *l = loop(A, &op->axes[i], LOOP_PARALLEL, 0);
        if (!cur) {
            if (inner->k == LS_FOR && !inner->v) { l->body = inner->body; l->nbody = inner->nbody; }
            else { l->nbody = 1; l->body = ARENA_ARRAY(A, LStmt *, 1); l->body[0] = inner; }
        } else { l->nbody = 1; l->body = ARENA_ARRAY(A, LStmt *, 1); l->body[0] = cur; }
        cur = l;
    }
    CHECK(cur, "op %s has no axes", op->module);
    nest->root = cur;
    return nest;
}

void loop_lower(Arena *A, const TProgram *tp, LProgram *lp) {
    lp->tp = tp;
    lp->n = tp->n;
    lp->nests = ARENA_ARRAY(A, LoopNest *, tp->n);
    for (int i = 0; i < tp->n; i++) lp->nests[i] = lower_op(A, tp->ops[i]);
}

static void indent(Str *o, int d) { for (int i = 0; i < d; i++) str_printf(o, "  "); }
static void print_stmt(Str *o, const LStmt *s, int d) {
    indent(o, d);
    switch (s->k) {
    case LS_FOR:
        str_printf(o, "for %s in 0..", s->v->name);
        expr_print(o, s->extent);
        str_printf(o, " %s:\n", s->lk == LOOP_PARALLEL ? "parallel" : "reduce");
        for (int i = 0; i < s->nbody; i++) print_stmt(o, s->body[i], d + 1);
        return;
    case LS_ACC_INIT: str_printf(o, "acc = %s\n", s->red == RED_SUM ? "0" : "-inf"); return;
    case LS_ACC:
        str_printf(o, s->red == RED_SUM ? "acc += " : "acc = max(acc, ");
        expr_print(o, s->value);
        str_printf(o, s->red == RED_SUM ? "\n" : ")\n");
        return;
    case LS_STORE:
        str_printf(o, "%s[", s->buf->name);
        for (int i = 0; i < s->buf->ndim; i++) { if (i) str_printf(o, ", "); expr_print(o, s->idx[i]); }
        str_printf(o, "] = ");
        expr_print(o, s->value);
        str_printf(o, "\n");
        return;
    case LS_COUNT: break;
    }
}
void loop_print(Str *o, const LProgram *lp) {
    str_printf(o, "# loop IR: %d loop nests (one per kernel)\n", lp->n);
    for (int i = 0; i < lp->n; i++) {
        str_printf(o, "nest %s  # %s (%s)\n", lp->nests[i]->kname, lp->nests[i]->module, top_kind_names[lp->nests[i]->origin]);
        print_stmt(o, lp->nests[i]->root, 1);
    }
}

/* Scoping: every variable used is bound by an enclosing loop; acc is used
 * only after acc_init in the same body. */
static const char *verify_expr_scope(Arena *A, const Expr *e, Var **bound, int nb, bool acc_ok) {
    if (e->k == EX_VAR) {
        for (int i = 0; i < nb; i++) if (bound[i] == e->var) return NULL;
        return arena_printf(A, "variable %s used outside its loop", e->var->name);
    }
    if (e->k == EX_ACC && !acc_ok) return "acc used before acc_init";
    for (int i = 0; i < e->nargs; i++) { const char *m = verify_expr_scope(A, e->a[i], bound, nb, acc_ok); if (m) return m; }
    return NULL;
}
static const char *verify_stmt(Arena *A, const LStmt *s, Var **bound, int nb, bool *acc) {
    switch (s->k) {
    case LS_FOR: {
        if (nb >= 16) return "loop nest too deep";
        const char *m = verify_expr_scope(A, s->extent, bound, nb, false);
        if (m) return m;
        bound[nb] = s->v;
        for (int i = 0; i < s->nbody; i++) { m = verify_stmt(A, s->body[i], bound, nb + 1, acc); if (m) return m; }
        return NULL;
    }
    case LS_ACC_INIT: *acc = true; return NULL;
    case LS_ACC:
        if (!*acc) return "acc_update before acc_init";
        return verify_expr_scope(A, s->value, bound, nb, false) ? verify_expr_scope(A, s->value, bound, nb, false) : expr_verify(A, s->value);
    case LS_STORE:
        for (int i = 0; i < s->buf->ndim; i++) { const char *m = verify_expr_scope(A, s->idx[i], bound, nb, false); if (m) return m; }
        { const char *m = verify_expr_scope(A, s->value, bound, nb, *acc); return m ? m : expr_verify(A, s->value); }
    case LS_COUNT: break;
    }
    return "bad statement";
}
const char *loop_verify(Arena *A, const LProgram *lp) {
    for (int i = 0; i < lp->n; i++) {
        Var *bound[16];
        bool acc = false;
        const char *m = verify_stmt(A, lp->nests[i]->root, bound, 0, &acc);
        if (m) return arena_printf(A, "nest %d (%s): %s", i, lp->nests[i]->module, m);
    }
    return NULL;
}
