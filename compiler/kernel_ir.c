/* kernel_ir.c: tile IR -> kernel IR (materialising the schedules into
 * phases, warp shuffles, registers and shared memory), deduplication of
 * identical kernels, printer and verifier. */
#include "kernel_ir.h"
#include <string.h>

const char *const shfl_names[] = {
#define X(e, s) s,
    SHFL_KINDS(X)
#undef X
};

typedef struct { Arena *A; int *nvars; const Knobs *kn; bool mma_f16; } KL;

static TStmt *ts(Arena *A, TStmtKind k) { TStmt *s = ARENA_NEW(A, TStmt); s->k = k; return s; }
static TStmt *ts_let(Arena *A, Var *v, Expr *e) { TStmt *s = ts(A, TS_LET); s->v = v; s->e = e; return s; }
static TStmt **tlist(Arena *A, int n) { return ARENA_ARRAY(A, TStmt *, n); }
static KStmt *phase(Arena *A, TStmt **body, int n, bool barrier) {
    KStmt *k = ARENA_NEW(A, KStmt); k->k = KS_PHASE; k->body = body; k->nbody = n; k->barrier = barrier; return k;
}
static TStmt *ts_assign(Arena *A, int r, Expr *e) { TStmt *s = ts(A, TS_ASSIGN); s->reg = r; s->e = e; return s; }
static TStmt *ts_if(Arena *A, Expr *c, int cap) { TStmt *s = ts(A, TS_IF); s->e = c; s->body = tlist(A, cap); return s; }

/* lets that decompose a flat index g into the axes (row-major, last fastest) */
static int decompose(Arena *A, TStmt **out, const Axis *ax, int n, Expr *g) {
    Expr *rest = g;
    for (int i = n - 1; i >= 0; i--) {
        Expr *v = i == 0 ? rest : e_bin(A, EX_MOD, rest, ax[i].extent);
        out[n - 1 - i] = ts_let(A, ax[i].v, v);
        if (i) rest = E_DIV(A, rest, ax[i].extent);
    }
    return n;
}
static Expr *combine(Arena *A, RedOp r, Expr *a, Expr *b) { return e_bin(A, r == RED_SUM ? EX_ADD : EX_MAX, a, b); }
static Expr *red_init(Arena *A, RedOp r) { return e_f(A, r == RED_SUM ? 0.0 : -1.0 / 0.0); }
static Expr *reg(Arena *A, int r) { return e_leaf(A, EX_REG, T_F32, r); }
static Expr *sload(Arena *A, int s, Expr *i) { Expr *e = e_un(A, EX_SLOAD, i); e->i = s; e->t = T_F32; return e; }
static TStmt *store(Arena *A, const TileKernel *t, Expr *value) {
    TStmt *s = ts(A, TS_STORE); s->buf = t->out; s->idx = t->idx; s->e = value; return s;
}
/* the nest's stores (two for a halves pair) with the accumulators' values a0 and, for a pair, a1 */
static int epi_stores(Arena *A, const TileKernel *t, Expr *a0, Expr *a1, TStmt **out) {
    Expr *acc[2] = {a0, a1};
    out[0] = store(A, t, expr_subst_accs(A, t->store_value, acc, t->nacc));
    if (t->nstore == 1) return 1;
    TStmt *s = ts(A, TS_STORE); s->buf = t->out1; s->idx = t->idx1; s->e = expr_subst_accs(A, t->store_value1, acc, t->nacc);
    out[1] = s;
    return 2;
}
static Expr *tid(Arena *A) { return e_leaf(A, EX_TID, T_I64, 0); }
static Expr *bid(Arena *A) { return e_leaf(A, EX_BID, T_I64, 0); }
static Expr *lt(Arena *A, Expr *a, Expr *b) { return e_bin(A, EX_LT, a, b); }

static void add_param(KKernel *k, Buffer *b, bool written) {
    for (int i = 0; i < k->nparams; i++) if (k->params[i] == b) { k->param_written[i] |= written; return; }
    CHECK(k->nparams < MAX_PARAMS, "kernel %s: too many buffers", k->name);
    k->param_written[k->nparams] = written;
    k->params[k->nparams++] = b;
}
static void param_cb(void *ctx, Buffer *b) { add_param(ctx, b, false); }
static void collect_params(KKernel *k, TStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        TStmt *s = b[i];
        if (s->e) expr_visit_loads(s->e, param_cb, k);
        if (s->lo) expr_visit_loads(s->lo, param_cb, k);
        if (s->k == TS_STORE || s->k == TS_VLOAD || s->k == TS_CP_ASYNC) {
            for (int d = 0; d < s->buf->ndim; d++) expr_visit_loads(s->idx[d], param_cb, k);
            add_param(k, s->buf, s->k == TS_STORE);
        }
        collect_params(k, s->body, s->nbody);
    }
}
static void collect_kparams(KKernel *k, KStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        if (b[i]->k == KS_PHASE) collect_params(k, b[i]->body, b[i]->nbody);
        else if (b[i]->k == KS_LDMATRIX) expr_visit_loads(b[i]->laddr, param_cb, k);
        else if (b[i]->k == KS_UFOR) collect_kparams(k, b[i]->kbody, b[i]->nk);
    }
}

/* ---- kernel bodies as a growable list of kernel statements ---- */
typedef struct { KStmt **s; int n, cap; } KList;
static void kl_add(Arena *A, KList *l, KStmt *s) { arena_grow(A, (void **)&l->s, l->n, &l->cap, sizeof(KStmt *)); l->s[l->n++] = s; }
static void kl_phase1(Arena *A, KList *l, TStmt *s, bool barrier) { TStmt **b = tlist(A, 1); b[0] = s; kl_add(A, l, phase(A, b, 1, barrier)); }
static KStmt *shfl(KL *L, ShflKind kind, int dst, int src, int64_t arg) {
    KStmt *s = ARENA_NEW(L->A, KStmt);
    s->k = KS_SHFL; s->shfl = kind; s->dst = dst; s->src = src;
    s->arg = e_i(L->A, arg + L->kn->debug_shfl_offset);
    return s;
}
/* r0 = r0 op (r0 of lane + d), d = width/2 .. 1: lane 0 ends with the whole warp's value; with two
 * accumulators r2 likewise (through r3), both in each step's phase */
static void warp_trees(KL *L, KList *l, RedOp op, int width, int nacc) {
    Arena *A = L->A;
    for (int d = width / 2; d >= 1; d /= 2) {
        TStmt **p = tlist(A, 2);
        for (int j = 0; j < nacc; j++) {
            kl_add(A, l, shfl(L, SHFL_DOWN, 2 * j + 1, 2 * j, d));
            p[j] = ts_assign(A, 2 * j, combine(A, op, reg(A, 2 * j), reg(A, 2 * j + 1)));
        }
        kl_add(A, l, phase(A, p, nacc, false));
    }
}
static void warp_tree(KL *L, KList *l, RedOp op, int width) { warp_trees(L, l, op, width, 1); }

static Expr *replace_expr(Arena *A, Expr *e, const Expr *what, Expr *with) {
    if (expr_equal(e, what)) return with;
    if (!e->nargs) return e;
    Expr *n = ARENA_NEW(A, Expr);
    *n = *e;
    n->a = ARENA_ARRAY(A, Expr *, e->nargs);
    for (int i = 0; i < e->nargs; i++) n->a[i] = replace_expr(A, e->a[i], what, with);
    return n;
}

static KKernel *new_kernel(KL *L, const TileKernel *t) {
    KKernel *k = ARENA_NEW(L->A, KKernel);
    k->name = k->base = arena_printf(L->A, "k_%s", t->name);
    k->module = t->nest->module;
    k->sched = t->kind;
    k->block = t->block;
    k->grid = t->grid;
    return k;
}

static void mat_flat(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    /* g = bid * B + tid; if (g < total) { decompose; [sum the split-K partials;] store } */
    Var *g = new_var(A, L->nvars, "g");
    TStmt **pb = tlist(A, 2);
    pb[0] = ts_let(A, g, E_ADD(A, E_MUL(A, bid(A), e_i(A, t->block)), tid(A)));
    Expr *total = e_i(A, 1);
    for (int i = 0; i < t->npar; i++) total = E_MUL(A, total, t->par[i].extent);
    TStmt *iff = ts_if(A, lt(A, e_var(A, g), total), t->npar + 6);
    iff->nbody = decompose(A, iff->body, t->par, t->npar, e_var(A, g));
    if (t->kind == SCHED_SPLITK_SUM) {
        /* accumulator j's partials are columns j*split_k .. of the workspace */
        k->nregs = t->nacc; k->regs[0].t = k->regs[1].t = T_F32;
        Var *s = new_var(A, L->nvars, "s");
        TStmt *f = ts(A, TS_FOR);
        f->v = s; f->lo = e_i(A, 0); f->e = e_i(A, t->split_k); f->step = e_i(A, 1);
        f->body = tlist(A, 2);
        for (int j = 0; j < t->nacc; j++) {
            iff->body[iff->nbody++] = ts_assign(A, j, e_f(A, 0.0));
            f->body[f->nbody++] = ts_assign(A, j, E_ADD(A, reg(A, j), e_load2(A, t->work, e_var(A, g), E_ADD(A, e_var(A, s), e_i(A, j * t->split_k)))));
        }
        iff->body[iff->nbody++] = f;
        iff->nbody += epi_stores(A, t, reg(A, 0), reg(A, 1), iff->body + iff->nbody);
    } else {
        iff->body[iff->nbody++] = store(A, t, t->store_value);
    }
    pb[1] = iff;
    kl_add(A, body, phase(A, pb, 2, false));
}

static void mat_block_reduce(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    int nw = t->block / 32;
    k->nregs = 2; k->regs[0].t = k->regs[1].t = T_F32;
    if (nw > 1) { k->nsmem = 1; k->smem[0].size = t->smem_floats; }
    /* every thread reduces a strided slice into r0 */
    Var *r = new_var(A, L->nvars, "r");
    Expr *rtotal = e_i(A, 1);
    for (int i = 0; i < t->nred; i++) rtotal = E_MUL(A, rtotal, t->red[i].extent);
    TStmt **p0 = tlist(A, t->npar + 2);
    int n0 = decompose(A, p0, t->par, t->npar, bid(A));
    p0[n0++] = ts_assign(A, 0, red_init(A, t->redop));
    TStmt *f = ts(A, TS_FOR);
    f->v = r; f->lo = tid(A); f->e = rtotal; f->step = e_i(A, t->block);
    f->body = tlist(A, t->nred + 3);
    f->nbody = decompose(A, f->body, t->red, t->nred, e_var(A, r));
    Expr *term = t->acc_value;
    if (t->side) {
        /* the fused producer's value: computed once into r1, stored, and read by the update */
        f->body[f->nbody++] = ts_assign(A, 1, t->side_value);
        TStmt *ss = ts(A, TS_STORE); ss->buf = t->side; ss->idx = t->side_idx; ss->e = reg(A, 1);
        f->body[f->nbody++] = ss;
        term = replace_expr(A, term, t->side_value, reg(A, 1));
    }
    f->body[f->nbody++] = ts_assign(A, 0, combine(A, t->redop, reg(A, 0), term));
    p0[n0++] = f;
    kl_add(A, body, phase(A, p0, n0, false));
    /* each warp's lane 0 ends with the warp's value */
    warp_tree(L, body, t->redop, 32);
    if (nw > 1) {
        /* lane 0 of warp w: smem0[w]; then warp 0 reduces the nw values (the others do the same work on init) */
        TStmt *w0 = ts_if(A, e_bin(A, EX_EQ, e_bin(A, EX_MOD, tid(A), e_i(A, 32)), e_i(A, 0)), 1);
        TStmt *ss = ts(A, TS_SSTORE); ss->smem = 0; ss->sidx = E_DIV(A, tid(A), e_i(A, 32)); ss->e = reg(A, 0);
        w0->body[w0->nbody++] = ss;
        kl_phase1(A, body, w0, true);
        TStmt **p1 = tlist(A, 2);
        p1[0] = ts_assign(A, 0, red_init(A, t->redop));
        p1[1] = ts_if(A, lt(A, tid(A), e_i(A, nw)), 1);
        p1[1]->body[p1[1]->nbody++] = ts_assign(A, 0, sload(A, 0, tid(A)));
        kl_add(A, body, phase(A, p1, 2, false));
        warp_tree(L, body, t->redop, nw);
    }
    /* thread 0 applies the epilogue and stores (and, for a tail, leaves the result in shared memory) */
    TStmt *last = ts_if(A, e_bin(A, EX_EQ, tid(A), e_i(A, 0)), t->npar + 3);
    last->nbody = decompose(A, last->body, t->par, t->npar, bid(A));
    Expr *res = expr_subst_acc(A, t->store_value, reg(A, 0));
    int ts_ = -1;
    if (t->tail_out) {
        ts_ = k->nsmem++;
        k->smem[ts_].size = 1;
        last->body[last->nbody++] = ts_assign(A, 1, res);
        res = reg(A, 1);
        TStmt *ss = ts(A, TS_SSTORE); ss->smem = ts_; ss->sidx = e_i(A, 0); ss->e = reg(A, 1);
        last->body[last->nbody++] = ss;
    }
    last->body[last->nbody++] = store(A, t, res);
    kl_phase1(A, body, last, t->tail_out != NULL);
    if (t->tail_out) {
        /* the row op over its last axis, every thread a strided part, the row's result read from shared memory */
        TStmt **pt = tlist(A, t->npar + 1);
        int nt = decompose(A, pt, t->par, t->npar, bid(A));
        Var *cv = new_var(A, L->nvars, "c");
        TStmt *f2 = ts(A, TS_FOR);
        f2->v = cv; f2->lo = tid(A); f2->e = t->tail.extent; f2->step = e_i(A, t->block);
        f2->body = tlist(A, 2);
        f2->body[f2->nbody++] = ts_let(A, t->tail.v, e_var(A, cv));
        TStmt *st = ts(A, TS_STORE);
        st->buf = t->tail_out; st->idx = t->tail_idx;
        st->e = replace_expr(A, t->tail_value, e_load(A, t->out, t->out->ndim, t->idx), sload(A, ts_, e_i(A, 0)));
        f2->body[f2->nbody++] = st;
        pt[nt++] = f2;
        kl_add(A, body, phase(A, pt, nt, false));
    }
}

