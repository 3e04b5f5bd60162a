/* gguf_model.c: GGUF metadata -> ModelConfig, GGUF tensors -> an StModel under Hugging Face names (gguf_model.h
 * says why). The keys are those convert_hf_to_gguf.py writes and llama.cpp's llama / qwen2 / qwen3 loaders read;
 * every key is classified (read, inert, or refused by name), as config.c classifies config.json's. */
#include "gguf_model.h"
#include "graph.h"
#include "quant.h"
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* ---- the keys ---- */

/* under "ARCH." (e.g. llama.block_count): read */
static const char *const ARCH_READ[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length", "vocab_size",
    "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "attention.key_length",
    "attention.value_length", "rope.freq_base", "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor",
    "rope.scale_linear",
};
/* under "ARCH.": inert. llama.cpp stores rope.scaling.finetuned and only prints it (llama-model.cpp). */
static const char *const ARCH_INERT[] = {"rope.scaling.finetuned"};
/* elsewhere: read */
static const char *const READ[] = {
    "general.architecture", "general.type", "split.count",
    "general.sampling.temp", "general.sampling.top_k", "general.sampling.top_p", "general.sampling.min_p",
    "general.sampling.penalty_repeat",
    "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
};
/* elsewhere: inert. Descriptions of the model (gguf-py's Keys.General), the reader's alignment, the summary of the
 * tensor types (each tensor carries its own), the pieces of a file split in one (split.count must be 1),
 * samplers llmcc does not have (recommendations, as config.json's num_beams is one) */
static const char *const INERT[] = {
    "general.alignment", "general.quantization_version", "general.file_type", "general.name", "general.author",
    "general.version", "general.organization", "general.finetune", "general.basename", "general.description",
    "general.quantized_by", "general.size_label", "general.url", "general.doi", "general.uuid", "general.repo_url",
    "general.tags", "general.languages", "split.no", "split.tensors.count",
    "general.sampling.sequence", "general.sampling.xtc_probability", "general.sampling.xtc_threshold",
    "general.sampling.penalty_last_n", "general.sampling.mirostat", "general.sampling.mirostat_tau",
    "general.sampling.mirostat_eta",
};
/* prefixes of inert keys: licences, the sources a model came from, how llama-quantize's importance matrix was
 * made, and the tokenizer's keys (the tokenizer's packer reads them; the ids above are read here) */
static const char *const INERT_PREFIXES[] = {
    "general.license", "general.source.", "general.base_model.", "general.dataset.", "quantize.imatrix.",
    "tokenizer.",
};

#define COUNT(a) (sizeof(a) / sizeof *(a))

static bool in_list(const char *const *list, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], key)) return true;
    return false;
}

const char *gguf_key_class(const char *arch_name, const char *key) {
    size_t al = strlen(arch_name);
    if (!strncmp(key, arch_name, al) && key[al] == '.') {
        if (in_list(ARCH_READ, COUNT(ARCH_READ), key + al + 1)) return "read";
        if (in_list(ARCH_INERT, COUNT(ARCH_INERT), key + al + 1)) return "inert";
        return NULL;
    }
    if (in_list(READ, COUNT(READ), key)) return "read";
    if (in_list(INERT, COUNT(INERT), key)) return "inert";
    for (size_t i = 0; i < COUNT(INERT_PREFIXES); i++)
        if (!strncmp(key, INERT_PREFIXES[i], strlen(INERT_PREFIXES[i]))) return "inert";
    return NULL;
}

