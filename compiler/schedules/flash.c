/* flash.c: the flash_attn and flash_combine schedules. flash_attn: an
 * attention fused by loop_flash: a block per (tokens, kv head, key slice),
 * a warp per (token, head) row of the group (the group's heads share the
 * staged K/V tiles: no copies for GQA; staged by 16-byte cp.async copies,
 * all of a thread's in flight at once, where K and V are f32 rows a multiple
 * of 4 long, else by scalar loads); per tile of 32 keys a lane scores
 * one key, a shuffle tree gives the row max, the online softmax rescales
 * the running sum and the lanes' P.V accumulators (lane d, d+32..); split
 * over the keys (flash decoding) for short calls, then flash_combine: a
 * thread per output element merges the slices' (o, max, sum).
 * Tests: tests/test_flash.py (schedules, knobs flash_*, the debug_flash_mask fault), tests/test_ops.py (sdpa). */
#include "schedules/schedule.h"

#define FLASH_BC 32            /* keys per tile: one per lane when scoring */
/* cp.async staging: at most this many 16-byte copies of each tile per thread and pass */
#define FLASH_STAGE_VECS 8
/* registers: the lane's score / p, a shuffle partner / the rescale factor, the row's running max m, this
 * lane's running sum, the tile's max / the new m, the m exp() subtracts, then o[d] for d = lane, lane + 32, .. */
enum { FLASH_R_P, FLASH_R_TMP, FLASH_R_MAX, FLASH_R_SUM, FLASH_R_NEW_MAX, FLASH_R_SUB, FLASH_R_O };
/* shared: Q rows [warp][hd], K tile [32][hd + 1], V tile [32][hv], P [warp][32] */
enum { FLASH_S_Q, FLASH_S_K, FLASH_S_V, FLASH_S_P };
/* flash_combine's registers */
enum { COMBINE_R_MAX, COMBINE_R_SUM, COMBINE_R_O, COMBINE_R_SCALE };

/* K's and V's elements: bf16 (a bf16 KV cache) or f32 */
static bool flash_kv_bf16(const AttnDesc *d) { return d->k->k == EX_LOAD && d->k->buf->dtype == DT_BF16; }
/* the elements of a 16-byte copy: 4 f32 or 8 bf16 */
static int flash_copy_elems(const AttnDesc *d) { return flash_kv_bf16(d) ? 8 : 4; }

/* Whether K and V are plain loads of one dtype, f32 or bf16, whose last index is d, of rows a multiple of a
 * 16-byte copy's elements long (so that many consecutive d are 16 aligned bytes), with hd and hv multiples of it
 * (a copy never straddles two rows of a tile) */
static bool flash_vec_ok(const AttnDesc *d) {
    const int64_t c = flash_copy_elems(d);
    for (int m = 0; m < 2; m++) {
        const Expr *L = m ? d->v : d->k;
        if (L->k != EX_LOAD || (L->buf->dtype != DT_F32 && L->buf->dtype != DT_BF16) ||
            L->buf->dtype != d->k->buf->dtype || L->buf->dims[L->buf->ndim - 1] % c ||
            L->a[L->nargs - 1]->k != EX_VAR || L->a[L->nargs - 1]->var != d->d)
            return false;
        for (int i = 0; i + 1 < L->nargs; i++)
            if (expr_uses_var(L->a[i], d->d)) return false;
    }
    return d->hd % c == 0 && d->hv % c == 0;
}
/* the K and V tiles in shared memory as bf16 (copied as they are from a bf16 cache, widened where read) */
static bool flash_tiles_b16(const AttnDesc *d) { return flash_vec_ok(d) && flash_kv_bf16(d); }

/* The K tile's row stride: lane l scores key l, reading row l, so that rows fall in different banks. By
 * loads: hd + 1, the lanes reading element e. By cp.async: hd + a copy's elements (16-byte rows), the lanes
 * reading element (e + l) % hd (q too): f32, bank 5 l + e, all different; bf16, word 4.5 l + e / 2 (two lanes
 * share at most a word's bank where their words differ). */
