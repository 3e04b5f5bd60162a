/* config.h: the model directory, its config.json and generation_config.json,
 * read into one struct. Every field a user's checkpoint can get wrong is
 * checked here and reported as "llmcc: FILE: KEY: what is wrong". */
#ifndef LLMCC_CONFIG_H
#define LLMCC_CONFIG_H
#include "util.h"

typedef enum { ROPE_NONE, ROPE_LINEAR, ROPE_LLAMA3 } RopeScalingType;

/* The architectures llmcc builds: enum, config.json's "architectures" entry, its "model_type", and the
 * executable's default name. They share one graph (frontend.c); the config says where they differ. */
#define ARCHITECTURES(X) \
    X(ARCH_LLAMA, "LlamaForCausalLM", "llama", "llama") \
    X(ARCH_QWEN2, "Qwen2ForCausalLM", "qwen2", "qwen") \
    X(ARCH_QWEN3, "Qwen3ForCausalLM", "qwen3", "qwen3") \
    X(ARCH_MISTRAL, "MistralForCausalLM", "mistral", "mistral")
typedef enum { ARCHITECTURES(X_ENUM) ARCH_COUNT } Arch;

/* What the user said about config.json: keys to accept although llmcc does not know them
 * (--ignore-config-key KEY, repeatable). */
typedef struct {
    const char *const *ignore_keys;
    int n_ignore_keys;
} ConfigOptions;
/* --ignore-config-key KEY (every command that reads a config): v into c, whose keys are `keys` (room for 32) */
void parse_ignore_key(ConfigOptions *c, const char **keys, const char *v);

#define LLMCC_MAX_EOS 8

typedef struct {
    const char *dir;            /* resolved model directory */
    const char *config_path;    /* .../config.json */
    Arch arch;
    const char *architecture;   /* config.json's architectures entry, e.g. "Qwen3ForCausalLM" */
    const char *family;         /* "llama" | "qwen" | "qwen3" | "mistral": the executable's default name */
    int hidden_size, intermediate_size, num_hidden_layers;
    int num_attention_heads, num_key_value_heads, head_dim;
    double rms_norm_eps, rope_theta;
    RopeScalingType rope_type;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    /* a GGUF file's rope_freqs.weight (llama.cpp's form of llama3 scaling): head_dim / 2 divisors of the
     * frequencies, applied after rope_type's scaling as llama.cpp applies them; NULL for none */
    const float *rope_freq_factors;
    int max_position_embeddings;
    int vocab_size;
    bool tie_word_embeddings;
    bool attention_bias;        /* q/k/v biases (Qwen2 always; Llama when attention_bias) */
    bool o_bias;                /* o_proj bias (Llama attention_bias only) */
    bool mlp_bias;
    bool qk_norm;               /* Qwen3: RMSNorm over each head of q and k (q_norm, k_norm) before RoPE */
    int sliding_window;         /* Mistral: keys older than this many positions are masked; 0: none */
    int n_ignored_keys;         /* keys of config.json (or GGUF metadata) accepted by --ignore-config-key */
    const char **ignored_keys;
    const char *torch_dtype;    /* as written, may be NULL */
    int bos_token_id;           /* -1 when absent */
    int n_eos; int eos_token_ids[LLMCC_MAX_EOS];
    /* generation_config.json (defaults when absent) */
    bool has_generation_config;
    double temperature, top_p, min_p, repetition_penalty;
    int top_k;
    bool do_sample;
    /* where each came from (temperature, top-k, top-p, min-p, repetition penalty; model_api.h's sampling_from) */
    const char *sampling_from[5];
} ModelConfig;

/* Resolves MODEL (a directory, a name under models/, or ORG/NAME in the
 * Hugging Face hub cache) to a directory; dies with a user error when none. */
const char *model_resolve_dir(Arena *a, const char *model, const char *llmcc_root);
/* Reads dir/config.json and dir/generation_config.json (optional). Every key of config.json is
 * understood, known not to change the forward pass, or refused (docs/errors.md, "Keys of config.json");
 * opts may be NULL. */
void model_config_load(Arena *a, const char *dir, const ConfigOptions *opts, ModelConfig *cfg);
/* The compiled context: refuses what the config makes inexact at that length (a sliding window shorter
 * than it). */
void model_config_check_context(const ModelConfig *cfg, int max_ctx);

/* The largest sizes llmcc takes: far above every real model's (126 layers, hidden 16384, intermediate 53248,
 * 128 heads, a 256k vocabulary), so that a corrupt or hostile file is refused before anything is sized from
 * it (docs/errors.md). X(field, config.json's key, the GGUF key after "ARCH.", maximum) */
#define CONFIG_LIMITS(X) \
    X(num_hidden_layers, "num_hidden_layers", "block_count", 1024) \
    X(hidden_size, "hidden_size", "embedding_length", 65536) \
    X(intermediate_size, "intermediate_size", "feed_forward_length", 1048576) \
    X(num_attention_heads, "num_attention_heads", "attention.head_count", 1024) \
    X(num_key_value_heads, "num_key_value_heads", "attention.head_count_kv", 1024) \
    X(head_dim, "head_dim", "attention.key_length", 1024) \
    X(vocab_size, "vocab_size", "vocab_size", 4194304) \
    X(max_position_embeddings, "max_position_embeddings", "context_length", 16777216)
/* Dies naming the key (config.json's, or the GGUF file's under gguf_arch) of a size past CONFIG_LIMITS. */
void model_config_check_limits(const ModelConfig *cfg, const char *path, const char *gguf_arch);
/* The layers a checkpoint's tensors hold: one past the largest N of a name with prefix N. (model.layers.,
 * blk.), 0 where none has; names come from names(i, ctx) for i < n. */
int checkpoint_layers(int n, const char *(*names)(int i, const void *ctx), const void *ctx, const char *prefix);
/* How config.json's key KEY is treated for architecture ARCH: "read", "default-only" (read; only the default is
 * implemented), "inert" (does not change the forward pass) or NULL (unknown: refused). */
const char *config_key_class(Arch arch, const char *key);
/* Whether KEY was named by --ignore-config-key (opts may be NULL). */
bool config_key_ignored(const ConfigOptions *opts, const char *key);
/* The llmcc checkout: two directories above /proc/self/exe (build/llmcc -> repo);
 * NULL when that cannot be read. */
const char *llmcc_root(Arena *a);
/* llama.cpp's sampling defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no repetition penalty), each
 * one's source so named: a checkpoint's when it recommends none */
void config_llamacpp_sampling(ModelConfig *c);
const char *rope_type_name(RopeScalingType t);   /* "none" | "linear" | "llama3" */
/* Every field of cfg as `name: value` lines on stdout: what `llmcc inspect` prints (cmd_inspect.c). */
void model_config_print(const ModelConfig *cfg);
#endif
