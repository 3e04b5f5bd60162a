/* gemm_tc.c: the gemm_tc schedule, tensor-core tiles for bf16- or f16-weight
 * linears when n > gemm_min_n: a block per bm x bn (tokens x outputs; 64 x
 * 64) tile, warps of 32x32, K in steps of bk staged to shared memory as the
 * weight's 16-bit type (stages > 1: a pipeline, W by cp.async, X by register
 * prefetch), ldmatrix + mma.sync m16n8k16 with f32 accumulation; the launch
 * plan runs it or the gemv (gemv.c) by n at run time. A pair nest (two
 * accumulators): the W tile holds 16 rows of one weight then 16 of the
 * other, so a warp's n-tiles 0,1 and 2,3 are the same outputs.
 * Tests: tests/test_mma.py (the primitives, the schedule and its faults), tests/test_ops.py (linear with
 * gemm_* knobs), tests/test_epilogues.py (pairs), tests/test_fullsize.py (real shapes, nvcc). */
#include "schedules/schedule.h"

/* registers: 32 f32 accumulators (2 x 4 mma tiles of 4), A fragments (2 x 4 .b32), B fragments (4 x 2),
 * then the pipeline's register prefetch of the next K step */
enum { GTC_R_ACC = 0, GTC_R_A = 32, GTC_R_B = 40, GTC_R_PREFETCH = 48 };

/* gemm_tc applies to y[t, o] = sum_k X(t, k) * W[o, k] (+ epilogue) with W a 16-bit weight, t the runtime
 * token axis and o the weight's row: the form tensor_ir.c gives every linear. */
static bool gemm_tc_term(const NestBody *b, Expr *term, bool any_dtype, Expr **xop, Expr **wop) {
    if (term->k != EX_MUL) return false;
    const Var *t = b->par[0].v, *o = b->par[1].v, *kv = b->red[0].v;
    for (int w = 0; w < 2; w++) {
        Expr *W = term->a[w], *X = term->a[1 - w];
        if (W->k != EX_LOAD || W->buf->kind != BUF_WEIGHT || W->nargs != 2) continue;
        /* any_dtype (the CPU's GEMM): f32 and the block types too */
        if (W->buf->dtype != DT_BF16 && W->buf->dtype != DT_F16 &&
            (!any_dtype || (W->buf->dtype != DT_F32 && !dtype_is_quant(W->buf->dtype))))
            continue;
        /* the weight's row a function of o alone (a pair's halves: of the flattened head and element) */
        if (!expr_uses_var(W->a[0], o) || expr_uses_var(W->a[0], t) || expr_uses_var(W->a[0], kv)) continue;
        if (W->a[1]->k != EX_VAR || W->a[1]->var != kv || expr_uses_var(X, o) || !expr_uses_var(X, t)) continue;
        *xop = X; *wop = W;
        return true;
    }
    return false;
}
/* a pair: one activation operand for both, weights of one dtype */
bool gemm_form(const NestBody *b, bool cpu, int64_t *K, Expr **xop, Expr **wop) {
    int64_t rows;
    if (b->npar != 2 || b->nred != 1 || b->side.buf || b->tail_store.buf || b->redop != RED_SUM) return false;
    if (!expr_is_const(b->red[0].extent, K)) return false;
    if ((!cpu && expr_is_const(b->par[0].extent, &rows)) || !expr_is_const(b->par[1].extent, &rows)) return false;
    for (int a = 0; a < b->nacc; a++) {
        Expr *x;
        if (!gemm_tc_term(b, b->acc[a], cpu, &x, &wop[a])) return false;
        if (a && (!expr_equal(x, *xop) || wop[1]->buf->dtype != wop[0]->buf->dtype)) return false;
        *xop = x;
    }
    return true;
}

/* Shared memory of a gemm_tc block: X and W tiles of [bm or bn][bk + 8] 16-bit, one per stage each. */
static int64_t gemm_tc_smem(const GemmTcParams *P) { return (int64_t)P->stages * (P->bm + P->bn) * (P->bk + 8) * 2; }
/* K step and pipeline depth: two stages (W by cp.async while the previous step computes) where W rows
 * are 16-byte aligned (K % 8 == 0) and there is more than one K step, else the one-stage schedule. A K
 * step of 64 halves the barriers but, pipelined, keeps 32 prefetched activations per thread in registers
 * (ptxas: 255 registers at sm_90, against 150 with 32): so 64 only for one stage and K >= 512, where its
 * padding does not matter. Pinned values are kept (stages up to the number of K steps). */