static int64_t flash_k_stride(const AttnDesc *d) { return flash_vec_ok(d) ? d->hd + flash_copy_elems(d) : d->hd + 1; }

/* Shared floats (4-byte words) of a flash_attn block of w warps: Q rows, K and V tiles (bf16 tiles: two
 * elements a word), P */
static int64_t flash_smem_floats(const AttnDesc *d, int w) {
    int64_t tiles = FLASH_BC * flash_k_stride(d) + FLASH_BC * d->hv;
    return (int64_t)w * d->hd + (flash_tiles_b16(d) ? (tiles + 1) / 2 : tiles) + (int64_t)w * FLASH_BC;
}
bool flash_fits(const AttnDesc *d) {
    /* registers: 6 + one accumulator per 32 of hv; one warp per head of a group */
    return d->group <= 32 && (d->hv + 31) / 32 <= 48 && flash_smem_floats(d, (int)d->group) * 4 <= 48 * 1024;
}

/* One flash_attn kernel: tq tokens per block, split key slices. */
static TileKernel *flash_kernel(Arena *A, const LoopNest *nest, const AttnDesc *d, int tq, int split, const char *sfx) {
    TileKernel *k = new_tile_kernel(A, nest);
    FlashParams *P = &k->flash;
    k->kind = SCHED_FLASH;
    k->name = arena_printf(A, "%s_%s", d->kname, sfx);
    P->attn = d;
    P->tq = tq;
    P->split = split;
    k->block = 32 * tq * (int)d->group;
    /* as many as stage a whole tile in one pass (flash decoding's blocks read a tile or two: all of it in
     * flight), within FLASH_STAGE_VECS per pass */
    int64_t vecs = (FLASH_BC * max_i(d->hd, d->hv) / flash_copy_elems(d) + k->block - 1) / k->block;
    P->stage_vecs = flash_vec_ok(d) ? (int)min_i(vecs, FLASH_STAGE_VECS) : 0;
    k->smem_floats = (int)flash_smem_floats(d, tq * (int)d->group);
    P->nsplit = split > 1 ? emin(A, e_i(A, split), ceil_div(A, d->len, FLASH_BC)) : e_i(A, 1);
    k->grid = E_MUL(A, E_MUL(A, ceil_div(A, d->rows, tq), e_i(A, d->heads / d->group)), P->nsplit);
    return k;
}
/* Calls of more than flash_min_n tokens (prefill) get blocks of several tokens, so a staged K/V tile
 * serves tq * group rows; shorter calls (decode) a token per block, the keys split into slices until the
 * grid has about gemv_target_blocks blocks (flash decoding), merged by flash_combine. */
