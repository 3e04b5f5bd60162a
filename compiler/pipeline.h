/* pipeline.h: one compilation, from config.json (or a GGUF file) to kernel IR, as a flat
 * list of named stages (pipeline.c). Each stage's IR is verified after
 * the stage runs and can be printed: a level's last stage by --ir LEVEL,
 * any stage by --print-after STAGE. */
#ifndef LLMCC_PIPELINE_H
#define LLMCC_PIPELINE_H
#include "emit.h"
#include "safetensors.h"

#define IR_LEVELS(X) X(IR_GRAPH, "graph") X(IR_TENSOR, "tensor") X(IR_LOOP, "loop") X(IR_TILE, "tile") \
    X(IR_KERNEL, "kernel") X(IR_PLAN, "plan") X(IR_CUDA, "cuda") X(IR_C, "c")
typedef enum {
#define X(e, s) e,
    IR_LEVELS(X)
#undef X
    IR_COUNT
} IrLevel;

/* llama-quantize's mixes (--quant), by their names (its ftypes): the type most matrices get; how the rest differ is
 * quant_mix's (pipeline.c). The plain names (Q4_0 ... Q6_K) differ from the block type alone in the output matrix. */
#define QUANT_MIXES(X) X(NONE, "", DT_F32) X(Q4_K_S, "Q4_K_S", DT_Q4_K) X(Q4_K_M, "Q4_K_M", DT_Q4_K) \
    X(Q5_K_M, "Q5_K_M", DT_Q5_K) X(Q4_0, "Q4_0", DT_Q4_0) X(Q4_1, "Q4_1", DT_Q4_1) X(Q5_0, "Q5_0", DT_Q5_0) \
    X(Q5_1, "Q5_1", DT_Q5_1) X(Q8_0, "Q8_0", DT_Q8_0) X(Q6_K, "Q6_K", DT_Q6_K)
#define QUANT_MIX_ENUM(e, name, base) QUANT_MIX_##e,
enum { QUANT_MIXES(QUANT_MIX_ENUM) QUANT_MIX_COUNT };
#undef QUANT_MIX_ENUM
extern const char *const quant_mix_names[];
extern const DType quant_mix_base[];
int quant_mix_of_name(const char *name);

typedef struct {
    Arena A;
    ModelConfig cfg;
    StModel st;                /* the weights under their Hugging Face names (a GGUF file's too: gguf_model.h) */
    struct GgufModel *gguf;    /* MODEL is a GGUF file: the file, where st's bytes lie in it, llama's q/k rows */
    bool have_weights;
    bool force_dtype;          /* --dtype: every weight is converted to weight_dtype */
    DType weight_dtype;
    DType quant;               /* --quant: the linears' weights quantized into this block type (DT_F32: none) */
    bool quant_all;            /* --quant-all: the embedding and lm_head too */
    int quant_mix;             /* --quant Q4_K_S, Q4_K_M, Q5_K_M: llama-quantize's mix of that name (QUANT_MIX_*) */
    int n_of_dtype[DT_COUNT];  /* --quant: the matrices given each dtype */
    int n_quantized, n_unquantized;   /* --quant: the matrices quantized, and those of rows not whole blocks */
    int64_t unquantized_row;          /* the row length of one of the latter */
    Knobs knobs;
    Target target;             /* which schedules tile IR offers (tile_ir.h) */
    const char *expr;          /* -c: a PyTorch expression instead of a model (torch_expr.c) */
    bool one_layer;            /* --layer: keep decoder layer `layer` only */
    int layer;
    int max_ctx, max_batch;
    DType kv_dtype;            /* the KV cache's dtype (f32 or bf16; kv_dtype_default when not asked for) */
    Graph g;
    TProgram tp;
    LProgram lp;
    TileProgram tip;
    KProgram kp;
    Plan plan;                 /* the host side's decisions (plan.h), for the target's model code */
    int print_after;           /* --print-after: 1 + the stage's index, PRINT_AFTER_ALL, or 0 (none) */
    Str *print_out;            /* where --print-after prints (required when print_after is set) */
} Compilation;
#define PRINT_AFTER_ALL (-1)

/* Runs the stages up to and including the one that produces `level`
 * (IR_CUDA / IR_C run everything, up to the plan). When dump is non-NULL, the IR of
 * `level` is printed into it. */
void pipeline_run(Compilation *c, IrLevel level, Str *dump);
IrLevel ir_level_parse(const char *s);
/* --print-after NAME: a value for Compilation.print_after; dies naming the
 * valid stages when NAME is neither a stage nor "all" */
int pipeline_print_after_parse(const char *name);
/* the level whose IR stage print_after produces (IR_PLAN for all) */
IrLevel pipeline_print_after_level(int print_after);
#endif
