/* gemv.c: the gemv schedule and its splitk_sum. gemv: reductions that read
 * a weight (the linears): one warp per output element (rows of them per
 * block), lanes stride over K with 128-bit vector loads, f32 accumulation,
 * a warp-shuffle tree; optionally split over K (split-K): partials go to a
 * workspace and splitk_sum, the second pass, sums a thread per output
 * element's split_k partials in order (deterministic) and applies the
 * epilogue. A pair nest (two accumulators): the lanes sum both terms, the
 * activation loaded once. Where a call can have more than gemm_min_n
 * tokens, gemm_tc (gemm_tc.c) runs instead for n > gemm_min_n. Weights of
 * 32-element blocks (q8_0, q4_0, q4_1, q5_0, q5_1): a lane's round is a
 * group of consecutive blocks whose bytes are a multiple of 16 (or 8) where
 * the rows are whole groups, else a block, and its rounds one bdot statement
 * (runtime/kernels.h: every round's bytes loaded first, 16- or 8-byte loads
 * for groups, then dequantized in registers). All of a lane's rounds of a
 * slice are in one loop whose last trip may have fewer: the loads of a whole
 * weight row are in flight together where it fits the lanes' registers.
 * Tests: tests/test_ops.py (linear, knobs gemv_*), tests/test_epilogues.py (pairs, halves),
 * tests/test_quant.py (bdot, knob debug_bdot_row). */
#include "schedules/schedule.h"

/* accumulator j in register 2j, its shuffle partner in 2j + 1 (warp_trees) */
enum { GEMV_R_ACC0, GEMV_R_PARTNER0, GEMV_R_ACC1, GEMV_R_PARTNER1 };

/* Eligibility and vector width: whether the term reads a weight along K (a plain load: K the last index
 * alone), and the widest vector every K-indexed load allows. */
typedef struct {
    const Var *k;              /* the K variable */
    bool weight;               /* a plain weight load along K */
    bool ok;                   /* every K-indexed load is plain (vectorisable) */
    int vec;                   /* widest vector their rows stay aligned to */
    int wsize;                 /* the weight's element size */
} GemvScan;
static void gemv_scan(GemvScan *s, const Expr *e) {
    if (e->k == EX_LOAD && expr_uses_var(e, s->k)) {
        const Buffer *b = e->buf;
        const Expr *last = e->a[e->nargs - 1];
        bool plain = last->k == EX_VAR && last->var == s->k;
        for (int d = 0; d + 1 < e->nargs; d++) if (expr_uses_var(e->a[d], s->k)) plain = false;
        if (plain && b->kind == BUF_WEIGHT) { s->weight = true; s->wsize = dtype_sizes[b->dtype]; }
        /* a vector load covers [c, c + vec) of the last dimension: rows must stay vector aligned. Block
         * types are loaded an element at a time (dequantized by ld_q*) */
        if (!plain || dtype_is_quant(b->dtype)) s->ok = false;
        while (s->vec > 1 && b->dims[b->ndim - 1] % s->vec) s->vec /= 2;
        return;
    }
    for (int i = 0; i < e->nargs; i++) gemv_scan(s, e->a[i]);
}

/* bdot's groups (runtime/kernels.h's BDOT_TYPE and BDOT_GROUP_FN lines say the same), the first that fits: blocks
 * a group, groups a lane loads at most together (about 160 bytes), the load width (the group's bytes are a multiple
 * of it). A pair takes groups of at most 4 blocks: 2 x 8 blocks' activations spill (q4_0's gate/up pair at 7B) */
static const struct { DType dtype; int group, most, load_bytes; } bdot_groups[] = {
    {DT_Q4_1, 4, 2, 16}, {DT_Q4_0, 8, 1, 16}, {DT_Q4_0, 4, 2, 8}, {DT_Q8_0, 4, 1, 8}, {DT_Q5_1, 2, 3, 16},
    {DT_Q5_0, 4, 1, 8},
};

