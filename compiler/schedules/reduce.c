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
    if (!k->nred) return 0;
    k->kind = SCHED_BLOCK_REDUCE;
    int64_t rext;
    int b = c->kn->reduce_block_max;
    if (expr_is_const(product(c->A, k->red, k->nred), &rext)) {
        b = 32;
        while (b < rext && b < c->kn->reduce_block_max) b *= 2;
    }
    k->block = b;
    k->grid = c->total;
    k->smem_floats = b > 32 ? (k->redop == RED_ARGMAX ? 2 : 1) * (b / 32) : 0;   /* argmax: a value and an index */
    out[0] = k;
    return 1;
}
void block_reduce_print(Str *o, const TileKernel *k) {
    str_printf(o, "\n  block bid -> [");
    print_axes(o, k->par, k->npar);
    str_printf(o, "]\n  threads stride over [");
    print_axes(o, k->red, k->nred);
    str_printf(o, "] by %d", k->block);
    if (k->side) str_printf(o, " (storing the fused %s on the way)", k->side->name);
    if (k->tail_out) {
        str_printf(o, "; then the block writes %s over %s<", k->tail_out->name, k->tail.v->name);
        expr_print(o, k->tail.extent);
        str_printf(o, "> by %d (the row's result from shared memory)", k->block);
    }
    str_printf(o, ", a warp-shuffle tree per warp");
    if (k->block > 32) str_printf(o, ", %d warp values in shared memory, a final warp reduce", k->block / 32);
    str_printf(o, " (%s)\n", red_op_names[k->redop]);
}
const char *block_reduce_verify(const TileKernel *k) {
    if (k->block & (k->block - 1)) return "block size is not a power of two";
    if (k->block % 32) return "warp schedule with a partial warp";
    if (k->smem_floats < (k->block > 32 ? k->block / 32 : 0) || k->nred < 1) return "reduction without shared scratch";
    return NULL;
}

/* argmax: the thread's (value, index) in ARGMAX_R_VAL / _IDX. A pair wins with a larger value, or an equal
 * one and a smaller index; each thread scans its indices in increasing order and keeps the first strictly
 * larger value, so the block finds the first maximum; NaN never compares larger, and (-inf, 0) starts every
 * thread (a row of NaN / -inf gives 0). */
static void block_argmax(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    int nw = t->block / 32;
    CHECK(t->nred == 1 && !t->side, "argmax over %d axes or with a side store", t->nred);
    declare_regs(k, ARGMAX_NREGS);
    if (nw > 1) { k->nsmem = 1; k->smem[0].size = t->smem_floats; }
    Var *r = new_var(A, B->nvars, "r");
    TStmt **p0 = tlist(A, t->npar + 3);
    int n0 = decompose(A, p0, t->par, t->npar, bid(A));
    p0[n0++] = ts_assign(A, ARGMAX_R_VAL, e_f(A, -1.0 / 0.0));
    p0[n0++] = ts_assign(A, ARGMAX_R_IDX, e_f(A, 0.0));
    TStmt *f = ts_for(A, r, tid(A), t->red[0].extent, e_i(A, t->block), 3);
    ts_add(f, ts_let(A, t->red[0].v, e_var(A, r)));
    ts_add(f, ts_assign(A, ARGMAX_R_PARTNER_VAL, t->acc_value));
    TStmt *better = ts_if(A, lt(A, reg(A, ARGMAX_R_VAL), reg(A, ARGMAX_R_PARTNER_VAL)), 2);
    ts_add(better, ts_assign(A, ARGMAX_R_VAL, reg(A, ARGMAX_R_PARTNER_VAL)));
    ts_add(better, ts_assign(A, ARGMAX_R_IDX, e_un(A, EX_TOF, e_var(A, r))));
    ts_add(f, better);
    p0[n0++] = f;
    kl_add(A, body, phase(A, p0, n0, false));
    for (int d = 16; d >= 1; d /= 2) argmax_step(B, body, d, EX_MIN);
    if (nw > 1) argmax_across_warps(B, body, nw, tid(A), 0.0, EX_MIN);
    TStmt *last = ts_if(A, eq(A, tid(A), e_i(A, 0)), t->npar + 1);
    last->nbody = decompose(A, last->body, t->par, t->npar, bid(A));
    ts_add(last, ts_store(A, t->out, t->idx, expr_subst_acc(A, t->store_value, reg(A, ARGMAX_R_IDX))));
    kl_phase1(A, body, last, false);
}

