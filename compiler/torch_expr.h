/* torch_expr.h: `llmcc compile -c EXPR` / `llmcc run -c EXPR`: a PyTorch-style
 * expression, e.g. nn.RMSNorm(2048)(torch.randn(1, 32, 2048)), parsed into a
 * graph (graph.h) of input leaves, random weights and ops. Errors are one
 * line: "llmcc: -c: COL N: what is wrong". */
#ifndef LLMCC_TORCH_EXPR_H
#define LLMCC_TORCH_EXPR_H
#include "graph.h"

/* What the language accepts, for --help and error messages. */
extern const char torch_expr_supported[];
void torch_expr_graph(Arena *A, const char *src, Graph *g);
#endif
