/* tile_ir.c: loop IR -> tile IR: a nest's shape into a TileKernel, offered
 * to the schedules (compiler/schedules/) in turn; the printer and verifier
 * around theirs; knobs. */
#include "schedules/schedule.h"
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
            die_user(NULL, "--knob", "%s must be %s in %d..%d", s, (p2) ? "a power of two" : "an integer", \
                     (lo) ? (lo) : ((p2) ? 1 : 0), hi); \
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

/* The nest's loops into k: the parallel axes, then (a reduction) the reductions, the accumulated terms
 * and the stores, with a fused side store or tail; leaf: the innermost parallel loop's single statement
 * (a flat store, an attention, a top-k), else NULL. */
static const LStmt *nest_shape(TileKernel *k) {
    const char *m = k->nest->module;
    const LStmt *s = k->nest->root;
    for (;;) {
        CHECK(s->k == LS_FOR && s->lk == LOOP_PARALLEL && k->npar < MAX_AXES, "nest %s: expected a parallel loop", m);
        k->par[k->npar].v = s->v; k->par[k->npar].extent = s->extent; k->npar++;
        if (s->nbody == 1 && s->body[0]->k == LS_FOR && s->body[0]->lk == LOOP_PARALLEL) { s = s->body[0]; continue; }
        break;
    }
    if (s->nbody == 1) return s->body[0];
    LStmt *const *b = s->body;
    if (s->nbody >= 4 && b[1]->k == LS_ACC_INIT) {
        /* a pair: acc_init x2, the reduction with both updates, one or two stores */
        const LStmt *r = b[2];
        CHECK(s->nbody <= 5 && b[0]->k == LS_ACC_INIT && r->k == LS_FOR && r->lk == LOOP_REDUCE && r->nbody == 2 &&
              r->body[0]->k == LS_ACC && r->body[0]->slot == 0 && r->body[1]->k == LS_ACC && r->body[1]->slot == 1 &&
              b[3]->k == LS_STORE && (s->nbody == 4 || b[4]->k == LS_STORE), "nest %s: pair shape", m);
        k->nacc = 2; k->redop = RED_SUM;
        k->red[0].v = r->v; k->red[0].extent = r->extent; k->nred = 1;
        k->acc_value = r->body[0]->value; k->acc_value1 = r->body[1]->value;
        k->store_value = b[3]->value; k->out = b[3]->buf; k->idx = b[3]->idx;
        if (s->nbody == 5) { k->nstore = 2; k->store_value1 = b[4]->value; k->out1 = b[4]->buf; k->idx1 = b[4]->idx; }
        return NULL;
    }
    CHECK((s->nbody == 3 || s->nbody == 4) && b[0]->k == LS_ACC_INIT && b[2]->k == LS_STORE,
          "nest %s: unsupported shape", m);
    if (s->nbody == 4) {
        const LStmt *tl = b[3];
        CHECK(tl->k == LS_FOR && tl->lk == LOOP_PARALLEL && tl->nbody == 1 && tl->body[0]->k == LS_STORE,
              "nest %s: tail", m);
        k->tail.v = tl->v; k->tail.extent = tl->extent;
        k->tail_out = tl->body[0]->buf; k->tail_idx = tl->body[0]->idx; k->tail_value = tl->body[0]->value;
    }
    k->redop = b[0]->red;
    const LStmt *r = b[1];
    while (r->k == LS_FOR) {
        CHECK(r->lk == LOOP_REDUCE && k->nred < 2 && (r->nbody == 1 || r->nbody == 2), "nest %s: reduction loops", m);
        k->red[k->nred].v = r->v; k->red[k->nred].extent = r->extent; k->nred++;
        if (r->nbody == 2) {
            CHECK(r->body[0]->k == LS_STORE && r->body[1]->k == LS_ACC && k->nred == 1, "nest %s: side store", m);
            k->side = r->body[0]->buf; k->side_idx = r->body[0]->idx; k->side_value = r->body[0]->value;
        }
        r = r->body[r->nbody - 1];
    }
    CHECK(r->k == LS_ACC, "nest %s: no accumulation", m);
    k->acc_value = r->value;
    k->store_value = b[2]->value; k->out = b[2]->buf; k->idx = b[2]->idx;
    return NULL;
}

void tile_schedule(Arena *A, const LProgram *lp, const Knobs *kn, TileProgram *tp) {
    tp->lp = lp; tp->knobs = *kn; tp->n = 0;
    tp->max_batch = lp->max_batch; tp->max_ctx = lp->max_ctx;
    tp->k = ARENA_ARRAY(A, TileKernel *, 3 * lp->n);
    for (int i = 0; i < lp->n; i++) {
        TileKernel *k = new_tile_kernel(A, lp->nests[i]);
        ScheduleChoice c = {A, kn, tp, nest_shape(k), NULL};
        c.total = product(A, k->par, k->npar);
        int n = 0;
        for (int j = 0; j < SCHED_COUNT && !n; j++) {
            const Schedule *s = &schedules[schedule_order[j]];
            if (s->choose) n = s->choose(&c, k, tp->k + tp->n);
        }
        CHECK(n, "nest %s: no schedule", k->nest->module);
        tp->n += n;
    }
}

void tile_print(Str *o, const TileProgram *tp) {
    str_printf(o, "# tile IR: %d kernels; knobs: ", tp->n);
    knobs_print(o, &tp->knobs);
    str_printf(o, "\n");
    for (int i = 0; i < tp->n; i++) {
        const TileKernel *k = tp->k[i];
        const char *when = k->run_if == 1 ? " (when n > min_n)" : k->run_if == 2 ? " (when n <= min_n)" : "";
        str_printf(o, "tile %s  # %s%s\n  schedule %s  grid=", k->name, k->nest->module, when, sched_names[k->kind]);
        expr_print(o, k->grid);
        str_printf(o, " block=%d", k->block);
        if (k->smem_floats) str_printf(o, " smem=%d x f32", k->smem_floats);
        schedules[k->kind].print(o, k);
    }
}
const char *tile_verify(Arena *A, const TileProgram *tp) {
    for (int i = 0; i < tp->n; i++) {
        const TileKernel *k = tp->k[i];
        const char *m = NULL;
        if (k->block < 1 || k->block > 1024) m = "block size is outside 1..1024";
        else if (k->nacc == 2 && k->kind != SCHED_GEMV && k->kind != SCHED_GEMM_TC && k->kind != SCHED_SPLITK_SUM)
            m = "two accumulators in a schedule without them";
        else if ((m = schedules[k->kind].verify(k))) {}
        else if (k->grid->t != T_I64) m = "grid is not an integer";
        else if (k->smem_floats * 4 > 48 * 1024) m = "shared memory over 48 KiB";
        if (m) return arena_printf(A, "tile %d (%s): %s", i, k->nest->module, m);
    }
    return NULL;
}