static void gemm_tc_tiles(TileKernel *g, const Knobs *kn, int64_t K) {
    GemmTcParams *P = &g->body.gemm;
    if (kn->gemm_bk && kn->gemm_bk < 16)
        die_user(NULL, "--knob", "gemm_bk must be 16, 32 or 64 (an mma covers 16 of K)");
    if ((kn->gemm_bm && kn->gemm_bm < 64) || (kn->gemm_bn && kn->gemm_bn < 64))
        die_user(NULL, "--knob", "gemm_bm and gemm_bn must be 64 or 128 (a warp computes 32 x 32, a block at least "
                 "4 warps)");
    /* a warp per 32 x 32 of the block tile */
    P->bm = kn->gemm_bm ? kn->gemm_bm : 64;
    P->bn = kn->gemm_bn ? kn->gemm_bn : 64;
    g->block = P->bm / 32 * (P->bn / 32) * 32;
    int step = kn->gemm_bk ? kn->gemm_bk : 32;
    P->stages = kn->gemm_stages ? kn->gemm_stages : (K % 8 == 0 && K > step) ? 2 : 1;
    P->bk = kn->gemm_bk ? kn->gemm_bk : P->stages == 1 && K >= 512 ? 64 : 32;
    /* no more stages than K steps: the others would be buffers never read */
    if (P->stages > (K + P->bk - 1) / P->bk) P->stages = (int)((K + P->bk - 1) / P->bk);
    /* only pinned values can miss: the defaults fit */
    if (gemm_tc_smem(P) > 48 * 1024)
        die_user(NULL, "--knob", "gemm_bm=%d gemm_bn=%d gemm_bk=%d gemm_stages=%d needs %lld bytes of shared memory "
                 "per block (49152 at most)", P->bm, P->bn, P->bk, P->stages, (long long)gemm_tc_smem(P));
    /* cp.async: 16-byte W rows, and every thread copies whole 16-byte chunks (not so for bm 128 with bk 16) */
    P->w_cp_async = P->stages > 1 && K % 8 == 0 && (int64_t)P->bn * P->bk / 8 % g->block == 0;
    /* X by 4-wide vector loads: a plain row load X[.., t, k] (its rows a multiple of 4 long, so aligned),
     * whole vectors per thread */
    const Expr *X = P->xop;
    const Var *kv = g->body.red[0].v;
    P->x_vec = P->stages > 1 && K % 4 == 0 && X->k == EX_LOAD && X->a[X->nargs - 1]->k == EX_VAR &&
               X->a[X->nargs - 1]->var == kv && X->buf->dims[X->buf->ndim - 1] % 4 == 0 &&
               (int64_t)P->bm * P->bk / g->block % 4 == 0 && g->block % (P->bk / 4) == 0;
    for (int d = 0; P->x_vec && d + 1 < X->nargs; d++) P->x_vec = !expr_uses_var(X->a[d], kv);
}

/* Only where a call can have more than gemm_min_n tokens (max_batch bounds n): prefill (n > gemm_min_n)
 * runs on the tensor cores, the gemv (made here too) for n <= gemm_min_n. */