/* block_reduce for argmax: (value, index) pairs, r0/r2 the thread's, r1/r3 the partner's. A pair wins
 * with a larger value, or an equal one and a smaller index; each thread scans its indices in
 * increasing order and keeps the first strictly larger value, so the block finds the first maximum;
 * NaN never compares larger, and (-inf, 0) starts every thread (a row of NaN / -inf gives 0). */
static void argmax_step_tie(KL *L, KList *l, int64_t d, ExprKind tie) {
    Arena *A = L->A;
    kl_add(A, l, shfl(L, SHFL_DOWN, 1, 0, d));
    kl_add(A, l, shfl(L, SHFL_DOWN, 3, 2, d));
    TStmt **b = tlist(A, 2);
    b[0] = ts_assign(A, 2, e_select(A, lt(A, reg(A, 0), reg(A, 1)), reg(A, 3),
                                    e_select(A, e_bin(A, EX_EQ, reg(A, 0), reg(A, 1)), e_bin(A, tie, reg(A, 2), reg(A, 3)), reg(A, 2))));
    b[1] = ts_assign(A, 0, e_bin(A, EX_MAX, reg(A, 0), reg(A, 1)));
    kl_add(A, l, phase(A, b, 2, false));
}
static void argmax_step(KL *L, KList *l, int64_t d) { argmax_step_tie(L, l, d, EX_MIN); }
static void mat_block_argmax(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    int nw = t->block / 32;
    CHECK(t->nred == 1 && !t->side, "argmax over %d axes or with a side store", t->nred);
    k->nregs = 4;
    for (int i = 0; i < 4; i++) k->regs[i].t = T_F32;
    if (nw > 1) { k->nsmem = 1; k->smem[0].size = t->smem_floats; }
    Var *r = new_var(A, L->nvars, "r");
    TStmt **p0 = tlist(A, t->npar + 3);
    int n0 = decompose(A, p0, t->par, t->npar, bid(A));
    p0[n0++] = ts_assign(A, 0, e_f(A, -1.0 / 0.0));
    p0[n0++] = ts_assign(A, 2, e_f(A, 0.0));
    TStmt *f = ts(A, TS_FOR);
    f->v = r; f->lo = tid(A); f->e = t->red[0].extent; f->step = e_i(A, t->block);
    f->body = tlist(A, 3);
    f->body[f->nbody++] = ts_let(A, t->red[0].v, e_var(A, r));
    f->body[f->nbody++] = ts_assign(A, 1, t->acc_value);
    TStmt *better = ts_if(A, lt(A, reg(A, 0), reg(A, 1)), 2);
    better->body[better->nbody++] = ts_assign(A, 0, reg(A, 1));
    better->body[better->nbody++] = ts_assign(A, 2, e_un(A, EX_TOF, e_var(A, r)));
    f->body[f->nbody++] = better;
    p0[n0++] = f;
    kl_add(A, body, phase(A, p0, n0, false));
    for (int d = 16; d >= 1; d /= 2) argmax_step(L, body, d);
    if (nw > 1) {
        /* lane 0 of warp w: smem0[w] = value, smem0[nw + w] = index; warp 0 reduces them */
        TStmt *w0 = ts_if(A, e_bin(A, EX_EQ, e_bin(A, EX_MOD, tid(A), e_i(A, 32)), e_i(A, 0)), 2);
        for (int q = 0; q < 2; q++) {
            TStmt *ss = ts(A, TS_SSTORE); ss->smem = 0; ss->sidx = E_ADD(A, E_DIV(A, tid(A), e_i(A, 32)), e_i(A, q * nw)); ss->e = reg(A, 2 * q);
            w0->body[w0->nbody++] = ss;
        }
        kl_phase1(A, body, w0, true);
        TStmt **p1 = tlist(A, 3);
        p1[0] = ts_assign(A, 0, e_f(A, -1.0 / 0.0));
        p1[1] = ts_assign(A, 2, e_f(A, 0.0));
        p1[2] = ts_if(A, lt(A, tid(A), e_i(A, nw)), 2);
        p1[2]->body[p1[2]->nbody++] = ts_assign(A, 0, sload(A, 0, tid(A)));
        p1[2]->body[p1[2]->nbody++] = ts_assign(A, 2, sload(A, 0, E_ADD(A, tid(A), e_i(A, nw))));
        kl_add(A, body, phase(A, p1, 3, false));
        for (int d = nw / 2; d >= 1; d /= 2) argmax_step(L, body, d);
    }
    TStmt *last = ts_if(A, e_bin(A, EX_EQ, tid(A), e_i(A, 0)), t->npar + 1);
    last->nbody = decompose(A, last->body, t->par, t->npar, bid(A));
    last->body[last->nbody++] = store(A, t, expr_subst_acc(A, t->store_value, reg(A, 2)));
    kl_phase1(A, body, last, false);
}

/* The reduced term for elements c .. c+vec-1 of the K axis: every load whose
 * last index is the K variable reads element j of a vector loaded once. */
typedef struct { Arena *A; Var *kv; int vec; TStmt **vl; int nvl; Expr **src; int *nvars; Expr *c; } Vec;
static Expr *vec_rewrite(Vec *V, Expr *e, int j) {
    if (e->k == EX_LOAD && expr_uses_var(e, V->kv)) {
        int w = -1;
        for (int i = 0; i < V->nvl; i++) if (expr_equal(V->src[i], e)) w = i;
        if (w < 0) {
            CHECK(V->nvl < 8, "too many vector loads");
            TStmt *s = ts(V->A, TS_VLOAD);
            s->v = new_var(V->A, V->nvars, arena_printf(V->A, "v%d", V->nvl));
            s->buf = e->buf; s->vec = V->vec;
            s->idx = ARENA_ARRAY(V->A, Expr *, e->nargs);
            for (int d = 0; d < e->nargs; d++) s->idx[d] = expr_subst(V->A, e->a[d], V->kv, V->c);
            w = V->nvl++;
            V->vl[w] = s; V->src[w] = e;
        }
        return e_velem(V->A, V->vl[w]->v, j);
    }
    if (!e->nargs) return e;
    Expr *n = ARENA_NEW(V->A, Expr);
    *n = *e;
    n->a = ARENA_ARRAY(V->A, Expr *, e->nargs);
    for (int i = 0; i < e->nargs; i++) n->a[i] = vec_rewrite(V, e->a[i], j);
    return n;
}

/* the lets every gemv phase starts with: warp, lane, [K slice ks,] output element g */
static int gemv_head(Arena *A, const TileKernel *t, TStmt **list, Var *const *v) {
    int n = 0;
    list[n++] = ts_let(A, v[0], E_DIV(A, tid(A), e_i(A, 32)));
    list[n++] = ts_let(A, v[1], e_bin(A, EX_MOD, tid(A), e_i(A, 32)));
    if (t->split_k > 1) list[n++] = ts_let(A, v[2], e_bin(A, EX_MOD, bid(A), e_i(A, t->split_k)));
    list[n++] = ts_let(A, v[3], E_ADD(A, E_MUL(A, E_DIV(A, bid(A), e_i(A, t->split_k)), e_i(A, t->rows)), e_var(A, v[0])));
    return n;
}

/* Pairs: a second accumulator in r2 (shuffled through r3) sums the second term over the same c; the
 * vector loads of an operand both terms read (the activation) are shared. */
static void mat_gemv(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    k->nregs = 2 * t->nacc;
    for (int i = 0; i < k->nregs; i++) k->regs[i].t = T_F32;
    Expr *total = e_i(A, 1);
    for (int i = 0; i < t->npar; i++) total = E_MUL(A, total, t->par[i].extent);
    int64_t K;
    CHECK(expr_is_const(t->red[0].extent, &K), "gemv over a runtime extent");
    Var *wv = new_var(A, L->nvars, "warp"), *lv = new_var(A, L->nvars, "lane"), *gv = new_var(A, L->nvars, "g");
    Var *kv = new_var(A, L->nvars, "ks");
    Var *hv[4] = {wv, lv, kv, gv};
    TStmt **p0 = tlist(A, 7);
    int n0 = gemv_head(A, t, p0, hv);
    for (int j = 0; j < t->nacc; j++) p0[n0++] = ts_assign(A, 2 * j, e_f(A, 0.0));
    TStmt *in = ts_if(A, lt(A, e_var(A, gv), total), t->npar + 2);
    in->nbody = decompose(A, in->body, t->par, t->npar, e_var(A, gv));
    /* for c = ks*chunk + lane*vec; c < min(ks*chunk + chunk, K); c += 32*vec, in two loops: while U
     * rounds remain, their loads all first, then their terms in order (the same sums as one round at a
     * time); then the rounds left one by one */
    const int64_t S = 32 * (int64_t)t->vec, U = t->unroll;
    Expr *k0 = t->split_k > 1 ? E_MUL(A, e_var(A, kv), e_i(A, t->k_chunk)) : e_i(A, 0);
    Expr *lo = E_ADD(A, k0, E_MUL(A, e_var(A, lv), e_i(A, t->vec)));
    Expr *hi = t->split_k == 1 ? e_i(A, K) : e_bin(A, EX_MIN, E_ADD(A, k0, e_i(A, t->k_chunk)), e_i(A, K));
    for (int pass = U > 1 ? 0 : 1; pass < 2; pass++) {
        int64_t rounds = pass ? 1 : U;
        Var *cv = new_var(A, L->nvars, pass ? "c" : "cu");
        TStmt *f = ts(A, TS_FOR);
        f->v = cv; f->step = e_i(A, S * rounds);
        if (!pass) {
            /* the unrolled loop runs while its last round starts inside the slice */
            f->lo = lo;
            f->e = E_SUB(A, hi, e_i(A, (U - 1) * S));
        } else if (U > 1) {
            /* where it stopped: lo + (lane's rounds / U) * U * S, the lane's rounds max(0, ceil((hi - lo) / S)) */
            Expr *lr = E_DIV(A, E_ADD(A, e_bin(A, EX_MAX, E_SUB(A, hi, lo), e_i(A, 0)), e_i(A, S - 1)), e_i(A, S));
            f->lo = E_ADD(A, lo, E_MUL(A, E_DIV(A, lr, e_i(A, U)), e_i(A, U * S)));
            f->e = hi;
        } else {
            f->lo = lo; f->e = hi;
        }
        Var *iv = t->red[0].v;
        Expr *terms[2] = {t->acc_value, t->acc_value1};
        Expr *sum[2] = {reg(A, 0), reg(A, 2)};
        TStmt *vl[64]; Expr *src[8];
        int nvl = 0;
        for (int64_t u = 0; u < rounds; u++) {
            Expr *c = E_ADD(A, e_var(A, cv), e_i(A, u * S));
            if (t->vec == 1) {
                for (int a = 0; a < t->nacc; a++) sum[a] = E_ADD(A, sum[a], expr_subst(A, terms[a], iv, c));
                continue;
            }
            Vec V = {A, iv, t->vec, vl + nvl, 0, src, L->nvars, c};
            for (int a = 0; a < t->nacc; a++)
                for (int j = 0; j < t->vec; j++) {
                    Expr *term = vec_rewrite(&V, terms[a], j);
                    /* the K variable outside the vectorised loads: element j is c + j */
                    term = expr_subst(A, term, iv, E_ADD(A, c, e_i(A, j)));
                    sum[a] = E_ADD(A, sum[a], term);
                }
            nvl += V.nvl;
        }
        f->body = tlist(A, nvl + 2);
        for (int i = 0; i < nvl; i++) f->body[f->nbody++] = vl[i];
        for (int a = 0; a < t->nacc; a++) f->body[f->nbody++] = ts_assign(A, 2 * a, sum[a]);
        in->body[in->nbody++] = f;
    }
    p0[n0++] = in;
    kl_add(A, body, phase(A, p0, n0, false));
    warp_trees(L, body, RED_SUM, 32, t->nacc);
    /* lane 0 stores the output (or its slice's partial) */
    TStmt **pl = tlist(A, 5);
    int nl = gemv_head(A, t, pl, hv);
    TStmt *l0 = ts_if(A, e_bin(A, EX_EQ, e_var(A, lv), e_i(A, 0)), 1);
    TStmt *g0 = ts_if(A, lt(A, e_var(A, gv), total), t->npar + 2);
    if (t->split_k > 1) {
        for (int a = 0; a < t->nacc; a++) {
            TStmt *s = ts(A, TS_STORE);
            s->buf = t->work; s->idx = ARENA_ARRAY(A, Expr *, 2);
            s->idx[0] = e_var(A, gv); s->idx[1] = E_ADD(A, e_var(A, kv), e_i(A, a * t->split_k)); s->e = reg(A, 2 * a);
            g0->body[g0->nbody++] = s;
        }
    } else {
        g0->nbody = decompose(A, g0->body, t->par, t->npar, e_var(A, gv));
        g0->nbody += epi_stores(A, t, reg(A, 0), reg(A, 2), g0->body + g0->nbody);
    }
    l0->body[l0->nbody++] = g0;
    pl[nl++] = l0;
    kl_add(A, body, phase(A, pl, nl, false));
}

