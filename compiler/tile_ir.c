/* tile_ir.c: loop IR -> tile IR (choosing a schedule per nest), printer,
 * verifier, knobs. */
#include "tile_ir.h"
#include <stdlib.h>
#include <string.h>

const char *const sched_names[] = {
#define X(e, s) s,
    SCHED_KINDS(X)
#undef X
};

void knobs_default(Knobs *k) { k->flat_block = 256; k->reduce_block_max = 256; }

static bool pow2(long v) { return v > 0 && !(v & (v - 1)); }
void knobs_set(Knobs *k, const char *assign) {
    const char *eq = strchr(assign, '=');
    if (!eq) die_user(NULL, "--knob", "'%s' is not NAME=VALUE", assign);
    char *end;
    long v = strtol(eq + 1, &end, 10);
    size_t nl = (size_t)(eq - assign);
    if (*end || eq[1] == 0) die_user(NULL, "--knob", "'%s': value is not an integer", assign);
    if (nl == 10 && !strncmp(assign, "flat_block", nl)) {
        if (!pow2(v) || v < 32 || v > 1024) die_user(NULL, "--knob", "flat_block must be a power of two in 32..1024");
        k->flat_block = (int)v;
    } else if (nl == 16 && !strncmp(assign, "reduce_block_max", nl)) {
        if (!pow2(v) || v < 32 || v > 1024) die_user(NULL, "--knob", "reduce_block_max must be a power of two in 32..1024");
        k->reduce_block_max = (int)v;
    } else {
        die_user(NULL, "--knob", "unknown knob '%.*s' (known: flat_block, reduce_block_max)", (int)nl, assign);
    }
}

static Expr *product(Arena *A, const Axis *ax, int n) {
    Expr *p = e_i(A, 1);
    for (int i = 0; i < n; i++) p = E_MUL(A, p, ax[i].extent);
    return p;
}

static TileKernel *schedule(Arena *A, const LoopNest *nest, const Knobs *kn) {
    TileKernel *k = ARENA_NEW(A, TileKernel);
    k->nest = nest;
    const LStmt *s = nest->root;
    for (;;) {
        CHECK(s->k == LS_FOR && s->lk == LOOP_PARALLEL && k->npar < MAX_AXES, "nest %s: expected a parallel loop", nest->module);
        k->par[k->npar].v = s->v; k->par[k->npar].extent = s->extent; k->npar++;
        if (s->nbody == 1 && s->body[0]->k == LS_FOR && s->body[0]->lk == LOOP_PARALLEL) { s = s->body[0]; continue; }
        break;
    }
    const LStmt *store;
    if (s->nbody == 1) {
        store = s->body[0];
        CHECK(store->k == LS_STORE, "nest %s: leaf is not a store", nest->module);
        k->kind = SCHED_FLAT;
        k->block = kn->flat_block;
        k->grid = E_DIV(A, E_ADD(A, product(A, k->par, k->npar), e_i(A, k->block - 1)), e_i(A, k->block));
    } else {
        CHECK(s->nbody == 3 && s->body[0]->k == LS_ACC_INIT && s->body[2]->k == LS_STORE, "nest %s: unsupported shape", nest->module);
        k->kind = SCHED_BLOCK_REDUCE;
        k->redop = s->body[0]->red;
        const LStmt *r = s->body[1];
        while (r->k == LS_FOR) {
            CHECK(r->lk == LOOP_REDUCE && k->nred < 2 && r->nbody == 1, "nest %s: reduction loops", nest->module);
            k->red[k->nred].v = r->v; k->red[k->nred].extent = r->extent; k->nred++;
            r = r->body[0];
        }
        CHECK(r->k == LS_ACC, "nest %s: no accumulation", nest->module);
        k->acc_value = r->value;
        store = s->body[2];
        int64_t rext;
        int b = kn->reduce_block_max;
        if (expr_is_const(product(A, k->red, k->nred), &rext)) {
            b = 32;
            while (b < rext && b < kn->reduce_block_max) b *= 2;
        }
        k->block = b;
        k->grid = product(A, k->par, k->npar);
        k->smem_floats = b;
    }
    k->store_value = store->value;
    k->out = store->buf;
    k->idx = store->idx;
    return k;
}

void tile_schedule(Arena *A, const LProgram *lp, const Knobs *kn, TileProgram *tp) {
    tp->lp = lp; tp->knobs = *kn; tp->n = lp->n;
    tp->k = ARENA_ARRAY(A, TileKernel *, lp->n);
    for (int i = 0; i < lp->n; i++) tp->k[i] = schedule(A, lp->nests[i], kn);
}

static void print_axes(Str *o, const Axis *ax, int n) {
    for (int i = 0; i < n; i++) { str_printf(o, "%s%s<", i ? ", " : "", ax[i].v->name); expr_print(o, ax[i].extent); str_printf(o, ">"); }
}
void tile_print(Str *o, const TileProgram *tp) {
    str_printf(o, "# tile IR: %d kernels; knobs: flat_block=%d reduce_block_max=%d\n", tp->n, tp->knobs.flat_block, tp->knobs.reduce_block_max);
    for (int i = 0; i < tp->n; i++) {
        const TileKernel *k = tp->k[i];
        str_printf(o, "tile %s  # %s\n  schedule %s  grid=", k->nest->kname, k->nest->module, sched_names[k->kind]);
        expr_print(o, k->grid);
        str_printf(o, " block=%d", k->block);
        if (k->smem_floats) str_printf(o, " smem=%d x f32", k->smem_floats);
        if (k->kind == SCHED_FLAT) {
            str_printf(o, "\n  thread (bid*%d + tid) -> [", k->block);
            print_axes(o, k->par, k->npar);
            str_printf(o, "]\n");
        } else {
            str_printf(o, "\n  block bid -> [");
            print_axes(o, k->par, k->npar);
            str_printf(o, "]\n  threads stride over [");
            print_axes(o, k->red, k->nred);
            str_printf(o, "] by %d, then a shared-memory tree (%s)\n", k->block, red_op_names[k->redop]);
        }
    }
}
const char *tile_verify(Arena *A, const TileProgram *tp) {
    for (int i = 0; i < tp->n; i++) {
        const TileKernel *k = tp->k[i];
        const char *m = NULL;
        if (k->block < 1 || k->block > 1024 || (k->block & (k->block - 1))) m = "block size is not a power of two in 1..1024";
        else if (k->kind == SCHED_BLOCK_REDUCE && (k->smem_floats < k->block || k->nred < 1)) m = "reduction without shared scratch";
        else if (k->grid->t != T_I64) m = "grid is not an integer";
        else if (k->smem_floats * 4 > 48 * 1024) m = "shared memory over 48 KiB";
        if (m) return arena_printf(A, "tile %d (%s): %s", i, k->nest->module, m);
    }
    return NULL;
}
