/* build.c: the tile- and kernel-IR builders several schedules share (schedule.h). The table of the
 * schedules is table.c's: the families call these builders, the table calls the families. */
#include "schedules/schedule.h"
#include <stdarg.h>

/* ---- tile IR ---- */
Expr *ceil_div(Arena *A, Expr *x, int64_t d) { return E_DIV(A, E_ADD(A, x, e_i(A, d - 1)), e_i(A, d)); }
int64_t max_i(int64_t a, int64_t b) { return a > b ? a : b; }
int64_t min_i(int64_t a, int64_t b) { return a < b ? a : b; }
bool eval_i(const Expr *e, int64_t n, int64_t pos, int64_t *out) {
    int64_t a, b;
    switch (e->k) {
    case EX_ICONST: *out = e->i; return true;
    case EX_PARAM: *out = e->i == P_N ? n : pos; return true;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_DIV: case EX_MOD: case EX_MIN: case EX_MAX:
        if (!eval_i(e->a[0], n, pos, &a) || !eval_i(e->a[1], n, pos, &b)) return false;
        switch (e->k) {
        case EX_ADD: *out = a + b; return true;
        case EX_SUB: *out = a - b; return true;
        case EX_MUL: *out = a * b; return true;
        case EX_DIV: if (!b) return false; *out = a / b; return true;
        case EX_MOD: if (!b) return false; *out = a % b; return true;
        case EX_MIN: *out = a < b ? a : b; return true;
        default: *out = a > b ? a : b; return true;
        }
    default: return false;
    }
}
TileKernel *new_tile_kernel(Arena *A, const LoopNest *nest) {
    TileKernel *k = ARENA_NEW(A, TileKernel);
    k->nest = nest; k->name = nest->kname;
    return k;
}
TileKernel *second_kernel(Arena *A, const TileKernel *k, SchedKind kind, const char *name, int block, Expr *grid) {
    TileKernel *m = ARENA_NEW(A, TileKernel);
    *m = *k;
    m->kind = kind; m->name = name;
    m->block = block; m->grid = grid; m->smem_floats = 0;
    return m;
}
int with_fallback(const ScheduleChoice *c, TileKernel *g, int min_n,
                  int (*choose)(const ScheduleChoice *, TileKernel *, TileKernel **), TileKernel **out) {
    g->run_if = 1; g->min_n = min_n;
    out[0] = g;
    TileKernel *k = new_tile_kernel(c->A, g->nest);
    k->run_if = 2; k->min_n = min_n;
    int n = choose(c, k, out + 1);
    CHECK(n, "nest %s: %s without its fallback", k->nest->module, sched_names[g->kind]);
    return 1 + n;
}
Buffer *work_buffer(Arena *A, const char *kname, const char *what, int64_t rows, int64_t cols) {
    Buffer *w = ARENA_NEW(A, Buffer);
    w->id = -1; w->name = arena_printf(A, "%s.%s", kname, what); w->kind = BUF_WORK; w->dtype = DT_F32;
    w->ndim = 2; w->dims[0] = rows; w->dims[1] = cols; w->layer = -1; w->weight_index = -1; w->act_offset = 0;
    return w;
}
int pow2_block(int64_t threads) {
    int b = 32;
    while (b < threads && b < 1024) b *= 2;
    return b;
}
void print_axes(Str *o, const Axis *ax, int n) {
    for (int i = 0; i < n; i++) {
        str_printf(o, "%s%s<", i ? ", " : "", ax[i].v->name);
        expr_print(o, ax[i].extent);
        str_printf(o, ">");
    }
}
Expr *product(Arena *A, const Axis *ax, int n) {
    Expr *p = e_i(A, 1);
    for (int i = 0; i < n; i++) p = E_MUL(A, p, ax[i].extent);
    return p;
}

