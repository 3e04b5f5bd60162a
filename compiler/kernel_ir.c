/* kernel_ir.c: tile IR -> kernel IR (each schedule materialises its kernels,
 * compiler/schedules/; here the parameters they bind and the deduplication of
 * identical kernels), printer and verifier. */
#include "schedules/schedule.h"
#define CPU_GEMM_SIZES_ONLY
#include "cpu_gemm.h"
#include <stdarg.h>
#include <string.h>

const char *const shfl_names[] = {SHFL_KINDS(X_NAME)};

static void add_param(KKernel *k, Buffer *b, bool written) {
    for (int i = 0; i < k->nparams; i++) if (k->params[i] == b) { k->param_written[i] |= written; return; }
    CHECK(k->nparams < MAX_PARAMS, "kernel %s: too many buffers", k->name);
    k->param_written[k->nparams] = written;
    k->params[k->nparams++] = b;
}
static void param_cb(void *ctx, Buffer *b) { add_param(ctx, b, false); }
int ts_exprs(const TStmt *s, const Expr **out) {
    const Expr *own[4] = {s->e, s->lo, s->step, s->sidx};
    int n = 0;
    for (int i = 0; i < 4; i++) if (own[i]) out[n++] = own[i];
    for (int d = 0; s->idx && d < s->buf->ndim; d++) out[n++] = s->idx[d];
    return n;
}
static void collect_params(KKernel *k, TStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        const Expr *e[TS_MAX_EXPRS];
        for (int j = 0, ne = ts_exprs(b[i], e); j < ne; j++) expr_visit_loads(e[j], param_cb, k);
        if (b[i]->idx) add_param(k, b[i]->buf, b[i]->k == TS_STORE);
        collect_params(k, b[i]->body, b[i]->nbody);
    }
}
static void collect_kparams(KKernel *k, KStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        if (b[i]->k == KS_PHASE) collect_params(k, b[i]->body, b[i]->nbody);
        else if (b[i]->k == KS_LDMATRIX) expr_visit_loads(b[i]->laddr, param_cb, k);
        else if (b[i]->k == KS_UFOR) collect_kparams(k, b[i]->kbody, b[i]->nk);
    }
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
    for (int i = 0; i < n; i++)
        if (b[i]->k == kind || (b[i]->k == KS_UFOR && ks_has(b[i]->kbody, b[i]->nk, kind))) return true;
    return false;
}
static bool ts_has(TStmt *const *b, int n, TStmtKind kind) {
    for (int i = 0; i < n; i++) if (b[i]->k == kind || ts_has(b[i]->body, b[i]->nbody, kind)) return true;
    return false;
}
bool ks_has_ts(KStmt *const *b, int n, TStmtKind kind) {
    for (int i = 0; i < n; i++)
        if ((b[i]->k == KS_PHASE && ts_has(b[i]->body, b[i]->nbody, kind)) ||
            (b[i]->k == KS_UFOR && ks_has_ts(b[i]->kbody, b[i]->nk, kind)))
            return true;
    return false;
}

static KKernel *materialise(KernelBuilder *B, const TileKernel *t) {
    KKernel *k = ARENA_NEW(B->A, KKernel);
    k->name = k->base = arena_printf(B->A, "k_%s", t->name);
    k->module = t->nest->module;
    k->sched = t->kind;
    k->block = t->block;
    k->grid = t->grid;
    k->task = schedules[t->kind].block_rule & BLOCK_TASK;
    KList body = {0};
    schedules[t->kind].materialise(B, t, k, &body);
    k->body = body.s; k->nbody = body.n;
    k->has_shfl = ks_has(k->body, k->nbody, KS_SHFL);
    k->has_ldm = ks_has(k->body, k->nbody, KS_LDMATRIX);
    k->has_cp_async = ks_has_ts(k->body, k->nbody, TS_CP_ASYNC);
    k->has_acts_q8 = t->kind == SCHED_CPU_ROWS && t->body.cpu.acts_q8;
    k->has_acts16 = t->kind == SCHED_CPU_ROWS && t->body.cpu.dot16;
    collect_kparams(k, k->body, k->nbody);
    return k;
}

