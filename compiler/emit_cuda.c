/* emit_cuda.c: kernel IR -> CUDA. Phases are separated by
 * __syncthreads(); registers are scalars; shared arrays are __shared__. */
#include "emit.h"

static void emit_kstmts(Str *o, const KKernel *k, KStmt **b, int n, int d) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        for (int j = 0; j < d; j++) str_printf(o, "    ");
        if (s->k == KS_PHASE) {
            str_printf(o, "{ /* phase */\n");
            emit_tstmts(o, k, s->body, s->nbody, d + 1, TARGET_CUDA);
            for (int j = 0; j < d; j++) str_printf(o, "    ");
            str_printf(o, "}\n");
            if (k->nsmem) { for (int j = 0; j < d; j++) str_printf(o, "    "); str_printf(o, "__syncthreads();\n"); }
        } else {
            str_printf(o, "for (int64_t %s_%d = ", s->v->name, s->v->id);
            emit_expr(o, k, s->init, TARGET_CUDA);
            str_printf(o, "; ");
            emit_expr(o, k, s->cond, TARGET_CUDA);
            str_printf(o, "; %s_%d = ", s->v->name, s->v->id);
            emit_expr(o, k, s->update, TARGET_CUDA);
            str_printf(o, ") { /* uniform */\n");
            emit_kstmts(o, k, s->kbody, s->nk, d + 1);
            for (int j = 0; j < d; j++) str_printf(o, "    ");
            str_printf(o, "}\n");
        }
    }
}

void emit_kernel_cuda(Str *o, const KKernel *k) {
    str_printf(o, "\n/* %s: from %s, %s */\n", k->name, k->module, sched_names[k->sched]);
    str_printf(o, "__global__ void __launch_bounds__(%d) %s(", k->block, k->name);
    emit_params(o, k, TARGET_CUDA);
    str_printf(o, ") {\n    const int64_t tid = threadIdx.x, bid = blockIdx.x;\n    (void)n; (void)pos;\n");
    for (int i = 0; i < k->nsmem; i++) str_printf(o, "    __shared__ float smem%d[%d];\n", i, k->smem[i].size);
    for (int i = 0; i < k->nregs; i++) str_printf(o, "    float r%d;\n", i);
    emit_kstmts(o, k, k->body, k->nbody, 1);
    str_printf(o, "}\n");
}
