/* tile_ir.h: tile IR, the mapping of a loop nest onto the GPU's hierarchy:
 * which loops become the grid, which the warps and lanes of a block, what
 * lives in shared memory. One schedule per kind (SCHED_KINDS), each family
 * in its own file under compiler/schedules/ (schedule.h). Parameters are
 * chosen from the shapes; --knob NAME=VALUE pins them (fuse=0 turns off
 * loop IR fusion, which runs before scheduling). */
#ifndef LLMCC_TILE_IR_H
#define LLMCC_TILE_IR_H
#include "loop_ir.h"


/* What the code is for: the CPU's own schedules (cpu_* below; C + OpenMP), the GPU's schedules run exactly
 * on the CPU (the C backend's emulation of blocks, threads, shuffles and mma: the tool that tests them
 * without a GPU), or NVIDIA GPUs (CUDA). */
#define TARGETS(X) X(TARGET_CPU, "cpu") X(TARGET_CUDA_EMU, "cuda-emu") X(TARGET_CUDA, "cuda")
typedef enum { TARGETS(X_ENUM) TARGET_COUNT } Target;
extern const char *const target_names[];

#define SCHED_KINDS(X) X(SCHED_FLAT, "flat") X(SCHED_BLOCK_REDUCE, "block_reduce") X(SCHED_GEMV, "gemv") \
    X(SCHED_SPLITK_SUM, "splitk_sum") X(SCHED_GEMM_TC, "gemm_tc") X(SCHED_FLASH, "flash_attn") \
    X(SCHED_FLASH_COMBINE, "flash_combine") X(SCHED_TOPK, "top_k") X(SCHED_TOPK_MERGE, "top_k_merge") \
    X(SCHED_CPU_ROWS, "cpu_rows") X(SCHED_CPU_GEMM, "cpu_gemm") X(SCHED_CPU_ATTN, "cpu_attn")
typedef enum { SCHED_KINDS(X_ENUM) SCHED_COUNT } SchedKind;
extern const char *const sched_names[];

/* Knobs: name, field, default, min, max, must be a power of two. 0 means
 * "chosen from the shapes" where the range allows it. debug_shfl_offset is
 * a deliberate fault (added to every shuffle delta) so tests can show that
 * a wrong lane is caught; debug_cp_async=1 makes gemm_tc wait for one
 * cp.async group fewer than it reads (flash_attn: its K/V tile's copies
 * still pending when the tile is read); debug_pair_swap=1 stages a gemm_tc
 * pair's two weights in each other's rows of the W tile; debug_topk_order=1
 * breaks top_k's ties towards the larger index. The cpu_* knobs: rows of a
 * linear that one CPU task computes together (cpu_group; 0: chosen), tasks
 * a kernel is split into at n = 1 (cpu_tasks), the packed GEMM for calls of
 * more than cpu_gemm_min_n tokens (cpu_gemm), bf16 dot products for its bf16
 * weights, the activations rounded to bf16 (cpu_gemm_bf16). debug_qdot_row=1
 * makes cpu_rows' block-type dot products read the weight row after the
 * right one (the last row's reads the first); debug_bdot_row=1 does the same to the gemv
 * schedule's block dot products (bdot); gemv_bdot_groups=0 keeps bdot to a block a round (narrow loads) where
 * groups of blocks with 16- or 8-byte loads would fit (and the K-quants to element loads); debug_pack_row=1 makes
 * cpu_gemm's runtime weight pack start a row late (a panel's rows shifted by one, its last zero); debug_kv_round=1
 * makes the stores into a bf16 KV cache truncate instead of rounding to nearest even. cpu_qdot_q8=1
 * rounds their activations to 8 bits per block of 32 for integer products (runtime/cpu_quant_q8.h; 0: f32
 * activations, runtime/cpu_quant.h). cpu_rows_bf16=1 makes cpu_rows' linears of bf16 weights bf16 dot products
 * (runtime/cpu_dot16.h, the activations rounded to bf16; 0: f32 multiply-adds on the widened weights), and bf16
 * linears run them in calls of up to cpu_dot16_max_n tokens (the GEMM above that). cpu_prefetch: how many bytes
 * of the weights ahead of their loads those decode dot products (qdot, dot16) prefetch (0: none; a multiple of
 * 64, the cache line). debug_plan_barrier=1 makes the plan stage leave out model_forward's barriers (its
 * verifier then finds the steps that conflict). */
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
    X("debug_topk_order", debug_topk_order, 0, 0, 1, false) \
    X("cpu_group", cpu_group, 0, 0, 8, false) \
    X("cpu_tasks", cpu_tasks, 96, 1, 1 << 20, false) \
    X("cpu_gemm", cpu_gemm, 1, 0, 1, false) \
    X("cpu_gemm_min_n", cpu_gemm_min_n, 3, 0, 1 << 20, false) \
    X("cpu_gemm_bf16", cpu_gemm_bf16, 1, 0, 1, false) \
    X("debug_qdot_row", debug_qdot_row, 0, 0, 1, false) \
    X("cpu_qdot_q8", cpu_qdot_q8, 1, 0, 1, false) \
    X("cpu_rows_bf16", cpu_rows_bf16, 1, 0, 1, false) \
    X("cpu_dot16_max_n", cpu_dot16_max_n, 32, 0, 1 << 20, false) \
    X("debug_bdot_row", debug_bdot_row, 0, 0, 1, false) \
    X("gemv_bdot_groups", gemv_bdot_groups, 1, 0, 1, false) \
    X("debug_pack_row", debug_pack_row, 0, 0, 1, false) \
    X("debug_kv_round", debug_kv_round, 0, 0, 1, false) \
    X("cpu_prefetch", cpu_prefetch, 4096, 0, 1 << 20, false) \
    X("debug_plan_barrier", debug_plan_barrier, 0, 0, 1, false)
