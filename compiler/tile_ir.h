/* tile_ir.h: tile IR, the mapping of a loop nest onto the GPU's hierarchy:
 * which loops become the grid, which the warps and lanes of a block, what
 * lives in shared memory. Schedules:
 *   flat          every output element is one thread (elementwise, index maps)
 *   block_reduce  one block per output element; threads stride over the
 *                 reduction, a warp-shuffle tree per warp, one value per warp
 *                 in shared memory, a final warp reduce
 *   gemv          reductions that read a weight (the linears): one warp per
 *                 output element (rows_per_block of them per block), lanes
 *                 stride over K with 128-bit vector loads, f32 accumulation,
 *                 a warp-shuffle tree; optionally split over K (split-K):
 *                 partials go to a workspace and
 *   splitk_sum    the second pass: a thread per output element sums the
 *                 split_k partials in order (deterministic) and applies the
 *                 epilogue
 *   gemm_tc       bf16- or f16-weight linears when n > gemm_min_n: a block per bm x bn
 *                 (tokens x outputs; 64 x 64) tile, warps of 32x32, K in steps of bk
 *                 staged to shared memory as bf16 (stages > 1: a pipeline,
 *                 W by cp.async, X by register prefetch), ldmatrix + mma.sync
 *                 m16n8k16 with f32 accumulation; the launch plan runs it or
 *                 the gemv by n at run time. A pair nest (two accumulators):
 *                 the gemv's lanes sum both terms (the activation loaded once),
 *                 gemm_tc's W tile holds 16 rows of one weight then 16 of the
 *                 other, so a warp's n-tiles 0,1 and 2,3 are the same outputs
 *   flash_attn    an attention fused by loop_flash: a block per (tokens, kv
 *                 head, key slice), a warp per (token, head) row of the group
 *                 (the group's heads share the staged K/V tiles: no copies for
 *                 GQA); per tile of 32 keys a lane scores one key, a shuffle
 *                 tree gives the row max, the online softmax rescales the
 *                 running sum and the lanes' P.V accumulators (lane d, d+32..);
 *                 split over the keys (flash decoding) for short calls, then
 *   flash_combine a thread per output element merges the slices' (o, max, sum)
 *   top_k         a block per (row, chunk of the row): each thread keeps the
 *                 best element of its strided part that is below the last one
 *                 it gave; k rounds of a block argmax (warp shuffles, one
 *                 (value, index) per warp in shared memory) each emit the
 *                 block's next element, the winning thread rescans its part.
 *                 With several chunks each writes its k to a workspace and
 *   top_k_merge   a block per row: thread c holds chunk c's sorted list and
 *                 offers its head; k rounds of the same block argmax
 * Parameters are chosen from the shapes; --knob NAME=VALUE pins them
 * (fuse=0 turns off loop IR fusion, which runs before scheduling). */
#ifndef LLMCC_TILE_IR_H
#define LLMCC_TILE_IR_H
#include "loop_ir.h"

#define SCHED_KINDS(X) X(SCHED_FLAT, "flat") X(SCHED_BLOCK_REDUCE, "block_reduce") X(SCHED_GEMV, "gemv") \
    X(SCHED_SPLITK_SUM, "splitk_sum") X(SCHED_GEMM_TC, "gemm_tc") X(SCHED_FLASH, "flash_attn") X(SCHED_FLASH_COMBINE, "flash_combine") \
    X(SCHED_TOPK, "top_k") X(SCHED_TOPK_MERGE, "top_k_merge")
typedef enum {
#define X(e, s) e,
    SCHED_KINDS(X)
#undef X
    SCHED_COUNT
} SchedKind;
extern const char *const sched_names[];

/* Knobs: name, field, default, min, max, must be a power of two. 0 means
 * "chosen from the shapes" where the range allows it. debug_shfl_offset is
 * a deliberate fault (added to every shuffle delta) so tests can show that
 * a wrong lane is caught; debug_cp_async=1 makes gemm_tc wait for one
 * cp.async group fewer than it reads; debug_pair_swap=1 stages a gemm_tc
 * pair's two weights in each other's rows of the W tile; debug_topk_order=1
 * breaks top_k's ties towards the larger index. */
