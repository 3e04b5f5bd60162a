/* loop_ir.c: tensor IR -> loop IR, fusion (with its cost guards) and the
 * memory plan over fused nests, printer and verifier. */
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
    nest->module = op->module; nest->kname = op->kname; nest->origin = op->kind; nest->op = op;
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

void loop_lower(Arena *A, TProgram *tp, LProgram *lp) {
    lp->tp = tp;
    lp->n_inlined = lp->n_side_stores = lp->n_flash = lp->n_retargeted = lp->n_tails = 0;
    lp->n = tp->n;
    lp->nests = ARENA_ARRAY(A, LoopNest *, tp->n);
    for (int i = 0; i < tp->n; i++) lp->nests[i] = lower_op(A, tp->ops[i]);
}

/* ---- fusion ---- */

/* The shapes fusion works on: a flat nest (parallel loops around one store)
 * and a single-reduction nest (parallel loops around acc_init, one reduce
 * loop, store). */
typedef struct { int npar; const LStmt *par[MAX_AXES]; const LStmt *leaf; LStmt *red; LStmt *store; bool side; } Shape;
static bool shape_of(const LoopNest *n, Shape *sh) {
    memset(sh, 0, sizeof *sh);
    const LStmt *s = n->root;
    for (;;) {
        if (s->k != LS_FOR || s->lk != LOOP_PARALLEL || sh->npar >= MAX_AXES) return false;
        sh->par[sh->npar++] = s;
        if (s->nbody == 1 && s->body[0]->k == LS_FOR && s->body[0]->lk == LOOP_PARALLEL) { s = s->body[0]; continue; }
        break;
    }
    sh->leaf = s;
    if (s->nbody == 1 && s->body[0]->k == LS_STORE) { sh->store = s->body[0]; return true; }
    /* a reduction (its loop's body the update, or a side store and the update) */
    if (s->nbody == 3 && s->body[0]->k == LS_ACC_INIT && s->body[1]->k == LS_FOR && s->body[1]->lk == LOOP_REDUCE &&
        (s->body[1]->nbody == 1 || (s->body[1]->nbody == 2 && s->body[1]->body[0]->k == LS_STORE)) &&
        s->body[1]->body[s->body[1]->nbody - 1]->k == LS_ACC && s->body[2]->k == LS_STORE) {
        sh->red = s->body[1]; sh->store = s->body[2]; sh->side = s->body[1]->nbody == 2;
        return true;
    }
    return false;
}
/* the store writes B[v0, v1, ...]: its own loop variables, in order, over all of B */
static bool identity_store(const Shape *sh) {
    const LStmt *st = sh->store;
    if (sh->red || st->buf->ndim != sh->npar) return false;
    for (int d = 0; d < sh->npar; d++)
        if (st->idx[d]->k != EX_VAR || st->idx[d]->var != sh->par[d]->v) return false;
    return true;
}

typedef struct { const Buffer *b; int n; const Expr *first; bool other; } Uses;
static void count_loads(Uses *u, const Expr *e) {
    if (e->k == EX_LOAD && e->buf == u->b) {
        if (!u->n++) u->first = e;
        else if (!expr_equal(u->first, e)) u->other = true;
    }
    for (int i = 0; i < e->nargs; i++) count_loads(u, e->a[i]);
}
static void count_stmt(Uses *u, const LStmt *s) {
    if (s->k == LS_ATTN) {
        const AttnDesc *d = s->attn;
        count_loads(u, d->q); count_loads(u, d->k); count_loads(u, d->v); count_loads(u, d->jmax);
        for (int i = 0; i < d->out->ndim; i++) count_loads(u, d->out_idx[i]);
        return;
    }
    if (s->extent) count_loads(u, s->extent);
    if (s->value) count_loads(u, s->value);
    if (s->k == LS_STORE) for (int d = 0; d < s->buf->ndim; d++) count_loads(u, s->idx[d]);
    for (int i = 0; i < s->nbody; i++) count_stmt(u, s->body[i]);
}
static bool writes(const LStmt *s, const Buffer *b) {
    if ((s->k == LS_STORE && s->buf == b) || (s->k == LS_ATTN && s->attn->out == b)) return true;
    for (int i = 0; i < s->nbody; i++) if (writes(s->body[i], b)) return true;
    return false;
}

