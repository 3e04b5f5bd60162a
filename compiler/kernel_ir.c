/* kernel_ir.c: tile IR -> kernel IR (materialising the schedules into
 * phases, registers and shared memory), deduplication of identical kernels,
 * printer and verifier. */
#include "kernel_ir.h"
#include <string.h>

typedef struct { Arena *A; int *nvars; } KL;

static TStmt *ts(Arena *A, TStmtKind k) { TStmt *s = ARENA_NEW(A, TStmt); s->k = k; return s; }
static TStmt *ts_let(Arena *A, Var *v, Expr *e) { TStmt *s = ts(A, TS_LET); s->v = v; s->e = e; return s; }
static TStmt **tlist(Arena *A, int n) { return ARENA_ARRAY(A, TStmt *, n); }
static KStmt *phase(Arena *A, TStmt **body, int n) { KStmt *k = ARENA_NEW(A, KStmt); k->k = KS_PHASE; k->body = body; k->nbody = n; return k; }

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
static Expr *reg(Arena *A, int r) { return e_leaf(A, EX_REG, T_F32, r); }
static Expr *sload(Arena *A, int s, Expr *i) { Expr *e = e_un(A, EX_SLOAD, i); e->i = s; e->t = T_F32; return e; }
static TStmt *store(Arena *A, const TileKernel *t, Expr *value) {
    TStmt *s = ts(A, TS_STORE); s->buf = t->out; s->idx = t->idx; s->e = value; return s;
}
static Expr *tid(Arena *A) { return e_leaf(A, EX_TID, T_I64, 0); }
static Expr *bid(Arena *A) { return e_leaf(A, EX_BID, T_I64, 0); }

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
        if (s->k == TS_STORE) {
            for (int d = 0; d < s->buf->ndim; d++) expr_visit_loads(s->idx[d], param_cb, k);
            add_param(k, s->buf, true);
        }
        collect_params(k, s->body, s->nbody);
    }
}
static void collect_kparams(KKernel *k, KStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        if (b[i]->k == KS_PHASE) collect_params(k, b[i]->body, b[i]->nbody);
        else collect_kparams(k, b[i]->kbody, b[i]->nk);
    }
}

