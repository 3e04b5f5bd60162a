/* cpu_attn.c: the cpu_attn schedule, the CPU target's attention (a nest
 * loop_flash fused): a task per block of tq query rows (tokens) of one
 * head. The rows' queries are copied once; the scores are computed key by
 * key, each K row (contiguous in the KV cache) serving the block's tq
 * queries while it sits in L1, and kept in a scratch row per query; then each
 * row's softmax in two passes (the max, then exp and the sum: no running
 * rescale, since the whole row fits); then the outputs, V row by V row, each
 * again serving the tq queries. A prompt of T tokens reads K and V T / tq
 * times instead of T times; every query's arithmetic is the one-row
 * schedule's, in the same order (a query past its causal key count skips the
 * key). A GQA group's heads read the same K/V rows, which the cache keeps
 * between their tasks. Tests: tests/test_cpu_target.py (sdpa, the fixtures'
 * logits). */
#include "schedules/schedule.h"

/* registers: the score being summed, a row's max, its sum of exp, the probability */
enum { ATTN_R_SCORE, ATTN_R_MAX, ATTN_R_SUM, ATTN_R_P, ATTN_NREGS };
/* scratch: the query rows [tq][hd], the scores then probabilities [tq][keys], the output rows [tq][hv], each
 * row's sum [tq] */
enum { ATTN_S_Q, ATTN_S_P, ATTN_S_O, ATTN_S_SUM, ATTN_NSMEM };

bool cpu_attn_fits(const AttnDesc *d) { (void)d; return true; }

/* queries per task: up to 8, as long as their score rows (of the longest key count) stay within 256 KiB of the
 * task's scratch (its stack) */
static int queries_per_task(int64_t keys) {
    int64_t tq = (256 << 10) / 4 / (keys > 0 ? keys : 1);
    return tq < 1 ? 1 : tq > 8 ? 8 : (int)tq;
}

int cpu_attn_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out) {
    if (!c->leaf || c->leaf->k != LS_ATTN) return 0;
    const AttnDesc *d = c->leaf->attn;
    int64_t keys;
    if (!eval_i(d->len, c->tp->max_batch, c->tp->max_ctx, &keys)) return 0;
    k->kind = SCHED_CPU_ATTN;
    k->name = arena_printf(c->A, "%s_attn", d->kname);
    k->flash.attn = d;
    k->flash.tq = queries_per_task(keys);
    k->flash.split = 1;
    k->block = 1;
    k->grid = E_MUL(c->A, ceil_div(c->A, d->rows, k->flash.tq), e_i(c->A, d->heads));
    out[0] = k;
    return 1;
}
void cpu_attn_print(Str *o, const TileKernel *k) {
    const AttnDesc *d = k->flash.attn;
    str_printf(o, "\n  task bid -> rows %s of a block of %d and one of %lld heads; scores of keys %s < min(",
               d->t->name, k->flash.tq, (long long)d->heads, d->j->name);
    expr_print(o, d->len);
    str_printf(o, ", ");
    expr_print(o, d->jmax);
    str_printf(o, ") kept in a scratch row per query, each K row serving the block's queries; softmax in two "
                  "passes; out = sum p * v over %lld dims, each V row serving the block's queries\n", (long long)d->hv);
}

/* for (v = 0; v < hi; v++) with room for cap statements */
static TStmt *upto(Arena *A, Var *v, Expr *hi, int cap) { return ts_for(A, v, e_i(A, 0), hi, e_i(A, 1), cap); }
/* for (i = 0; i < min(tq, rows - t0); i++) { t = t0 + i; [if (cond)] { cap statements } }: the block's query
 * rows; returns the loop, *in where the statements go */
static TStmt *query_rows(Arena *A, const AttnDesc *d, Var *i, int tq, Expr *t0, Expr *cond, int cap, TStmt **in) {
    TStmt *loop = upto(A, i, emin(A, e_i(A, tq), E_SUB(A, d->rows, t0)), cond ? 2 : 1 + cap);
    ts_add(loop, ts_let(A, d->t, E_ADD(A, t0, e_var(A, i))));
    *in = loop;
    if (cond) {
        *in = ts_if(A, cond, cap);
        ts_add(loop, *in);
    }
    return loop;
}