/* Every key classified; the ignored ones recorded for inspect; --ignore-config-key of a read key refused. */
static void check_keys(Arena *a, const GgufModel *m, const ConfigOptions *o, ModelConfig *c) {
    const GgufFile *g = &m->file;
    for (int i = 0; o && i < o->n_ignore_keys; i++) {
        const char *cls = gguf_key_class(m->arch_name, o->ignore_keys[i]);
        if (cls && !strcmp(cls, "read"))
            die_user(NULL, "--ignore-config-key", "%s is read by llmcc (it changes the model); it cannot be ignored",
                     o->ignore_keys[i]);
    }
    c->ignored_keys = ARENA_ARRAY(a, const char *, g->n_kv + 1);
    for (int k = 0; k < g->n_kv; k++) {
        const char *key = g->kv[k].key;
        if (gguf_key_class(m->arch_name, key)) continue;
        if (config_key_ignored(o, key)) { c->ignored_keys[c->n_ignored_keys++] = key; continue; }
        die_user(g->path, key, "unknown to llmcc for GGUF architecture %s, which cannot tell whether it changes the "
                 "model; if it does not, build with --ignore-config-key %s", m->arch_name, key);
    }
}

/* ---- typed reads with the checks config.c makes on config.json's values ---- */

static int get_size(const GgufFile *g, const char *key, bool required, int def, int min) {
    int64_t v;
    if (!gguf_get_int(g, key, &v)) {
        if (required) die_user(g->path, key, "missing (required)");
        return def;
    }
    if (v < min) die_user(g->path, key, "must be %s, got %" PRId64, min > 0 ? "positive" : "non-negative", v);
    if (v > INT_MAX) die_user(g->path, key, "%" PRId64 " is too large", v);
    return (int)v;
}

/* lo_open: must be > lo (else >= lo); hi < 0: no upper bound */
static double get_num(const GgufFile *g, const char *key, double def, double lo, bool lo_open, double hi) {
    double x;
    if (!gguf_get_float(g, key, &x)) return def;
    if (!isfinite(x)) die_user(g->path, key, "must be a finite number, got %g", x);
    if (lo_open ? !(x > lo) : !(x >= lo)) die_user(g->path, key, "must be %s %g, got %g", lo_open ? ">" : ">=", lo, x);
    if (hi >= 0 && !(x <= hi)) die_user(g->path, key, "must be <= %g, got %g", hi, x);
    return x;
}

static const char *gguf_tensor_name(int i, const void *g) { return ((const GgufFile *)g)->tensors[i].name; }

static const char *arch_key(Arena *a, const GgufModel *m, const char *key) {
    return arena_printf(a, "%s.%s", m->arch_name, key);
}

static int token_id(const GgufFile *g, const char *key, int vocab) {
    int id = get_size(g, key, false, -1, 0);
    if (id >= vocab) die_user(g->path, key, "token id %d is outside the vocabulary (vocab_size %d)", id, vocab);
    return id;
}

/* The architecture: llama.cpp's names are ARCHITECTURES' model_type column (llama.cpp converts Mistral's
 * checkpoints to "llama"). */
static void read_arch(Arena *a, GgufModel *m, ModelConfig *c) {
    const GgufFile *g = &m->file;
    GgufStr s;
    if (!gguf_get_str(g, "general.architecture", &s)) die_user(g->path, "general.architecture", "missing (required)");
    static const struct { Arch arch; const char *cls, *type, *family; } archs[] = {
#define X(e, cls, type, name) {e, cls, type, name},
        ARCHITECTURES(X)
#undef X
    };
    for (size_t i = 0; i < COUNT(archs); i++) {
        if (archs[i].arch == ARCH_MISTRAL || strlen(archs[i].type) != s.len || memcmp(archs[i].type, s.s, s.len))
            continue;
        m->arch = c->arch = archs[i].arch;
        m->arch_name = archs[i].type;
        c->architecture = archs[i].cls;
        c->family = archs[i].family;
        m->permuted_qk = c->arch == ARCH_LLAMA;
        return;
    }
    /* the name as the file has it, one line (gguf.c prints names safely the same way) */
    Str q = {0};
    for (uint64_t i = 0; i < s.len && i < 64; i++) {
        unsigned char ch = (unsigned char)s.s[i];
        if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') str_printf(&q, "\\x%02x", ch);
        else str_append(&q, (const char *)&ch, 1);
    }
    const char *name = arena_strdup(a, q.s ? q.s : "");
    str_free(&q);
    die_user(g->path, "general.architecture", "\"%s\" is not supported (supported: llama, qwen2, qwen3)", name);
}

