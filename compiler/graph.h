/* graph.h: graph IR, the model as Hugging Face's modules describe it: one
 * node per op (embedding, rms_norm, linear, rope, kv_cache_write, attention,
 * silu, mul, add, last_token) over activations whose first dimension is the
 * number of tokens n of one forward call. Built by the frontend from the
 * config alone; weights are leaves that name checkpoint tensors.
 * The same nodes describe a single PyTorch expression (torch_expr.c, cfg
 * NULL): static shapes of up to MAX_DIMS dimensions with broadcasting,
 * input leaves (torch.randn, ...), scalar constants, and the ops sub, div,
 * softmax (last dim), matmul, scaled_dot_product_attention, argmax (last
 * dim: the index of the first maximum, NaN counted as -inf, as a float) and
 * topk (last dim: [..., 2, k], the k largest values in order and then their
 * indices as floats; ties go to the smaller index, NaN counts as -inf). A
 * model's graph ends in argmax(logits), the greedy next token, and
 * topk(logits) for the sampler (run from model_topk, not model_forward). */
#ifndef LLMCC_GRAPH_H
#define LLMCC_GRAPH_H
#include "ir.h"
#include "config.h"

#define GRAPH_OPS(X) \
    X(G_INPUT_IDS, "input_ids") X(G_WEIGHT, "weight") X(G_EMBED, "embedding") X(G_RMSNORM, "rms_norm") \
    X(G_LINEAR, "linear") X(G_ROPE, "rope") X(G_KV_WRITE, "kv_cache_write") X(G_ATTENTION, "attention") \
    X(G_SILU, "silu") X(G_MUL, "mul") X(G_ADD, "add") X(G_LAST_TOKEN, "last_token") \
    X(G_INPUT, "input") X(G_CONST, "const") X(G_SUB, "sub") X(G_DIV, "div") X(G_SOFTMAX, "softmax") \
    X(G_MATMUL, "matmul") X(G_SDPA, "scaled_dot_product_attention") X(G_ARGMAX, "argmax") X(G_TOPK, "topk")
typedef enum { GRAPH_OPS(X_ENUM) G_COUNT } GraphOp;
extern const char *const graph_op_names[];

/* How a leaf is filled when llmcc runs it (llmcc run): inputs as torch.randn /
 * zeros / ones, weights uniform in [lo, hi]. */
#define FILL_KINDS(X) X(FILL_NONE, "none") X(FILL_RANDN, "randn") X(FILL_ZEROS, "zeros") X(FILL_ONES, "ones") \
    X(FILL_UNIFORM, "uniform")
typedef enum { FILL_KINDS(X_ENUM) FILL_COUNT } FillKind;
extern const char *const fill_names[];

typedef struct GNode {
    int id;
    GraphOp op;
    const char *name;          /* the Hugging Face module path, e.g. model.layers.0.self_attn.q_proj */
    int nin;
    struct GNode *in[4];
    /* result: dims[0..ndim), where dims[0] is n when rows_n; weights use ndim/dims as stored */
    int ndim;
    int64_t dims[MAX_DIMS];
    bool rows_n;
    DType dtype;
    /* attributes */
    double eps;                /* rms_norm */
    int heads, kv_heads, head_dim;
    int layer;                 /* the decoder layer the node belongs to (a KV write's and attention's cache), -1: the
                                * model's own (the embedding, the tail) */
    bool is_v;                 /* kv_cache_write: the V cache (else K) */
    const float *inv_freq;     /* rope: head_dim/2 frequencies, computed as transformers does */
    const char *rope_desc;
    double value;              /* const: the scalar */
    bool causal;               /* scaled_dot_product_attention: is_causal (query i sees keys j <= i) */
    bool picks_token;          /* linear: a model's lm_head, whose outputs pick the next token: its activations
                                * stay f32 where the other block-type linears round them to 8 bits
                                * (knob cpu_qdot_q8: a small model's best logits can lie closer together than
                                * that rounding moves them) */
    bool tail;                 /* a model's tail (last_token, the final norm, lm_head, next_token): it runs with
                                * its own n and pos, rows pos .. pos + n - 1 of the last residual: model_forward
                                * the last row (n = 1 from row n - 1), model_forward_batch every row (emit.c) */
    double scale;              /* scaled_dot_product_attention: the score scale */
    int topk;                  /* topk: k (a model's: the most model_topk may ask for) */
    FillKind fill;             /* input / weight leaves of an expression */
    double fill_lo, fill_hi;
    Buffer *buf;               /* set by lowering: where the value lives */
} GNode;

typedef struct {
    GNode **nodes;
    int n, cap;
    GNode *logits;             /* the output */
    GNode *next_token;         /* a model's argmax of the logits (NULL for expressions and one layer) */
    GNode *top_k;              /* a model's topk of the logits, for the sampler (likewise) */
    const ModelConfig *cfg;    /* NULL for an expression graph */
    const char *source;        /* an expression graph's text */
    bool one_layer;            /* only decoder layer `layer` of the model (graph_select_layer) */
    int layer;
    int max_batch, max_ctx;
    DType kv_dtype;            /* the KV cache's elements: f32 or bf16 (--kv-dtype; the kernels round to it) */
} Graph;

/* Where weights come from: a checkpoint (shapes checked, dtypes read) or
 * nothing (config only: dtype assumed from torch_dtype). */
typedef struct {
    const void *st;            /* const StModel * (safetensors.h), NULL: no weights */
    DType assumed;             /* dtype of every weight when st is NULL */
} WeightSource;

void graph_build(Arena *A, Graph *g, const ModelConfig *cfg, const WeightSource *ws, int max_batch, int max_ctx);
void graph_print(Str *o, const Graph *g);
const char *graph_verify(Arena *A, const Graph *g);
/* Keeps decoder layer `layer` only: its input becomes an input leaf
 * "hidden_states" [n, hidden], its output the graph's. A user error names
 * --layer when the model has no such layer. */
void graph_select_layer(Arena *A, Graph *g, int layer);
/* Appends a node (id = position) to g. */
GNode *graph_add(Arena *A, Graph *g, GraphOp op, const char *name);
/* Broadcasting (numpy / PyTorch rules, dims aligned at the right) of a and b
 * into out; false when they do not broadcast. */
bool shape_broadcast(const GNode *a, const GNode *b, int *ndim, int64_t *dims);
void shape_format(char *buf, size_t len, int ndim, const int64_t *dims);
int64_t gnode_elems(const GNode *n);
/* "model.layers.3.self_attn.q_proj" -> "self_attn_q_proj": the kernel name, shared by all layers. */
const char *kernel_base_name(Arena *A, const char *module);
#endif