typedef struct {
#define X(s, f, d, lo, hi, p2) int f;
    KNOBS(X)
#undef X
} Knobs;
void knobs_default(Knobs *k);
/* Parses NAME=VALUE; dies with a user error naming the knob. */
void knobs_set(Knobs *k, const char *assign);
void knobs_print(Str *o, const Knobs *k);

/* gemv and its splitk_sum (compiler/schedules/gemv.c) */
typedef struct {
    int rows;                  /* warps (output elements) per block */
    int split_k;               /* K slices; > 1: partials go to work, a splitk_sum kernel follows */
    int64_t k_chunk;           /* K elements per slice (a multiple of vec) */
    int vec;                   /* elements per lane per vector load; 1: scalar loads */
    int unroll;                /* rounds of a lane's loads issued before their sums */
    bool bdot;                 /* block-type weights of 32-element blocks: a lane's round is group whole blocks,
                                * its unroll rounds one bdot statement (runtime/kernels.h's bdot_q4_1 ...) */
    int group;                 /* bdot: blocks a round (vec / 32); > 1: loaded with load_bytes-wide loads */
    int load_bytes;
    int min_blocks;            /* CUDA: blocks per SM asked of ptxas (__launch_bounds__); 0: none */
    bool debug_row;            /* bdot: knob debug_bdot_row's fault */
    Expr *xop, *wop[2];        /* bdot: the activation load, each accumulator's weight load */
    Buffer *work;              /* split_k > 1: [outputs, split_k * nacc] f32 partials */
} GemvParams;
/* gemm_tc (compiler/schedules/gemm_tc.c): y[t, o] = sum_k xop(t, k) * wop(o, k) */
typedef struct {
    int bm, bn, bk;            /* block tile: tokens, outputs, K step */
    int stages;                /* shared-memory buffers per operand: 1 stage then compute; > 1 a pipeline */
    bool w_cp_async;           /* stages > 1: W tiles by cp.async (K % 8 == 0), else by register prefetch */
    bool x_vec;                /* stages > 1: X prefetched by 4-wide vector loads (a plain row load, K % 4 == 0) */
    Expr *xop;                 /* the activation operand of the reduced terms */
    Expr *wop[2];              /* each accumulator's weight operand: a pair's W tile interleaves the two in groups
                                * of 16 rows */
} GemmTcParams;
/* flash_attn and flash_combine (compiler/schedules/flash.c) */
typedef struct {
    const AttnDesc *attn;      /* the attention loop_flash fused */
    int tq;                    /* tokens per block; warps = tq * group */
    int split;                 /* key slices (flash decoding); 1: none */
    Expr *nsplit;              /* slices at run time: min(split, one per 32 keys), so none is empty */
    Buffer *work;              /* split > 1: the slices' partials [rows*heads*split, hv + 2]: o, max, sum */
    int stage_vecs;            /* K/V tiles staged by this many 16-byte cp.async copies of each per thread and pass,
                                * all issued before one wait_group; 0: scalar loads, each stored at once */
} FlashParams;
/* cpu_rows (compiler/schedules/cpu_rows.c): tasks of consecutive output elements */
typedef struct {
    int64_t chunk;             /* output elements per task (a multiple of group) */
    int group;                 /* elements of a linear whose K loop runs together (1: one at a time) */
    bool qdot;                 /* a linear of block-type weights: each element one runtime dot product (qdot) */
    bool debug_row;            /* qdot: knob debug_qdot_row's fault */
    bool acts_q8;              /* qdot: the activations rounded to 8 bits (knob cpu_qdot_q8) */
    Expr *xop, *wop[2];        /* qdot: the activation load, each accumulator's weight load */
    /* a linear over the call's tokens (the first axis, n): chunk counts rows of the other axes, and a task
     * computes its rows for every token in turn, its weight rows read from memory once (then from the cache) */
    bool token_loop;
    /* a token loop's linear of bf16 weights: each element one bf16 dot product (runtime/cpu_dot16.h, knob
     * cpu_rows_bf16) with the activations rounded to bf16, eight or four tokens at a time sharing each weight
     * load */
    bool dot16;
    int prefetch;              /* qdot, dot16: bytes of the weights ahead of the loads prefetched (knob cpu_prefetch;
                                * 0: none) */
} CpuRowsParams;
/* cpu_gemm (compiler/schedules/cpu_gemm.c): y[t, o] = sum_k xop(t, k) * wop(o, k), packed panels and
 * runtime/cpu_gemm.h's register-tile kernel */