/* ---- kernel IR: per-thread statements ---- */
TStmt *ts(Arena *A, TStmtKind k) { TStmt *s = ARENA_NEW(A, TStmt); s->k = k; return s; }
TStmt **tlist(Arena *A, int n) { return ARENA_ARRAY(A, TStmt *, n); }
TStmt *ts_let(Arena *A, Var *v, Expr *e) { TStmt *s = ts(A, TS_LET); s->v = v; s->e = e; return s; }
TStmt *ts_assign(Arena *A, int r, Expr *e) { TStmt *s = ts(A, TS_ASSIGN); s->reg = r; s->e = e; return s; }
TStmt *ts_if(Arena *A, Expr *c, int cap) { TStmt *s = ts(A, TS_IF); s->e = c; s->body = tlist(A, cap); return s; }
TStmt *ts_for(Arena *A, Var *v, Expr *lo, Expr *hi, Expr *step, int cap) {
    TStmt *f = ts(A, TS_FOR);
    f->v = v; f->lo = lo; f->e = hi; f->step = step; f->body = tlist(A, cap);
    return f;
}
TStmt *ts_sstore(Arena *A, int sm, Expr *idx, Expr *v) {
    TStmt *s = ts(A, TS_SSTORE); s->smem = sm; s->sidx = idx; s->e = v; return s;
}
TStmt *ts_store(Arena *A, Buffer *b, Expr **idx, Expr *v) {
    TStmt *s = ts(A, TS_STORE); s->buf = b; s->idx = idx; s->e = v; return s;
}
TStmt *ts_store2(Arena *A, Buffer *b, Expr *i0, Expr *i1, Expr *v) {
    Expr **idx = ARENA_ARRAY(A, Expr *, 2);
    idx[0] = i0; idx[1] = i1;
    return ts_store(A, b, idx, v);
}
void ts_add(TStmt *parent, TStmt *child) { parent->body[parent->nbody++] = child; }
void sstore_where(Arena *A, TStmt *parent, int sm, Expr *idx, Expr *cond, Expr *v) {
    ts_add(parent, ts_sstore(A, sm, idx, e_f(A, 0.0)));
    TStmt *in = ts_if(A, cond, 1);
    ts_add(in, ts_sstore(A, sm, idx, v));
    ts_add(parent, in);
}
int decompose(Arena *A, TStmt **out, const Axis *ax, int n, Expr *g) {
    Expr *rest = g;
    for (int i = n - 1; i >= 0; i--) {
        Expr *v = i == 0 ? rest : e_bin(A, EX_MOD, rest, ax[i].extent);
        out[n - 1 - i] = ts_let(A, ax[i].v, v);
        if (i) rest = E_DIV(A, rest, ax[i].extent);
    }
    return n;
}
void reduce_update(Arena *A, const NestBody *b, TStmt *loop, int acc, int side) {
    Expr *term = b->acc[0];
    if (b->side.buf) {
        ts_add(loop, ts_assign(A, side, b->side.value));
        ts_add(loop, ts_store(A, b->side.buf, b->side.idx, reg(A, side)));
        term = replace_expr(A, term, b->side.value, reg(A, side));
    }
    ts_add(loop, ts_assign(A, acc, combine(A, b->redop, reg(A, acc), term)));
}
int epi_stores(Arena *A, const NestBody *b, Expr *a0, Expr *a1, TStmt **out) {
    Expr *acc[2] = {a0, a1};
    for (int i = 0; i < b->nstore; i++)
        out[i] = ts_store(A, b->store[i].buf, b->store[i].idx, expr_subst_accs(A, b->store[i].value, acc, b->nacc));
    return b->nstore;
}
Expr *replace_expr(Arena *A, Expr *e, const Expr *what, Expr *with) {
    if (expr_equal(e, what)) return with;
    if (!e->nargs) return e;
    Expr *n = ARENA_NEW(A, Expr);
    *n = *e;
    n->a = ARENA_ARRAY(A, Expr *, e->nargs);
    for (int i = 0; i < e->nargs; i++) n->a[i] = replace_expr(A, e->a[i], what, with);
    return n;
}
Expr *combine(Arena *A, RedOp r, Expr *a, Expr *b) { return e_bin(A, r == RED_SUM ? EX_ADD : EX_MAX, a, b); }
Expr *red_init(Arena *A, RedOp r) { return e_f(A, r == RED_SUM ? 0.0 : -1.0 / 0.0); }
Expr *reg(Arena *A, int r) { return e_leaf(A, EX_REG, T_F32, r); }
Expr *sload(Arena *A, int s, Expr *i) { Expr *e = e_un(A, EX_SLOAD, i); e->i = s; e->t = T_F32; return e; }
Expr *tid(Arena *A) { return e_leaf(A, EX_TID, T_I64, 0); }
Expr *bid(Arena *A) { return e_leaf(A, EX_BID, T_I64, 0); }
Expr *lt(Arena *A, Expr *a, Expr *b) { return e_bin(A, EX_LT, a, b); }
Expr *eq(Arena *A, Expr *a, Expr *b) { return e_bin(A, EX_EQ, a, b); }
Expr *emin(Arena *A, Expr *a, Expr *b) { return e_bin(A, EX_MIN, a, b); }
Expr *imod(Arena *A, Expr *x, int64_t m) { return e_bin(A, EX_MOD, x, e_i(A, m)); }
Expr *idiv(Arena *A, Expr *x, int64_t d) { return E_DIV(A, x, e_i(A, d)); }
void declare_regs(KKernel *k, int n) {
    k->nregs = n;
    for (int i = 0; i < n; i++) k->regs[i].t = T_F32;
}

