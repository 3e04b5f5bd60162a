/* emit.h: kernel IR -> source. One translation unit per model: a prelude,
 * the distinct kernels, and the host side (model_info, model_init,
 * model_forward: the launch plan) that runtime/model_api.h declares.
 * emit_c.c prints kernels for the CPU (phases as loops over a block's
 * threads, blocks under OpenMP), emit_cuda.c for CUDA; this file holds what
 * both share: expressions, the prelude and the host plan. */
#ifndef LLMCC_EMIT_H
#define LLMCC_EMIT_H
#include "kernel_ir.h"
#include "model_api.h"

/* What the host code says beyond the kernels, filled once by the caller: info is model_info as emitted
 * (the executable's name, the config's sizes and sampling defaults, max_ctx, max_batch) less what the
 * program gives (target, n_tensors, tensor_names, max_top_k); n_layers also sizes the KV caches. */
typedef struct {
    Target target;
    const char *source;        /* the checkpoint's folder, for the header comment */
    ModelInfo info;
} EmitOptions;

void emit_program(Str *o, const KProgram *kp, const EmitOptions *eo);
/* The pieces emit_program is made of, for harnesses that drive kernels on
 * their own (tests/c/op_harness.c): the includes (api_header: a header to
 * include before runtime/kernels.h, or NULL; either needs -I to llmcc's
 * folder or a project's), the distinct kernels, a grid expression as host
 * code (n and pos in scope). */
void emit_prelude(Str *o, const KProgram *kp, Target t, const char *api_header);
void emit_kernels(Str *o, const KProgram *kp, Target t);
void emit_host_expr(Str *o, const Expr *e);
/* "if (n > T) " / "if (n <= T) " before a launch the plan runs for some n only (gemm_tc or its gemv) */
void emit_launch_guard(Str *o, const KLaunch *l);
/* A launch at indent d up to its arguments: the guard, a brace and comment naming mod, the grid, "call(n, pos";
 * team: the call in an OpenMP team of its own (a cpu kernel shares its blocks among the calling team) */
void emit_launch_open(Str *o, const KLaunch *l, const char *mod, bool cuda, bool team, int d);

/* shared by emit_c.c / emit_cuda.c */
void emit_expr(Str *o, const KKernel *k, const Expr *e, Target t);
/* Phases and uniform loops. A phase is a loop over the block's threads in C
 * and a block followed by __syncthreads() in CUDA (when the kernel shares memory). */
void emit_kstmts(Str *o, const KKernel *k, KStmt **b, int n, int depth, Target t);
void emit_params(Str *o, const KKernel *k, Target t);
void emit_kernel_c(Str *o, const KKernel *k, Target t);
/* k's name as its function's (a token-positions variant's, emit.c, with _tokens) */
void emit_kernel_name(Str *o, const KKernel *k);
void emit_kernel_cuda(Str *o, const KKernel *k);
/* a kernel's first statement in a GPU-target model (emit_program): where it reads pos and its argument is -1 (the
 * decode step's CUDA Graph), the position from device memory (decode_pos) */
void emit_pos_prologue(Str *o, const KKernel *k);
const char *ctype_of(DType d);
/* What a C compiler needs beyond -std=c11 -O2 -fopenmp for target t's kernels (model.c, a harness) */
const char *emit_cflags(Target t);
#endif