void block_reduce_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    if (t->redop == RED_ARGMAX) { block_argmax(B, t, k, body); return; }
    Arena *A = B->A;
    int nw = t->block / 32;
    const int ACC = REDUCE_R_ACC, R1 = REDUCE_R_PARTNER;
    declare_regs(k, REDUCE_NREGS);
    if (nw > 1) { k->nsmem = 1; k->smem[0].size = t->smem_floats; }
    /* every thread reduces a strided slice into the accumulator */
    Var *r = new_var(A, B->nvars, "r");
    TStmt **p0 = tlist(A, t->npar + 2);
    int n0 = decompose(A, p0, t->par, t->npar, bid(A));
    p0[n0++] = ts_assign(A, ACC, red_init(A, t->redop));
    TStmt *f = ts_for(A, r, tid(A), product(A, t->red, t->nred), e_i(A, t->block), t->nred + 3);
    f->nbody = decompose(A, f->body, t->red, t->nred, e_var(A, r));
    Expr *term = t->acc_value;
    if (t->side) {
        /* the fused producer's value: computed once into R1, stored, and read by the update */
        ts_add(f, ts_assign(A, R1, t->side_value));
        ts_add(f, ts_store(A, t->side, t->side_idx, reg(A, R1)));
        term = replace_expr(A, term, t->side_value, reg(A, R1));
    }
    ts_add(f, ts_assign(A, ACC, combine(A, t->redop, reg(A, ACC), term)));
    p0[n0++] = f;
    kl_add(A, body, phase(A, p0, n0, false));
    /* each warp's lane 0 ends with the warp's value */
    warp_trees(B, body, t->redop, 32, 1);
    if (nw > 1) {
        /* lane 0 of warp w: smem0[w]; then warp 0 reduces the nw values (the others do the same work on init) */
        TStmt *w0 = ts_if(A, eq(A, imod(A, tid(A), 32), e_i(A, 0)), 1);
        ts_add(w0, ts_sstore(A, 0, idiv(A, tid(A), 32), reg(A, ACC)));
        kl_phase1(A, body, w0, true);
        TStmt **p1 = tlist(A, 2);
        p1[0] = ts_assign(A, ACC, red_init(A, t->redop));
        p1[1] = ts_if(A, lt(A, tid(A), e_i(A, nw)), 1);
        ts_add(p1[1], ts_assign(A, ACC, sload(A, 0, tid(A))));
        kl_add(A, body, phase(A, p1, 2, false));
        warp_trees(B, body, t->redop, nw, 1);
    }
    /* thread 0 applies the epilogue and stores (and, for a tail, leaves the result in shared memory) */
    TStmt *last = ts_if(A, eq(A, tid(A), e_i(A, 0)), t->npar + 3);
    last->nbody = decompose(A, last->body, t->par, t->npar, bid(A));
    Expr *res = expr_subst_acc(A, t->store_value, reg(A, ACC));
    int rs = -1;               /* the shared array holding the row's result for the tail */
    if (t->tail_out) {
        rs = k->nsmem++;
        k->smem[rs].size = 1;
        ts_add(last, ts_assign(A, R1, res));
        res = reg(A, R1);
        ts_add(last, ts_sstore(A, rs, e_i(A, 0), reg(A, R1)));
    }
    ts_add(last, ts_store(A, t->out, t->idx, res));
    kl_phase1(A, body, last, t->tail_out != NULL);
    if (!t->tail_out) return;
    /* the row op over its last axis, every thread a strided part, the row's result read from shared memory */
    TStmt **pt = tlist(A, t->npar + 1);
    int nt = decompose(A, pt, t->par, t->npar, bid(A));
    Var *cv = new_var(A, B->nvars, "c");
    TStmt *f2 = ts_for(A, cv, tid(A), t->tail.extent, e_i(A, t->block), 2);
    ts_add(f2, ts_let(A, t->tail.v, e_var(A, cv)));
    Expr *row = e_load(A, t->out, t->out->ndim, t->idx);
    ts_add(f2, ts_store(A, t->tail_out, t->tail_idx, replace_expr(A, t->tail_value, row, sload(A, rs, e_i(A, 0)))));
    pt[nt++] = f2;
    kl_add(A, body, phase(A, pt, nt, false));
}
