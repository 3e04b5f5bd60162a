/* tile_ir.h: tile IR, the mapping of a loop nest onto the GPU's hierarchy:
 * which loops become the grid, which the threads of a block, what lives in
 * shared memory. The spine has two schedules:
 *   flat          every output element is one thread (elementwise, index maps)
 *   block_reduce  one block per output element; threads stride over the
 *                 reduction, then a shared-memory tree combines them
 * Parameters are chosen from the shapes; --knob NAME=VALUE pins them. */
#ifndef LLMCC_TILE_IR_H
#define LLMCC_TILE_IR_H
#include "loop_ir.h"

#define SCHED_KINDS(X) X(SCHED_FLAT, "flat") X(SCHED_BLOCK_REDUCE, "block_reduce")
typedef enum {
#define X(e, s) e,
    SCHED_KINDS(X)
#undef X
    SCHED_COUNT
} SchedKind;
extern const char *const sched_names[];

typedef struct {
    int flat_block;            /* threads per block of flat kernels */
    int reduce_block_max;      /* most threads per block of block_reduce kernels */
} Knobs;
void knobs_default(Knobs *k);
/* Parses NAME=VALUE; dies with a user error naming the knob. */
void knobs_set(Knobs *k, const char *assign);

typedef struct {
    const LoopNest *nest;
    SchedKind kind;
    int block;
    Expr *grid;                /* blocks, from n and pos */
    int npar; Axis par[MAX_AXES];
    int nred; Axis red[2];
    RedOp redop;
    Expr *acc_value;           /* block_reduce: the reduced term */
    Expr *store_value;         /* may read acc */
    Buffer *out; Expr **idx;
    int smem_floats;
} TileKernel;

typedef struct {
    const LProgram *lp;
    Knobs knobs;
    TileKernel **k; int n;
} TileProgram;

void tile_schedule(Arena *A, const LProgram *lp, const Knobs *kn, TileProgram *tp);
void tile_print(Str *o, const TileProgram *tp);
const char *tile_verify(Arena *A, const TileProgram *tp);
#endif