/* ---- kernel IR: kernel statements ---- */
KStmt *cp_sync(Arena *A, KStmtKind kind, int n) {
    KStmt *s = ARENA_NEW(A, KStmt); s->k = kind; s->wait_n = n; return s;
}
KStmt *phase(Arena *A, TStmt **body, int n, bool barrier) {
    KStmt *k = ARENA_NEW(A, KStmt); k->k = KS_PHASE; k->body = body; k->nbody = n; k->barrier = barrier; return k;
}
static bool ts_uses_var(TStmt *const *b, int n, const Var *v) {
    for (int i = 0; i < n; i++) {
        const Expr *e[TS_MAX_EXPRS];
        for (int j = 0, ne = ts_exprs(b[i], e); j < ne; j++) if (expr_uses_var(e[j], v)) return true;
        if (ts_uses_var(b[i]->body, b[i]->nbody, v)) return true;
    }
    return false;
}
KStmt *phase_pruned(Arena *A, TStmt **b, int n, bool barrier) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (b[i]->k != TS_LET || ts_uses_var(b + i + 1, n - i - 1, b[i]->v)) b[m++] = b[i];
    return phase(A, b, m, barrier);
}
void kl_add(Arena *A, KList *l, KStmt *s) {
    arena_grow(A, (void **)&l->s, l->n, &l->cap, sizeof(KStmt *));
    l->s[l->n++] = s;
}
void kl_phase(Arena *A, KList *l, bool barrier, int n, ...) {
    TStmt **b = tlist(A, n);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) b[i] = va_arg(ap, TStmt *);
    va_end(ap);
    kl_add(A, l, phase(A, b, n, barrier));
}
void kl_ufor(Arena *A, KList *l, Var *v, Expr *init, Expr *hi, Expr *step, const KList *body) {
    KStmt *uf = ARENA_NEW(A, KStmt);
    uf->k = KS_UFOR; uf->v = v; uf->init = init; uf->cond = lt(A, e_var(A, v), hi);
    uf->update = E_ADD(A, e_var(A, v), step);
    uf->kbody = body->s; uf->nk = body->n;
    kl_add(A, l, uf);
}
Expr *ulet(KernelBuilder *B, KList *body, const char *name, Expr *e) {
    KStmt *s = ARENA_NEW(B->A, KStmt);
    s->k = KS_ULET; s->v = new_var(B->A, B->nvars, name); s->init = e;
    kl_add(B->A, body, s);
    return e_var(B->A, s->v);
}
KStmt *shfl(KernelBuilder *B, ShflKind kind, int dst, int src, int64_t arg) {
    KStmt *s = ARENA_NEW(B->A, KStmt);
    s->k = KS_SHFL; s->shfl = kind; s->dst = dst; s->src = src;
    s->arg = e_i(B->A, arg + B->kn->debug_shfl_offset);
    return s;
}
void shfl_trees(KernelBuilder *B, KList *l, ShflKind kind, RedOp op, int width, int n, const int *acc,
                const int *partner) {
    Arena *A = B->A;
    for (int d = width / 2; d >= 1; d /= 2) {
        TStmt **p = tlist(A, n);
        for (int j = 0; j < n; j++) {
            kl_add(A, l, shfl(B, kind, partner[j], acc[j], d));
            p[j] = ts_assign(A, acc[j], combine(A, op, reg(A, acc[j]), reg(A, partner[j])));
        }
        kl_add(A, l, phase(A, p, n, false));
    }
}
void warp_trees(KernelBuilder *B, KList *l, RedOp op, int width, int nacc) {
    shfl_trees(B, l, SHFL_DOWN, op, width, nacc, (int[]){0, 2}, (int[]){1, 3});
}
void argmax_step(KernelBuilder *B, KList *l, int64_t d, ExprKind tie) {
    Arena *A = B->A;
    kl_add(A, l, shfl(B, SHFL_DOWN, ARGMAX_R_PARTNER_VAL, ARGMAX_R_VAL, d));
    kl_add(A, l, shfl(B, SHFL_DOWN, ARGMAX_R_PARTNER_IDX, ARGMAX_R_IDX, d));
    Expr *v = reg(A, ARGMAX_R_VAL), *pv = reg(A, ARGMAX_R_PARTNER_VAL);
    Expr *i = reg(A, ARGMAX_R_IDX), *pi = reg(A, ARGMAX_R_PARTNER_IDX);
    Expr *idx = e_select(A, lt(A, v, pv), pi, e_select(A, eq(A, v, pv), e_bin(A, tie, i, pi), i));
    kl_phase(A, l, false, 2, ts_assign(A, ARGMAX_R_IDX, idx), ts_assign(A, ARGMAX_R_VAL, e_bin(A, EX_MAX, v, pv)));
}
void gather_warp_values(KernelBuilder *B, KList *l, int nw, Expr *lane, int n, const int *regs, Expr *const *init) {
    Arena *A = B->A;
    TStmt *w0 = ts_if(A, eq(A, imod(A, tid(A), 32), e_i(A, 0)), n);
    for (int h = 0; h < n; h++)
        ts_add(w0, ts_sstore(A, 0, E_ADD(A, idiv(A, tid(A), 32), e_i(A, h * nw)), reg(A, regs[h])));
    kl_phase(A, l, true, 1, w0);
    TStmt **p1 = tlist(A, n + 1), *in = ts_if(A, lt(A, lane, e_i(A, nw)), n);
    for (int h = 0; h < n; h++) {
        p1[h] = ts_assign(A, regs[h], init[h]);
        ts_add(in, ts_assign(A, regs[h], sload(A, 0, E_ADD(A, lane, e_i(A, h * nw)))));
    }
    p1[n] = in;
    kl_add(A, l, phase(A, p1, n + 1, false));
}
void argmax_across_warps(KernelBuilder *B, KList *l, int nw, Expr *lane, double init_idx, ExprKind tie) {
    Expr *init[2] = {e_f(B->A, -1.0 / 0.0), e_f(B->A, init_idx)};
    gather_warp_values(B, l, nw, lane, 2, (int[]){ARGMAX_R_VAL, ARGMAX_R_IDX}, init);
    for (int d = nw / 2; d >= 1; d /= 2) argmax_step(B, l, d, tie);
}