/* ---- gemm_tc: tensor-core tiles ---- */
static KStmt *kmma(KL *L, const int *a, const int *b, const int *c) {
    KStmt *s = ARENA_NEW(L->A, KStmt);
    s->k = KS_MMA;
    memcpy(s->ma, a, sizeof s->ma); memcpy(s->mb, b, sizeof s->mb); memcpy(s->mc, c, sizeof s->mc);
    s->mf16 = L->mma_f16;
    /* the deliberate fault: two A fragment registers trade places, so rows g and g+8 of k 0..7 / 8..15 mix */
    if (L->kn->debug_mma_layout) { s->ma[1] = a[2]; s->ma[2] = a[1]; }
    return s;
}
static KStmt *kldm(Arena *A, int nmat, int dst0, int sm, Expr *addr) {
    KStmt *s = ARENA_NEW(A, KStmt);
    s->k = KS_LDMATRIX; s->nmat = nmat; s->lsmem = sm; s->laddr = addr;
    for (int i = 0; i < nmat; i++) s->ldst[i] = dst0 + i;
    return s;
}
static Expr *imod(Arena *A, Expr *x, int64_t m) { return e_bin(A, EX_MOD, x, e_i(A, m)); }
static Expr *idiv(Arena *A, Expr *x, int64_t d) { return E_DIV(A, x, e_i(A, d)); }

/* Block (bid / nbo, bid % nbo) computes tokens bm*BM.. x outputs bo*BN..; warp w the 32x32 piece
 * (w / (BN/32), w % (BN/32)): 2 x 4 mma tiles of 16x8, accumulators r0..r31 (f32), A fragments r32..r39,
 * B r40..r47 (.b32). X and W tiles are [BM or BN][bk + 8] uint16 (rows 16-byte aligned for ldmatrix, the pad spreads the
 * rows over banks), zero outside n, M and K; per 16 of K: ldmatrix.x4 of each A tile and of each pair of
 * B tiles, 8 mma. One stage (smem0 X, smem1 W): per K step a barrier phase stages both, the mma, an
 * empty barrier phase before the next step overwrites them. S > 1 stages (smem0..S-1 X, smem S..2S-1 W):
 * see gemm_tc_pipeline. */
typedef struct { Expr *t0, *o0, *lane, *wm, *wn, *rows; int64_t K, M; int BK, LD; bool pair, swap, xvec; } Gtc;

/* The output a W tile row r holds: o0 + r; for a pair, rows 32i..32i+15 are outputs 16i.. of the first
 * weight and rows 32i+16..32i+31 the same outputs of the second (slot (r / 16) % 2). */
static Expr *gtc_wrow(Arena *A, const Gtc *G, Expr *r) {
    if (!G->pair) return E_ADD(A, G->o0, r);
    return E_ADD(A, G->o0, E_ADD(A, E_MUL(A, idiv(A, r, 32), e_i(A, 16)), imod(A, r, 16)));
}
static Expr *gtc_slot1(Arena *A, Expr *r) { return lt(A, e_i(A, 15), imod(A, r, 32)); }
static Expr *gtc_w_at(Arena *A, const TileKernel *t, Expr *wop, Expr *o, Expr *kk) {
    return expr_subst(A, expr_subst(A, wop, t->par[1].v, o), t->red[0].v, kk);
}
/* the element of operand w (0: X, 1: W) at tile row r, K column kt + c, and whether it is inside */
static Expr *gtc_value(Arena *A, const TileKernel *t, const Gtc *G, int w, Expr *r, Expr *kk) {
    if (w) {
        Expr *o = gtc_wrow(A, G, r), *w0 = gtc_w_at(A, t, t->wop, o, kk);
        if (!G->pair) return w0;
        Expr *w1 = gtc_w_at(A, t, t->wop1, o, kk);
        return G->swap ? e_select(A, gtc_slot1(A, r), w0, w1) : e_select(A, gtc_slot1(A, r), w1, w0);
    }
    return expr_subst(A, expr_subst(A, t->xop, t->par[0].v, E_ADD(A, G->t0, r)), t->red[0].v, kk);
}
static TStmt *gtc_guard(Arena *A, const Gtc *G, int w, Expr *r, Expr *kk, TStmt *then) {
    TStmt *in1 = ts_if(A, lt(A, w ? gtc_wrow(A, G, r) : E_ADD(A, G->t0, r), w ? e_i(A, G->M) : G->rows), 1), *in2 = ts_if(A, lt(A, kk, e_i(A, G->K)), 1);
    in2->body[in2->nbody++] = then;
    in1->body[in1->nbody++] = in2;
    return in1;
}
static TStmt *gtc_sstore(Arena *A, int sm, Expr *idx, Expr *v) { TStmt *s = ts(A, TS_SSTORE); s->smem = sm; s->sidx = idx; s->e = v; return s; }

/* thread tid stages elements tid, tid + 128, ... of operand w's 64 x BK tile at K offset kt into sm */
static TStmt *gtc_stage(KL *L, const TileKernel *t, const Gtc *G, int w, int sm, Expr *kt) {
    Arena *A = L->A;
    Var *ev = new_var(A, L->nvars, w ? "eb" : "ea");
    TStmt *f = ts(A, TS_FOR);
    f->v = ev; f->lo = tid(A); f->e = e_i(A, (w ? t->bn : t->bm) * G->BK); f->step = e_i(A, t->block);
    f->body = tlist(A, 2);
    Expr *r = idiv(A, e_var(A, ev), G->BK), *c = imod(A, e_var(A, ev), G->BK);
    Expr *sidx = E_ADD(A, E_MUL(A, r, e_i(A, G->LD)), c), *kk = E_ADD(A, kt, c);
    f->body[f->nbody++] = gtc_sstore(A, sm, sidx, e_f(A, 0.0));
    f->body[f->nbody++] = gtc_guard(A, G, w, r, kk, gtc_sstore(A, sm, sidx, gtc_value(A, t, G, w, r, kk)));
    return f;
}

/* registers operand w's register prefetch takes per thread */
static int gtc_nregs(const TileKernel *t, int w) { return (w ? t->bn : t->bm) * t->bk / t->block; }

/* Register prefetch (store == false) of operand w's tile at kt into r0.., or the store of those registers
 * into sm (rounding to bf16): thread tid holds rows tid/BK + j*(block/BK), column tid%BK, j < rows*BK/block. */
/* X with G->xvec: 4 consecutive columns per thread by one vector load (rows tid/(BK/4) + j*(block/(BK/4)),
 * columns 4*(tid % (BK/4)) ..+3; K % 4 == 0, so a vector is all inside K or all outside). */
static void gtc_xregs_vec(KL *L, const TileKernel *t, const Gtc *G, int r0, Expr *kt, int sm, bool store, TStmt **out, int *n) {
    Arena *A = L->A;
    int vpr = G->BK / 4;
    Var *rv = new_var(A, L->nvars, "pr"), *cv = new_var(A, L->nvars, "pc");
    out[(*n)++] = ts_let(A, rv, idiv(A, tid(A), vpr));
    out[(*n)++] = ts_let(A, cv, E_MUL(A, imod(A, tid(A), vpr), e_i(A, 4)));
    for (int j = 0; j < gtc_nregs(t, 0) / 4; j++) {
        Expr *r = E_ADD(A, e_var(A, rv), e_i(A, j * (t->block / vpr)));
        if (store) {
            for (int i = 0; i < 4; i++)
                out[(*n)++] = gtc_sstore(A, sm, E_ADD(A, E_MUL(A, r, e_i(A, G->LD)), E_ADD(A, e_var(A, cv), e_i(A, i))), reg(A, r0 + 4 * j + i));
            continue;
        }
        Expr *kk = E_ADD(A, kt, e_var(A, cv));
        for (int i = 0; i < 4; i++) out[(*n)++] = ts_assign(A, r0 + 4 * j + i, e_f(A, 0.0));
        TStmt *vl = ts(A, TS_VLOAD);
        vl->v = new_var(A, L->nvars, "xv"); vl->vec = 4; vl->buf = t->xop->buf;
        vl->idx = ARENA_ARRAY(A, Expr *, t->xop->nargs);
        for (int d = 0; d < t->xop->nargs; d++)
            vl->idx[d] = expr_subst(A, expr_subst(A, t->xop->a[d], t->par[0].v, E_ADD(A, G->t0, r)), t->red[0].v, kk);
        TStmt *in2 = ts_if(A, lt(A, kk, e_i(A, G->K)), 5);
        in2->body[in2->nbody++] = vl;
        for (int i = 0; i < 4; i++) in2->body[in2->nbody++] = ts_assign(A, r0 + 4 * j + i, e_velem(A, vl->v, i));
        TStmt *in1 = ts_if(A, lt(A, E_ADD(A, G->t0, r), G->rows), 1);
        in1->body[in1->nbody++] = in2;
        out[(*n)++] = in1;
    }
}
static void gtc_regs(KL *L, const TileKernel *t, const Gtc *G, int w, int r0, Expr *kt, int sm, bool store, TStmt **out, int *n) {
    Arena *A = L->A;
    if (!w && G->xvec) { gtc_xregs_vec(L, t, G, r0, kt, sm, store, out, n); return; }
    Var *rv = new_var(A, L->nvars, "pr"), *cv = new_var(A, L->nvars, "pc");
    out[(*n)++] = ts_let(A, rv, idiv(A, tid(A), G->BK));
    out[(*n)++] = ts_let(A, cv, imod(A, tid(A), G->BK));
    for (int j = 0; j < gtc_nregs(t, w); j++) {
        Expr *r = E_ADD(A, e_var(A, rv), e_i(A, j * (t->block / G->BK)));
        if (store) { out[(*n)++] = gtc_sstore(A, sm, E_ADD(A, E_MUL(A, r, e_i(A, G->LD)), e_var(A, cv)), reg(A, r0 + j)); continue; }
        Expr *kk = E_ADD(A, kt, e_var(A, cv));
        out[(*n)++] = ts_assign(A, r0 + j, e_f(A, 0.0));
        out[(*n)++] = gtc_guard(A, G, w, r, kk, ts_assign(A, r0 + j, gtc_value(A, t, G, w, r, kk)));
    }
}

/* W's 64 x BK tile at kt by 16-byte cp.async copies (8 bf16; K % 8 == 0, so a copy is all inside K or all
 * outside): thread tid copies chunk rows tid/(BK/8) + j*(128/(BK/8)), column 8*(tid % (BK/8)); a copy
 * outside M or K zero-fills its destination */
/* (a pair: each chunk's row is one weight's; the copy from the other is skipped, two statements per chunk) */
static void gtc_cp_w(KL *L, const TileKernel *t, const Gtc *G, int sm, Expr *kt, TStmt **out, int *n) {
    Arena *A = L->A;
    int cpr = G->BK / 8, nch = t->bn * cpr / t->block;
    Var *rv = new_var(A, L->nvars, "cr"), *cv = new_var(A, L->nvars, "cc");
    out[(*n)++] = ts_let(A, rv, idiv(A, tid(A), cpr));
    out[(*n)++] = ts_let(A, cv, E_MUL(A, imod(A, tid(A), cpr), e_i(A, 8)));
    for (int j = 0; j < nch; j++) {
        Expr *r = E_ADD(A, e_var(A, rv), e_i(A, j * (t->block / cpr))), *o = gtc_wrow(A, G, r), *kk = E_ADD(A, kt, e_var(A, cv));
        for (int w = 0; w < (G->pair ? 2 : 1); w++) {
            Expr *W = (w != G->swap) ? t->wop1 : t->wop;
            TStmt *s = ts(A, TS_CP_ASYNC);
            s->vec = 16; s->smem = sm; s->sidx = E_ADD(A, E_MUL(A, r, e_i(A, G->LD)), e_var(A, cv));
            s->buf = W->buf; s->idx = ARENA_ARRAY(A, Expr *, 2); s->idx[0] = expr_subst(A, W->a[0], t->par[1].v, o); s->idx[1] = kk;
            /* o < M and kk < K */
            s->e = lt(A, e_bin(A, EX_MAX, E_SUB(A, o, e_i(A, G->M)), E_SUB(A, kk, e_i(A, G->K))), e_i(A, 0));
            if (!G->pair) { out[(*n)++] = s; continue; }
            Expr *slot = gtc_slot1(A, r);
            TStmt *in = ts_if(A, w ? slot : lt(A, imod(A, r, 32), e_i(A, 16)), 1);
            in->body[in->nbody++] = s;
            out[(*n)++] = in;
        }
    }
}

