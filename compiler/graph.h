/* graph.h: graph IR, the model as Hugging Face's modules describe it: one
 * node per op (embedding, rms_norm, linear, rope, kv_cache_write, attention,
 * silu, mul, add, last_token) over activations whose first dimension is the
 * number of tokens n of one forward call. Built by the frontend from the
 * config alone; weights are leaves that name checkpoint tensors. */
#ifndef LLMCC_GRAPH_H
#define LLMCC_GRAPH_H
#include "ir.h"
#include "config.h"

#define GRAPH_OPS(X) \
    X(G_INPUT_IDS, "input_ids") X(G_WEIGHT, "weight") X(G_EMBED, "embedding") X(G_RMSNORM, "rms_norm") \
    X(G_LINEAR, "linear") X(G_ROPE, "rope") X(G_KV_WRITE, "kv_cache_write") X(G_ATTENTION, "attention") \
    X(G_SILU, "silu") X(G_MUL, "mul") X(G_ADD, "add") X(G_LAST_TOKEN, "last_token")
typedef enum {
#define X(e, s) e,
    GRAPH_OPS(X)
#undef X
    G_COUNT
} GraphOp;
extern const char *const graph_op_names[];

typedef struct GNode {
    int id;
    GraphOp op;
    const char *name;          /* the Hugging Face module path, e.g. model.layers.0.self_attn.q_proj */
    int nin;
    struct GNode *in[4];
    /* result: [n, dims[1]] when rows_n, else [dims[0], dims[1]]; weights use ndim/dims as stored */
    int ndim;
    int64_t dims[MAX_DIMS];
    bool rows_n;
    DType dtype;
    /* attributes */
    double eps;                /* rms_norm */
    int heads, kv_heads, head_dim, layer;
    bool is_v;                 /* kv_cache_write: the V cache (else K) */
    const float *inv_freq;     /* rope: head_dim/2 frequencies, computed as transformers does */
    const char *rope_desc;
    Buffer *buf;               /* set by lowering: where the value lives */
} GNode;

typedef struct {
    GNode **nodes;
    int n, cap;
    GNode *logits;             /* the output */
    const ModelConfig *cfg;
    int max_batch, max_ctx;
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
/* "model.layers.3.self_attn.q_proj" -> "self_attn_q_proj": the kernel name, shared by all layers. */
const char *kernel_base_name(Arena *A, const char *module);
#endif
