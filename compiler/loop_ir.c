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

/* The parallel loops over ax[0..n) (the outermost first) around the statements body[0..nbody) */
static LStmt *par_loops(Arena *A, const Axis *ax, int n, LStmt **body, int nbody) {
    LStmt *cur = NULL;
    for (int d = n - 1; d >= 0; d--) {
        LStmt *l = loop(A, &ax[d], LOOP_PARALLEL, cur ? 1 : 0);
        if (cur) l->body[0] = cur;
        else { l->body = body; l->nbody = nbody; }
        cur = l;
    }
    return cur;
}

static LoopNest *lower_op(Arena *A, const TOp *op) {
    LoopNest *nest = ARENA_NEW(A, LoopNest);
    nest->module = op->module; nest->layer = op->layer; nest->kname = op->kname; nest->origin = op->kind; nest->op = op;
    LStmt *store = stmt(A, LS_STORE);
    store->buf = op->out;
    store->idx = ARENA_ARRAY(A, Expr *, op->out->ndim);
    memcpy(store->idx, op->out_idx, sizeof(Expr *) * (size_t)op->out->ndim);
    LStmt **body = ARENA_ARRAY(A, LStmt *, 3);
    int nbody = 1;
    if (op->red == RED_TOPK) {
        body[0] = stmt(A, LS_TOPK);
        body[0]->topk = op;
    } else if (op->kind == TOP_REDUCE) {
        LStmt *init = stmt(A, LS_ACC_INIT); init->red = op->red;
        LStmt *upd = stmt(A, LS_ACC); upd->red = op->red; upd->value = op->body;
        LStmt *r = upd;
        for (int i = op->nraxes - 1; i >= 0; i--) {
            LStmt *l = loop(A, &op->raxes[i], LOOP_REDUCE, 1); l->body[0] = r; r = l;
        }
        store->value = op->epilogue ? op->epilogue : e_acc(A);
        body[0] = init; body[1] = r; body[2] = store;
        nbody = 3;
    } else {
        store->value = op->body;
        body[0] = store;
    }
    CHECK(op->naxes > 0, "op %s has no axes", op->module);
    nest->root = par_loops(A, op->axes, op->naxes, body, nbody);
    return nest;
}

