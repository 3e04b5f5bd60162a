/* tile_ir.c: loop IR -> tile IR: a nest's shape into a TileKernel, offered
 * to the schedules (compiler/schedules/) in turn; the printer and verifier
 * around theirs; knobs. */
#include "schedules/schedule.h"
#include <stdlib.h>
#include <string.h>

const char *const sched_names[] = {SCHED_KINDS(X_NAME)};
const char *const target_names[] = {TARGETS(X_NAME)};

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
    if (nl == strlen("cpu_prefetch") && !strncmp(assign, "cpu_prefetch", nl) && v % 64)
        die_user(NULL, "--knob", "cpu_prefetch must be a multiple of 64 (bytes: whole cache lines)");
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
    /* the names as one literal: ", a, b, .." from its third character */
#define X(s, f, d, lo, hi, p2) ", " s
    die_user(NULL, "--knob", "unknown knob '%.*s' (known: %s)", (int)nl, assign, KNOBS(X) + 2);
#undef X
}
void knobs_print(Str *o, const Knobs *k) {
    const char *sep = "";
#define X(s, f, d, lo, hi, p2) str_printf(o, "%s%s=%d", sep, s, k->f); sep = " ";
    KNOBS(X)
#undef X
}

static void nest_store(NestStore *st, const LStmt *s) { st->buf = s->buf; st->idx = s->idx; st->value = s->value; }
/* The nest's loops into b: the parallel axes, then (a reduction) the reductions, the accumulated terms
 * and the stores, with a fused side store or tail; returns the innermost parallel loop's single statement
 * (a flat store, also put in store[0]; an attention, a top-k), else NULL. */
static const LStmt *nest_shape(const LoopNest *nest, NestBody *b) {
    const char *m = nest->module;
    const LStmt *s = nest->root;
    b->nacc = b->nstore = 1;
    for (;; s = s->body[0]) {
        CHECK(s->k == LS_FOR && s->lk == LOOP_PARALLEL && b->npar < MAX_AXES, "nest %s: expected a parallel loop", m);
        b->par[b->npar++] = (Axis){s->v, s->extent};
        if (s->nbody != 1 || s->body[0]->k != LS_FOR || s->body[0]->lk != LOOP_PARALLEL) break;
    }
    if (s->nbody == 1 && s->body[0]->k == LS_STORE) nest_store(&b->store[0], s->body[0]);
    if (s->nbody == 1) return s->body[0];
    LStmt *const *l = s->body;
    if (s->nbody >= 4 && l[1]->k == LS_ACC_INIT) {
        /* a pair: acc_init x2, the reduction with both updates, one or two stores */
        const LStmt *r = l[2];
        CHECK(s->nbody <= 5 && l[0]->k == LS_ACC_INIT && r->k == LS_FOR && r->lk == LOOP_REDUCE && r->nbody == 2 &&
              r->body[0]->k == LS_ACC && r->body[0]->slot == 0 && r->body[1]->k == LS_ACC && r->body[1]->slot == 1 &&
              l[3]->k == LS_STORE && (s->nbody == 4 || l[4]->k == LS_STORE), "nest %s: pair shape", m);
        b->nacc = 2; b->redop = RED_SUM;
        b->red[b->nred++] = (Axis){r->v, r->extent};
        b->acc[0] = r->body[0]->value; b->acc[1] = r->body[1]->value;
        b->nstore = s->nbody - 3;
        for (int i = 0; i < b->nstore; i++) nest_store(&b->store[i], l[3 + i]);
        return NULL;
    }
    CHECK((s->nbody == 3 || s->nbody == 4) && l[0]->k == LS_ACC_INIT && l[2]->k == LS_STORE,
          "nest %s: unsupported shape", m);
    if (s->nbody == 4) {
        const LStmt *tl = l[3];
        CHECK(tl->k == LS_FOR && tl->lk == LOOP_PARALLEL && tl->nbody == 1 && tl->body[0]->k == LS_STORE,
              "nest %s: tail", m);
        b->tail = (Axis){tl->v, tl->extent};
        nest_store(&b->tail_store, tl->body[0]);
    }
    b->redop = l[0]->red;
    const LStmt *r = l[1];
    while (r->k == LS_FOR) {
        CHECK(r->lk == LOOP_REDUCE && b->nred < 2 && (r->nbody == 1 || r->nbody == 2), "nest %s: reduction loops", m);
        b->red[b->nred++] = (Axis){r->v, r->extent};
        if (r->nbody == 2) {
            CHECK(r->body[0]->k == LS_STORE && r->body[1]->k == LS_ACC && b->nred == 1, "nest %s: side store", m);
            nest_store(&b->side, r->body[0]);
        }
        r = r->body[r->nbody - 1];
    }
    CHECK(r->k == LS_ACC, "nest %s: no accumulation", m);
    b->acc[0] = r->value;
    nest_store(&b->store[0], l[2]);
    return NULL;
}

void tile_schedule(Arena *A, const LProgram *lp, Target target, const Knobs *kn, TileProgram *tp) {
    tp->lp = lp; tp->target = target; tp->knobs = *kn; tp->n = 0;
    tp->max_batch = lp->max_batch; tp->max_ctx = lp->max_ctx;
    tp->k = ARENA_ARRAY(A, TileKernel *, 3 * lp->n);
    for (int i = 0; i < lp->n; i++) {
        NestBody shape = {0};
        ScheduleChoice c = {A, kn, tp, nest_shape(lp->nests[i], &shape), &shape, NULL};
        c.total = product(A, shape.par, shape.npar);
        int n = 0;
        for (int j = 0; j < SCHED_COUNT && !n; j++) {
            const Schedule *s = &schedules[schedule_order[j]];
            if (s->choose && (target == TARGET_CPU || !(s->block_rule & BLOCK_TASK)))
                n = s->choose(&c, new_tile_kernel(A, lp->nests[i]), tp->k + tp->n);
        }
        CHECK(n, "nest %s: no schedule", lp->nests[i]->module);
        tp->n += n;
    }
}

void tile_print(Str *o, const TileProgram *tp) {
    str_printf(o, "# tile IR (target %s): %d kernels; knobs: ", target_names[tp->target], tp->n);
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
        const Schedule *s = &schedules[k->kind];
        const char *m = NULL;
        if (k->block < 1 || k->block > 1024) m = "block size is outside 1..1024";
        else if (s->block_rule & BLOCK_TASK && (k->block != 1 || tp->target != TARGET_CPU))
            m = "CPU task schedule with threads or outside the CPU target";
        else if (s->block_rule & BLOCK_POW2 && k->block & (k->block - 1)) m = "block size is not a power of two";
        else if (s->block_rule & BLOCK_WARPS && k->block % 32) m = "warp schedule with a partial warp";
        else if (s->verify && (m = s->verify(k))) {}
        else if (k->grid->t != T_I64) m = "grid is not an integer";
        else if (k->smem_floats * 4 > 48 * 1024) m = "shared memory over 48 KiB";
        if (m) return arena_printf(A, "tile %d (%s): %s", i, k->nest->module, m);
    }
    return NULL;
}
