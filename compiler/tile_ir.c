/* tile_ir.c: loop IR -> tile IR (choosing a schedule per nest, and its
 * parameters from the shapes), printer, verifier, knobs. */
#include "tile_ir.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sched_names[] = {
#define X(e, s) s,
    SCHED_KINDS(X)
#undef X
};

void knobs_default(Knobs *k) {
#define X(s, f, d, lo, hi, p2) k->f = d;
    KNOBS(X)
#undef X
}

static bool pow2(long v) { return v > 0 && !(v & (v - 1)); }
void knobs_set(Knobs *k, const char *assign) {
    const char *eq = strchr(assign, '=');
    if (!eq) die_user(NULL, "--knob", "'%s' is not NAME=VALUE", assign);
    char *end;
    long v = strtol(eq + 1, &end, 10);
    size_t nl = (size_t)(eq - assign);
    if (*end || eq[1] == 0) die_user(NULL, "--knob", "'%s': value is not an integer", assign);
#define X(s, f, d, lo, hi, p2) \
    if (nl == strlen(s) && !strncmp(assign, s, nl)) { \
        if (v < (lo) || v > (hi) || ((p2) && v && !pow2(v))) \
            die_user(NULL, "--knob", "%s must be %s in %d..%d", s, (p2) ? "a power of two" : "an integer", (lo) ? (lo) : ((p2) ? 1 : 0), hi); \
        k->f = (int)v; \
        return; \
    }
    KNOBS(X)
#undef X
    static char known[1024];
    size_t kl = 0;
#define X(s, f, d, lo, hi, p2) kl += (size_t)snprintf(known + kl, sizeof known - kl, "%s%s", kl ? ", " : "", s);
    KNOBS(X)
#undef X
    die_user(NULL, "--knob", "unknown knob '%.*s' (known: %s)", (int)nl, assign, known);
}
void knobs_print(Str *o, const Knobs *k) {
    const char *sep = "";
#define X(s, f, d, lo, hi, p2) str_printf(o, "%s%s=%d", sep, s, k->f); sep = " ";
    KNOBS(X)
#undef X
}

static Expr *product(Arena *A, const Axis *ax, int n) {
    Expr *p = e_i(A, 1);
    for (int i = 0; i < n; i++) p = E_MUL(A, p, ax[i].extent);
    return p;
}
static Expr *ceil_div(Arena *A, Expr *x, int64_t d) { return E_DIV(A, E_ADD(A, x, e_i(A, d - 1)), e_i(A, d)); }

/* Integer value of an extent for given n and pos (extents grow with both,
 * so n = max_batch, pos = max_ctx bounds them). */
static bool eval_i(const Expr *e, int64_t n, int64_t pos, int64_t *out) {
    int64_t a, b;
    switch (e->k) {
    case EX_ICONST: *out = e->i; return true;
    case EX_PARAM: *out = e->i == P_N ? n : pos; return true;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_DIV: case EX_MOD: case EX_MIN: case EX_MAX:
        if (!eval_i(e->a[0], n, pos, &a) || !eval_i(e->a[1], n, pos, &b)) return false;
        switch (e->k) {
        case EX_ADD: *out = a + b; return true;
        case EX_SUB: *out = a - b; return true;
        case EX_MUL: *out = a * b; return true;
        case EX_DIV: if (!b) return false; *out = a / b; return true;
        case EX_MOD: if (!b) return false; *out = a % b; return true;
        case EX_MIN: *out = a < b ? a : b; return true;
        default: *out = a > b ? a : b; return true;
        }
    default: return false;
    }
}

