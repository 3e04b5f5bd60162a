/* tensor_ir.h: tensor IR. Each graph op decomposes into tensor ops of three
 * kinds: elementwise (out[axes] = f(inputs at the same point)), reduction
 * (out[axes] = epilogue(reduce over raxes of body)) and index-map (data
 * movement: gathers, the KV-cache write, the last-token select). Indices are
 * expressions of the axes and of the runtime scalars n and pos. Buffers get
 * their place in the activation arena here (tensor_plan_memory). */
#ifndef LLMCC_TENSOR_IR_H
#define LLMCC_TENSOR_IR_H
#include "graph.h"

#define TOP_KINDS(X) X(TOP_ELEMWISE, "elementwise") X(TOP_REDUCE, "reduction") X(TOP_INDEXMAP, "index_map")
typedef enum { TOP_KINDS(X_ENUM) TOP_COUNT } TOpKind;
extern const char *const top_kind_names[];

/* argmax: acc is the index (a float) of the first maximum over the one
 * reduction axis; NaN never wins, so a row of NaN and -inf gives 0.
 * top_k: the op's result is a list, not an acc: see TOp's topk fields. */
#define RED_OPS(X) X(RED_SUM, "sum") X(RED_MAX, "max") X(RED_ARGMAX, "argmax") X(RED_TOPK, "top_k")
typedef enum { RED_OPS(X_ENUM) RED_COUNT } RedOp;
extern const char *const red_op_names[];

typedef struct { Var *v; Expr *extent; } Axis;

/* One attention, whole, for loop IR's online-softmax rewrite (loop_flash):
 * out(t, h, d) = sum_j softmax_j(s(t, h, j)) v(j, h, d) over keys j < jmax(t),
 * s = scale * sum_d' q(t, h, d') k(j, h, d'). k and v depend on the head only
 * through h / group (grouped-query attention: the group's heads read the
 * same keys). parts are the plain decomposition it replaces. */
typedef struct AttnDesc {
    const char *kname;         /* kernel base name */
    Var *t, *h, *j, *d;        /* the free variables of the expressions below */
    Expr *rows;                /* extent of t */
    int64_t heads, group, hd, hv;   /* extents of h, the GQA group, d in q.k, d in v */
    Expr *len;                 /* extent of j */
    Expr *jmax;                /* of t: keys j < jmax(t) are seen (causal), len otherwise */
    Expr *q, *k, *v;           /* q(t, h, d), k(j, h, d), v(j, h, d) */
    double scale;
    Buffer *out; Expr *out_idx[MAX_DIMS];   /* of t, h, d */
    struct TOp *parts[5];      /* scores, max, sum, softmax, pv */
} AttnDesc;

#define MAX_AXES 4
typedef struct TOp {
    TOpKind kind;
    const char *module;        /* graph node it came from */
    int layer;                 /* that node's decoder layer (-1: none) */
    const char *kname;         /* kernel name (layer-independent) */
    Buffer *out;
    Expr *out_idx[MAX_DIMS];   /* store index, one per out->ndim */
    int naxes;
    Axis axes[MAX_AXES];
    int nraxes;
    Axis raxes[2];
    RedOp red;
    Expr *body;                /* the value (elementwise), or the reduced term */
    Expr *epilogue;            /* reduction: f(acc); NULL means acc */
    AttnDesc *attn;            /* the pv op of an attention: the whole attention */
    bool picks_token;          /* from its graph node (a model's lm_head): f32 activations, not 8-bit ones */
    bool tail;                 /* from its graph node: the tail's own n and pos (graph.h) */
    /* top_k over the one reduction axis j: out[axes, 0, r] is the r-th largest body (r < count; the order
     * is value descending, then j ascending, NaN counted as -inf) and out[axes, 1, r] its j as a float;
     * out_idx's last two are topk_sel (0 or 1) and topk_rank. count is a constant, or for a model's
     * sampler n: model_topk launches these kernels with n = the k it asks for (at most topk_max). */
    Expr *topk_count;
    int64_t topk_max;
    Var *topk_sel, *topk_rank;
} TOp;

typedef struct {
    const Graph *g;
    TOp **ops; int n, cap;
    Buffer **bufs; int nbufs, capb;
    int nvars;
    int n_weights;             /* weight buffers, in payload order */
    Buffer **weights;
    Buffer *ids, *logits;
    Buffer *next_token;        /* a model's argmax of the logits: [1] f32, in the activation arena */
    Buffer *top_k;             /* a model's topk of the logits: [1, 2, topk_max] f32, likewise */
    int64_t act_bytes;         /* size of the activation arena */
    int64_t kv_layer_elems;    /* per layer and position: kv_heads * head_dim */
} TProgram;

void tensor_lower(Arena *A, const Graph *g, TProgram *tp);
void tensor_plan_memory(Arena *A, TProgram *tp);
/* The arena's offsets from each buffer's first and last step (-1: unused), best fit; also act_bytes. */
void tensor_place_buffers(Arena *A, TProgram *tp, const int *first, const int *last, int nsteps);
void tensor_print(Str *o, const TProgram *tp);
const char *tensor_verify(Arena *A, const TProgram *tp);
Var *new_var(Arena *A, int *counter, const char *name);
int64_t buffer_elems(const Buffer *b);
#endif
