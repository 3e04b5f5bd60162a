/* cpu_rows.c: the cpu_rows schedule, the CPU target's schedule for every
 * nest of stores and reductions (elementwise ops, norms, softmax, argmax,
 * the linears at decode). The output elements, flattened, are cut into
 * tasks of consecutive elements; OpenMP hands each thread a contiguous run
 * of tasks (model_forward's one parallel region, `omp for` per kernel).
 * A task computes its elements in order as plain C: the reduction is an
 * inner loop the C compiler vectorises (contiguous along K, the weight
 * widened to f32 at each load). A linear computes `group` consecutive
 * elements together, their K loops fused into one: each activation load
 * then serves group rows, and group independent sums keep the vector units
 * busy while the weights stream from memory (decode is bandwidth-bound).
 * A linear over the call's tokens (n of them: decode, a batch of decoding
 * sequences) has tasks of output rows, each computing its rows for one token
 * after another (token_loop): the weights stream from memory once per call,
 * not once per token, and every token's element is computed by the same code
 * at any n (a batch's row is bit for bit the row alone).
 * A fused side store and tail run as written, in the same task. A linear
 * of block-type weights (GGUF's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) computes each element by
 * one runtime/cpu_quant.h dot product (qdot: the blocks dequantized in
 * vector registers, a loop the C compiler would not vectorise).
 * Tests: tests/test_cpu_target.py (ops over the shape matrix, the fixtures' logits), tests/test_families.py. */
#include "schedules/schedule.h"

/* whether e reads a weight along v (a load of a weight whose last index is v): a linear's term */
static bool reads_weight_along(const Expr *e, const Var *v) {
    if (e->k == EX_LOAD && e->buf->kind == BUF_WEIGHT) {
        const Expr *last = e->a[e->nargs - 1];
        if (last->k == EX_VAR && last->var == v) return true;
    }
    for (int i = 0; i < e->nargs; i++) if (reads_weight_along(e->a[i], v)) return true;
    return false;
}
/* bytes of a weight row the term reads along v (0: none) */
static int64_t weight_row_bytes(const Expr *e, const Var *v) {
    if (e->k == EX_LOAD && e->buf->kind == BUF_WEIGHT) {
        const Expr *last = e->a[e->nargs - 1];
        if (last->k == EX_VAR && last->var == v) return dtype_bytes(e->buf->dtype, e->buf->dims[e->buf->ndim - 1]);
    }
    for (int i = 0; i < e->nargs; i++) {
        int64_t b = weight_row_bytes(e->a[i], v);
        if (b) return b;
    }
    return 0;
}
/* a linear whose elements can share the K loop: one sum over one axis, no fused side store or tail */
static bool groupable(const NestBody *b) {
    if (b->nred != 1 || b->redop != RED_SUM || b->side.buf || b->tail_store.buf) return false;
    for (int a = 0; a < b->nacc; a++) if (!reads_weight_along(b->acc[a], b->red[0].v)) return false;
    return true;
}

/* A linear of weights read in place: every accumulator's term X[.., k] * W[f(o), k], W a weight of block type
 * (bf16: bf16) whose row does not depend on k, X one f32 activation load along k (the same for a pair) */
static bool weight_form(const NestBody *b, Expr **xop, Expr **wop, bool bf16) {
    if (!groupable(b)) return false;
    const Var *kv = b->red[0].v;
    for (int a = 0; a < b->nacc; a++) {
        const Expr *t = b->acc[a];
        if (t->k != EX_MUL) return false;
#define WEIGHT_OK(d) (bf16 ? (d) == DT_BF16 : dtype_is_quant(d))
        int w = t->a[0]->k == EX_LOAD && WEIGHT_OK(t->a[0]->buf->dtype) ? 0 : 1;
        Expr *W = t->a[w], *X = t->a[1 - w];
        if (W->k != EX_LOAD || !WEIGHT_OK(W->buf->dtype) || W->nargs != 2 || W->a[1]->k != EX_VAR ||
            W->a[1]->var != kv || expr_uses_var(W->a[0], kv))
            return false;
        if (X->k != EX_LOAD || X->buf->dtype != DT_F32 || X->a[X->nargs - 1]->k != EX_VAR ||
            X->a[X->nargs - 1]->var != kv || (a && !expr_equal(X, *xop)))
            return false;
        for (int d = 0; d + 1 < X->nargs; d++) if (expr_uses_var(X->a[d], kv)) return false;
        *xop = X; wop[a] = W;
#undef WEIGHT_OK
    }
    return true;
}
bool qdot_form(const NestBody *b, Expr **xop, Expr **wop) { return weight_form(b, xop, wop, false); }

