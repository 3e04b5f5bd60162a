/* config.h: the model directory, its config.json and generation_config.json,
 * read into one struct. Every field a user's checkpoint can get wrong is
 * checked here and reported as "llmcc: FILE: KEY: what is wrong". */
#ifndef LLMCC_CONFIG_H
#define LLMCC_CONFIG_H
#include "util.h"

typedef enum { ROPE_NONE, ROPE_LINEAR, ROPE_LLAMA3 } RopeScalingType;

#define LLMCC_MAX_EOS 8

typedef struct {
    const char *dir;            /* resolved model directory */
    const char *config_path;    /* .../config.json */
    const char *architecture;   /* "LlamaForCausalLM" | "Qwen2ForCausalLM" */
    const char *family;         /* "llama" | "qwen": the executable's default name */
    int hidden_size, intermediate_size, num_hidden_layers;
    int num_attention_heads, num_key_value_heads, head_dim;
    double rms_norm_eps, rope_theta;
    RopeScalingType rope_type;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int max_position_embeddings;
    int vocab_size;
    bool tie_word_embeddings;
    bool attention_bias;        /* q/k/v biases (Qwen2 always; Llama when attention_bias) */
    bool o_bias;                /* o_proj bias (Llama attention_bias only) */
    bool mlp_bias;
    const char *torch_dtype;    /* as written, may be NULL */
    int bos_token_id;           /* -1 when absent */
    int n_eos; int eos_token_ids[LLMCC_MAX_EOS];
    /* generation_config.json (defaults when absent) */
    bool has_generation_config;
    double temperature, top_p, min_p, repetition_penalty;
    int top_k;
    bool do_sample;
} ModelConfig;

/* Resolves MODEL (a directory, a name under models/, or ORG/NAME in the
 * Hugging Face hub cache) to a directory; dies with a user error when none. */
const char *model_resolve_dir(Arena *a, const char *model, const char *llmcc_root);
/* Reads dir/config.json and dir/generation_config.json (optional). */
void model_config_load(Arena *a, const char *dir, ModelConfig *cfg);
/* The llmcc checkout: two directories above /proc/self/exe (build/llmcc -> repo);
 * NULL when that cannot be read. */
const char *llmcc_root(Arena *a);
const char *rope_type_name(RopeScalingType t);   /* "none" | "linear" | "llama3" */
#endif