/* the buffers e loads (*n = -1: more than 16) */
static void collect_inputs(const Expr *e, Buffer **out, int *n) {
    if (*n < 0) return;
    if (e->k == EX_LOAD) {
        int i = 0;
        while (i < *n && out[i] != e->buf) i++;
        if (i == *n) { if (*n == 16) { *n = -1; return; } out[(*n)++] = e->buf; }
    }
    for (int i = 0; i < e->nargs; i++) collect_inputs(e->a[i], out, n);
}

/* The producer's value at the consumer's load point: its loop variables
 * replaced by the load's indices. */
static Expr *value_at(Arena *A, const Shape *p, const Expr *load) {
    Expr *v = p->store->value;
    for (int d = 0; d < p->npar; d++) v = expr_subst(A, v, p->par[d]->v, load->a[d]);
    return v;
}
static Expr *replace_load(Arena *A, Expr *e, const Expr *load, Expr *with) {
    if (expr_equal(e, load)) return with;
    if (!e->nargs) return e;
    Expr *n = ARENA_NEW(A, Expr);
    *n = *e;
    n->a = ARENA_ARRAY(A, Expr *, e->nargs);
    bool changed = false;
    for (int i = 0; i < e->nargs; i++) { n->a[i] = replace_load(A, e->a[i], load, with); changed |= n->a[i] != e->a[i]; }
    return changed ? n : e;
}
static Expr *extent_product(Arena *A, const Shape *sh, bool with_red) {
    Expr *p = e_i(A, 1);
    for (int d = 0; d < sh->npar; d++) p = E_MUL(A, p, sh->par[d]->extent);
    if (with_red && sh->red) p = E_MUL(A, p, sh->red->extent);
    return p;
}

/* Inlining P (the only writer of B) into the flat nest C: allowed when C
 * is B's only reader, reads it at one point, and has as many elements as
 * P (one evaluation of P's value per element either way: nothing is
 * recomputed, one store and one load of B are saved). */
static bool try_inline(Arena *A, LProgram *lp, bool *dead, int pi, int ci) {
    Shape p, c;
    if (!shape_of(lp->nests[pi], &p) || !identity_store(&p) || !shape_of(lp->nests[ci], &c) || c.red) return false;
    const Buffer *b = p.store->buf;
    if (b->kind != BUF_ACT) return false;
    Uses u = {b, 0, NULL, false};
    count_loads(&u, c.store->value);
    if (u.n != 1 || !expr_equal(extent_product(A, &p, false), extent_product(A, &c, false))) return false;
    for (int i = 0; i < lp->n; i++) {
        if (dead[i] || i == pi) continue;
        if (writes(lp->nests[i]->root, b)) return false;
        Uses w = {b, 0, NULL, false};
        count_stmt(&w, lp->nests[i]->root);
        if (i != ci && w.n) return false;
        if (i == ci && w.n != 1) return false;   /* one load: more would evaluate P's value twice */
    }
    /* P's inputs must still hold what P read when C runs */
    Buffer *in[16];
    int nin = 0;
    collect_inputs(p.store->value, in, &nin);
    if (nin < 0) return false;
    for (int i = pi + 1; i < ci; i++)
        for (int j = 0; !dead[i] && j < nin; j++) if (writes(lp->nests[i]->root, in[j])) return false;
    c.store->value = replace_load(A, c.store->value, u.first, value_at(A, &p, u.first));
    return true;
}

/* P (elementwise, writes B[t, c]) right before the reduction R over
 * [t] x reduce d that reads B only as B[t, d]: R computes P's value in its
 * loop, stores it (B keeps its later readers) and accumulates it. Every
 * element is computed once; one launch and one read of B are saved. */