/* RoPE as llama.cpp reads it (llama-model.cpp): rope.scaling.type defaults to linear, its factor is
 * rope.scaling.factor or the older rope.scale_linear (absent: none), and type none never scales; llama3's
 * per-frequency factors are the tensor rope_freqs.weight (convert_hf_to_gguf.py's LlamaModel writes it). */
static void read_rope(Arena *a, const GgufModel *m, ModelConfig *c) {
    const GgufFile *g = &m->file;
    c->rope_theta = get_num(g, arch_key(a, m, "rope.freq_base"), 10000.0, 0, true, -1);
    const char *tkey = arch_key(a, m, "rope.scaling.type"), *fkey = arch_key(a, m, "rope.scaling.factor");
    if (!gguf_find_kv(g, fkey)) fkey = arch_key(a, m, "rope.scale_linear");
    GgufStr type;
    bool has_type = gguf_get_str(g, tkey, &type);
    bool linear = !has_type || (type.len == 6 && !memcmp(type.s, "linear", 6));
    if (has_type && !linear && !(type.len == 4 && !memcmp(type.s, "none", 4)))
        die_user(g->path, tkey, "\"%.*s\" is not supported (supported: none, linear)",
                 (int)(type.len < 32 ? type.len : 32), type.s);
    double factor = get_num(g, fkey, 0, 0, true, -1);
    c->rope_type = ROPE_NONE;
    c->rope_factor = 1.0;
    if (linear && (has_type || factor > 0)) {
        c->rope_type = ROPE_LINEAR;
        c->rope_factor = factor > 0 ? factor : 1.0;
    }
    const GgufTensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    if (!t || m->arch != ARCH_LLAMA) return;   /* qwen2 / qwen3 do not read it: gguf_model_tensors refuses it */
    int half = c->head_dim / 2;
    if (t->n_dims != 1 || t->ne[0] != (uint64_t)half)
        die_user(g->path, t->name, "ne [%" PRIu64 "%s], expected [%d] (head size %d / 2)", t->ne[0],
                 t->n_dims > 1 ? ", ..." : "", half, c->head_dim);
    float *f = ARENA_ARRAY(a, float, half);
    for (int i = 0; i < half; i++) {
        uint16_t h;
        switch (t->type) {
        case GGML_TYPE_F32: memcpy(&f[i], t->data + 4 * i, 4); break;
        case GGML_TYPE_F16: memcpy(&h, t->data + 2 * i, 2); f[i] = cvt_f16_to_f32(h); break;
        case GGML_TYPE_BF16: memcpy(&h, t->data + 2 * i, 2); f[i] = cvt_bf16_to_f32(h); break;
        default: die_user(g->path, t->name, "type %s is not supported (supported: F32, F16, BF16)",
                          ggml_type_name(t->type));
        }
        if (!(f[i] > 0) || isinf(f[i])) die_user(g->path, t->name, "element %d is %g, not a positive factor", i, f[i]);
    }
    c->rope_freq_factors = f;
}

/* bos / eos ids (generation stops at each of eos, eot and eom, as llama.cpp's end-of-generation tokens), the vocab
 * from token_embd.weight, and the sampling defaults llama.cpp takes from general.sampling.* */
