/* emit_cuda.c: kernel IR -> CUDA. Phases that end in a barrier are
 * followed by __syncthreads(); shuffles are __shfl_*_sync with the full
 * mask; registers are scalars; shared arrays are __shared__; vector loads
 * are uint4 loads; mma, ldmatrix and cp.async (commit_group, wait_group)
 * are inline PTX (emit.c). */
#include "emit_kernel.h"

void emit_kernel_cuda(Str *o, const KKernel *k, KernelText *kt) {
    str_printf(o, "\n/* %s: from %s, %s */\n", k->name, k->module, sched_names[k->sched]);
    str_printf(o, "__global__ void __launch_bounds__(%d", k->block);
    if (k->min_blocks) str_printf(o, ", %d", k->min_blocks);
    str_printf(o, ") %s(", k->name);
    emit_params(o, k, kt);
    str_printf(o, ") {\n    const int64_t tid = threadIdx.x, bid = blockIdx.x;\n    (void)n; (void)pos; (void)bid;\n");
    emit_pos_prologue(o, k, kt);
    for (int i = 0; i < k->nsmem; i++)
        /* 16-byte aligned: ldmatrix rows and cp.async destinations */
        str_printf(o, "    __shared__ %s%s smem%d[%d];\n", k->smem[i].b16 || k->has_cp_async ? "__align__(16) " : "",
                   k->smem[i].b16 ? "uint16_t" : "float", i, k->smem[i].size);
    for (int i = 0; i < k->nregs; i++) str_printf(o, "    %s r%d;\n", k->regs[i].b32 ? "uint32_t" : "float", i);
    emit_kstmts(o, k, k->body, k->nbody, 1, kt);
    str_printf(o, "}\n");
}