int gemm_tc_choose(const ScheduleChoice *c, TileKernel *g, TileKernel **out) {
    Arena *A = c->A;
    const Knobs *kn = c->kn;
    const NestBody *b = &g->body;
    g->body = *c->shape;
    int64_t K, maxrows;
    /* not the tail's lm_head: its rows are decode tokens (a batch's rows must get what each gets alone) */
    if (!kn->gemm_tc || g->nest->op->tail || !gemm_form(&g->body, false, &K, &g->body.gemm.xop, g->body.gemm.wop) ||
        !eval_i(b->par[0].extent, c->tp->max_batch, c->tp->max_ctx, &maxrows) || maxrows <= kn->gemm_min_n)
        return 0;
    g->name = arena_printf(A, "%s_tc", g->nest->kname);
    g->kind = SCHED_GEMM_TC;
    gemm_tc_tiles(g, kn, K);
    g->grid = E_MUL(A, ceil_div(A, b->par[0].extent, b->gemm.bm), ceil_div(A, b->par[1].extent, b->gemm.bn / b->nacc));
    return with_fallback(c, g, kn->gemm_min_n, gemv_choose, out);
}
void gemm_tc_print(Str *o, const TileKernel *k) {
    const NestBody *b = &k->body;
    const GemmTcParams *P = &b->gemm;
    const char *h = P->wop[0]->buf->dtype == DT_F16 ? "f16" : "bf16";
    str_printf(o, " bm=%d bn=%d bk=%d stages=%d min_n=%d\n  block (bid/ceil(%s/%d), bid%%ceil(%s/%d)) -> [",
               P->bm, P->bn, P->bk, P->stages, k->min_n, b->par[0].v->name, P->bm, b->par[1].v->name, P->bn / b->nacc);
    print_axes(o, b->par, b->npar);
    str_printf(o, "] tile %dx%d, %d warps of 32x32; K [", P->bm, P->bn, k->block / 32);
    print_axes(o, b->red, b->nred);
    str_printf(o, "] in steps of %d staged to shared memory as %s (activations rounded to nearest even)", P->bk, h);
    if (P->stages > 1)
        str_printf(o, ", a %d-stage pipeline (W by %s, X by register prefetch one step ahead%s)", P->stages,
                   P->w_cp_async ? "16-byte cp.async copies" : "register prefetch",
                   P->x_vec ? ", 4-wide vector loads" : "");
    str_printf(o, ", ldmatrix.x4 + mma.m16n8k16 %s, f32 accumulation; runs when n > %d\n", h, k->min_n);
    if (b->nacc == 2)
        str_printf(o, "  a pair: the W tile is %d outputs of %s and of %s in alternating groups of 16 rows (a warp's "
                   "n-tiles 0,1 and 2,3 are the same outputs), %d store%s per output\n", P->bn / 2,
                   P->wop[0]->buf->name, P->wop[1]->buf->name, b->nstore, b->nstore > 1 ? "s" : "");
}
const char *gemm_tc_verify(const TileKernel *k) {
    const GemmTcParams *P = &k->body.gemm;
    if (k->body.nacc == 2 && !P->wop[1]) return "gemm_tc pair without its second weight";
    if ((P->bm != 64 && P->bm != 128) || (P->bn != 64 && P->bn != 128) || k->block != P->bm * P->bn / 32 ||
        (P->bk != 16 && P->bk != 32 && P->bk != 64) || P->stages < 1 || P->stages > 3 ||
        (P->w_cp_async && P->stages < 2) || !P->xop || !P->wop[0])
        return "gemm_tc parameters";
    int64_t K = k->body.red[0].extent->i;
    if (P->x_vec && (P->stages < 2 || K % 4 || P->bm * P->bk / k->block % 4 || k->block % (P->bk / 4)))
        return "gemm_tc X vectors";
    return gemm_tc_smem(P) > 48 * 1024 ? "gemm_tc shared memory over 48 KiB" : NULL;
}

/* ---- kernel IR ---- */
/* Block (bid / nbo, bid % nbo) computes tokens bm*BM.. x outputs bo*BN..; warp w the 32x32 piece
 * (w / (BN/32), w % (BN/32)): 2 x 4 mma tiles of 16x8. X and W tiles are [BM or BN][bk + 8] uint16 (rows
 * 16-byte aligned for ldmatrix, the pad spreads the rows over banks), zero outside n, M and K; per 16 of
 * K: ldmatrix.x4 of each A tile and of each pair of B tiles, 8 mma. One stage (smem0 X, smem1 W): per K
 * step a barrier phase stages both, the mma, an empty barrier phase before the next step overwrites them.
 * S > 1 stages (smem0..S-1 X, smem S..2S-1 W): see gemm_tc_pipeline. */
typedef struct {
    KernelBuilder *B;
    const TileKernel *t;
    const GemmTcParams *P;
    Expr *t0, *o0;             /* the block's first token and first output (uniform) */
    Expr *lane, *wm, *wn;      /* the thread's lane; its warp's row and column of 32x32 pieces */
    Expr *rows;                /* tokens: the extent of the token axis (n) */
    int64_t K, M;              /* the reduction and output extents */
    int BK, LD;                /* K step; shared row length in elements (BK + 8) */
    bool pair;                 /* two weights interleaved in the W tile */
    bool swap;                 /* debug_pair_swap: a pair's weights staged in each other's rows */
    bool f16;                  /* f16 operands (else bf16) */
} TcTile;

/* The output a W tile row r holds: o0 + r; for a pair, rows 32i..32i+15 are outputs 16i.. of the first
 * weight and rows 32i+16..32i+31 the same outputs of the second (slot (r / 16) % 2). */