static void read_tokens_and_sampling(Arena *a, const GgufModel *m, ModelConfig *c) {
    const GgufFile *g = &m->file;
    const GgufTensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb) die_user(g->path, "token_embd.weight", "tensor missing (the embedding; its rows are the vocabulary)");
    if (emb->n_dims != 2 || emb->ne[0] != (uint64_t)c->hidden_size || emb->ne[1] > INT_MAX)
        die_user(g->path, emb->name, "ne [%" PRIu64 ", %" PRIu64 "%s], expected [%d, vocabulary size]", emb->ne[0],
                 emb->ne[1], emb->n_dims > 2 ? ", ..." : "", c->hidden_size);
    c->vocab_size = (int)emb->ne[1];
    const char *vkey = arch_key(a, m, "vocab_size");
    int v = get_size(g, vkey, false, c->vocab_size, 1);
    if (v != c->vocab_size) die_user(g->path, vkey, "%d differs from token_embd.weight's %d rows", v, c->vocab_size);
    const GgufKV *toks;
    if (gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_STRING, &toks) && toks->count != (uint64_t)c->vocab_size)
        die_user(g->path, "tokenizer.ggml.tokens", "%" PRIu64 " tokens, but token_embd.weight has %d rows",
                 toks->count, c->vocab_size);
    c->bos_token_id = token_id(g, "tokenizer.ggml.bos_token_id", c->vocab_size);
    static const char *const eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < COUNT(eos_keys); i++) {
        int id = token_id(g, eos_keys[i], c->vocab_size);
        bool dup = id < 0;
        for (int k = 0; k < c->n_eos; k++) dup |= c->eos_token_ids[k] == id;
        if (!dup) c->eos_token_ids[c->n_eos++] = id;
    }
    /* llama.cpp's defaults, as without generation_config.json (config.c), where the file recommends no value */
    config_llamacpp_sampling(c);
    static const char *const keys[5] = {"general.sampling.temp", "general.sampling.top_k", "general.sampling.top_p",
                                        "general.sampling.min_p", "general.sampling.penalty_repeat"};
    c->temperature = get_num(g, keys[0], c->temperature, 0, false, -1);
    c->top_k = get_size(g, keys[1], false, c->top_k, 0);
    c->top_p = get_num(g, keys[2], c->top_p, 0, true, 1.0);
    c->min_p = get_num(g, keys[3], c->min_p, 0, false, 1.0);
    c->repetition_penalty = get_num(g, keys[4], c->repetition_penalty, 0, true, -1);
    for (int i = 0; i < 5; i++)
        if (gguf_find_kv(g, keys[i])) c->sampling_from[i] = keys[i];
    c->do_sample = c->temperature > 0;
}