/* dot16: a token loop's linear of bf16 weights whose activations are rows X[t, k] of a 2-d buffer (t the
 * token axis), each weight row independent of t */
static bool dot16_form(const NestBody *b, Expr **xop, Expr **wop) {
    if (!weight_form(b, xop, wop, true)) return false;
    const Expr *X = *xop;
    if (X->nargs != 2 || X->buf->ndim != 2 || X->a[0]->k != EX_VAR || X->a[0]->var != b->par[0].v ||
        X->buf->dims[1] != b->red[0].extent->i || b->red[0].extent->k != EX_ICONST)
        return false;
    for (int a = 0; a < b->nacc; a++) if (expr_uses_var(wop[a]->a[0], b->par[0].v)) return false;
    return true;
}

int cpu_rows_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out) {
    if (c->leaf && c->leaf->k != LS_STORE) return 0;   /* an attention or a top-k */
    const Knobs *kn = c->kn;
    k->kind = SCHED_CPU_ROWS;
    k->body = *c->shape;
    k->block = 1;
    CpuRowsParams *P = &k->body.cpu;
    /* rows of 8 KiB or more: 4 at a time (each activation load serves 4). Shorter rows one at a time: 4
     * interleaved streams of a few cache lines each defeat the hardware prefetcher (Qwen2.5-0.5B's bf16
     * K = 896 rows: 19 GB/s with 4, 32 with 1 on this 2-core machine; K = 4864: 30 and 28) */
    int64_t row = groupable(&k->body) ? weight_row_bytes(k->body.acc[0], k->body.red[0].v) : 0;
    P->group = !row ? 1 : kn->cpu_group ? kn->cpu_group : row >= 8192 ? 4 : 1;
    P->qdot = qdot_form(&k->body, &P->xop, P->wop);
    if (P->qdot) P->group = 1;   /* one dot product per element: each reads its row once */
    P->debug_row = kn->debug_qdot_row;
    /* the lm_head keeps f32 activations (graph.h, picks_token): SmolLM2-135M's first answer token's best
     * logits are 0.08 apart, and the 8-bit rounding moved them 0.26 */
    P->acts_q8 = P->qdot && kn->cpu_qdot_q8 && !k->nest->op->picks_token;
    int64_t t1;
    CHECK(eval_i(c->total, 1, 0, &t1), "nest %s: extents", k->nest->module);
    Expr *rows = c->total;
    P->token_loop = row && k->body.npar >= 2 && expr_reads_param(k->body.par[0].extent, P_N);
    for (int i = 1; P->token_loop && i < k->body.npar; i++)
        P->token_loop = !expr_reads_param(k->body.par[i].extent, P_N);
    if (P->token_loop) rows = product(c->A, k->body.par + 1, k->body.npar - 1);
    P->dot16 = P->token_loop && kn->cpu_rows_bf16 && dot16_form(&k->body, &P->xop, P->wop);
    if (P->dot16) P->group = 1;   /* one dot product per element: groups are of tokens (eight, four) */
    /* the runtime dot products' prefetch (runtime/cpu_quant.h's cpu_prefetch_step says what it gained) */
    P->prefetch = P->qdot || P->dot16 ? kn->cpu_prefetch : 0;
    /* cpu_tasks tasks at n = 1 (more for larger n, but in a token loop): enough to balance any thread count; a
     * token loop's task reads at most 256 KiB of weights, which stay in the core's L2 cache for the next token */
    P->chunk = max_i((t1 + kn->cpu_tasks - 1) / kn->cpu_tasks, 1);
    if (P->token_loop) P->chunk = max_i(min_i(P->chunk, (256 << 10) / (row * k->body.nacc)), 1);
    P->chunk = (P->chunk + P->group - 1) / P->group * P->group;
    k->grid = ceil_div(c->A, rows, P->chunk);
    out[0] = k;
    return 1;
}
void cpu_rows_print(Str *o, const TileKernel *k) {
    const NestBody *b = &k->body;
    const CpuRowsParams *P = &b->cpu;
    str_printf(o, " chunk=%lld group=%d\n  task bid -> elements [bid*%lld, +%lld) of [", (long long)P->chunk, P->group,
               (long long)P->chunk, (long long)P->chunk);
    print_axes(o, b->par + P->token_loop, b->npar - P->token_loop);
    str_printf(o, "] in order");
    if (P->token_loop) str_printf(o, " for each %s in 0..%s in turn", b->par[0].v->name, "n");
    if (b->nred) {
        str_printf(o, ", each a loop over [");
        print_axes(o, b->red, b->nred);
        str_printf(o, "] (%s)", red_op_names[b->redop]);
    }
    if (P->group > 1)
        str_printf(o, ", %d elements' K loops as one (each activation load serves %d)", P->group, P->group);
    if (P->dot16)
        str_printf(o, ", each a bf16 dot product of a row of %s and a row of %s rounded to bf16 (8, 4, 1 tokens "
                   "at a time)", P->wop[0]->buf->name, P->xop->buf->name);
    if (P->qdot)
        str_printf(o, ", each a dot product of %s's %s blocks (%s) and a row of %s%s", P->wop[0]->buf->name,
                   dtype_names[P->wop[0]->buf->dtype], P->acts_q8 ? "integer products" : "dequantized in registers",
                   P->xop->buf->name, P->acts_q8 ? " rounded to 8 bits per 32" : "");
    if (P->prefetch) str_printf(o, ", the weights prefetched %d bytes ahead", P->prefetch);
    if (b->side.buf) str_printf(o, ", storing the fused %s on the way", b->side.buf->name);
    if (b->tail_store.buf) str_printf(o, ", then %s over its row", b->tail_store.buf->name);
    str_printf(o, "\n");
}
const char *cpu_rows_verify(const TileKernel *k) {
    const CpuRowsParams *P = &k->body.cpu;
    if (P->group < 1 || P->chunk < 1 || P->chunk % P->group) return "cpu_rows parameters";
    if (P->prefetch < 0 || P->prefetch % 64 || (P->prefetch && !P->qdot && !P->dot16))
        return "cpu_rows prefetch not whole cache lines or without a runtime dot product";
    if (P->qdot && (P->group != 1 || !P->xop || !P->wop[0] || (k->body.nacc == 2 && !P->wop[1])))
        return "cpu_rows qdot without its operands or in a group";
    if (P->token_loop && (!groupable(&k->body) || k->body.npar < 2))
        return "cpu_rows token loop of a nest that is not a linear";
    if (P->dot16 && (!P->token_loop || P->qdot || P->group != 1 || !P->xop || !P->wop[0]))
        return "cpu_rows dot16 outside a token loop or without its operands";
    return P->group > 1 && !groupable(&k->body) ? "cpu_rows group of a nest that is not a linear" : NULL;
}