/* per 16 of K: A tiles from smem xs, B tiles from ws, 8 mma */
static void gtc_mma(KL *L, const Gtc *G, KList *ub, int xs, int ws) {
    Arena *A = L->A;
    Expr *lane = G->lane, *wm = G->wm, *wn = G->wn;
    for (int ks = 0; ks < G->BK; ks += 16) {
        for (int mt = 0; mt < 2; mt++) {
            /* lanes 0..15: rows 0..15 at k 0; lanes 16..31: rows 0..15 at k 8 */
            Expr *row = E_ADD(A, E_ADD(A, E_MUL(A, wm, e_i(A, 32)), e_i(A, mt * 16)), imod(A, lane, 16));
            Expr *col = E_ADD(A, e_i(A, ks), E_MUL(A, idiv(A, lane, 16), e_i(A, 8)));
            kl_add(A, ub, kldm(A, 4, 32 + mt * 4, xs, E_ADD(A, E_MUL(A, row, e_i(A, G->LD)), col)));
        }
        for (int np = 0; np < 2; np++) {
            /* matrix i = lane / 8: outputs +8*(i/2), k +8*(i%2): b[0], b[1] of n-tile 2np, then of 2np+1 */
            Expr *mi = idiv(A, lane, 8);
            Expr *row = E_ADD(A, E_ADD(A, E_ADD(A, E_MUL(A, wn, e_i(A, 32)), e_i(A, np * 16)), E_MUL(A, idiv(A, mi, 2), e_i(A, 8))), imod(A, lane, 8));
            Expr *col = E_ADD(A, e_i(A, ks), E_MUL(A, imod(A, mi, 2), e_i(A, 8)));
            kl_add(A, ub, kldm(A, 4, 40 + np * 4, ws, E_ADD(A, E_MUL(A, row, e_i(A, G->LD)), col)));
        }
        for (int mt = 0; mt < 2; mt++)
            for (int nt = 0; nt < 4; nt++) {
                int a[4] = {32 + mt * 4, 33 + mt * 4, 34 + mt * 4, 35 + mt * 4}, b[2] = {40 + nt * 2, 41 + nt * 2};
                int c[4] = {(mt * 4 + nt) * 4, (mt * 4 + nt) * 4 + 1, (mt * 4 + nt) * 4 + 2, (mt * 4 + nt) * 4 + 3};
                kl_add(A, ub, kmma(L, a, b, c));
            }
    }
}

static KStmt *kcp(Arena *A, KStmtKind kind, int n) { KStmt *s = ARENA_NEW(A, KStmt); s->k = kind; s->wait_n = n; return s; }
/* the wait that leaves the newest S - 2 groups (steps i+2 .. i+S-1) in flight; debug_cp_async: one more */
static KStmt *gtc_wait(KL *L, const TileKernel *t) { return kcp(L->A, KS_CP_WAIT, t->stages - 2 + L->kn->debug_cp_async); }

/* One K step i of the pipeline at kt, reading stage b = i % S:
 *   [cp.async W(i+S-1) -> stage (i-1) % S, read in step i-1 before its barrier; commit]
 *   prefetch X(i+1) (and W(i+1) without cp.async) into registers   -- in flight during the mma
 *   ldmatrix + mma from stage b
 *   [wait_group S-2: W(i+1) has landed]
 *   barrier phase: the registers -> stage (i+1) % S, last read in step i+1-S (before a barrier)
 * Copies and loads past K (the last S-1 steps' look-ahead) are zero-filled and never read. */
static void gtc_step(KL *L, const TileKernel *t, const Gtc *G, KList *ub, Expr *kt, int b) {
    Arena *A = L->A;
    int S = t->stages, nb = (b + 1) % S, wb = (b + S - 1) % S, nx = gtc_nregs(t, 0), nw = gtc_nregs(t, 1);
    int cap = 8 + 2 * (nx + nw) + 2 * t->bn * G->BK / 8 / t->block;
    TStmt **p = tlist(A, cap);
    int n = 0;
    if (t->w_cp_async) gtc_cp_w(L, t, G, S + wb, E_ADD(A, kt, e_i(A, (S - 1) * G->BK)), p, &n);
    gtc_regs(L, t, G, 0, 48, E_ADD(A, kt, e_i(A, G->BK)), 0, false, p, &n);
    if (!t->w_cp_async) gtc_regs(L, t, G, 1, 48 + nx, E_ADD(A, kt, e_i(A, G->BK)), 0, false, p, &n);
    CHECK(n <= cap, "gemm_tc step");
    kl_add(A, ub, phase(A, p, n, false));
    if (t->w_cp_async) kl_add(A, ub, kcp(A, KS_CP_COMMIT, 0));
    gtc_mma(L, G, ub, b, S + b);
    if (t->w_cp_async) kl_add(A, ub, gtc_wait(L, t));
    TStmt **q = tlist(A, 4 + nx + nw);
    n = 0;
    gtc_regs(L, t, G, 0, 48, NULL, nb, true, q, &n);
    if (!t->w_cp_async) gtc_regs(L, t, G, 1, 48 + nx, NULL, S + nb, true, q, &n);
    kl_add(A, ub, phase(A, q, n, true));
}

/* S > 1 stages: the prologue puts steps 0..S-2 of W in flight (cp.async, one group each) and stages X(0)
 * (and W(0) without cp.async) directly; then ceil(K/BK) steps (gtc_step), unrolled by S so that every
 * stage is its own shared array: a uniform loop over whole rounds of S steps, the last K % (S*BK) steps
 * after it. */
static void gemm_tc_pipeline(KL *L, const TileKernel *t, const Gtc *G, KList *body) {
    Arena *A = L->A;
    int S = t->stages;
    int64_t T = (G->K + G->BK - 1) / G->BK, rounds = T / S;
    if (t->w_cp_async)
        for (int s = 0; s + 1 < S; s++) {
            TStmt **p = tlist(A, 2 + 2 * t->bn * G->BK / 8 / t->block);
            int n = 0;
            gtc_cp_w(L, t, G, S + s, e_i(A, s * G->BK), p, &n);
            kl_add(A, body, phase(A, p, n, false));
            kl_add(A, body, kcp(A, KS_CP_COMMIT, 0));
        }
    TStmt **p = tlist(A, 2);
    p[0] = gtc_stage(L, t, G, 0, 0, e_i(A, 0));
    if (!t->w_cp_async) p[1] = gtc_stage(L, t, G, 1, S, e_i(A, 0));
    kl_add(A, body, phase(A, p, t->w_cp_async ? 1 : 2, !t->w_cp_async));
    if (t->w_cp_async) {
        kl_add(A, body, gtc_wait(L, t));
        kl_add(A, body, phase(A, tlist(A, 1), 0, true));
    }
    if (rounds) {
        KStmt *uf = ARENA_NEW(A, KStmt);
        Var *kt = new_var(A, L->nvars, "kt");
        uf->k = KS_UFOR; uf->v = kt; uf->init = e_i(A, 0); uf->cond = lt(A, e_var(A, kt), e_i(A, rounds * S * G->BK));
        uf->update = E_ADD(A, e_var(A, kt), e_i(A, S * G->BK));
        KList ub = {0};
        for (int s = 0; s < S; s++) gtc_step(L, t, G, &ub, E_ADD(A, e_var(A, kt), e_i(A, s * G->BK)), s);
        uf->kbody = ub.s; uf->nk = ub.n;
        kl_add(A, body, uf);
    }
    for (int s = 0; s < T % S; s++) gtc_step(L, t, G, body, e_i(A, (rounds * S + s) * G->BK), s);
    /* the look-ahead copies past K: none left in flight when the block exits */
    if (t->w_cp_async) kl_add(A, body, kcp(A, KS_CP_WAIT, 0));
}

static void mat_gemm_tc(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    int64_t K, M;
    CHECK(expr_is_const(t->red[0].extent, &K) && expr_is_const(t->par[1].extent, &M), "gemm_tc extents");
    const int BM = t->bm, BN = t->bn, BK = t->bk, LD = BK + 8, S = t->stages;
    /* a pair's block computes BN / 2 outputs of both weights */
    const int BO = t->nacc == 2 ? BN / 2 : BN;
    int64_t nbo = (M + BO - 1) / BO;
    bool tile_ok = !(BM & 31) && !(BN & 31) && t->block == BM * BN / 32 && !(t->block & (BK - 1)) && BK >= 16 && BK <= 64 && S >= 1 && S <= 4;
    CHECK(tile_ok, "gemm_tc tile %dx%dx%d, %d stages", BM, BN, BK, S);
    k->nregs = 48 + (S > 1 ? gtc_nregs(t, 0) + (t->w_cp_async ? 0 : gtc_nregs(t, 1)) : 0);
    CHECK(k->nregs <= (int)(sizeof k->regs / sizeof k->regs[0]), "gemm_tc registers");
    for (int i = 0; i < k->nregs; i++) { k->regs[i].t = T_F32; k->regs[i].b32 = i >= 32 && i < 48; }
    k->nsmem = 2 * S;
    /* f16 weights: the tiles hold halves (X rounded to f16) and the mma multiplies f16 */
    bool f16 = t->wop->buf->dtype == DT_F16;
    L->mma_f16 = f16;
    for (int i = 0; i < 2 * S; i++) { k->smem[i].size = (i < S ? BM : BN) * LD; k->smem[i].b16 = true; k->smem[i].f16 = f16; }
    /* uniform: the block's tile origin */
    Expr *lane = imod(A, tid(A), 32), *warp = idiv(A, tid(A), 32);
    Gtc G = {E_MUL(A, idiv(A, bid(A), nbo), e_i(A, BM)), E_MUL(A, imod(A, bid(A), nbo), e_i(A, BO)), lane,
             idiv(A, warp, BN / 32), imod(A, warp, BN / 32), t->par[0].extent, K, M, BK, LD, t->nacc == 2,
             /* a pair's fault only: a single linear has no second weight to swap in */
             t->nacc == 2 && L->kn->debug_pair_swap != 0, t->x_vec};
    bool xvec_ok = !t->x_vec || (S > 1 && K % 4 == 0 && gtc_nregs(t, 0) % 4 == 0 && t->block % (BK / 4) == 0);
    CHECK(xvec_ok, "gemm_tc X vectors");
    TStmt **p0 = tlist(A, 32);
    for (int i = 0; i < 32; i++) p0[i] = ts_assign(A, i, e_f(A, 0.0));
    kl_add(A, body, phase(A, p0, 32, false));
    if (S > 1) gemm_tc_pipeline(L, t, &G, body);
    else {
        /* ufor kt = 0; kt < K; kt += BK { stage X, W; barrier; mma; barrier } */
        KStmt *uf = ARENA_NEW(A, KStmt);
        Var *kt = new_var(A, L->nvars, "kt");
        uf->k = KS_UFOR; uf->v = kt; uf->init = e_i(A, 0); uf->cond = lt(A, e_var(A, kt), e_i(A, K));
        uf->update = E_ADD(A, e_var(A, kt), e_i(A, BK));
        KList ub = {0};
        TStmt **ps = tlist(A, 2);
        for (int w = 0; w < 2; w++) ps[w] = gtc_stage(L, t, &G, w, w, e_var(A, kt));
        kl_add(A, &ub, phase(A, ps, 2, true));
        gtc_mma(L, &G, &ub, 0, 1);
        kl_add(A, &ub, phase(A, tlist(A, 1), 0, true));
        uf->kbody = ub.s; uf->nk = ub.n;
        kl_add(A, body, uf);
    }
    /* epilogue: accumulator q of tile (mt, nt) is C[g + 8(q/2)][2t + q%2]; a pair's n-tiles nt and nt + 2
     * (nt < 2) hold the two weights' values of the same outputs, 16 per warp */
    TStmt **pe = tlist(A, 32);
    int npe = 0, NT = G.pair ? 2 : 4, WO = G.pair ? 16 : 32;
    Expr *gq = idiv(A, lane, 4), *tq = imod(A, lane, 4);
    for (int mt = 0; mt < 2; mt++)
        for (int nt = 0; nt < NT; nt++)
            for (int q = 0; q < 4; q++) {
                Expr *row = E_ADD(A, E_ADD(A, G.t0, E_MUL(A, G.wm, e_i(A, 32))), E_ADD(A, e_i(A, mt * 16 + 8 * (q / 2)), gq));
                Expr *col = E_ADD(A, E_ADD(A, G.o0, E_MUL(A, G.wn, e_i(A, WO))), E_ADD(A, e_i(A, nt * 8 + q % 2), E_MUL(A, tq, e_i(A, 2))));
                TStmt *i1 = ts_if(A, lt(A, row, G.rows), 1), *i2 = ts_if(A, lt(A, col, e_i(A, M)), 4);
                i2->body[i2->nbody++] = ts_let(A, t->par[0].v, row);
                i2->body[i2->nbody++] = ts_let(A, t->par[1].v, col);
                i2->nbody += epi_stores(A, t, reg(A, (mt * 4 + nt) * 4 + q), reg(A, (mt * 4 + nt + 2) * 4 + q), i2->body + i2->nbody);
                i1->body[i1->nbody++] = i2;
                pe[npe++] = i1;
            }
    kl_add(A, body, phase(A, pe, npe, false));
}

/* ---- flash attention ---- */
static Expr *emin(Arena *A, Expr *a, Expr *b) { return e_bin(A, EX_MIN, a, b); }
static TStmt *ts_for(Arena *A, Var *v, Expr *lo, Expr *hi, Expr *step, int cap) {
    TStmt *f = ts(A, TS_FOR);
    f->v = v; f->lo = lo; f->e = hi; f->step = step; f->body = tlist(A, cap);
    return f;
}
static TStmt *ts_sstore(Arena *A, int sm, Expr *idx, Expr *v) { TStmt *s = ts(A, TS_SSTORE); s->smem = sm; s->sidx = idx; s->e = v; return s; }
static void add(TStmt *parent, TStmt *child) { parent->body[parent->nbody++] = child; }