int gemv_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out) {
    Arena *A = c->A;
    const Knobs *kn = c->kn;
    const NestBody *b = c->shape;
    int64_t K = 0;
    GemvScan gs = {0};
    if (!b->side.buf && !b->tail_store.buf && b->nred == 1 && b->redop == RED_SUM &&
        expr_is_const(b->red[0].extent, &K)) {
        gs.k = b->red[0].v; gs.ok = true; gs.vec = 8;
        gemv_scan(&gs, b->acc[0]);
        bool w0 = gs.weight;
        if (b->nacc == 2) { gs.weight = false; gemv_scan(&gs, b->acc[1]); gs.weight &= w0; }
    }
    CHECK(b->nacc == 1 || gs.weight, "nest %s: a pair that is not two linears", k->nest->module);
    if (!gs.weight) return 0;
    k->kind = SCHED_GEMV;
    k->body = *b;
    GemvParams *P = &k->body.gemv;
    P->rows = kn->gemv_rows_per_block ? kn->gemv_rows_per_block : 4;
    k->block = 32 * P->rows;
    /* block-type weights read as whole blocks (bdot): a lane's round is one block or a group of them, or half
     * a K-quant super-block (not for knob gemv_bdot_groups=0: element loads) */
    P->bdot = qdot_form(&k->body, &P->xop, P->wop);
    for (int a = 0; P->bdot && a < b->nacc; a++)
        P->bdot = dtype_block[P->wop[a]->buf->dtype] == 32 || (dtype_block[P->wop[a]->buf->dtype] == 256 &&
                  kn->gemv_bdot_groups && P->wop[a]->buf->dtype == P->wop[0]->buf->dtype);
    P->debug_row = kn->debug_bdot_row;
    /* bdot: groups where every accumulator's type has one, the row is whole groups and the unroll knob fits
     * the group form's registers */
    P->group = 1;
    int most = 8;
    if (P->bdot && dtype_block[P->wop[0]->buf->dtype] == 256) {
        /* the K-quants: a round is half a super-block (runtime/kernels.h bdot_q4_k_h ...): q4_k's 80 bytes, two
         * rounds a lane (one for a pair, whose activations would not fit), q5_k's 112, q6_k's ~116, one */
        P->group = 4; P->load_bytes = P->wop[0]->buf->dtype == DT_Q6_K ? 4 : 16;
        most = P->wop[0]->buf->dtype == DT_Q4_K && b->nacc == 1 ? 2 : 1;
        if (kn->gemv_unroll > most) { P->bdot = false; P->group = 1; }
    }
    for (size_t i = 0; P->bdot && P->group == 1 && kn->gemv_bdot_groups && i < sizeof bdot_groups / sizeof *bdot_groups;
         i++)
        if (bdot_groups[i].dtype == P->wop[0]->buf->dtype && (b->nacc == 1 || (bdot_groups[i].group <= 4 &&
            P->wop[1]->buf->dtype == P->wop[0]->buf->dtype)) && K % (32 * bdot_groups[i].group) == 0 &&
            kn->gemv_unroll <= bdot_groups[i].most) {
            P->group = bdot_groups[i].group; P->load_bytes = bdot_groups[i].load_bytes; most = bdot_groups[i].most;
        }
    /* vector width: 16 bytes of the weight per lane, narrowed until every vectorised load stays aligned */
    int vec = P->bdot ? 32 * P->group : 1;
    if (gs.ok) {
        vec = gs.vec;
        int want = kn->gemv_vec ? kn->gemv_vec : 16 / gs.wsize;
        while (vec > want) vec /= 2;
        while (vec > 1 && K % vec) vec /= 2;
    }
    P->vec = vec;
    int64_t t1 = 1, tmax = 1;
    CHECK(eval_i(c->total, 1, 0, &t1) && eval_i(c->total, c->tp->max_batch, c->tp->max_ctx, &tmax),
          "nest %s: extents", k->nest->module);
    int64_t blocks1 = (t1 + P->rows - 1) / P->rows;
    int64_t step = 32 * (int64_t)vec, rounds = (K + step - 1) / step;
    int64_t S = kn->gemv_split_k;
    if (!S) {
        /* split K while a decode step (n = 1) would leave the GPU's SMs short of blocks (about 2 per SM) */
        S = blocks1 >= kn->gemv_target_blocks ? 1 : (kn->gemv_target_blocks + blocks1 - 1) / blocks1;
        if (S > rounds / 2) S = max_i(1, rounds / 2);   /* each slice keeps at least two rounds of vector loads */
    }
    if (S > rounds) S = rounds;
    /* slices start vector aligned; a slice's last round may be partial, like the whole row's */
    P->k_chunk = (K + S - 1) / S;
    P->k_chunk = (P->k_chunk + vec - 1) / vec * vec;
    P->split_k = (int)((K + P->k_chunk - 1) / P->k_chunk);
    /* unroll: a lane's vector loads of U rounds issued together, so U loads per lane are in flight
     * (one alone leaves a decode GEMV well short of the memory's latency-bandwidth product) */
    int64_t lane_rounds = (P->k_chunk + step - 1) / step;
    P->unroll = kn->gemv_unroll ? kn->gemv_unroll : lane_rounds >= 4 ? 4 : lane_rounds >= 2 ? 2 : 1;
    if (P->bdot && !kn->gemv_unroll) {
        /* rounds a lane loads together: up to about 160 bytes of them (8 of q4_1's blocks of 20, 4 of q8_0's 34;
         * the group form's most), no more than the lane's rounds in a slice */
        int64_t bytes = 1;
        for (int a = 0; P->group == 1 && a < b->nacc; a++) bytes = max_i(bytes, dtype_bytes(P->wop[a]->buf->dtype, 32));
        P->unroll = P->group > 1 ? most : (int)min_i(8, 160 / bytes);
        if (P->unroll > lane_rounds) P->unroll = (int)max_i(1, lane_rounds);
    }
    /* bdot: at least 12 warps an SM where the grid has more than gemv_target_blocks (2 an SM) at n = 1: their
     * rounds' loads are what is in flight (a q6_k gate/up pair's activations and two rows of words took 244
     * registers, 8 warps: 29 KB a SM; capped at 168, 12 warps: 44 KB). A smaller grid leaves the registers free
     * (at 1-2 blocks an SM, a lane's loads of both rows of a pair are all that is in flight) */
    P->min_blocks = P->bdot && blocks1 * P->split_k > kn->gemv_target_blocks ? (12 + P->rows - 1) / P->rows : 0;
    k->grid = E_MUL(A, ceil_div(A, c->total, P->rows), e_i(A, P->split_k));
    out[0] = k;
    if (P->split_k == 1) return 1;
    P->work = work_buffer(A, k->nest->kname, "partials", tmax, (int64_t)P->split_k * b->nacc);
    out[1] = second_kernel(A, k, SCHED_SPLITK_SUM, arena_printf(A, "%s_splitk", k->nest->kname), kn->flat_block,
                           ceil_div(A, c->total, kn->flat_block));
    return 2;
}