static Expr *gtc_wrow(Arena *A, const TcTile *G, Expr *r) {
    if (!G->pair) return E_ADD(A, G->o0, r);
    return E_ADD(A, G->o0, E_ADD(A, E_MUL(A, idiv(A, r, 32), e_i(A, 16)), imod(A, r, 16)));
}
static Expr *gtc_slot1(Arena *A, Expr *r) { return lt(A, e_i(A, 15), imod(A, r, 32)); }
/* e (an operand or one of X's indices) with the token (axis 0) or output (axis 1) at `at`, K at kk */
static Expr *gtc_at(Arena *A, const TcTile *G, Expr *e, int axis, Expr *at, Expr *kk) {
    return expr_subst(A, expr_subst(A, e, G->t->body.par[axis].v, at), G->t->body.red[0].v, kk);
}
/* the element of operand w (0: X, 1: W) at tile row r, K column kk */
static Expr *gtc_value(Arena *A, const TcTile *G, int w, Expr *r, Expr *kk) {
    if (!w) return gtc_at(A, G, G->P->xop, 0, E_ADD(A, G->t0, r), kk);
    Expr *o = gtc_wrow(A, G, r), *ws[2] = {gtc_at(A, G, G->P->wop[0], 1, o, kk), NULL};
    if (!G->pair) return ws[0];
    ws[1] = gtc_at(A, G, G->P->wop[1], 1, o, kk);
    return e_select(A, gtc_slot1(A, r), ws[!G->swap], ws[G->swap]);
}
/* then[0..n), only where operand w's row r and column kk are inside */
static TStmt *gtc_guard(Arena *A, const TcTile *G, int w, Expr *r, Expr *kk, TStmt *const *then, int n) {
    TStmt *in1 = ts_if(A, lt(A, w ? gtc_wrow(A, G, r) : E_ADD(A, G->t0, r), w ? e_i(A, G->M) : G->rows), 1);
    TStmt *in2 = ts_if(A, lt(A, kk, e_i(A, G->K)), n);
    for (int i = 0; i < n; i++) ts_add(in2, then[i]);
    ts_add(in1, in2);
    return in1;
}

/* thread tid stages elements tid, tid + block, ... of operand w's tile at K offset kt into sm */
static TStmt *gtc_stage(const TcTile *G, int w, int sm, Expr *kt) {
    Arena *A = G->B->A;
    Var *ev = new_var(A, G->B->nvars, w ? "eb" : "ea");
    TStmt *f = ts_for(A, ev, tid(A), e_i(A, (w ? G->P->bn : G->P->bm) * G->BK), e_i(A, G->t->block), 2);
    Expr *r = idiv(A, e_var(A, ev), G->BK), *c = imod(A, e_var(A, ev), G->BK);
    Expr *sidx = E_ADD(A, E_MUL(A, r, e_i(A, G->LD)), c), *kk = E_ADD(A, kt, c);
    ts_add(f, ts_sstore(A, sm, sidx, e_f(A, 0.0)));
    ts_add(f, gtc_guard(A, G, w, r, kk, (TStmt *[]){ts_sstore(A, sm, sidx, gtc_value(A, G, w, r, kk))}, 1));
    return f;
}

/* registers operand w's register prefetch takes per thread */
static int gtc_nregs(const TileKernel *t, int w) {
    const GemmTcParams *P = &t->body.gemm;
    return (w ? P->bn : P->bm) * P->bk / t->block;
}

/* Register prefetch (store == false) of operand w's tile at kt into r0.., or the store of those registers
 * into sm (rounding to 16 bits): thread tid holds rows tid/(BK/v) + j*(block/(BK/v)), columns
 * v*(tid % (BK/v)) ..+v-1, with v = 4 for X with x_vec (one vector load each; K % 4 == 0, so a vector is
 * all inside K or all outside), else 1. */