static bool ts_uses_var(TStmt *const *b, int n, const Var *v) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        const Expr *e[4] = {s->e, s->lo, s->step, s->sidx};
        for (int j = 0; j < 4; j++) if (e[j] && expr_uses_var(e[j], v)) return true;
        if (s->k == TS_STORE || s->k == TS_VLOAD)
            for (int d = 0; d < s->buf->ndim; d++) if (expr_uses_var(s->idx[d], v)) return true;
        if (ts_uses_var(s->body, s->nbody, v)) return true;
    }
    return false;
}
/* A phase of body[0..n) without the lets nothing in it reads (mat_flash's
 * phases share one set of lets; unused ones would be C warnings). */
static KStmt *phase_pruned(Arena *A, TStmt **b, int n, bool barrier) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (b[i]->k != TS_LET || ts_uses_var(b + i + 1, n - i - 1, b[i]->v)) b[m++] = b[i];
    return phase(A, b, m, barrier);
}

/* ulet NAME = e at the kernel's top level: the value as a uniform variable */
static Expr *ulet(KL *L, KList *body, const char *name, Expr *e) {
    KStmt *s = ARENA_NEW(L->A, KStmt);
    s->k = KS_ULET; s->v = new_var(L->A, L->nvars, name); s->init = e;
    kl_add(L->A, body, s);
    return e_var(L->A, s->v);
}

/* The block's place (uniform): key slice, kv head, first token; and a
 * thread's: lane, its row's token t and head h (the attention's own
 * variables, so q, k, v and jmax read them as they are). */
typedef struct { Expr *slice, *kvh, *t0; Var *lane; } FlashBlock;
static int flash_lets(Arena *A, const TileKernel *t, const FlashBlock *fb, TStmt **l) {
    const AttnDesc *d = t->attn;
    Expr *w = idiv(A, tid(A), 32);
    l[0] = ts_let(A, fb->lane, imod(A, tid(A), 32));
    l[1] = ts_let(A, d->t, E_ADD(A, fb->t0, idiv(A, w, d->group)));
    l[2] = ts_let(A, d->h, E_ADD(A, E_MUL(A, fb->kvh, e_i(A, d->group)), imod(A, w, d->group)));
    return 3;
}
/* registers: r0 score / p, r1 shuffle partner / rescale, r2 running max m, r3 this lane's running sum,
 * r4 the tile's max / the new m, r5 the m exp() subtracts, r6.. o[d] for d = lane, lane + 32, ..
 * shared: smem0 Q rows [warp][hd], smem1 K tile [32][hd + 1], smem2 V tile [32][hv], smem3 P [warp][32] */
static void mat_flash(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    const AttnDesc *d = t->attn;
    const int64_t G = d->group, KVH = d->heads / G, S = t->split_k, W = t->block / 32, HD = d->hd, HV = d->hv, BC = 32;
    const int no = (int)((HV + 31) / 32), RO = 6;
    k->nregs = RO + no;
    for (int i = 0; i < k->nregs; i++) k->regs[i].t = T_F32;
    k->nsmem = 4;
    k->smem[0].size = (int)(W * HD); k->smem[1].size = (int)(BC * (HD + 1)); k->smem[2].size = (int)(BC * HV); k->smem[3].size = (int)(W * BC);
    /* the block's coordinates and key range, computed once (uniform) */
    Expr *SE = S > 1 ? ulet(L, body, "nsplit", t->nsplit) : e_i(A, 1), *rest = ulet(L, body, "rest", E_DIV(A, bid(A), SE));
    FlashBlock fb = {S > 1 ? ulet(L, body, "slice", e_bin(A, EX_MOD, bid(A), SE)) : e_i(A, 0), ulet(L, body, "kvh", imod(A, rest, KVH)),
                     ulet(L, body, "t0", E_MUL(A, idiv(A, rest, KVH), e_i(A, t->tq))), new_var(A, L->nvars, "lane")};
    Expr *lane = e_var(A, fb.lane), *w = idiv(A, tid(A), 32), *tv = e_var(A, d->t);
    Expr *ninf = e_f(A, -1.0 / 0.0);
    /* debug_flash_mask: the deliberate fault, an off-by-one causal mask (a row sees one key too many) */
    Expr *jmax = L->kn->debug_flash_mask ? E_ADD(A, d->jmax, e_i(A, 1)) : d->jmax;
    /* keys the block needs: up to its last token's jmax, within its slice */
    Expr *tlast = E_SUB(A, emin(A, d->rows, E_ADD(A, fb.t0, e_i(A, t->tq))), e_i(A, 1));
    Expr *jlo = e_i(A, 0), *jhi = emin(A, d->len, expr_subst(A, jmax, d->t, tlast));
    if (S > 1) {
        Expr *chunk = ulet(L, body, "chunk", E_MUL(A, idiv(A, E_ADD(A, E_DIV(A, E_ADD(A, d->len, E_SUB(A, SE, e_i(A, 1))), SE), e_i(A, BC - 1)), BC), e_i(A, BC)));
        jlo = ulet(L, body, "jlo", E_MUL(A, fb.slice, chunk));
        jhi = emin(A, jhi, E_ADD(A, jlo, chunk));
    }
    jhi = ulet(L, body, "jhi", jhi);
    /* phase 0: the row's q into smem0 (zero for rows past the end), m = -inf, l = 0, o = 0 */
    TStmt **p0 = tlist(A, 8 + no);
    int n0 = flash_lets(A, t, &fb, p0);
    Var *dv = new_var(A, L->nvars, "dq");
    TStmt *fq = ts_for(A, dv, lane, e_i(A, HD), e_i(A, 32), 2);
    Expr *qi = E_ADD(A, E_MUL(A, w, e_i(A, HD)), e_var(A, dv));
    add(fq, ts_sstore(A, 0, qi, e_f(A, 0.0)));
    TStmt *qin = ts_if(A, lt(A, tv, d->rows), 1);
    add(qin, ts_sstore(A, 0, qi, expr_subst(A, d->q, d->d, e_var(A, dv))));
    add(fq, qin);
    p0[n0++] = fq;
    p0[n0++] = ts_assign(A, 2, ninf);
    p0[n0++] = ts_assign(A, 3, e_f(A, 0.0));
    for (int i = 0; i < no; i++) p0[n0++] = ts_assign(A, RO + i, e_f(A, 0.0));
    kl_add(A, body, phase_pruned(A, p0, n0, true));

    KStmt *uf = ARENA_NEW(A, KStmt);
    Var *j0 = new_var(A, L->nvars, "j0");
    uf->k = KS_UFOR; uf->v = j0; uf->init = jlo; uf->cond = lt(A, e_var(A, j0), jhi);
    uf->update = E_ADD(A, e_var(A, j0), e_i(A, BC));
    KList ub = {0};
    /* stage the tile's K and V rows of the kv head (the group's first head reads what every head of it reads) */
    TStmt **ps = tlist(A, 2);
    for (int m = 0; m < 2; m++) {
        int64_t width = m ? HV : HD, ld = m ? HV : HD + 1;
        Var *xv = new_var(A, L->nvars, m ? "xv" : "xk");
        TStmt *f = ts_for(A, xv, tid(A), e_i(A, BC * width), e_i(A, t->block), 2);
        Expr *r = idiv(A, e_var(A, xv), width), *c = imod(A, e_var(A, xv), width);
        Expr *j = E_ADD(A, e_var(A, j0), r), *si = E_ADD(A, E_MUL(A, r, e_i(A, ld)), c);
        Expr *val = m ? d->v : d->k;
        val = expr_subst(A, expr_subst(A, expr_subst(A, val, d->h, E_MUL(A, fb.kvh, e_i(A, G))), d->j, j), d->d, c);
        add(f, ts_sstore(A, 1 + m, si, e_f(A, 0.0)));
        TStmt *in = ts_if(A, lt(A, j, jhi), 1);
        add(in, ts_sstore(A, 1 + m, si, val));
        add(f, in);
        ps[m] = f;
    }
    kl_add(A, &ub, phase(A, ps, 2, true));
    /* lane l scores key j0 + l: r0 = scale * q . k, -inf past the row's keys */
    TStmt **pq = tlist(A, 8);
    int nq = flash_lets(A, t, &fb, pq);
    Var *ev = new_var(A, L->nvars, "e");
    pq[nq++] = ts_assign(A, 0, e_f(A, 0.0));
    TStmt *fd = ts_for(A, ev, e_i(A, 0), e_i(A, HD), e_i(A, 1), 1);
    add(fd, ts_assign(A, 0, E_ADD(A, reg(A, 0), E_MUL(A, sload(A, 0, E_ADD(A, E_MUL(A, w, e_i(A, HD)), e_var(A, ev))),
                                                      sload(A, 1, E_ADD(A, E_MUL(A, lane, e_i(A, HD + 1)), e_var(A, ev)))))));
    pq[nq++] = fd;
    Expr *jk = E_ADD(A, e_var(A, j0), lane);
    pq[nq++] = ts_assign(A, 0, e_select(A, lt(A, jk, emin(A, jhi, jmax)), E_MUL(A, reg(A, 0), e_f(A, d->scale)), ninf));
    pq[nq++] = ts_assign(A, 4, reg(A, 0));
    kl_add(A, &ub, phase_pruned(A, pq, nq, true));
    /* the tile's max in every lane */
    for (int m = 16; m >= 1; m /= 2) {
        kl_add(A, &ub, shfl(L, SHFL_XOR, 1, 4, m));
        kl_phase1(A, &ub, ts_assign(A, 4, e_bin(A, EX_MAX, reg(A, 4), reg(A, 1))), false);
    }
    /* online softmax: m' = max(m, tile max); exp() subtracts m' (0 while every key so far is masked, so
     * exp(-inf - 0) = 0 instead of NaN); rescale the lane's sum and accumulators by exp(m - m') */
    TStmt **pu = tlist(A, 12 + no);
    int nu = flash_lets(A, t, &fb, pu);
    pu[nu++] = ts_assign(A, 4, e_bin(A, EX_MAX, reg(A, 2), reg(A, 4)));
    pu[nu++] = ts_assign(A, 5, e_select(A, lt(A, ninf, reg(A, 4)), reg(A, 4), e_f(A, 0.0)));
    pu[nu++] = ts_assign(A, 0, e_un(A, EX_EXP, E_SUB(A, reg(A, 0), reg(A, 5))));
    pu[nu++] = ts_assign(A, 1, e_un(A, EX_EXP, E_SUB(A, reg(A, 2), reg(A, 5))));
    pu[nu++] = ts_assign(A, 3, E_ADD(A, E_MUL(A, reg(A, 3), reg(A, 1)), reg(A, 0)));
    for (int i = 0; i < no; i++) pu[nu++] = ts_assign(A, RO + i, E_MUL(A, reg(A, RO + i), reg(A, 1)));
    pu[nu++] = ts_sstore(A, 3, E_ADD(A, E_MUL(A, w, e_i(A, BC)), lane), reg(A, 0));
    pu[nu++] = ts_assign(A, 2, reg(A, 4));
    kl_add(A, &ub, phase_pruned(A, pu, nu, true));
    /* o[d] += p[jj] * V[jj][d] over the tile */
    TStmt **pv = tlist(A, 4);
    int nv = flash_lets(A, t, &fb, pv);
    Var *jj = new_var(A, L->nvars, "jj");
    TStmt *fj = ts_for(A, jj, e_i(A, 0), e_i(A, BC), e_i(A, 1), no);
    Expr *p = sload(A, 3, E_ADD(A, E_MUL(A, w, e_i(A, BC)), e_var(A, jj)));
    for (int i = 0; i < no; i++) {
        Expr *dd = E_ADD(A, lane, e_i(A, 32 * i));
        TStmt *acc = ts_assign(A, RO + i, E_ADD(A, reg(A, RO + i), E_MUL(A, p, sload(A, 2, E_ADD(A, E_MUL(A, e_var(A, jj), e_i(A, HV)), dd)))));
        if ((i + 1) * 32 <= HV) { add(fj, acc); continue; }
        TStmt *in = ts_if(A, lt(A, dd, e_i(A, HV)), 1);
        add(in, acc);
        add(fj, in);
    }
    pv[nv++] = fj;
    kl_add(A, &ub, phase_pruned(A, pv, nv, true));
    uf->kbody = ub.s; uf->nk = ub.n;
    kl_add(A, body, uf);
    /* the row's sum over the lanes */
    for (int m = 16; m >= 1; m /= 2) {
        kl_add(A, body, shfl(L, SHFL_XOR, 1, 3, m));
        kl_phase1(A, body, ts_assign(A, 3, E_ADD(A, reg(A, 3), reg(A, 1))), false);
    }
    /* o / l, or the slice's (o, m, l) for flash_combine */
    TStmt **pe = tlist(A, 4);
    int ne = flash_lets(A, t, &fb, pe);
    TStmt *row = ts_if(A, lt(A, tv, d->rows), no + 1);
    Expr *wrow = E_ADD(A, E_MUL(A, E_ADD(A, E_MUL(A, tv, e_i(A, d->heads)), e_var(A, d->h)), e_i(A, S)), fb.slice);
    for (int i = 0; i < no; i++) {
        Expr *dd = E_ADD(A, lane, e_i(A, 32 * i));
        TStmt *in = ts_if(A, lt(A, dd, e_i(A, HV)), 2);
        add(in, ts_let(A, d->d, dd));
        TStmt *st = ts(A, TS_STORE);
        if (S > 1) {
            st->buf = t->work; st->idx = ARENA_ARRAY(A, Expr *, 2); st->idx[0] = wrow; st->idx[1] = e_var(A, d->d); st->e = reg(A, RO + i);
        } else {
            st->buf = d->out; st->idx = (Expr **)d->out_idx; st->e = E_DIV(A, reg(A, RO + i), reg(A, 3));
        }
        add(in, st);
        add(row, in);
    }
    if (S > 1) {
        TStmt *l0 = ts_if(A, e_bin(A, EX_EQ, lane, e_i(A, 0)), 2);
        for (int q = 0; q < 2; q++) {
            TStmt *st = ts(A, TS_STORE);
            st->buf = t->work; st->idx = ARENA_ARRAY(A, Expr *, 2); st->idx[0] = wrow; st->idx[1] = e_i(A, HV + q); st->e = reg(A, 2 + q);
            add(l0, st);
        }
        add(row, l0);
    }
    pe[ne++] = row;
    kl_add(A, body, phase_pruned(A, pe, ne, false));
}

