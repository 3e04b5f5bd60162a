/* schedule.h: what every schedule (tile_ir.h) provides, the table that
 * ties each SchedKind to it, and the kernel-IR builders the schedules share
 * (compiler/schedules/build.c; the table: table.c). A new schedule is one file here and one
 * line in SCHEDULES. */
#ifndef LLMCC_SCHEDULE_H
#define LLMCC_SCHEDULE_H
#include "kernel_ir.h"
#include <string.h>

/* What choosing a schedule for one nest sees. */
typedef struct {
    Arena *A;
    const Knobs *kn;
    const TileProgram *tp;     /* max_batch, max_ctx */
    const LStmt *leaf;         /* the innermost parallel loop's single statement, or NULL */
    const NestBody *shape;     /* what the nest computes (only npar, par with an attention or top-k leaf) */
    Expr *total;               /* the parallel axes' product: output elements */
} ScheduleChoice;

/* What materialising a tile kernel into kernel IR carries along. */
typedef struct {
    Arena *A;
    int *nvars;                /* the program's variable counter (new_var) */
    const Knobs *kn;           /* the debug_* faults */
    int64_t max_batch, max_ctx;   /* bounds of n and pos (scratch sized for the longest row) */
} KernelBuilder;

/* A kernel body being built: a growable list of kernel statements. */
typedef struct { KStmt **s; int n, cap; } KList;

/* One schedule. choose: offered a nest (c->shape), appends the kernels it makes (k, fresh, and others) to
 * out and returns how many, or 0 when the nest is not its kind (NULL: made only by another schedule's
 * choose); print: its parameters and mapping, after the common "schedule NAME grid=G block=B [smem]";
 * verify: what is wrong with its parameters beyond its block rule (NULL: nothing); materialise: its kernel
 * IR into k (registers, shared arrays) and body. */
typedef struct {
    int (*choose)(const ScheduleChoice *c, TileKernel *k, TileKernel **out);
    void (*print)(Str *o, const TileKernel *k);
    const char *(*verify)(const TileKernel *k);
    void (*materialise)(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body);
    int block_rule;            /* what the block size must be: bits of BLOCK_POW2, BLOCK_WARPS */
} Schedule;
/* BLOCK_TASK: a CPU schedule (TARGET_CPU only, offered before the GPU's): a block of one, each block a
 * task that one CPU thread runs as plain C (registers are scalars, no barriers, no lanes). */
enum { BLOCK_POW2 = 1, BLOCK_WARPS = 2, BLOCK_TASK = 4 };
/* Kind, the prefix of its print and materialise functions (p_print ...), its choose and verify, its block
 * rule: in the order tile_schedule offers a nest, the first choose that takes it wins (block_reduce takes
 * any reduction, so it is last; gemm_tc makes the gemv it falls back to, the others their second pass;
 * cpu_rows takes every nest of stores and reductions, leaving the CPU target only top_k to the GPU's). */
#define SCHEDULES(X) \
    X(SCHED_CPU_ATTN, cpu_attn, cpu_attn_choose, NULL, BLOCK_TASK) \
    X(SCHED_CPU_GEMM, cpu_gemm, cpu_gemm_choose, cpu_gemm_verify, BLOCK_TASK) \
    X(SCHED_CPU_ROWS, cpu_rows, cpu_rows_choose, cpu_rows_verify, BLOCK_TASK) \
    X(SCHED_FLASH, flash, flash_choose, flash_verify, BLOCK_WARPS) \
    X(SCHED_FLASH_COMBINE, flash_combine, NULL, flash_combine_verify, BLOCK_POW2) \
    X(SCHED_TOPK, topk, topk_choose, topk_verify, BLOCK_POW2 | BLOCK_WARPS) \
    X(SCHED_TOPK_MERGE, topk, NULL, topk_verify, BLOCK_POW2 | BLOCK_WARPS) \
    X(SCHED_FLAT, flat, flat_choose, NULL, BLOCK_POW2) \
    X(SCHED_GEMM_TC, gemm_tc, gemm_tc_choose, gemm_tc_verify, BLOCK_POW2) \
    X(SCHED_GEMV, gemv, gemv_choose, gemv_verify, BLOCK_WARPS) \
    X(SCHED_SPLITK_SUM, splitk_sum, NULL, splitk_sum_verify, BLOCK_POW2) \
    X(SCHED_BLOCK_REDUCE, block_reduce, block_reduce_choose, block_reduce_verify, BLOCK_POW2 | BLOCK_WARPS)
