/* emit_c.c: kernel IR -> C. The schedule runs as written: blocks are an
 * OpenMP loop, each phase is a loop over the block's threads (so every
 * thread finishes a phase before any starts the next: the barrier), per-
 * thread registers are arrays indexed by tid, shared memory is a per-block
 * array, a warp shuffle is a write of every lane's value to a per-block
 * lane buffer and a read of the source lane's (emit.c); mma and ldmatrix
 * gather a warp's fragments and compute per the PTX ISA's layouts
 * (mma_warp / ldmatrix_warp in the prelude); cp.async copies are queued
 * per block and performed by the wait_group that completes them. */
#include "emit_kernel.h"

void emit_kernel_c(Str *o, const KKernel *k, KernelText *kt) {
    str_printf(o, "\n/* %s: from %s, %s, ", k->name, k->module, sched_names[k->sched]);
    str_printf(o, k->task ? "a task per block */\n" : "%d threads per block */\n", k->block);
    /* cpu: compiled for each instruction set, one chosen at start (CPU_KERNEL, runtime/cpu_gemm.h) */
    str_printf(o, "%sstatic void ", kt->target == TARGET_CPU ? "CPU_KERNEL " : "");
    emit_kernel_name(o, k);
    str_printf(o, "(int64_t grid, ");
    emit_params(o, k, kt);
    /* cpu: called by every thread of model_forward's team, which share the blocks; cuda-emu: a team per call */
    str_printf(o, ") {\n    (void)n; (void)pos;\n");
    emit_pos_prologue(o, k, kt);
    if (k->has_acts_q8)   /* this thread's 8-bit activation row (runtime/cpu_quant_q8.h), quantized at first use */
        str_printf(o, "    CpuActsQ8 *acts_q8 = cpu_acts_q8_begin();\n");
    if (k->has_acts16)   /* this thread's input rounded to bf16 (runtime/cpu_dot16.h), at the first dot product */
        str_printf(o, "    CpuActs16 *acts16 = cpu_acts16_begin();\n");
    /* cpu: no barrier at the end (nowait): the host code has one before a launch that needs it (emit.c) */
    str_printf(o, "    #pragma omp %sfor schedule(static)%s\n    for (int64_t bid = 0; bid < grid; bid++) {\n",
               kt->target == TARGET_CPU ? "" : "parallel ", kt->target == TARGET_CPU ? " nowait" : "");
    for (int i = 0; k->task && i < k->nsmem; i++)
        str_printf(o, "        _Alignas(32) float smem%d[%d]; /* scratch */\n", i, k->smem[i].size);
    for (int i = 0; i < k->nregs && k->task; i++) str_printf(o, "        float r%d = 0;\n", i);
    for (int i = 0; !k->task && i < k->nsmem; i++)
        /* a one-float broadcast slot (a block_reduce tail) starts at 0: gcc cannot see that thread 0's
         * phase writes it before the next phase reads it */
        str_printf(o, "        %s%s smem%d[%d]%s;\n", k->smem[i].b16 || k->has_cp_async ? "_Alignas(16) " : "",
                   k->smem[i].b16 ? "uint16_t" : "float", i, k->smem[i].size,
                   !k->smem[i].b16 && !k->has_cp_async && k->smem[i].size == 1 ? " = {0}" : "");
    for (int i = 0; !k->task && i < k->nregs; i++)
        str_printf(o, "        %s r%d[%d];\n", k->regs[i].b32 ? "uint32_t" : "float", i, k->block);
    if (k->has_shfl)
        str_printf(o, "        float lanebuf[%d]; /* shuffles: the values the lanes publish */\n", k->block);
    if (k->has_ldm)
        str_printf(o, "        int64_t laneaddr[%d]; /* ldmatrix: the row offsets the lanes give */\n", k->block);
    if (k->has_cp_async) {
        /* copies not yet waited for must not be seen: shared memory starts as NaN, not as zeros that could pass */
        str_printf(o, "        CpQueue cpq_ = {0}; /* cp.async: the block's pending copies */\n");
        for (int i = 0; i < k->nsmem; i++) str_printf(o, "        memset(smem%d, 0xff, sizeof smem%d);\n", i, i);
    }
    emit_kstmts(o, k, k->body, k->nbody, 2, kt);
    if (k->has_cp_async) str_printf(o, "        free(cpq_.q);\n");
    str_printf(o, "    }\n}\n");
}

const char *emit_cflags(Target t) {
    /* cpu: reductions vectorised (reassociated, a * b + c fused; NaN and infinities keep their meaning);
     * cuda-emu: the GPU schedule's arithmetic as written */
    return t == TARGET_CPU ? "-O3 -ffp-contract=fast -fno-math-errno -fassociative-math -fno-signed-zeros "
                             "-fno-trapping-math" : "";
}