static bool try_side_store(Arena *A, LProgram *lp, int pi, int ri) {
    Shape p, r;
    if (!shape_of(lp->nests[pi], &p) || !identity_store(&p) || !shape_of(lp->nests[ri], &r) || !r.red || r.side) return false;
    const Buffer *b = p.store->buf;
    /* argmax's schedule keeps (value, index) pairs and has no side store */
    if (b->kind != BUF_ACT || p.npar != r.npar + 1 || r.red->body[r.red->nbody - 1]->red == RED_ARGMAX || writes(lp->nests[ri]->root, b)) return false;
    for (int d = 0; d < r.npar; d++) if (!expr_equal(p.par[d]->extent, r.par[d]->extent)) return false;
    if (!expr_equal(p.par[p.npar - 1]->extent, r.red->extent)) return false;
    LStmt *acc = r.red->body[0];
    Uses u = {b, 0, NULL, false};
    count_loads(&u, acc->value);
    if (!u.n || u.other) return false;
    for (int d = 0; d < r.npar; d++)
        if (u.first->a[d]->k != EX_VAR || u.first->a[d]->var != r.par[d]->v) return false;
    if (u.first->a[r.npar]->k != EX_VAR || u.first->a[r.npar]->var != r.red->v) return false;
    Uses us = {b, 0, NULL, false};
    count_stmt(&us, r.store);
    if (us.n) return false;
    Expr *v = value_at(A, &p, u.first);
    LStmt *side = ARENA_NEW(A, LStmt);
    side->k = LS_STORE; side->buf = p.store->buf;
    side->idx = ARENA_ARRAY(A, Expr *, b->ndim);
    for (int d = 0; d < b->ndim; d++) side->idx[d] = u.first->a[d];
    side->value = v;
    LStmt *nacc = ARENA_NEW(A, LStmt);
    *nacc = *acc;
    nacc->value = replace_load(A, acc->value, u.first, v);
    r.red->nbody = 2;
    r.red->body = ARENA_ARRAY(A, LStmt *, 2);
    r.red->body[0] = side; r.red->body[1] = nacc;
    return true;
}

static bool touches(const LoopNest *n, const Buffer *b) {
    Uses u = {b, 0, NULL, false};
    count_stmt(&u, n->root);
    return u.n || writes(n->root, b);
}

/* Tail: C, a flat nest over [t.., c] right after the reduction R over [t..] whose result B[t..] it
 * reads (RMSNorm's scale after its sum of squares, softmax's normalise after its sum), goes into R as
 * a loop after R's store: `for c: C's store`, its loads of B[t..] now of the value R just stored.
 * One block then does the whole row (one launch instead of two, B read back from shared memory);
 * every element is still computed once. R must not be a linear (gemv / gemm_tc have no tail: a
 * reduction reading a weight is one unless it has a side store), and nothing may run between them. */
static bool try_tail(Arena *A, LProgram *lp, int ri, int ci) {
    Shape r, c;
    if (!shape_of(lp->nests[ri], &r) || !r.red || !shape_of(lp->nests[ci], &c) || c.red || c.npar != r.npar + 1) return false;
    if (r.red->body[r.red->nbody - 1]->red == RED_ARGMAX || r.leaf->nbody != 3) return false;
    Buffer *in[16];
    int nin = 0;
    collect_inputs(r.red->body[r.red->nbody - 1]->value, in, &nin);
    for (int i = 0; i < nin && !r.side; i++) if (in[i]->kind == BUF_WEIGHT) return false;   /* (tile_ir.c never makes a gemv of a side store) */
    if (nin < 0) return false;
    const Buffer *b = r.store->buf;
    if (b->kind != BUF_ACT || b->ndim != r.npar || c.store->buf == b) return false;
    for (int d = 0; d < r.npar; d++) {
        if (r.store->idx[d]->k != EX_VAR || r.store->idx[d]->var != r.par[d]->v) return false;
        if (!expr_equal(r.par[d]->extent, c.par[d]->extent)) return false;
    }
    /* C reads B only at its own leading variables */
    Uses u = {b, 0, NULL, false};
    count_loads(&u, c.store->value);
    for (int k = 0; k < c.store->buf->ndim; k++) count_loads(&u, c.store->idx[k]);
    if (!u.n || u.other) return false;
    for (int d = 0; d < r.npar; d++) if (u.first->a[d]->k != EX_VAR || u.first->a[d]->var != c.par[d]->v) return false;
    /* R's variables for C's leading ones; C's last loop becomes R's tail */
    Expr *val = c.store->value;
    Expr **idx = ARENA_ARRAY(A, Expr *, c.store->buf->ndim);
    for (int k = 0; k < c.store->buf->ndim; k++) idx[k] = c.store->idx[k];
    for (int d = 0; d < r.npar; d++) {
        Expr *rv = e_var(A, r.par[d]->v);
        val = expr_subst(A, val, c.par[d]->v, rv);
        for (int k = 0; k < c.store->buf->ndim; k++) idx[k] = expr_subst(A, idx[k], c.par[d]->v, rv);
    }
    LStmt *st = ARENA_NEW(A, LStmt);
    *st = *c.store;
    st->value = val; st->idx = idx;
    Axis ax = {c.par[c.npar - 1]->v, c.par[c.npar - 1]->extent};
    LStmt *tail = loop(A, &ax, LOOP_PARALLEL, 1);
    tail->body[0] = st;
    LStmt *leaf = (LStmt *)r.leaf;
    LStmt **nb = ARENA_ARRAY(A, LStmt *, 4);
    memcpy(nb, leaf->body, sizeof(LStmt *) * 3);
    nb[3] = tail;
    leaf->body = nb; leaf->nbody = 4;
    return true;
}

