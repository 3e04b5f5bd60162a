/* interp.h: the plain reference `llmcc run` checks compiled kernels against.
 * It evaluates the graph's ops directly, with obvious loops in double
 * precision, from the graph's shapes and attributes alone: none of the
 * tensor IR, schedules or emitted code is involved. */
#ifndef LLMCC_INTERP_H
#define LLMCC_INTERP_H
#include "graph.h"

typedef struct {
    /* round a linear's input to bf16 where its weight is bf16, as the
     * tensor-core schedule (gemm_tc) stages it, and so does the cpu target's
     * bf16 dot product (cpu_gemm with dot): that rounding is part of the
     * schedule's numerical contract, so the reference models it rather than
     * the check widening its tolerance for every op */
    bool bf16_linear_x;
    /* round a linear's input to 8 bits per block of 32 where its weight is of a block type, as the cpu target's
     * block-type dot products do at decode (knob cpu_qdot_q8; runtime/cpu_quant_q8.h gives the rounding), but
     * the lm_head's (cpu_rows.c keeps it f32) */
    bool q8_linear_x;
    /* a decoder layer's first position: RoPE angles start there and
     * attention also sees the pos cache rows before this call's tokens,
     * cache[id] for kv_cache_write node id (pos x kv_heads*head_dim values) */
    int64_t pos;
    double *const *cache;
} InterpOptions;

/* leaves[id]: the values of input and weight node id (row-major, as many
 * as the node has elements), NULL elsewhere. Shapes must be static (a
 * model graph's n fixed into dims[0]). Returns the output's values (malloc'd,
 * gnode_elems(g->logits) of them); dies with a user error naming the op
 * when the graph holds one the reference does not evaluate. */
double *interp_run(const Graph *g, double *const *leaves, const InterpOptions *io);
#endif