void gguf_model_open(Arena *a, const char *path, const ConfigOptions *opts, GgufModel *m, ModelConfig *c) {
    memset(m, 0, sizeof *m);
    memset(c, 0, sizeof *c);
    gguf_open(a, path, &m->file);
    const GgufFile *g = &m->file;
    c->dir = c->config_path = g->path;
    read_arch(a, m, c);
    check_keys(a, m, opts, c);

    GgufStr s;
    if (gguf_get_str(g, "general.type", &s) && !(s.len == 5 && !memcmp(s.s, "model", 5)))
        die_user(g->path, "general.type", "\"%.*s\" is not a model (llmcc builds general.type \"model\"; an adapter "
                 "or a projector is not one)", (int)(s.len < 32 ? s.len : 32), s.s);
    int parts = get_size(g, "split.count", false, 1, 0);
    if (parts > 1)
        die_user(g->path, "split.count", "a model split into %d files is not supported yet (llama-gguf-split --merge "
                 "makes one file)", parts);

    c->num_hidden_layers = get_size(g, arch_key(a, m, "block_count"), true, 0, 1);
    c->max_position_embeddings = get_size(g, arch_key(a, m, "context_length"), true, 0, 1);
    c->hidden_size = get_size(g, arch_key(a, m, "embedding_length"), true, 0, 1);
    c->intermediate_size = get_size(g, arch_key(a, m, "feed_forward_length"), true, 0, 1);
    const char *hkey = arch_key(a, m, "attention.head_count"), *kvkey = arch_key(a, m, "attention.head_count_kv");
    c->num_attention_heads = get_size(g, hkey, true, 0, 1);
    c->num_key_value_heads = get_size(g, kvkey, false, c->num_attention_heads, 1);
    if (c->num_attention_heads % c->num_key_value_heads)
        die_user(g->path, kvkey, "%d does not divide %s %d", c->num_key_value_heads, hkey, c->num_attention_heads);
    const char *kkey = arch_key(a, m, "attention.key_length");
    if (gguf_find_kv(g, kkey)) {
        c->head_dim = get_size(g, kkey, true, 0, 1);
    } else {
        if (c->hidden_size % c->num_attention_heads)
            die_user(g->path, hkey, "%d does not divide the embedding length %d (and there is no %s)",
                     c->num_attention_heads, c->hidden_size, kkey);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    const char *vkey = arch_key(a, m, "attention.value_length"), *rkey = arch_key(a, m, "rope.dimension_count");
    int vlen = get_size(g, vkey, false, c->head_dim, 1), rot = get_size(g, rkey, false, c->head_dim, 1);
    if (vlen != c->head_dim)
        die_user(g->path, vkey, "%d differs from the key length %d (llmcc's attention has one head size)", vlen,
                 c->head_dim);
    if (rot != c->head_dim)
        die_user(g->path, rkey, "%d is not the head size %d: partial rotary embeddings are not supported", rot,
                 c->head_dim);
    /* rotary embeddings rotate pairs of dimensions */
    if (c->head_dim % 2) die_user(g->path, kkey, "must be even for rotary embeddings, got %d", c->head_dim);
    /* llama.cpp requires it for these architectures */
    const char *ekey = arch_key(a, m, "attention.layer_norm_rms_epsilon");
    if (!gguf_find_kv(g, ekey)) die_user(g->path, ekey, "missing (required)");
    c->rms_norm_eps = get_num(g, ekey, 0, 0, true, -1);
    read_rope(a, m, c);

    /* what llama.cpp's loaders take from the tensors: an absent output.weight ties the embedding; biases where
     * the first layer has them (every layer must then); Qwen3's per-head q/k norms always */
    c->tie_word_embeddings = !gguf_find_tensor(g, "output.weight");
    c->attention_bias = gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    c->o_bias = gguf_find_tensor(g, "blk.0.attn_output.bias") != NULL;
    c->mlp_bias = gguf_find_tensor(g, "blk.0.ffn_gate.bias") != NULL;
    c->qk_norm = c->arch == ARCH_QWEN3;
    read_tokens_and_sampling(a, m, c);
    model_config_check_limits(c, g->path, m->arch_name);
    /* the layers the tensors hold, before anything is sized from block_count (a tensor past it is refused by
     * name where the tensors are read) */
    int held = checkpoint_layers(g->n_tensors, gguf_tensor_name, g, "blk.");
    if (held < c->num_hidden_layers)
        die_user(g->path, arch_key(a, m, "block_count"), "%d, but the file's tensors hold %d layer%s: blk.%d.* is "
                 "missing", c->num_hidden_layers, held, held == 1 ? "" : "s", held);
}

/* ---- the tensors ---- */

/* llama.cpp's names (a layer's after "blk.N.") and the Hugging Face names of the graph builder (after
 * "model.layers.N."), as convert_hf_to_gguf.py's tensor map pairs them for these architectures */
typedef struct { const char *gguf, *hf; } NamePair;
static const NamePair MODEL_NAMES[] = {
    {"token_embd.weight", "model.embed_tokens.weight"}, {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
static const NamePair LAYER_NAMES[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"}, {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"}, {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"}, {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"}, {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.weight", "mlp.up_proj.weight"}, {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.weight", "mlp.down_proj.weight"}, {"ffn_down.bias", "mlp.down_proj.bias"},
};

/* "PREFIX<layer>.REST" with a decimal layer number written as printf writes it; *rest is REST. */
static bool layer_name(const char *name, const char *prefix, int *layer, const char **rest) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl)) return false;
    const char *p = name + pl;
    long v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++) v = v * 10 + (*p - '0');
    if (!digits || *p != '.' || (digits > 1 && name[pl] == '0')) return false;
    *layer = (int)v;
    *rest = p + 1;
    return true;
}