/* An index component as hi * E + lo over loop variables of sh, lo of
 * constant extent E (lo NULL, E 1: the variable hi alone). */
static Expr *ext_of(const Shape *sh, const Var *v) {
    for (int d = 0; d < sh->npar; d++) if (sh->par[d]->v == v) return sh->par[d]->extent;
    return NULL;
}
static bool lin_index(const Shape *sh, const Expr *e, const Var **hi, const Var **lo, int64_t *E) {
    int64_t le;
    if (e->k == EX_VAR && ext_of(sh, e->var)) { *hi = e->var; *lo = NULL; *E = 1; return true; }
    if (e->k != EX_ADD || e->a[0]->k != EX_MUL || e->a[0]->a[0]->k != EX_VAR || e->a[1]->k != EX_VAR ||
        !expr_is_const(e->a[0]->a[1], E))
        return false;
    *hi = e->a[0]->a[0]->var; *lo = e->a[1]->var;
    Expr *x = ext_of(sh, *lo);
    return ext_of(sh, *hi) && x && expr_is_const(x, &le) && le == *E;
}
/* Retarget: C copies an activation B that only P writes and only C reads
 * into D (`D[f(v)] = B[g(v)]`: the KV-cache writes, of RoPE's k and of
 * v_proj). P stores its value straight to D[f(g^-1(P's index))] and C goes:
 * one launch, one store and one load of B saved, nothing recomputed. g must
 * be a bijection whose inverse is read off the index forms (a variable, or
 * hi * E + lo), and nothing between P and C may touch D. */
