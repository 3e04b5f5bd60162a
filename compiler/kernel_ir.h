/* kernel_ir.h: kernel IR, the hardware's primitives in a form both emitters
 * print directly (docs/pipeline.md, "Kernel IR primitives": what each means
 * and how the C and CUDA backends print it):
 *   kernel := params, grid, block, shared arrays, registers, body
 *   body   := phase { per-thread code (TStmt) }  -- a block barrier follows unless warp-level
 *           | ufor v = init; cond; v = update { body } | ulet v = init   -- uniform
 *           | shfl | mma | ldmatrix | cp.async commit_group / wait_group   -- kernel statements (KStmt)
 * Barriers and shuffles sit only between phases, so they are always in
 * block-uniform control flow and every warp is complete and converged (CUDA's
 * full-mask requirement). Identical kernels (all layers' q_proj, ...) are
 * compiled once: launches name the kernel and bind its buffers. */
#ifndef LLMCC_KERNEL_IR_H
#define LLMCC_KERNEL_IR_H
#include "tile_ir.h"

#define TSTMT_KINDS(X) X(TS_LET, "let") X(TS_ASSIGN, "assign") X(TS_STORE, "store") X(TS_SSTORE, "sstore") \
    X(TS_IF, "if") X(TS_FOR, "for") X(TS_VLOAD, "vload") X(TS_CP_ASYNC, "cp_async") X(TS_GEMM, "gemm") \
    X(TS_PACK, "pack") X(TS_QDOT, "qdot") X(TS_BDOT, "bdot") X(TS_DOT16, "dot16")
typedef enum { TSTMT_KINDS(X_ENUM) TS_COUNT } TStmtKind;

typedef struct TStmt {
    TStmtKind k;
    Var *v;                    /* let, for; vload: the vector (read as EX_VELEM) */
    int vec;                   /* vload: elements (consecutive in the last dimension, vector aligned);
                                * cp_async: bytes (4, 8, 16) */
    int reg, smem;             /* assign: register; sstore, cp_async: shared array */
    Expr *e;                   /* let/assign/store/sstore value; if condition; for upper bound; cp_async: predicate
                                * (NULL: always; false: the destination is zero-filled and nothing is read) */
    Expr *lo, *step;           /* for */
    Expr *sidx;                /* sstore, cp_async: shared element index (cp_async: of the first element) */
    Buffer *buf; Expr **idx;   /* store; vload, cp_async: the first element */
    struct TStmt **body; int nbody;
    /* gemm (CPU tasks only; runtime/cpu_gemm.h): the m x gn tile at element sidx of smem[gsmem[2]] (rows gn
     * apart) (+)= A x B^T over K, m = e, K = lo, accumulate when step != 0, from the packed panel
     * B = smem[gsmem[1]] (gn columns) and A: with buf, the f32 row-major buffer in place from element idx
     * (rows its last dimension apart; gsmem[0] unused), else the packed panel smem[gsmem[0]] (m rows).
     * dot: B is bf16 weights packed by a pack statement with dot; A, the f32 buffer in place, is rounded to
     * bf16 into the scratch smem[gsmem[0]] (runtime/cpu_gemm.h's cpu_gemm_dot: bf16 dot products).
     * pack (CPU tasks only; runtime/cpu_gemm.h's cpu_gemm_pack_*): gn rows of the weight buf from element idx,
     * e of them real (the rest zero), lo elements each, into the panel smem[smem] as its columns sidx.. (a
     * constant); dot: bf16 weights in pairs for the bf16 dot product where the CPU has it; the rows come in
     * runs of run_rows consecutive rows, run_gap rows apart (a RoPE pair's halves; else one run)
     * qdot (CPU tasks only; runtime/cpu_quant.h): register reg = sum over k < lo of x[k] * w[k], w the lo
     * elements of the block-type weight buf from element idx (whole blocks, dequantized in registers), x those
     * of the f32 load e (the activation row's first element) on
     * bdot (GPU lanes; runtime/kernels.h's bdot_q8_0 ...): register reg += sum over u < lo (at most vec) rounds,
     * j < 32 * group of w[c + u * gn + j] * x[c + u * gn + j], w the block-type weight buf from element idx (c: a
     * block's first), x the f32 load e from element c on; a round is group consecutive blocks (group > 1: loaded
     * with 16- or 8-byte loads, bdot_q4_1_x4 ...); the rounds' bytes are all loaded before the first product
     * dot16 (CPU tasks only; runtime/cpu_dot16.h): sum over k < lo of w[k] * bf16(x_j[k]) for step (at most gn)
     * consecutive rows x_j of the f32 load e's 2-d buffer (e: row j = 0's first element), w the bf16 weight buf's
     * row from element idx, into elements sidx .. (a constant) of the scratch array smem[smem] */
    int gsmem[3]; int64_t gn;
    int group;                 /* bdot: blocks a round */
    int prefetch;              /* qdot, dot16: the weights this many bytes ahead of the loads prefetched (0: none) */
    bool dot;
    int64_t run_rows, run_gap;
    bool truncate;             /* store to a bf16 KV cache: the value truncated (knob debug_kv_round's fault), not
                                * rounded to nearest even */
} TStmt;