/* registers: one element's accumulator (argmax: the best value), its side value (argmax: the best index);
 * a group's accumulators instead (element r, accumulator a in register r * nacc + a) */
enum { ROWS_R_ACC, ROWS_R_AUX };

/* element g's statements into f (the loop over g): decompose, the reduction (with a side store), the
 * stores, the tail */
static void one_element(KernelBuilder *B, const NestBody *b, Var *g, TStmt *f) {
    Arena *A = B->A;
    f->nbody = decompose(A, f->body, b->par, b->npar, e_var(A, g));
    Expr *res = NULL, *acc = reg(A, ROWS_R_ACC);
    if (b->nred) {
        const bool am = b->redop == RED_ARGMAX;
        CHECK(!am || (b->nred == 1 && !b->side.buf), "argmax over %d axes or with a side store", b->nred);
        ts_add(f, ts_assign(A, ROWS_R_ACC, am ? e_f(A, -1.0 / 0.0) : red_init(A, b->redop)));
        if (am) ts_add(f, ts_assign(A, ROWS_R_AUX, e_f(A, 0.0)));
        /* one axis: its own variable is the loop's; two: a flat loop decomposed */
        Var *r = b->nred == 1 ? b->red[0].v : new_var(A, B->nvars, "r");
        TStmt *loop = ts_for(A, r, e_i(A, 0), product(A, b->red, b->nred), e_i(A, 1), b->nred + 3);
        if (b->nred > 1) loop->nbody = decompose(A, loop->body, b->red, b->nred, e_var(A, r));
        if (am) {
            /* the first maximum: only a strictly larger value wins; NaN never does */
            TStmt *better = ts_if(A, lt(A, reg(A, ROWS_R_ACC), b->acc[0]), 2);
            ts_add(better, ts_assign(A, ROWS_R_ACC, b->acc[0]));
            ts_add(better, ts_assign(A, ROWS_R_AUX, e_un(A, EX_TOF, e_var(A, r))));
            ts_add(loop, better);
            acc = reg(A, ROWS_R_AUX);
        } else {
            reduce_update(A, b, loop, ROWS_R_ACC, ROWS_R_AUX);
        }
        ts_add(f, loop);
        res = acc;
    }
    CHECK(b->nacc == 1 || !b->nred, "two accumulators outside a group");
    f->nbody += epi_stores(A, b, res, NULL, f->body + f->nbody);
    if (b->tail_store.buf) {
        /* the row op reads the row's result back: this task stored it just now */
        TStmt *tail = ts_for(A, b->tail.v, e_i(A, 0), b->tail.extent, e_i(A, 1), 1);
        ts_add(tail, ts_store(A, b->tail_store.buf, b->tail_store.idx, b->tail_store.value));
        ts_add(f, tail);
    }
}