/* out(t, h, d) = sum_s o_s exp(m_s - M) / sum_s l_s exp(m_s - M) over this call's slices, M their largest
 * max (finite: key 0 is in every row's first slice); r0 M, r1 the sum, r2 o, r3 exp(m_s - M) */
static void mat_flash_combine(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    const AttnDesc *d = t->attn;
    const int64_t S = t->split_k, HV = d->hv;
    k->nregs = 4;
    for (int i = 0; i < 4; i++) k->regs[i].t = T_F32;
    Var *g = new_var(A, L->nvars, "g"), *sv = new_var(A, L->nvars, "s");
    Expr *ge = e_var(A, g);
    TStmt **pb = tlist(A, 2);
    pb[0] = ts_let(A, g, E_ADD(A, E_MUL(A, bid(A), e_i(A, t->block)), tid(A)));
    TStmt *in = ts_if(A, lt(A, ge, E_MUL(A, d->rows, e_i(A, d->heads * HV))), 10);
    Expr *rowg = idiv(A, ge, HV);
    add(in, ts_let(A, d->d, imod(A, ge, HV)));
    add(in, ts_let(A, d->h, imod(A, rowg, d->heads)));
    add(in, ts_let(A, d->t, idiv(A, rowg, d->heads)));
    Expr *wr = E_ADD(A, E_MUL(A, rowg, e_i(A, S)), e_var(A, sv));
    add(in, ts_assign(A, 0, e_f(A, -1.0 / 0.0)));
    TStmt *f1 = ts_for(A, sv, e_i(A, 0), t->nsplit, e_i(A, 1), 1);
    add(f1, ts_assign(A, 0, e_bin(A, EX_MAX, reg(A, 0), e_load2(A, t->work, wr, e_i(A, HV)))));
    add(in, f1);
    add(in, ts_assign(A, 1, e_f(A, 0.0)));
    add(in, ts_assign(A, 2, e_f(A, 0.0)));
    TStmt *f2 = ts_for(A, sv, e_i(A, 0), t->nsplit, e_i(A, 1), 3);
    add(f2, ts_assign(A, 3, e_un(A, EX_EXP, E_SUB(A, e_load2(A, t->work, wr, e_i(A, HV)), reg(A, 0)))));
    add(f2, ts_assign(A, 1, E_ADD(A, reg(A, 1), E_MUL(A, e_load2(A, t->work, wr, e_i(A, HV + 1)), reg(A, 3)))));
    add(f2, ts_assign(A, 2, E_ADD(A, reg(A, 2), E_MUL(A, e_load2(A, t->work, wr, e_var(A, d->d)), reg(A, 3)))));
    add(in, f2);
    TStmt *st = ts(A, TS_STORE);
    st->buf = d->out; st->idx = (Expr **)d->out_idx; st->e = E_DIV(A, reg(A, 2), reg(A, 1));
    add(in, st);
    pb[1] = in;
    kl_add(A, body, phase(A, pb, 2, false));
}

/* top_k (tile_ir.h): (value, index) pairs in a total order, larger value first, then the smaller index
 * (debug_topk_order: the larger). Registers: r0-r3 the block argmax's (value, index, partner's), r4/r5
 * the thread's candidate, r6/r7 the last pair it gave, r8/r9 the element in hand (top_k_merge: r6 the
 * position in the thread's sorted list, whose head is its candidate). A thread's candidate
 * is its best element after (r6, r7); (-inf, TOPK_NONE) when it has none, which every real element
 * beats. Each round: the block argmax of the candidates, broadcast from lane 0; thread 0 stores it;
 * the thread whose candidate it was scans its elements again. Two barriers per round: after the
 * warp values' shared stores, and before the next round's. */
#define TOPK_NONE 1073741824.0   /* 2^30: past every index (at most 2^24) */
static Expr *e_or(Arena *A, Expr *x, Expr *y) { return e_select(A, x, x, y); }
static Expr *e_and(Arena *A, Expr *x, Expr *y) { return e_select(A, x, y, x); }
/* (v, i) comes before (w, j) */
static Expr *topk_before(KL *L, Expr *v, Expr *i, Expr *w, Expr *j) {
    Arena *A = L->A;
    Expr *tie = L->kn->debug_topk_order ? lt(A, j, i) : lt(A, i, j);
    return e_or(A, lt(A, w, v), e_and(A, e_bin(A, EX_EQ, v, w), tie));
}
/* r4, r5 = the best of the elements after (r6, r7): for e = lo; e < hi; e += step, value(e), index(e) */
static void topk_scan(KL *L, TStmt *into, Var *ev, Expr *lo, Expr *hi, Expr *step, Expr *value, Expr *index, TStmt **pre, int npre) {
    Arena *A = L->A;
    add(into, ts_assign(A, 4, e_f(A, -1.0 / 0.0)));
    add(into, ts_assign(A, 5, e_f(A, TOPK_NONE)));
    TStmt *f = ts_for(A, ev, lo, hi, step, npre + 3);
    for (int i = 0; i < npre; i++) add(f, pre[i]);
    add(f, ts_assign(A, 8, value));
    add(f, ts_assign(A, 9, index));
    TStmt *in = ts_if(A, e_and(A, topk_before(L, reg(A, 6), reg(A, 7), reg(A, 8), reg(A, 9)), topk_before(L, reg(A, 8), reg(A, 9), reg(A, 4), reg(A, 5))), 2);
    add(in, ts_assign(A, 4, reg(A, 8)));
    add(in, ts_assign(A, 5, reg(A, 9)));
    add(f, in);
    add(into, f);
}
/* top_k_merge: r4, r5 = the head of thread tid's list at r[posr], or (-inf, TOPK_NONE) past its end or for a
 * thread with no list (tid >= C) */
static void topk_head(KL *L, TStmt *into, int64_t C, Expr *count, Expr *value, Expr *index, int posr) {
    Arena *A = L->A;
    add(into, ts_assign(A, 4, e_f(A, -1.0 / 0.0)));
    add(into, ts_assign(A, 5, e_f(A, TOPK_NONE)));
    TStmt *in = ts_if(A, e_and(A, lt(A, tid(A), e_i(A, C)), lt(A, e_un(A, EX_TOI, reg(A, posr)), count)), 2);
    add(in, ts_assign(A, 4, value));
    add(in, ts_assign(A, 5, index));
    add(into, in);
}
static void mat_topk(KL *L, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = L->A;
    const TOp *op = t->topk;
    const bool merge = t->kind == SCHED_TOPK_MERGE, chunked = t->split_k > 1;
    const int64_t C = t->split_k, CH = t->k_chunk, len = op->raxes[0].extent->i, KM = op->topk_max;
    const int nw = t->block / 32;
    const int POS = 6;         /* top_k_merge: the list position, in place of r6.. */
    k->nregs = merge ? POS + 1 : 10;
    for (int i = 0; i < k->nregs; i++) k->regs[i].t = T_F32;
    if (nw > 1) { k->nsmem = 1; k->smem[0].size = 2 * nw; }
    Expr *row = chunked && !merge ? ulet(L, body, "row", idiv(A, bid(A), C)) : bid(A);
    Expr *count = op->topk_count;
    /* the thread's elements */
    Var *ev = new_var(A, L->nvars, "e");
    Expr *lo, *hi, *step, *value, *index;
    TStmt *pre[MAX_AXES + 1];
    int npre = 0;
    if (!merge) {
        Expr *c0 = chunked ? ulet(L, body, "lo", E_MUL(A, imod(A, bid(A), C), e_i(A, CH))) : e_i(A, 0);
        lo = E_ADD(A, c0, tid(A));
        hi = chunked ? ulet(L, body, "hi", emin(A, E_ADD(A, c0, e_i(A, CH)), e_i(A, len))) : e_i(A, len);
        step = e_i(A, t->block);
        npre = decompose(A, pre, t->par, t->npar, row);
        pre[npre++] = ts_let(A, op->raxes[0].v, e_var(A, ev));
        /* NaN counts as -inf */
        value = e_select(A, e_bin(A, EX_EQ, op->body, op->body), op->body, e_f(A, -1.0 / 0.0));
        index = e_un(A, EX_TOF, e_var(A, ev));
    } else {
        /* thread c < C: chunk c's list, sorted; r8 the position of its head (a small integer in an f32) */
        Expr *list = E_ADD(A, E_MUL(A, row, e_i(A, C)), tid(A)), *at = e_un(A, EX_TOI, reg(A, POS));
        lo = hi = step = NULL;
        value = e_load2(A, t->work, list, at);
        index = e_load2(A, t->work, list, E_ADD(A, at, e_i(A, KM)));
    }
    /* phase 0: nothing given yet (+inf, -1), the first candidate */
    TStmt p0 = {.body = tlist(A, 5)};
    if (!merge) {
        add(&p0, ts_assign(A, 6, e_f(A, 1.0 / 0.0)));
        add(&p0, ts_assign(A, 7, e_f(A, -1.0)));
        topk_scan(L, &p0, ev, lo, hi, step, value, index, pre, npre);
    } else {
        add(&p0, ts_assign(A, POS, e_f(A, 0.0)));
        topk_head(L, &p0, t->split_k, count, value, index, POS);
    }
    kl_add(A, body, phase(A, p0.body, p0.nbody, false));

    KStmt *uf = ARENA_NEW(A, KStmt);
    Var *q = new_var(A, L->nvars, "q");
    uf->k = KS_UFOR; uf->v = q; uf->init = e_i(A, 0); uf->cond = lt(A, e_var(A, q), count);
    uf->update = E_ADD(A, e_var(A, q), e_i(A, 1));
    KList ub = {0};
    TStmt **pa = tlist(A, 2);
    pa[0] = ts_assign(A, 0, reg(A, 4));
    pa[1] = ts_assign(A, 2, reg(A, 5));
    kl_add(A, &ub, phase(A, pa, 2, false));
    for (int d = 16; d >= 1; d /= 2) argmax_step_tie(L, &ub, d, L->kn->debug_topk_order ? EX_MAX : EX_MIN);
    if (nw > 1) {
        /* lane 0 of warp w: smem0[w] = value, smem0[nw + w] = index */
        Expr *half = e_i(A, 0);
        TStmt *w0 = ts_if(A, e_bin(A, EX_EQ, imod(A, tid(A), 32), e_i(A, 0)), 2);
        for (int h = 0; h < 2; h++)
            add(w0, ts_sstore(A, 0, E_ADD(A, half, E_ADD(A, idiv(A, tid(A), 32), e_i(A, h * nw))), reg(A, 2 * h)));
        kl_phase1(A, &ub, w0, true);
        TStmt **p1 = tlist(A, 3);
        p1[0] = ts_assign(A, 0, e_f(A, -1.0 / 0.0));
        p1[1] = ts_assign(A, 2, e_f(A, TOPK_NONE));
        p1[2] = ts_if(A, lt(A, imod(A, tid(A), 32), e_i(A, nw)), 2);
        add(p1[2], ts_assign(A, 0, sload(A, 0, E_ADD(A, half, imod(A, tid(A), 32)))));
        add(p1[2], ts_assign(A, 2, sload(A, 0, E_ADD(A, half, E_ADD(A, imod(A, tid(A), 32), e_i(A, nw))))));
        kl_add(A, &ub, phase(A, p1, 3, false));
        for (int d = nw / 2; d >= 1; d /= 2) argmax_step_tie(L, &ub, d, L->kn->debug_topk_order ? EX_MAX : EX_MIN);
    }
    /* every lane: the round's pair in r1, r3 */
    kl_add(A, &ub, shfl(L, SHFL_IDX, 1, 0, 0));
    kl_add(A, &ub, shfl(L, SHFL_IDX, 3, 2, 0));
    TStmt **pb = tlist(A, 2);
    TStmt *st = ts_if(A, e_bin(A, EX_EQ, tid(A), e_i(A, 0)), MAX_AXES + 3);
    /* the op's own store (its selector and rank bound), or a chunk's row of the workspace */
    bool own = merge || !chunked;
    if (own) st->nbody = decompose(A, st->body, t->par, t->npar, row);
    for (int h = 0; h < 2; h++) {
        Buffer *dst = own ? op->out : t->work;
        TStmt *s = ts(A, TS_STORE);
        s->buf = dst;
        s->idx = ARENA_ARRAY(A, Expr *, dst->ndim);
        if (own) {
            for (int d = 0; d < dst->ndim; d++)
                s->idx[d] = expr_subst(A, expr_subst(A, op->out_idx[d], op->topk_sel, e_i(A, h)), op->topk_rank, e_var(A, q));
        } else {
            s->idx[0] = bid(A);
            s->idx[1] = E_ADD(A, e_var(A, q), e_i(A, h * KM));
        }
        s->e = reg(A, 1 + 2 * h);
        add(st, s);
    }
    pb[0] = st;
    /* the winner gives its candidate and takes the next */
    TStmt *win = ts_if(A, e_bin(A, EX_EQ, reg(A, 5), reg(A, 3)), 5);
    if (!merge) {
        add(win, ts_assign(A, 6, reg(A, 4)));
        add(win, ts_assign(A, 7, reg(A, 5)));
        topk_scan(L, win, ev, lo, hi, step, value, index, pre, npre);
    } else {
        add(win, ts_assign(A, POS, E_ADD(A, reg(A, POS), e_f(A, 1.0))));
        topk_head(L, win, t->split_k, count, value, index, POS);
    }
    pb[1] = win;
    /* a barrier before the next round's shared stores (with one warp, none is needed) */
    kl_add(A, &ub, phase(A, pb, 2, nw > 1));
    uf->kbody = ub.s; uf->nk = ub.n;
    kl_add(A, body, uf);
}