typedef struct {
    Expr *xop, *wop[2];        /* as gemm_tc's: the activation operand, each accumulator's weight operand */
    int nb;                    /* outputs per task (a multiple of CPU_GEMM_NR); a pair packs 2 x nb columns */
    int mc, kc;                /* tokens per A panel, K per packed step */
    bool x_in_place;           /* xop is a plain f32 row X[t, k]: the kernel reads it in place, no A panel */
    bool w_rows[2];            /* wop[a] is an f32 / bf16 row W[f(o), k], f(o) in runs of consecutive rows that
                                * no task splits: packed by the runtime's pack */
    int64_t run_rows[2], run_gap[2];   /* f's runs: run_rows rows each, their starts run_gap rows apart */
    bool dot;                  /* bf16 weights, activations in place: bf16 dot products (knob cpu_gemm_bf16) */
    bool debug_row;            /* knob debug_pack_row's fault */
} CpuGemmParams;
/* top_k and top_k_merge (compiler/schedules/topk.c) */
typedef struct {
    const TOp *op;             /* the top-k op */
    int nrow; Axis row[MAX_AXES];   /* the rows: the nest's parallel axes, outermost first */
    int chunks;                /* blocks per row, each a chunk of the row */
    int64_t chunk;             /* elements per chunk */
    Buffer *work;              /* chunks > 1: [rows * chunks, 2 * topk_max], each chunk's values then indices */
} TopkParams;

typedef struct { Buffer *buf; Expr **idx; Expr *value; } NestStore;   /* buf[idx] = value */
/* What a nest of stores and reductions computes (nest_shape, tile_ir.c), for the schedules of such nests:
 * flat (a store, no reduction), block_reduce, gemv, splitk_sum, gemm_tc. */
typedef struct {
    int npar; Axis par[MAX_AXES];   /* the parallel axes, outermost first */
    int nred; Axis red[2];     /* the reduction axes */
    RedOp redop;
    /* accumulators: 2 for a pair nest (loop_fuse_epilogues; gemv and gemm_tc only), each summing its term
     * over the same K; a pair's halves have two stores, and every store value may read both */
    int nacc; Expr *acc[2];
    int nstore; NestStore store[2];
    NestStore side;            /* block_reduce: a fused producer stored from the loop (loop_fuse); buf NULL: none */
    /* block_reduce: a fused row op over the axis tail after the store (loop_fuse); tail_store.buf NULL: none */
    Axis tail; NestStore tail_store;
    union {
        GemvParams gemv;       /* gemv, splitk_sum */
        GemmTcParams gemm;     /* gemm_tc */
        CpuRowsParams cpu;     /* cpu_rows */
        CpuGemmParams cpug;    /* cpu_gemm */
    };
} NestBody;

/* A kernel of the tile IR: its launch, and what the schedule its kind names maps onto it. */
typedef struct {
    const LoopNest *nest;
    SchedKind kind;
    const char *name;          /* kernel base name: the nest's, suffixed for a schedule's other kernels */
    int block;                 /* threads per block */
    Expr *grid;                /* blocks, from n and pos */
    int smem_floats;           /* f32 shared scratch per block (gemm_tc and flash_attn declare their own) */
    int run_if, min_n;         /* 0: always; 1: when n > min_n; 2: when n <= min_n (gemm_tc / gemv, flash) */
    union {
        NestBody body;         /* flat, block_reduce, gemv, splitk_sum, gemm_tc, cpu_rows, cpu_gemm */
        FlashParams flash;     /* flash_attn, flash_combine, cpu_attn (attn only) */
        TopkParams topk;       /* top_k, top_k_merge */
    };
} TileKernel;

typedef struct {
    const LProgram *lp;
    Target target;             /* TARGET_CPU: the cpu_* schedules first, the GPU's for what they leave */
    Knobs knobs;
    int64_t max_batch, max_ctx;   /* bounds of n and pos (from lp), for extents that grow with them */
    TileKernel **k; int n;     /* in launch order (a split-K nest gives two) */
} TileProgram;

/* Whether flash_attn has a schedule for this attention (warps, registers,
 * shared memory); loop_flash fuses only those. */
bool flash_fits(const AttnDesc *d);
bool cpu_attn_fits(const AttnDesc *d);
void tile_schedule(Arena *A, const LProgram *lp, Target target, const Knobs *kn, TileProgram *tp);
void tile_print(Str *o, const TileProgram *tp);
const char *tile_verify(Arena *A, const TileProgram *tp);
#endif
