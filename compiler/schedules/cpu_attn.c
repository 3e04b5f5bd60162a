/* cpu_attn.c: the cpu_attn schedule, the CPU target's attention (a nest
 * loop_flash fused): a task per (token, head) row. The row's query is
 * copied once; each key's score (a dot product over the head dimension,
 * contiguous in the KV cache) is kept in a scratch row, then the softmax in
 * two passes (the max, then exp and the sum: no running rescale, since the
 * whole row fits), then the output as a weighted sum of V rows, each a
 * vectorisable loop over the head dimension. A GQA group's heads read the
 * same K/V rows, which the cache keeps between their tasks.
 * Tests: tests/test_cpu_target.py (sdpa, the fixtures' logits). */
#include "schedules/schedule.h"

/* registers: the score being summed, the row's max, the sum of exp, the probability */
enum { ATTN_R_SCORE, ATTN_R_MAX, ATTN_R_SUM, ATTN_R_P, ATTN_NREGS };
/* scratch: the query row [hd], the scores then probabilities [keys], the output row [hv] */
enum { ATTN_S_Q, ATTN_S_P, ATTN_S_O, ATTN_NSMEM };

bool cpu_attn_fits(const AttnDesc *d) { (void)d; return true; }

int cpu_attn_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out) {
    if (!c->leaf || c->leaf->k != LS_ATTN) return 0;
    k->kind = SCHED_CPU_ATTN;
    k->name = arena_printf(c->A, "%s_attn", c->leaf->attn->kname);
    k->flash.attn = c->leaf->attn;
    k->flash.tq = k->flash.split = 1;
    k->block = 1;
    k->grid = c->total;
    out[0] = k;
    return 1;
}
void cpu_attn_print(Str *o, const TileKernel *k) {
    const AttnDesc *d = k->flash.attn;
    str_printf(o, "\n  task bid -> row (%s, %s) of %lld heads; scores of keys %s < min(", d->t->name, d->h->name,
               (long long)d->heads, d->j->name);
    expr_print(o, d->len);
    str_printf(o, ", ");
    expr_print(o, d->jmax);
    str_printf(o, ") kept in a scratch row, softmax in two passes, out = sum p * v over %lld dims\n",
               (long long)d->hv);
}

void cpu_attn_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const AttnDesc *d = t->flash.attn;
    int64_t keys;
    CHECK(eval_i(d->len, B->max_batch, B->max_ctx, &keys), "attention %s: key extent", d->kname);
    declare_regs(k, ATTN_NREGS);
    k->nsmem = ATTN_NSMEM;
    k->smem[ATTN_S_Q].size = (int)d->hd;
    k->smem[ATTN_S_P].size = (int)keys;
    k->smem[ATTN_S_O].size = (int)d->hv;
    Axis par[2] = {{d->t, d->rows}, {d->h, e_i(A, d->heads)}};
    TStmt **p = tlist(A, 12);
    int n = decompose(A, p, par, 2, bid(A));
    Var *jn = new_var(A, B->nvars, "keys");
    p[n++] = ts_let(A, jn, emin(A, d->len, d->jmax));
    Expr *dv = e_var(A, d->d), *jv = e_var(A, d->j);
    /* the query row */
    TStmt *fq = ts_for(A, d->d, e_i(A, 0), e_i(A, d->hd), e_i(A, 1), 1);
    ts_add(fq, ts_sstore(A, ATTN_S_Q, dv, d->q));
    p[n++] = fq;
    /* scores and their max */
    p[n++] = ts_assign(A, ATTN_R_MAX, e_f(A, -1.0 / 0.0));
    TStmt *fs = ts_for(A, d->j, e_i(A, 0), e_var(A, jn), e_i(A, 1), 5);
    ts_add(fs, ts_assign(A, ATTN_R_SCORE, e_f(A, 0.0)));
    TStmt *dot = ts_for(A, d->d, e_i(A, 0), e_i(A, d->hd), e_i(A, 1), 1);
    ts_add(dot, ts_assign(A, ATTN_R_SCORE, E_ADD(A, reg(A, ATTN_R_SCORE), E_MUL(A, sload(A, ATTN_S_Q, dv), d->k))));
    ts_add(fs, dot);
    ts_add(fs, ts_assign(A, ATTN_R_SCORE, E_MUL(A, reg(A, ATTN_R_SCORE), e_f(A, d->scale))));
    ts_add(fs, ts_sstore(A, ATTN_S_P, jv, reg(A, ATTN_R_SCORE)));
    ts_add(fs, ts_assign(A, ATTN_R_MAX, e_bin(A, EX_MAX, reg(A, ATTN_R_MAX), reg(A, ATTN_R_SCORE))));
    p[n++] = fs;
    /* probabilities (unnormalised) and their sum */
    p[n++] = ts_assign(A, ATTN_R_SUM, e_f(A, 0.0));
    TStmt *fe = ts_for(A, d->j, e_i(A, 0), e_var(A, jn), e_i(A, 1), 3);
    ts_add(fe, ts_assign(A, ATTN_R_P, e_un(A, EX_EXP, E_SUB(A, sload(A, ATTN_S_P, jv), reg(A, ATTN_R_MAX)))));
    ts_add(fe, ts_sstore(A, ATTN_S_P, jv, reg(A, ATTN_R_P)));
    ts_add(fe, ts_assign(A, ATTN_R_SUM, E_ADD(A, reg(A, ATTN_R_SUM), reg(A, ATTN_R_P))));
    p[n++] = fe;
    /* out = sum_j p_j v_j / sum */
    TStmt *fz = ts_for(A, d->d, e_i(A, 0), e_i(A, d->hv), e_i(A, 1), 1);
    ts_add(fz, ts_sstore(A, ATTN_S_O, dv, e_f(A, 0.0)));
    p[n++] = fz;
    TStmt *fv = ts_for(A, d->j, e_i(A, 0), e_var(A, jn), e_i(A, 1), 2);
    ts_add(fv, ts_assign(A, ATTN_R_P, sload(A, ATTN_S_P, jv)));
    TStmt *acc = ts_for(A, d->d, e_i(A, 0), e_i(A, d->hv), e_i(A, 1), 1);
    ts_add(acc, ts_sstore(A, ATTN_S_O, dv, E_ADD(A, sload(A, ATTN_S_O, dv), E_MUL(A, reg(A, ATTN_R_P), d->v))));
    ts_add(fv, acc);
    p[n++] = fv;
    TStmt *fo = ts_for(A, d->d, e_i(A, 0), e_i(A, d->hv), e_i(A, 1), 1);
    ts_add(fo, ts_store(A, d->out, (Expr **)d->out_idx, E_DIV(A, sload(A, ATTN_S_O, dv), reg(A, ATTN_R_SUM))));
    p[n++] = fo;
    kl_add(A, body, phase(A, p, n, true));
}