bool kernel_is_sampling(const KLaunch *l) {
    return l->k->sched == SCHED_TOPK || l->k->sched == SCHED_TOPK_MERGE;
}
int kernel_sampling_launches(const KProgram *kp) {
    int n = 0;
    for (int i = 0; i < kp->nl; i++) n += kernel_is_sampling(&kp->launches[i]);
    return n;
}

bool ks_has(KStmt *const *b, int n, KStmtKind kind) {
    for (int i = 0; i < n; i++) if (b[i]->k == kind || (b[i]->k == KS_UFOR && ks_has(b[i]->kbody, b[i]->nk, kind))) return true;
    return false;
}
static bool ts_has(TStmt *const *b, int n, TStmtKind kind) {
    for (int i = 0; i < n; i++) if (b[i]->k == kind || ts_has(b[i]->body, b[i]->nbody, kind)) return true;
    return false;
}
bool ks_has_ts(KStmt *const *b, int n, TStmtKind kind) {
    for (int i = 0; i < n; i++)
        if ((b[i]->k == KS_PHASE && ts_has(b[i]->body, b[i]->nbody, kind)) || (b[i]->k == KS_UFOR && ks_has_ts(b[i]->kbody, b[i]->nk, kind))) return true;
    return false;
}

static KKernel *materialise(KL *L, const TileKernel *t) {
    KKernel *k = new_kernel(L, t);
    KList body = {0};
    switch (t->kind) {
    case SCHED_FLAT: case SCHED_SPLITK_SUM: mat_flat(L, t, k, &body); break;
    case SCHED_BLOCK_REDUCE: (t->redop == RED_ARGMAX ? mat_block_argmax : mat_block_reduce)(L, t, k, &body); break;
    case SCHED_GEMV: mat_gemv(L, t, k, &body); break;
    case SCHED_GEMM_TC: mat_gemm_tc(L, t, k, &body); break;
    case SCHED_FLASH: mat_flash(L, t, k, &body); break;
    case SCHED_FLASH_COMBINE: mat_flash_combine(L, t, k, &body); break;
    case SCHED_TOPK: case SCHED_TOPK_MERGE: mat_topk(L, t, k, &body); break;
    case SCHED_COUNT: UNREACHABLE();
    }
    k->body = body.s; k->nbody = body.n;
    k->has_shfl = ks_has(k->body, k->nbody, KS_SHFL);
    k->has_ldm = ks_has(k->body, k->nbody, KS_LDMATRIX);
    k->has_cp_async = ks_has_ts(k->body, k->nbody, TS_CP_ASYNC);
    collect_kparams(k, k->body, k->nbody);
    return k;
}

/* ---- printer (also the canonical form used for deduplication) ---- */
typedef struct { Str *o; const KKernel *k; } KP;
static void kexpr(KP *p, const Expr *e);
static void kexpr_args(KP *p, const Expr *e) {
    for (int i = 0; i < e->nargs; i++) { if (i) str_printf(p->o, ", "); kexpr(p, e->a[i]); }
}
static void kexpr(KP *p, const Expr *e) {
    Str *o = p->o;
    if (e->k == EX_LOAD) {
        str_printf(o, "p%d[", kernel_param_index(p->k, e->buf));
        kexpr_args(p, e);
        str_printf(o, "]");
        return;
    }
    if (e->k == EX_SLOAD) { str_printf(o, "smem%lld[", (long long)e->i); kexpr(p, e->a[0]); str_printf(o, "]"); return; }
    if (e->k == EX_VELEM) { str_printf(o, "%s[%lld]", e->var->name, (long long)e->i); return; }
    if (!e->nargs) { expr_print(o, e); return; }
    if (e->nargs == 2 && e->k != EX_MIN && e->k != EX_MAX) {
        str_printf(o, "(");
        kexpr(p, e->a[0]);
        str_printf(o, " %s ", expr_names[e->k]);
        kexpr(p, e->a[1]);
        str_printf(o, ")");
        return;
    }
    str_printf(o, "%s(", expr_names[e->k]);
    kexpr_args(p, e);
    str_printf(o, ")");
}
static void ind(Str *o, int d) { for (int i = 0; i < d; i++) str_printf(o, "  "); }
static void print_ts(KP *p, const TStmt *s, int d) {
    Str *o = p->o;
    ind(o, d);
    switch (s->k) {
    case TS_LET: str_printf(o, "let %s = ", s->v->name); kexpr(p, s->e); str_printf(o, "\n"); return;
    case TS_ASSIGN: str_printf(o, "r%d = ", s->reg); kexpr(p, s->e); str_printf(o, "\n"); return;
    case TS_SSTORE: str_printf(o, "smem%d[", s->smem); kexpr(p, s->sidx); str_printf(o, "] = "); kexpr(p, s->e); str_printf(o, "\n"); return;
    case TS_STORE:
        str_printf(o, "p%d[", kernel_param_index(p->k, s->buf));
        for (int i = 0; i < s->buf->ndim; i++) { if (i) str_printf(o, ", "); kexpr(p, s->idx[i]); }
        str_printf(o, "] = ");
        kexpr(p, s->e);
        str_printf(o, "\n");
        return;
    case TS_IF:
        str_printf(o, "if "); kexpr(p, s->e); str_printf(o, ":\n");
        for (int i = 0; i < s->nbody; i++) print_ts(p, s->body[i], d + 1);
        return;
    case TS_FOR:
        str_printf(o, "for %s = ", s->v->name); kexpr(p, s->lo); str_printf(o, "; %s < ", s->v->name); kexpr(p, s->e);
        str_printf(o, "; %s += ", s->v->name); kexpr(p, s->step); str_printf(o, ":\n");
        for (int i = 0; i < s->nbody; i++) print_ts(p, s->body[i], d + 1);
        return;
    case TS_VLOAD:
        str_printf(o, "vload %s[%d] = p%d[", s->v->name, s->vec, kernel_param_index(p->k, s->buf));
        for (int i = 0; i < s->buf->ndim; i++) { if (i) str_printf(o, ", "); kexpr(p, s->idx[i]); }
        str_printf(o, " ..+%d]\n", s->vec);
        return;
    case TS_CP_ASYNC:
        str_printf(o, "cp_async%d smem%d[", s->vec, s->smem); kexpr(p, s->sidx);
        str_printf(o, "] <- p%d[", kernel_param_index(p->k, s->buf));
        for (int i = 0; i < s->buf->ndim; i++) { if (i) str_printf(o, ", "); kexpr(p, s->idx[i]); }
        str_printf(o, " ..+%dB]", s->vec);
        if (s->e) { str_printf(o, " if "); kexpr(p, s->e); str_printf(o, " else zero-fill"); }
        str_printf(o, "\n");
        return;
    case TS_COUNT: break;
    }
}
static void print_ks(KP *p, KStmt **b, int n, int d) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        ind(p->o, d);
        if (s->k == KS_PHASE) {
            str_printf(p->o, "phase%s:\n", s->barrier ? "" : " (warp-level: no barrier)");
            for (int j = 0; j < s->nbody; j++) print_ts(p, s->body[j], d + 1);
        } else if (s->k == KS_MMA) {
            str_printf(p->o, "mma_m16n8k16_%s {r%d, r%d, r%d, r%d} += {r%d, r%d, r%d, r%d} * {r%d, r%d}\n", s->mf16 ? "f16" : "bf16", s->mc[0], s->mc[1], s->mc[2], s->mc[3],
                       s->ma[0], s->ma[1], s->ma[2], s->ma[3], s->mb[0], s->mb[1]);
        } else if (s->k == KS_LDMATRIX) {
            str_printf(p->o, "ldmatrix_x%d {", s->nmat);
            for (int j = 0; j < s->nmat; j++) str_printf(p->o, "%sr%d", j ? ", " : "", s->ldst[j]);
            str_printf(p->o, "} = smem%d[", s->lsmem);
            kexpr(p, s->laddr);
            str_printf(p->o, "]\n");
        } else if (s->k == KS_CP_COMMIT) {
            str_printf(p->o, "cp_async_commit_group\n");
        } else if (s->k == KS_CP_WAIT) {
            str_printf(p->o, "cp_async_wait_group %d\n", s->wait_n);
        } else if (s->k == KS_SHFL) {
            str_printf(p->o, "r%d = shfl_%s(r%d, ", s->dst, shfl_names[s->shfl], s->src);
            kexpr(p, s->arg);
            str_printf(p->o, ")\n");
        } else if (s->k == KS_ULET) {
            str_printf(p->o, "ulet %s = ", s->v->name); kexpr(p, s->init); str_printf(p->o, "\n");
        } else {
            str_printf(p->o, "ufor %s = ", s->v->name); kexpr(p, s->init); str_printf(p->o, "; "); kexpr(p, s->cond);
            str_printf(p->o, "; %s = ", s->v->name); kexpr(p, s->update); str_printf(p->o, ":\n");
            print_ks(p, s->kbody, s->nk, d + 1);
        }
    }
}
void kernel_print_one(Str *o, const KKernel *k, bool header) {
    KP p = {o, k};
    if (header) str_printf(o, "kernel %s  # %s, %d launch%s\n", k->name, k->module, k->uses, k->uses == 1 ? "" : "es");
    str_printf(o, "  %s block=%d grid=", sched_names[k->sched], k->block);
    expr_print(o, k->grid);
    str_printf(o, "\n");
    for (int i = 0; i < k->nparams; i++) {
        const Buffer *b = k->params[i];
        str_printf(o, "  param p%d: %s %s[", i, k->param_written[i] ? "out" : "in", dtype_names[b->dtype]);
        for (int d = 0; d < b->ndim; d++) str_printf(o, "%s%lld", d ? ", " : "", (long long)b->dims[d]);
        str_printf(o, "]%s%s\n", header ? "  = " : "", header ? b->name : "");
    }
    for (int i = 0; i < k->nsmem; i++)
        str_printf(o, "  shared smem%d: %s[%d]\n", i, k->smem[i].f16 ? "b16 (f16)" : k->smem[i].b16 ? "b16" : "f32", k->smem[i].size);
    for (int i = 0; i < k->nregs; i++) str_printf(o, "  register r%d: %s per thread\n", i, k->regs[i].b32 ? "b32" : "f32");
    print_ks(&p, k->body, k->nbody, 1);
}
void kernel_print(Str *o, const KProgram *kp) {
    int ns = kp->tp && kp->tp->g && kp->tp->g->cfg ? kernel_sampling_launches(kp) : 0;
    str_printf(o, "# kernel IR: %d distinct kernels, %d launches per forward", kp->nk, kp->nl - ns);
    str_printf(o, ns ? " (+ %d of the sampler's top-k, run by model_topk)\n" : "\n", ns);
    for (int i = 0; i < kp->nk; i++) kernel_print_one(o, kp->kernels[i], true);
    str_printf(o, "launches:\n");
    for (int i = 0; i < kp->nl; i++) {
        const KLaunch *l = &kp->launches[i];
        str_printf(o, "  %s(", l->k->name);
        for (int j = 0; j < l->k->nparams; j++) str_printf(o, "%s%s", j ? ", " : "", l->args[j]->name);
        str_printf(o, ")\n");
    }
}

int kernel_param_index(const KKernel *k, const Buffer *b) {
    for (int i = 0; i < k->nparams; i++) if (k->params[i] == b) return i;
    return -1;
}

void kernel_lower(Arena *A, const TileProgram *tp, KProgram *kp) {
    int nvars = tp->lp->tp->nvars;
    KL L = {A, &nvars, &tp->knobs, false};
    kp->tp = tp->lp->tp;
    kp->kernels = ARENA_ARRAY(A, KKernel *, tp->n);
    kp->launches = ARENA_ARRAY(A, KLaunch, tp->n);
    kp->nk = kp->nl = 0;
    char **canon = ARENA_ARRAY(A, char *, tp->n);
    for (int i = 0; i < tp->n; i++) {
        KKernel *k = materialise(&L, tp->k[i]);
        Str s = {0};
        kernel_print_one(&s, k, false);
        KKernel *same = NULL;
        int same_name = 0;
        for (int j = 0; j < kp->nk; j++) {
            if (strcmp(kp->kernels[j]->base, k->base)) continue;
            if (!strcmp(canon[j], s.s)) { same = kp->kernels[j]; break; }
            same_name++;
        }
        if (!same) {
            if (same_name) k->name = arena_printf(A, "%s_%d", k->name, same_name);
            canon[kp->nk] = arena_strdup(A, s.s);
            kp->kernels[kp->nk++] = k;
            same = k;
        }
        str_free(&s);
        KLaunch *l = &kp->launches[kp->nl++];
        l->k = same; l->module = k->module; l->grid = k->grid;
        l->run_if = tp->k[i]->run_if; l->min_n = tp->k[i]->min_n;
        CHECK(same->nparams == k->nparams, "dedup param count");
        for (int j = 0; j < k->nparams; j++) l->args[j] = k->params[j];
        same->uses++;
    }
}