/* The stores of a statement list with the parallel axes' variables replaced (a group's element r) */
static TStmt *store_for_element(Arena *A, const TStmt *s, Var *const *from, Expr *const *to, int n) {
    TStmt *c = ARENA_NEW(A, TStmt);
    *c = *s;
    c->e = expr_subst_vars(A, s->e, from, to, n);
    c->idx = ARENA_ARRAY(A, Expr *, s->buf->ndim);
    for (int d = 0; d < s->buf->ndim; d++) c->idx[d] = expr_subst_vars(A, s->idx[d], from, to, n);
    return c;
}

/* elements g .. g+G-1 of a linear into f (the loop over g): each element's axes as its own variables,
 * the accumulators zeroed, one K loop summing every element's terms, then each element's stores. tok: the
 * token loop's variable (the first axis), g then counting the other axes' elements. */
static void element_group(KernelBuilder *B, const NestBody *b, int G, Var *g, TStmt *f, Var *tok) {
    Arena *A = B->A;
    const int np = b->npar, na = b->nacc;
    Var *from[MAX_AXES];
    for (int i = 0; i < np; i++) from[i] = b->par[i].v;
    Expr *to[8][MAX_AXES];
    TStmt *loop = ts_for(A, b->red[0].v, e_i(A, 0), b->red[0].extent, e_i(A, 1), G * na);
    const CpuRowsParams *P = &b->cpu;
    for (int r = 0; r < G; r++) {
        Axis ax[MAX_AXES];
        for (int i = 0; i < np; i++) {
            ax[i] = (Axis){new_var(A, B->nvars, arena_printf(A, "%s%d", b->par[i].v->name, r)), b->par[i].extent};
            to[r][i] = e_var(A, ax[i].v);
        }
        if (tok) to[r][0] = e_var(A, tok);
        f->nbody += decompose(A, f->body + f->nbody, ax + !!tok, np - !!tok, E_ADD(A, e_var(A, g), e_i(A, r)));
        for (int a = 0; a < na; a++) {
            int acc = r * na + a;
            if (P->qdot) {
                /* the element's weight row and activation row, from k = 0 */
                TStmt *q = ts(A, TS_QDOT);
                q->reg = acc; q->buf = P->wop[a]->buf; q->lo = b->red[0].extent; q->dot = P->acts_q8;
                q->prefetch = P->prefetch;
                q->idx = ARENA_ARRAY(A, Expr *, 2);
                q->idx[0] = expr_subst_vars(A, P->wop[a]->a[0], from, to[r], np); q->idx[1] = e_i(A, 0);
                if (P->debug_row)   /* the deliberate fault: the next row */
                    q->idx[0] = imod(A, E_ADD(A, q->idx[0], e_i(A, 1)), P->wop[a]->buf->dims[0]);
                q->e = expr_subst(A, expr_subst_vars(A, P->xop, from, to[r], np), b->red[0].v, e_i(A, 0));
                ts_add(f, q);
                continue;
            }
            ts_add(f, ts_assign(A, acc, e_f(A, 0.0)));
            ts_add(loop, ts_assign(A, acc, E_ADD(A, reg(A, acc), expr_subst_vars(A, b->acc[a], from, to[r], np))));
        }
    }
    if (!P->qdot) ts_add(f, loop);
    for (int r = 0; r < G; r++) {
        TStmt *st[2];
        int ns = epi_stores(A, b, reg(A, r * na), na > 1 ? reg(A, r * na + 1) : NULL, st);
        for (int i = 0; i < ns; i++) ts_add(f, store_for_element(A, st[i], from, to[r], np));
    }
}

