/* cpu_gemm.c: the cpu_gemm schedule, the CPU target's linears for calls of
 * more than cpu_gemm_min_n tokens (prefill), the BLIS way: a task per nb
 * outputs; for each K step of kc the task packs its weight panel (nb rows
 * of W, f32, in slivers of CPU_GEMM_NR) once, then for each block of mc
 * tokens the activation panel (in slivers of CPU_GEMM_MR), and
 * runtime/cpu_gemm.h's register-tile kernel accumulates those rows of the
 * task's tile (every token x nb) over K; then the epilogue (the nest's stores, a pair's SiLU * up, a
 * rotary pair's halves) reads the tile. Packing converts bf16 / f16 weights
 * once per K step, so the kernel's inner loop is only FMAs. A pair packs
 * both weights side by side: one tile of 2 x nb columns. Calls of at most
 * cpu_gemm_min_n tokens run the cpu_rows schedule, made here too.
 * Tests: tests/test_cpu_target.py (linear, pairs, halves over the shape matrix; the fixtures' logits). */
#include "schedules/schedule.h"
#define CPU_GEMM_SIZES_ONLY
#include "cpu_gemm.h"

/* scratch: the weight panel [columns][kc], the tile [tokens][columns], the activation panel [mc][kc] (none
 * when the activations are read in place) */
enum { CG_S_W, CG_S_TILE, CG_S_X, CG_NSMEM };

/* Whether the weight operand W is an f32, bf16 or block-type matrix read as W[f(o), k] with f, over every output
 * o, in runs of consecutive rows (*run rows each, their starts *gap apart: a RoPE pair's halves; a plain W[o, k]
 * is one run) that tasks of nb outputs do not split. f is evaluated, not matched: any index of that shape qualifies. */
static bool weight_rows(Arena *A, const Expr *W, Var *ov, Var *kv, int64_t outs, int nb, int64_t *run, int64_t *gap) {
    if (W->k != EX_LOAD || (W->buf->dtype != DT_F32 && W->buf->dtype != DT_BF16 && !dtype_is_quant(W->buf->dtype)) ||
        W->nargs != 2 ||
        W->buf->ndim != 2 || W->a[1]->k != EX_VAR || W->a[1]->var != kv)
        return false;
    *run = nb, *gap = 0;
    if (W->a[0]->k == EX_VAR && W->a[0]->var == ov) return true;
    int64_t *f = ARENA_ARRAY(A, int64_t, outs);
    for (int64_t o = 0; o < outs; o++)
        if (!eval_i(expr_subst(A, W->a[0], ov, e_i(A, o)), 0, 0, &f[o])) return false;
    int64_t r = 1;
    while (r < outs && f[r] == f[0] + r) r++;
    *run = r, *gap = r < outs ? f[r] - f[0] : 0;
    for (int64_t o = 0; o < outs; o++)
        if (f[o] != f[0] + o / r * *gap + o % r) return false;
    return nb % r == 0 || r % nb == 0;
}