#define X(kind, p, choose, verify, rule) \
    int p##_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out); \
    void p##_print(Str *o, const TileKernel *k); \
    const char *p##_verify(const TileKernel *k); \
    void p##_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body);
SCHEDULES(X)
#undef X
extern const Schedule schedules[SCHED_COUNT];
extern const SchedKind schedule_order[SCHED_COUNT];

/* ---- tile IR helpers ---- */
/* gemm_tc's form y[t, o] = sum_k X(t, k) * W[row(o), k] with W a weight of a 16-bit type and t the runtime
 * token axis (cpu: W also f32, t also of a constant extent): the operands into xop and wop[0..nacc), K into
 * *K; false where the nest has another form. */
bool gemm_form(const NestBody *b, bool cpu, int64_t *K, Expr **xop, Expr **wop);
/* a linear of block-type weights: every term X[.., k] * W[row, k] (cpu_rows.c; cpu_rows' qdot, gemv's bdot) */
bool qdot_form(const NestBody *b, Expr **xop, Expr **wop);
Expr *ceil_div(Arena *A, Expr *x, int64_t d);
int64_t min_i(int64_t a, int64_t b);
int64_t max_i(int64_t a, int64_t b);
/* Integer value of an extent for given n and pos (extents grow with both, so n = max_batch, pos = max_ctx
 * bound them). */
bool eval_i(const Expr *e, int64_t n, int64_t pos, int64_t *out);
TileKernel *new_tile_kernel(Arena *A, const LoopNest *nest);
/* A schedule's second pass: k's nest, parameters and run_if, as kind with this name, block and grid */
TileKernel *second_kernel(Arena *A, const TileKernel *k, SchedKind kind, const char *name, int block, Expr *grid);
/* g (out[0]) runs when n > min_n, and the kernels choose makes for the same nest when n <= min_n follow it in
 * out; returns how many in all (prefill schedules with their decode fallback) */
int with_fallback(const ScheduleChoice *c, TileKernel *g, int min_n,
                  int (*choose)(const ScheduleChoice *, TileKernel *, TileKernel **), TileKernel **out);
/* A workspace of rows x cols f32, named NEST.what */
Buffer *work_buffer(Arena *A, const char *kname, const char *what, int64_t rows, int64_t cols);
/* The smallest power-of-two block (32 .. 1024) of at least this many threads */
int pow2_block(int64_t threads);
void print_axes(Str *o, const Axis *ax, int n);

/* ---- kernel IR builders ---- */
TStmt *ts(Arena *A, TStmtKind k);
TStmt **tlist(Arena *A, int n);
TStmt *ts_let(Arena *A, Var *v, Expr *e);
TStmt *ts_assign(Arena *A, int r, Expr *e);
TStmt *ts_if(Arena *A, Expr *c, int cap);
TStmt *ts_for(Arena *A, Var *v, Expr *lo, Expr *hi, Expr *step, int cap);
TStmt *ts_sstore(Arena *A, int sm, Expr *idx, Expr *v);
TStmt *ts_store(Arena *A, Buffer *b, Expr **idx, Expr *v);
/* A store to a 2-d buffer (the workspaces) */
TStmt *ts_store2(Arena *A, Buffer *b, Expr *i0, Expr *i1, Expr *v);
void ts_add(TStmt *parent, TStmt *child);
/* smem sm[idx] = 0, then = v where cond holds: added to parent */
void sstore_where(Arena *A, TStmt *parent, int sm, Expr *idx, Expr *cond, Expr *v);
KStmt *phase(Arena *A, TStmt **body, int n, bool barrier);
/* cp_async_commit_group (KS_CP_COMMIT), or cp_async_wait_group n (KS_CP_WAIT) */
KStmt *cp_sync(Arena *A, KStmtKind kind, int n);
/* A phase of body[0..n) without the lets nothing in it reads (schedules whose phases share one set of
 * lets; unused ones would be C warnings). */