void cpu_attn_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const AttnDesc *d = t->flash.attn;
    const int tq = t->flash.tq;
    int64_t keys;
    CHECK(eval_i(d->len, B->max_batch, B->max_ctx, &keys), "attention %s: key extent", d->kname);
    declare_regs(k, ATTN_NREGS);
    k->nsmem = ATTN_NSMEM;
    k->smem[ATTN_S_Q].size = tq * (int)d->hd;
    k->smem[ATTN_S_P].size = tq * (int)keys;
    k->smem[ATTN_S_O].size = tq * (int)d->hv;
    k->smem[ATTN_S_SUM].size = tq;
    Var *tb = new_var(A, B->nvars, "tb"), *i = new_var(A, B->nvars, "i"), *jn = new_var(A, B->nvars, "keys");
    Axis par[2] = {{tb, ceil_div(A, d->rows, tq)}, {d->h, e_i(A, d->heads)}};
    TStmt **p = tlist(A, 12);
    int n = decompose(A, p, par, 2, bid(A));
    Expr *iv = e_var(A, i), *dv = e_var(A, d->d), *jv = e_var(A, d->j);
    Expr *t0 = E_MUL(A, e_var(A, tb), e_i(A, tq));
    /* the block's keys: the most any of its queries sees (jmax grows with t, causal, or is len) */
    Expr *last = emin(A, E_ADD(A, t0, e_i(A, tq - 1)), E_SUB(A, d->rows, e_i(A, 1)));
    p[n++] = ts_let(A, jn, emin(A, d->len, e_bin(A, EX_MAX, expr_subst(A, d->jmax, d->t, t0),
                                                 expr_subst(A, d->jmax, d->t, last))));
    /* query row i of the block: t = t0 + i, when t < rows; it sees keys j < min(len, jmax(t)) */
    Expr *row_keys = emin(A, d->len, d->jmax);
    Expr *qi = E_MUL(A, iv, e_i(A, d->hd)), *pi = E_MUL(A, iv, e_i(A, keys)), *oi = E_MUL(A, iv, e_i(A, d->hv));
    /* the query rows */
    TStmt *fq_if, *fq = query_rows(A, d, i, tq, t0, NULL, 1, &fq_if);
    TStmt *cq = upto(A, d->d, e_i(A, d->hd), 1);
    ts_add(cq, ts_sstore(A, ATTN_S_Q, E_ADD(A, qi, dv), d->q));
    ts_add(fq_if, cq);
    p[n++] = fq;
    /* scores, key by key: each K row for the block's queries */
    TStmt *fs = upto(A, d->j, e_var(A, jn), 1);
    TStmt *fsi_if, *fsi = query_rows(A, d, i, tq, t0, lt(A, jv, row_keys), 4, &fsi_if);
    ts_add(fsi_if, ts_assign(A, ATTN_R_SCORE, e_f(A, 0.0)));
    TStmt *dot = upto(A, d->d, e_i(A, d->hd), 1);
    ts_add(dot, ts_assign(A, ATTN_R_SCORE, E_ADD(A, reg(A, ATTN_R_SCORE),
                                                 E_MUL(A, sload(A, ATTN_S_Q, E_ADD(A, qi, dv)), d->k))));
    ts_add(fsi_if, dot);
    ts_add(fsi_if, ts_assign(A, ATTN_R_SCORE, E_MUL(A, reg(A, ATTN_R_SCORE), e_f(A, d->scale))));
    ts_add(fsi_if, ts_sstore(A, ATTN_S_P, E_ADD(A, pi, jv), reg(A, ATTN_R_SCORE)));
    ts_add(fs, fsi);
    p[n++] = fs;
    /* each row's max, probabilities (unnormalised), their sum, its output row at zero */
    TStmt *fe_if, *fe = query_rows(A, d, i, tq, t0, NULL, 6, &fe_if);
    Expr *pij = E_ADD(A, pi, jv);
    ts_add(fe_if, ts_assign(A, ATTN_R_MAX, e_f(A, -1.0 / 0.0)));
    TStmt *fem = upto(A, d->j, row_keys, 1);
    ts_add(fem, ts_assign(A, ATTN_R_MAX, e_bin(A, EX_MAX, reg(A, ATTN_R_MAX), sload(A, ATTN_S_P, pij))));
    ts_add(fe_if, fem);
    ts_add(fe_if, ts_assign(A, ATTN_R_SUM, e_f(A, 0.0)));
    TStmt *fej = upto(A, d->j, row_keys, 3);
    ts_add(fej, ts_assign(A, ATTN_R_P, e_un(A, EX_EXP, E_SUB(A, sload(A, ATTN_S_P, pij), reg(A, ATTN_R_MAX)))));
    ts_add(fej, ts_sstore(A, ATTN_S_P, pij, reg(A, ATTN_R_P)));
    ts_add(fej, ts_assign(A, ATTN_R_SUM, E_ADD(A, reg(A, ATTN_R_SUM), reg(A, ATTN_R_P))));
    ts_add(fe_if, fej);
    ts_add(fe_if, ts_sstore(A, ATTN_S_SUM, iv, reg(A, ATTN_R_SUM)));
    TStmt *fz = upto(A, d->d, e_i(A, d->hv), 1);
    ts_add(fz, ts_sstore(A, ATTN_S_O, E_ADD(A, oi, dv), e_f(A, 0.0)));
    ts_add(fe_if, fz);
    p[n++] = fe;
    /* out += p * v, key by key: each V row for the block's queries */
    TStmt *fv = upto(A, d->j, e_var(A, jn), 1);
    TStmt *fvi_if, *fvi = query_rows(A, d, i, tq, t0, lt(A, jv, row_keys), 2, &fvi_if);
    ts_add(fvi_if, ts_assign(A, ATTN_R_P, sload(A, ATTN_S_P, pij)));
    TStmt *acc = upto(A, d->d, e_i(A, d->hv), 1);
    Expr *oid = E_ADD(A, oi, dv);
    ts_add(acc, ts_sstore(A, ATTN_S_O, oid, E_ADD(A, sload(A, ATTN_S_O, oid), E_MUL(A, reg(A, ATTN_R_P), d->v))));
    ts_add(fvi_if, acc);
    ts_add(fv, fvi);
    p[n++] = fv;
    /* out = sum_j p_j v_j / sum */
    TStmt *fo_if, *fo = query_rows(A, d, i, tq, t0, NULL, 1, &fo_if);
    TStmt *fod = upto(A, d->d, e_i(A, d->hv), 1);
    ts_add(fod, ts_store(A, d->out, (Expr **)d->out_idx, E_DIV(A, sload(A, ATTN_S_O, oid), sload(A, ATTN_S_SUM, iv))));
    ts_add(fo_if, fod);
    p[n++] = fo;
    kl_add(A, body, phase(A, p, n, true));
}
