/* reduce.c: the block_reduce schedule, for reductions that read no weight
 * (norms, softmax statistics, the argmax of the logits): one block per
 * output element; threads stride over the reduction, a warp-shuffle tree
 * per warp, one value per warp in shared memory, a final warp reduce.
 * Argmax carries (value, index) pairs the same way. A producer fused into
 * the loop (side) is stored on the way; a row op fused after it (tail) is
 * written by the whole block from the result left in shared memory.
 * Tests: tests/test_ops.py (rmsnorm, softmax, argmax), tests/test_epilogues.py. */
#include "schedules/schedule.h"

enum { REDUCE_R_ACC, REDUCE_R_PARTNER, REDUCE_NREGS };   /* the partner's register also holds side and result */

/* blocks sized from the extent when it is known */
int block_reduce_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out) {
    if (!c->shape->nred) return 0;
    k->kind = SCHED_BLOCK_REDUCE;
    k->body = *c->shape;
    int64_t rext;
    int b = c->kn->reduce_block_max;
    if (expr_is_const(product(c->A, k->body.red, k->body.nred), &rext)) b = (int)min_i(pow2_block(rext), b);
    k->block = b;
    k->grid = c->total;
    k->smem_floats = b > 32 ? (k->body.redop == RED_ARGMAX ? 2 : 1) * (b / 32) : 0;   /* argmax: a value and an index */
    out[0] = k;
    return 1;
}
void block_reduce_print(Str *o, const TileKernel *k) {
    const NestBody *b = &k->body;
    str_printf(o, "\n  block bid -> [");
    print_axes(o, b->par, b->npar);
    str_printf(o, "]\n  threads stride over [");
    print_axes(o, b->red, b->nred);
    str_printf(o, "] by %d", k->block);
    if (b->side.buf) str_printf(o, " (storing the fused %s on the way)", b->side.buf->name);
    if (b->tail_store.buf) {
        str_printf(o, "; then the block writes %s over ", b->tail_store.buf->name);
        print_axes(o, &b->tail, 1);
        str_printf(o, " by %d (the row's result from shared memory)", k->block);
    }
    str_printf(o, ", a warp-shuffle tree per warp");
    if (k->block > 32) str_printf(o, ", %d warp values in shared memory, a final warp reduce", k->block / 32);
    str_printf(o, " (%s)\n", red_op_names[b->redop]);
}
const char *block_reduce_verify(const TileKernel *k) {
    if (k->smem_floats < (k->block > 32 ? k->block / 32 : 0) || k->body.nred < 1)
        return "reduction without shared scratch";
    return k->body.nacc != 1 ? "two accumulators in a schedule without them" : NULL;
}

/* Every thread reduces a strided slice into ACC, a tree per warp and (several warps) one over the warps'
 * values leaves the block's in thread 0, which applies the epilogue and stores (and, for a tail, leaves
 * the result in shared memory).
 * argmax: the thread's (value, index) in ARGMAX_R_VAL / _IDX. A pair wins with a larger value, or an equal
 * one and a smaller index; each thread scans its indices in increasing order and keeps the first strictly
 * larger value, so the block finds the first maximum; NaN never compares larger, and (-inf, 0) starts every
 * thread (a row of NaN / -inf gives 0). */
void block_reduce_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const NestBody *b = &t->body;
    const bool am = b->redop == RED_ARGMAX;
    const int nw = t->block / 32, ACC = REDUCE_R_ACC, R1 = REDUCE_R_PARTNER;
    CHECK(!am || (b->nred == 1 && !b->side.buf), "argmax over %d axes or with a side store", b->nred);
    declare_regs(k, am ? ARGMAX_NREGS : REDUCE_NREGS);
    if (nw > 1) { k->nsmem = 1; k->smem[0].size = t->smem_floats; }
    Var *r = new_var(A, B->nvars, "r");
    TStmt **p0 = tlist(A, b->npar + 3);
    int n0 = decompose(A, p0, b->par, b->npar, bid(A));
    p0[n0++] = ts_assign(A, ACC, am ? e_f(A, -1.0 / 0.0) : red_init(A, b->redop));
    if (am) p0[n0++] = ts_assign(A, ARGMAX_R_IDX, e_f(A, 0.0));
    TStmt *f = ts_for(A, r, tid(A), product(A, b->red, b->nred), e_i(A, t->block), b->nred + 3);
    f->nbody = decompose(A, f->body, b->red, b->nred, e_var(A, r));
    if (am) {
        ts_add(f, ts_assign(A, ARGMAX_R_PARTNER_VAL, b->acc[0]));
        TStmt *better = ts_if(A, lt(A, reg(A, ARGMAX_R_VAL), reg(A, ARGMAX_R_PARTNER_VAL)), 2);
        ts_add(better, ts_assign(A, ARGMAX_R_VAL, reg(A, ARGMAX_R_PARTNER_VAL)));
        ts_add(better, ts_assign(A, ARGMAX_R_IDX, e_un(A, EX_TOF, e_var(A, r))));
        ts_add(f, better);
    } else {
        reduce_update(A, b, f, ACC, R1);
    }
    p0[n0++] = f;
    kl_add(A, body, phase(A, p0, n0, false));
    if (am) {
        for (int d = 16; d >= 1; d /= 2) argmax_step(B, body, d, EX_MIN);
        if (nw > 1) argmax_across_warps(B, body, nw, tid(A), 0.0, EX_MIN);
    } else {
        warp_trees(B, body, b->redop, 32, 1);
        /* warp 0 reduces the nw values (the others do the same work on init) */
        if (nw > 1) gather_warp_values(B, body, nw, tid(A), 1, (int[]){ACC}, (Expr *[]){red_init(A, b->redop)});
        if (nw > 1) warp_trees(B, body, b->redop, nw, 1);
    }
    TStmt *last = ts_if(A, eq(A, tid(A), e_i(A, 0)), b->npar + 3);
    last->nbody = decompose(A, last->body, b->par, b->npar, bid(A));
    Expr *res = expr_subst_acc(A, b->store[0].value, reg(A, am ? ARGMAX_R_IDX : ACC));
    int rs = -1;               /* the shared array holding the row's result for the tail */
    if (b->tail_store.buf) {
        rs = k->nsmem++;
        k->smem[rs].size = 1;
        ts_add(last, ts_assign(A, R1, res));
        res = reg(A, R1);
        ts_add(last, ts_sstore(A, rs, e_i(A, 0), reg(A, R1)));
    }
    ts_add(last, ts_store(A, b->store[0].buf, b->store[0].idx, res));
    kl_phase(A, body, b->tail_store.buf != NULL, 1, last);
    if (!b->tail_store.buf) return;
    /* the row op over its last axis, every thread a strided part, the row's result read from shared memory */
    TStmt **pt = tlist(A, b->npar + 1);
    int nt = decompose(A, pt, b->par, b->npar, bid(A));
    Var *cv = new_var(A, B->nvars, "c");
    TStmt *f2 = ts_for(A, cv, tid(A), b->tail.extent, e_i(A, t->block), 2);
    ts_add(f2, ts_let(A, b->tail.v, e_var(A, cv)));
    Expr *row = e_load(A, b->store[0].buf, b->store[0].buf->ndim, b->store[0].idx);
    ts_add(f2, ts_store(A, b->tail_store.buf, b->tail_store.idx,
                        replace_expr(A, b->tail_store.value, row, sload(A, rs, e_i(A, 0)))));
    pt[nt++] = f2;
    kl_add(A, body, phase(A, pt, nt, false));
}
