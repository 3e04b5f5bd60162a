/* emit_c.c: kernel IR -> C. The schedule runs as written: blocks are an
 * OpenMP loop, each phase is a loop over the block's threads (so every
 * thread finishes a phase before any starts the next: the barrier), per-
 * thread registers are arrays indexed by tid, shared memory is a per-block
 * array. */
#include "emit.h"

static void emit_kstmts(Str *o, const KKernel *k, KStmt **b, int n, int d) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        for (int j = 0; j < d; j++) str_printf(o, "    ");
        if (s->k == KS_PHASE) {
            str_printf(o, "for (int64_t tid = 0; tid < %d; tid++) { /* phase */\n", k->block);
            emit_tstmts(o, k, s->body, s->nbody, d + 1, TARGET_CPU);
            for (int j = 0; j < d; j++) str_printf(o, "    ");
            str_printf(o, "}\n");
        } else {
            str_printf(o, "for (int64_t %s_%d = ", s->v->name, s->v->id);
            emit_expr(o, k, s->init, TARGET_CPU);
            str_printf(o, "; ");
            emit_expr(o, k, s->cond, TARGET_CPU);
            str_printf(o, "; %s_%d = ", s->v->name, s->v->id);
            emit_expr(o, k, s->update, TARGET_CPU);
            str_printf(o, ") { /* uniform */\n");
            emit_kstmts(o, k, s->kbody, s->nk, d + 1);
            for (int j = 0; j < d; j++) str_printf(o, "    ");
            str_printf(o, "}\n");
        }
    }
}

void emit_kernel_c(Str *o, const KKernel *k) {
    str_printf(o, "\n/* %s: from %s, %s, %d threads per block */\n", k->name, k->module, sched_names[k->sched], k->block);
    str_printf(o, "static void %s(int64_t grid, ", k->name);
    emit_params(o, k, TARGET_CPU);
    str_printf(o, ") {\n    (void)n; (void)pos;\n    #pragma omp parallel for schedule(static)\n    for (int64_t bid = 0; bid < grid; bid++) {\n");
    for (int i = 0; i < k->nsmem; i++) str_printf(o, "        float smem%d[%d];\n", i, k->smem[i].size);
    for (int i = 0; i < k->nregs; i++) str_printf(o, "        float r%d[%d];\n", i, k->block);
    emit_kstmts(o, k, k->body, k->nbody, 2);
    str_printf(o, "    }\n}\n");
}