int cpu_gemm_choose(const ScheduleChoice *c, TileKernel *g, TileKernel **out) {
    Arena *A = c->A;
    const Knobs *kn = c->kn;
    int64_t K, maxrows;
    g->body = *c->shape;
    CpuGemmParams *P = &g->body.cpug;
    /* not the tail's lm_head: its rows are decode tokens (one, or a batch's, each of which must get what it
     * gets alone: cpu_rows computes every row the same way at any n) */
    if (!kn->cpu_gemm || g->nest->op->tail || !gemm_form(&g->body, true, &K, &P->xop, P->wop))
        return 0;
    /* bf16 weights: calls of up to cpu_dot16_max_n tokens run cpu_rows' bf16 dot products (dot16), which read
     * the weights as they are; packing them for the GEMM costs more below that (Qwen2.5-0.5B's shape on Zen 4:
     * a 4-token prompt 38 ms against 103, 16 tokens 80 against 112, 32 tokens 131 against 148) */
    bool bf16 = true;
    for (int a = 0; a < g->body.nacc; a++) bf16 &= P->wop[a]->buf->dtype == DT_BF16;
    int min_n = bf16 && kn->cpu_rows_bf16 ? (int)max_i(kn->cpu_gemm_min_n, kn->cpu_dot16_max_n) : kn->cpu_gemm_min_n;
    if (!eval_i(g->body.par[0].extent, c->tp->max_batch, c->tp->max_ctx, &maxrows) || maxrows <= min_n) return 0;
    g->kind = SCHED_CPU_GEMM;
    g->name = arena_printf(A, "%s_gemm", g->nest->kname);
    g->block = 1;
    P->nb = 4 * CPU_GEMM_NR;
    P->mc = 8 * CPU_GEMM_MR;
    /* K whole up to 1024: then packing reads the task's weight rows (contiguous in memory) as one stream,
     * which the prefetcher follows (K steps of 512 cut it into 2 KiB runs, one per row); longer K in steps
     * of 512. The panels, (mc + 2 nb) x kc floats, at most 704 KiB, are the task's stack arrays. Block-type
     * weights are packed a K step at a time from whole blocks: 512 is whole blocks of every type (the K-quants'
     * super-blocks are 256), and K is. */
    P->kc = K <= 1024 ? (int)K : 512;
    /* X[t, k] of an f32 matrix (every activation a model's linears read): the kernel reads its rows in
     * place; a panel per task (packed 2 x 76 times for Qwen2.5-0.5B's gate/up) cost as much as the FMAs */
    const Expr *X = P->xop;
    P->x_in_place = X->k == EX_LOAD && X->buf->dtype == DT_F32 && X->nargs == 2 && X->a[0]->k == EX_VAR &&
                    X->a[0]->var == g->body.par[0].v && X->a[1]->k == EX_VAR && X->a[1]->var == g->body.red[0].v;
    /* W[o, k] of an f32 or bf16 matrix: packed by the runtime (a vectorised transposition), and with bf16
     * weights and activations in place, multiplied in bf16 dot products (runtime/cpu_gemm.h says why) */
    P->dot = kn->cpu_gemm_bf16 && P->x_in_place;
    P->debug_row = kn->debug_pack_row;
    int64_t outs;
    bool outs_known = eval_i(g->body.par[1].extent, 0, 0, &outs);
    for (int a = 0; a < g->body.nacc; a++) {
        P->w_rows[a] = outs_known && weight_rows(A, P->wop[a], g->body.par[1].v, g->body.red[0].v, outs, P->nb,
                                                 &P->run_rows[a], &P->run_gap[a]);
        P->dot = P->dot && P->w_rows[a] && P->wop[a]->buf->dtype == DT_BF16;
    }
    g->grid = ceil_div(A, g->body.par[1].extent, P->nb);
    out[0] = g;
    /* a constant token count (llmcc run -c): this kernel alone */
    if (expr_is_const(g->body.par[0].extent, &maxrows)) return 1;
    return with_fallback(c, g, min_n, cpu_rows_choose, out);
}
void cpu_gemm_print(Str *o, const TileKernel *k) {
    const NestBody *b = &k->body;
    const CpuGemmParams *P = &b->cpug;
    str_printf(o, " nb=%d mc=%d kc=%d\n  task bid -> %s [bid*%d, +%d) x all %s, in blocks of %d tokens; K [",
               P->nb, P->mc, P->kc, b->par[1].v->name, P->nb, P->nb, b->par[0].v->name, P->mc);
    print_axes(o, b->red, b->nred);
    str_printf(o, "] in steps of %d: pack %s", P->kc, P->wop[0]->buf->name);
    if (P->dot)
        str_printf(o, " (bf16 pairs, slivers of %d), the activations (rows of %s) rounded to bf16, then the %dx%d "
                   "bf16-dot-product tile (f32 accumulation; where the CPU lacks AVX512_BF16, the same rounding on "
                   "the f32 kernel)", CPU_GEMM_DOT_NR, P->xop->buf->name, CPU_GEMM_DOT_MR, CPU_GEMM_DOT_NR);
    else {
        str_printf(o, " (f32, slivers of %d%s%s)", CPU_GEMM_NR, P->w_rows[0] ? ", by the runtime" : "",
                   dtype_is_quant(P->wop[0]->buf->dtype) ? ", the blocks dequantized" : "");
        if (P->x_in_place) str_printf(o, ", the activations read in place (rows of %s)", P->xop->buf->name);
        else str_printf(o, " and the activations (slivers of %d)", CPU_GEMM_MR);
        str_printf(o, ", then the %dx%d register-tile kernel (f32 accumulation)", CPU_GEMM_MR, CPU_GEMM_NR);
    }
    str_printf(o, k->run_if ? "; runs when n > %d\n" : "\n", k->min_n);
    if (b->nacc == 2)
        str_printf(o, "  a pair: %s packed beside it, one tile of %d columns\n", P->wop[1]->buf->name, 2 * P->nb);
}
const char *cpu_gemm_verify(const TileKernel *k) {
    const CpuGemmParams *P = &k->body.cpug;
    if (!P->xop || !P->wop[0] || (k->body.nacc == 2 && !P->wop[1])) return "cpu_gemm without its operands";
    if (P->nb < 1 || P->nb % CPU_GEMM_NR || P->mc < 1 || P->mc % CPU_GEMM_MR || P->kc < 1) return "cpu_gemm tiles";
    if (P->dot && (P->nb % CPU_GEMM_DOT_NR || P->mc % CPU_GEMM_DOT_MR || !P->x_in_place))
        return "cpu_gemm's bf16 dot product on other tiles";
    for (int a = 0; a < k->body.nacc; a++) {
        const bool whole = P->kc % dtype_block[P->wop[a]->buf->dtype] == 0;   /* (no % in a condition's text) */
        if (P->w_rows[a] && !whole) return "cpu_gemm's K steps are not whole blocks of the weight";
    }
    return NULL;
}