#define KNOBS(X) \
    X("flat_block", flat_block, 256, 32, 1024, true) \
    X("reduce_block_max", reduce_block_max, 256, 32, 1024, true) \
    X("gemv_rows_per_block", gemv_rows_per_block, 0, 0, 32, false) \
    X("gemv_split_k", gemv_split_k, 0, 0, 64, false) \
    X("gemv_vec", gemv_vec, 0, 0, 8, true) \
    X("gemv_target_blocks", gemv_target_blocks, 264, 1, 1 << 20, false) \
    X("gemv_unroll", gemv_unroll, 0, 0, 8, false) \
    X("debug_shfl_offset", debug_shfl_offset, 0, 0, 31, false) \
    X("gemm_tc", gemm_tc, 1, 0, 1, false) \
    X("gemm_min_n", gemm_min_n, 16, 0, 1 << 20, false) \
    X("debug_mma_layout", debug_mma_layout, 0, 0, 1, false) \
    X("gemm_stages", gemm_stages, 0, 0, 3, false) \
    X("gemm_bk", gemm_bk, 0, 0, 64, true) \
    X("gemm_bm", gemm_bm, 0, 0, 128, true) \
    X("gemm_bn", gemm_bn, 0, 0, 128, true) \
    X("debug_cp_async", debug_cp_async, 0, 0, 1, false) \
    X("fuse", fuse, 1, 0, 1, false) \
    X("flash", flash, 1, 0, 1, false) \
    X("flash_split", flash_split, 0, 0, 1024, false) \
    X("flash_tokens", flash_tokens, 0, 0, 32, false) \
    X("flash_min_n", flash_min_n, 16, 0, 1 << 20, false) \
    X("debug_flash_mask", debug_flash_mask, 0, 0, 1, false) \
    X("debug_pair_swap", debug_pair_swap, 0, 0, 1, false) \
    X("topk_chunks", topk_chunks, 0, 0, 256, false) \
    X("debug_topk_order", debug_topk_order, 0, 0, 1, false)
typedef struct {
#define X(s, f, d, lo, hi, p2) int f;
    KNOBS(X)
#undef X
} Knobs;
void knobs_default(Knobs *k);
/* Parses NAME=VALUE; dies with a user error naming the knob. */
void knobs_set(Knobs *k, const char *assign);
void knobs_print(Str *o, const Knobs *k);

typedef struct {
    const LoopNest *nest;
    SchedKind kind;
    const char *name;          /* kernel base name: the nest's, with _splitk for the second pass */
    int block;
    Expr *grid;                /* blocks, from n and pos */
    int npar; Axis par[MAX_AXES];
    int nred; Axis red[2];
    RedOp redop;
    Expr *acc_value;           /* the reduced term */
    Expr *store_value;         /* may read acc */
    Buffer *out; Expr **idx;
    /* a pair nest (loop_fuse_epilogues; gemv and gemm_tc only): a second accumulator summing acc_value1
     * over the same K, and with nstore 2 a second store; both store values may read acc and acc1 */
    int nacc, nstore;
    Expr *acc_value1, *store_value1;
    Buffer *out1; Expr **idx1;
    Buffer *side; Expr **side_idx; Expr *side_value;   /* block_reduce: a fused producer stored from the loop (loop_fuse) */
    Axis tail; Buffer *tail_out; Expr **tail_idx; Expr *tail_value;   /* block_reduce: a fused row op over tail after the store (loop_fuse) */
    int smem_floats;
    /* gemv */
    int rows;                  /* warps (output elements) per block */
    int split_k;               /* K slices; > 1: partials go to work, a splitk_sum kernel follows */
    int64_t k_chunk;           /* K elements per slice (a multiple of vec) */
    int vec;                   /* elements per lane per vector load; 1: scalar loads */
    int unroll;                /* rounds of a lane's loads issued before their sums (gemv) */
    Buffer *work;              /* gemv with split_k > 1, splitk_sum: [outputs, split_k] f32 partials */
    int run_if, min_n;         /* 0: always; 1: when n > min_n (gemm_tc); 2: when n <= min_n (its gemv) */
    /* gemm_tc: y[t, o] = sum_k xop(t, k) * wop(o, k); xop is staged as bf16 */
    int bm, bn, bk;            /* block tile: tokens, outputs, K step */
    int stages;                /* shared-memory buffers per operand: 1 stage then compute; > 1 a pipeline */
    bool w_cp_async;           /* stages > 1: W tiles by cp.async (K % 8 == 0), else by register prefetch like X */
    bool x_vec;                /* stages > 1: X prefetched by 4-wide vector loads (a plain row load, K % 4 == 0) */
    Expr *xop, *wop;
    Expr *wop1;                /* a pair's slot-1 weight operand: the block's W tile interleaves the two in groups of 16 rows */
    /* flash_attn / flash_combine (split_k: key slices, work: their partials [rows*heads*split, hv + 2]) */
    const AttnDesc *attn;
    int tq;                    /* tokens per block; warps = tq * group */
    Expr *nsplit;              /* key slices at run time: min(split_k, one per 32 keys), so none is empty but the last's end */
    /* top_k / top_k_merge: split_k chunks of k_chunk elements per row (work: [rows * chunks, 2 * topk_max],
     * each chunk's values then indices, when split_k > 1) */
    const TOp *topk;
} TileKernel;

typedef struct {
    const LProgram *lp;
    Knobs knobs;
    TileKernel **k; int n;     /* in launch order (a split-K nest gives two) */
} TileProgram;

/* Whether flash_attn has a schedule for this attention (warps, registers,
 * shared memory); loop_flash fuses only those. */
bool flash_fits(const AttnDesc *d);
/* Shared floats of a flash_attn block of w warps: Q rows, K and V tiles, P */
int64_t flash_smem_floats(const AttnDesc *d, int w);
void tile_schedule(Arena *A, const LProgram *lp, const Knobs *kn, TileProgram *tp);
void tile_print(Str *o, const TileProgram *tp);
const char *tile_verify(Arena *A, const TileProgram *tp);
#endif