static bool try_retarget(Arena *A, LProgram *lp, const bool *dead, int pi, int ci) {
    Shape p, c;
    if (!shape_of(lp->nests[pi], &p) || p.side || !shape_of(lp->nests[ci], &c) || c.red || c.store->value->k != EX_LOAD) return false;
    const Expr *ld = c.store->value;
    Buffer *b = ld->buf;
    if (b->kind != BUF_ACT || p.store->buf != b || c.store->buf == b) return false;
    /* as many elements: the constant extents' products equal, the others equal in order */
    int64_t kp = 1, kc = 1, v;
    const Expr *sp[MAX_AXES], *sc[MAX_AXES];
    int nsp = 0, nsc = 0;
    for (int d = 0; d < p.npar; d++) { if (expr_is_const(p.par[d]->extent, &v)) kp *= v; else sp[nsp++] = p.par[d]->extent; }
    for (int d = 0; d < c.npar; d++) { if (expr_is_const(c.par[d]->extent, &v)) kc *= v; else sc[nsc++] = c.par[d]->extent; }
    if (kp != kc || nsp != nsc) return false;
    for (int d = 0; d < nsp; d++) if (!expr_equal(sp[d], sc[d])) return false;
    for (int i = 0; i < lp->n; i++) {
        if (dead[i] || i == pi || i == ci) continue;
        if (touches(lp->nests[i], b) || (i > pi && i < ci && touches(lp->nests[i], c.store->buf))) return false;
    }
    if (writes(lp->nests[pi]->root, c.store->buf)) return false;
    Buffer *in[16];
    int nin = 0;
    for (int k = 0; k < c.store->buf->ndim; k++) collect_inputs(c.store->idx[k], in, &nin);
    if (nin) return false;   /* the target index reads nothing (P runs earlier than C did) */
    /* C's variables as expressions of P's */
    Var *cv[MAX_AXES];
    Expr *to[MAX_AXES] = {0};
    for (int d = 0; d < c.npar; d++) cv[d] = c.par[d]->v;
    for (int d = 0; d < b->ndim; d++) {
        const Var *ch, *cl, *ph, *pl;
        int64_t cE, pE;
        if (!lin_index(&c, ld->a[d], &ch, &cl, &cE) || !lin_index(&p, p.store->idx[d], &ph, &pl, &pE)) return false;
        Expr *ce = ext_of(&c, ch), *pe = ext_of(&p, ph), *ph_e = e_var(A, (Var *)ph);
        Expr *val[2] = {NULL, NULL};
        if (!cl && !pl && expr_equal(ce, pe)) val[0] = ph_e;
        else if (cl && !pl && expr_equal(E_MUL(A, ce, e_i(A, cE)), pe)) { val[0] = E_DIV(A, ph_e, e_i(A, cE)); val[1] = e_bin(A, EX_MOD, ph_e, e_i(A, cE)); }
        else if (cl && pl && cE == pE && expr_equal(ce, pe)) { val[0] = ph_e; val[1] = e_var(A, (Var *)pl); }
        else if (!cl && pl && expr_equal(ce, E_MUL(A, pe, e_i(A, pE)))) val[0] = E_ADD(A, E_MUL(A, ph_e, e_i(A, pE)), e_var(A, (Var *)pl));
        else return false;
        for (int q = 0; q < 2 && val[q]; q++) {
            const Var *v = q ? cl : ch;
            int at = -1;
            for (int k = 0; k < c.npar; k++) if (cv[k] == v) at = k;
            if (at < 0 || to[at]) return false;   /* each of C's variables exactly once */
            to[at] = val[q];
        }
    }
    for (int d = 0; d < c.npar; d++) if (!to[d]) return false;
    Buffer *D = c.store->buf;
    Expr **idx = ARENA_ARRAY(A, Expr *, D->ndim);
    for (int k = 0; k < D->ndim; k++) {
        idx[k] = c.store->idx[k];
        for (int d = 0; d < c.npar; d++) idx[k] = expr_subst(A, idx[k], cv[d], to[d]);
    }
    p.store->buf = D;
    p.store->idx = idx;
    return true;
}

/* The activation arena over the nests (tensor_plan_memory's best fit, at
 * nest granularity): fusion moved first and last uses. */
typedef struct { int *first, *last, i; } Life;
static void life_load(void *ctx, Buffer *b) {
    Life *l = ctx;
    if (b->id < 0) return;
    if (l->first[b->id] < 0) l->first[b->id] = l->i;
    l->last[b->id] = l->i;
}
static void life_stmt(Life *l, const LStmt *s) {
    if (s->k == LS_ATTN) {
        const AttnDesc *d = s->attn;
        const Expr *e[4] = {d->q, d->k, d->v, d->jmax};
        for (int i = 0; i < 4; i++) expr_visit_loads(e[i], life_load, l);
        for (int i = 0; i < d->out->ndim; i++) expr_visit_loads(d->out_idx[i], life_load, l);
        life_load(l, d->out);
        return;
    }
    if (s->extent) expr_visit_loads(s->extent, life_load, l);
    if (s->value) expr_visit_loads(s->value, life_load, l);
    if (s->k == LS_STORE) {
        for (int d = 0; d < s->buf->ndim; d++) expr_visit_loads(s->idx[d], life_load, l);
        life_load(l, s->buf);
    }
    for (int i = 0; i < s->nbody; i++) life_stmt(l, s->body[i]);
}
static void replan(Arena *A, LProgram *lp) {
    TProgram *tp = lp->tp;
    Life l = {ARENA_ARRAY(A, int, tp->nbufs), ARENA_ARRAY(A, int, tp->nbufs), 0};
    for (int i = 0; i < tp->nbufs; i++) l.first[i] = l.last[i] = -1;
    for (l.i = 0; l.i < lp->n; l.i++) life_stmt(&l, lp->nests[l.i]->root);
    tensor_place_buffers(A, tp, l.first, l.last, lp->n);
}