/* The other name of a tensor: to_hf, the Hugging Face name of GGUF name, else the GGUF name of Hugging Face name;
 * NULL when it has none. */
static const char *rename_tensor(Arena *a, const char *name, bool to_hf) {
    for (size_t i = 0; i < COUNT(MODEL_NAMES); i++)
        if (!strcmp(name, to_hf ? MODEL_NAMES[i].gguf : MODEL_NAMES[i].hf))
            return to_hf ? MODEL_NAMES[i].hf : MODEL_NAMES[i].gguf;
    int layer;
    const char *rest;
    if (!layer_name(name, to_hf ? "blk." : "model.layers.", &layer, &rest)) return NULL;
    for (size_t i = 0; i < COUNT(LAYER_NAMES); i++)
        if (!strcmp(rest, to_hf ? LAYER_NAMES[i].gguf : LAYER_NAMES[i].hf))
            return arena_printf(a, to_hf ? "model.layers.%d.%s" : "blk.%d.%s", layer,
                                to_hf ? LAYER_NAMES[i].hf : LAYER_NAMES[i].gguf);
    return NULL;
}

/* The element type of a ggml tensor type that llmcc compiles; false for the others: the float types, and the
 * block types of runtime/dtypes.h (a row there is a type llmcc takes). */
static bool ggml_weight_dtype(GgmlType t, StDtype *out) {
    switch (t) {
    case GGML_TYPE_F32: *out = ST_F32; return true;
    case GGML_TYPE_F16: *out = ST_F16; return true;
    case GGML_TYPE_BF16: *out = ST_BF16; return true;
    /* the block types: runtime/dtypes.h's ggml column */
#define GGML_BLOCK_CASE(id, name, bytes, block, ggml) case ggml: *out = ST_##id; return true;
    BLOCK_DTYPES(GGML_BLOCK_CASE)
#undef GGML_BLOCK_CASE
    default: return false;
    }
}

static const char *ne_text(Arena *a, int n, const uint64_t *ne) {
    Str s = {0};
    str_append(&s, "[", 1);
    for (int i = 0; i < n; i++) str_printf(&s, "%s%" PRIu64, i ? ", " : "", ne[i]);
    str_append(&s, "]", 1);
    const char *r = arena_strdup(a, s.s);
    str_free(&s);
    return r;
}

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* convert_hf_to_gguf.py's LlamaModel.permute stored each head's rows (h, j, i), j < 2, i < hd / 2, at file row
 * h * hd + 2i + j (pairs for ggml's RoPE); Hugging Face's row h * hd + j * hd / 2 + i is that file row. */
static const int64_t *unpermute_rows(Arena *a, int heads, int hd) {
    int64_t *from = ARENA_ARRAY(a, int64_t, (size_t)heads * (size_t)hd);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t i = 0; i < hd / 2; i++) from[h * hd + j * (hd / 2) + i] = h * hd + 2 * i + j;
    return from;
}