static void gtc_regs(const TcTile *G, int w, int r0, Expr *kt, int sm, bool store, TStmt **out, int *n) {
    Arena *A = G->B->A;
    const TileKernel *t = G->t;
    const Expr *X = G->P->xop;
    const int v = !w && G->P->x_vec ? 4 : 1, cpr = G->BK / v;
    Var *rv = new_var(A, G->B->nvars, "pr"), *cv = new_var(A, G->B->nvars, "pc");
    out[(*n)++] = ts_let(A, rv, idiv(A, tid(A), cpr));
    out[(*n)++] = ts_let(A, cv, E_MUL(A, imod(A, tid(A), cpr), e_i(A, v)));
    for (int j = 0; j < gtc_nregs(t, w) / v; j++) {
        Expr *r = E_ADD(A, e_var(A, rv), e_i(A, j * (t->block / cpr)));
        if (store) {
            for (int i = 0; i < v; i++) {
                Expr *si = E_ADD(A, E_MUL(A, r, e_i(A, G->LD)), E_ADD(A, e_var(A, cv), e_i(A, i)));
                out[(*n)++] = ts_sstore(A, sm, si, reg(A, r0 + v * j + i));
            }
            continue;
        }
        Expr *kk = E_ADD(A, kt, e_var(A, cv));
        for (int i = 0; i < v; i++) out[(*n)++] = ts_assign(A, r0 + v * j + i, e_f(A, 0.0));
        if (v == 1) {
            out[(*n)++] = gtc_guard(A, G, w, r, kk, (TStmt *[]){ts_assign(A, r0 + j, gtc_value(A, G, w, r, kk))}, 1);
            continue;
        }
        TStmt *vl = ts(A, TS_VLOAD), *ld[5] = {vl};
        vl->v = new_var(A, G->B->nvars, "xv"); vl->vec = 4; vl->buf = X->buf;
        vl->idx = ARENA_ARRAY(A, Expr *, X->nargs);
        for (int d = 0; d < X->nargs; d++) vl->idx[d] = gtc_at(A, G, X->a[d], 0, E_ADD(A, G->t0, r), kk);
        for (int i = 0; i < 4; i++) ld[1 + i] = ts_assign(A, r0 + 4 * j + i, e_velem(A, vl->v, i));
        out[(*n)++] = gtc_guard(A, G, 0, r, kk, ld, 5);
    }
}

/* W's tile at kt by 16-byte cp.async copies (8 elements; K % 8 == 0, so a copy is all inside K or all
 * outside): thread tid copies chunk rows tid/(BK/8) + j*(block/(BK/8)), column 8*(tid % (BK/8)); a copy
 * outside M or K zero-fills its destination (a pair: each chunk's row is one weight's; the copy from the
 * other is skipped, two statements per chunk) */
static void gtc_cp_w(const TcTile *G, int sm, Expr *kt, TStmt **out, int *n) {
    Arena *A = G->B->A;
    const TileKernel *t = G->t;
    int cpr = G->BK / 8, nch = G->P->bn * cpr / t->block;
    Var *rv = new_var(A, G->B->nvars, "cr"), *cv = new_var(A, G->B->nvars, "cc");
    out[(*n)++] = ts_let(A, rv, idiv(A, tid(A), cpr));
    out[(*n)++] = ts_let(A, cv, E_MUL(A, imod(A, tid(A), cpr), e_i(A, 8)));
    for (int j = 0; j < nch; j++) {
        Expr *r = E_ADD(A, e_var(A, rv), e_i(A, j * (t->block / cpr))), *o = gtc_wrow(A, G, r);
        Expr *kk = E_ADD(A, kt, e_var(A, cv));
        for (int w = 0; w < (G->pair ? 2 : 1); w++) {
            Expr *W = G->P->wop[w != G->swap];
            TStmt *s = ts(A, TS_CP_ASYNC);
            s->vec = 16; s->smem = sm; s->sidx = E_ADD(A, E_MUL(A, r, e_i(A, G->LD)), e_var(A, cv));
            s->buf = W->buf; s->idx = ARENA_ARRAY(A, Expr *, 2);
            s->idx[0] = expr_subst(A, W->a[0], t->body.par[1].v, o); s->idx[1] = kk;
            /* o < M and kk < K */
            s->e = lt(A, e_bin(A, EX_MAX, E_SUB(A, o, e_i(A, G->M)), E_SUB(A, kk, e_i(A, G->K))), e_i(A, 0));
            TStmt *in = G->pair ? ts_if(A, w ? gtc_slot1(A, r) : lt(A, imod(A, r, 32), e_i(A, 16)), 1) : NULL;
            if (in) ts_add(in, s);
            out[(*n)++] = in ? in : s;
        }
    }
}

