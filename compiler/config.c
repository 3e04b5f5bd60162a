/* config.c: finds the model directory and reads config.json and
 * generation_config.json into a ModelConfig (see config.h). Anything the
 * generated code would silently get wrong is rejected here instead. */
#include "config.h"
#include "json.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *rope_type_name(RopeScalingType t) {
    switch (t) {
    case ROPE_NONE: return "none";
    case ROPE_LINEAR: return "linear";
    case ROPE_LLAMA3: return "llama3";
    }
    return "?";
}

/* ---- typed getters: null counts as absent, since HF writes "key": null for defaults ---- */

static int present(const Json *j, int obj, const char *key) {
    int v = json_find(j, obj, key);
    return (v < 0 || json_is_null(j, v)) ? -1 : v;
}

static int get_int(Arena *a, const Json *j, int obj, const char *key, const char *name, bool required, int def, int min) {
    int v = present(j, obj, key);
    if (v < 0) {
        if (required) die_user(j->path, name, "missing (required)");
        return def;
    }
    int64_t x;
    if (!json_get_int64(j, v, &x))
        die_user(j->path, name, "must be an integer, got %s", json_raw(a, j, v));
    if (x < min) die_user(j->path, name, "must be %s, got %lld", min > 0 ? "positive" : "non-negative", (long long)x);
    if (x > INT_MAX) die_user(j->path, name, "%lld is too large", (long long)x);
    return (int)x;
}

