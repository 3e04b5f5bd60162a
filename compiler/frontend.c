/* frontend.c: config.json -> graph IR. One builder serves Llama, Qwen2, Qwen3
 * and Mistral: the families differ only in what the config says (biases, tied
 * embeddings, rope scaling, head_dim, Qwen3's per-head q/k norms), never in
 * copied code. */
#include "graph.h"
#include "model_api.h"
#include "safetensors.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    Arena *A;
    Graph *g;
    const WeightSource *ws;
    const ModelConfig *cfg;
    int n_weights;
    int layer;                 /* the decoder layer being built (-1: the model's own nodes): every node's layer */
} FB;

static DType st_to_dtype(const char *file, const char *name, StDtype d) {
    switch (d) {
    case ST_F32: return DT_F32;
    case ST_F16: return DT_F16;
    case ST_BF16: return DT_BF16;
    /* GGUF's block types (a GGUF file's tensors) */
#define ST_BLOCK_CASE(id, name, bytes, block, ggml) case ST_##id: return DT_##id;
    BLOCK_DTYPES(ST_BLOCK_CASE)
#undef ST_BLOCK_CASE
    default: die_user(file, name, "dtype %s is not supported (supported: F32, F16, BF16)", st_dtype_name(d));
    }
}

/* A weight leaf; checks the checkpoint has it with the expected shape. */
static GNode *weight(FB *b, const char *name, int64_t d0, int64_t d1) {
    int ndim = d1 ? 2 : 1;
    GNode *n = graph_add(b->A, b->g, G_WEIGHT, name);
    n->layer = b->layer;
    n->ndim = ndim; n->dims[0] = d0; n->dims[1] = d1;
    n->dtype = b->ws->assumed;
    if (b->ws->st) {
        const StTensor *t = st_find((const StModel *)b->ws->st, name);
        char want[64], got[256];
        shape_format(want, sizeof want, ndim, n->dims);
        if (!t) {
            const char *w = st_where((const StModel *)b->ws->st), *where = w ? w : b->cfg->dir;
            die_user(where, name, "tensor missing from the checkpoint (expected shape %s)", want);
        }
        if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
            shape_format(got, sizeof got, t->ndim, t->shape);
            die_user(t->file, name, "shape %s, expected %s", got, want);
        }
        n->dtype = st_to_dtype(t->file, name, t->dtype);
    }
    b->n_weights++;
    return n;
}

static GNode *act(FB *b, GraphOp op, const char *name, int64_t width, GNode *x, GNode *y, GNode *z) {
    GNode *n = graph_add(b->A, b->g, op, name);
    n->layer = b->layer;
    n->ndim = 2; n->rows_n = true; n->dims[1] = width;
    GNode *in[3] = {x, y, z};
    for (int i = 0; i < 3; i++) if (in[i]) n->in[n->nin++] = in[i];
    return n;
}

static GNode *linear(FB *b, const char *mod, GNode *x, int64_t in, int64_t out, bool bias) {
    GNode *w = weight(b, arena_printf(b->A, "%s.weight", mod), out, in);
    GNode *bi = bias ? weight(b, arena_printf(b->A, "%s.bias", mod), out, 0) : NULL;
    GNode *n = act(b, G_LINEAR, mod, out, x, w, bi);
    n->rows_n = x->rows_n; n->dims[0] = x->dims[0];
    return n;
}

/* An RMSNorm over the hidden size, or with heads (Qwen3's q_norm / k_norm) over each head_dim-wide head of x, one
 * weight shared by the heads. */
static GNode *rmsnorm(FB *b, const char *mod, GNode *x, int heads) {
    int hd = b->cfg->head_dim, D = b->cfg->hidden_size;
    GNode *w = weight(b, arena_printf(b->A, "%s.weight", mod), heads ? hd : D, 0);
    GNode *n = act(b, G_RMSNORM, mod, heads ? (int64_t)heads * hd : D, x, w, NULL);
    n->eps = b->cfg->rms_norm_eps;
    if (heads) { n->heads = heads; n->head_dim = hd; }
    n->rows_n = x->rows_n; n->dims[0] = x->dims[0];
    return n;
}

/* inv_freq exactly as transformers computes it (modeling_rope_utils.py), in f32; a GGUF file's factors as
 * llama.cpp applies them. */