void loop_lower(Arena *A, TProgram *tp, LProgram *lp) {
    lp->tp = tp;
    lp->max_batch = tp->g->max_batch; lp->max_ctx = tp->g->max_ctx; lp->sampler = tp->g->cfg != NULL;
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
    if (st->buf->ndim != sh->npar) return false;
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
/* Calls f on every expression of s and its body (loop extents, values, store indices, an attention's and a
 * top_k's operands), and w (when not NULL) on every buffer they store to. */
static void stmt_walk(const LStmt *s, void (*f)(void *, const Expr *), void (*w)(void *, Buffer *), void *ctx) {
    if (s->k == LS_ATTN) {
        const AttnDesc *d = s->attn;
        const Expr *e[4] = {d->q, d->k, d->v, d->jmax};
        for (int i = 0; i < 4; i++) f(ctx, e[i]);
        for (int i = 0; i < d->out->ndim; i++) f(ctx, d->out_idx[i]);
        if (w) w(ctx, d->out);
        return;
    }
    if (s->k == LS_TOPK) {
        f(ctx, s->topk->body);
        if (w) w(ctx, s->topk->out);
        return;
    }
    if (s->extent) f(ctx, s->extent);
    if (s->value) f(ctx, s->value);
    if (s->k == LS_STORE) {
        for (int d = 0; d < s->buf->ndim; d++) f(ctx, s->idx[d]);
        if (w) w(ctx, s->buf);
    }
    for (int i = 0; i < s->nbody; i++) stmt_walk(s->body[i], f, w, ctx);
}
static void count_expr(void *u, const Expr *e) { count_loads(u, e); }
static void count_stmt(Uses *u, const LStmt *s) { stmt_walk(s, count_expr, NULL, u); }
static bool writes(const LStmt *s, const Buffer *b) {
    if ((s->k == LS_STORE && s->buf == b) || (s->k == LS_ATTN && s->attn->out == b) ||
        (s->k == LS_TOPK && s->topk->out == b)) return true;
    for (int i = 0; i < s->nbody; i++) if (writes(s->body[i], b)) return true;
    return false;
}
static bool touches(const LoopNest *n, const Buffer *b) {
    Uses u = {b, 0, NULL, false};
    count_stmt(&u, n->root);
    return u.n || writes(n->root, b);
}
/* the live nest that writes b (-1: none or several) and whether only `reader` reads it */
static int sole_writer(const LProgram *lp, const bool *dead, const Buffer *b, int reader) {
    int w = -1;
    for (int i = 0; i < lp->n; i++) {
        if (dead[i]) continue;
        if (writes(lp->nests[i]->root, b)) { if (w >= 0) return -1; w = i; }
        else if (i != reader && touches(lp->nests[i], b)) return -1;
    }
    return w;
}

/* The buffers expressions load, each once (n = -1: more than 16); collect_inputs adds e's (a stmt_walk visitor). */
typedef struct { Buffer *b[16]; int n; } Inputs;
static void collect_inputs(void *ctx, const Expr *e) {
    Inputs *s = ctx;
    if (s->n < 0) return;
    if (e->k == EX_LOAD) {
        int i = 0;
        while (i < s->n && s->b[i] != e->buf) i++;
        if (i == s->n) { if (s->n == 16) { s->n = -1; return; } s->b[s->n++] = e->buf; }
    }
    for (int i = 0; i < e->nargs; i++) collect_inputs(s, e->a[i]);
}
/* whether e loads a weight (-1: it loads more than 16 buffers) */
static int weight_read(const Expr *e) {
    Inputs in = {0};
    collect_inputs(&in, e);
    for (int i = 0; i < in.n; i++) if (in.b[i]->kind == BUF_WEIGHT) return 1;
    return in.n < 0 ? -1 : 0;
}

/* v, an expression of sh's loop variables, at the point another nest loads: the variables replaced by the load's
 * indices (a producer's value where its consumer reads it) */
static Expr *at_point(Arena *A, const Shape *sh, Expr *v, const Expr *load) {
    for (int d = 0; d < sh->npar; d++) v = expr_subst(A, v, sh->par[d]->v, load->a[d]);
    return v;
}
static Expr *replace_load(Arena *A, Expr *e, const Expr *load, Expr *with) {
    if (expr_equal(e, load)) return with;
    if (!e->nargs) return e;
    Expr *n = ARENA_NEW(A, Expr);
    *n = *e;
    n->a = ARENA_ARRAY(A, Expr *, e->nargs);
    bool changed = false;
    for (int i = 0; i < e->nargs; i++) changed |= (n->a[i] = replace_load(A, e->a[i], load, with)) != e->a[i];
    return changed ? n : e;
}
static Expr *extent_product(Arena *A, const Shape *sh, bool with_red) {
    Expr *p = e_i(A, 1);
    for (int d = 0; d < sh->npar; d++) p = E_MUL(A, p, sh->par[d]->extent);
    if (with_red && sh->red) p = E_MUL(A, p, sh->red->extent);
    return p;
}

static LStmt *store_stmt(Arena *A, Buffer *b, Expr **idx, Expr *value) {
    LStmt *s = stmt(A, LS_STORE);
    s->buf = b; s->idx = idx; s->value = value;
    return s;
}
/* a store of value to b at idx, from[i] replaced by to[i] in both */
static LStmt *store_subst(Arena *A, Buffer *b, Expr *const *idx, Expr *value, Var *const *from, Expr *const *to,
                          int n) {
    Expr **ni = ARENA_ARRAY(A, Expr *, b->ndim);
    for (int d = 0; d < b->ndim; d++) ni[d] = expr_subst_vars(A, idx[d], from, to, n);
    return store_stmt(A, b, ni, expr_subst_vars(A, value, from, to, n));
}
/* C's store, of value, moved into R's loops: C's first n loop variables become R's (rv[0..n): R's, as expressions) */
static LStmt *store_in(Arena *A, const Shape *c, const Shape *r, int n, Expr *value, Expr **rv) {
    Var *cv[MAX_AXES];
    for (int d = 0; d < n; d++) { cv[d] = c->par[d]->v; rv[d] = e_var(A, r->par[d]->v); }
    return store_subst(A, c->store->buf, c->store->idx, value, cv, rv, n);
}

/* Inlining P (the only writer of B) into the flat nest C: allowed when C
 * is B's only reader, reads it at one point, and has as many elements as
 * P (one evaluation of P's value per element either way: nothing is
 * recomputed, one store and one load of B are saved). */
/* P and C of one decoder layer (or both the model's own): a layer's output is its own, so that every layer is
 * one program (the host code's loop) and the embedding's gather a step before it */
static bool try_inline(Arena *A, LProgram *lp, bool *dead, int pi, int ci) {
    Shape p, c;
    if (!shape_of(lp->nests[pi], &p) || p.red || !identity_store(&p) || !shape_of(lp->nests[ci], &c) || c.red ||
        lp->nests[pi]->layer != lp->nests[ci]->layer)
        return false;
    const Buffer *b = p.store->buf;
    if (b->kind != BUF_ACT) return false;
    Uses u = {b, 0, NULL, false};
    count_loads(&u, c.store->value);
    if (u.n != 1 || !expr_equal(extent_product(A, &p, false), extent_product(A, &c, false))) return false;
    if (sole_writer(lp, dead, b, ci) != pi) return false;
    Uses w = {b, 0, NULL, false};
    count_stmt(&w, lp->nests[ci]->root);
    if (w.n != 1) return false;   /* one load: more would evaluate P's value twice */
    /* P's inputs must still hold what P read when C runs */
    Inputs in = {0};
    collect_inputs(&in, p.store->value);
    if (in.n < 0) return false;
    for (int i = pi + 1; i < ci; i++)
        for (int j = 0; !dead[i] && j < in.n; j++) if (writes(lp->nests[i]->root, in.b[j])) return false;
    c.store->value = replace_load(A, c.store->value, u.first, at_point(A, &p, p.store->value, u.first));
    return true;
}

/* P (elementwise, writes B[t, c]) right before the reduction R over
 * [t] x reduce d that reads B only as B[t, d]: R computes P's value in its
 * loop, stores it (B keeps its later readers) and accumulates it. Every
 * element is computed once; one launch and one read of B are saved. */
static bool try_side_store(Arena *A, LProgram *lp, int pi, int ri) {
    Shape p, r;
    if (!shape_of(lp->nests[pi], &p) || p.red || !identity_store(&p) || !shape_of(lp->nests[ri], &r) || !r.red ||
        r.side || lp->nests[pi]->layer != lp->nests[ri]->layer)
        return false;
    const Buffer *b = p.store->buf;
    /* argmax's schedule keeps (value, index) pairs and has no side store */
    if (b->kind != BUF_ACT || p.npar != r.npar + 1 || r.red->body[r.red->nbody - 1]->red == RED_ARGMAX ||
        writes(lp->nests[ri]->root, b)) return false;
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
    Expr *v = at_point(A, &p, p.store->value, u.first);
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

/* Tail: C, a flat nest over [t.., c] right after the reduction R over [t..] whose result B[t..] it
 * reads (RMSNorm's scale after its sum of squares, softmax's normalise after its sum), goes into R as
 * a loop after R's store: `for c: C's store`, its loads of B[t..] now of the value R just stored.
 * One block then does the whole row (one launch instead of two, B read back from shared memory);
 * every element is still computed once. R must not be a linear (gemv / gemm_tc have no tail: a
 * reduction reading a weight is one unless it has a side store), and nothing may run between them. */
static bool try_tail(Arena *A, LProgram *lp, int ri, int ci) {
    Shape r, c;
    if (!shape_of(lp->nests[ri], &r) || !r.red || !shape_of(lp->nests[ci], &c) || c.red || c.npar != r.npar + 1)
        return false;
    if (r.red->body[r.red->nbody - 1]->red == RED_ARGMAX || r.leaf->nbody != 3) return false;
    /* (tile_ir.c never makes a gemv of a side store) */
    int w = weight_read(r.red->body[r.red->nbody - 1]->value);
    if (w < 0 || (w && !r.side)) return false;
    const Buffer *b = r.store->buf;
    if (b->kind != BUF_ACT || !identity_store(&r) || c.store->buf == b) return false;
    for (int d = 0; d < r.npar; d++) if (!expr_equal(r.par[d]->extent, c.par[d]->extent)) return false;
    /* C reads B only at its own leading variables */
    Uses u = {b, 0, NULL, false};
    count_loads(&u, c.store->value);
    for (int k = 0; k < c.store->buf->ndim; k++) count_loads(&u, c.store->idx[k]);
    if (!u.n || u.other) return false;
    for (int d = 0; d < r.npar; d++) if (u.first->a[d]->k != EX_VAR || u.first->a[d]->var != c.par[d]->v) return false;
    /* R's variables for C's leading ones; C's last loop becomes R's tail */
    Expr *rv[MAX_AXES];
    LStmt *st = store_in(A, &c, &r, r.npar, c.store->value, rv);
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

/* As many iterations of a's parallel loops as of b's: the constant extents' products equal, the
 * others equal in order. */
static bool same_count(const Shape *a, const Shape *b) {
    int64_t ka = 1, kb = 1, v;
    const Expr *sa[MAX_AXES], *sb[MAX_AXES];
    int na = 0, nb = 0;
    for (int d = 0; d < a->npar; d++)
        if (expr_is_const(a->par[d]->extent, &v)) ka *= v; else sa[na++] = a->par[d]->extent;
    for (int d = 0; d < b->npar; d++)
        if (expr_is_const(b->par[d]->extent, &v)) kb *= v; else sb[nb++] = b->par[d]->extent;
    if (ka != kb || na != nb) return false;
    for (int d = 0; d < na; d++) if (!expr_equal(sa[d], sb[d])) return false;
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
    if (!shape_of(lp->nests[pi], &p) || p.side || !shape_of(lp->nests[ci], &c) || c.red || c.store->value->k != EX_LOAD)
        return false;
    const Expr *ld = c.store->value;
    Buffer *b = ld->buf;
    if (b->kind != BUF_ACT || p.store->buf != b || c.store->buf == b) return false;
    if (!same_count(&p, &c)) return false;
    for (int i = 0; i < lp->n; i++) {
        if (dead[i] || i == pi || i == ci) continue;
        if (touches(lp->nests[i], b) || (i > pi && i < ci && touches(lp->nests[i], c.store->buf))) return false;
    }
    if (writes(lp->nests[pi]->root, c.store->buf)) return false;
    Inputs in = {0};
    for (int k = 0; k < c.store->buf->ndim; k++) collect_inputs(&in, c.store->idx[k]);
    if (in.n) return false;   /* the target index reads nothing (P runs earlier than C did) */
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
        else if (cl && !pl && expr_equal(E_MUL(A, ce, e_i(A, cE)), pe)) {
            val[0] = E_DIV(A, ph_e, e_i(A, cE)); val[1] = e_bin(A, EX_MOD, ph_e, e_i(A, cE));
        }
        else if (cl && pl && cE == pE && expr_equal(ce, pe)) { val[0] = ph_e; val[1] = e_var(A, (Var *)pl); }
        else if (!cl && pl && expr_equal(ce, E_MUL(A, pe, e_i(A, pE))))
            val[0] = E_ADD(A, E_MUL(A, ph_e, e_i(A, pE)), e_var(A, (Var *)pl));
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
static void life_expr(void *l, const Expr *e) { expr_visit_loads(e, life_load, l); }
/* Drops the nests fusion emptied (dead), then plans the arena again. */
static void replan(Arena *A, LProgram *lp, const bool *dead) {
    int n = 0;
    for (int i = 0; i < lp->n; i++) if (!dead[i]) lp->nests[n++] = lp->nests[i];
    lp->n = n;
    TProgram *tp = lp->tp;
    Life l = {ARENA_ARRAY(A, int, tp->nbufs), ARENA_ARRAY(A, int, tp->nbufs), 0};
    for (int i = 0; i < tp->nbufs; i++) l.first[i] = l.last[i] = -1;
    for (l.i = 0; l.i < lp->n; l.i++) stmt_walk(lp->nests[l.i]->root, life_expr, life_load, &l);
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
    replan(A, lp, dead);
}

/* ---- epilogues: elementwise consumers into the linears they read ---- */

/* a linear's nest: parallel loops, one sum over K (constant) of a term that reads a weight, the
 * store of B[its loop variables] (no side store, no tail) */
static bool linear_shape(const LoopNest *n, Shape *sh) {
    int64_t K;
    if (!shape_of(n, sh) || !sh->red || sh->side || sh->leaf->nbody != 3 || sh->red->body[0]->red != RED_SUM ||
        !expr_is_const(sh->red->extent, &K) || sh->store->buf->kind != BUF_ACT || !identity_store(sh))
        return false;
    return weight_read(sh->red->body[0]->value) == 1;
}
static bool expr_uses_buf(const Expr *e, const Buffer *b) {
    if (e->k == EX_LOAD && e->buf == b) return true;
    for (int i = 0; i < e->nargs; i++) if (expr_uses_buf(e->a[i], b)) return true;
    return false;
}
/* the loads of b in e, one per distinct point (at most 4; *n = -1 past that) */
static void points_of(const Expr *e, const Buffer *b, const Expr **pt, int *n) {
    if (*n < 0) return;
    if (e->k == EX_LOAD && e->buf == b) {
        for (int i = 0; i < *n; i++) if (expr_equal(pt[i], e)) return;
        if (*n == 4) { *n = -1; return; }
        pt[(*n)++] = e;
        return;
    }
    for (int i = 0; i < e->nargs; i++) points_of(e->a[i], b, pt, n);
}
/* the load reads B at C's own loop variables, in order, over extents equal to R's */
static bool at_own_point(const Shape *c, const Shape *r, const Expr *ld) {
    if (c->npar != r->npar || ld->nargs != c->npar) return false;
    for (int d = 0; d < c->npar; d++)
        if (ld->a[d]->k != EX_VAR || ld->a[d]->var != c->par[d]->v ||
            !expr_equal(c->par[d]->extent, r->par[d]->extent)) return false;
    return true;
}
/* R's store value at the point ld (R's loop variables replaced by ld's indices), its acc as slot */
static Expr *linear_at(Arena *A, const Shape *r, const Expr *ld, int slot) {
    return at_point(A, r, expr_subst_acc(A, r->store->value, e_acc_slot(A, slot)), ld);
}
/* R's accumulated term at the point ld, its reduction variable kv */
static Expr *acc_term_at(Arena *A, const Shape *r, const Expr *ld, Var *kv) {
    return at_point(A, r, expr_subst(A, r->red->body[0]->value, r->red->v, e_var(A, kv)), ld);
}
/* a's kernel name joined with b's past their common prefix: mlp_gate_proj + mlp_up_proj -> mlp_gate_proj_up_proj */
static const char *joined_name(Arena *A, const char *a, const char *b) {
    size_t p = 0, i = 0;
    while (a[i] && a[i] == b[i]) { if (a[i] == '_') p = i + 1; i++; }
    return arena_printf(A, "%s_%s", a, b + p);
}
/* the nests strictly between lo and hi write none of the buffers the nest `reader` reads (but skip) and do not
 * touch out */
static bool quiet_between(const LProgram *lp, const bool *dead, int lo, int hi, const LoopNest *reader,
                          const Buffer *skip0, const Buffer *skip1, const Buffer *out) {
    Inputs in = {0};
    stmt_walk(reader->root, collect_inputs, NULL, &in);
    if (in.n < 0) return false;
    for (int i = lo + 1; i < hi; i++) {
        if (dead[i]) continue;
        if (touches(lp->nests[i], out)) return false;
        for (int j = 0; j < in.n; j++)
            if (in.b[j] != skip0 && in.b[j] != skip1 && writes(lp->nests[i]->root, in.b[j])) return false;
    }
    return true;
}
/* parallel loops over ax around acc_init x2, for kv < K { slot 0 += t0; slot 1 += t1 }, the stores */
static LStmt *pair_root(Arena *A, const Axis *ax, int npar, Var *kv, Expr *K, Expr *t0, Expr *t1, LStmt **st,
                        int nst) {
    LStmt **body = ARENA_ARRAY(A, LStmt *, 3 + nst);
    Axis ka = {kv, K};
    LStmt *red = loop(A, &ka, LOOP_REDUCE, 2);
    for (int j = 0; j < 2; j++) {
        LStmt *init = stmt(A, LS_ACC_INIT);
        init->red = RED_SUM; init->slot = j;
        body[j] = init;
        LStmt *u = stmt(A, LS_ACC);
        u->red = RED_SUM; u->slot = j; u->value = j ? t1 : t0;
        red->body[j] = u;
    }
    body[2] = red;
    for (int i = 0; i < nst; i++) body[3 + i] = st[i];
    return par_loops(A, ax, npar, body, 3 + nst);
}

/* C (flat) into the one linear R it reads, at C's own point: R stores C's value to C's output */
static bool try_epilogue(Arena *A, LProgram *lp, const bool *dead, int ri, int ci, const Expr *ld) {
    Shape r, c;
    if (!linear_shape(lp->nests[ri], &r) || !shape_of(lp->nests[ci], &c) || !at_own_point(&c, &r, ld)) return false;
    Buffer *out = c.store->buf;
    if (touches(lp->nests[ri], out) || !quiet_between(lp, dead, ri, ci, lp->nests[ci], r.store->buf, NULL, out))
        return false;
    Expr *rv[MAX_AXES], *v = replace_load(A, c.store->value, ld, r.store->value);
    *r.store = *store_in(A, &c, &r, c.npar, v, rv);
    lp->nests[ri]->kname = joined_name(A, lp->nests[ri]->kname, lp->nests[ci]->kname);
    return true;
}

/* C reads linears R1 < R2 (same parallel extents and K) each at its own point: one nest at R2's place */
static bool try_pair(Arena *A, LProgram *lp, const bool *dead, int r1i, int r2i, int ci, const Expr *ld1,
                     const Expr *ld2) {
    Shape r1, r2, c;
    if (!linear_shape(lp->nests[r1i], &r1) || !linear_shape(lp->nests[r2i], &r2) || !shape_of(lp->nests[ci], &c) ||
        !at_own_point(&c, &r1, ld1) || !at_own_point(&c, &r2, ld2) || !expr_equal(r1.red->extent, r2.red->extent))
        return false;
    Buffer *out = c.store->buf;
    /* R1 runs at R2's place: what it reads must not change in between */
    if (touches(lp->nests[r1i], out) || touches(lp->nests[r2i], out) ||
        !quiet_between(lp, dead, r1i, r2i, lp->nests[r1i], NULL, NULL, r1.store->buf) ||
        !quiet_between(lp, dead, r2i, ci, lp->nests[ci], r1.store->buf, r2.store->buf, out))
        return false;
    Var *kv = r1.red->v;
    Axis ax[MAX_AXES];
    for (int d = 0; d < r1.npar; d++) ax[d] = (Axis){r1.par[d]->v, r1.par[d]->extent};
    /* C's value with both loads replaced, at R1's variables */
    Expr *rv[MAX_AXES], *val = replace_load(A, c.store->value, ld1, linear_at(A, &r1, ld1, 0));
    val = replace_load(A, val, ld2, linear_at(A, &r2, ld2, 1));
    LStmt *st = store_in(A, &c, &r1, c.npar, val, rv);
    Expr *p1 = e_load(A, r1.store->buf, r1.npar, rv), *p2 = e_load(A, r2.store->buf, r2.npar, rv);
    LoopNest *n = ARENA_NEW(A, LoopNest);
    *n = *lp->nests[r1i];
    n->kname = joined_name(A, lp->nests[r1i]->kname, lp->nests[r2i]->kname);
    n->root = pair_root(A, ax, r1.npar, kv, r1.red->extent, acc_term_at(A, &r1, p1, kv),
                        acc_term_at(A, &r2, p2, kv), &st, 1);
    lp->nests[r2i] = n;
    return true;
}

/* C reads linear R at two points: its last loop (extent E, even) in halves e = e' and e = e' + E/2, each half
 * simplified over e' < E/2; when both read R at the same two points P0, P1, one iteration computes R at both
 * (two accumulators) and stores both halves. C's loops after the first are flattened into one (the
 * schedules see [t, p] like a linear's [t, o]). R computes every element once: 2 * |C| / 2 = |C| = |R|. */
static bool try_halves(Arena *A, LProgram *lp, const bool *dead, int ri, int ci) {
    Shape r, c;
    int64_t E;
    if (!linear_shape(lp->nests[ri], &r) || !shape_of(lp->nests[ci], &c) || c.npar < 2 || c.npar + 1 > MAX_AXES)
        return false;
    if (!expr_is_const(c.par[c.npar - 1]->extent, &E) || E < 2 || E % 2) return false;
    for (int d = 1; d < c.npar; d++) if (!expr_is_const(c.par[d]->extent, NULL)) return false;
    if (!same_count(&c, &r)) return false;
    int64_t x;
    Buffer *b = r.store->buf, *out = c.store->buf;
    if (touches(lp->nests[ri], out) || !quiet_between(lp, dead, ri, ci, lp->nests[ci], b, NULL, out))
        return false;
    /* the halves, over ranges: C's constant loops and e' < E/2 */
    Var *eh = new_var(A, &lp->tp->nvars, c.par[c.npar - 1]->v->name);
    VarRange rg[MAX_AXES];
    int nr = 0;
    for (int d = 1; d + 1 < c.npar; d++)
        if (expr_is_const(c.par[d]->extent, &x)) rg[nr++] = (VarRange){c.par[d]->v, 0, x};
    rg[nr++] = (VarRange){eh, 0, E / 2};
    Expr *hval[2], **hidx[2];
    const Expr *pt[2][4];
    int np[2];
    for (int h = 0; h < 2; h++) {
        Expr *e = E_ADD(A, e_var(A, eh), e_i(A, h * E / 2));
        Var *last = c.par[c.npar - 1]->v;
        hval[h] = expr_simplify(A, expr_subst(A, c.store->value, last, e), rg, nr);
        hidx[h] = ARENA_ARRAY(A, Expr *, out->ndim);
        for (int d = 0; d < out->ndim; d++) {
            hidx[h][d] = expr_simplify(A, expr_subst(A, c.store->idx[d], last, e), rg, nr);
            if (expr_uses_buf(hidx[h][d], b)) return false;
        }
        np[h] = 0;
        points_of(hval[h], b, pt[h], &np[h]);
        if (np[h] != 2) return false;
    }
    bool same = (expr_equal(pt[0][0], pt[1][0]) && expr_equal(pt[0][1], pt[1][1])) ||
                (expr_equal(pt[0][0], pt[1][1]) && expr_equal(pt[0][1], pt[1][0]));
    if (!same) return false;
    /* flatten C's loops after the first into p: e' = p % (E/2), then the others outward */
    Var *pv = new_var(A, &lp->tp->nvars, "p");
    Var *from[MAX_AXES];
    Expr *to[MAX_AXES];
    int nf = 0;
    int64_t stride = E / 2, total = E / 2;
    from[nf] = eh; to[nf++] = e_bin(A, EX_MOD, e_var(A, pv), e_i(A, E / 2));
    for (int d = c.npar - 2; d >= 1; d--) {
        expr_is_const(c.par[d]->extent, &x);
        Expr *q = E_DIV(A, e_var(A, pv), e_i(A, stride));
        from[nf] = c.par[d]->v; to[nf++] = d == 1 ? q : e_bin(A, EX_MOD, q, e_i(A, x));
        stride *= x; total *= x;
    }
    LStmt *st[2];
    const Expr *P[2] = {pt[0][0], pt[0][1]};
    Expr *P2[2];
    for (int j = 0; j < 2; j++) P2[j] = expr_subst_vars(A, (Expr *)P[j], from, to, nf);
    for (int h = 0; h < 2; h++) {
        Expr *v = hval[h];
        for (int j = 0; j < 2; j++) v = replace_load(A, v, P[j], linear_at(A, &r, P[j], j));
        st[h] = store_subst(A, out, hidx[h], v, from, to, nf);
    }
    Axis ax[2] = {{c.par[0]->v, c.par[0]->extent}, {pv, e_i(A, total)}};
    Var *kv = r.red->v;
    LoopNest *n = ARENA_NEW(A, LoopNest);
    *n = *lp->nests[ri];
    n->kname = joined_name(A, lp->nests[ri]->kname, lp->nests[ci]->kname);
    n->root = pair_root(A, ax, 2, kv, r.red->extent, acc_term_at(A, &r, P2[0], kv), acc_term_at(A, &r, P2[1], kv),
                        st, 2);
    lp->nests[ri] = n;
    return true;
}

void loop_fuse_epilogues(Arena *A, LProgram *lp, bool enable) {
    if (!enable) return;
    bool *dead = ARENA_ARRAY(A, bool, lp->n);
    for (int ci = 0; ci < lp->n; ci++) {
        Shape c, r;
        if (!shape_of(lp->nests[ci], &c) || c.red) continue;
        /* the linears C reads (each written by one earlier nest and read by C alone) and their points */
        Inputs in = {0};
        collect_inputs(&in, c.store->value);
        if (in.n < 0) continue;
        int ri[2], nl = 0, np[2] = {0, 0};
        const Expr *pt[2][4];
        bool ok = true;
        for (int i = 0; i < in.n && ok; i++) {
            if (in.b[i]->kind != BUF_ACT) continue;
            int w = sole_writer(lp, dead, in.b[i], ci);
            if (w < 0 || w > ci || w == ci || !linear_shape(lp->nests[w], &r) || r.store->buf != in.b[i]) continue;
            for (int d = 0; d < c.store->buf->ndim; d++) if (expr_uses_buf(c.store->idx[d], in.b[i])) ok = false;
            if (nl == 2) { ok = false; break; }
            ri[nl] = w;
            points_of(c.store->value, in.b[i], pt[nl], &np[nl]);
            nl++;
        }
        if (!ok || !nl) continue;
        if (nl == 1 && np[0] == 1 && try_epilogue(A, lp, dead, ri[0], ci, pt[0][0])) {
            dead[ci] = true; lp->n_epilogues++; continue;
        }
        if (nl == 2 && np[0] == 1 && np[1] == 1) {
            int a = ri[0] < ri[1] ? 0 : 1;
            if (try_pair(A, lp, dead, ri[a], ri[1 - a], ci, pt[a][0], pt[1 - a][0])) {
                dead[ri[a]] = dead[ci] = true;
                lp->n_pairs++;
                continue;
            }
        }
        if (nl == 1 && np[0] == 2 && try_halves(A, lp, dead, ri[0], ci)) { dead[ci] = true; lp->n_halves++; }
    }
    replan(A, lp, dead);
}

/* ---- online softmax (flash attention) ---- */

/* for t, h: the attention's row */
static LoopNest *attn_nest(Arena *A, const LoopNest *pv, const AttnDesc *d) {
    LoopNest *n = ARENA_NEW(A, LoopNest);
    *n = *pv;
    n->kname = d->kname;
    Axis ax[2] = {{d->t, d->rows}, {d->h, e_i(A, d->heads)}};
    LStmt **body = ARENA_ARRAY(A, LStmt *, 1);
    body[0] = stmt(A, LS_ATTN);
    body[0]->attn = d;
    n->root = par_loops(A, ax, 2, body, 1);
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
        Inputs in = {0};
        collect_inputs(&in, d->q);
        collect_inputs(&in, d->k);
        collect_inputs(&in, d->v);
        if (in.n < 0) ok = false;
        for (int i = 0; i < lp->n && ok; i++) {
            bool part = false;
            for (int p = 0; p < 5; p++) part |= i == at[p];
            if (dead[i] || part) continue;
            for (int p = 0; p < 3 && ok; p++) ok = !touches(lp->nests[i], d->parts[p]->out);
            for (int b = 0; b < in.n && ok && i > at[0] && i < pv; b++) ok = !writes(lp->nests[i]->root, in.b[b]);
        }
        if (!ok) continue;
        for (int p = 0; p < 4; p++) dead[at[p]] = true;
        lp->nests[pv] = attn_nest(A, lp->nests[pv], d);
        lp->n_flash++;
    }
    if (lp->n_flash) replan(A, lp, dead);   /* (nothing is dead otherwise) */
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
    case LS_ACC_INIT:
        str_printf(o, "%s = %s\n", s->slot ? "acc1" : "acc",
                   s->red == RED_SUM ? "0" : s->red == RED_MAX ? "-inf" : "index 0 of -inf");
        return;
    case LS_ACC: {
        const char *a = s->slot ? "acc1" : "acc";
        if (s->red == RED_SUM) str_printf(o, "%s += ", a);
        else str_printf(o, s->red == RED_MAX ? "%s = max(%s, " : "%s = index of the first max(%s, ", a, a);
        expr_print(o, s->value);
        str_printf(o, s->red == RED_SUM ? "\n" : ")\n");
        return;
    }
    case LS_STORE:
        expr_print_ref(o, s->buf->name, s->buf->ndim, s->idx);
        str_printf(o, " = ");
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
        expr_print_ref(o, a->out->name, a->out->ndim, a->out_idx);
        str_printf(o, " = o[d] / l for d in 0..%lld\n", (long long)a->hv);
        return;
    }
    case LS_TOPK: {
        const TOp *t = s->topk;
        const char *j = t->raxes[0].v->name;
        str_printf(o, "top_k over %s in 0..", j);
        expr_print(o, t->raxes[0].extent);
        str_printf(o, " of ");
        expr_print(o, t->body);
        str_printf(o, ", k = ");
        expr_print(o, t->topk_count);
        str_printf(o, " (at most %lld; value descending, then %s ascending, NaN as -inf):\n", (long long)t->topk_max,
                   j);
        indent(o, d + 1);
        expr_print_ref(o, t->out->name, t->out->ndim, t->out_idx);
        str_printf(o, " = (%s == 0 ? value : %s) of rank %s, for %s < k\n", t->topk_sel->name, j, t->topk_rank->name,
                   t->topk_rank->name);
        return;
    }
    case LS_COUNT: break;
    }
}
void loop_print(Str *o, const LProgram *lp) {
    str_printf(o, "# loop IR: %d loop nests (one per kernel); fused: %d inlined, %d side stores, %d tails, "
                  "%d copies retargeted, %d online softmax, %d epilogues, %d pairs, %d halves\n", lp->n,
               lp->n_inlined, lp->n_side_stores, lp->n_tails, lp->n_retargeted, lp->n_flash, lp->n_epilogues,
               lp->n_pairs, lp->n_halves);
    for (int i = 0; i < lp->n; i++) {
        str_printf(o, "nest %s  # %s (%s)\n", lp->nests[i]->kname, lp->nests[i]->module,
                   top_kind_names[lp->nests[i]->origin]);
        print_stmt(o, lp->nests[i]->root, 1);
    }
}

/* Scoping: every variable used is bound by an enclosing loop; acc is used
 * only after acc_init in the same body. */
static const char *verify_expr_scope(Arena *A, const Expr *e, Var **bound, int nb, unsigned acc_ok) {
    if (e->k == EX_VAR) {
        for (int i = 0; i < nb; i++) if (bound[i] == e->var) return NULL;
        return arena_printf(A, "variable %s used outside its loop", e->var->name);
    }
    if (e->k == EX_ACC && (e->i < 0 || e->i > 1 || !(acc_ok >> e->i & 1))) return "acc used before acc_init";
    const char *m = NULL;
    for (int i = 0; !m && i < e->nargs; i++) m = verify_expr_scope(A, e->a[i], bound, nb, acc_ok);
    return m;
}
static const char *verify_stmt(Arena *A, const LStmt *s, Var **bound, int nb, unsigned *acc) {
    switch (s->k) {
    case LS_FOR: {
        if (nb >= 16) return "loop nest too deep";
        const char *m = verify_expr_scope(A, s->extent, bound, nb, false);
        if (m) return m;
        bound[nb] = s->v;
        for (int i = 0; i < s->nbody; i++) { m = verify_stmt(A, s->body[i], bound, nb + 1, acc); if (m) return m; }
        return NULL;
    }
    case LS_ACC_INIT:
        if (s->slot < 0 || s->slot > 1) return "accumulator slot outside 0..1";
        *acc |= 1u << s->slot;
        return NULL;
    case LS_ACC:
        if (s->slot < 0 || s->slot > 1 || !(*acc >> s->slot & 1)) return "acc_update before acc_init";
        { const char *m = verify_expr_scope(A, s->value, bound, nb, 0); return m ? m : expr_verify(A, s->value); }
    case LS_STORE: {
        const char *m = NULL;
        for (int i = 0; !m && i < s->buf->ndim; i++) m = verify_expr_scope(A, s->idx[i], bound, nb, false);
        if (!m) m = verify_expr_scope(A, s->value, bound, nb, *acc);
        return m ? m : expr_verify(A, s->value);
    }
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
        for (int i = 0; i < a->out->ndim; i++) {
            const char *m = verify_expr_scope(A, a->out_idx[i], bound, nb + 1, false);
            if (m) return m;
        }
        if (a->heads % a->group || a->hd < 1 || a->hv < 1) return "attention shape";
        return NULL;
    }
    case LS_TOPK: {
        /* the value sees j besides the loops; the store sees the rank and the selector */
        const TOp *t = s->topk;
        if (nb > 13) return "loop nest too deep";
        bound[nb] = t->raxes[0].v;
        const char *m = verify_expr_scope(A, t->body, bound, nb + 1, false);
        if (!m) m = expr_verify(A, t->body);
        if (!m) m = verify_expr_scope(A, t->topk_count, bound, nb, false);
        bound[nb] = t->topk_sel; bound[nb + 1] = t->topk_rank;
        for (int i = 0; !m && i < t->out->ndim; i++) m = verify_expr_scope(A, t->out_idx[i], bound, nb + 2, false);
        return m;
    }
    case LS_COUNT: break;
    }
    return "bad statement";
}
const char *loop_verify(Arena *A, const LProgram *lp) {
    for (int i = 0; i < lp->n; i++) {
        Var *bound[16];
        unsigned acc = 0;
        const char *m = verify_stmt(A, lp->nests[i]->root, bound, 0, &acc);
        if (m) return arena_printf(A, "nest %d (%s): %s", i, lp->nests[i]->module, m);
    }
    return NULL;
}