int flash_choose(const ScheduleChoice *c, TileKernel *k0, TileKernel **out) {
    if (!c->leaf || c->leaf->k != LS_ATTN) return 0;
    Arena *A = c->A;
    const Knobs *kn = c->kn;
    const AttnDesc *d = c->leaf->attn;
    const LoopNest *nest = k0->nest;
    int64_t rmax, r1, lmax, G = d->group, kvh = d->heads / d->group;
    CHECK(eval_i(d->rows, c->tp->max_batch, c->tp->max_ctx, &rmax) && eval_i(d->rows, 1, 0, &r1) &&
          eval_i(d->len, c->tp->max_batch, c->tp->max_ctx, &lmax), "attention %s: extents", nest->module);
    bool rows_const = expr_is_const(d->rows, &r1);
    int nk = 0;
    bool prefill = rmax > kn->flash_min_n, decode = !rows_const || !prefill;
    if (prefill) {
        /* as many tokens as fit 16 warps (and 48 KiB): each staged K/V tile then serves up to 16 rows */
        int tq = kn->flash_tokens ? kn->flash_tokens : (int)max_i(1, 16 / G);
        while (tq > 1 && (tq * G > 32 || flash_smem_floats(d, (int)(tq * G)) * 4 > 48 * 1024)) {
            if (kn->flash_tokens)
                die_user(NULL, "--knob", "flash_tokens=%d does not fit %s: %lld warps (at most 32) and %lld bytes of "
                         "shared memory (at most 49152)", tq, nest->module, (long long)(tq * G),
                         (long long)flash_smem_floats(d, (int)(tq * G)) * 4);
            tq--;
        }
        TileKernel *k = flash_kernel(A, nest, d, tq, 1, "flash");
        if (decode) { k->run_if = 1; k->min_n = kn->flash_min_n; }
        out[nk++] = k;
    }
    if (!decode) return nk;
    int64_t rd = rows_const ? r1 : min_i(rmax, kn->flash_min_n);
    int64_t S = kn->flash_split, blocks = rows_const ? r1 * kvh : kvh;
    if (!S) S = blocks >= kn->gemv_target_blocks ? 1 : (kn->gemv_target_blocks + blocks - 1) / blocks;
    S = max_i(1, min_i(S, (lmax + FLASH_BC - 1) / FLASH_BC));   /* at run time also at most one per 32 keys */
    TileKernel *k = flash_kernel(A, nest, d, 1, (int)S, "flash_decode");
    if (prefill) { k->run_if = 2; k->min_n = kn->flash_min_n; }
    out[nk++] = k;
    if (S == 1) return nk;
    k->flash.work = work_buffer(A, d->kname, "partials", rd * d->heads * S, d->hv + 2);
    Expr *elems = E_MUL(A, d->rows, e_i(A, d->heads * d->hv));
    out[nk++] = second_kernel(A, k, SCHED_FLASH_COMBINE, arena_printf(A, "%s_flash_combine", d->kname), kn->flat_block,
                              ceil_div(A, elems, kn->flat_block));
    return nk;
}

void flash_print(Str *o, const TileKernel *k) {
    const FlashParams *P = &k->flash;
    const AttnDesc *d = P->attn;
    long long kvh = (long long)(d->heads / d->group);
    str_printf(o, " tokens=%d warps=%d split=%d keys_per_tile=%d\n  block (bid%%rb/%lld, bid%%rb%%%lld, bid/rb; "
               "rb = blocks of %d tokens x %lld kv heads) -> (tokens [%s<", P->tq, k->block / 32, P->split, FLASH_BC,
               kvh, kvh, P->tq, kvh, d->t->name);
    expr_print(o, d->rows);
    str_printf(o, "] by %d, kv head, key slice); warp -> a (token, head) row of the kv head's %lld heads\n"
               "  per %d keys [%s<", P->tq, (long long)d->group, FLASH_BC, d->j->name);
    expr_print(o, d->len);
    str_printf(o, "]: K/V tile to shared memory once for the block (");
    if (P->stage_vecs)
        str_printf(o, "16-byte cp.async, %d of each tile per thread a pass%s", P->stage_vecs,
                   flash_tiles_b16(d) ? ", kept bf16" : "");
    else str_printf(o, "scalar loads");
    str_printf(o, "), lane -> one key's score (dot over %lld from shared memory%s), shfl_xor max tree, online softmax "
               "(running max, per-lane sums), lane -> d, d+32, .. of P.V (%lld)\n",
               (long long)d->hd, P->stage_vecs ? ", from element lane" : "", (long long)d->hv);
    if (P->work) str_printf(o, "  slices write (o, max, sum) to %s\n", P->work->name);
}
void flash_combine_print(Str *o, const TileKernel *k) {
    str_printf(o, "\n  thread (bid*%d + tid) -> (row, d); merges %d slices of %s: o / sum rescaled to the largest "
               "max\n",
               k->block, k->flash.split, k->flash.work->name);
}
const char *flash_verify(const TileKernel *k) {
    const FlashParams *P = &k->flash;
    bool bad = !P->attn || k->block != 32 * P->tq * P->attn->group || P->split < 1 || (P->split > 1) != !!P->work;
    return bad ? "flash_attn parameters" : NULL;
}
const char *flash_combine_verify(const TileKernel *k) {
    const FlashParams *P = &k->flash;
    bool bad = !P->attn || !P->work || P->work->dims[1] != P->attn->hv + 2 || P->split < 2;
    return bad ? "flash_combine without its partials" : NULL;
}