/* lo_open: value must be > lo (else >= lo); hi < 0: no upper bound. */
static double get_num(Arena *a, const Json *j, int obj, const char *key, const char *name, bool required, double def,
                      double lo, bool lo_open, double hi) {
    int v = present(j, obj, key);
    if (v < 0) {
        if (required) die_user(j->path, name, "missing (required)");
        return def;
    }
    double x;
    if (!json_get_double(j, v, &x)) die_user(j->path, name, "must be a number, got %s", json_raw(a, j, v));
    if (lo_open ? !(x > lo) : !(x >= lo)) die_user(j->path, name, "must be %s %g, got %s", lo_open ? ">" : ">=", lo, json_raw(a, j, v));
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

static const char *get_str(Arena *a, const Json *j, int obj, const char *key) {
    int v = present(j, obj, key);
    if (v < 0) return NULL;
    const char *s = json_get_str(a, j, v, NULL);
    if (!s) die_user(j->path, key, "must be a string, got %s", json_raw(a, j, v));
    return s;
}

static int token_id(Arena *a, const Json *j, int v, const char *key, int vocab) {
    int64_t x;
    if (!json_get_int64(j, v, &x)) die_user(j->path, key, "token ids must be integers, got %s", json_raw(a, j, v));
    if (x < 0 || x >= vocab) die_user(j->path, key, "token id %lld is outside the vocabulary (vocab_size %d)", (long long)x, vocab);
    return (int)x;
}

/* bos_token_id: int, list (first is used), or null. Returns false when absent. */
static bool read_bos(Arena *a, const Json *j, int obj, int vocab, int *out) {
    int v = json_find(j, obj, "bos_token_id");
    if (v < 0) return false;
    if (json_is_null(j, v)) { *out = -1; return true; }
    if (json_type(j, v) == JSON_ARRAY) {
        *out = json_size(j, v) ? token_id(a, j, v + 1, "bos_token_id", vocab) : -1;
        return true;
    }
    *out = token_id(a, j, v, "bos_token_id", vocab);
    return true;
}

static bool read_eos(Arena *a, const Json *j, int obj, int vocab, ModelConfig *c) {
    int v = json_find(j, obj, "eos_token_id");
    if (v < 0) return false;
    c->n_eos = 0;
    if (json_is_null(j, v)) return true;
    if (json_type(j, v) != JSON_ARRAY) {
        c->eos_token_ids[c->n_eos++] = token_id(a, j, v, "eos_token_id", vocab);
        return true;
    }
    if (json_size(j, v) > LLMCC_MAX_EOS)
        die_user(j->path, "eos_token_id", "%d ids given, at most %d supported", json_size(j, v), LLMCC_MAX_EOS);
    for (int i = 0, e = v + 1; i < json_size(j, v); i++, e = json_next(j, e)) {
        int id = token_id(a, j, e, "eos_token_id", vocab);
        bool dup = false;
        for (int k = 0; k < c->n_eos; k++) dup |= c->eos_token_ids[k] == id;
        if (!dup) c->eos_token_ids[c->n_eos++] = id;
    }
    return true;
}

static void read_rope_scaling(Arena *a, const Json *j, ModelConfig *c) {
    c->rope_type = ROPE_NONE;
    c->rope_factor = 1.0;
    int rs = present(j, 0, "rope_scaling");
    if (rs < 0) return;
    if (json_type(j, rs) != JSON_OBJECT) die_user(j->path, "rope_scaling", "must be an object or null, got %s", json_raw(a, j, rs));
    const char *tkey = "rope_scaling.rope_type";
    int tv = present(j, rs, "rope_type");
    if (tv < 0) { tv = present(j, rs, "type"); tkey = "rope_scaling.type"; }
    if (tv < 0) die_user(j->path, "rope_scaling.rope_type", "missing");
    const char *type = json_get_str(a, j, tv, NULL);
    if (!type) die_user(j->path, tkey, "must be a string, got %s", json_raw(a, j, tv));
    if (strcmp(type, "default") == 0) return;
    if (strcmp(type, "linear") == 0) {
        c->rope_type = ROPE_LINEAR;
        c->rope_factor = get_num(a, j, rs, "factor", "rope_scaling.factor", true, 1, 0, true, -1);
        return;
    }
    if (strcmp(type, "llama3") == 0) {
        c->rope_type = ROPE_LLAMA3;
        c->rope_factor = get_num(a, j, rs, "factor", "rope_scaling.factor", true, 1, 0, true, -1);
        c->rope_low_freq_factor = get_num(a, j, rs, "low_freq_factor", "rope_scaling.low_freq_factor", true, 1, 0, true, -1);
        c->rope_high_freq_factor = get_num(a, j, rs, "high_freq_factor", "rope_scaling.high_freq_factor", true, 4, 0, true, -1);
        c->rope_original_max_pos = get_int(a, j, rs, "original_max_position_embeddings",
                                           "rope_scaling.original_max_position_embeddings", true, 0, 1);
        /* the llama3 ramp divides by (high - low) */
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
            die_user(j->path, "rope_scaling.high_freq_factor", "must be greater than low_freq_factor (%g), got %g",
                     c->rope_low_freq_factor, c->rope_high_freq_factor);
        return;
    }
    die_user(j->path, tkey, "\"%s\" is not supported (supported: linear, llama3)", type);
}

static void read_generation_config(Arena *a, const char *dir, ModelConfig *c) {
    c->temperature = 1.0; c->top_p = 1.0; c->top_k = 0; c->min_p = 0.0; c->repetition_penalty = 1.0;
    c->do_sample = false;
    const char *path = path_join(a, dir, "generation_config.json");
    c->has_generation_config = file_exists(path);
    if (!c->has_generation_config) return;
    Json j;
    json_load_file(a, &j, path);
    if (json_type(&j, 0) != JSON_OBJECT) die_user(path, NULL, "not a JSON object");
    int bos;
    if (read_bos(a, &j, 0, c->vocab_size, &bos)) c->bos_token_id = bos;
    read_eos(a, &j, 0, c->vocab_size, c);
    c->temperature = get_num(a, &j, 0, "temperature", "temperature", false, 1.0, 0, false, -1);
    c->top_p = get_num(a, &j, 0, "top_p", "top_p", false, 1.0, 0, true, 1.0);
    c->top_k = get_int(a, &j, 0, "top_k", "top_k", false, 0, 0);
    c->min_p = get_num(a, &j, 0, "min_p", "min_p", false, 0.0, 0, false, 1.0);
    c->repetition_penalty = get_num(a, &j, 0, "repetition_penalty", "repetition_penalty", false, 1.0, 0, true, -1);
    c->do_sample = get_bool(a, &j, 0, "do_sample", false);
    if (!c->do_sample) c->temperature = 0.0;   /* HF generate() is greedy unless do_sample */
}

void model_config_load(Arena *a, const char *dir, ModelConfig *c) {
    memset(c, 0, sizeof *c);
    c->dir = arena_strdup(a, dir);
    c->config_path = path_join(a, dir, "config.json");
    const char *path = c->config_path;
    if (!file_exists(path)) die_user(path, NULL, "not found (a Hugging Face model directory has config.json)");
    Json j;
    json_load_file(a, &j, path);
    if (json_type(&j, 0) != JSON_OBJECT) die_user(path, NULL, "not a JSON object");

    bool qwen;
    int ar = present(&j, 0, "architectures");
    if (ar >= 0) {
        if (json_type(&j, ar) != JSON_ARRAY || json_size(&j, ar) < 1)
            die_user(path, "architectures", "must be a non-empty list, got %s", json_raw(a, &j, ar));
        const char *arch = json_get_str(a, &j, ar + 1, NULL);
        if (!arch) die_user(path, "architectures", "must be a list of strings, got %s", json_raw(a, &j, ar));
        if (strcmp(arch, "LlamaForCausalLM") == 0) qwen = false;
        else if (strcmp(arch, "Qwen2ForCausalLM") == 0) qwen = true;
        else die_user(path, "architectures", "\"%s\" is not supported (supported: LlamaForCausalLM, Qwen2ForCausalLM)", arch);
    } else {
        const char *mt = get_str(a, &j, 0, "model_type");
        if (!mt) die_user(path, "architectures", "missing (and no model_type)");
        if (strcmp(mt, "llama") == 0) qwen = false;
        else if (strcmp(mt, "qwen2") == 0) qwen = true;
        else die_user(path, "model_type", "\"%s\" is not supported (supported: llama, qwen2)", mt);
    }
    c->architecture = qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    c->family = qwen ? "qwen" : "llama";

    c->hidden_size = get_int(a, &j, 0, "hidden_size", "hidden_size", true, 0, 1);
    c->intermediate_size = get_int(a, &j, 0, "intermediate_size", "intermediate_size", true, 0, 1);
    c->num_hidden_layers = get_int(a, &j, 0, "num_hidden_layers", "num_hidden_layers", true, 0, 1);
    c->num_attention_heads = get_int(a, &j, 0, "num_attention_heads", "num_attention_heads", true, 0, 1);
    c->vocab_size = get_int(a, &j, 0, "vocab_size", "vocab_size", true, 0, 1);
    c->num_key_value_heads = get_int(a, &j, 0, "num_key_value_heads", "num_key_value_heads", false, c->num_attention_heads, 1);
    if (c->num_attention_heads % c->num_key_value_heads)
        die_user(path, "num_key_value_heads", "%d does not divide num_attention_heads %d", c->num_key_value_heads, c->num_attention_heads);
    if (present(&j, 0, "head_dim") >= 0) {
        c->head_dim = get_int(a, &j, 0, "head_dim", "head_dim", true, 0, 1);
    } else {
        if (c->hidden_size % c->num_attention_heads)
            die_user(path, "num_attention_heads", "%d does not divide hidden_size %d (and there is no head_dim)",
                     c->num_attention_heads, c->hidden_size);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    /* rotary embeddings rotate pairs of dimensions */
    if (c->head_dim % 2) die_user(path, "head_dim", "must be even for rotary embeddings, got %d", c->head_dim);

    c->rms_norm_eps = get_num(a, &j, 0, "rms_norm_eps", "rms_norm_eps", false, 1e-6, 0, true, -1);
    c->rope_theta = get_num(a, &j, 0, "rope_theta", "rope_theta", false, 10000.0, 0, true, -1);
    c->max_position_embeddings = get_int(a, &j, 0, "max_position_embeddings", "max_position_embeddings", false, 2048, 1);
    c->tie_word_embeddings = get_bool(a, &j, 0, "tie_word_embeddings", false);
    read_rope_scaling(a, &j, c);

    const char *act = get_str(a, &j, 0, "hidden_act");
    if (act && strcmp(act, "silu") != 0) die_user(path, "hidden_act", "\"%s\" is not supported (supported: silu)", act);

    if (qwen) {
        /* Qwen2 always has q/k/v biases and never o_proj or MLP biases. */
        c->attention_bias = true; c->o_bias = false; c->mlp_bias = false;
        if (get_bool(a, &j, 0, "use_sliding_window", false))
            die_user(path, "use_sliding_window", "true is not supported (sliding-window attention)");
    } else {
        c->attention_bias = c->o_bias = get_bool(a, &j, 0, "attention_bias", false);
        c->mlp_bias = get_bool(a, &j, 0, "mlp_bias", false);
    }

    c->torch_dtype = get_str(a, &j, 0, "torch_dtype");
    if (!c->torch_dtype) c->torch_dtype = get_str(a, &j, 0, "dtype");   /* transformers >= 4.56 */

    c->bos_token_id = -1;
    int bos;
    if (read_bos(a, &j, 0, c->vocab_size, &bos)) c->bos_token_id = bos;
    read_eos(a, &j, 0, c->vocab_size, c);
    read_generation_config(a, dir, c);
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
    if (root && !strchr(model, '/')) {
        const char *d = path_join(a, path_join(a, root, "models"), model);
        if (has_config(a, d)) return d;
    }
    const char *hub = hf_hub_dir(a);
    const char *snap = hf_snapshot(a, hub, model);
    if (snap) return snap;
    /* A directory without config.json: let the config loader say exactly that. */
    if (dir_exists(model)) return arena_strdup(a, model);
    die_user(model, NULL, "not found (looked for a directory, models/%s, and the Hugging Face cache at %s)", model, hub);
}