static const float *rope_inv_freq(FB *b, const char **desc) {
    const ModelConfig *c = b->cfg;
    int d = c->head_dim, half = d / 2;
    float *f = ARENA_ARRAY(b->A, float, half);
    for (int i = 0; i < half; i++) f[i] = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)d);
    switch (c->rope_type) {
    case ROPE_NONE:
        *desc = arena_printf(b->A, "theta=%g", c->rope_theta);
        break;
    case ROPE_LINEAR:
        for (int i = 0; i < half; i++) f[i] = f[i] / (float)c->rope_factor;
        *desc = arena_printf(b->A, "theta=%g, linear x%g", c->rope_theta, c->rope_factor);
        break;
    case ROPE_LLAMA3: {
        float factor = (float)c->rope_factor, lo = (float)c->rope_low_freq_factor, hi = (float)c->rope_high_freq_factor;
        float old = (float)c->rope_original_max_pos;
        float lo_wl = old / lo, hi_wl = old / hi;
        for (int i = 0; i < half; i++) {
            float wl = 2.0f * (float)M_PI / f[i];
            float v = wl > lo_wl ? f[i] / factor : f[i];
            float smooth = (old / wl - lo) / (hi - lo);
            float smoothed = (1.0f - smooth) * v / factor + smooth * v;
            bool medium = !(wl < hi_wl) && !(wl > lo_wl);
            f[i] = medium ? smoothed : v;
        }
        *desc = arena_printf(b->A, "theta=%g, llama3 x%g (low %g, high %g, orig %d)", c->rope_theta, c->rope_factor,
                             c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_original_max_pos);
        break;
    }
    }
    /* a GGUF file's rope_freqs.weight: ggml's rope divides each frequency by its factor (llama.cpp's llama3) */
    if (c->rope_freq_factors) {
        for (int i = 0; i < half; i++) f[i] = f[i] / c->rope_freq_factors[i];
        *desc = arena_printf(b->A, "%s, frequencies divided by rope_freqs.weight", *desc);
    }
    return f;
}

/* What transformers itself leaves unread when it loads a checkpoint: rotary_emb.inv_freq (a buffer older
 * checkpoints saved, recomputed from the config) and lm_head.weight where the embedding is tied to it. */
static bool transformers_ignores(const ModelConfig *cfg, const char *name) {
    size_t n = strlen(name), k = strlen(".rotary_emb.inv_freq");
    return (n > k && !strcmp(name + n - k, ".rotary_emb.inv_freq")) ||
           (cfg->tie_word_embeddings && !strcmp(name, "lm_head.weight"));
}

/* Every tensor of the checkpoint is one the graph reads: a tensor left out is refused, as for GGUF files
 * (gguf_model_tensors), since it means the config describes another model than the weights (q/k norms in a llama
 * config, biases without attention_bias); what transformers leaves out too is listed in one warning. */
static void check_all_read(Arena *A, const Graph *g, const ModelConfig *cfg, const StModel *st) {
    bool *read = ARENA_ARRAY(A, bool, (size_t)st->n + 1);
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->op == G_WEIGHT) {
            const StTensor *t = st_find(st, g->nodes[i]->name);
            if (t) read[t - st->t] = true;
        }
    int skipped = 0;
    const char *first = NULL;
    for (int i = 0; i < st->n; i++) {
        if (read[i]) continue;
        if (!transformers_ignores(cfg, st->t[i].name))
            die_user(st->t[i].file, st->t[i].name, "tensor not used by the %s model config.json describes (llmcc "
                     "refuses what it would leave out, as transformers warns and llama.cpp refuses)",
                     cfg->architecture ? cfg->architecture : "");
        if (!skipped++) first = st->t[i].name;
    }
    if (skipped)
        fprintf(stderr, "llmcc: %s: %d tensor%s not read, as transformers does not read %s either (%s%s)\n",
                st_where(st) ? st_where(st) : cfg->dir, skipped, skipped == 1 ? "" : "s", skipped == 1 ? "it" : "them",
                first, skipped > 1 ? ", ..." : "");
}