/* The block's place (uniform), and a thread's lane variable. */
typedef struct {
    Expr *slice;               /* the key slice (0 without split) */
    Expr *kvh;                 /* the kv head */
    Expr *t0;                  /* the first token */
    Var *lane;
} FlashBlock;
/* A phase's statements (*n of them, room for cap more), starting with the lets of a thread's lane, its row's
 * token t and head h (the attention's own variables, so q, k, v and jmax read them as they are) */
static TStmt **flash_lets(Arena *A, const AttnDesc *d, const FlashBlock *fb, int cap, int *n) {
    TStmt **l = tlist(A, 3 + cap);
    Expr *w = idiv(A, tid(A), 32);
    l[0] = ts_let(A, fb->lane, imod(A, tid(A), 32));
    l[1] = ts_let(A, d->t, E_ADD(A, fb->t0, idiv(A, w, d->group)));
    l[2] = ts_let(A, d->h, E_ADD(A, E_MUL(A, fb->kvh, e_i(A, d->group)), imod(A, w, d->group)));
    *n = 3;
    return l;
}
/* e (of K or V, or an index of their loads) at key j, element c, for the block's kv head */
static Expr *flash_kv_at(Arena *A, const AttnDesc *d, const FlashBlock *fb, Expr *e, Expr *j, Expr *c) {
    Expr *h = E_MUL(A, fb->kvh, e_i(A, d->group));
    return expr_subst(A, expr_subst(A, expr_subst(A, e, d->h, h), d->j, j), d->d, c);
}

/* The tile's K and V rows of the kv head at key j0 (the group's first head reads what every head of it
 * reads) into shared memory, rows past jhi zero, added to ub. By loads: a loop per tile, each load stored at
 * once (the machine code waits for each load before it issues the next). stage_vecs: 16-byte cp.async
 * copies, stage_vecs of each tile per thread and pass of a loop (one pass where the tile allows), a copy
 * past jhi zero-filling its destination; then wait_group 0 and a barrier, so that all of a thread's copies
 * are in flight together (ptxas interleaves loads with their stores, not copies with a wait). */
static void flash_stage(KernelBuilder *B, const TileKernel *t, const FlashBlock *fb, Expr *j0, Expr *jhi, KList *ub) {
    Arena *A = B->A;
    const FlashParams *P = &t->flash;
    const AttnDesc *d = P->attn;
    const int64_t BC = FLASH_BC, U = P->stage_vecs, width[2] = {d->hd, d->hv}, ld[2] = {flash_k_stride(d), d->hv};
    const int64_t C = flash_copy_elems(d);
    if (!U) {
        TStmt **ps = tlist(A, 2);
        for (int m = 0; m < 2; m++) {
            Var *xv = new_var(A, B->nvars, m ? "xv" : "xk");
            TStmt *f = ts_for(A, xv, tid(A), e_i(A, BC * width[m]), e_i(A, t->block), 2);
            Expr *r = idiv(A, e_var(A, xv), width[m]), *c = imod(A, e_var(A, xv), width[m]);
            Expr *j = E_ADD(A, j0, r), *si = E_ADD(A, E_MUL(A, r, e_i(A, ld[m])), c);
            sstore_where(A, f, FLASH_S_K + m, si, lt(A, j, jhi), flash_kv_at(A, d, fb, m ? d->v : d->k, j, c));
            ps[m] = f;
        }
        kl_add(A, ub, phase(A, ps, 2, true));
        return;
    }
    Var *xs = new_var(A, B->nvars, "xs");
    TStmt *f = ts_for(A, xs, E_MUL(A, tid(A), e_i(A, C)), e_i(A, BC * max_i(width[0], width[1])),
                      e_i(A, t->block * C * U), (int)(2 * U));
    for (int m = 0; m < 2; m++)
        for (int u = 0; u < U; u++) {
            Expr *x = E_ADD(A, e_var(A, xs), e_i(A, u * t->block * C));
            Expr *r = idiv(A, x, width[m]), *c = imod(A, x, width[m]), *j = E_ADD(A, j0, r);
            const Expr *L = m ? d->v : d->k;
            TStmt *cp = ts(A, TS_CP_ASYNC);
            cp->vec = 16;
            cp->smem = FLASH_S_K + m;
            cp->sidx = E_ADD(A, E_MUL(A, r, e_i(A, ld[m])), c);
            cp->buf = L->buf;
            cp->idx = ARENA_ARRAY(A, Expr *, L->nargs);
            for (int i = 0; i < L->nargs; i++) cp->idx[i] = flash_kv_at(A, d, fb, L->a[i], j, c);
            cp->e = lt(A, j, jhi);
            TStmt *in = ts_if(A, lt(A, x, e_i(A, BC * width[m])), 1);   /* a copy inside the tile */
            ts_add(in, cp);
            ts_add(f, in);
        }
    TStmt **ps = tlist(A, 1);
    ps[0] = f;
    kl_add(A, ub, phase(A, ps, 1, false));
    kl_add(A, ub, cp_sync(A, KS_CP_COMMIT, 0));
    kl_add(A, ub, cp_sync(A, KS_CP_WAIT, B->kn->debug_cp_async));   /* the fault: the tile's copies left pending */
    kl_add(A, ub, phase(A, NULL, 0, true));
}