#define KSTMT_KINDS(X) X(KS_PHASE, "phase") X(KS_UFOR, "ufor") X(KS_SHFL, "shfl") X(KS_MMA, "mma") \
    X(KS_LDMATRIX, "ldmatrix") X(KS_CP_COMMIT, "cp_async_commit_group") X(KS_CP_WAIT, "cp_async_wait_group") \
    X(KS_ULET, "ulet")
typedef enum { KSTMT_KINDS(X_ENUM) KS_COUNT } KStmtKind;

#define SHFL_KINDS(X) X(SHFL_DOWN, "down") X(SHFL_UP, "up") X(SHFL_XOR, "xor") X(SHFL_IDX, "idx")
typedef enum { SHFL_KINDS(X_ENUM) SHFL_COUNT } ShflKind;
extern const char *const shfl_names[];

typedef struct KStmt {
    KStmtKind k;
    TStmt **body; int nbody;   /* phase */
    bool barrier;              /* phase: a block barrier follows (false: only this thread's registers carry over) */
    /* shfl: rdst = value of rsrc at the lane given by arg (delta, mask or lane; uniform) */
    ShflKind shfl; int dst, src; Expr *arg;
    Var *v; Expr *init, *cond, *update;   /* ufor */
    struct KStmt **kbody; int nk;
    /* mma_m16n8k16_bf16 (f32 accumulate, in place): fragment registers in the PTX ISA's layout, with
     * g = lane / 4, t = lane % 4 and (lo, hi) the two bf16 of a .b32 register:
     *   a[0] = A[g][2t..2t+1]  a[1] = A[g+8][2t..]  a[2] = A[g][2t+8..]  a[3] = A[g+8][2t+8..]   (A 16x16, row)
     *   b[0] = B[2t..2t+1][g]  b[1] = B[2t+8..2t+9][g]                                        (B 16x8, col)
     *   c[q] = C[g + 8*(q/2)][2t + q%2]                                                        (C 16x8, f32)
     * ldmatrix_xN (N = 1, 2, 4; m8n8, b16): lanes 8i..8i+7 give the shared element offsets (addr, 16-byte
     * aligned) of rows 0..7 of matrix i; d[i] of lane l = row l/4 of matrix i, elements 2(l%4), 2(l%4)+1. */
    int ma[4], mb[2], mc[4];
    bool mf16;                 /* mma: f16 operands (mma...f32.f16.f16.f32), else bf16 */
    int nmat, ldst[4], lsmem; Expr *laddr;
    /* cp.async groups (PTX ISA, cp.async): commit_group closes the copies this thread issued since the last
     * commit into a group; wait_group N returns once at most the newest N of its committed groups are still
     * pending. Completed copies are visible to the issuing thread; other threads need a barrier after. */
    int wait_n;                /* wait_group */
} KStmt;

/* b16: uint16 elements, f16: IEEE halves, else bf16 bits (f32 stores round to nearest even); widen: a b16
 * element read (EX_SLOAD) is its bf16 value as an f32 (flash_attn's K/V tiles), else its bits */
