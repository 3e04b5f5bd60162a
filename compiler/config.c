/* config.c: finds the model directory and reads config.json and
 * generation_config.json into a ModelConfig (see config.h). Anything the
 * generated code would silently get wrong is rejected here instead. */
#include "config.h"
#include "json.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *rope_type_name(RopeScalingType t) {
    static const char *const names[] = {[ROPE_NONE] = "none", [ROPE_LINEAR] = "linear", [ROPE_LLAMA3] = "llama3"};
    return t <= ROPE_LLAMA3 ? names[t] : "?";
}

/* ---- typed getters: null counts as absent, since HF writes "key": null for defaults ---- */

static int present(const Json *j, int obj, const char *key) {
    int v = json_find(j, obj, key);
    return (v < 0 || json_is_null(j, v)) ? -1 : v;
}

/* The value of obj's key (-1: absent); messages name it `prefix.key` (prefix NULL: key). A required key is
 * an error when absent. */
static int lookup(Arena *a, const Json *j, int obj, const char *prefix, const char *key, bool required,
                  const char **name) {
    *name = prefix ? arena_printf(a, "%s.%s", prefix, key) : key;
    int v = present(j, obj, key);
    if (v < 0 && required) die_user(j->path, *name, "missing (required)");
    return v;
}

static int get_int(Arena *a, const Json *j, int obj, const char *prefix, const char *key, bool required, int def,
                   int min) {
    const char *name;
    int v = lookup(a, j, obj, prefix, key, required, &name);
    if (v < 0) return def;
    int64_t x;
    if (!json_get_int64(j, v, &x))
        die_user(j->path, name, "must be an integer, got %s", json_raw(a, j, v));
    if (x < min) die_user(j->path, name, "must be %s, got %lld", min > 0 ? "positive" : "non-negative", (long long)x);
    if (x > INT_MAX) die_user(j->path, name, "%lld is too large", (long long)x);
    return (int)x;
}

/* lo_open: value must be > lo (else >= lo); hi < 0: no upper bound. */
static double get_num(Arena *a, const Json *j, int obj, const char *prefix, const char *key, bool required,
                      double def, double lo, bool lo_open, double hi) {
    const char *name;
    int v = lookup(a, j, obj, prefix, key, required, &name);
    if (v < 0) return def;
    double x;
    bool number = json_type(j, v) == JSON_PRIMITIVE && strchr("-0123456789", j->src[j->tok[v].start]);
    if (!json_get_double(j, v, &x) || !isfinite(x))   /* 1e999: a number JSON allows, past a double's range */
        die_user(j->path, name, "must be a %snumber, got %s", number ? "finite " : "", json_raw(a, j, v));
    if (lo_open ? !(x > lo) : !(x >= lo))
        die_user(j->path, name, "must be %s %g, got %s", lo_open ? ">" : ">=", lo, json_raw(a, j, v));
    if (hi >= 0 && x > hi) die_user(j->path, name, "must be <= %g, got %s", hi, json_raw(a, j, v));
    return x;
}

static bool get_bool(Arena *a, const Json *j, int obj, const char *key, bool def) {
    int v = present(j, obj, key);
    if (v < 0) return def;
    bool b;
    if (!json_is_bool(j, v, &b)) die_user(j->path, key, "must be true or false, got %s", json_raw(a, j, v));
    return b;
}

static const char *get_str(Arena *a, const Json *j, int obj, const char *prefix, const char *key) {
    const char *name;
    int v = lookup(a, j, obj, prefix, key, false, &name);
    if (v < 0) return NULL;
    const char *s = json_get_str(a, j, v, NULL);
    if (!s) die_user(j->path, name, "must be a string, got %s", json_raw(a, j, v));
    return s;
}

static int token_id(Arena *a, const Json *j, int v, const char *key, int vocab) {
    int64_t x;
    if (!json_get_int64(j, v, &x)) die_user(j->path, key, "token ids must be integers, got %s", json_raw(a, j, v));
    if (x < 0 || x >= vocab)
        die_user(j->path, key, "token id %lld is outside the vocabulary (vocab_size %d)", (long long)x, vocab);
    return (int)x;
}

