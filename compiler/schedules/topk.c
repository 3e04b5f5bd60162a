/* topk.c: the top_k and top_k_merge schedules. top_k: a block per (row,
 * chunk of the row): each thread keeps the best element of its strided
 * part that is below the last one it gave; k rounds of a block argmax (warp
 * shuffles, one (value, index) per warp in shared memory) each emit the
 * block's next element, the winning thread rescans its part. With several
 * chunks each writes its k to a workspace and top_k_merge, a block per row:
 * thread c holds chunk c's sorted list and offers its head; k rounds of the
 * same block argmax.
 * Tests: tests/test_topk.py (orders, ties, NaN, chunking, the sampler's top-k, debug_topk_order). */
#include "schedules/schedule.h"

/* (value, index) pairs in a total order, larger value first, then the smaller index (debug_topk_order: the
 * larger). Registers: the block argmax's four (schedule.h), the thread's candidate, the last pair it gave,
 * the element in hand (top_k_merge: the position in the thread's sorted list, whose head is its candidate,
 * in place of the last pair given). A thread's candidate is its best element after the last given; (-inf,
 * TOPK_NONE) when it has none, which every real element beats. Each round: the block argmax of the
 * candidates, broadcast from lane 0; thread 0 stores it; the thread whose candidate it was scans its
 * elements again. Two barriers per round: after the warp values' shared stores, and before the next
 * round's. */
enum {
    TOPK_R_CAND_VAL = ARGMAX_NREGS, TOPK_R_CAND_IDX, TOPK_R_GIVEN_VAL, TOPK_R_GIVEN_IDX, TOPK_R_ELEM_VAL,
    TOPK_R_ELEM_IDX, TOPK_NREGS, TOPK_R_POS = TOPK_R_GIVEN_VAL
};
#define TOPK_NONE 1073741824.0   /* 2^30: past every index (at most 2^24) */

/* Chunks: one per 1024 elements of the row, at most 128 (about a block per SM, each thread a few
 * elements); rows of 4096 or fewer in one. */
int topk_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out) {
    if (!c->leaf || c->leaf->k != LS_TOPK) return 0;
    Arena *A = c->A;
    const Knobs *kn = c->kn;
    const TOp *op = c->leaf->topk;
    TopkParams *P = &k->topk;
    int64_t len = op->raxes[0].extent->i;
    int64_t C = kn->topk_chunks ? kn->topk_chunks : len <= 4096 ? 1 : min_i(128, (len + 1023) / 1024);
    C = min_i(C, len);
    k->kind = SCHED_TOPK; P->op = op;
    P->nrow = c->shape->npar; memcpy(P->row, c->shape->par, sizeof P->row);
    P->chunk = (len + C - 1) / C;
    P->chunks = (int)((len + P->chunk - 1) / P->chunk);   /* none empty */
    k->block = pow2_block(min_i(P->chunk, kn->reduce_block_max));
    k->grid = E_MUL(A, c->total, e_i(A, P->chunks));
    out[0] = k;
    if (P->chunks == 1) return 1;
    const LoopNest *nest = k->nest;
    k->name = arena_printf(A, "%s_chunks", nest->kname);
    int64_t r;
    CHECK(expr_is_const(c->total, &r), "top_k %s: rows are not static", nest->module);
    P->work = work_buffer(A, nest->kname, "chunks", r * P->chunks, 2 * op->topk_max);
    out[1] = second_kernel(A, k, SCHED_TOPK_MERGE, nest->kname, pow2_block(P->chunks), c->total);
    return 2;
}

void topk_print(Str *o, const TileKernel *k) {
    const TopkParams *P = &k->topk;
    const TOp *t = P->op;
    bool merge = k->kind == SCHED_TOPK_MERGE;
    str_printf(o, " chunks=%d chunk=%lld\n", P->chunks, (long long)P->chunk);
    if (!merge) str_printf(o, "  block bid -> (row [bid/%d of ", P->chunks);
    else str_printf(o, "  block bid -> (row [bid of ");
    print_axes(o, P->row, P->nrow);
    if (!merge)
        str_printf(o, "], chunk bid%%%d of %lld of [%s<%lld>]); thread -> the chunk's elements tid, tid+%d, ..: "
                   "its best below the last it gave\n", P->chunks, (long long)P->chunk, t->raxes[0].v->name,
                   (long long)t->raxes[0].extent->i, k->block);
    else
        str_printf(o, "]); thread c < %d -> the head of chunk c's list in %s\n", P->chunks, P->work->name);
    str_printf(o, "  k = ");
    expr_print(o, t->topk_count);
    if (t->topk_count->k == EX_PARAM) str_printf(o, " (model_topk runs these kernels with n = its k)");
    str_printf(o, " rounds (at most %lld) of a block argmax (shfl_down trees%s, shfl_idx from lane 0); "
               "thread 0 stores the round's (value, index) to %s; the winner %s\n", (long long)t->topk_max,
               k->block > 32 ? ", a (value, index) per warp in shared memory" : "",
               !merge && P->work ? P->work->name : t->out->name, !merge ? "rescans its elements" : "moves to its next");
}
const char *topk_verify(const TileKernel *k) {
    const TopkParams *P = &k->topk;
    bool merge = k->kind == SCHED_TOPK_MERGE;
    if (!P->op || P->chunks < 1 || (int64_t)P->chunks * P->chunk < P->op->raxes[0].extent->i ||
        (P->chunks > 1) != (P->work != NULL) || (merge && (P->chunks > k->block || !P->work)) ||
        (P->work && P->work->dims[1] != 2 * P->op->topk_max))
        return "top_k parameters";
    return NULL;
}