/* Kernel IR rules: registers and shared arrays are declared, shared
 * indices are thread-local, and uniform loops only test uniform values. */
static const char *ver_uniform(Arena *A, const Expr *e, Var **uvars, int nu) {
    if (e->k == EX_TID || e->k == EX_REG || e->k == EX_SLOAD || e->k == EX_LOAD) return "uniform expression depends on a thread";
    if (e->k == EX_VAR) {
        for (int i = 0; i < nu; i++) if (uvars[i] == e->var) return NULL;
        return arena_printf(A, "uniform expression uses non-uniform %s", e->var->name);
    }
    for (int i = 0; i < e->nargs; i++) { const char *m = ver_uniform(A, e->a[i], uvars, nu); if (m) return m; }
    return NULL;
}
static const char *ver_refs(Arena *A, const KKernel *k, const Expr *e) {
    if (e->k == EX_REG && (e->i < 0 || e->i >= k->nregs)) return "undeclared register";
    if (e->k == EX_SLOAD && (e->i < 0 || e->i >= k->nsmem)) return "undeclared shared array";
    if (e->k == EX_LOAD && kernel_param_index(k, e->buf) < 0) return arena_printf(A, "%s is not a parameter", e->buf->name);
    for (int i = 0; i < e->nargs; i++) { const char *m = ver_refs(A, k, e->a[i]); if (m) return m; }
    return expr_verify(A, e);
}
/* the shared arrays an expression reads (bit i: smem i) */
static unsigned smem_reads(const Expr *e) {
    unsigned m = e->k == EX_SLOAD && e->i >= 0 && e->i < 32 ? 1u << e->i : 0;
    for (int i = 0; i < e->nargs; i++) m |= smem_reads(e->a[i]);
    return m;
}
/* The shared arrays per-thread code reads, writes (shared stores) and copies into (cp.async: written
 * when a later wait_group completes the copy, not here). */
typedef struct { unsigned rd, wr, cp; } SmemUse;
static void ts_smem(TStmt **b, int n, SmemUse *u) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        unsigned bit = s->smem >= 0 && s->smem < 32 ? 1u << s->smem : 0;
        if (s->k == TS_SSTORE) u->wr |= bit;
        if (s->k == TS_CP_ASYNC) u->cp |= bit;
        if (s->e) u->rd |= smem_reads(s->e);
        if (s->lo) u->rd |= smem_reads(s->lo);
        if (s->sidx) u->rd |= smem_reads(s->sidx);
        for (int d = 0; s->idx && d < s->buf->ndim; d++) u->rd |= smem_reads(s->idx[d]);
        ts_smem(s->body, s->nbody, u);
    }
}
static bool reg_ok(const KKernel *k, int r, bool b32) { return r >= 0 && r < k->nregs && k->regs[r].b32 == b32; }
static const char *ver_ts(Arena *A, const KKernel *k, TStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        const char *m = s->e ? ver_refs(A, k, s->e) : NULL;
        if (!m && s->k == TS_VLOAD) {
            if (kernel_param_index(k, s->buf) < 0) m = "vector load of a non-parameter";
            else if (s->vec != 1 && s->vec != 2 && s->vec != 4 && s->vec != 8) m = "vector width is not 1, 2, 4 or 8";
            else if ((s->vec * dtype_sizes[s->buf->dtype]) % 4 || s->vec * dtype_sizes[s->buf->dtype] > 32) m = "vector of an unsupported size";
            else if (s->buf->dims[s->buf->ndim - 1] % s->vec) m = "vector rows are not aligned";
            for (int d = 0; !m && d < s->buf->ndim; d++) m = ver_refs(A, k, s->idx[d]);
        }
        if (!m && s->k == TS_CP_ASYNC) {
            /* PTX: cp-size 4, 8 or 16 bytes, source and destination aligned to it (rows of the source
             * must be, so that any element index the schedule computes can be; the C backend checks the addresses) */
            int esz = s->buf ? dtype_sizes[s->buf->dtype] : 0;
            if (!s->buf || kernel_param_index(k, s->buf) < 0) m = "cp.async from a non-parameter";
            else if (s->vec != 4 && s->vec != 8 && s->vec != 16) m = "cp.async of other than 4, 8 or 16 bytes";
            else if (s->smem < 0 || s->smem >= k->nsmem) m = "cp.async into an undeclared shared array";
            else if ((s->buf->dims[s->buf->ndim - 1] * esz) % s->vec || s->vec % esz || s->vec % (k->smem[s->smem].b16 ? 2 : 4))
                m = "cp.async rows are not aligned to the copy size";
            else if (s->sidx->t != T_I64) m = "cp.async shared index is not an integer";
            else if (s->e && s->e->t != T_BOOL) m = "cp.async predicate is not boolean";
            if (!m) m = ver_refs(A, k, s->sidx);
            for (int d = 0; !m && d < s->buf->ndim; d++) m = ver_refs(A, k, s->idx[d]);
        }
        if (!m && s->k == TS_ASSIGN && (s->reg < 0 || s->reg >= k->nregs)) m = "assign to undeclared register";
        if (!m && s->k == TS_SSTORE && (s->smem < 0 || s->smem >= k->nsmem)) m = "store to undeclared shared array";
        if (!m && s->k == TS_STORE && kernel_param_index(k, s->buf) < 0) m = "store to a non-parameter";
        if (!m && s->k == TS_IF && s->e->t != T_BOOL) m = "if condition is not boolean";
        if (!m) m = ver_ts(A, k, s->body, s->nbody);
        if (m) return m;
    }
    return NULL;
}
/* How shared memory stands between block barriers, per array (bit i: smem i). Without a barrier between
 * them, a phase that writes an array and any other statement that touches it could race on the GPU even
 * though the C backend (which runs phases one after the other) would not show it: so between barriers a
 * phase that writes an array is the only statement touching it; reads (phases, ldmatrix) may share a
 * region. cp.async copies land when a wait_group completes their group and are visible to other threads
 * after the next barrier: an array is not read or written while a copy into it may be pending, nor copied
 * into in a region that reads or writes it. */
typedef struct {
    unsigned rd, wr;           /* read / written since the last barrier */
    unsigned open;             /* copied into since the last commit_group */
    unsigned grp[8]; int ng;   /* committed groups that may be pending, oldest first */
    unsigned waited;           /* completed since the last barrier: seen by the issuing thread only */
} Region;
static int lowest(unsigned m) { int i = 0; while (m && !(m & 1)) { m >>= 1; i++; } return i; }
static unsigned pending(const Region *r) {
    unsigned m = r->open | r->waited;
    for (int i = 0; i < r->ng; i++) m |= r->grp[i];
    return m;
}
static const char *ver_ks(Arena *A, const KKernel *k, KStmt **b, int n, Var **uvars, int nu, Region *region) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        const char *m = NULL;
        if (s->k == KS_PHASE) {
            m = ver_ts(A, k, s->body, s->nbody);
            SmemUse u = {0, 0, 0};
            ts_smem(s->body, s->nbody, &u);
            unsigned busy = pending(region) | u.cp;
            if (!m && ((u.wr & (region->rd | region->wr)) || (region->wr & (u.rd | u.wr))))
                m = "two phases use shared memory with no barrier between them";
            else if (!m && (u.rd | u.wr) & busy)
                m = arena_printf(A, "smem%d is used while a cp.async into it may be pending (it needs wait_group, then a barrier)",
                                 lowest((u.rd | u.wr) & busy));
            else if (!m && u.cp & (region->rd | region->wr))
                m = arena_printf(A, "cp.async into smem%d, which is used with no barrier between", lowest(u.cp & (region->rd | region->wr)));
            region->rd |= u.rd; region->wr |= u.wr; region->open |= u.cp;
            if (s->barrier) { region->rd = region->wr = region->waited = 0; }
        } else if (s->k == KS_CP_COMMIT) {
            if (region->ng == 8) { region->grp[1] |= region->grp[0]; memmove(region->grp, region->grp + 1, 7 * sizeof(unsigned)); region->ng--; }
            region->grp[region->ng++] = region->open;
            region->open = 0;
        } else if (s->k == KS_CP_WAIT) {
            if (s->wait_n < 0) m = "wait_group of a negative count";
            int done = region->ng - s->wait_n;
            for (int j = 0; !m && j < done; j++) region->waited |= region->grp[j];
            if (!m && done > 0) { memmove(region->grp, region->grp + done, (size_t)(region->ng - done) * sizeof(unsigned)); region->ng -= done; }
        } else if (s->k == KS_MMA) {
            if (k->block % 32) m = "mma in a block that is not whole warps";
            for (int j = 0; !m && j < 4; j++)
                if (!reg_ok(k, s->ma[j], true) || !reg_ok(k, s->mc[j], false) || (j < 2 && !reg_ok(k, s->mb[j], true))) m = "mma fragment register undeclared or of the wrong type";
        } else if (s->k == KS_LDMATRIX) {
            if (k->block % 32) m = "ldmatrix in a block that is not whole warps";
            else if (s->nmat != 1 && s->nmat != 2 && s->nmat != 4) m = "ldmatrix of other than 1, 2 or 4 matrices";
            else if (s->lsmem < 0 || s->lsmem >= k->nsmem || !k->smem[s->lsmem].b16) m = "ldmatrix from an undeclared or non-b16 shared array";
            else if (s->laddr->t != T_I64) m = "ldmatrix address is not an integer";
            for (int j = 0; !m && j < s->nmat; j++) if (!reg_ok(k, s->ldst[j], true)) m = "ldmatrix into an undeclared or non-b32 register";
            if (!m) m = ver_refs(A, k, s->laddr);
            unsigned bit = !m ? 1u << s->lsmem : 0;
            if (!m && region->wr & bit) m = "ldmatrix reads shared memory written with no barrier between";
            else if (!m && pending(region) & bit)
                m = arena_printf(A, "ldmatrix reads smem%d while a cp.async into it may be pending (it needs wait_group, then a barrier)", s->lsmem);
            region->rd |= bit;
        } else if (s->k == KS_SHFL) {
            /* shuffles are kernel statements, so every lane of every warp runs them (full mask) */
            int64_t a;
            if (k->block % 32) m = "shuffle in a block that is not whole warps";
            else if (s->dst < 0 || s->dst >= k->nregs || s->src < 0 || s->src >= k->nregs) m = "shuffle of an undeclared register";
            else if (s->shfl >= SHFL_COUNT) m = "bad shuffle kind";
            else if (s->arg->t != T_I64) m = "shuffle argument is not an integer";
            else if (!(m = ver_uniform(A, s->arg, uvars, nu)) && expr_is_const(s->arg, &a) && (a < 0 || a > 31))
                m = arena_printf(A, "shuffle %s argument %lld is outside 0..31", shfl_names[s->shfl], (long long)a);
        } else if (s->k == KS_ULET) {
            /* a value of bid, n, pos and earlier uniform values: every thread agrees on it */
            if (nu >= 16) return "too many uniform values";
            m = ver_uniform(A, s->init, uvars, nu);
            if (!m && s->init->t != T_I64) m = "uniform value is not an integer";
            uvars[nu++] = s->v;
        } else {
            if (nu >= 16) return "uniform loops nested too deep";
            uvars[nu] = s->v;
            m = ver_uniform(A, s->init, uvars, nu);
            if (!m) m = ver_uniform(A, s->cond, uvars, nu + 1);
            if (!m) m = ver_uniform(A, s->update, uvars, nu + 1);
            /* twice: the loop's back edge joins the end of the body to its start */
            if (!m) m = ver_ks(A, k, s->kbody, s->nk, uvars, nu + 1, region);
            if (!m) m = ver_ks(A, k, s->kbody, s->nk, uvars, nu + 1, region);
        }
        if (m) return m;
    }
    return NULL;
}
const char *kernel_verify(Arena *A, const KProgram *kp) {
    for (int i = 0; i < kp->nk; i++) {
        const KKernel *k = kp->kernels[i];
        Var *uvars[16];
        Region region = {0};
        const char *m = ver_ks(A, k, k->body, k->nbody, uvars, 0, &region);
        if (!m && k->grid->t != T_I64) m = "grid is not an integer";
        if (m) return arena_printf(A, "kernel %s: %s", k->name, m);
    }
    for (int i = 0; i < kp->nl; i++) {
        const KLaunch *l = &kp->launches[i];
        for (int j = 0; j < l->k->nparams; j++) {
            const Buffer *a = l->args[j], *p = l->k->params[j];
            if (a->dtype != p->dtype || a->ndim != p->ndim || memcmp(a->dims, p->dims, sizeof a->dims))
                return arena_printf(A, "launch %d of %s: %s does not match parameter p%d", i, l->k->name, a->name, j);
        }
    }
    return NULL;
}

int64_t kernel_work_bytes(const KProgram *kp) {
    int64_t most = 0;
    for (int i = 0; i < kp->nl; i++)
        for (int j = 0; j < kp->launches[i].k->nparams; j++) {
            const Buffer *b = kp->launches[i].args[j];
            if (b->kind == BUF_WORK && buffer_elems(b) * 4 > most) most = buffer_elems(b) * 4;
        }
    return most;
}