/* ---- printer (also the canonical form used for deduplication) ---- */
/* What printing a kernel carries along: the output, and the kernel whose params loads name (p<i>). */
typedef struct {
    Str *o;
    const KKernel *k;
} KernelPrinter;
static void kexpr(KernelPrinter *p, const Expr *e);
/* p<i>[idx, ..: elements of parameter b */
static void kbuf(KernelPrinter *p, const Buffer *b, Expr *const *idx) {
    str_printf(p->o, "p%d[", kernel_param_index(p->k, b));
    for (int i = 0; i < b->ndim; i++) { if (i) str_printf(p->o, ", "); kexpr(p, idx[i]); }
}
/* fmt with %s, %d, %E (an expression) and %B (a buffer and its index list: p<i>[idx, ..) */
static void kfmt(KernelPrinter *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    for (const char *c = fmt; *c; c++) {
        size_t run = strcspn(c, "%");
        str_append(p->o, c, run);
        c += run;
        if (!*c) break;
        switch (*++c) {
        case 's': str_printf(p->o, "%s", va_arg(ap, const char *)); break;
        case 'd': str_printf(p->o, "%d", va_arg(ap, int)); break;
        case 'E': kexpr(p, va_arg(ap, const Expr *)); break;
        default: {
            const Buffer *b = va_arg(ap, const Buffer *);
            kbuf(p, b, va_arg(ap, Expr *const *));
        }
        }
    }
    va_end(ap);
}
static void kexpr(KernelPrinter *p, const Expr *e) {
    if (e->k == EX_LOAD) kfmt(p, "%B]", e->buf, e->a);
    else if (e->k == EX_SLOAD) kfmt(p, "smem%d[%E]", (int)e->i, e->a[0]);
    else if (e->k == EX_VELEM) str_printf(p->o, "%s[%lld]", e->var->name, (long long)e->i);
    else if (!e->nargs) expr_print(p->o, e);
    else if (e->nargs == 2 && e->k != EX_MIN && e->k != EX_MAX)
        kfmt(p, "(%E %s %E)", e->a[0], expr_names[e->k], e->a[1]);
    else {
        str_printf(p->o, "%s(", expr_names[e->k]);
        for (int i = 0; i < e->nargs; i++) kfmt(p, i ? ", %E" : "%E", e->a[i]);
        str_printf(p->o, ")");
    }
}
static void ind(Str *o, int d) { for (int i = 0; i < d; i++) str_printf(o, "  "); }
static void print_ts(KernelPrinter *p, const TStmt *s, int d) {
    ind(p->o, d);
    switch (s->k) {
    case TS_LET: kfmt(p, "let %s = %E\n", s->v->name, s->e); return;
    case TS_ASSIGN: kfmt(p, "r%d = %E\n", s->reg, s->e); return;
    case TS_SSTORE: kfmt(p, "smem%d[%E] = %E\n", s->smem, s->sidx, s->e); return;
    case TS_STORE:
        kfmt(p, s->truncate ? "%B] = %E  (truncated to bf16)\n" : "%B] = %E\n", s->buf, s->idx, s->e);
        return;
    case TS_IF: kfmt(p, "if %E:\n", s->e); break;
    case TS_FOR:
        kfmt(p, "for %s = %E; %s < %E; %s += %E:\n", s->v->name, s->lo, s->v->name, s->e, s->v->name, s->step);
        break;
    case TS_VLOAD: kfmt(p, "vload %s[%d] = %B ..+%d]\n", s->v->name, s->vec, s->buf, s->idx, s->vec); return;
    case TS_CP_ASYNC:
        kfmt(p, "cp_async%d smem%d[%E] <- %B ..+%dB]", s->vec, s->smem, s->sidx, s->buf, s->idx, s->vec);
        if (s->e) kfmt(p, " if %E else zero-fill", s->e);
        str_printf(p->o, "\n");
        return;
    case TS_GEMM:
        kfmt(p, "gemm smem%d[%E ..][%E x %d] = (%E ? itself : 0) + ", s->gsmem[2], s->sidx, s->e, (int)s->gn, s->step);
        if (s->dot) kfmt(p, "bf16(%B ..]) (rounded into smem%d)", s->buf, s->idx, s->gsmem[0]);
        else if (s->buf) kfmt(p, "%B ..] (rows in place)", s->buf, s->idx);
        else kfmt(p, "smem%d (packed rows)", s->gsmem[0]);
        kfmt(p, " x smem%d (packed columns)^T, K %E\n", s->gsmem[1], s->lo);
        return;
    case TS_PACK:
        kfmt(p, "pack smem%d columns %E.. <- %B ..], %E rows of %d (the rest zero), K %E", s->smem, s->sidx,
             s->buf, s->idx, s->e, (int)s->gn, s->lo);
        if (s->run_gap) str_printf(p->o, ", in runs of %lld rows %lld apart", (long long)s->run_rows,
                                   (long long)s->run_gap);
        str_printf(p->o, ": %s\n",
                   s->dot ? "bf16 pairs for the bf16 dot product (f32 slivers where the CPU lacks it)" : "f32 slivers");
        return;
    case TS_QDOT:
        kfmt(p, "r%d = qdot(%B ..] (%s blocks), %E .., K %E)%s", s->reg, s->buf, s->idx,
             dtype_names[s->buf->dtype], s->e, s->lo, s->dot ? ", activations rounded to 8 bits" : "");
        if (s->prefetch) str_printf(p->o, ", prefetching %d bytes ahead", s->prefetch);
        str_printf(p->o, "\n");
        return;
    case TS_DOT16:
        kfmt(p, "smem%d[%E ..] = dot16(%B ..] (bf16), %E rows (at most %d) of %E .. rounded to bf16, K %E)", s->smem,
             s->sidx, s->buf, s->idx, s->step, (int)s->gn, s->e, s->lo);
        if (s->prefetch) str_printf(p->o, ", prefetching %d bytes ahead", s->prefetch);
        str_printf(p->o, "\n");
        return;
    case TS_BDOT: {
        int64_t nb;
        kfmt(p, "r%d += bdot(%B ..] (%E ", s->reg, s->buf, s->idx, s->lo);
        if (!expr_is_const(s->lo, &nb) || nb != s->vec) str_printf(p->o, "(at most %d) ", s->vec);
        if (dtype_block[s->buf->dtype] == 256)
            str_printf(p->o, "rounds of half a %s super-block", dtype_names[s->buf->dtype]);
        else str_printf(p->o, "rounds of %d %s block%s", s->group, dtype_names[s->buf->dtype], s->group > 1 ? "s" : "");
        kfmt(p, " %d apart, loaded together), %E ..)\n", (int)s->gn, s->e);
        return;
    }
    case TS_COUNT: break;
    }
    for (int i = 0; i < s->nbody; i++) print_ts(p, s->body[i], d + 1);
}
static void print_ks(KernelPrinter *p, KStmt **b, int n, int d) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        ind(p->o, d);
        if (s->k == KS_PHASE) {
            str_printf(p->o, "phase%s:\n", s->barrier ? "" : " (warp-level: no barrier)");
            for (int j = 0; j < s->nbody; j++) print_ts(p, s->body[j], d + 1);
        } else if (s->k == KS_MMA) {
            str_printf(p->o, "mma_m16n8k16_%s {r%d, r%d, r%d, r%d} += {r%d, r%d, r%d, r%d} * {r%d, r%d}\n",
                       s->mf16 ? "f16" : "bf16", s->mc[0], s->mc[1], s->mc[2], s->mc[3],
                       s->ma[0], s->ma[1], s->ma[2], s->ma[3], s->mb[0], s->mb[1]);
        } else if (s->k == KS_LDMATRIX) {
            str_printf(p->o, "ldmatrix_x%d {", s->nmat);
            for (int j = 0; j < s->nmat; j++) str_printf(p->o, "%sr%d", j ? ", " : "", s->ldst[j]);
            kfmt(p, "} = smem%d[%E]\n", s->lsmem, s->laddr);
        } else if (s->k == KS_CP_COMMIT) {
            str_printf(p->o, "cp_async_commit_group\n");
        } else if (s->k == KS_CP_WAIT) {
            str_printf(p->o, "cp_async_wait_group %d\n", s->wait_n);
        } else if (s->k == KS_SHFL) {
            kfmt(p, "r%d = shfl_%s(r%d, %E)\n", s->dst, shfl_names[s->shfl], s->src, s->arg);
        } else if (s->k == KS_ULET) {
            kfmt(p, "ulet %s = %E\n", s->v->name, s->init);
        } else {
            kfmt(p, "ufor %s = %E; %E; %s = %E:\n", s->v->name, s->init, s->cond, s->v->name, s->update);
            print_ks(p, s->kbody, s->nk, d + 1);
        }
    }
}
void kernel_print_one(Str *o, const KKernel *k, bool header) {
    KernelPrinter p = {o, k};
    if (header) str_printf(o, "kernel %s  # %s, %d launch%s\n", k->name, k->module, k->uses, k->uses == 1 ? "" : "es");
    str_printf(o, "  %s block=%d grid=", sched_names[k->sched], k->block);
    expr_print(o, k->grid);
    str_printf(o, "\n");
    if (k->min_blocks) str_printf(o, "  at least %d blocks per SM asked of ptxas (its registers)\n", k->min_blocks);
    for (int i = 0; i < k->nparams; i++) {
        const Buffer *b = k->params[i];
        str_printf(o, "  param p%d: %s %s[", i, k->param_written[i] ? "out" : "in", dtype_names[b->dtype]);
        for (int d = 0; d < b->ndim; d++) str_printf(o, "%s%lld", d ? ", " : "", (long long)b->dims[d]);
        str_printf(o, "]%s%s\n", header ? "  = " : "", header ? b->name : "");
    }
    for (int i = 0; i < k->nsmem; i++)
        str_printf(o, "  shared smem%d: %s[%d]\n", i,
                   k->smem[i].f16     ? "b16 (f16)"
                   : k->smem[i].widen ? "b16 (bf16 values)"
                   : k->smem[i].b16   ? "b16"
                                      : "f32",
                   k->smem[i].size);
    for (int i = 0; i < k->nregs; i++)
        str_printf(o, "  register r%d: %s per thread\n", i, k->regs[i].b32 ? "b32" : "f32");
    print_ks(&p, k->body, k->nbody, 1);
}
void kernel_print(Str *o, const KProgram *kp) {
    int ns = kp->sampler ? kernel_sampling_launches(kp) : 0;
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

/* knob debug_kv_round's fault: every store to a bf16 KV cache truncates */
static void truncate_kv_stores(TStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        if (b[i]->k == TS_STORE && b[i]->buf->dtype == DT_BF16 &&
            (b[i]->buf->kind == BUF_KCACHE || b[i]->buf->kind == BUF_VCACHE))
            b[i]->truncate = true;
        truncate_kv_stores(b[i]->body, b[i]->nbody);
    }
}
static void truncate_kv_kstores(KStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        if (b[i]->k == KS_PHASE) truncate_kv_stores(b[i]->body, b[i]->nbody);
        else if (b[i]->k == KS_UFOR) truncate_kv_kstores(b[i]->kbody, b[i]->nk);
    }
}