void flash_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const FlashParams *P = &t->flash;
    const AttnDesc *d = P->attn;
    const int64_t G = d->group, KVH = d->heads / G, S = P->split, W = t->block / 32, HD = d->hd, HV = d->hv;
    const int64_t BC = FLASH_BC;
    const int no = (int)((HV + 31) / 32), RO = FLASH_R_O;
    const int R_P = FLASH_R_P, R_TMP = FLASH_R_TMP, R_MAX = FLASH_R_MAX, R_SUM = FLASH_R_SUM, R_NEW = FLASH_R_NEW_MAX;
    declare_regs(k, RO + no);
    k->nsmem = 4;
    k->smem[FLASH_S_Q].size = (int)(W * HD); k->smem[FLASH_S_K].size = (int)(BC * flash_k_stride(d));
    k->smem[FLASH_S_V].size = (int)(BC * HV); k->smem[FLASH_S_P].size = (int)(W * BC);
    k->smem[FLASH_S_K].b16 = k->smem[FLASH_S_V].b16 = flash_tiles_b16(d);
    k->smem[FLASH_S_K].widen = k->smem[FLASH_S_V].widen = flash_tiles_b16(d);
    /* the block's coordinates and key range, computed once (uniform). Slice-major: the grid's first rb blocks are
     * slice 0 of every (token block, kv head), and so on, so that a grid of more slices than nsplit (a CUDA
     * Graph's, sized for the longest context) leaves the blocks past nsplit's with no keys (jlo >= len): they
     * write an empty partial (m = -inf, l = 0) that flash_combine does not read */
    Expr *SE = S > 1 ? ulet(B, body, "nsplit", P->nsplit) : e_i(A, 1);
    Expr *rb = S > 1 ? ulet(B, body, "rb", E_MUL(A, ceil_div(A, d->rows, P->tq), e_i(A, KVH))) : NULL;
    Expr *rest = S > 1 ? ulet(B, body, "rest", e_bin(A, EX_MOD, bid(A), rb)) : bid(A);
    Expr *slice = S > 1 ? ulet(B, body, "slice", E_DIV(A, bid(A), rb)) : e_i(A, 0);
    Expr *kvh = ulet(B, body, "kvh", imod(A, rest, KVH));
    Expr *t0 = ulet(B, body, "t0", E_MUL(A, idiv(A, rest, KVH), e_i(A, P->tq)));
    FlashBlock fb = {slice, kvh, t0, new_var(A, B->nvars, "lane")};
    Expr *lane = e_var(A, fb.lane), *w = idiv(A, tid(A), 32), *tv = e_var(A, d->t);
    Expr *ninf = e_f(A, -1.0 / 0.0);
    /* debug_flash_mask: the deliberate fault, an off-by-one causal mask (a row sees one key too many) */
    Expr *jmax = B->kn->debug_flash_mask ? E_ADD(A, d->jmax, e_i(A, 1)) : d->jmax;
    /* keys the block needs: up to its last token's jmax, within its slice */
    Expr *tlast = E_SUB(A, emin(A, d->rows, E_ADD(A, fb.t0, e_i(A, P->tq))), e_i(A, 1));
    Expr *jlo = e_i(A, 0), *jhi = emin(A, d->len, expr_subst(A, jmax, d->t, tlast));
    if (S > 1) {
        Expr *per = E_DIV(A, E_ADD(A, d->len, E_SUB(A, SE, e_i(A, 1))), SE);
        Expr *chunk = ulet(B, body, "chunk", E_MUL(A, idiv(A, E_ADD(A, per, e_i(A, BC - 1)), BC), e_i(A, BC)));
        jlo = ulet(B, body, "jlo", E_MUL(A, fb.slice, chunk));
        jhi = emin(A, jhi, E_ADD(A, jlo, chunk));
    }
    jhi = ulet(B, body, "jhi", jhi);
    int n;                     /* statements in the phase being built */
    /* phase 0: the row's q into shared memory (zero for rows past the end), m = -inf, l = 0, o = 0 */
    TStmt **p0 = flash_lets(A, d, &fb, 5 + no, &n);
    Var *dv = new_var(A, B->nvars, "dq");
    TStmt *fq = ts_for(A, dv, lane, e_i(A, HD), e_i(A, 32), 2);
    Expr *qi = E_ADD(A, E_MUL(A, w, e_i(A, HD)), e_var(A, dv));
    sstore_where(A, fq, FLASH_S_Q, qi, lt(A, tv, d->rows), expr_subst(A, d->q, d->d, e_var(A, dv)));
    p0[n++] = fq;
    p0[n++] = ts_assign(A, R_MAX, ninf);
    p0[n++] = ts_assign(A, R_SUM, e_f(A, 0.0));
    for (int i = 0; i < no; i++) p0[n++] = ts_assign(A, RO + i, e_f(A, 0.0));
    kl_add(A, body, phase_pruned(A, p0, n, true));

    Var *j0 = new_var(A, B->nvars, "j0");
    KList ub = {0};
    flash_stage(B, t, &fb, e_var(A, j0), jhi, &ub);
    /* lane l scores key j0 + l: p = scale * q . k, -inf past the row's keys */
    TStmt **pq = flash_lets(A, d, &fb, 5, &n);
    Var *ev = new_var(A, B->nvars, "e");
    pq[n++] = ts_assign(A, R_P, e_f(A, 0.0));
    TStmt *fd = ts_for(A, ev, e_i(A, 0), e_i(A, HD), e_i(A, 1), 1);
    Expr *el = P->stage_vecs ? imod(A, E_ADD(A, e_var(A, ev), lane), HD) : e_var(A, ev);   /* flash_k_stride */
    Expr *qe = sload(A, FLASH_S_Q, E_ADD(A, E_MUL(A, w, e_i(A, HD)), el));
    Expr *ke = sload(A, FLASH_S_K, E_ADD(A, E_MUL(A, lane, e_i(A, flash_k_stride(d))), el));
    ts_add(fd, ts_assign(A, R_P, E_ADD(A, reg(A, R_P), E_MUL(A, qe, ke))));
    pq[n++] = fd;
    Expr *jk = E_ADD(A, e_var(A, j0), lane);
    Expr *scaled = E_MUL(A, reg(A, R_P), e_f(A, d->scale));
    pq[n++] = ts_assign(A, R_P, e_select(A, lt(A, jk, emin(A, jhi, jmax)), scaled, ninf));
    pq[n++] = ts_assign(A, R_NEW, reg(A, R_P));
    kl_add(A, &ub, phase_pruned(A, pq, n, true));
    /* the tile's max in every lane */
    shfl_trees(B, &ub, SHFL_XOR, RED_MAX, 32, 1, (int[]){R_NEW}, (int[]){R_TMP});
    /* online softmax: m' = max(m, tile max); exp() subtracts m' (0 while every key so far is masked, so
     * exp(-inf - 0) = 0 instead of NaN); rescale the lane's sum and accumulators by exp(m - m') */
    TStmt **pu = flash_lets(A, d, &fb, 9 + no, &n);
    pu[n++] = ts_assign(A, R_NEW, e_bin(A, EX_MAX, reg(A, R_MAX), reg(A, R_NEW)));
    pu[n++] = ts_assign(A, FLASH_R_SUB, e_select(A, lt(A, ninf, reg(A, R_NEW)), reg(A, R_NEW), e_f(A, 0.0)));
    pu[n++] = ts_assign(A, R_P, e_un(A, EX_EXP, E_SUB(A, reg(A, R_P), reg(A, FLASH_R_SUB))));
    pu[n++] = ts_assign(A, R_TMP, e_un(A, EX_EXP, E_SUB(A, reg(A, R_MAX), reg(A, FLASH_R_SUB))));
    pu[n++] = ts_assign(A, R_SUM, E_ADD(A, E_MUL(A, reg(A, R_SUM), reg(A, R_TMP)), reg(A, R_P)));
    for (int i = 0; i < no; i++) pu[n++] = ts_assign(A, RO + i, E_MUL(A, reg(A, RO + i), reg(A, R_TMP)));
    pu[n++] = ts_sstore(A, FLASH_S_P, E_ADD(A, E_MUL(A, w, e_i(A, BC)), lane), reg(A, R_P));
    pu[n++] = ts_assign(A, R_MAX, reg(A, R_NEW));
    kl_add(A, &ub, phase_pruned(A, pu, n, true));
    /* o[d] += p[jj] * V[jj][d] over the tile */
    TStmt **pv = flash_lets(A, d, &fb, 1, &n);
    Var *jj = new_var(A, B->nvars, "jj");
    TStmt *fj = ts_for(A, jj, e_i(A, 0), e_i(A, BC), e_i(A, 1), no);
    Expr *p = sload(A, FLASH_S_P, E_ADD(A, E_MUL(A, w, e_i(A, BC)), e_var(A, jj)));
    for (int i = 0; i < no; i++) {
        Expr *dd = E_ADD(A, lane, e_i(A, 32 * i));
        Expr *v = sload(A, FLASH_S_V, E_ADD(A, E_MUL(A, e_var(A, jj), e_i(A, HV)), dd));
        TStmt *acc = ts_assign(A, RO + i, E_ADD(A, reg(A, RO + i), E_MUL(A, p, v)));
        if ((i + 1) * 32 <= HV) { ts_add(fj, acc); continue; }
        TStmt *in = ts_if(A, lt(A, dd, e_i(A, HV)), 1);
        ts_add(in, acc);
        ts_add(fj, in);
    }
    pv[n++] = fj;
    kl_add(A, &ub, phase_pruned(A, pv, n, true));
    kl_ufor(A, body, j0, jlo, jhi, e_i(A, BC), &ub);
    /* the row's sum over the lanes */
    shfl_trees(B, body, SHFL_XOR, RED_SUM, 32, 1, (int[]){R_SUM}, (int[]){R_TMP});
    /* o / l, or the slice's (o, m, l) for flash_combine */
    TStmt **pe = flash_lets(A, d, &fb, 1, &n);
    TStmt *row = ts_if(A, lt(A, tv, d->rows), no + 1);
    Expr *wrow = E_ADD(A, E_MUL(A, E_ADD(A, E_MUL(A, tv, e_i(A, d->heads)), e_var(A, d->h)), e_i(A, S)), fb.slice);
    for (int i = 0; i < no; i++) {
        Expr *dd = E_ADD(A, lane, e_i(A, 32 * i));
        TStmt *in = ts_if(A, lt(A, dd, e_i(A, HV)), 2);
        ts_add(in, ts_let(A, d->d, dd));
        if (S > 1) ts_add(in, ts_store2(A, P->work, wrow, e_var(A, d->d), reg(A, RO + i)));
        else ts_add(in, ts_store(A, d->out, (Expr **)d->out_idx, E_DIV(A, reg(A, RO + i), reg(A, R_SUM))));
        ts_add(row, in);
    }
    if (S > 1) {
        TStmt *l0 = ts_if(A, eq(A, lane, e_i(A, 0)), 2);
        for (int q = 0; q < 2; q++) ts_add(l0, ts_store2(A, P->work, wrow, e_i(A, HV + q), reg(A, q ? R_SUM : R_MAX)));
        ts_add(row, l0);
    }
    pe[n++] = row;
    kl_add(A, body, phase_pruned(A, pe, n, false));
}