void loop_fuse(Arena *A, LProgram *lp, bool enable) {
    if (!enable) return;
    bool *dead = ARENA_ARRAY(A, bool, lp->n);
    for (int ci = 0; ci < lp->n; ci++) {
        /* every earlier live nest is a candidate producer for an inline (nearest first) */
        for (int pi = ci - 1; pi >= 0; pi--)
            if (!dead[pi] && try_inline(A, lp, dead, pi, ci)) { dead[pi] = true; lp->n_inlined++; }
        int pi = ci - 1;
        while (pi >= 0 && dead[pi]) pi--;
        if (pi >= 0 && try_side_store(A, lp, pi, ci)) { dead[pi] = true; lp->n_side_stores++; }
        /* an elementwise row op right after the reduction it reads: into that nest, as its tail */
        for (pi = ci - 1; pi >= 0 && dead[pi]; pi--) {}
        if (pi >= 0 && !dead[ci] && try_tail(A, lp, pi, ci)) { dead[ci] = true; lp->n_tails++; continue; }
        /* a copy of an activation: into the epilogue of its writer, wherever that is */
        Shape c;
        if (!dead[ci] && shape_of(lp->nests[ci], &c) && !c.red && c.store->value->k == EX_LOAD) {
            for (pi = ci - 1; pi >= 0 && (dead[pi] || !writes(lp->nests[pi]->root, c.store->value->buf)); pi--) {}
            if (pi >= 0 && try_retarget(A, lp, dead, pi, ci)) { dead[ci] = true; lp->n_retargeted++; }
        }
    }
    int n = 0;
    for (int i = 0; i < lp->n; i++) if (!dead[i]) lp->nests[n++] = lp->nests[i];
    lp->n = n;
    replan(A, lp);
}

/* ---- online softmax (flash attention) ---- */

/* for t, h: the attention's row */
static LoopNest *attn_nest(Arena *A, const LoopNest *pv, const AttnDesc *d) {
    LoopNest *n = ARENA_NEW(A, LoopNest);
    *n = *pv;
    n->kname = d->kname;
    Axis at = {d->t, d->rows}, ah = {d->h, e_i(A, d->heads)};
    LStmt *a = stmt(A, LS_ATTN);
    a->attn = d;
    LStmt *lh = loop(A, &ah, LOOP_PARALLEL, 1), *lt = loop(A, &at, LOOP_PARALLEL, 1);
    lh->body[0] = a; lt->body[0] = lh;
    n->root = lt;
    return n;
}
/* Each score is computed once either way (the plain parts store them, the
 * fused nest keeps them in registers), so nothing is recomputed; the
 * scores' stores and their three re-reads go, and with them four launches. */