void gemv_print(Str *o, const TileKernel *k) {
    const NestBody *b = &k->body;
    const GemvParams *P = &b->gemv;
    str_printf(o, " rows_per_block=%d split_k=%d k_chunk=%lld vec=%d unroll=%d\n  warp (", P->rows, P->split_k,
               (long long)P->k_chunk, P->vec, P->unroll);
    if (P->split_k > 1) str_printf(o, "bid/%d*%d + tid/32) -> [", P->split_k, P->rows);
    else str_printf(o, "bid*%d + tid/32) -> [", P->rows);
    print_axes(o, b->par, b->npar);
    str_printf(o, "]\n  lanes stride over [");
    print_axes(o, b->red, b->nred);
    str_printf(o, "]");
    if (P->split_k > 1) str_printf(o, " slice bid%%%d", P->split_k);
    str_printf(o, " by 32x%d (", P->vec);
    if (P->bdot && dtype_block[P->wop[0]->buf->dtype] == 256)
        str_printf(o, "halves of super-blocks in %d-byte loads, bdot", P->load_bytes);
    else if (P->bdot && P->group > 1)
        str_printf(o, "groups of %d blocks in %d-byte loads, bdot", P->group, P->load_bytes);
    else str_printf(o, "%s", P->bdot ? "a block each, bdot" : P->vec > 1 ? "vector loads" : "scalar loads");
    if (P->unroll > 1 && P->bdot) str_printf(o, ", up to %d rounds' loads issued together", P->unroll);
    else if (P->unroll > 1) str_printf(o, ", %d rounds' loads issued together, then the rest one by one", P->unroll);
    str_printf(o, "), f32 accumulation in order, a warp-shuffle tree (sum)");
    if (b->nacc == 2)
        str_printf(o, "; two accumulators (a pair), each lane's activation loads serve both, %d store%s", b->nstore,
                   b->nstore > 1 ? "s" : "");
    if (P->work) str_printf(o, " -> %s", P->work->name);
    str_printf(o, "\n");
}
void splitk_sum_print(Str *o, const TileKernel *k) {
    flat_print(o, k);
    const GemvParams *P = &k->body.gemv;
    str_printf(o, "  sums %d partials of %s in order, then the epilogue\n", P->split_k, P->work->name);
}
const char *splitk_sum_verify(const TileKernel *k) {
    const GemvParams *P = &k->body.gemv;
    return !P->work || P->work->dims[1] != (int64_t)P->split_k * k->body.nacc ? "split-K without its workspace" : NULL;
}
const char *gemv_verify(const TileKernel *k) {
    const GemvParams *P = &k->body.gemv;
    if (k->body.nred != 1 || P->vec < 1 || P->k_chunk % P->vec || P->split_k < 1 || P->unroll < 1 || P->unroll > 8)
        return "gemv parameters";
    if (P->bdot && (P->vec != 32 * P->group || !P->xop || !P->wop[0] || (k->body.nacc == 2 && !P->wop[1])))
        return "gemv bdot without whole blocks or its operands";
    return P->split_k > 1 ? splitk_sum_verify(k) : NULL;
}