/* out(t, h, d) = sum_s o_s exp(m_s - M) / sum_s l_s exp(m_s - M) over this call's slices, M their largest
 * max (finite: key 0 is in every row's first slice) */
void flash_combine_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    Arena *A = B->A;
    const FlashParams *P = &t->flash;
    const AttnDesc *d = P->attn;
    const int64_t S = P->split, HV = d->hv;
    const int R_MAX = COMBINE_R_MAX, R_SUM = COMBINE_R_SUM, R_O = COMBINE_R_O, R_SCALE = COMBINE_R_SCALE;
    declare_regs(k, 4);
    Var *g;
    TStmt *in = thread_element(B, t->block, E_MUL(A, d->rows, e_i(A, d->heads * HV)), body, &g, 10);
    Var *sv = new_var(A, B->nvars, "s");
    Expr *ge = e_var(A, g), *rowg = idiv(A, ge, HV);
    ts_add(in, ts_let(A, d->d, imod(A, ge, HV)));
    ts_add(in, ts_let(A, d->h, imod(A, rowg, d->heads)));
    ts_add(in, ts_let(A, d->t, idiv(A, rowg, d->heads)));
    Expr *wr = E_ADD(A, E_MUL(A, rowg, e_i(A, S)), e_var(A, sv));
    ts_add(in, ts_assign(A, R_MAX, e_f(A, -1.0 / 0.0)));
    TStmt *f1 = ts_for(A, sv, e_i(A, 0), P->nsplit, e_i(A, 1), 1);
    ts_add(f1, ts_assign(A, R_MAX, e_bin(A, EX_MAX, reg(A, R_MAX), e_load2(A, P->work, wr, e_i(A, HV)))));
    ts_add(in, f1);
    ts_add(in, ts_assign(A, R_SUM, e_f(A, 0.0)));
    ts_add(in, ts_assign(A, R_O, e_f(A, 0.0)));
    TStmt *f2 = ts_for(A, sv, e_i(A, 0), P->nsplit, e_i(A, 1), 3);
    Expr *m_s = e_load2(A, P->work, wr, e_i(A, HV)), *l_s = e_load2(A, P->work, wr, e_i(A, HV + 1));
    Expr *o_s = e_load2(A, P->work, wr, e_var(A, d->d));
    ts_add(f2, ts_assign(A, R_SCALE, e_un(A, EX_EXP, E_SUB(A, m_s, reg(A, R_MAX)))));
    ts_add(f2, ts_assign(A, R_SUM, E_ADD(A, reg(A, R_SUM), E_MUL(A, l_s, reg(A, R_SCALE)))));
    ts_add(f2, ts_assign(A, R_O, E_ADD(A, reg(A, R_O), E_MUL(A, o_s, reg(A, R_SCALE)))));
    ts_add(in, f2);
    ts_add(in, ts_store(A, d->out, (Expr **)d->out_idx, E_DIV(A, reg(A, R_O), reg(A, R_SUM))));
}