void graph_build(Arena *A, Graph *g, const ModelConfig *cfg, const WeightSource *ws, int max_batch, int max_ctx) {
    memset(g, 0, sizeof *g);
    g->cfg = cfg; g->max_batch = max_batch; g->max_ctx = max_ctx;
    FB b = {A, g, ws, cfg, 0, -1};
    const int D = cfg->hidden_size, H = cfg->num_attention_heads, KV = cfg->num_key_value_heads, hd = cfg->head_dim;
    const int I = cfg->intermediate_size, V = cfg->vocab_size;
    const char *rope_desc = NULL;
    const float *inv_freq = rope_inv_freq(&b, &rope_desc);

    GNode *ids = graph_add(A, g, G_INPUT_IDS, "input_ids");
    ids->ndim = 1; ids->rows_n = true; ids->dtype = DT_I32;
    GNode *emb = weight(&b, "model.embed_tokens.weight", V, D);
    GNode *h = act(&b, G_EMBED, "model.embed_tokens", D, emb, ids, NULL);

    for (int L = 0; L < cfg->num_hidden_layers; L++) {
        const char *p = arena_printf(A, "model.layers.%d", L);
        b.layer = L;
        GNode *x = rmsnorm(&b, arena_printf(A, "%s.input_layernorm", p), h, 0);
        GNode *q = linear(&b, arena_printf(A, "%s.self_attn.q_proj", p), x, D, (int64_t)H * hd, cfg->attention_bias);
        GNode *k = linear(&b, arena_printf(A, "%s.self_attn.k_proj", p), x, D, (int64_t)KV * hd, cfg->attention_bias);
        GNode *v = linear(&b, arena_printf(A, "%s.self_attn.v_proj", p), x, D, (int64_t)KV * hd, cfg->attention_bias);
        if (cfg->qk_norm) {
            q = rmsnorm(&b, arena_printf(A, "%s.self_attn.q_norm", p), q, H);
            k = rmsnorm(&b, arena_printf(A, "%s.self_attn.k_norm", p), k, KV);
        }
        GNode *qr = act(&b, G_ROPE, arena_printf(A, "%s.self_attn.rotary_q", p), (int64_t)H * hd, q, NULL, NULL);
        GNode *kr = act(&b, G_ROPE, arena_printf(A, "%s.self_attn.rotary_k", p), (int64_t)KV * hd, k, NULL, NULL);
        qr->heads = H; kr->heads = KV;
        qr->head_dim = kr->head_dim = hd;
        qr->inv_freq = kr->inv_freq = inv_freq;
        qr->rope_desc = kr->rope_desc = rope_desc;
        GNode *kw = act(&b, G_KV_WRITE, arena_printf(A, "%s.self_attn.k_cache", p), (int64_t)KV * hd, kr, NULL, NULL);
        GNode *vw = act(&b, G_KV_WRITE, arena_printf(A, "%s.self_attn.v_cache", p), (int64_t)KV * hd, v, NULL, NULL);
        vw->is_v = true;
        kw->kv_heads = vw->kv_heads = KV; kw->head_dim = vw->head_dim = hd;
        GNode *at = act(&b, G_ATTENTION, arena_printf(A, "%s.self_attn.attention", p), (int64_t)H * hd, qr, kw, vw);
        at->heads = H; at->kv_heads = KV; at->head_dim = hd;
        GNode *o = linear(&b, arena_printf(A, "%s.self_attn.o_proj", p), at, (int64_t)H * hd, D, cfg->o_bias);
        h = act(&b, G_ADD, arena_printf(A, "%s.attn_residual", p), D, h, o, NULL);
        x = rmsnorm(&b, arena_printf(A, "%s.post_attention_layernorm", p), h, 0);
        GNode *gt = linear(&b, arena_printf(A, "%s.mlp.gate_proj", p), x, D, I, cfg->mlp_bias);
        GNode *up = linear(&b, arena_printf(A, "%s.mlp.up_proj", p), x, D, I, cfg->mlp_bias);
        GNode *act_fn = act(&b, G_SILU, arena_printf(A, "%s.mlp.act_fn", p), I, gt, NULL, NULL);
        GNode *m = act(&b, G_MUL, arena_printf(A, "%s.mlp.gate_mul_up", p), I, act_fn, up, NULL);
        GNode *dn = linear(&b, arena_printf(A, "%s.mlp.down_proj", p), m, I, D, cfg->mlp_bias);
        h = act(&b, G_ADD, arena_printf(A, "%s.mlp_residual", p), D, h, dn, NULL);
    }
    b.layer = -1;
    /* The tail: logits are needed for some rows only (model_forward: the last token's; model_forward_batch:
     * every token's), so the rows are selected before the final norm; the tail runs with its own n and pos
     * (graph.h's tail) */
    GNode *last = act(&b, G_LAST_TOKEN, "model.last_token", D, h, NULL, NULL);
    GNode *f = rmsnorm(&b, "model.norm", last, 0);
    if (cfg->tie_word_embeddings) g->logits = act(&b, G_LINEAR, "lm_head", V, f, emb, NULL);
    else g->logits = linear(&b, "lm_head", f, D, V, false);
    g->logits->picks_token = true;
    /* the greedy next token of each row, so greedy decoding needs no logits from the device */
    GNode *am = act(&b, G_ARGMAX, "model.next_token", 1, g->logits, NULL, NULL);
    am->ndim = 1;
    g->next_token = am;
    last->tail = f->tail = g->logits->tail = am->tail = true;
    /* the sampler's candidates: --top-k up to 127 samples from these (the 128th tells a tie at the k-th apart) */
    GNode *tk = act(&b, G_TOPK, "model.top_k", 1, g->logits, NULL, NULL);
    tk->topk = V < MODEL_TOPK_CAP ? (int)V : MODEL_TOPK_CAP;
    tk->rows_n = false; tk->ndim = 3; tk->dims[0] = 1; tk->dims[1] = 2; tk->dims[2] = tk->topk;
    g->top_k = tk;
    if (ws->st) check_all_read(A, g, cfg, ws->st);
}