/* The reduced term for elements c .. c+vec-1 of the K axis: every load whose last index is the K variable
 * reads element j of a vector loaded once (shared by the terms of a pair). */
typedef struct {
    Arena *A;
    int *nvars;
    Var *kv;                   /* the K variable */
    Expr *c;                   /* the first element of the vectors */
    int vec;                   /* their width */
    TStmt **loads; int nloads; /* the vector loads made so far */
    Expr **src;                /* the load each one replaces */
} VectorLoads;
static Expr *vec_rewrite(VectorLoads *V, Expr *e, int j) {
    if (e->k == EX_LOAD && expr_uses_var(e, V->kv)) {
        int w = -1;
        for (int i = 0; i < V->nloads; i++) if (expr_equal(V->src[i], e)) w = i;
        if (w < 0) {
            CHECK(V->nloads < 8, "too many vector loads");
            TStmt *s = ts(V->A, TS_VLOAD);
            s->v = new_var(V->A, V->nvars, arena_printf(V->A, "v%d", V->nloads));
            s->buf = e->buf; s->vec = V->vec;
            s->idx = ARENA_ARRAY(V->A, Expr *, e->nargs);
            for (int d = 0; d < e->nargs; d++) s->idx[d] = expr_subst(V->A, e->a[d], V->kv, V->c);
            w = V->nloads++;
            V->loads[w] = s; V->src[w] = e;
        }
        return e_velem(V->A, V->loads[w]->v, j);
    }
    if (!e->nargs) return e;
    Expr *n = ARENA_NEW(V->A, Expr);
    *n = *e;
    n->a = ARENA_ARRAY(V->A, Expr *, e->nargs);
    for (int i = 0; i < e->nargs; i++) n->a[i] = vec_rewrite(V, e->a[i], j);
    return n;
}

/* The lets every gemv phase starts with; v: warp, lane, output element g, K slice ks (split-K only). */
enum { GEMV_V_WARP, GEMV_V_LANE, GEMV_V_OUT, GEMV_V_SLICE };
static int gemv_head(Arena *A, const GemvParams *P, TStmt **list, Var *const *v) {
    int n = 0;
    list[n++] = ts_let(A, v[GEMV_V_WARP], idiv(A, tid(A), 32));
    list[n++] = ts_let(A, v[GEMV_V_LANE], imod(A, tid(A), 32));
    if (P->split_k > 1) list[n++] = ts_let(A, v[GEMV_V_SLICE], imod(A, bid(A), P->split_k));
    Expr *first = E_MUL(A, idiv(A, bid(A), P->split_k), e_i(A, P->rows));
    list[n++] = ts_let(A, v[GEMV_V_OUT], E_ADD(A, first, e_var(A, v[GEMV_V_WARP])));
    return n;
}