void kernel_lower(Arena *A, const TileProgram *tp, KProgram *kp) {
    int nvars = tp->lp->tp->nvars;
    KernelBuilder B = {A, &nvars, &tp->knobs, tp->max_batch, tp->max_ctx};
    kp->tp = tp->lp->tp;
    kp->sampler = tp->lp->sampler;
    kp->kernels = ARENA_ARRAY(A, KKernel *, tp->n);
    kp->launches = ARENA_ARRAY(A, KLaunch, tp->n);
    kp->nk = kp->nl = 0;
    char **canon = ARENA_ARRAY(A, char *, tp->n);
    for (int i = 0; i < tp->n; i++) {
        KKernel *k = materialise(&B, tp->k[i]);
        if (tp->knobs.debug_kv_round) truncate_kv_kstores(k->body, k->nbody);
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
        l->k = same; l->module = k->module; l->layer = tp->k[i]->nest->layer; l->grid = k->grid;
        l->run_if = tp->k[i]->run_if; l->min_n = tp->k[i]->min_n;
        l->tail = tp->k[i]->nest && tp->k[i]->nest->op && tp->k[i]->nest->op->tail;
        CHECK(same->nparams == k->nparams, "dedup param count");
        for (int j = 0; j < k->nparams; j++) l->args[j] = k->params[j];
        same->uses++;
    }
}

