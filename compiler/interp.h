/* interp.h: the plain reference `llmcc run` checks compiled kernels against.
 * It evaluates the graph's ops directly, with obvious loops in double
 * precision, from the graph's shapes and attributes alone: none of the
 * tensor IR, schedules or emitted code is involved. */
#ifndef LLMCC_INTERP_H
#define LLMCC_INTERP_H
#include "graph.h"

/* leaves[id]: the values of input and weight node id (row-major, as many
 * as the node has elements), NULL elsewhere. Shapes must be static (a
 * model graph's n fixed into dims[0]); a decoder layer is evaluated at
 * position 0, over an empty KV cache. Returns the output's values (malloc'd,
 * gnode_elems(g->logits) of them); dies with a user error naming the op
 * when the graph holds one the reference does not evaluate.
 * bf16_linear_x: round a linear's input to bf16 where its weight is bf16, as
 * the tensor-core schedule (gemm_tc) stages it: that rounding is part of the
 * schedule's numerical contract, so the reference models it rather than the
 * check widening its tolerance for every op. */
double *interp_run(const Graph *g, double *const *leaves, bool bf16_linear_x);
#endif