/* dot16: row g's elements of tokens tok .. tok + m - 1 (m at most 8) into f: the row's axes from g, one dot16 per
 * accumulator (the scratch array, smem 0, holds accumulator a of token j at a * 8 + j), then a loop over the
 * tokens' stores */
static void dot16_element(KernelBuilder *B, const NestBody *b, Var *g, Var *tok, Var *m, TStmt *f) {
    Arena *A = B->A;
    const int np = b->npar, na = b->nacc;
    const CpuRowsParams *P = &b->cpu;
    Var *from[MAX_AXES];
    Expr *to[MAX_AXES];
    Axis ax[MAX_AXES];
    for (int i = 0; i < np; i++) from[i] = b->par[i].v;
    for (int i = 1; i < np; i++) {
        ax[i] = (Axis){new_var(A, B->nvars, b->par[i].v->name), b->par[i].extent};
        to[i] = e_var(A, ax[i].v);
    }
    to[0] = e_var(A, tok);
    f->nbody += decompose(A, f->body + f->nbody, ax + 1, np - 1, e_var(A, g));
    for (int a = 0; a < na; a++) {
        TStmt *q = ts(A, TS_DOT16);
        q->gn = 8; q->step = e_var(A, m); q->smem = 0; q->sidx = e_i(A, a * 8);
        q->buf = P->wop[a]->buf; q->lo = b->red[0].extent; q->prefetch = P->prefetch;
        q->idx = ARENA_ARRAY(A, Expr *, 2);
        q->idx[0] = expr_subst_vars(A, P->wop[a]->a[0], from, to, np); q->idx[1] = e_i(A, 0);
        q->e = expr_subst(A, expr_subst_vars(A, P->xop, from, to, np), b->red[0].v, e_i(A, 0));
        ts_add(f, q);
    }
    TStmt *st[2];
    Var *j = new_var(A, B->nvars, "j");
    TStmt *each = ts_for(A, j, e_i(A, 0), e_var(A, m), e_i(A, 1), 2);
    int ns = epi_stores(A, b, sload(A, 0, e_var(A, j)), na > 1 ? sload(A, 0, E_ADD(A, e_var(A, j), e_i(A, 8))) : NULL,
                        st);
    to[0] = E_ADD(A, e_var(A, tok), e_var(A, j));
    for (int i = 0; i < ns; i++) ts_add(each, store_for_element(A, st[i], from, to, np));
    ts_add(f, each);
}