KStmt *phase_pruned(Arena *A, TStmt **b, int n, bool barrier);
void kl_add(Arena *A, KList *l, KStmt *s);
/* a phase of the n statements after n, added to l */
void kl_phase(Arena *A, KList *l, bool barrier, int n, ...);
/* ufor v = init; v < hi; v += step over the statements in body: added to l */
void kl_ufor(Arena *A, KList *l, Var *v, Expr *init, Expr *hi, Expr *step, const KList *body);
/* ulet NAME = e at the kernel's top level: the value as a uniform variable */
Expr *ulet(KernelBuilder *B, KList *body, const char *name, Expr *e);
KStmt *shfl(KernelBuilder *B, ShflKind kind, int dst, int src, int64_t arg);
/* lets that decompose a flat index g into the axes (row-major, last fastest); returns how many */
int decompose(Arena *A, TStmt **out, const Axis *ax, int n, Expr *g);
/* A reduction's update into loop: register acc = acc op the term; a fused side store's value is computed
 * once into register side, stored, and read by the term */
void reduce_update(Arena *A, const NestBody *b, TStmt *loop, int acc, int side);
/* the nest's stores (two for a halves pair) with the accumulators' values a0 and, for a pair, a1 */
int epi_stores(Arena *A, const NestBody *b, Expr *a0, Expr *a1, TStmt **out);
Expr *replace_expr(Arena *A, Expr *e, const Expr *what, Expr *with);
Expr *combine(Arena *A, RedOp r, Expr *a, Expr *b);
Expr *red_init(Arena *A, RedOp r);
Expr *reg(Arena *A, int r);
Expr *sload(Arena *A, int s, Expr *i);
Expr *tid(Arena *A);
Expr *bid(Arena *A);
Expr *lt(Arena *A, Expr *a, Expr *b);
Expr *eq(Arena *A, Expr *a, Expr *b);
Expr *emin(Arena *A, Expr *a, Expr *b);
Expr *imod(Arena *A, Expr *x, int64_t m);
Expr *idiv(Arena *A, Expr *x, int64_t d);
Expr *product(Arena *A, const Axis *ax, int n);
void declare_regs(KKernel *k, int n);   /* n f32 registers */
/* A thread per element: g = bid * block + tid; returns `if (g < total)` with room for cap statements, in a
 * phase added to body. */
TStmt *thread_element(KernelBuilder *B, int block, Expr *total, KList *body, Var **g, int cap);
/* thread_element over the parallel axes, the if holding their lets and room for extra statements */
TStmt *flat_element(KernelBuilder *B, const TileKernel *t, KList *body, Var **g, int extra);

/* A warp-shuffle tree per accumulator: for d = width/2 .. 1, partner[j] = acc[j] of the lane kind (down,
 * xor) names at d, then one phase acc[j] = acc[j] op partner[j]; down: lane 0 ends with the warp's value,
 * xor: every lane. */
void shfl_trees(KernelBuilder *B, KList *l, ShflKind kind, RedOp op, int width, int n, const int *acc,
                const int *partner);
/* shfl_trees down, accumulator j in register 2j, its partner 2j + 1 */
void warp_trees(KernelBuilder *B, KList *l, RedOp op, int width, int nacc);
/* Block argmax over (value, index) pairs (block_reduce's argmax, top_k): a pair wins with a larger value,
 * or an equal one and an index that is smaller (tie EX_MIN) or larger (EX_MAX). */
enum { ARGMAX_R_VAL, ARGMAX_R_PARTNER_VAL, ARGMAX_R_IDX, ARGMAX_R_PARTNER_IDX, ARGMAX_NREGS };
void argmax_step(KernelBuilder *B, KList *l, int64_t d, ExprKind tie);
/* Lane 0 of warp w puts registers regs[0..n) in smem0[w], smem0[nw + w], ..; after a barrier, lane i < nw
 * (lane: tid or tid % 32) takes warp i's values, the others init[0..n). */
void gather_warp_values(KernelBuilder *B, KList *l, int nw, Expr *lane, int n, const int *regs, Expr *const *init);
/* The warps' pairs gathered (the others -inf and init_idx), then a tree over nw lanes leaves the block's
 * pair in lane 0 of every warp. */
void argmax_across_warps(KernelBuilder *B, KList *l, int nw, Expr *lane, double init_idx, ExprKind tie);
#endif