typedef struct { int size; bool b16, f16, widen; } SmemDecl;
typedef struct { EType t; bool b32; } RegDecl;     /* b32: a .b32 fragment register (two bf16) */

#define MAX_PARAMS 16
typedef struct KKernel {
    const char *name;          /* k_<kname>, suffixed when kernels of one name differ */
    const char *base;          /* k_<kname> before any suffix: kernels are only merged within a name */
    const char *module;        /* first graph op it came from */
    SchedKind sched;
    int block;
    int min_blocks;            /* CUDA: blocks per SM asked of ptxas (__launch_bounds__'s second argument); 0: none */
    Expr *grid;
    int nparams; Buffer *params[MAX_PARAMS];   /* the first instance's buffers */
    bool param_written[MAX_PARAMS];
    int nsmem; SmemDecl smem[8];
    int nregs; RegDecl regs[112];
    bool has_shfl;             /* the C backend keeps a lane buffer */
    bool has_ldm;              /* the C backend keeps a lane address buffer */
    bool has_cp_async;         /* the C backend keeps the block's pending copies */
    bool has_acts_q8;          /* qdot with 8-bit activations: each thread keeps its quantized row (cpu_quant_q8.h) */
    bool has_acts16;           /* dot16: each thread keeps its input rounded to bf16 (cpu_dot16.h) */
    bool task;                 /* a CPU schedule's (BLOCK_TASK): a block is a task of one thread, plain C */
    bool name_epilogue_only;   /* name_indices (kernel_cse.c) names the last phase's indices alone (gemm_tc) */
    bool name_none;            /* ... and none (gemm_tc with two stores an element: RoPE's halves) */
    bool tokens;               /* a _tokens variant (plan.c): token_pos / kv_row in place of pos, with the tokens'
                                * positions and KV rows as parameters */
    KStmt **body; int nbody;
    int uses;                  /* launches */
} KKernel;

typedef struct {
    KKernel *k;
    const char *module;
    int layer;                 /* the module's decoder layer (-1: the model's own: the embedding, the tail) */
    Buffer *args[MAX_PARAMS];
    Expr *grid;
    int run_if, min_n;         /* 0: always; 1: only when n > min_n; 2: only when n <= min_n (gemm_tc / gemv) */
    bool tail;                 /* a model's tail (graph.h): its own n and pos */
} KLaunch;

typedef struct {
    const TProgram *tp;        /* the emitters' memory plan and buffers */
    bool sampler;              /* a model's program: its top-k launches are the sampler's (model_topk runs them) */
    KKernel **kernels; int nk;   /* distinct kernels */
    KLaunch *launches; int nl;   /* in execution order */
} KProgram;

void kernel_lower(Arena *A, const TileProgram *tp, KProgram *kp);
/* Launches of the sampler's top-k (a model's model_topk runs them, model_forward the others). */
bool kernel_is_sampling(const KLaunch *l);
int kernel_sampling_launches(const KProgram *kp);
/* Bytes of the split-K workspace the launches need (0: none). */
int64_t kernel_work_bytes(const KProgram *kp);
void kernel_print(Str *o, const KProgram *kp);
void kernel_print_one(Str *o, const KKernel *k, bool header);
const char *kernel_verify(Arena *A, const KProgram *kp);
/* whether any of k's statements reads pos */
bool kernel_reads_pos(const KKernel *k);
/* Index of b among k's params for this launch's binding, -1 if none. */
int kernel_param_index(const KKernel *k, const Buffer *b);
/* The expressions of statement s itself (not its body): e, lo, step, sidx, then the buffer's indices;
 * returns how many. */
#define TS_MAX_EXPRS (4 + MAX_DIMS)
int ts_exprs(const TStmt *s, const Expr **out);
/* Whether b (or a uniform loop in it) holds a statement of this kind. */
bool ks_has(KStmt *const *b, int n, KStmtKind kind);
/* Whether b (phases, uniform loops) holds a per-thread statement of this kind. */
bool ks_has_ts(KStmt *const *b, int n, TStmtKind kind);
#endif
