/* emit_kernel.h: printing one kernel of kernel IR as source (emit_kernel.c: the text both dialects share;
 * emit_c.c: C for the CPU, phases as loops over a block's threads and blocks under OpenMP; emit_cuda.c: CUDA).
 * The host plan (emit.h) calls these; they know nothing of it. */
#ifndef LLMCC_EMIT_KERNEL_H
#define LLMCC_EMIT_KERNEL_H
#include "kernel_ir.h"

/* How a kernel is printed: the target's dialect, and where the position comes from. */
typedef struct {
    Target target;
    /* a GPU model's kernels (emit_program): where a kernel reads pos and its argument is -1 (the decode step's
     * CUDA Graph), the position from device memory (decode_pos) */
    bool decode_pos;
} KernelText;

/* the dialects: k as a C function (cpu, cuda-emu) or a __global__ function (cuda) */
void emit_kernel_c(Str *o, const KKernel *k, KernelText *kt);
void emit_kernel_cuda(Str *o, const KKernel *k, KernelText *kt);
/* What a C compiler needs beyond -std=c11 -O2 -fopenmp for target t's kernels (model.c, a harness) */
const char *emit_cflags(Target t);

/* what they share */
void emit_expr(Str *o, const KKernel *k, const Expr *e, KernelText *kt);
/* Phases and uniform loops. A phase is a loop over the block's threads in C
 * and a block followed by __syncthreads() in CUDA (when the kernel shares memory). */
void emit_kstmts(Str *o, const KKernel *k, KStmt **b, int n, int depth, KernelText *kt);
/* One parameter a line, named after the first instance's buffer, with its dtype and shape */
void emit_params(Str *o, const KKernel *k, KernelText *kt);
/* k's name as its function's (with _tokens for a _tokens variant, plan.h) */
void emit_kernel_name(Str *o, const KKernel *k);
/* a kernel's first statement: where kt->decode_pos and k reads pos, pos from decode_pos when it is -1 */
void emit_pos_prologue(Str *o, const KKernel *k, const KernelText *kt);
const char *ctype_of(DType d);

/* names and text, shared with the plan and the host code */
/* a name as a C identifier (upper case for macros), suffixed where it could meet a kernel's own names */
void emit_ident_str(Str *o, const char *s, bool upper);
/* a buffer's name as a C identifier: its layer prefix dropped, a KV cache as k_cache / v_cache */
void emit_ident(Str *o, const Buffer *b, bool upper);
/* a C float literal that reads back as the same f32 */
void emit_float_lit(Str *o, double v);
/* d levels of four spaces */
void emit_indent(Str *o, int d);
#endif
