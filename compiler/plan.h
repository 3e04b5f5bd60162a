/* plan.h: the plan stage, after cleanup: what a model's host code runs, decided once, printed (--ir plan,
 * --print-after plan) and verified, so that emit.c prints it without deciding anything (plan.c):
 *  - the names the host code gives buffers: activations' ACT macros, weights' fields, constants' arrays;
 *  - for each forward path (model_forward, model_forward_batch, the GPU's decode step) its steps in order: the
 *    launch, its decoder layer, its guard as the path runs it, how a batch runs it, whether the CPU's team
 *    waits before it (a barrier);
 *  - the runs of decoder layers a path prints as one loop over l, and which layers' steps differ in it;
 *  - the kernels' _tokens variants (model_forward_batch's tokens in one call, each at its own position), made
 *    as kernel IR from the kernels they vary. */
#ifndef LLMCC_PLAN_H
#define LLMCC_PLAN_H
#include "kernel_ir.h"

#define FWD_PATHS(X) X(PATH_FORWARD, "model_forward") X(PATH_BATCH, "model_forward_batch") \
    X(PATH_DECODE_STEP, "decode_step")
typedef enum { FWD_PATHS(X_ENUM) PATH_COUNT } FwdPath;
extern const char *const fwd_path_names[];

/* How model_forward_batch runs a launch: once for all the tokens (rows independent of pos and of the caches),
 * once through its kernel's _tokens variant, or in a loop over the tokens (attention; where no variant exists) */
#define BATCH_WAYS(X) X(BATCH_ONCE, "once") X(BATCH_TOKENS, "tokens") X(BATCH_PER_TOKEN, "per_token")
typedef enum { BATCH_WAYS(X_ENUM) BATCH_WAY_COUNT } BatchWay;
extern const char *const batch_way_names[];

/* What the host code calls the buffers, by buffer id: an activation its ACT macro (act; act_slot: one per name,
 * a name per arena offset; a loop's steps merge the names of the buffers they pass in the same place), a weight
 * its field (field; layer: its LayerWeights layer, -1 for a field of struct Model; lfield_of: the LayerWeights
 * field's index), a constant its array (cidx). */
typedef struct {
    int nid;                   /* buffer ids are below */
    const char **act, **field;
    const char **act_first, **act_also;   /* by slot: the name it was given; the names merged into it (or NULL) */
    int *act_slot, *cidx, *layer, *lfield_of;
    const Buffer **cfirst;     /* by array: its first buffer */
    int nact, nconst, nlayers;
    const Buffer **lfield; int nlfield;   /* LayerWeights: the first buffer of each field */
} PlanNames;

typedef struct {
    const KLaunch *l;
    const KKernel *k;          /* the kernel it calls: l->k, or its _tokens variant (way BATCH_TOKENS) */
    int run_if;                /* the guard as the path runs it (model_forward_batch drops a batched launch's) */
    BatchWay way;              /* model_forward_batch's; model_forward's BATCH_TOKENS where the batch's is, else
                                * BATCH_ONCE */
    bool barrier;              /* the CPU's team waits before it */
} PlanStep;

/* Steps first .. first + per_layer * nlayers - 1 of a path: layers layer0 .. layer0 + nlayers - 1 with per_layer
 * steps each (layer0 -1: the model's own steps, one "layer"). Layers loop_lo .. loop_hi - 1 of the run are one
 * loop over l (loop_lo == loop_hi: none), the others printed alone. In the loop, step p is like[g * per_layer + p]
 * (a layer of the loop, relative to loop_lo) in layer loop_lo + g: equal steps have the same like, and
 * common[p] is the like most layers share. */
typedef struct {
    int first, per_layer, nlayers, layer0, loop_lo, loop_hi;
    int *like, *common;
} PlanRun;

typedef struct {
    PlanStep *steps; int n;
    PlanRun *runs; int nruns;
    bool ok;                   /* model_forward_batch: every launch can run so (else the build returns -1) */
} PlanPath;

typedef struct {
    Target target;
    bool team;                 /* cpu: one OpenMP team runs the plan (barriers between steps) */
    bool graph;                /* GPU targets: the decode step is a CUDA Graph (PATH_DECODE_STEP) */
    PlanNames names;
    PlanPath path[PATH_COUNT];
    const KKernel **tokens;    /* by kernel index: its _tokens variant, or NULL */
    const KKernel **called_tokens; int ncalled_tokens;   /* the variants a path calls */
    bool *replaced;            /* by kernel index: every step calls its _tokens variant (the kernel is not emitted) */
} Plan;

/* knobs: debug_plan_barrier's fault (tile_ir.h) */
void plan_build(Arena *A, const KProgram *kp, Target t, const Knobs *knobs, Plan *p);
void plan_print(Str *o, const Plan *p);
const char *plan_verify(Arena *A, const Plan *p);
/* The launch's module name after its decoder layer's prefix ("self_attn.q_proj"), or the whole name. */
const char *plan_module_in_layer(const KLaunch *l);
/* Whether a launch runs in a call of one token (not an alternative for more tokens): the decode step's. */
bool plan_runs_at_one_token(const KLaunch *l);
#endif
