/* emit.h: kernel IR -> source. One translation unit per model: a prelude,
 * the distinct kernels (each printed by emit_kernel.h's dialects), and the
 * host side (model_info, model_init, model_forward: the launch plan) that
 * runtime/model_api.h declares (emit.c). */
#ifndef LLMCC_EMIT_H
#define LLMCC_EMIT_H
#include "emit_kernel.h"
#include "plan.h"
#include "model_api.h"

/* What the host code says beyond the kernels, filled once by the caller: info is model_info as emitted
 * (the executable's name, the config's sizes and sampling defaults, max_ctx, max_batch) less what the
 * program gives (target, n_tensors, tensor_names, max_top_k); n_layers also sizes the KV caches. */
typedef struct {
    Target target;
    const char *source;        /* the checkpoint's folder, for the header comment */
    ModelInfo info;
} EmitOptions;

void emit_program(Str *o, const KProgram *kp, const Plan *plan, const EmitOptions *eo);
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
#endif
