/* cmd_inspect.c: `llmcc inspect MODEL [--config-only]`: prints what llmcc
 * understood of a checkpoint (every ModelConfig field, then the tensors), so
 * a user can see why a model compiles the way it does before compiling it.
 * argv[0] is the subcommand name ("inspect"). */
#include "config.h"
#include "safetensors.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *basename_of(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void print_config(const ModelConfig *c) {
    printf("dir: %s\n", c->dir);
    printf("config_path: %s\n", c->config_path);
    printf("architecture: %s\n", c->architecture);
    printf("family: %s\n", c->family);
    printf("hidden_size: %d\n", c->hidden_size);
    printf("intermediate_size: %d\n", c->intermediate_size);
    printf("num_hidden_layers: %d\n", c->num_hidden_layers);
    printf("num_attention_heads: %d\n", c->num_attention_heads);
    printf("num_key_value_heads: %d\n", c->num_key_value_heads);
    printf("head_dim: %d\n", c->head_dim);
    printf("rms_norm_eps: %.9g\n", c->rms_norm_eps);
    printf("rope_theta: %.9g\n", c->rope_theta);
    printf("rope_type: %s\n", rope_type_name(c->rope_type));
    printf("rope_factor: %.9g\n", c->rope_factor);
    printf("rope_low_freq_factor: %.9g\n", c->rope_low_freq_factor);
    printf("rope_high_freq_factor: %.9g\n", c->rope_high_freq_factor);
    printf("rope_original_max_pos: %d\n", c->rope_original_max_pos);
    printf("max_position_embeddings: %d\n", c->max_position_embeddings);
    printf("vocab_size: %d\n", c->vocab_size);
    printf("tie_word_embeddings: %s\n", c->tie_word_embeddings ? "true" : "false");
    printf("attention_bias: %s\n", c->attention_bias ? "true" : "false");
    printf("o_bias: %s\n", c->o_bias ? "true" : "false");
    printf("mlp_bias: %s\n", c->mlp_bias ? "true" : "false");
    printf("torch_dtype: %s\n", c->torch_dtype ? c->torch_dtype : "(none)");
    printf("bos_token_id: %d\n", c->bos_token_id);
    printf("eos_token_ids: [");
    for (int i = 0; i < c->n_eos; i++) printf("%s%d", i ? ", " : "", c->eos_token_ids[i]);
    printf("]\n");
    printf("has_generation_config: %s\n", c->has_generation_config ? "true" : "false");
    printf("temperature: %.9g\n", c->temperature);
    printf("top_p: %.9g\n", c->top_p);
    printf("top_k: %d\n", c->top_k);
    printf("min_p: %.9g\n", c->min_p);
    printf("repetition_penalty: %.9g\n", c->repetition_penalty);
    printf("do_sample: %s\n", c->do_sample ? "true" : "false");
}

int cmd_inspect(int argc, char **argv) {
    const char *model = NULL;
    bool config_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config-only") == 0) config_only = true;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: llmcc inspect MODEL [--config-only]\n"
                   "Prints the parsed config.json / generation_config.json and the weight tensors.\n");
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) die_user(NULL, argv[i], "unknown option (usage: llmcc inspect MODEL [--config-only])");
        else if (model) die_user(NULL, argv[i], "unexpected argument (usage: llmcc inspect MODEL [--config-only])");
        else model = argv[i];
    }
    if (!model) die_user(NULL, NULL, "usage: llmcc inspect MODEL [--config-only]");

    Arena a = {0};
    const char *dir = model_resolve_dir(&a, model, llmcc_root(&a));
    ModelConfig cfg;
    model_config_load(&a, dir, &cfg);
    print_config(&cfg);
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