void gguf_model_tensors(Arena *a, GgufModel *m, const ModelConfig *cfg, StModel *st) {
    const GgufFile *g = &m->file;
    /* the weights the graph builder reads, with their shapes: a graph built without weights lists them */
    Graph graph;
    WeightSource none = {NULL, DT_F32};
    graph_build(a, &graph, cfg, &none, 1, 1);
    StModel *want = &m->want;
    st_close(want);
    for (int i = 0; i < graph.n; i++) {
        const GNode *n = graph.nodes[i];
        if (n->op != G_WEIGHT) continue;
        StTensor t = {.name = n->name, .ndim = n->ndim, .file = g->path};
        memcpy(t.shape, n->dims, sizeof(int64_t) * (size_t)n->ndim);
        st_add_tensor(want, &t);
    }
    /* every tensor of the file is one of them (rope_freqs.weight went into the config) */
    for (int i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name, *hf = rename_tensor(a, name, true);
        if (!strcmp(name, "rope_freqs.weight") && cfg->rope_freq_factors) continue;
        if (!hf)
            die_user(g->path, name, "not a tensor llmcc knows for GGUF architecture %s (token_embd, output_norm, "
                     "output, blk.N.attn_* and blk.N.ffn_* of docs/gguf.md)", m->arch_name);
        if (!st_find(want, hf))
            die_user(g->path, name, "tensor not used by the %s model the metadata describes (llmcc refuses what it "
                     "would leave out, as llama.cpp does)", m->arch_name);
    }
    /* and every one of them is in the file, shaped and typed as the graph needs */
    m->st = st;
    m->row_from = ARENA_ARRAY(a, const int64_t *, want->n + 1);
    for (int i = 0; i < want->n; i++) {
        const StTensor *w = &want->t[i];
        const char *name = rename_tensor(a, w->name, false);
        CHECK(name, "no GGUF name for %s", w->name);
        uint64_t ne[GGUF_MAX_DIMS];
        for (int d = 0; d < w->ndim; d++) ne[d] = (uint64_t)w->shape[w->ndim - 1 - d];
        const GgufTensor *t = gguf_find_tensor(g, name);
        if (!t) die_user(g->path, name, "tensor missing (expected ne %s)", ne_text(a, w->ndim, ne));
        bool same = t->n_dims == w->ndim;
        for (int d = 0; same && d < w->ndim; d++) same = t->ne[d] == ne[d];
        if (!same)
            die_user(g->path, name, "ne %s, expected %s", ne_text(a, t->n_dims, t->ne), ne_text(a, w->ndim, ne));
        StTensor s = {.name = w->name, .ndim = w->ndim, .data = t->data, .nbytes = (size_t)t->nbytes,
                      .file = g->path};
        memcpy(s.shape, w->shape, sizeof s.shape);
        if (!ggml_weight_dtype(t->type, &s.dtype))
            die_user(g->path, name, "type %s is not supported yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                     "Q5_1, Q4_K, Q5_K, Q6_K)", ggml_type_name(t->type));
        CHECK(st->n == i, "tensor %d of %d", st->n, i);
        st_add_tensor(st, &s);
        /* llama's q and k: heads of the projection's own (q: attention heads, k: key/value heads) */
        bool q = has_suffix(w->name, "q_proj.weight") || has_suffix(w->name, "q_proj.bias");
        bool k = has_suffix(w->name, "k_proj.weight") || has_suffix(w->name, "k_proj.bias");
        if (m->permuted_qk && (q || k))
            m->row_from[i] = unpermute_rows(a, q ? cfg->num_attention_heads : cfg->num_key_value_heads, cfg->head_dim);
    }
}

static int tensor_index(const GgufModel *m, const char *name) {
    const StTensor *t = m->st ? st_find(m->st, name) : NULL;
    CHECK(t, "%s is not a tensor of the GGUF model", name);
    return (int)(t - m->st->t);
}

const int64_t *gguf_model_row_order(const GgufModel *m, const char *name) { return m->row_from[tensor_index(m, name)]; }

void gguf_model_pack_source(const GgufModel *m, const char *name, PackSource *ps) {
    const StTensor *t = &m->st->t[tensor_index(m, name)];
    ps->src_path = m->file.path;
    ps->src_off = (uint64_t)(t->data - m->file.base);
    ps->row_from = gguf_model_row_order(m, name);
}

void gguf_model_close(GgufModel *m) {
    st_close(&m->want);
    gguf_close(&m->file);
}