/* What a thread offers: its elements e = lo; e < hi; e += step (top_k), whose value and index are read
 * after the lets pre, or the head of its list (top_k_merge) */
typedef struct {
    KernelBuilder *B;
    bool merge;
    Var *e;
    Expr *lo, *hi, *step;      /* top_k: the thread's elements */
    Expr *value, *index;       /* top_k: of element e; top_k_merge: of the list's head */
    TStmt **pre; int npre;     /* top_k: the lets value reads */
    int64_t lists;             /* top_k_merge: threads with a list (chunks) */
    Expr *count;               /* top_k_merge: elements per list */
} TopkSource;

static Expr *e_or(Arena *A, Expr *x, Expr *y) { return e_select(A, x, x, y); }
static Expr *e_and(Arena *A, Expr *x, Expr *y) { return e_select(A, x, y, x); }
/* (v, i) comes before (w, j) */
static Expr *topk_before(KernelBuilder *B, Expr *v, Expr *i, Expr *w, Expr *j) {
    Arena *A = B->A;
    Expr *tie = B->kn->debug_topk_order ? lt(A, j, i) : lt(A, i, j);
    return e_or(A, lt(A, w, v), e_and(A, eq(A, v, w), tie));
}
/* The thread's next candidate, into `into`: the pair given (top_k: the candidate, or (+inf, -1) before
 * the first round) or the list's position advanced (top_k_merge: 0 before the first round); then top_k:
 * the best of its elements after the last given; top_k_merge: the head of thread tid's list, or (-inf,
 * TOPK_NONE) past its end or for a thread with no list (tid >= lists). */