/* element (row, kk) of a panel packed in slivers of w rows, kc long: (row / w) * w * kc + kk * w + row % w */
static Expr *sliver_at(Arena *A, Expr *row, int w, Expr *kk, Expr *kc) {
    Expr *sliver = E_MUL(A, E_MUL(A, idiv(A, row, w), e_i(A, w)), kc);
    return E_ADD(A, E_ADD(A, sliver, E_MUL(A, kk, e_i(A, w))), imod(A, row, w));
}
/* for (v = 0; v < hi; v++) with room for cap statements */
static TStmt *count(Arena *A, Var *v, Expr *hi, int cap) { return ts_for(A, v, e_i(A, 0), hi, e_i(A, 1), cap); }

void cpu_gemm_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const NestBody *b = &t->body;
    const CpuGemmParams *P = &b->cpug;
    const int MR = CPU_GEMM_MR, NR = CPU_GEMM_NR, cols = b->nacc * P->nb;
    Var *tv = b->par[0].v, *ov = b->par[1].v, *kv = b->red[0].v;
    Expr *rows = b->par[0].extent, *outs = b->par[1].extent, *K = b->red[0].extent;
    int64_t most;
    CHECK(eval_i(rows, B->max_batch, B->max_ctx, &most), "cpu_gemm over an unbounded token count");
    k->nsmem = P->x_in_place && !P->dot ? CG_S_X : CG_NSMEM;   /* dot: the rounded activations' scratch */
    k->smem[CG_S_X].size = P->mc * P->kc;
    k->smem[CG_S_W].size = cols * P->kc;
    k->smem[CG_S_TILE].size = (int)((most + MR - 1) / MR * MR * cols);
    Var *o0 = new_var(A, B->nvars, "o0"), *t0 = new_var(A, B->nvars, "t0"), *m = new_var(A, B->nvars, "m");
    Var *k0 = new_var(A, B->nvars, "k0"), *kc = new_var(A, B->nvars, "kc"), *i = new_var(A, B->nvars, "i");
    Var *kk = new_var(A, B->nvars, "kk"), *j = new_var(A, B->nvars, "j");
    Expr *ev_i = e_var(A, i), *ev_kk = e_var(A, kk), *ev_j = e_var(A, j), *ev_kc = e_var(A, kc);
    TStmt **p = tlist(A, 3);
    p[0] = ts_let(A, o0, E_MUL(A, bid(A), e_i(A, P->nb)));
    /* for each K step: the weight panel once, then every block of mc tokens */
    TStmt *kb = ts_for(A, k0, e_i(A, 0), K, e_i(A, P->kc), 2 + b->nacc);
    p[1] = kb;
    ts_add(kb, ts_let(A, kc, emin(A, E_SUB(A, K, e_var(A, k0)), e_i(A, P->kc))));
    /* weight panel: column a * nb + j of accumulator a is W row(o0 + j), zero past the outputs */
    for (int a = 0; a < b->nacc; a++) {
        if (P->w_rows[a]) {
            /* the runtime's: rows o0 .. of W from column k0, those past the outputs zero */
            TStmt *pk = ts(A, TS_PACK);
            pk->smem = CG_S_W; pk->sidx = e_i(A, a * P->nb); pk->gn = P->nb; pk->lo = ev_kc; pk->dot = P->dot;
            pk->e = emin(A, e_i(A, P->nb), E_SUB(A, outs, e_var(A, o0)));
            pk->buf = P->wop[a]->buf;
            pk->idx = ARENA_ARRAY(A, Expr *, 2);
            pk->idx[0] = expr_subst(A, P->wop[a]->a[0], ov, e_var(A, o0)); pk->idx[1] = e_var(A, k0);
            pk->run_rows = P->run_rows[a]; pk->run_gap = P->run_gap[a];
            if (P->debug_row) {   /* the deliberate fault: from the next row on, one row fewer (none past W) */
                pk->idx[0] = E_ADD(A, pk->idx[0], e_i(A, 1));
                pk->e = emin(A, e_i(A, P->nb), E_SUB(A, E_SUB(A, outs, e_var(A, o0)), e_i(A, 1)));
            }
            ts_add(kb, pk);
            continue;
        }
        TStmt *fj = count(A, j, e_i(A, P->nb), 2);
        ts_add(fj, ts_let(A, ov, E_ADD(A, e_var(A, o0), ev_j)));
        TStmt *fk = count(A, kk, ev_kc, 2);
        ts_add(fk, ts_let(A, kv, E_ADD(A, e_var(A, k0), ev_kk)));
        Expr *col = E_ADD(A, ev_j, e_i(A, a * P->nb));
        Expr *w = e_select(A, lt(A, e_var(A, ov), outs), P->wop[a], e_f(A, 0.0));
        ts_add(fk, ts_sstore(A, CG_S_W, sliver_at(A, col, NR, ev_kk, ev_kc), w));
        ts_add(fj, fk);
        ts_add(kb, fj);
    }
    TStmt *tb = ts_for(A, t0, e_i(A, 0), rows, e_i(A, P->mc), 3);
    ts_add(kb, tb);
    ts_add(tb, ts_let(A, m, emin(A, E_SUB(A, rows, e_var(A, t0)), e_i(A, P->mc))));
    TStmt *mm = ts(A, TS_GEMM);
    if (P->x_in_place) {
        /* the activations' rows t0 .. from column k0, as they are */
        mm->buf = P->xop->buf;
        mm->idx = ARENA_ARRAY(A, Expr *, 2);
        mm->idx[0] = e_var(A, t0); mm->idx[1] = e_var(A, k0);
    } else {
        /* activation panel: rows i < m, zero up to the sliver's end */
        TStmt *fi = count(A, i, E_MUL(A, idiv(A, E_ADD(A, e_var(A, m), e_i(A, MR - 1)), MR), e_i(A, MR)), 2);
        ts_add(fi, ts_let(A, tv, E_ADD(A, e_var(A, t0), ev_i)));
        TStmt *fk = count(A, kk, ev_kc, 2);
        ts_add(fk, ts_let(A, kv, E_ADD(A, e_var(A, k0), ev_kk)));
        Expr *x = e_select(A, lt(A, ev_i, e_var(A, m)), P->xop, e_f(A, 0.0));
        ts_add(fk, ts_sstore(A, CG_S_X, sliver_at(A, ev_i, MR, ev_kk, ev_kc), x));
        ts_add(fi, fk);
        ts_add(tb, fi);
    }
    /* rows t0 .. t0 + m of the tile, accumulated over the K steps after the first */
    mm->gsmem[0] = P->x_in_place && !P->dot ? -1 : CG_S_X; mm->gsmem[1] = CG_S_W; mm->gsmem[2] = CG_S_TILE;
    mm->gn = cols; mm->dot = P->dot;
    mm->e = e_var(A, m); mm->lo = ev_kc; mm->step = e_var(A, k0);
    mm->sidx = E_MUL(A, e_var(A, t0), e_i(A, cols));
    ts_add(tb, mm);
    /* the epilogue: output o0 + j of token i reads column j (and nb + j) of row i */
    TStmt *ei = count(A, i, rows, 2);
    ts_add(ei, ts_let(A, tv, ev_i));
    TStmt *ej = count(A, j, emin(A, e_i(A, P->nb), E_SUB(A, outs, e_var(A, o0))), 1 + b->nstore);
    ts_add(ej, ts_let(A, ov, E_ADD(A, e_var(A, o0), ev_j)));
    Expr *cell = E_ADD(A, E_MUL(A, ev_i, e_i(A, cols)), ev_j);
    Expr *a1 = b->nacc > 1 ? sload(A, CG_S_TILE, E_ADD(A, cell, e_i(A, P->nb))) : NULL;
    ej->nbody += epi_stores(A, b, sload(A, CG_S_TILE, cell), a1, ej->body + ej->nbody);
    ts_add(ei, ej);
    p[2] = ei;
    kl_add(A, body, phase(A, p, 3, true));
}