static KStmt *kmma(const TcTile *G, const int *a, const int *b, const int *c) {
    KStmt *s = ARENA_NEW(G->B->A, KStmt);
    s->k = KS_MMA;
    memcpy(s->ma, a, sizeof s->ma); memcpy(s->mb, b, sizeof s->mb); memcpy(s->mc, c, sizeof s->mc);
    s->mf16 = G->f16;
    /* the deliberate fault: two A fragment registers trade places, so rows g and g+8 of k 0..7 / 8..15 mix */
    if (G->B->kn->debug_mma_layout) { s->ma[1] = a[2]; s->ma[2] = a[1]; }
    return s;
}
static KStmt *kldm(Arena *A, int nmat, int dst0, int sm, Expr *addr) {
    KStmt *s = ARENA_NEW(A, KStmt);
    s->k = KS_LDMATRIX; s->nmat = nmat; s->lsmem = sm; s->laddr = addr;
    for (int i = 0; i < nmat; i++) s->ldst[i] = dst0 + i;
    return s;
}
/* per 16 of K: A tiles from smem xs, B tiles from ws, 8 mma */
static void gtc_mma(const TcTile *G, KList *ub, int xs, int ws) {
    Arena *A = G->B->A;
    Expr *lane = G->lane, *wm = G->wm, *wn = G->wn;
    for (int ks = 0; ks < G->BK; ks += 16) {
        for (int mt = 0; mt < 2; mt++) {
            /* lanes 0..15: rows 0..15 at k 0; lanes 16..31: rows 0..15 at k 8 */
            Expr *row = E_ADD(A, E_ADD(A, E_MUL(A, wm, e_i(A, 32)), e_i(A, mt * 16)), imod(A, lane, 16));
            Expr *col = E_ADD(A, e_i(A, ks), E_MUL(A, idiv(A, lane, 16), e_i(A, 8)));
            kl_add(A, ub, kldm(A, 4, GTC_R_A + mt * 4, xs, E_ADD(A, E_MUL(A, row, e_i(A, G->LD)), col)));
        }
        for (int np = 0; np < 2; np++) {
            /* matrix i = lane / 8: outputs +8*(i/2), k +8*(i%2): b[0], b[1] of n-tile 2np, then of 2np+1 */
            Expr *mi = idiv(A, lane, 8);
            Expr *r0 = E_ADD(A, E_MUL(A, wn, e_i(A, 32)), e_i(A, np * 16));
            Expr *row = E_ADD(A, E_ADD(A, r0, E_MUL(A, idiv(A, mi, 2), e_i(A, 8))), imod(A, lane, 8));
            Expr *col = E_ADD(A, e_i(A, ks), E_MUL(A, imod(A, mi, 2), e_i(A, 8)));
            kl_add(A, ub, kldm(A, 4, GTC_R_B + np * 4, ws, E_ADD(A, E_MUL(A, row, e_i(A, G->LD)), col)));
        }
        for (int mt = 0; mt < 2; mt++)
            for (int nt = 0; nt < 4; nt++) {
                int a[4], b[2] = {GTC_R_B + nt * 2, GTC_R_B + nt * 2 + 1}, c[4];
                for (int q = 0; q < 4; q++) { a[q] = GTC_R_A + mt * 4 + q; c[q] = GTC_R_ACC + (mt * 4 + nt) * 4 + q; }
                kl_add(A, ub, kmma(G, a, b, c));
            }
    }
}

/* the wait that leaves the newest S - 2 groups (steps i+2 .. i+S-1) in flight; debug_cp_async: one more */
static KStmt *gtc_wait(const TcTile *G) {
    return cp_sync(G->B->A, KS_CP_WAIT, G->P->stages - 2 + G->B->kn->debug_cp_async);
}

/* One K step i of the pipeline at kt, reading stage b = i % S:
 *   [cp.async W(i+S-1) -> stage (i-1) % S, read in step i-1 before its barrier; commit]
 *   prefetch X(i+1) (and W(i+1) without cp.async) into registers   -- in flight during the mma
 *   ldmatrix + mma from stage b
 *   [wait_group S-2: W(i+1) has landed]
 *   barrier phase: the registers -> stage (i+1) % S, last read in step i+1-S (before a barrier)
 * Copies and loads past K (the last S-1 steps' look-ahead) are zero-filled and never read. */