static void topk_next(const TopkSource *s, TStmt *into, bool first) {
    Arena *A = s->B->A;
    Expr *cv = reg(A, TOPK_R_CAND_VAL), *ci = reg(A, TOPK_R_CAND_IDX);
    if (s->merge) {
        ts_add(into, ts_assign(A, TOPK_R_POS, first ? e_f(A, 0.0) : E_ADD(A, reg(A, TOPK_R_POS), e_f(A, 1.0))));
    } else {
        ts_add(into, ts_assign(A, TOPK_R_GIVEN_VAL, first ? e_f(A, 1.0 / 0.0) : cv));
        ts_add(into, ts_assign(A, TOPK_R_GIVEN_IDX, first ? e_f(A, -1.0) : ci));
    }
    ts_add(into, ts_assign(A, TOPK_R_CAND_VAL, e_f(A, -1.0 / 0.0)));
    ts_add(into, ts_assign(A, TOPK_R_CAND_IDX, e_f(A, TOPK_NONE)));
    TStmt *in;
    if (s->merge) {
        Expr *has = lt(A, e_un(A, EX_TOI, reg(A, TOPK_R_POS)), s->count);
        in = ts_if(A, e_and(A, lt(A, tid(A), e_i(A, s->lists)), has), 2);
        ts_add(in, ts_assign(A, TOPK_R_CAND_VAL, s->value));
        ts_add(in, ts_assign(A, TOPK_R_CAND_IDX, s->index));
    } else {
        TStmt *f = ts_for(A, s->e, s->lo, s->hi, s->step, s->npre + 3);
        for (int i = 0; i < s->npre; i++) ts_add(f, s->pre[i]);
        ts_add(f, ts_assign(A, TOPK_R_ELEM_VAL, s->value));
        ts_add(f, ts_assign(A, TOPK_R_ELEM_IDX, s->index));
        Expr *ev = reg(A, TOPK_R_ELEM_VAL), *ei = reg(A, TOPK_R_ELEM_IDX);
        Expr *after = topk_before(s->B, reg(A, TOPK_R_GIVEN_VAL), reg(A, TOPK_R_GIVEN_IDX), ev, ei);
        in = ts_if(A, e_and(A, after, topk_before(s->B, ev, ei, cv, ci)), 2);
        ts_add(in, ts_assign(A, TOPK_R_CAND_VAL, ev));
        ts_add(in, ts_assign(A, TOPK_R_CAND_IDX, ei));
        ts_add(f, in);
        in = f;
    }
    ts_add(into, in);
}
void topk_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const TopkParams *P = &t->topk;
    const TOp *op = P->op;
    const bool merge = t->kind == SCHED_TOPK_MERGE, chunked = P->chunks > 1;
    const int64_t C = P->chunks, CH = P->chunk, len = op->raxes[0].extent->i, KM = op->topk_max;
    const int nw = t->block / 32;
    const ExprKind tie = B->kn->debug_topk_order ? EX_MAX : EX_MIN;
    declare_regs(k, merge ? TOPK_R_POS + 1 : TOPK_NREGS);
    if (nw > 1) { k->nsmem = 1; k->smem[0].size = 2 * nw; }
    Expr *row = chunked && !merge ? ulet(B, body, "row", idiv(A, bid(A), C)) : bid(A);
    TStmt *pre[MAX_AXES + 1];
    TopkSource src = {.B = B, .merge = merge, .e = new_var(A, B->nvars, "e"), .pre = pre, .lists = C,
                      .count = op->topk_count};
    if (!merge) {
        Expr *c0 = chunked ? ulet(B, body, "lo", E_MUL(A, imod(A, bid(A), C), e_i(A, CH))) : e_i(A, 0);
        src.lo = E_ADD(A, c0, tid(A));
        src.hi = chunked ? ulet(B, body, "hi", emin(A, E_ADD(A, c0, e_i(A, CH)), e_i(A, len))) : e_i(A, len);
        src.step = e_i(A, t->block);
        src.npre = decompose(A, pre, P->row, P->nrow, row);
        pre[src.npre++] = ts_let(A, op->raxes[0].v, e_var(A, src.e));
        /* NaN counts as -inf */
        src.value = e_select(A, eq(A, op->body, op->body), op->body, e_f(A, -1.0 / 0.0));
        src.index = e_un(A, EX_TOF, e_var(A, src.e));
    } else {
        /* thread c < C: chunk c's list, sorted; the position of its head (a small integer in an f32) */
        Expr *list = E_ADD(A, E_MUL(A, row, e_i(A, C)), tid(A)), *at = e_un(A, EX_TOI, reg(A, TOPK_R_POS));
        src.value = e_load2(A, P->work, list, at);
        src.index = e_load2(A, P->work, list, E_ADD(A, at, e_i(A, KM)));
    }
    TStmt p0 = {.body = tlist(A, 5)};
    topk_next(&src, &p0, true);
    kl_add(A, body, phase(A, p0.body, p0.nbody, false));

    Var *q = new_var(A, B->nvars, "q");
    KList ub = {0};
    kl_phase(A, &ub, false, 2, ts_assign(A, ARGMAX_R_VAL, reg(A, TOPK_R_CAND_VAL)),
             ts_assign(A, ARGMAX_R_IDX, reg(A, TOPK_R_CAND_IDX)));
    for (int d = 16; d >= 1; d /= 2) argmax_step(B, &ub, d, tie);
    if (nw > 1) argmax_across_warps(B, &ub, nw, imod(A, tid(A), 32), TOPK_NONE, tie);
    /* every lane: the round's pair in the partner registers */
    kl_add(A, &ub, shfl(B, SHFL_IDX, ARGMAX_R_PARTNER_VAL, ARGMAX_R_VAL, 0));
    kl_add(A, &ub, shfl(B, SHFL_IDX, ARGMAX_R_PARTNER_IDX, ARGMAX_R_IDX, 0));
    TStmt *st = ts_if(A, eq(A, tid(A), e_i(A, 0)), MAX_AXES + 3);
    /* the op's own store (its selector and rank bound), or a chunk's row of the workspace */
    bool own = merge || !chunked;
    if (own) st->nbody = decompose(A, st->body, P->row, P->nrow, row);
    for (int h = 0; h < 2; h++) {
        Expr *v = reg(A, h ? ARGMAX_R_PARTNER_IDX : ARGMAX_R_PARTNER_VAL);
        if (!own) { ts_add(st, ts_store2(A, P->work, bid(A), E_ADD(A, e_var(A, q), e_i(A, h * KM)), v)); continue; }
        Expr **idx = ARENA_ARRAY(A, Expr *, op->out->ndim);
        for (int d = 0; d < op->out->ndim; d++)
            idx[d] = expr_subst(A, expr_subst(A, op->out_idx[d], op->topk_sel, e_i(A, h)), op->topk_rank, e_var(A, q));
        ts_add(st, ts_store(A, op->out, idx, v));
    }
    /* the winner gives its candidate and takes the next */
    TStmt *win = ts_if(A, eq(A, reg(A, TOPK_R_CAND_IDX), reg(A, ARGMAX_R_PARTNER_IDX)), 5);
    topk_next(&src, win, false);
    /* a barrier before the next round's shared stores (with one warp, none is needed) */
    kl_phase(A, &ub, nw > 1, 2, st, win);
    kl_ufor(A, body, q, e_i(A, 0), op->topk_count, e_i(A, 1), &ub);
}