/* A pair's second accumulator sums the second term over the same c; the vector loads of an operand both
 * terms read (the activation) are shared. */
void gemv_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const NestBody *b = &t->body;
    const GemvParams *P = &b->gemv;
    declare_regs(k, 2 * b->nacc);
    k->min_blocks = P->min_blocks;
    Expr *total = product(A, b->par, b->npar);
    int64_t K;
    CHECK(expr_is_const(b->red[0].extent, &K), "gemv over a runtime extent");
    Var *hv[4];
    for (int i = 0; i < 4; i++) hv[i] = new_var(A, B->nvars, (const char *[]){"warp", "lane", "g", "ks"}[i]);
    Expr *lane = e_var(A, hv[GEMV_V_LANE]), *ks = e_var(A, hv[GEMV_V_SLICE]), *g = e_var(A, hv[GEMV_V_OUT]);
    TStmt **p0 = tlist(A, 7);
    int n0 = gemv_head(A, P, p0, hv);
    for (int j = 0; j < b->nacc; j++) p0[n0++] = ts_assign(A, 2 * j, e_f(A, 0.0));
    TStmt *in = ts_if(A, lt(A, g, total), b->npar + 2);
    in->nbody = decompose(A, in->body, b->par, b->npar, g);
    /* for c = ks*chunk + lane*vec; c < min(ks*chunk + chunk, K); c += 32*vec; vector loads in two loops:
     * while U rounds remain, their loads all first, then their terms in order (the same sums as one round
     * at a time); then the rounds left one by one */
    const int64_t S = 32 * (int64_t)P->vec, U = P->unroll;
    Expr *k0 = P->split_k > 1 ? E_MUL(A, ks, e_i(A, P->k_chunk)) : e_i(A, 0);
    Expr *lo = E_ADD(A, k0, E_MUL(A, lane, e_i(A, P->vec)));
    Expr *hi = P->split_k == 1 ? e_i(A, K) : emin(A, E_ADD(A, k0, e_i(A, P->k_chunk)), e_i(A, K));
    Var *iv = b->red[0].v;
    if (P->bdot) {
        /* one loop: for c = lo; c < hi; c += U * S, each accumulator one bdot of the lane's rounds from c (S
         * apart), min(U, ceil((hi - c) / S)) of them (U where every slice is whole unrolled rounds) */
        Var *cv = new_var(A, B->nvars, "c");
        Expr *c = e_var(A, cv), *nb = e_i(A, U);
        if (U > 1 && (K % (U * S) || P->k_chunk % (U * S)))
            nb = emin(A, e_i(A, U), E_DIV(A, E_ADD(A, E_SUB(A, hi, c), e_i(A, S - 1)), e_i(A, S)));
        TStmt *f = ts_for(A, cv, lo, hi, e_i(A, S * U), b->nacc);
        for (int a = 0; a < b->nacc; a++) {
            TStmt *q = ts(A, TS_BDOT);
            q->reg = 2 * a; q->buf = P->wop[a]->buf; q->vec = (int)U; q->gn = S; q->lo = nb; q->group = P->group;
            q->idx = ARENA_ARRAY(A, Expr *, 2);
            q->idx[0] = P->wop[a]->a[0]; q->idx[1] = c;
            if (P->debug_row)   /* the deliberate fault: the next row */
                q->idx[0] = imod(A, E_ADD(A, q->idx[0], e_i(A, 1)), q->buf->dims[0]);
            q->e = expr_subst(A, P->xop, iv, c);
            ts_add(f, q);
        }
        ts_add(in, f);
    }
    for (int pass = U > 1 ? 0 : 1; !P->bdot && pass < 2; pass++) {
        int64_t rounds = pass ? 1 : U;
        Var *cv = new_var(A, B->nvars, pass ? "c" : "cu");
        /* the unrolled loop runs while its last round starts inside the slice; the other from where it
         * stopped: lo + (lane's rounds / U) * U * S, the lane's rounds max(0, ceil((hi - lo) / S)) */
        Expr *flo = lo, *fhi = pass ? hi : E_SUB(A, hi, e_i(A, (U - 1) * S));
        if (pass && U > 1) {
            Expr *lr = E_DIV(A, E_ADD(A, e_bin(A, EX_MAX, E_SUB(A, hi, lo), e_i(A, 0)), e_i(A, S - 1)), e_i(A, S));
            flo = E_ADD(A, lo, E_MUL(A, E_DIV(A, lr, e_i(A, U)), e_i(A, U * S)));
        }
        Expr *sum[2] = {reg(A, GEMV_R_ACC0), reg(A, GEMV_R_ACC1)};
        TStmt *vl[64]; Expr *src[8];
        int nvl = 0;
        for (int64_t u = 0; u < rounds; u++) {
            Expr *c = E_ADD(A, e_var(A, cv), e_i(A, u * S));
            VectorLoads V = {A, B->nvars, iv, c, P->vec, vl + nvl, 0, src};
            for (int a = 0; a < b->nacc; a++)
                for (int j = 0; j < P->vec; j++) {
                    /* the K variable outside the vectorised loads (all of them when scalar): element j is c + j */
                    Expr *term = P->vec == 1 ? b->acc[a] : vec_rewrite(&V, b->acc[a], j);
                    sum[a] = E_ADD(A, sum[a], expr_subst(A, term, iv, E_ADD(A, c, e_i(A, j))));
                }
            nvl += V.nloads;
        }
        TStmt *f = ts_for(A, cv, flo, fhi, e_i(A, S * rounds), nvl + 2);
        for (int i = 0; i < nvl; i++) ts_add(f, vl[i]);
        for (int a = 0; a < b->nacc; a++) ts_add(f, ts_assign(A, 2 * a, sum[a]));
        ts_add(in, f);
    }
    p0[n0++] = in;
    kl_add(A, body, phase(A, p0, n0, false));
    warp_trees(B, body, RED_SUM, 32, b->nacc);
    /* lane 0 stores the output (or its slice's partial) */
    TStmt **pl = tlist(A, 5);
    int nl = gemv_head(A, P, pl, hv);
    TStmt *l0 = ts_if(A, eq(A, lane, e_i(A, 0)), 1);
    TStmt *g0 = ts_if(A, lt(A, g, total), b->npar + 2);
    if (P->split_k > 1) {
        for (int a = 0; a < b->nacc; a++)
            ts_add(g0, ts_store2(A, P->work, g, E_ADD(A, ks, e_i(A, a * P->split_k)), reg(A, 2 * a)));
    } else {
        g0->nbody = decompose(A, g0->body, b->par, b->npar, g);
        g0->nbody += epi_stores(A, b, reg(A, GEMV_R_ACC0), reg(A, GEMV_R_ACC1), g0->body + g0->nbody);
    }
    ts_add(l0, g0);
    pl[nl++] = l0;
    kl_add(A, body, phase(A, pl, nl, false));
}

/* if (g < total) { decompose; accumulator j = the sum of its partials, columns j*split_k .. of the
 * workspace; the epilogue's stores } */
void splitk_sum_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const GemvParams *P = &t->body.gemv;
    declare_regs(k, t->body.nacc);
    Var *g;
    TStmt *in = flat_element(B, t, body, &g, 6);
    Var *s = new_var(A, B->nvars, "s");
    TStmt *f = ts_for(A, s, e_i(A, 0), e_i(A, P->split_k), e_i(A, 1), 2);
    for (int j = 0; j < t->body.nacc; j++) {
        ts_add(in, ts_assign(A, j, e_f(A, 0.0)));
        Expr *part = e_load2(A, P->work, e_var(A, g), E_ADD(A, e_var(A, s), e_i(A, j * P->split_k)));
        ts_add(f, ts_assign(A, j, E_ADD(A, reg(A, j), part)));
    }
    ts_add(in, f);
    in->nbody += epi_stores(A, &t->body, reg(A, 0), reg(A, 1), in->body + in->nbody);
}