/* bos_token_id: int, list (first is used), or null (-1). *out is left as it is when the key is absent. */
static void read_bos(Arena *a, const Json *j, int obj, int vocab, int *out) {
    int v = json_find(j, obj, "bos_token_id");
    if (v < 0) return;
    if (json_is_null(j, v)) *out = -1;
    else if (json_type(j, v) != JSON_ARRAY) *out = token_id(a, j, v, "bos_token_id", vocab);
    else *out = json_size(j, v) ? token_id(a, j, v + 1, "bos_token_id", vocab) : -1;
}

/* eos_token_id: int, list (duplicates dropped), or null (none); left as it is when absent. */
static void read_eos(Arena *a, const Json *j, int obj, int vocab, ModelConfig *c) {
    int v = json_find(j, obj, "eos_token_id");
    if (v < 0) return;
    c->n_eos = 0;
    if (json_is_null(j, v)) return;
    if (json_type(j, v) != JSON_ARRAY) {
        c->eos_token_ids[c->n_eos++] = token_id(a, j, v, "eos_token_id", vocab);
        return;
    }
    if (json_size(j, v) > LLMCC_MAX_EOS)
        die_user(j->path, "eos_token_id", "%d ids given, at most %d supported", json_size(j, v), LLMCC_MAX_EOS);
    for (int i = 0, e = v + 1; i < json_size(j, v); i++, e = json_next(j, e)) {
        int id = token_id(a, j, e, "eos_token_id", vocab);
        bool dup = false;
        for (int k = 0; k < c->n_eos; k++) dup |= c->eos_token_ids[k] == id;
        if (!dup) c->eos_token_ids[c->n_eos++] = id;
    }
}

/* ---- RoPE: transformers 4.x writes rope_theta and rope_scaling at the top level, transformers 5 writes
 * both inside rope_parameters. Each layout is read into a RopeSpec; where both are present, they must agree. */

typedef struct {
    bool has_theta, has_type;
    double theta;
    RopeScalingType type;
    double factor, low, high;
    int orig;
} RopeSpec;