/* ---- flash attention ---- */
#define FLASH_BC 32            /* keys per tile: one per lane when scoring */
int64_t flash_smem_floats(const AttnDesc *d, int w) {
    /* K rows padded by one float: lane l reads row l, so the rows fall in different banks */
    return (int64_t)w * d->hd + FLASH_BC * (d->hd + 1) + FLASH_BC * d->hv + (int64_t)w * FLASH_BC;
}
bool flash_fits(const AttnDesc *d) {
    /* registers: 6 + one accumulator per 32 of hv; one warp per head of a group */
    return d->group <= 32 && (d->hv + 31) / 32 <= 48 && flash_smem_floats(d, (int)d->group) * 4 <= 48 * 1024;
}
static int64_t max_i(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min_i(int64_t a, int64_t b) { return a < b ? a : b; }
static TileKernel *new_tk(Arena *A, const LoopNest *nest) {
    TileKernel *k = ARENA_NEW(A, TileKernel);
    k->nest = nest; k->name = nest->kname;
    k->nacc = k->nstore = 1;
    return k;
}

/* One flash_attn kernel: tq tokens per block, split key slices. */
static TileKernel *flash_kernel(Arena *A, const LoopNest *nest, const AttnDesc *d, int tq, int split, const char *suffix) {
    TileKernel *k = new_tk(A, nest);
    k->kind = SCHED_FLASH;
    k->name = arena_printf(A, "%s_%s", d->kname, suffix);
    k->attn = d;
    k->tq = tq;
    k->split_k = split;
    k->block = 32 * tq * (int)d->group;
    k->smem_floats = (int)flash_smem_floats(d, tq * (int)d->group);
    k->nsplit = split > 1 ? e_bin(A, EX_MIN, e_i(A, split), ceil_div(A, d->len, FLASH_BC)) : e_i(A, 1);
    k->grid = E_MUL(A, E_MUL(A, ceil_div(A, d->rows, tq), e_i(A, d->heads / d->group)), k->nsplit);
    k->out = d->out;
    return k;
}
/* Calls of more than flash_min_n tokens (prefill) get blocks of several
 * tokens, so a staged K/V tile serves tq * group rows; shorter calls (decode)
 * a token per block, the keys split into slices until the grid has about
 * gemv_target_blocks blocks (flash decoding), merged by flash_combine. */
static int schedule_flash(Arena *A, const LoopNest *nest, const AttnDesc *d, const Knobs *kn, const TProgram *tp, TileKernel **out) {
    int64_t rmax, r1, lmax, G = d->group, kvh = d->heads / d->group;
    CHECK(eval_i(d->rows, tp->g->max_batch, tp->g->max_ctx, &rmax) && eval_i(d->rows, 1, 0, &r1) &&
          eval_i(d->len, tp->g->max_batch, tp->g->max_ctx, &lmax), "attention %s: extents", nest->module);
    bool rows_const = expr_is_const(d->rows, &r1);
    int nk = 0;
    bool prefill = rmax > kn->flash_min_n, decode = !rows_const || !prefill;
    if (prefill) {
        /* as many tokens as fit 16 warps (and 48 KiB): each staged K/V tile then serves up to 16 rows */
        int tq = kn->flash_tokens ? kn->flash_tokens : (int)max_i(1, 16 / G);
        while (tq > 1 && (tq * G > 32 || flash_smem_floats(d, (int)(tq * G)) * 4 > 48 * 1024)) {
            if (kn->flash_tokens)
                die_user(NULL, "--knob", "flash_tokens=%d does not fit %s: %lld warps (at most 32) and %lld bytes of shared memory (at most 49152)",
                         tq, nest->module, (long long)(tq * G), (long long)flash_smem_floats(d, (int)(tq * G)) * 4);
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
    S = max_i(1, min_i(S, (lmax + FLASH_BC - 1) / FLASH_BC));   /* at run time also at most one per 32 keys of this call */
    TileKernel *k = flash_kernel(A, nest, d, 1, (int)S, "flash_decode");
    if (prefill) { k->run_if = 2; k->min_n = kn->flash_min_n; }
    out[nk++] = k;
    if (S == 1) return nk;
    Buffer *w = ARENA_NEW(A, Buffer);
    w->id = -1; w->name = arena_printf(A, "%s.partials", d->kname); w->kind = BUF_WORK; w->dtype = DT_F32;
    w->ndim = 2; w->dims[0] = rd * d->heads * S; w->dims[1] = d->hv + 2; w->layer = -1; w->weight_index = -1; w->act_offset = 0;
    k->work = w;
    TileKernel *c = new_tk(A, nest);
    c->kind = SCHED_FLASH_COMBINE;
    c->name = arena_printf(A, "%s_flash_combine", d->kname);
    c->attn = d; c->split_k = (int)S; c->nsplit = k->nsplit; c->work = w; c->out = d->out;
    c->block = kn->flat_block;
    c->grid = ceil_div(A, E_MUL(A, d->rows, e_i(A, d->heads * d->hv)), c->block);
    c->run_if = k->run_if; c->min_n = k->min_n;
    out[nk++] = c;
    return nk;
}

/* ---- gemv eligibility and vector width ---- */
typedef struct { const Var *v; bool weight; bool ok; int vec, wsize; } GemvScan;
static void gemv_scan(GemvScan *s, const Expr *e) {
    if (e->k == EX_LOAD && expr_uses_var(e, s->v)) {
        const Buffer *b = e->buf;
        const Expr *last = e->a[e->nargs - 1];
        bool plain = last->k == EX_VAR && last->var == s->v;
        for (int d = 0; d + 1 < e->nargs; d++) if (expr_uses_var(e->a[d], s->v)) plain = false;
        if (plain && b->kind == BUF_WEIGHT) { s->weight = true; s->wsize = dtype_sizes[b->dtype]; }
        /* a vector load covers [c, c + vec) of the last dimension: rows must stay vector aligned */
        if (!plain) s->ok = false;
        while (s->vec > 1 && b->dims[b->ndim - 1] % s->vec) s->vec /= 2;
        return;
    }
    for (int i = 0; i < e->nargs; i++) gemv_scan(s, e->a[i]);
}

/* gemm_tc applies to y[t, o] = sum_k X(t, k) * W[o, k] (+ epilogue) with W a
 * bf16 weight, t the runtime token axis and o the weight's row: the form
 * tensor_ir.c gives every linear. */
static bool gemm_tc_term(const TileKernel *k, Expr *term, Expr **xop, Expr **wop) {
    if (term->k != EX_MUL) return false;
    const Var *t = k->par[0].v, *o = k->par[1].v, *kv = k->red[0].v;
    for (int w = 0; w < 2; w++) {
        Expr *W = term->a[w], *X = term->a[1 - w];
        if (W->k != EX_LOAD || W->buf->kind != BUF_WEIGHT || (W->buf->dtype != DT_BF16 && W->buf->dtype != DT_F16) || W->nargs != 2) continue;
        /* the weight's row a function of o alone (a pair's halves: of the flattened head and element) */
        if (!expr_uses_var(W->a[0], o) || expr_uses_var(W->a[0], t) || expr_uses_var(W->a[0], kv) || W->a[1]->k != EX_VAR || W->a[1]->var != kv) continue;
        if (expr_uses_var(X, o) || !expr_uses_var(X, t)) continue;
        *xop = X; *wop = W;
        return true;
    }
    return false;
}
static bool gemm_tc_form(TileKernel *k) {
    if (k->npar != 2 || k->nred != 1 || k->side || k->redop != RED_SUM) return false;
    int64_t rows;
    if (expr_is_const(k->par[0].extent, &rows) || !expr_is_const(k->par[1].extent, &rows)) return false;
    if (!gemm_tc_term(k, k->acc_value, &k->xop, &k->wop)) return false;
    if (k->nacc == 1) return true;
    /* a pair: one activation operand for both, weights of one dtype */
    Expr *x1;
    return gemm_tc_term(k, k->acc_value1, &x1, &k->wop1) && expr_equal(x1, k->xop) && k->wop1->buf->dtype == k->wop->buf->dtype;
}

/* Shared memory of a gemm_tc block: X and W tiles of [bm or bn][bk + 8] bf16, one per stage each. */
static int64_t gemm_tc_smem(const TileKernel *g) { return (int64_t)g->stages * (g->bm + g->bn) * (g->bk + 8) * 2; }
/* K step and pipeline depth: two stages (W by cp.async while the previous step computes) where W rows
 * are 16-byte aligned (K % 8 == 0) and there is more than one K step, else the one-stage schedule. A K
 * step of 64 halves the barriers but, pipelined, keeps 32 prefetched activations per thread in registers
 * (ptxas: 255 registers at sm_90, against 150 with 32): so 64 only for one stage and K >= 512, where its
 * padding does not matter. Pinned values are kept (stages up to the number of K steps). */
static void gemm_tc_tiles(TileKernel *g, const Knobs *kn, int64_t K) {
    if (kn->gemm_bk && kn->gemm_bk < 16) die_user(NULL, "--knob", "gemm_bk must be 16, 32 or 64 (an mma covers 16 of K)");
    if ((kn->gemm_bm && kn->gemm_bm < 64) || (kn->gemm_bn && kn->gemm_bn < 64))
        die_user(NULL, "--knob", "gemm_bm and gemm_bn must be 64 or 128 (a warp computes 32 x 32, a block at least 4 warps)");
    /* a warp per 32 x 32 of the block tile */
    g->bm = kn->gemm_bm ? kn->gemm_bm : 64;
    g->bn = kn->gemm_bn ? kn->gemm_bn : 64;
    g->block = g->bm / 32 * (g->bn / 32) * 32;
    int step = kn->gemm_bk ? kn->gemm_bk : 32;
    g->stages = kn->gemm_stages ? kn->gemm_stages : (K % 8 == 0 && K > step) ? 2 : 1;
    g->bk = kn->gemm_bk ? kn->gemm_bk : g->stages == 1 && K >= 512 ? 64 : 32;
    /* no more stages than K steps: the others would be buffers never read */
    if (g->stages > (K + g->bk - 1) / g->bk) g->stages = (int)((K + g->bk - 1) / g->bk);
    /* only pinned values can miss: the defaults fit */
    if (gemm_tc_smem(g) > 48 * 1024)
        die_user(NULL, "--knob", "gemm_bm=%d gemm_bn=%d gemm_bk=%d gemm_stages=%d needs %lld bytes of shared memory per block (49152 at most)",
                 g->bm, g->bn, g->bk, g->stages, (long long)gemm_tc_smem(g));
    /* cp.async: 16-byte W rows, and every thread copies whole 16-byte chunks (not so for bm 128 with bk 16) */
    g->w_cp_async = g->stages > 1 && K % 8 == 0 && (int64_t)g->bn * g->bk / 8 % g->block == 0;
    /* X by 4-wide vector loads: a plain row load X[.., t, k] (its rows a multiple of 4 long, so aligned), whole vectors per thread */
    const Expr *X = g->xop;
    g->x_vec = g->stages > 1 && K % 4 == 0 && X->k == EX_LOAD && X->a[X->nargs - 1]->k == EX_VAR && X->a[X->nargs - 1]->var == g->red[0].v &&
               X->buf->dims[X->buf->ndim - 1] % 4 == 0 && (int64_t)g->bm * g->bk / g->block % 4 == 0 && g->block % (g->bk / 4) == 0;
    for (int d = 0; g->x_vec && d + 1 < X->nargs; d++) g->x_vec = !expr_uses_var(X->a[d], g->red[0].v);
}

/* ---- top_k ---- */
static int pow2_block(int64_t threads) {
    int b = 32;
    while (b < threads && b < 1024) b *= 2;
    return b;
}
/* Chunks: one per 1024 elements of the row, at most 128 (about a block per SM, each thread a few
 * elements); rows of 4096 or fewer in one. */
static int schedule_topk(Arena *A, const LoopNest *nest, const TOp *op, const Knobs *kn, TileKernel *k, Expr *rows, TileKernel **out) {
    int64_t len = op->raxes[0].extent->i;
    int64_t C = kn->topk_chunks ? kn->topk_chunks : len <= 4096 ? 1 : min_i(128, (len + 1023) / 1024);
    C = min_i(C, len);
    k->kind = SCHED_TOPK; k->topk = op;
    k->k_chunk = (len + C - 1) / C;
    k->split_k = (int)((len + k->k_chunk - 1) / k->k_chunk);   /* none empty */
    k->block = pow2_block(min_i(k->k_chunk, kn->reduce_block_max));
    k->grid = E_MUL(A, rows, e_i(A, k->split_k));
    out[0] = k;
    if (k->split_k == 1) return 1;
    k->name = arena_printf(A, "%s_chunks", nest->kname);
    Buffer *w = ARENA_NEW(A, Buffer);
    int64_t r;
    CHECK(expr_is_const(rows, &r), "top_k %s: rows are not static", nest->module);
    w->id = -1; w->name = arena_printf(A, "%s.chunks", nest->kname); w->kind = BUF_WORK; w->dtype = DT_F32;
    w->ndim = 2; w->dims[0] = r * k->split_k; w->dims[1] = 2 * op->topk_max; w->layer = -1; w->weight_index = -1; w->act_offset = 0;
    k->work = w;
    TileKernel *m = new_tk(A, nest);
    *m = *k;
    m->kind = SCHED_TOPK_MERGE;
    m->name = nest->kname;
    m->block = pow2_block(k->split_k);
    m->grid = rows;
    out[1] = m;
    return 2;
}

static int schedule_linear(Arena *A, const LoopNest *nest, const Knobs *kn, const TProgram *tp, TileKernel *k, Expr *total, TileKernel **out);
/* Schedules one nest; returns how many tile kernels it appended to out. */
static int schedule(Arena *A, const LoopNest *nest, const Knobs *kn, const TProgram *tp, TileKernel **out) {
    TileKernel *k = new_tk(A, nest);
    const LStmt *s = nest->root;
    for (;;) {
        CHECK(s->k == LS_FOR && s->lk == LOOP_PARALLEL && k->npar < MAX_AXES, "nest %s: expected a parallel loop", nest->module);
        k->par[k->npar].v = s->v; k->par[k->npar].extent = s->extent; k->npar++;
        if (s->nbody == 1 && s->body[0]->k == LS_FOR && s->body[0]->lk == LOOP_PARALLEL) { s = s->body[0]; continue; }
        break;
    }
    const LStmt *store;
    Expr *total = product(A, k->par, k->npar);
    if (s->nbody == 1 && s->body[0]->k == LS_ATTN) return schedule_flash(A, nest, s->body[0]->attn, kn, tp, out);
    if (s->nbody == 1 && s->body[0]->k == LS_TOPK) return schedule_topk(A, nest, s->body[0]->topk, kn, k, total, out);
    if (s->nbody == 1) {
        store = s->body[0];
        CHECK(store->k == LS_STORE, "nest %s: leaf is not a store", nest->module);
        k->kind = SCHED_FLAT;
        k->block = kn->flat_block;
        k->grid = ceil_div(A, total, k->block);
        k->store_value = store->value; k->out = store->buf; k->idx = store->idx;
        out[0] = k;
        return 1;
    }
    if (s->nbody >= 4 && s->body[1]->k == LS_ACC_INIT) {
        /* a pair: acc_init x2, the reduction with both updates, one or two stores */
        const LStmt *r = s->body[2];
        CHECK(s->nbody <= 5 && s->body[0]->k == LS_ACC_INIT && r->k == LS_FOR && r->lk == LOOP_REDUCE && r->nbody == 2 &&
              r->body[0]->k == LS_ACC && r->body[0]->slot == 0 && r->body[1]->k == LS_ACC && r->body[1]->slot == 1 && s->body[3]->k == LS_STORE &&
              (s->nbody == 4 || s->body[4]->k == LS_STORE), "nest %s: pair shape", nest->module);
        k->nacc = 2; k->redop = RED_SUM;
        k->red[0].v = r->v; k->red[0].extent = r->extent; k->nred = 1;
        k->acc_value = r->body[0]->value; k->acc_value1 = r->body[1]->value;
        k->store_value = s->body[3]->value; k->out = s->body[3]->buf; k->idx = s->body[3]->idx;
        if (s->nbody == 5) { k->nstore = 2; k->store_value1 = s->body[4]->value; k->out1 = s->body[4]->buf; k->idx1 = s->body[4]->idx; }
        return schedule_linear(A, nest, kn, tp, k, total, out);
    }
    CHECK((s->nbody == 3 || s->nbody == 4) && s->body[0]->k == LS_ACC_INIT && s->body[2]->k == LS_STORE, "nest %s: unsupported shape", nest->module);
    if (s->nbody == 4) {
        const LStmt *tl = s->body[3];
        CHECK(tl->k == LS_FOR && tl->lk == LOOP_PARALLEL && tl->nbody == 1 && tl->body[0]->k == LS_STORE, "nest %s: tail", nest->module);
        k->tail.v = tl->v; k->tail.extent = tl->extent;
        k->tail_out = tl->body[0]->buf; k->tail_idx = tl->body[0]->idx; k->tail_value = tl->body[0]->value;
    }
    k->redop = s->body[0]->red;
    const LStmt *r = s->body[1];
    while (r->k == LS_FOR) {
        CHECK(r->lk == LOOP_REDUCE && k->nred < 2 && (r->nbody == 1 || r->nbody == 2), "nest %s: reduction loops", nest->module);
        k->red[k->nred].v = r->v; k->red[k->nred].extent = r->extent; k->nred++;
        if (r->nbody == 2) {
            CHECK(r->body[0]->k == LS_STORE && r->body[1]->k == LS_ACC && k->nred == 1, "nest %s: side store", nest->module);
            k->side = r->body[0]->buf; k->side_idx = r->body[0]->idx; k->side_value = r->body[0]->value;
        }
        r = r->body[r->nbody - 1];
    }
    CHECK(r->k == LS_ACC, "nest %s: no accumulation", nest->module);
    k->acc_value = r->value;
    store = s->body[2];
    k->store_value = store->value; k->out = store->buf; k->idx = store->idx;
    return schedule_linear(A, nest, kn, tp, k, total, out);
}

/* A reduction nest: gemm_tc (+ its gemv) or gemv (+ splitk_sum) where it reads a weight, else block_reduce. */
static int schedule_linear(Arena *A, const LoopNest *nest, const Knobs *kn, const TProgram *tp, TileKernel *k, Expr *total, TileKernel **out) {
    int64_t K = 0;
    GemvScan gs = {0};
    if (!k->side && !k->tail_out && k->nred == 1 && k->redop == RED_SUM && expr_is_const(k->red[0].extent, &K)) {
        gs.v = k->red[0].v; gs.ok = true; gs.vec = 8;
        gemv_scan(&gs, k->acc_value);
        bool w0 = gs.weight;
        if (k->nacc == 2) { gs.weight = false; gemv_scan(&gs, k->acc_value1); gs.weight &= w0; }
    }
    CHECK(k->nacc == 1 || gs.weight, "nest %s: a pair that is not two linears", nest->module);
    int ntc = 0;
    int64_t maxrows = 0;
    /* only where a call can have more than gemm_min_n tokens (max_batch bounds n) */
    if (gs.weight && kn->gemm_tc && gemm_tc_form(k) && eval_i(k->par[0].extent, tp->g->max_batch, tp->g->max_ctx, &maxrows) &&
        maxrows > kn->gemm_min_n) {
        /* prefill (n > gemm_min_n) runs on the tensor cores; the gemv below stays for n <= gemm_min_n */
        TileKernel *g = new_tk(A, nest);
        *g = *k;
        g->name = arena_printf(A, "%s_tc", nest->kname);
        g->kind = SCHED_GEMM_TC;
        gemm_tc_tiles(g, kn, K);
        g->run_if = 1; g->min_n = kn->gemm_min_n;
        g->grid = E_MUL(A, ceil_div(A, k->par[0].extent, g->bm), ceil_div(A, k->par[1].extent, g->bn / k->nacc));
        g->smem_floats = 0;
        out[ntc++] = g;
        k->run_if = 2; k->min_n = kn->gemm_min_n;
    }
    if (gs.weight) {
        out += ntc;
        /* gemv: a warp per output element */
        k->kind = SCHED_GEMV;
        k->rows = kn->gemv_rows_per_block ? kn->gemv_rows_per_block : 4;
        k->block = 32 * k->rows;
        /* vector width: 16 bytes of the weight per lane, narrowed until every vectorised load stays aligned */
        int vec = 1;
        if (gs.ok) {
            vec = gs.vec;
            int want = kn->gemv_vec ? kn->gemv_vec : 16 / gs.wsize;
            while (vec > want) vec /= 2;
            while (vec > 1 && K % vec) vec /= 2;
        }
        k->vec = vec;
        int64_t t1 = 1, tmax = 1;
        CHECK(eval_i(total, 1, 0, &t1) && eval_i(total, tp->g->max_batch, tp->g->max_ctx, &tmax), "nest %s: extents", nest->module);
        int64_t blocks1 = (t1 + k->rows - 1) / k->rows;
        int64_t step = 32 * (int64_t)vec, rounds = (K + step - 1) / step;
        int64_t S = kn->gemv_split_k;
        if (!S) {
            /* split K while a decode step (n = 1) would leave the GPU's SMs short of blocks (about 2 per SM) */
            S = blocks1 >= kn->gemv_target_blocks ? 1 : (kn->gemv_target_blocks + blocks1 - 1) / blocks1;
            if (S > rounds / 2) S = max_i(1, rounds / 2);   /* each slice keeps at least two rounds of vector loads */
        }
        if (S > rounds) S = rounds;
        /* slices start vector aligned; a slice's last round may be partial, like the whole row's */
        k->k_chunk = (K + S - 1) / S;
        k->k_chunk = (k->k_chunk + vec - 1) / vec * vec;
        k->split_k = (int)((K + k->k_chunk - 1) / k->k_chunk);
        /* unroll: a lane's vector loads of U rounds issued together, so U loads per lane are in flight
         * (one alone leaves a decode GEMV well short of the memory's latency-bandwidth product) */
        int64_t lane_rounds = (k->k_chunk + step - 1) / step;
        k->unroll = kn->gemv_unroll ? kn->gemv_unroll : lane_rounds >= 4 ? 4 : lane_rounds >= 2 ? 2 : 1;
        k->grid = E_MUL(A, ceil_div(A, total, k->rows), e_i(A, k->split_k));
        if (k->split_k == 1) { out[0] = k; return ntc + 1; }
        Buffer *w = ARENA_NEW(A, Buffer);
        w->id = -1; w->name = arena_printf(A, "%s.partials", nest->kname); w->kind = BUF_WORK; w->dtype = DT_F32;
        w->ndim = 2; w->dims[0] = tmax; w->dims[1] = (int64_t)k->split_k * k->nacc; w->layer = -1; w->weight_index = -1; w->act_offset = 0;
        k->work = w;
        TileKernel *c = new_tk(A, nest);
        c->kind = SCHED_SPLITK_SUM;
        c->name = arena_printf(A, "%s_splitk", nest->kname);
        c->npar = k->npar; memcpy(c->par, k->par, sizeof k->par);
        c->redop = RED_SUM;
        c->split_k = k->split_k; c->work = w;
        c->store_value = k->store_value; c->out = k->out; c->idx = k->idx;
        c->nacc = k->nacc; c->nstore = k->nstore; c->store_value1 = k->store_value1; c->out1 = k->out1; c->idx1 = k->idx1;
        c->block = kn->flat_block;
        c->grid = ceil_div(A, total, c->block);
        c->run_if = k->run_if; c->min_n = k->min_n;
        out[0] = k; out[1] = c;
        return ntc + 2;
    }
    /* block_reduce: blocks sized from the extent when it is known */
    k->kind = SCHED_BLOCK_REDUCE;
    int64_t rext;
    int b = kn->reduce_block_max;
    if (expr_is_const(product(A, k->red, k->nred), &rext)) {
        b = 32;
        while (b < rext && b < kn->reduce_block_max) b *= 2;
    }
    k->block = b;
    k->grid = total;
    k->smem_floats = b > 32 ? (k->redop == RED_ARGMAX ? 2 : 1) * (b / 32) : 0;   /* argmax: a value and an index per warp */
    out[0] = k;
    return 1;
}

void tile_schedule(Arena *A, const LProgram *lp, const Knobs *kn, TileProgram *tp) {
    tp->lp = lp; tp->knobs = *kn; tp->n = 0;
    tp->k = ARENA_ARRAY(A, TileKernel *, 3 * lp->n);
    for (int i = 0; i < lp->n; i++) tp->n += schedule(A, lp->nests[i], kn, lp->tp, tp->k + tp->n);
}

static void print_axes(Str *o, const Axis *ax, int n) {
    for (int i = 0; i < n; i++) { str_printf(o, "%s%s<", i ? ", " : "", ax[i].v->name); expr_print(o, ax[i].extent); str_printf(o, ">"); }
}
void tile_print(Str *o, const TileProgram *tp) {
    str_printf(o, "# tile IR: %d kernels; knobs: ", tp->n);
    knobs_print(o, &tp->knobs);
    str_printf(o, "\n");
    for (int i = 0; i < tp->n; i++) {
        const TileKernel *k = tp->k[i];
        str_printf(o, "tile %s  # %s%s\n  schedule %s  grid=", k->name, k->nest->module,
                   k->run_if == 1 ? " (when n > min_n)" : k->run_if == 2 ? " (when n <= min_n)" : "", sched_names[k->kind]);
        expr_print(o, k->grid);
        str_printf(o, " block=%d", k->block);
        if (k->smem_floats) str_printf(o, " smem=%d x f32", k->smem_floats);
        switch (k->kind) {
        case SCHED_FLAT:
            str_printf(o, "\n  thread (bid*%d + tid) -> [", k->block);
            print_axes(o, k->par, k->npar);
            str_printf(o, "]\n");
            break;
        case SCHED_BLOCK_REDUCE:
            str_printf(o, "\n  block bid -> [");
            print_axes(o, k->par, k->npar);
            str_printf(o, "]\n  threads stride over [");
            print_axes(o, k->red, k->nred);
            str_printf(o, "] by %d", k->block);
            if (k->side) str_printf(o, " (storing the fused %s on the way)", k->side->name);
            if (k->tail_out) str_printf(o, "; then the block writes %s over %s<", k->tail_out->name, k->tail.v->name);
            if (k->tail_out) { expr_print(o, k->tail.extent); str_printf(o, "> by %d (the row's result from shared memory)", k->block); }
            str_printf(o, ", a warp-shuffle tree per warp");
            if (k->block > 32) str_printf(o, ", %d warp values in shared memory, a final warp reduce", k->block / 32);
            str_printf(o, " (%s)\n", red_op_names[k->redop]);
            break;
        case SCHED_GEMV:
            str_printf(o, " rows_per_block=%d split_k=%d k_chunk=%lld vec=%d unroll=%d\n  warp (", k->rows, k->split_k, (long long)k->k_chunk, k->vec, k->unroll);
            if (k->split_k > 1) str_printf(o, "bid/%d*%d + tid/32) -> [", k->split_k, k->rows);
            else str_printf(o, "bid*%d + tid/32) -> [", k->rows);
            print_axes(o, k->par, k->npar);
            str_printf(o, "]\n  lanes stride over [");
            print_axes(o, k->red, k->nred);
            if (k->split_k > 1) str_printf(o, "] slice bid%%%d", k->split_k);
            else str_printf(o, "]");
            str_printf(o, " by 32x%d (%s", k->vec, k->vec > 1 ? "vector loads" : "scalar loads");
            if (k->unroll > 1) str_printf(o, ", %d rounds' loads issued together, then the rest one by one", k->unroll);
            str_printf(o, "), f32 accumulation in order, a warp-shuffle tree (sum)");
            if (k->nacc == 2) str_printf(o, "; two accumulators (a pair), each lane's activation loads serve both, %d store%s", k->nstore, k->nstore > 1 ? "s" : "");
            if (k->work) str_printf(o, " -> %s", k->work->name);
            str_printf(o, "\n");
            break;
        case SCHED_GEMM_TC:
            str_printf(o, " bm=%d bn=%d bk=%d stages=%d min_n=%d\n  block (bid/ceil(%s/%d), bid%%ceil(%s/%d)) -> [", k->bm, k->bn, k->bk,
                       k->stages, k->min_n, k->par[0].v->name, k->bm, k->par[1].v->name, k->bn / k->nacc);
            print_axes(o, k->par, k->npar);
            str_printf(o, "] tile %dx%d, %d warps of 32x32; K [", k->bm, k->bn, k->block / 32);
            print_axes(o, k->red, k->nred);
            str_printf(o, "] in steps of %d staged to shared memory as bf16 (activations rounded to nearest even)", k->bk);
            if (k->stages > 1)
                str_printf(o, ", a %d-stage pipeline (W by %s, X by register prefetch one step ahead%s)", k->stages,
                           k->w_cp_async ? "16-byte cp.async copies" : "register prefetch", k->x_vec ? ", 4-wide vector loads" : "");
            str_printf(o, ", ldmatrix.x4 + mma.m16n8k16 bf16, f32 accumulation; runs when n > %d\n", k->min_n);
            if (k->nacc == 2)
                str_printf(o, "  a pair: the W tile is %d outputs of %s and of %s in alternating groups of 16 rows (a warp's n-tiles 0,1 and 2,3 are "
                              "the same outputs), %d store%s per output\n", k->bn / 2, k->wop->buf->name, k->wop1->buf->name, k->nstore, k->nstore > 1 ? "s" : "");
            break;
        case SCHED_FLASH: {
            const AttnDesc *d = k->attn;
            str_printf(o, " tokens=%d warps=%d split=%d keys_per_tile=%d\n  block (bid/%d/%lld, bid/%d%%%lld, bid%%%d) -> "
                          "(tokens [%s<", k->tq, k->block / 32, k->split_k, FLASH_BC, k->split_k, (long long)(d->heads / d->group),
                       k->split_k, (long long)(d->heads / d->group), k->split_k, d->t->name);
            expr_print(o, d->rows);
            str_printf(o, "] by %d, kv head, key slice); warp -> a (token, head) row of the kv head's %lld heads\n"
                          "  per %d keys [%s<", k->tq, (long long)d->group, FLASH_BC, d->j->name);
            expr_print(o, d->len);
            str_printf(o, "]: K/V tile to shared memory once for the block, lane -> one key's score (dot over %lld from shared memory), "
                          "shfl_xor max tree, online softmax (running max, per-lane sums), lane -> d, d+32, .. of P.V (%lld)\n",
                       (long long)d->hd, (long long)d->hv);
            if (k->work) str_printf(o, "  slices write (o, max, sum) to %s\n", k->work->name);
            break;
        }
        case SCHED_FLASH_COMBINE:
            str_printf(o, "\n  thread (bid*%d + tid) -> (row, d); merges %d slices of %s: o / sum rescaled to the largest max\n",
                       k->block, k->split_k, k->work->name);
            break;
        case SCHED_SPLITK_SUM:
            str_printf(o, "\n  thread (bid*%d + tid) -> [", k->block);
            print_axes(o, k->par, k->npar);
            str_printf(o, "]\n  sums %d partials of %s in order, then the epilogue\n", k->split_k, k->work->name);
            break;
        case SCHED_TOPK: case SCHED_TOPK_MERGE: {
            const TOp *t = k->topk;
            str_printf(o, " chunks=%d chunk=%lld\n", k->split_k, (long long)k->k_chunk);
            if (k->kind == SCHED_TOPK)
                str_printf(o, "  block bid -> (row [bid/%d of ", k->split_k);
            else
                str_printf(o, "  block bid -> (row [bid of ");
            print_axes(o, k->par, k->npar);
            if (k->kind == SCHED_TOPK)
                str_printf(o, "], chunk bid%%%d of %lld of [%s<%lld>]); thread -> the chunk's elements tid, tid+%d, ..: its best below the last it gave\n",
                           k->split_k, (long long)k->k_chunk, t->raxes[0].v->name, (long long)t->raxes[0].extent->i, k->block);
            else
                str_printf(o, "]); thread c < %d -> the head of chunk c's list in %s\n", k->split_k, k->work->name);
            str_printf(o, "  k = ");
            expr_print(o, t->topk_count);
            if (t->topk_count->k == EX_PARAM) str_printf(o, " (model_topk runs these kernels with n = its k)");
            str_printf(o, " rounds (at most %lld) of a block argmax (shfl_down trees%s, shfl_idx from lane 0); "
                          "thread 0 stores the round's (value, index) to %s; the winner %s\n",
                       (long long)t->topk_max, k->block > 32 ? ", a (value, index) per warp in shared memory" : "", k->kind == SCHED_TOPK && k->work ? k->work->name : t->out->name,
                       k->kind == SCHED_TOPK ? "rescans its elements" : "moves to its next");
            break;
        }
        case SCHED_COUNT: UNREACHABLE();
        }
    }
}
const char *tile_verify(Arena *A, const TileProgram *tp) {
    for (int i = 0; i < tp->n; i++) {
        const TileKernel *k = tp->k[i];
        const char *m = NULL;
        if (k->block < 1 || k->block > 1024) m = "block size is outside 1..1024";
        else if (k->kind != SCHED_GEMV && k->kind != SCHED_FLASH && (k->block & (k->block - 1))) m = "block size is not a power of two";
        else if (k->kind == SCHED_FLASH && (k->block % 32 || !k->attn || k->block != 32 * k->tq * k->attn->group || k->split_k < 1 ||
                                            (k->split_k > 1) != (k->work != NULL)))
            m = "flash_attn parameters";
        else if (k->kind == SCHED_FLASH_COMBINE && (!k->attn || !k->work || k->work->dims[1] != k->attn->hv + 2 || k->split_k < 2))
            m = "flash_combine without its partials";
        else if ((k->kind == SCHED_BLOCK_REDUCE || k->kind == SCHED_GEMV) && k->block % 32) m = "warp schedule with a partial warp";
        else if (k->kind == SCHED_BLOCK_REDUCE && (k->smem_floats < (k->block > 32 ? k->block / 32 : 0) || k->nred < 1)) m = "reduction without shared scratch";
        else if (k->kind == SCHED_GEMV && (k->nred != 1 || k->vec < 1 || k->k_chunk % k->vec || k->split_k < 1 || k->unroll < 1 || k->unroll > 8))
            m = "gemv parameters";
        else if (k->nacc == 2 && k->kind != SCHED_GEMV && k->kind != SCHED_GEMM_TC && k->kind != SCHED_SPLITK_SUM) m = "two accumulators in a schedule without them";
        else if (k->kind == SCHED_GEMM_TC && k->nacc == 2 && !k->wop1) m = "gemm_tc pair without its second weight";
        else if ((k->kind == SCHED_SPLITK_SUM || (k->kind == SCHED_GEMV && k->split_k > 1)) && (!k->work || k->work->dims[1] != (int64_t)k->split_k * k->nacc))
            m = "split-K without its workspace";
        else if (k->kind == SCHED_GEMM_TC && ((k->bm != 64 && k->bm != 128) || (k->bn != 64 && k->bn != 128) || k->block != k->bm * k->bn / 32 ||
                                              (k->bk != 16 && k->bk != 32 && k->bk != 64) ||
                                              k->stages < 1 || k->stages > 3 || (k->w_cp_async && k->stages < 2) || !k->xop || !k->wop))
            m = "gemm_tc parameters";
        else if (k->kind == SCHED_GEMM_TC && gemm_tc_smem(k) > 48 * 1024) m = "gemm_tc shared memory over 48 KiB";
        else if ((k->kind == SCHED_TOPK || k->kind == SCHED_TOPK_MERGE) &&
                 (!k->topk || k->block % 32 || k->split_k < 1 || (int64_t)k->split_k * k->k_chunk < k->topk->raxes[0].extent->i ||
                  (k->split_k > 1) != (k->work != NULL) || (k->kind == SCHED_TOPK_MERGE && (k->split_k > k->block || !k->work)) ||
                  (k->work && k->work->dims[1] != 2 * k->topk->topk_max)))
            m = "top_k parameters";
        else if (k->grid->t != T_I64) m = "grid is not an integer";
        else if (k->smem_floats * 4 > 48 * 1024) m = "shared memory over 48 KiB";
        if (m) return arena_printf(A, "tile %d (%s): %s", i, k->nest->module, m);
    }
    return NULL;
}
