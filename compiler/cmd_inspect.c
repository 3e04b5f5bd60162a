/* cmd_inspect.c: `llmcc inspect MODEL [--config-only]`: prints what llmcc
 * understood of a checkpoint (every ModelConfig field, then the tensors), so
 * a user can see why a model compiles the way it does before compiling it.
 * `llmcc inspect FILE.gguf` is main.c's cmd_inspect_gguf (gguf_print, or this
 * file's model_config_print of what gguf_model.c reads), so that this file
 * links without the GGUF reader (tests/c/st_dump.c).
 * argv[0] is the subcommand name ("inspect"). */
#include "config.h"
#include "json.h"
#include "safetensors.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *basename_of(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Every ModelConfig field as "name: value", by its type: S string, I int, D double, B bool. */
void model_config_print(const ModelConfig *c) {
#define S(f) printf(#f ": %s\n", c->f);
#define I(f) printf(#f ": %d\n", c->f);
#define D(f) printf(#f ": %.9g\n", c->f);
#define B(f) printf(#f ": %s\n", c->f ? "true" : "false");
    S(dir) S(config_path) S(architecture) S(family)
    I(hidden_size) I(intermediate_size) I(num_hidden_layers) I(num_attention_heads) I(num_key_value_heads)
    I(head_dim) D(rms_norm_eps) D(rope_theta)
    printf("rope_type: %s\n", rope_type_name(c->rope_type));
    D(rope_factor) D(rope_low_freq_factor) D(rope_high_freq_factor) I(rope_original_max_pos)
    if (c->rope_freq_factors) {   /* only GGUF files have them: a directory's output stays as it was */
        printf("rope_freq_factors: [");
        for (int i = 0; i < c->head_dim / 2; i++) printf("%s%.9g", i ? ", " : "", c->rope_freq_factors[i]);
        printf("]\n");
    }
    I(max_position_embeddings) I(vocab_size)
    B(tie_word_embeddings) B(attention_bias) B(o_bias) B(mlp_bias) B(qk_norm) I(sliding_window)
    for (int i = 0; i < c->n_ignored_keys; i++) printf("ignored_key: %s\n", c->ignored_keys[i]);
    printf("torch_dtype: %s\n", c->torch_dtype ? c->torch_dtype : "(none)");
    I(bos_token_id)
    printf("eos_token_ids: [");
    for (int i = 0; i < c->n_eos; i++) printf("%s%d", i ? ", " : "", c->eos_token_ids[i]);
    printf("]\n");
    B(has_generation_config) D(temperature) D(top_p) I(top_k) D(min_p) D(repetition_penalty) B(do_sample)
#undef S
#undef I
#undef D
#undef B
}

#define INSPECT_USAGE \
    "usage: llmcc inspect MODEL|FILE.gguf [--config-only] [--config-keys] [--ignore-config-key KEY]..."

/* --config-keys: how each key of config.json is treated (docs/errors.md, "Keys of config.json") */
static void print_config_keys(Arena *a, const ModelConfig *c) {
    Json j;
    json_load_file(a, &j, c->config_path);
    for (int k = json_obj_first(&j, 0); k >= 0; k = json_obj_next(&j, 0, k)) {
        const char *key = json_get_str(a, &j, k, NULL), *cls = key ? config_key_class(c->arch, key) : NULL;
        printf("config_key: %s %s\n", key ? key : "?", cls ? cls : "ignored");
    }
}

int cmd_inspect(int argc, char **argv) {
    const char *model = NULL;
    bool config_only = false, config_keys = false;
    const char *ignore[32];
    ConfigOptions co = {ignore, 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config-only") == 0) config_only = true;
        else if (strcmp(argv[i], "--config-keys") == 0) config_keys = true;
        else if (strcmp(argv[i], "--ignore-config-key") == 0) {
            if (i + 1 == argc) die_user(NULL, argv[i], "needs a value");
            parse_ignore_key(&co, ignore, argv[++i]);
        }
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf(INSPECT_USAGE "\n"
                   "Prints the parsed config.json / generation_config.json and the weight tensors.\n"
                   "For a GGUF file: its version, alignment, metadata, tensor table and totals per ggml type;\n"
                   "with --config-only the config llmcc reads from its metadata (--config-keys: each key's class).\n"
                   "--config-keys prints how each key of config.json is treated (read, default-only, inert, ignored).\n"
                   "--ignore-config-key KEY accepts a key of config.json llmcc does not know (docs/errors.md).\n");
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) die_user(NULL, argv[i], "unknown option (" INSPECT_USAGE ")");
        else if (model) die_user(NULL, argv[i], "unexpected argument (" INSPECT_USAGE ")");
        else model = argv[i];
    }
    if (!model) die_user(NULL, NULL, INSPECT_USAGE);

    Arena a = {0};
    const char *dir = model_resolve_dir(&a, model, llmcc_root(&a));
    ModelConfig cfg;
    model_config_load(&a, dir, &co, &cfg);
    model_config_print(&cfg);
    if (config_keys) print_config_keys(&a, &cfg);
    if (!config_only) {
        if (!st_dir_has_weights(dir)) {
            printf("tensors: none (no .safetensors files)\n");
        } else {
            StModel m = {0};
            st_open_dir(&a, dir, &m);
            uint64_t total = 0;
            for (int i = 0; i < m.n; i++) {
                const StTensor *t = &m.t[i];
                printf("tensor: %s %s [", t->name, st_dtype_name(t->dtype));
                for (int d = 0; d < t->ndim; d++) printf("%s%" PRId64, d ? ", " : "", t->shape[d]);
                printf("] %s\n", basename_of(t->file));
                total += t->nbytes;
            }
            printf("tensors: %d\n", m.n);
            printf("tensor_bytes: %" PRIu64 "\n", total);
            printf("files: %d\n", m.nfiles);
            st_close(&m);
        }
    }
    arena_free(&a);
    return 0;
}