/* Kernel IR rules: registers and shared arrays are declared, shared
 * indices are thread-local, and uniform loops only test uniform values. */
static const char *ver_uniform(Arena *A, const Expr *e, Var **uvars, int nu) {
    if (e->k == EX_TID || e->k == EX_REG || e->k == EX_SLOAD || e->k == EX_LOAD)
        return "uniform expression depends on a thread";
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
    if (e->k == EX_SLOAD && k->smem[e->i].widen && (!k->smem[e->i].b16 || k->smem[e->i].f16))
        return "a widened shared array that is not of bf16";
    if (e->k == EX_LOAD && kernel_param_index(k, e->buf) < 0)
        return arena_printf(A, "%s is not a parameter", e->buf->name);
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
        const Expr *e[TS_MAX_EXPRS];
        unsigned bit = s->smem >= 0 && s->smem < 32 ? 1u << s->smem : 0;
        if (s->k == TS_SSTORE || s->k == TS_PACK) u->wr |= bit;
        if (s->k == TS_CP_ASYNC) u->cp |= bit;
        for (int j = 0, ne = ts_exprs(s, e); j < ne; j++) u->rd |= smem_reads(e[j]);
        ts_smem(s->body, s->nbody, u);
    }
}
static bool reg_ok(const KKernel *k, int r, bool b32) { return r >= 0 && r < k->nregs && k->regs[r].b32 == b32; }
static const char *ver_ts(Arena *A, const KKernel *k, TStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        const Expr *e[TS_MAX_EXPRS];
        const char *m = NULL;
        for (int j = 0, ne = ts_exprs(s, e); !m && j < ne; j++) m = ver_refs(A, k, e[j]);
        bool param = s->buf && kernel_param_index(k, s->buf) >= 0;
        int esz = s->buf ? dtype_sizes[s->buf->dtype] : 0;
        int64_t row = s->buf ? s->buf->dims[s->buf->ndim - 1] : 0;
        if (m) return m;
        if (s->k == TS_VLOAD) {
            if (!param) m = "vector load of a non-parameter";
            else if (dtype_is_quant(s->buf->dtype)) m = "vector load of a block type";
            else if (s->vec != 1 && s->vec != 2 && s->vec != 4 && s->vec != 8) m = "vector width is not 1, 2, 4 or 8";
            else if ((s->vec * esz) % 4 || s->vec * esz > 32) m = "vector of an unsupported size";
            else if (row % s->vec) m = "vector rows are not aligned";
        } else if (s->k == TS_CP_ASYNC) {
            /* PTX: cp-size 4, 8 or 16 bytes, source and destination aligned to it (rows of the source
             * must be, so that any element index the schedule computes can be; the C backend checks the addresses) */
            if (!param) m = "cp.async from a non-parameter";
            else if (s->vec != 4 && s->vec != 8 && s->vec != 16) m = "cp.async of other than 4, 8 or 16 bytes";
            else if (s->smem < 0 || s->smem >= k->nsmem) m = "cp.async into an undeclared shared array";
            else if ((row * esz) % s->vec || s->vec % esz || s->vec % (k->smem[s->smem].b16 ? 2 : 4))
                m = "cp.async rows are not aligned to the copy size";
            else if (s->sidx->t != T_I64) m = "cp.async shared index is not an integer";
            else if (s->e && s->e->t != T_BOOL) m = "cp.async predicate is not boolean";
        }
        else if (s->k == TS_GEMM) {
            if (!k->task) m = "gemm outside a CPU task kernel";
            if (s->buf && (!param || s->buf->dtype != DT_F32 || s->buf->ndim != 2)) m = "gemm A is not an f32 matrix";
            if (s->dot && !s->buf) m = "gemm's bf16 dot product without its activations";
            for (int j = s->buf && !s->dot ? 1 : 0; j < 3 && !m; j++)
                if (s->gsmem[j] < 0 || s->gsmem[j] >= k->nsmem || k->smem[s->gsmem[j]].b16)
                    m = "gemm on undeclared shared arrays";
        }
        else if (s->k == TS_PACK) {
            if (!k->task) m = "pack outside a CPU task kernel";
            else if (!param || s->buf->ndim != 2 ||
                     (s->buf->dtype != DT_F32 && s->buf->dtype != DT_BF16 && !dtype_is_quant(s->buf->dtype)))
                m = "pack of other than an f32, bf16 or block-type matrix parameter";
            else if (s->dot && s->buf->dtype != DT_BF16) m = "pack for the bf16 dot product of non-bf16 weights";
            else if (s->smem < 0 || s->smem >= k->nsmem || k->smem[s->smem].b16) m = "pack into an undeclared array";
            else if (s->gn % (s->dot ? CPU_GEMM_DOT_NR : CPU_GEMM_NR)) m = "pack of a partial sliver";
            else if (s->run_rows < 1 || s->run_gap < 0) m = "pack in runs of no rows";
        }
        else if (s->k == TS_QDOT) {
            int64_t K;
            if (!k->task) m = "qdot outside a CPU task kernel";
            else if (!param || s->buf->ndim != 2 || !dtype_is_quant(s->buf->dtype)) m = "qdot of a non-block weight";
            else if (s->e->k != EX_LOAD || s->e->buf->dtype != DT_F32) m = "qdot of other than f32 activations";
            else if (!expr_is_const(s->lo, &K) || K % dtype_block[s->buf->dtype] || K > row)
                m = "qdot of partial blocks";
            else if (s->reg < 0 || s->reg >= k->nregs) m = "qdot into an undeclared register";
            else if (s->prefetch < 0 || s->prefetch % 64) m = "qdot prefetch not whole cache lines";
        }
        else if (s->k == TS_DOT16) {
            int64_t K;
            if (!k->task) m = "dot16 outside a CPU task kernel";
            else if (!param || s->buf->ndim != 2 || s->buf->dtype != DT_BF16) m = "dot16 of a non-bf16 weight";
            else if (s->e->k != EX_LOAD || s->e->buf->dtype != DT_F32 || s->e->buf->ndim != 2)
                m = "dot16 of other than a 2-d f32 activation";
            else if (!expr_is_const(s->lo, &K) || K > row || K > s->e->buf->dims[1]) m = "dot16 past a row";
            else if (s->gn < 1 || s->gn > 8 || !s->step) m = "dot16 of other than 1 to 8 rows";
            else if (s->smem < 0 || s->smem >= k->nsmem || k->smem[s->smem].b16 || !expr_is_const(s->sidx, &K) ||
                     K < 0 || K + s->gn > k->smem[s->smem].size)
                m = "dot16 past its scratch array";
            else if (s->prefetch < 0 || s->prefetch % 64) m = "dot16 prefetch not whole cache lines";
        }
        else if (s->k == TS_BDOT) {
            /* the runtime's block dot products: 32-element blocks, at most BDOT_MAX (8) of them */
            if (k->task) m = "bdot in a CPU task kernel";
            else if (!param || s->buf->ndim != 2 || !dtype_is_quant(s->buf->dtype) ||
                     (dtype_block[s->buf->dtype] != 32 && (dtype_block[s->buf->dtype] != 256 || s->group != 4)))
                m = "bdot of other than a weight of 32-element blocks or halves of super-blocks";
            else if (s->e->k != EX_LOAD || s->e->buf->dtype != DT_F32) m = "bdot of other than f32 activations";
            else if (s->vec < 1 || s->vec > 8 || !s->lo || (s->group != 1 && s->group != 2 && s->group != 4 &&
                     s->group != 8) || s->gn < 32 * s->group || s->gn % (32 * s->group))
                m = "bdot of other than 1..8 rounds of whole groups of blocks";
            else if (s->reg < 0 || s->reg >= k->nregs) m = "bdot into an undeclared register";
        }
        else if (s->k == TS_ASSIGN && (s->reg < 0 || s->reg >= k->nregs)) m = "assign to undeclared register";
        else if (s->k == TS_SSTORE && (s->smem < 0 || s->smem >= k->nsmem)) m = "store to undeclared shared array";
        else if (s->k == TS_STORE && !param) m = "store to a non-parameter";
        else if (s->k == TS_IF && s->e->t != T_BOOL) m = "if condition is not boolean";
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
/* the oldest n groups leave the list, their arrays added to *into */
static void retire(Region *r, int n, unsigned *into) {
    for (int j = 0; j < n; j++) *into |= r->grp[j];
    memmove(r->grp, r->grp + n, (size_t)(r->ng - n) * sizeof(unsigned));
    r->ng -= n;
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
                m = arena_printf(A, "smem%d is used while a cp.async into it may be pending (it needs wait_group, "
                                 "then a barrier)",
                                 lowest((u.rd | u.wr) & busy));
            else if (!m && u.cp & (region->rd | region->wr))
                m = arena_printf(A, "cp.async into smem%d, which is used with no barrier between",
                                 lowest(u.cp & (region->rd | region->wr)));
            region->rd |= u.rd; region->wr |= u.wr; region->open |= u.cp;
            if (s->barrier) { region->rd = region->wr = region->waited = 0; }
        } else if (s->k == KS_CP_COMMIT) {
            if (region->ng == 8) retire(region, 1, &region->grp[1]);   /* the oldest two as one */
            region->grp[region->ng++] = region->open;
            region->open = 0;
        } else if (s->k == KS_CP_WAIT) {
            if (s->wait_n < 0) m = "wait_group of a negative count";
            else if (region->ng > s->wait_n) retire(region, region->ng - s->wait_n, &region->waited);
        } else if (s->k == KS_MMA) {
            if (k->block % 32) m = "mma in a block that is not whole warps";
            for (int j = 0; !m && j < 4; j++)
                if (!reg_ok(k, s->ma[j], true) || !reg_ok(k, s->mc[j], false) || (j < 2 && !reg_ok(k, s->mb[j], true)))
                    m = "mma fragment register undeclared or of the wrong type";
        } else if (s->k == KS_LDMATRIX) {
            if (k->block % 32) m = "ldmatrix in a block that is not whole warps";
            else if (s->nmat != 1 && s->nmat != 2 && s->nmat != 4) m = "ldmatrix of other than 1, 2 or 4 matrices";
            else if (s->lsmem < 0 || s->lsmem >= k->nsmem || !k->smem[s->lsmem].b16)
                m = "ldmatrix from an undeclared or non-b16 shared array";
            else if (s->laddr->t != T_I64) m = "ldmatrix address is not an integer";
            for (int j = 0; !m && j < s->nmat; j++)
                if (!reg_ok(k, s->ldst[j], true)) m = "ldmatrix into an undeclared or non-b32 register";
            if (!m) m = ver_refs(A, k, s->laddr);
            unsigned bit = !m ? 1u << s->lsmem : 0;
            if (!m && region->wr & bit) m = "ldmatrix reads shared memory written with no barrier between";
            else if (!m && pending(region) & bit)
                m = arena_printf(A, "ldmatrix reads smem%d while a cp.async into it may be pending (it needs "
                                 "wait_group, then a barrier)", s->lsmem);
            region->rd |= bit;
        } else if (s->k == KS_SHFL) {
            /* shuffles are kernel statements, so every lane of every warp runs them (full mask) */
            int64_t a;
            if (k->block % 32) m = "shuffle in a block that is not whole warps";
            else if (s->dst < 0 || s->dst >= k->nregs || s->src < 0 || s->src >= k->nregs)
                m = "shuffle of an undeclared register";
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
        /* a CPU task is one thread's plain code: one phase, nothing that needs lanes */
        if (!m && k->task && (k->block != 1 || k->nbody != 1 || k->body[0]->k != KS_PHASE))
            m = "a CPU task kernel of more than one phase or thread";
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

/* ---- where a kernel reads pos ---- */
static bool expr_reads_pos(const Expr *e) { return expr_reads_param(e, P_POS); }
static bool tstmts_read_pos(TStmt *const *b, int n) {
    for (int i = 0; i < n; i++) {
        const Expr *e[TS_MAX_EXPRS];
        for (int j = 0, ne = ts_exprs(b[i], e); j < ne; j++) if (expr_reads_pos(e[j])) return true;
        if (tstmts_read_pos(b[i]->body, b[i]->nbody)) return true;
    }
    return false;
}
static bool kstmts_read_pos(KStmt *const *b, int n) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        if (tstmts_read_pos(s->body, s->nbody) || expr_reads_pos(s->arg) || expr_reads_pos(s->init) ||
            expr_reads_pos(s->cond) || expr_reads_pos(s->update) || expr_reads_pos(s->laddr) ||
            kstmts_read_pos(s->kbody, s->nk))
            return true;
    }
    return false;
}

bool kernel_reads_pos(const KKernel *k) { return kstmts_read_pos(k->body, k->nbody); }