void loop_flash(Arena *A, LProgram *lp, bool enable, bool (*fits)(const AttnDesc *)) {
    if (!enable) return;
    bool *dead = ARENA_ARRAY(A, bool, lp->n);
    for (int pv = 0; pv < lp->n; pv++) {
        const AttnDesc *d = lp->nests[pv]->op ? lp->nests[pv]->op->attn : NULL;
        if (!d || !fits(d)) continue;
        int at[5];
        bool ok = true;
        for (int p = 0; p < 5 && ok; p++) {
            at[p] = -1;
            for (int i = 0; i <= pv; i++) if (!dead[i] && lp->nests[i]->op == d->parts[p]) at[p] = i;
            ok = at[p] >= 0 && (!p || at[p] > at[p - 1]);
        }
        /* the scores, max and sum have no other users, and the inputs still hold what the scores read */
        Buffer *in[16];
        int nin = 0;
        collect_inputs(d->q, in, &nin);
        collect_inputs(d->k, in, &nin);
        collect_inputs(d->v, in, &nin);
        if (nin < 0) ok = false;
        for (int i = 0; i < lp->n && ok; i++) {
            bool part = false;
            for (int p = 0; p < 5; p++) part |= i == at[p];
            if (dead[i] || part) continue;
            for (int p = 0; p < 3 && ok; p++) ok = !touches(lp->nests[i], d->parts[p]->out);
            for (int b = 0; b < nin && ok && i > at[0] && i < pv; b++) ok = !writes(lp->nests[i]->root, in[b]);
        }
        if (!ok) continue;
        for (int p = 0; p < 4; p++) dead[at[p]] = true;
        lp->nests[pv] = attn_nest(A, lp->nests[pv], d);
        lp->n_flash++;
    }
    int n = 0;
    for (int i = 0; i < lp->n; i++) if (!dead[i]) lp->nests[n++] = lp->nests[i];
    lp->n = n;
    if (lp->n_flash) replan(A, lp);
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
    case LS_ACC_INIT: str_printf(o, "acc = %s\n", s->red == RED_SUM ? "0" : s->red == RED_MAX ? "-inf" : "index 0 of -inf"); return;
    case LS_ACC:
        str_printf(o, s->red == RED_SUM ? "acc += " : s->red == RED_MAX ? "acc = max(acc, " : "acc = index of the first max(acc, ");
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
    case LS_ATTN: {
        const AttnDesc *a = s->attn;
        str_printf(o, "online softmax over j in 0..");
        expr_print(o, a->len);
        str_printf(o, " where j < ");
        expr_print(o, a->jmax);
        str_printf(o, " (m = -inf, l = 0, o[d] = 0; heads share k and v in groups of %lld):\n", (long long)a->group);
        indent(o, d + 1);
        str_printf(o, "s = %.9g * sum over d in 0..%lld of ", a->scale, (long long)a->hd);
        expr_print(o, a->q);
        str_printf(o, " * ");
        expr_print(o, a->k);
        str_printf(o, "\n");
        indent(o, d + 1);
        str_printf(o, "m' = max(m, s); c = exp(m - m'); l = l*c + exp(s - m'); o[d] = o[d]*c + exp(s - m') * ");
        expr_print(o, a->v);
        str_printf(o, " for d in 0..%lld; m = m'\n", (long long)a->hv);
        indent(o, d);
        str_printf(o, "%s[", a->out->name);
        for (int i = 0; i < a->out->ndim; i++) { if (i) str_printf(o, ", "); expr_print(o, a->out_idx[i]); }
        str_printf(o, "] = o[d] / l for d in 0..%lld\n", (long long)a->hv);
        return;
    }
    case LS_COUNT: break;
    }
}
void loop_print(Str *o, const LProgram *lp) {
    str_printf(o, "# loop IR: %d loop nests (one per kernel); fused: %d inlined, %d side stores, %d tails, %d copies retargeted, %d online softmax\n", lp->n,
               lp->n_inlined, lp->n_side_stores, lp->n_tails, lp->n_retargeted, lp->n_flash);
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
    case LS_ATTN: {
        /* q, k, v see j and d besides the loops; the store sees d */
        const AttnDesc *a = s->attn;
        if (nb > 14) return "loop nest too deep";
        bound[nb] = a->j; bound[nb + 1] = a->d;
        const Expr *e[5] = {a->q, a->k, a->v, a->jmax, a->len};
        for (int i = 0; i < 5; i++) {
            const char *m = verify_expr_scope(A, e[i], bound, i < 3 ? nb + 2 : nb, false);
            if (!m) m = expr_verify(A, e[i]);
            if (m) return m;
        }
        bound[nb] = a->d;
        for (int i = 0; i < a->out->ndim; i++) { const char *m = verify_expr_scope(A, a->out_idx[i], bound, nb + 1, false); if (m) return m; }
        if (a->heads % a->group || a->hd < 1 || a->hv < 1) return "attention shape";
        return NULL;
    }
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
