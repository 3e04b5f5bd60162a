/* pipeline.c: the stages of a compilation, in order. Adding a pass means
 * adding a line to STAGES. */
#include "pipeline.h"
#include "kernel_cleanup.h"
#include "kernel_cse.h"
#include "torch_expr.h"
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const ir_level_names[] = {
#define X(e, s) s,
    IR_LEVELS(X)
#undef X
};

IrLevel ir_level_parse(const char *s) {
    for (int i = 0; i < IR_COUNT; i++) if (!strcmp(s, ir_level_names[i])) return (IrLevel)i;
    die_user(NULL, "--ir", "unknown level '%s' (graph, tensor, loop, tile, kernel, plan, cuda, c)", s);
}

#define QUANT_MIX_NAME(e, name, base) name,
#define QUANT_MIX_BASE(e, name, base) base,
const char *const quant_mix_names[] = {QUANT_MIXES(QUANT_MIX_NAME)};
const DType quant_mix_base[] = {QUANT_MIXES(QUANT_MIX_BASE)};

/* --quant NAME: llama-quantize's mix of that name, spelled as it spells them (upper case; Q4_K and Q5_K are its
 * aliases of Q4_K_M and Q5_K_M; the names with a size suffix in any case, no block type is called so), else
 * QUANT_MIX_NONE: a block type in ggml's lower case (q4_0, q4_k) quantizes the linears alone (pipeline's
 * st_frontend). Upper case for llama-quantize's ftypes and lower for ggml's types is llama.cpp's own habit. */
int quant_mix_of_name(const char *name) {
    if (!strcmp(name, "Q4_K")) return QUANT_MIX_Q4_K_M;
    if (!strcmp(name, "Q5_K")) return QUANT_MIX_Q5_K_M;
    for (int m = 1; m < QUANT_MIX_COUNT; m++)
        if (strlen(quant_mix_names[m]) > 4 ? !strcasecmp(name, quant_mix_names[m]) : !strcmp(name, quant_mix_names[m]))
            return m;
    return QUANT_MIX_NONE;
}