static KKernel *materialise(KL *L, const TileKernel *t) {
    Arena *A = L->A;
    KKernel *k = ARENA_NEW(A, KKernel);
    k->name = k->base = arena_printf(A, "k_%s", t->nest->kname);
    k->module = t->nest->module;
    k->sched = t->kind;
    k->block = t->block;
    k->grid = t->grid;
    if (t->kind == SCHED_FLAT) {
        /* g = bid * B + tid; if (g < total) { decompose; store } */
        Var *g = new_var(A, L->nvars, "g");
        Expr *total = e_i(A, 1);
        for (int i = 0; i < t->npar; i++) total = E_MUL(A, total, t->par[i].extent);
        TStmt **pb = tlist(A, 2);
        pb[0] = ts_let(A, g, E_ADD(A, E_MUL(A, bid(A), e_i(A, t->block)), tid(A)));
        TStmt *iff = ts(A, TS_IF);
        iff->e = e_bin(A, EX_LT, e_var(A, g), total);
        iff->body = tlist(A, t->npar + 1);
        iff->nbody = decompose(A, iff->body, t->par, t->npar, e_var(A, g));
        iff->body[iff->nbody++] = store(A, t, t->store_value);
        pb[1] = iff;
        k->nbody = 1; k->body = ARENA_ARRAY(A, KStmt *, 1);
        k->body[0] = phase(A, pb, 2);
    } else {
        k->nregs = 1; k->regs[0].t = T_F32;
        k->nsmem = 1; k->smem[0].size = t->smem_floats;
        Expr *init = e_f(A, t->redop == RED_SUM ? 0.0 : -1.0 / 0.0);
        /* phase 0: every thread reduces a strided slice into r0, then smem0[tid] = r0 */
        Var *r = new_var(A, L->nvars, "r");
        Expr *rtotal = e_i(A, 1);
        for (int i = 0; i < t->nred; i++) rtotal = E_MUL(A, rtotal, t->red[i].extent);
        TStmt **p0 = tlist(A, t->npar + 3);
        int n0 = decompose(A, p0, t->par, t->npar, bid(A));
        TStmt *a0 = ts(A, TS_ASSIGN); a0->reg = 0; a0->e = init; p0[n0++] = a0;
        TStmt *f = ts(A, TS_FOR);
        f->v = r; f->lo = tid(A); f->e = rtotal; f->step = e_i(A, t->block);
        f->body = tlist(A, t->nred + 1);
        f->nbody = decompose(A, f->body, t->red, t->nred, e_var(A, r));
        TStmt *acc = ts(A, TS_ASSIGN); acc->reg = 0; acc->e = combine(A, t->redop, reg(A, 0), t->acc_value);
        f->body[f->nbody++] = acc;
        p0[n0++] = f;
        TStmt *ss = ts(A, TS_SSTORE); ss->smem = 0; ss->sidx = tid(A); ss->e = reg(A, 0); p0[n0++] = ss;
        /* ufor s = B/2; s > 0; s = s/2: phase { if (tid < s) smem0[tid] = smem0[tid] op smem0[tid + s] } */
        Var *sv = new_var(A, L->nvars, "s");
        KStmt *uf = ARENA_NEW(A, KStmt);
        uf->k = KS_UFOR; uf->v = sv; uf->init = e_i(A, t->block / 2);
        uf->cond = e_bin(A, EX_LT, e_i(A, 0), e_var(A, sv));
        uf->update = E_DIV(A, e_var(A, sv), e_i(A, 2));
        TStmt *tf = ts(A, TS_IF);
        tf->e = e_bin(A, EX_LT, tid(A), e_var(A, sv));
        TStmt *st = ts(A, TS_SSTORE); st->smem = 0; st->sidx = tid(A);
        st->e = combine(A, t->redop, sload(A, 0, tid(A)), sload(A, 0, E_ADD(A, tid(A), e_var(A, sv))));
        tf->body = tlist(A, 1); tf->body[0] = st; tf->nbody = 1;
        TStmt **pb = tlist(A, 1); pb[0] = tf;
        uf->nk = 1; uf->kbody = ARENA_ARRAY(A, KStmt *, 1); uf->kbody[0] = phase(A, pb, 1);
        /* last phase: thread 0 applies the epilogue and stores */
        TStmt *last = ts(A, TS_IF);
        last->e = e_bin(A, EX_EQ, tid(A), e_i(A, 0));
        last->body = tlist(A, t->npar + 1);
        last->nbody = decompose(A, last->body, t->par, t->npar, bid(A));
        last->body[last->nbody++] = store(A, t, expr_subst_acc(A, t->store_value, sload(A, 0, e_i(A, 0))));
        TStmt **pl = tlist(A, 1); pl[0] = last;
        k->nbody = 3; k->body = ARENA_ARRAY(A, KStmt *, 3);
        k->body[0] = phase(A, p0, n0);
        k->body[1] = uf;
        k->body[2] = phase(A, pl, 1);
    }
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
    case TS_COUNT: break;
    }
}
static void print_ks(KP *p, KStmt **b, int n, int d) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        ind(p->o, d);
        if (s->k == KS_PHASE) {
            str_printf(p->o, "phase:\n");
            for (int j = 0; j < s->nbody; j++) print_ts(p, s->body[j], d + 1);
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
    for (int i = 0; i < k->nsmem; i++) str_printf(o, "  shared smem%d: f32[%d]\n", i, k->smem[i].size);
    for (int i = 0; i < k->nregs; i++) str_printf(o, "  register r%d: f32 per thread\n", i);
    print_ks(&p, k->body, k->nbody, 1);
}
void kernel_print(Str *o, const KProgram *kp) {
    str_printf(o, "# kernel IR: %d distinct kernels, %d launches per forward\n", kp->nk, kp->nl);
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
    KL L = {A, &nvars};
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
static const char *ver_ts(Arena *A, const KKernel *k, TStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        const char *m = s->e ? ver_refs(A, k, s->e) : NULL;
        if (!m && s->k == TS_ASSIGN && (s->reg < 0 || s->reg >= k->nregs)) m = "assign to undeclared register";
        if (!m && s->k == TS_SSTORE && (s->smem < 0 || s->smem >= k->nsmem)) m = "store to undeclared shared array";
        if (!m && s->k == TS_STORE && kernel_param_index(k, s->buf) < 0) m = "store to a non-parameter";
        if (!m && s->k == TS_IF && s->e->t != T_BOOL) m = "if condition is not boolean";
        if (!m) m = ver_ts(A, k, s->body, s->nbody);
        if (m) return m;
    }
    return NULL;
}
static const char *ver_ks(Arena *A, const KKernel *k, KStmt **b, int n, Var **uvars, int nu) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        const char *m;
        if (s->k == KS_PHASE) m = ver_ts(A, k, s->body, s->nbody);
        else {
            if (nu >= 8) return "uniform loops nested too deep";
            uvars[nu] = s->v;
            m = ver_uniform(A, s->init, uvars, nu);
            if (!m) m = ver_uniform(A, s->cond, uvars, nu + 1);
            if (!m) m = ver_uniform(A, s->update, uvars, nu + 1);
            if (!m) m = ver_ks(A, k, s->kbody, s->nk, uvars, nu + 1);
        }
        if (m) return m;
    }
    return NULL;
}
const char *kernel_verify(Arena *A, const KProgram *kp) {
    for (int i = 0; i < kp->nk; i++) {
        const KKernel *k = kp->kernels[i];
        Var *uvars[8];
        const char *m = ver_ks(A, k, k->body, k->nbody, uvars, 0);
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