static void gtc_step(const TcTile *G, KList *ub, Expr *kt, int b) {
    Arena *A = G->B->A;
    const TileKernel *t = G->t;
    const bool cp = G->P->w_cp_async;
    int S = G->P->stages, nb = (b + 1) % S, wb = (b + S - 1) % S, nx = gtc_nregs(t, 0), nw = gtc_nregs(t, 1);
    int cap = 8 + 2 * (nx + nw) + 2 * G->P->bn * G->BK / 8 / t->block;
    TStmt **p = tlist(A, cap);
    int n = 0;
    if (cp) gtc_cp_w(G, S + wb, E_ADD(A, kt, e_i(A, (S - 1) * G->BK)), p, &n);
    gtc_regs(G, 0, GTC_R_PREFETCH, E_ADD(A, kt, e_i(A, G->BK)), 0, false, p, &n);
    if (!cp) gtc_regs(G, 1, GTC_R_PREFETCH + nx, E_ADD(A, kt, e_i(A, G->BK)), 0, false, p, &n);
    CHECK(n <= cap, "gemm_tc step");
    kl_add(A, ub, phase(A, p, n, false));
    if (cp) kl_add(A, ub, cp_sync(A, KS_CP_COMMIT, 0));
    gtc_mma(G, ub, b, S + b);
    if (cp) kl_add(A, ub, gtc_wait(G));
    TStmt **q = tlist(A, 4 + nx + nw);
    n = 0;
    gtc_regs(G, 0, GTC_R_PREFETCH, NULL, nb, true, q, &n);
    if (!cp) gtc_regs(G, 1, GTC_R_PREFETCH + nx, NULL, S + nb, true, q, &n);
    kl_add(A, ub, phase(A, q, n, true));
}

/* S > 1 stages: the prologue puts steps 0..S-2 of W in flight (cp.async, one group each) and stages X(0)
 * (and W(0) without cp.async) directly; then ceil(K/BK) steps (gtc_step), unrolled by S so that every
 * stage is its own shared array: a uniform loop over whole rounds of S steps, the last K % (S*BK) steps
 * after it. */
static void gemm_tc_pipeline(const TcTile *G, KList *body) {
    Arena *A = G->B->A;
    const bool cp = G->P->w_cp_async;
    int S = G->P->stages;
    int64_t T = (G->K + G->BK - 1) / G->BK, rounds = T / S;
    for (int s = 0; cp && s + 1 < S; s++) {
        TStmt **p = tlist(A, 2 + 2 * G->P->bn * G->BK / 8 / G->t->block);
        int n = 0;
        gtc_cp_w(G, S + s, e_i(A, s * G->BK), p, &n);
        kl_add(A, body, phase(A, p, n, false));
        kl_add(A, body, cp_sync(A, KS_CP_COMMIT, 0));
    }
    TStmt *x0 = gtc_stage(G, 0, 0, e_i(A, 0));
    kl_phase(A, body, !cp, cp ? 1 : 2, x0, cp ? NULL : gtc_stage(G, 1, S, e_i(A, 0)));
    if (cp) {
        kl_add(A, body, gtc_wait(G));
        kl_phase(A, body, true, 0);
    }
    if (rounds) {
        Var *kt = new_var(A, G->B->nvars, "kt");
        KList ub = {0};
        for (int s = 0; s < S; s++) gtc_step(G, &ub, E_ADD(A, e_var(A, kt), e_i(A, s * G->BK)), s);
        kl_ufor(A, body, kt, e_i(A, 0), e_i(A, rounds * S * G->BK), e_i(A, S * G->BK), &ub);
    }
    for (int s = 0; s < T % S; s++) gtc_step(G, body, e_i(A, (rounds * S + s) * G->BK), s);
    /* the look-ahead copies past K: none left in flight when the block exits */
    if (cp) kl_add(A, body, cp_sync(A, KS_CP_WAIT, 0));
}

