/* loop_ir.h: loop IR, one loop nest per kernel: parallel loops over the
 * output, an accumulator with its reduction loops, and stores. Fusion
 * (the compiler-core issue) rewrites nests at this level; the spine lowers
 * each tensor op to its own nest. */
#ifndef LLMCC_LOOP_IR_H
#define LLMCC_LOOP_IR_H
#include "tensor_ir.h"

#define LSTMT_KINDS(X) X(LS_FOR, "for") X(LS_ACC_INIT, "acc_init") X(LS_ACC, "acc_update") X(LS_STORE, "store")
typedef enum {
#define X(e, s) e,
    LSTMT_KINDS(X)
#undef X
    LS_COUNT
} LStmtKind;
typedef enum { LOOP_PARALLEL, LOOP_REDUCE } LoopKind;

typedef struct LStmt {
    LStmtKind k;
    /* LS_FOR */
    Var *v; Expr *extent; LoopKind lk;
    struct LStmt **body; int nbody;
    /* LS_ACC_INIT / LS_ACC */
    RedOp red;
    /* LS_ACC value, LS_STORE value (may read acc) */
    Expr *value;
    Buffer *buf; Expr **idx;   /* LS_STORE */
} LStmt;

typedef struct {
    const char *module, *kname;
    TOpKind origin;
    LStmt *root;
} LoopNest;

typedef struct {
    const TProgram *tp;
    LoopNest **nests; int n;
} LProgram;

void loop_lower(Arena *A, const TProgram *tp, LProgram *lp);
void loop_print(Str *o, const LProgram *lp);
const char *loop_verify(Arena *A, const LProgram *lp);
#endif
