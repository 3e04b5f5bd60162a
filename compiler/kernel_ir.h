/* kernel_ir.h: kernel IR, the hardware's primitives in a form both emitters
 * print directly (see DESIGN-NOTES section 1):
 *   kernel := params, grid, block, shared arrays, registers, body
 *   body   := phase { per-thread code }   -- a barrier follows every phase
 *           | ufor v = init; cond; v = update { body }   -- uniform bounds
 * Per-thread code: let (thread-local index), assign (register), store,
 * shared store, if, for (thread-local loop). Barriers sit only between
 * phases, so they are always in block-uniform control flow: the C backend
 * runs each phase as a loop over the block's threads, CUDA puts
 * __syncthreads() between them. Identical kernels (all layers' q_proj, ...)
 * are compiled once: launches name the kernel and bind its buffers. */
#ifndef LLMCC_KERNEL_IR_H
#define LLMCC_KERNEL_IR_H
#include "tile_ir.h"

#define TSTMT_KINDS(X) X(TS_LET, "let") X(TS_ASSIGN, "assign") X(TS_STORE, "store") X(TS_SSTORE, "sstore") \
    X(TS_IF, "if") X(TS_FOR, "for")
typedef enum {
#define X(e, s) e,
    TSTMT_KINDS(X)
#undef X
    TS_COUNT
} TStmtKind;

typedef struct TStmt {
    TStmtKind k;
    Var *v;                    /* let, for */
    int reg, smem;             /* assign: register; sstore: shared array */
    Expr *e;                   /* let/assign/store/sstore value; if condition; for upper bound */
    Expr *lo, *step;           /* for */
    Expr *sidx;                /* sstore index */
    Buffer *buf; Expr **idx;   /* store */
    struct TStmt **body; int nbody;
} TStmt;

#define KSTMT_KINDS(X) X(KS_PHASE, "phase") X(KS_UFOR, "ufor")
typedef enum {
#define X(e, s) e,
    KSTMT_KINDS(X)
#undef X
    KS_COUNT
} KStmtKind;

typedef struct KStmt {
    KStmtKind k;
    TStmt **body; int nbody;   /* phase */
    Var *v; Expr *init, *cond, *update;   /* ufor */
    struct KStmt **kbody; int nk;
} KStmt;

typedef struct { int size; } SmemDecl;
typedef struct { EType t; } RegDecl;

#define MAX_PARAMS 16
typedef struct KKernel {
    const char *name;          /* k_<kname>, suffixed when kernels of one name differ */
    const char *base;          /* k_<kname> before any suffix: kernels are only merged within a name */
    const char *module;        /* first graph op it came from */
    SchedKind sched;
    int block;
    Expr *grid;
    int nparams; Buffer *params[MAX_PARAMS];   /* the first instance's buffers */
    bool param_written[MAX_PARAMS];
    int nsmem; SmemDecl smem[4];
    int nregs; RegDecl regs[8];
    KStmt **body; int nbody;
    int uses;                  /* launches */
} KKernel;

typedef struct {
    KKernel *k;
    const char *module;
    Buffer *args[MAX_PARAMS];
    Expr *grid;
} KLaunch;

typedef struct {
    const TProgram *tp;
    KKernel **kernels; int nk;   /* distinct kernels */
    KLaunch *launches; int nl;   /* in execution order */
} KProgram;

void kernel_lower(Arena *A, const TileProgram *tp, KProgram *kp);
void kernel_print(Str *o, const KProgram *kp);
void kernel_print_one(Str *o, const KKernel *k, bool header);
const char *kernel_verify(Arena *A, const KProgram *kp);
/* Index of b among k's params for this launch's binding, -1 if none. */
int kernel_param_index(const KKernel *k, const Buffer *b);
#endif