void gemm_tc_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const GemmTcParams *P = &t->body.gemm;
    int64_t K, M;
    CHECK(expr_is_const(t->body.red[0].extent, &K) && expr_is_const(t->body.par[1].extent, &M), "gemm_tc extents");
    const int BM = P->bm, BN = P->bn, BK = P->bk, LD = BK + 8, S = P->stages;
    /* a pair's block computes BN / 2 outputs of both weights */
    const int BO = t->body.nacc == 2 ? BN / 2 : BN;
    int64_t nbo = (M + BO - 1) / BO;
    /* name_indices: in the K loop's copies and fragments a name kept registers live (gate/up 96 -> 128 on
     * Qwen2.5-7B), in the epilogue it did not, except where an element has two stores (RoPE's halves: q 124 -> 126,
     * k 120 -> 124); scripts/ptxas_report */
    k->name_epilogue_only = true;
    k->name_none = t->body.nstore > 1;
    k->nregs = GTC_R_PREFETCH + (S > 1 ? gtc_nregs(t, 0) + (P->w_cp_async ? 0 : gtc_nregs(t, 1)) : 0);
    CHECK(k->nregs <= (int)(sizeof k->regs / sizeof k->regs[0]), "gemm_tc registers");
    for (int i = 0; i < k->nregs; i++) { k->regs[i].t = T_F32; k->regs[i].b32 = i >= GTC_R_A && i < GTC_R_PREFETCH; }
    k->nsmem = 2 * S;
    /* f16 weights: the tiles hold halves (X rounded to f16) and the mma multiplies f16 */
    bool f16 = P->wop[0]->buf->dtype == DT_F16;
    for (int i = 0; i < 2 * S; i++) k->smem[i] = (SmemDecl){(i < S ? BM : BN) * LD, true, f16, false};
    /* uniform: the block's tile origin */
    Expr *lane = imod(A, tid(A), 32), *warp = idiv(A, tid(A), 32);
    TcTile G = {B, t, P, E_MUL(A, idiv(A, bid(A), nbo), e_i(A, BM)), E_MUL(A, imod(A, bid(A), nbo), e_i(A, BO)), lane,
                idiv(A, warp, BN / 32), imod(A, warp, BN / 32), t->body.par[0].extent, K, M, BK, LD, t->body.nacc == 2,
                /* a pair's fault only: a single linear has no second weight to swap in */
                t->body.nacc == 2 && B->kn->debug_pair_swap != 0, f16};
    TStmt **p0 = tlist(A, 32);
    for (int i = 0; i < 32; i++) p0[i] = ts_assign(A, GTC_R_ACC + i, e_f(A, 0.0));
    kl_add(A, body, phase(A, p0, 32, false));
    if (S > 1) gemm_tc_pipeline(&G, body);
    else {
        /* ufor kt = 0; kt < K; kt += BK { stage X, W; barrier; mma; barrier } */
        Var *kt = new_var(A, B->nvars, "kt");
        KList ub = {0};
        TStmt **ps = tlist(A, 2);
        for (int w = 0; w < 2; w++) ps[w] = gtc_stage(&G, w, w, e_var(A, kt));
        kl_add(A, &ub, phase(A, ps, 2, true));
        gtc_mma(&G, &ub, 0, 1);
        kl_phase(A, &ub, true, 0);
        kl_ufor(A, body, kt, e_i(A, 0), e_i(A, K), e_i(A, BK), &ub);
    }
    /* epilogue: accumulator q of tile (mt, nt) is C[g + 8(q/2)][2t + q%2]; a pair's n-tiles nt and nt + 2
     * (nt < 2) hold the two weights' values of the same outputs, 16 per warp */
    TStmt **pe = tlist(A, 32);
    int npe = 0, NT = G.pair ? 2 : 4, WO = G.pair ? 16 : 32;
    Expr *gq = idiv(A, lane, 4), *tq = imod(A, lane, 4);
    for (int mt = 0; mt < 2; mt++)
        for (int nt = 0; nt < NT; nt++)
            for (int q = 0; q < 4; q++) {
                Expr *row = E_ADD(A, E_ADD(A, G.t0, E_MUL(A, G.wm, e_i(A, 32))),
                                  E_ADD(A, e_i(A, mt * 16 + 8 * (q / 2)), gq));
                Expr *col = E_ADD(A, E_ADD(A, G.o0, E_MUL(A, G.wn, e_i(A, WO))),
                                  E_ADD(A, e_i(A, nt * 8 + q % 2), E_MUL(A, tq, e_i(A, 2))));
                TStmt *i1 = ts_if(A, lt(A, row, G.rows), 1), *i2 = ts_if(A, lt(A, col, e_i(A, M)), 4);
                ts_add(i2, ts_let(A, t->body.par[0].v, row));
                ts_add(i2, ts_let(A, t->body.par[1].v, col));
                Expr *a0 = reg(A, GTC_R_ACC + (mt * 4 + nt) * 4 + q);
                Expr *a1 = reg(A, GTC_R_ACC + (mt * 4 + nt + 2) * 4 + q);
                i2->nbody += epi_stores(A, &t->body, a0, a1, i2->body + i2->nbody);
                ts_add(i1, i2);
                pe[npe++] = i1;
            }
    kl_add(A, body, phase(A, pe, npe, false));
}