/* llama.cpp's layers that get more bits in the _M mixes: the first and last eighth, and every third between */
static bool use_more_bits(int layer, int layers) {
    return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

/* --quant Q4_0 ... Q6_K, Q4_K_S, Q4_K_M, Q5_K_M as llama-quantize makes them (llama-quant.cpp's
 * llama_tensor_get_type, for the dense models llmcc reads, no importance matrix): the mix's base type, but q6_k for
 * the output matrix (the lm_head, or the embedding where it is tied; Q8_0 keeps q8_0 there); the K mixes give some
 * layers' v_proj and down_proj more bits: _M q6_k in use_more_bits' layers, Q4_K_S q5_k in v_proj's first 4 and
 * down_proj's first eighth. A matrix whose rows are not whole super-blocks falls back to q5_0 (q4_k's), q5_1 (q5_k's)
 * or q8_0 (q6_k's, and the output's), and to f16 where not whole blocks of 32 either. Norms and biases keep theirs. */
static void quant_mix(Compilation *c) {
    const bool more_bits = c->quant_mix == QUANT_MIX_Q4_K_M || c->quant_mix == QUANT_MIX_Q5_K_M;
    const bool k_s = c->quant_mix == QUANT_MIX_Q4_K_S;
    const DType base = quant_mix_base[c->quant_mix];
    bool tied = true;
    for (int i = 0; i < c->g.n; i++) tied &= strcmp(c->g.nodes[i]->name, "lm_head.weight") != 0;
    const int layers = c->cfg.num_hidden_layers;
    for (int i = 0; i < c->g.n; i++) {
        GNode *n = c->g.nodes[i];
        if (n->op != G_WEIGHT || n->ndim != 2) continue;
        const bool output =
            !strcmp(n->name, "lm_head.weight") || (tied && !strcmp(n->name, "model.embed_tokens.weight"));
        const int64_t cols = n->dims[1];
        const bool v = strstr(n->name, ".self_attn.v_proj.") != NULL, down = strstr(n->name, ".mlp.down_proj.") != NULL;
        DType t = base;
        if (output) t = cols % dtype_block[base] || base == DT_Q8_0 ? DT_Q8_0 : DT_Q6_K;
        else if (more_bits && (v || down) && use_more_bits(n->layer, layers)) t = DT_Q6_K;
        else if (k_s && ((v && n->layer < 4) || (down && n->layer < layers / 8))) t = DT_Q5_K;
        if (cols % dtype_block[t]) t = t == DT_Q4_K ? DT_Q5_0 : t == DT_Q5_K ? DT_Q5_1 : t == DT_Q6_K ? DT_Q8_0 : t;
        if (cols % dtype_block[t]) t = DT_F16;   /* not even whole blocks of 32: llama-quantize's f16 */
        c->n_of_dtype[t]++;
        n->dtype = t;
    }
}

static void st_frontend(Compilation *c) {
    if (c->expr) { torch_expr_graph(&c->A, c->expr, &c->g); return; }
    WeightSource ws = {c->have_weights ? &c->st : NULL, DT_BF16};
    if (c->cfg.torch_dtype && !strcmp(c->cfg.torch_dtype, "float32")) ws.assumed = DT_F32;
    if (c->cfg.torch_dtype && !strcmp(c->cfg.torch_dtype, "float16")) ws.assumed = DT_F16;
    CHECK(!c->force_dtype || c->weight_dtype != DT_I32, "weight dtype");
    graph_build(&c->A, &c->g, &c->cfg, &ws, c->max_batch, c->max_ctx);
    CHECK(c->kv_dtype == DT_F32 || c->kv_dtype == DT_BF16, "kv cache dtype %s", dtype_names[c->kv_dtype]);
    c->g.kv_dtype = c->kv_dtype;
    /* --dtype: the packer converts, so the kernels load what it writes */
    if (c->force_dtype)
        for (int i = 0; i < c->g.n; i++)
            if (c->g.nodes[i]->op == G_WEIGHT) c->g.nodes[i]->dtype = c->weight_dtype;
    /* --quant: the packer quantizes (llama.cpp's reference quantizers) every matrix of whole blocks a linear
     * reads as its weight, the embedding and lm_head only with --quant-all (llama.cpp keeps them in more bits) */
    if (c->quant_mix) quant_mix(c);
    else if (dtype_is_quant(c->quant))
        for (int i = 0; i < c->g.n; i++) {
            GNode *n = c->g.nodes[i];
            if (n->op != G_WEIGHT || n->ndim != 2) continue;
            bool embed_or_head = !strcmp(n->name, "model.embed_tokens.weight") || !strcmp(n->name, "lm_head.weight");
            if (embed_or_head && !c->quant_all) continue;
            if (n->dims[1] % dtype_block[c->quant]) {   /* said by llmcc build (main.c) */
                c->n_unquantized++;
                c->unquantized_row = n->dims[1];
                continue;
            }
            n->dtype = c->quant;
            c->n_quantized++;
        }
}
static void st_select_layer(Compilation *c) { if (c->one_layer) graph_select_layer(&c->A, &c->g, c->layer); }
static void st_decompose(Compilation *c) { tensor_lower(&c->A, &c->g, &c->tp); }
static void st_plan_memory(Compilation *c) { tensor_plan_memory(&c->A, &c->tp); }
static void st_loops(Compilation *c) { loop_lower(&c->A, &c->tp, &c->lp); }
static void st_flash(Compilation *c) {
    loop_flash(&c->A, &c->lp, c->knobs.fuse && c->knobs.flash, c->target == TARGET_CPU ? cpu_attn_fits : flash_fits);
}
static void st_fuse(Compilation *c) { loop_fuse(&c->A, &c->lp, c->knobs.fuse); }
static void st_epilogues(Compilation *c) { loop_fuse_epilogues(&c->A, &c->lp, c->knobs.fuse); }
static void st_schedule(Compilation *c) { tile_schedule(&c->A, &c->lp, c->target, &c->knobs, &c->tip); }
static void st_materialise(Compilation *c) { kernel_lower(&c->A, &c->tip, &c->kp); }
static void st_cleanup(Compilation *c) { kernel_cleanup(&c->A, &c->kp); }
static void st_name_indices(Compilation *c) { kernel_name_indices(&c->A, &c->kp); }
static void st_plan(Compilation *c) { plan_build(&c->A, &c->kp, c->target, &c->knobs, &c->plan); }

static const char *v_graph(Compilation *c) { return graph_verify(&c->A, &c->g); }
static const char *v_tensor(Compilation *c) { return tensor_verify(&c->A, &c->tp); }
static const char *v_loop(Compilation *c) { return loop_verify(&c->A, &c->lp); }
static const char *v_tile(Compilation *c) { return tile_verify(&c->A, &c->tip); }
static const char *v_kernel(Compilation *c) { return kernel_verify(&c->A, &c->kp); }
static const char *v_plan(Compilation *c) { return plan_verify(&c->A, &c->plan); }

static void p_graph(Compilation *c, Str *o) { graph_print(o, &c->g); }
static void p_tensor(Compilation *c, Str *o) { tensor_print(o, &c->tp); }
static void p_loop(Compilation *c, Str *o) { loop_print(o, &c->lp); }
static void p_tile(Compilation *c, Str *o) { tile_print(o, &c->tip); }
static void p_kernel(Compilation *c, Str *o) { kernel_print(o, &c->kp); }
static void p_plan(Compilation *c, Str *o) { plan_print(o, &c->plan); }

typedef struct {
    const char *name;
    IrLevel produces;
    void (*run)(Compilation *);
} Stage;

static const Stage STAGES[] = {
    {"frontend", IR_GRAPH, st_frontend},
    {"select_layer", IR_GRAPH, st_select_layer},
    {"decompose", IR_TENSOR, st_decompose},
    {"plan_memory", IR_TENSOR, st_plan_memory},
    {"lift_loops", IR_LOOP, st_loops},
    {"flash_attention", IR_LOOP, st_flash},
    {"fuse", IR_LOOP, st_fuse},
    {"fuse_epilogues", IR_LOOP, st_epilogues},
    {"schedule", IR_TILE, st_schedule},
    {"materialise", IR_KERNEL, st_materialise},
    {"cleanup", IR_KERNEL, st_cleanup},
    {"name_indices", IR_KERNEL, st_name_indices},
    {"plan", IR_PLAN, st_plan},
};

/* after each stage: the verifier and printer of the level it produces */
static const struct { const char *(*verify)(Compilation *); void (*print)(Compilation *, Str *); } LEVELS[] = {
    {v_graph, p_graph}, {v_tensor, p_tensor}, {v_loop, p_loop}, {v_tile, p_tile}, {v_kernel, p_kernel},
    {v_plan, p_plan}};
#define NSTAGES (int)(sizeof STAGES / sizeof STAGES[0])

int pipeline_print_after_parse(const char *name) {
    if (!strcmp(name, "all")) return PRINT_AFTER_ALL;
    for (int i = 0; i < NSTAGES; i++) if (!strcmp(name, STAGES[i].name)) return i + 1;
    char list[512];
    size_t k = 0;
    for (int i = 0; i < NSTAGES; i++) k += (size_t)snprintf(list + k, sizeof list - k, "%s, ", STAGES[i].name);
    die_user(NULL, "--print-after", "unknown stage '%s' (%sall)", name, list);
}

IrLevel pipeline_print_after_level(int print_after) {
    return print_after > 0 ? STAGES[print_after - 1].produces : IR_PLAN;
}

void pipeline_run(Compilation *c, IrLevel level, Str *dump) {
    IrLevel last = level > IR_PLAN ? IR_PLAN : level;
    if (c->print_after && pipeline_print_after_level(c->print_after) > last)
        last = pipeline_print_after_level(c->print_after);
    CHECK(!c->print_after || c->print_out, "--print-after without an output");
    for (int i = 0; i < NSTAGES; i++) {
        const Stage *s = &STAGES[i];
        if (s->produces > last) break;
        s->run(c);
        const char *err = LEVELS[s->produces].verify(c);
        if (err) die_internal(__FILE__, __LINE__, "IR verifier after stage %s: %s", s->name, err);
        void (*print)(Compilation *, Str *) = LEVELS[s->produces].print;
        if (c->print_after == PRINT_AFTER_ALL) {
            str_printf(c->print_out, "=== after stage %d/%d %s (%s IR) ===\n", i + 1, NSTAGES, s->name,
                       ir_level_names[s->produces]);
            print(c, c->print_out);
        } else if (c->print_after == i + 1) {
            print(c, c->print_out);
        }
        bool final = i + 1 == NSTAGES || STAGES[i + 1].produces > s->produces;
        if (dump && s->produces == level && final) print(c, dump);
    }
}