/* lo = bid * chunk, hi = min(lo + chunk, total); whole groups from lo to mid, then one at a time to hi */
void cpu_rows_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const NestBody *b = &t->body;
    const CpuRowsParams *P = &b->cpu;
    const int G = P->group;
    CHECK(G <= 8, "cpu_rows group %d", G);
    if (!P->dot16)
        declare_regs(k, groupable(b) ? G * b->nacc : b->nred && (b->redop == RED_ARGMAX || b->side.buf) ? 2 : b->nred);
    Var *lo = new_var(A, B->nvars, "lo"), *hi = new_var(A, B->nvars, "hi"), *mid = new_var(A, B->nvars, "mid");
    TStmt **p = tlist(A, 5);
    int n = 0;
    /* token_loop: the elements are the rows of the other axes, each task's for every token in turn */
    const bool tl = P->token_loop;
    if (P->dot16) {
        /* the task's rows for eight tokens at a time (each weight row loaded once for the eight; the last tokens
         * four at once and one at a time, runtime/cpu_dot16.h) */
        declare_regs(k, 0);
        k->nsmem = 1;
        k->smem[0].size = 8 * b->nacc;
        Expr *nt = b->par[0].extent;
        p[n++] = ts_let(A, lo, E_MUL(A, bid(A), e_i(A, P->chunk)));
        p[n++] = ts_let(A, hi, emin(A, E_ADD(A, e_var(A, lo), e_i(A, P->chunk)), product(A, b->par + 1, b->npar - 1)));
        Var *tv = new_var(A, B->nvars, b->par[0].v->name), *g = new_var(A, B->nvars, "g");
        Var *m = new_var(A, B->nvars, "m");
        TStmt *tokens = ts_for(A, tv, e_i(A, 0), nt, e_i(A, 8), 2);
        ts_add(tokens, ts_let(A, m, emin(A, E_SUB(A, nt, e_var(A, tv)), e_i(A, 8))));
        TStmt *rows = ts_for(A, g, e_var(A, lo), e_var(A, hi), e_i(A, 1), b->npar + b->nacc + 2);
        dot16_element(B, b, g, tv, m, rows);
        ts_add(tokens, rows);
        p[n++] = tokens;
        kl_add(A, body, phase(A, p, n, true));
        return;
    }
    Var *tok = tl ? new_var(A, B->nvars, b->par[0].v->name) : NULL;
    TStmt *tokens = tl ? ts_for(A, tok, e_i(A, 0), b->par[0].extent, e_i(A, 1), 2) : NULL;
    p[n++] = ts_let(A, lo, E_MUL(A, bid(A), e_i(A, P->chunk)));
    p[n++] = ts_let(A, hi, emin(A, E_ADD(A, e_var(A, lo), e_i(A, P->chunk)), product(A, b->par + tl, b->npar - tl)));
    Expr *start = e_var(A, lo);
    if (G > 1) {
        p[n++] = ts_let(A, mid, E_ADD(A, e_var(A, lo), E_MUL(A, idiv(A, E_SUB(A, e_var(A, hi), e_var(A, lo)), G),
                                                               e_i(A, G))));
        Var *g = new_var(A, B->nvars, "g");
        TStmt *groups = ts_for(A, g, e_var(A, lo), e_var(A, mid), e_i(A, G), G * (b->npar + b->nacc + 2) + 1);
        element_group(B, b, G, g, groups, tok);
        if (tl) ts_add(tokens, groups);
        else p[n++] = groups;
        start = e_var(A, mid);
    }
    Var *g = new_var(A, B->nvars, "g");
    TStmt *each = ts_for(A, g, start, e_var(A, hi), e_i(A, 1), b->npar + b->nacc + 8);
    if (groupable(b)) element_group(B, b, 1, g, each, tok);   /* a linear's elements left over */
    else one_element(B, b, g, each);
    if (tl) { ts_add(tokens, each); p[n++] = tokens; }
    else p[n++] = each;
    kl_add(A, body, phase(A, p, n, true));
}
