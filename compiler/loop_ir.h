/* loop_ir.h: loop IR, one loop nest per kernel: parallel loops over the
 * output, an accumulator with its reduction loops, and stores. Each tensor
 * op is lifted to its own nest; three passes then merge nests where a
 * structural guard shows that nothing is recomputed (each rewrite's guard is
 * at its try_* in loop_ir.c; docs/pipeline.md, "Fusion", has the examples
 * from a decoder layer):
 *   loop_flash           an attention's five nests -> one online softmax over the keys
 *   loop_fuse            inline, side store, tail, retarget
 *   loop_fuse_epilogues  elementwise consumers of linears into the linears' stores: epilogue, pair, halves
 * and each plans the activation arena again over the nests that remain.
 * A top_k is one statement inside its parallel loops (no fusion takes it). */
#ifndef LLMCC_LOOP_IR_H
#define LLMCC_LOOP_IR_H
#include "tensor_ir.h"

typedef enum { LS_FOR, LS_ACC_INIT, LS_ACC, LS_STORE, LS_ATTN, LS_TOPK, LS_COUNT } LStmtKind;
typedef enum { LOOP_PARALLEL, LOOP_REDUCE } LoopKind;

/* A reduction loop's body is its acc_update, optionally preceded by one
 * side store of a value the update also reads (fusion). */
typedef struct LStmt {
    LStmtKind k;
    /* LS_FOR */
    Var *v; Expr *extent; LoopKind lk;
    struct LStmt **body; int nbody;
    /* LS_ACC_INIT / LS_ACC */
    RedOp red;
    int slot;                  /* which accumulator (EX_ACC's i): a pair nest has two, 0 and 1 */
    /* LS_ACC value, LS_STORE value (may read acc) */
    Expr *value;
    Buffer *buf; Expr **idx;   /* LS_STORE */
    const AttnDesc *attn;      /* LS_ATTN: the row (t, h) of an attention, inside the loops over t and h */
    const TOp *topk;           /* LS_TOPK: the row's top_k (the op's fields), inside the loops over its axes */
} LStmt;

typedef struct {
    const char *module, *kname;
    int layer;                 /* the module's decoder layer (-1: none) */
    TOpKind origin;
    const TOp *op;             /* the tensor op it was lifted from */
    LStmt *root;
} LoopNest;

typedef struct {
    TProgram *tp;              /* loop_fuse re-plans its activation offsets */
    int64_t max_batch, max_ctx;   /* bounds of n and pos, for the schedules' extents */
    bool sampler;              /* a model's program: its top-k is the sampler's */
    LoopNest **nests; int n;
    int n_inlined, n_side_stores, n_tails, n_retargeted, n_flash;   /* what loop_fuse and loop_flash did */
    int n_epilogues, n_pairs, n_halves;                              /* loop_fuse_epilogues */
} LProgram;

void loop_lower(Arena *A, TProgram *tp, LProgram *lp);
/* The fusions above where their guards allow (enable false: none), then
 * the memory plan over the remaining nests. */
void loop_fuse(Arena *A, LProgram *lp, bool enable);
/* Epilogues, pairs and halves (above) where their guards allow, then the
 * memory plan again. A pair nest's leaf is acc_init x2, the reduction loop
 * (acc_update slot 0, slot 1), one or two stores. */
void loop_fuse_epilogues(Arena *A, LProgram *lp, bool enable);
/* The online-softmax rewrite where fits(attn) (the tile level has a
 * schedule for it) and nothing else reads the scores, max and sum. */
void loop_flash(Arena *A, LProgram *lp, bool enable, bool (*fits)(const AttnDesc *));
void loop_print(Str *o, const LProgram *lp);
const char *loop_verify(Arena *A, const LProgram *lp);
#endif