/* The keys a rope object may hold, per type; anything else would change the frequencies unread. */
static void rope_check_keys(Arena *a, const Json *j, int obj, const char *name, const char *type, bool theta_inside) {
    static const char *const common[] = {"rope_type", "type"};
    static const char *const scaled[] = {"factor"};
    static const char *const llama3[] = {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    for (int k = json_obj_first(j, obj); k >= 0; k = json_obj_next(j, obj, k)) {
        bool ok = false;
        for (size_t i = 0; i < sizeof common / sizeof *common; i++) ok |= json_str_eq(j, k, common[i]);
        ok |= theta_inside && json_str_eq(j, k, "rope_theta");
        if (strcmp(type, "default") != 0) ok |= json_str_eq(j, k, scaled[0]);
        if (strcmp(type, "llama3") == 0)
            for (size_t i = 0; i < sizeof llama3 / sizeof *llama3; i++) ok |= json_str_eq(j, k, llama3[i]);
        if (json_str_eq(j, k, "partial_rotary_factor")) {
            double f;
            ok = json_get_double(j, k + 1, &f) && f == 1.0;
        }
        if (!ok) {
            char *key = json_get_str(a, j, k, NULL);
            die_user(j->path, arena_printf(a, "%s.%s", name, key ? key : "?"),
                     "not supported with rope_type \"%s\" (llmcc would compute RoPE without it)", type);
        }
    }
}

/* One rope object (rope_scaling, or rope_parameters when theta_inside) into s. */
static void read_rope_object(Arena *a, const Json *j, int obj, const char *name, bool theta_inside, RopeSpec *s) {
    if (json_type(j, obj) != JSON_OBJECT)
        die_user(j->path, name, "must be an object or null, got %s", json_raw(a, j, obj));
    /* the type: rope_type, or the older type */
    const char *tkey = present(j, obj, "rope_type") < 0 && present(j, obj, "type") >= 0 ? "type" : "rope_type";
    const char *type = get_str(a, j, obj, name, tkey);
    tkey = arena_printf(a, "%s.%s", name, tkey);
    if (!type && !theta_inside) die_user(j->path, tkey, "missing");
    if (!type) type = "default";
    if (theta_inside && present(j, obj, "rope_theta") >= 0) {
        s->has_theta = true;
        s->theta = get_num(a, j, obj, name, "rope_theta", true, 0, 0, true, -1);
    }
    s->has_type = true;
    s->type = ROPE_NONE;
    s->factor = 1.0;
    if (strcmp(type, "linear") == 0 || strcmp(type, "llama3") == 0) {
        s->type = strcmp(type, "linear") == 0 ? ROPE_LINEAR : ROPE_LLAMA3;
        s->factor = get_num(a, j, obj, name, "factor", true, 1, 0, true, -1);
    } else if (strcmp(type, "default") != 0) {
        die_user(j->path, tkey, "\"%s\" is not supported (supported: default, linear, llama3)", type);
    }
    rope_check_keys(a, j, obj, name, type, theta_inside);
    if (s->type != ROPE_LLAMA3) return;
    s->low = get_num(a, j, obj, name, "low_freq_factor", true, 1, 0, true, -1);
    s->high = get_num(a, j, obj, name, "high_freq_factor", true, 4, 0, true, -1);
    s->orig = get_int(a, j, obj, name, "original_max_position_embeddings", true, 0, 1);
    /* the llama3 ramp divides by (high - low) */
    if (!(s->high > s->low))
        die_user(j->path, arena_printf(a, "%s.high_freq_factor", name), "must be greater than low_freq_factor (%g), "
                 "got %g", s->low, s->high);
}

static bool rope_same_scaling(const RopeSpec *x, const RopeSpec *y) {
    if (x->type != y->type) return false;
    if (x->type == ROPE_NONE) return true;
    if (x->factor != y->factor) return false;
    return x->type != ROPE_LLAMA3 || (x->low == y->low && x->high == y->high && x->orig == y->orig);
}

static void read_rope(Arena *a, const Json *j, ModelConfig *c) {
    RopeSpec top = {0}, params = {0};
    if (present(j, 0, "rope_theta") >= 0) {
        top.has_theta = true;
        top.theta = get_num(a, j, 0, NULL, "rope_theta", true, 0, 0, true, -1);
    }
    int rs = present(j, 0, "rope_scaling");
    if (rs >= 0) read_rope_object(a, j, rs, "rope_scaling", false, &top);
    int rp = present(j, 0, "rope_parameters");
    if (rp >= 0) read_rope_object(a, j, rp, "rope_parameters", true, &params);
    if (top.has_theta && params.has_theta && top.theta != params.theta)
        die_user(j->path, "rope_parameters.rope_theta", "%s disagrees with rope_theta %s",
                 json_raw(a, j, json_find(j, rp, "rope_theta")), json_raw(a, j, json_find(j, 0, "rope_theta")));
    if (top.has_type && params.has_type && !rope_same_scaling(&top, &params))
        die_user(j->path, "rope_parameters", "%s disagrees with rope_scaling %s", json_raw(a, j, rp),
                 json_raw(a, j, rs));
    const RopeSpec *s = params.has_type ? &params : &top;
    c->rope_theta = params.has_theta ? params.theta : top.has_theta ? top.theta : 10000.0;
    c->rope_type = s->has_type ? s->type : ROPE_NONE;
    c->rope_factor = s->has_type ? s->factor : 1.0;
    c->rope_low_freq_factor = s->low;
    c->rope_high_freq_factor = s->high;
    c->rope_original_max_pos = s->orig;
}

void config_llamacpp_sampling(ModelConfig *c) {
    c->temperature = 0.8; c->top_k = 40; c->top_p = 0.95; c->min_p = 0.05; c->repetition_penalty = 1.0;
    c->do_sample = true;
    for (int i = 0; i < 5; i++) c->sampling_from[i] = "llama.cpp's default";
}

/* generation_config.json as transformers' generate() reads it (a key it lacks: GenerationConfig's default; greedy
 * unless do_sample); without one, llama.cpp's defaults, so that a free-form prompt gets sensible text */
static void read_generation_config(Arena *a, const char *dir, ModelConfig *c) {
    const char *path = path_join(a, dir, "generation_config.json");
    c->has_generation_config = file_exists(path);
    config_llamacpp_sampling(c);
    if (!c->has_generation_config) return;
    Json j;
    json_load_file(a, &j, path);
    if (json_type(&j, 0) != JSON_OBJECT) die_user(path, NULL, "not a JSON object");
    read_bos(a, &j, 0, c->vocab_size, &c->bos_token_id);
    read_eos(a, &j, 0, c->vocab_size, c);
    c->temperature = get_num(a, &j, 0, NULL, "temperature", false, 1.0, 0, false, -1);
    c->top_k = get_int(a, &j, 0, NULL, "top_k", false, 50, 0);
    c->top_p = get_num(a, &j, 0, NULL, "top_p", false, 1.0, 0, true, 1.0);
    c->min_p = get_num(a, &j, 0, NULL, "min_p", false, 0.0, 0, false, 1.0);
    c->repetition_penalty = get_num(a, &j, 0, NULL, "repetition_penalty", false, 1.0, 0, true, -1);
    static const char *const keys[5] = {"temperature", "top_k", "top_p", "min_p", "repetition_penalty"};
    for (int i = 0; i < 5; i++)
        c->sampling_from[i] = present(&j, 0, keys[i]) >= 0 ? "generation_config.json" : "transformers' default";
    c->do_sample = get_bool(a, &j, 0, "do_sample", false);
    if (!c->do_sample) {   /* HF generate() is greedy unless do_sample */
        c->temperature = 0.0;
        c->sampling_from[0] = present(&j, 0, "do_sample") >= 0 ? "generation_config.json: do_sample false"
                                                                  : "transformers' default: do_sample false";
    }
}

/* ---- the keys of config.json ----
 * No key that changes the forward pass may be ignored silently: each key is READ (this file reads it and refuses
 * the values llmcc does not implement), DEFAULT_ONLY (read; any value but the default is refused), INERT (it does
 * not change the math of an inference build; docs/errors.md says why for each), or unknown, which is refused
 * unless the user names it with --ignore-config-key (so may a DEFAULT_ONLY key be, which then counts as its
 * default). Per
 * architecture, as transformers' config classes (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig) define
 * them; tests/test_config_keys.py walks those classes. */
enum { A_LLAMA = 1 << ARCH_LLAMA, A_QWEN2 = 1 << ARCH_QWEN2, A_QWEN3 = 1 << ARCH_QWEN3, A_MISTRAL = 1 << ARCH_MISTRAL,
       A_ALL = (1 << ARCH_COUNT) - 1 };
typedef enum { KEY_READ, KEY_DEFAULT_ONLY, KEY_INERT } KeyClass;
static const struct { const char *key; unsigned archs; KeyClass cls; } CONFIG_KEYS[] = {
    /* read: the model's shape and math */
    {"architectures", A_ALL, KEY_READ}, {"model_type", A_ALL, KEY_READ}, {"hidden_size", A_ALL, KEY_READ},
    {"intermediate_size", A_ALL, KEY_READ}, {"num_hidden_layers", A_ALL, KEY_READ},
    {"num_attention_heads", A_ALL, KEY_READ}, {"num_key_value_heads", A_ALL, KEY_READ}, {"vocab_size", A_ALL, KEY_READ},
    {"head_dim", A_ALL, KEY_READ}, {"rms_norm_eps", A_ALL, KEY_READ}, {"rope_theta", A_ALL, KEY_READ},
    {"rope_scaling", A_ALL, KEY_READ}, {"rope_parameters", A_ALL, KEY_READ},
    {"max_position_embeddings", A_ALL, KEY_READ}, {"tie_word_embeddings", A_ALL, KEY_READ},
    {"hidden_act", A_ALL, KEY_READ}, {"torch_dtype", A_ALL, KEY_READ}, {"dtype", A_ALL, KEY_READ},
    {"bos_token_id", A_ALL, KEY_READ}, {"eos_token_id", A_ALL, KEY_READ},
    {"attention_bias", A_LLAMA | A_QWEN3, KEY_READ}, {"mlp_bias", A_LLAMA, KEY_READ},
    {"sliding_window", A_MISTRAL, KEY_READ},
    /* read, but only the default is implemented: another value is refused (or ignored by --ignore-config-key) */
    {"is_encoder_decoder", A_ALL, KEY_DEFAULT_ONLY}, {"rope_interleaved", A_ALL, KEY_DEFAULT_ONLY},
    {"use_mrope", A_ALL, KEY_DEFAULT_ONLY}, {"use_sliding_window", A_QWEN2 | A_QWEN3, KEY_DEFAULT_ONLY},
    {"layer_types", A_QWEN2 | A_QWEN3, KEY_DEFAULT_ONLY},
    /* inert: bookkeeping, training-only settings, other libraries' settings */
    {"_name_or_path", A_ALL, KEY_INERT}, {"transformers_version", A_ALL, KEY_INERT},
    {"_model_name_or_path", A_ALL, KEY_INERT}, {"unk_token_id", A_ALL, KEY_INERT},   /* transformers' GGUF loader */
    {"initializer_range", A_ALL, KEY_INERT}, {"use_cache", A_ALL, KEY_INERT}, {"attention_dropout", A_ALL, KEY_INERT},
    /* Qwen2/Qwen3: only used with use_sliding_window, which must be false */
    {"sliding_window", A_QWEN2 | A_QWEN3, KEY_INERT}, {"max_window_layers", A_QWEN2 | A_QWEN3, KEY_INERT},
    {"pad_token_id", A_ALL, KEY_INERT}, {"chunk_size_feed_forward", A_ALL, KEY_INERT}, {"id2label", A_ALL, KEY_INERT},
    {"label2id", A_ALL, KEY_INERT}, {"output_attentions", A_ALL, KEY_INERT},
    {"output_hidden_states", A_ALL, KEY_INERT}, {"return_dict", A_ALL, KEY_INERT}, {"problem_type", A_ALL, KEY_INERT},
    {"pretraining_tp", A_ALL, KEY_INERT}, {"is_llama_config", A_ALL, KEY_INERT},
    {"transformers.js_config", A_ALL, KEY_INERT}, {"torchscript", A_ALL, KEY_INERT}, {"use_bfloat16", A_ALL, KEY_INERT},
    {"tf_legacy_loss", A_ALL, KEY_INERT}, {"pruned_heads", A_ALL, KEY_INERT}, {"finetuning_task", A_ALL, KEY_INERT},
    {"tokenizer_class", A_ALL, KEY_INERT}, {"task_specific_params", A_ALL, KEY_INERT},
    {"is_decoder", A_ALL, KEY_INERT}, {"add_cross_attention", A_ALL, KEY_INERT},
    {"tie_encoder_decoder", A_ALL, KEY_INERT}, {"cross_attention_hidden_size", A_ALL, KEY_INERT},
    {"prefix", A_ALL, KEY_INERT}, {"sep_token_id", A_ALL, KEY_INERT}, {"decoder_start_token_id", A_ALL, KEY_INERT},
    /* generation defaults of old config.json files: llmcc takes sampling defaults from generation_config.json */
    {"max_length", A_ALL, KEY_INERT}, {"min_length", A_ALL, KEY_INERT}, {"do_sample", A_ALL, KEY_INERT},
    {"temperature", A_ALL, KEY_INERT}, {"top_k", A_ALL, KEY_INERT}, {"top_p", A_ALL, KEY_INERT},
    {"repetition_penalty", A_ALL, KEY_INERT}, {"num_beams", A_ALL, KEY_INERT},
};

const char *config_key_class(Arch arch, const char *key) {
    for (size_t i = 0; i < sizeof CONFIG_KEYS / sizeof *CONFIG_KEYS; i++)
        if ((CONFIG_KEYS[i].archs & (1u << arch)) && strcmp(CONFIG_KEYS[i].key, key) == 0)
            return CONFIG_KEYS[i].cls == KEY_READ ? "read" : CONFIG_KEYS[i].cls == KEY_INERT ? "inert" : "default-only";
    return NULL;
}

bool config_key_ignored(const ConfigOptions *o, const char *key) {
    for (int i = 0; o && i < o->n_ignore_keys; i++)
        if (strcmp(o->ignore_keys[i], key) == 0) return true;
    return false;
}

void parse_ignore_key(ConfigOptions *c, const char **keys, const char *v) {
    if (c->n_ignore_keys == 32) die_user(NULL, "--ignore-config-key", "given more than 32 times");
    keys[c->n_ignore_keys++] = v;
    c->ignore_keys = keys;
}

/* A key llmcc reads but implements only at its default: any other value is refused, unless ignored. */
static void require_false(Arena *a, const Json *j, const ConfigOptions *o, const char *key, const char *what) {
    if (!config_key_ignored(o, key) && get_bool(a, j, 0, key, false))
        die_user(j->path, key, "true is not supported (%s); --ignore-config-key %s builds without it", what, key);
}

/* Every key classified (see CONFIG_KEYS); the ignored ones recorded, to be printed by inspect. */
static void check_keys(Arena *a, const Json *j, const ConfigOptions *o, ModelConfig *c) {
    for (int i = 0; o && i < o->n_ignore_keys; i++) {
        const char *cls = config_key_class(c->arch, o->ignore_keys[i]);
        if (cls && strcmp(cls, "read") == 0)
            die_user(NULL, "--ignore-config-key", "%s is read by llmcc (it changes the model); it cannot be ignored",
                     o->ignore_keys[i]);
    }
    c->ignored_keys = ARENA_ARRAY(a, const char *, json_size(j, 0) + 1);
    for (int k = json_obj_first(j, 0); k >= 0; k = json_obj_next(j, 0, k)) {
        const char *key = json_get_str(a, j, k, NULL);
        if (!key || config_key_class(c->arch, key)) continue;
        if (config_key_ignored(o, key)) { c->ignored_keys[c->n_ignored_keys++] = key; continue; }
        if (strcmp(key, "quantization_config") == 0)
            die_user(j->path, key, "quantized checkpoints are not supported yet (a dequantized copy without this key "
                     "is)");
        die_user(j->path, key, "unknown to llmcc for %s, which cannot tell whether it changes the model; "
                 "if it does not, build with --ignore-config-key %s", c->architecture, key);
    }
}

/* layer_types (transformers 5, Qwen2/Qwen3): one entry per layer; only full attention is implemented. */
static void read_layer_types(Arena *a, const Json *j, const ConfigOptions *o, ModelConfig *c) {
    int lt = present(j, 0, "layer_types");
    if (lt < 0 || config_key_ignored(o, "layer_types")) return;
    if (json_type(j, lt) != JSON_ARRAY) die_user(j->path, "layer_types", "must be a list, got %s", json_raw(a, j, lt));
    if (json_size(j, lt) != c->num_hidden_layers)
        die_user(j->path, "layer_types", "has %d entries for %d layers", json_size(j, lt), c->num_hidden_layers);
    for (int i = 0; i < json_size(j, lt); i++)
        if (!json_str_eq(j, json_at(j, lt, i), "full_attention"))
            die_user(j->path, "layer_types", "entry %d is %s: only \"full_attention\" is supported (sliding-window "
                     "layers are not)", i, json_raw(a, j, json_at(j, lt, i)));
}

static Arch arch_from(Arena *a, const Json *j, int v, bool by_class, const char *key) {
#define X(e, cls, type, name) if (json_str_eq(j, v, by_class ? cls : type)) return e;
    ARCHITECTURES(X)
#undef X
    if (by_class)
        die_user(j->path, key, "%s is not supported (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                 "MistralForCausalLM)", json_raw(a, j, v));
    die_user(j->path, key, "%s is not supported (supported: llama, qwen2, qwen3, mistral)", json_raw(a, j, v));
}

void model_config_load(Arena *a, const char *dir, const ConfigOptions *opts, ModelConfig *c) {
    memset(c, 0, sizeof *c);
    c->dir = arena_strdup(a, dir);
    c->config_path = path_join(a, dir, "config.json");
    const char *path = c->config_path;
    if (!file_exists(path)) die_user(path, NULL, "not found (a Hugging Face model directory has config.json)");
    Json j;
    json_load_file(a, &j, path);
    if (json_type(&j, 0) != JSON_OBJECT) die_user(path, NULL, "not a JSON object");

    int ar = present(&j, 0, "architectures");
    if (ar >= 0) {
        if (json_type(&j, ar) != JSON_ARRAY || json_size(&j, ar) < 1)
            die_user(path, "architectures", "must be a non-empty list, got %s", json_raw(a, &j, ar));
        if (json_type(&j, ar + 1) != JSON_STRING)
            die_user(path, "architectures", "must be a list of strings, got %s", json_raw(a, &j, ar));
        c->arch = arch_from(a, &j, ar + 1, true, "architectures");
    } else {
        int mt = present(&j, 0, "model_type");
        if (mt < 0) die_user(path, "architectures", "missing (and no model_type)");
        if (json_type(&j, mt) != JSON_STRING)
            die_user(path, "model_type", "must be a string, got %s", json_raw(a, &j, mt));
        c->arch = arch_from(a, &j, mt, false, "model_type");
    }
    static const struct { const char *cls, *name; } archs[] = {
#define X(e, cls, type, name) {cls, name},
        ARCHITECTURES(X)
#undef X
    };
    c->architecture = archs[c->arch].cls;
    c->family = archs[c->arch].name;
    check_keys(a, &j, opts, c);

    c->hidden_size = get_int(a, &j, 0, NULL, "hidden_size", true, 0, 1);
    c->intermediate_size = get_int(a, &j, 0, NULL, "intermediate_size", true, 0, 1);
    c->num_hidden_layers = get_int(a, &j, 0, NULL, "num_hidden_layers", true, 0, 1);
    c->num_attention_heads = get_int(a, &j, 0, NULL, "num_attention_heads", true, 0, 1);
    c->vocab_size = get_int(a, &j, 0, NULL, "vocab_size", true, 0, 1);
    c->num_key_value_heads = get_int(a, &j, 0, NULL, "num_key_value_heads", false, c->num_attention_heads, 1);
    if (c->num_attention_heads % c->num_key_value_heads)
        die_user(path, "num_key_value_heads", "%d does not divide num_attention_heads %d", c->num_key_value_heads,
                 c->num_attention_heads);
    if (present(&j, 0, "head_dim") >= 0) {
        c->head_dim = get_int(a, &j, 0, NULL, "head_dim", true, 0, 1);
    } else {
        if (c->hidden_size % c->num_attention_heads)
            die_user(path, "num_attention_heads", "%d does not divide hidden_size %d (and there is no head_dim)",
                     c->num_attention_heads, c->hidden_size);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    /* rotary embeddings rotate pairs of dimensions */
    if (c->head_dim % 2) die_user(path, "head_dim", "must be even for rotary embeddings, got %d", c->head_dim);

    c->rms_norm_eps = get_num(a, &j, 0, NULL, "rms_norm_eps", false, 1e-6, 0, true, -1);
    c->max_position_embeddings = get_int(a, &j, 0, NULL, "max_position_embeddings", false, 2048, 1);
    model_config_check_limits(c, path, NULL);
    c->tie_word_embeddings = get_bool(a, &j, 0, "tie_word_embeddings", false);
    read_rope(a, &j, c);

    const char *act = get_str(a, &j, 0, NULL, "hidden_act");
    if (act && strcmp(act, "silu") != 0) die_user(path, "hidden_act", "\"%s\" is not supported (supported: silu)", act);
    require_false(a, &j, opts, "is_encoder_decoder", "llmcc builds decoder-only models");
    require_false(a, &j, opts, "rope_interleaved", "RoPE over interleaved pairs; llmcc rotates halves as transformers");
    require_false(a, &j, opts, "use_mrope", "multimodal RoPE");

    switch (c->arch) {
    case ARCH_LLAMA:
        c->attention_bias = c->o_bias = get_bool(a, &j, 0, "attention_bias", false);
        c->mlp_bias = get_bool(a, &j, 0, "mlp_bias", false);
        break;
    case ARCH_QWEN2: case ARCH_QWEN3:
        /* Qwen2 always has q/k/v biases and never o_proj or MLP biases; Qwen3 has all four or none (attention_bias)
         * and RMSNorms over each head of q and k */
        if (c->arch == ARCH_QWEN2) {
            c->attention_bias = true;
        } else {
            c->attention_bias = c->o_bias = get_bool(a, &j, 0, "attention_bias", false);
            c->qk_norm = true;
        }
        /* sliding_window and max_window_layers only matter with use_sliding_window */
        require_false(a, &j, opts, "use_sliding_window", "sliding-window attention");
        read_layer_types(a, &j, opts, c);
        break;
    case ARCH_MISTRAL:
        /* checked against the compiled context in model_config_check_context */
        c->sliding_window = get_int(a, &j, 0, NULL, "sliding_window", false, 0, 1);
        break;
    case ARCH_COUNT: CHECK(0, "no architecture");
    }

    c->torch_dtype = get_str(a, &j, 0, NULL, "torch_dtype");
    if (!c->torch_dtype) c->torch_dtype = get_str(a, &j, 0, NULL, "dtype");   /* transformers >= 4.56 */

    c->bos_token_id = -1;
    read_bos(a, &j, 0, c->vocab_size, &c->bos_token_id);
    read_eos(a, &j, 0, c->vocab_size, c);
    read_generation_config(a, dir, c);
}

void model_config_check_limits(const ModelConfig *c, const char *path, const char *gguf_arch) {
    char gkey[160];   /* not an arena: die_user need not return, and a harness that catches it must not leak */
#define CHECK_LIMIT(field, key, gguf_key, max) \
    if (c->field > (max)) { \
        if (gguf_arch) snprintf(gkey, sizeof gkey, "%.64s.%s", gguf_arch, gguf_key); \
        die_user(path, gguf_arch ? gkey : key, "%d is more than llmcc takes (%d)", c->field, (max)); \
    }
    CONFIG_LIMITS(CHECK_LIMIT)
#undef CHECK_LIMIT
}

int checkpoint_layers(int n, const char *(*names)(int i, const void *ctx), const void *ctx, const char *prefix) {
    size_t pl = strlen(prefix);
    long most = -1;
    for (int i = 0; i < n; i++) {
        const char *name = names(i, ctx);
        if (strncmp(name, prefix, pl) || name[pl] < '0' || name[pl] > '9') continue;
        char *end;
        long l = strtol(name + pl, &end, 10);
        if (*end == '.' && l > most && l < INT_MAX) most = l;
    }
    return (int)(most + 1);
}

void model_config_check_context(const ModelConfig *c, int max_ctx) {
    /* transformers masks key j for query i where i - j >= sliding_window: never within max_ctx <= window */
    if (c->sliding_window > 0 && c->sliding_window < max_ctx)
        die_user(c->config_path, "sliding_window", "%d is smaller than the compiled context %d: sliding-window "
                 "attention is not supported yet; build with --ctx %d or less", c->sliding_window, max_ctx,
                 c->sliding_window);
}

/* ---- locating the model ---- */

const char *llmcc_root(Arena *a) {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return NULL;
    buf[n] = 0;
    for (int up = 0; up < 2; up++) {
        char *s = strrchr(buf, '/');
        if (!s) return NULL;
        *s = 0;
    }
    return arena_strdup(a, buf[0] ? buf : "/");
}

static bool has_config(Arena *a, const char *dir) {
    return dir_exists(dir) && file_exists(path_join(a, dir, "config.json"));
}

static const char *hf_hub_dir(Arena *a) {
    const char *e = getenv("HF_HUB_CACHE");
    if (e && *e) return arena_strdup(a, e);
    e = getenv("HF_HOME");
    if (e && *e) return path_join(a, e, "hub");
    e = getenv("HOME");
    return path_join(a, e && *e ? e : "/", ".cache/huggingface/hub");
}

/* hub/models--ORG--NAME/snapshots/<rev>: the one refs/main names, else the newest. */
static const char *hf_snapshot(Arena *a, const char *hub, const char *model) {
    const char *slash = strchr(model, '/');
    if (!slash || slash == model || !slash[1] || strchr(slash + 1, '/') || model[0] == '.') return NULL;
    const char *repo = path_join(a, hub, arena_printf(a, "models--%.*s--%s", (int)(slash - model), model, slash + 1));
    const char *snaps = path_join(a, repo, "snapshots");
    size_t len;
    char *ref = read_file(path_join(a, repo, "refs/main"), &len);
    if (ref) {
        while (len && (ref[len - 1] == '\n' || ref[len - 1] == '\r' || ref[len - 1] == ' ')) ref[--len] = 0;
        const char *d = (len && !strchr(ref, '/')) ? path_join(a, snaps, ref) : NULL;
        free(ref);
        if (d && has_config(a, d)) return d;
    }
    DIR *dp = opendir(snaps);
    if (!dp) return NULL;
    const char *best = NULL;
    struct timespec best_t = {0, 0};
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        const char *d = path_join(a, snaps, e->d_name);
        struct stat st;
        if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode) || !has_config(a, d)) continue;
        if (!best || st.st_mtim.tv_sec > best_t.tv_sec ||
            (st.st_mtim.tv_sec == best_t.tv_sec && st.st_mtim.tv_nsec > best_t.tv_nsec)) {
            best = d; best_t = st.st_mtim;
        }
    }
    closedir(dp);
    return best;
}

const char *model_resolve_dir(Arena *a, const char *model, const char *root) {
    if (!model || !*model) die_user(NULL, NULL, "no model given");
    if (has_config(a, model)) return arena_strdup(a, model);
    if (file_exists(model) && !dir_exists(model))
        die_user(model, NULL, "not a GGUF file or model directory (a GGUF file starts with \"GGUF\"; a Hugging Face "
                 "model directory holds config.json)");
    if (root && !strchr(model, '/')) {
        const char *d = path_join(a, path_join(a, root, "models"), model);
        if (has_config(a, d)) return d;
    }
    const char *hub = hf_hub_dir(a);
    const char *snap = hf_snapshot(a, hub, model);
    if (snap) return snap;
    /* A directory without config.json: let the config loader say exactly that. */
    if (dir_exists(model)) return arena_strdup(a, model);
    die_user(model, NULL, "not found (looked for a directory, models/%s, and the Hugging Face cache at %s)", model,
             hub);
}
