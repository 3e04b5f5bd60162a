/* gguf_model.h: a model from a GGUF file (llama.cpp's single-file checkpoint; the reader is gguf.h) for
 * architectures llama, qwen2 and qwen3: the metadata read into a ModelConfig, the tensors offered to the graph
 * builder, the payload writer and `llmcc run --layer` under the Hugging Face names they use.
 *
 * Why an StModel: frontend.c checks and types the weights by their Hugging Face names through an StModel, and
 * `llmcc build`'s payload loop and `llmcc run --layer` read their bytes from the same StTensors. Filling one with
 * the GGUF tensors (renamed, dimensions reversed into numpy's order, data pointing into the GGUF mapping, which
 * the StModel does not own) keeps the three unchanged for the float types. What a GGUF file has beyond that stays
 * here: where each tensor's bytes lie in the file (for the payload's in-kernel copy) and llama's q/k row order
 * (gguf_model_pack_source, gguf_model_row_order). The tensors are checked here, before the graph builder sees
 * them, so that a missing or misshapen tensor is named as the file names it (blk.1.ffn_down.weight, ggml's order
 * of dimensions) and tensors the graph would not read are refused (as llama.cpp refuses them); the expected names
 * and shapes come from the graph builder itself (a graph built without weights), so the two cannot disagree.
 * docs/gguf.md, "Models from GGUF", lists the keys and names. */
#ifndef LLMCC_GGUF_MODEL_H
#define LLMCC_GGUF_MODEL_H
#include "config.h"
#include "gguf.h"
#include "pack.h"
#include "safetensors.h"

typedef struct GgufModel {
    GgufFile file;
    Arch arch;
    const char *arch_name;      /* general.architecture: "llama", "qwen2" or "qwen3" */
    /* llama: convert_hf_to_gguf.py stored attn_q / attn_k rows (and biases) permuted for ggml's RoPE, which
     * rotates adjacent pairs; llmcc's graph rotates halves, as transformers does */
    bool permuted_qk;
    const StModel *st;          /* what gguf_model_tensors filled */
    StModel want;               /* the weights the graph reads (gguf_model_tensors; freed by gguf_model_close, so that
                                 * a refusal that does not exit, as under the fuzz harness, leaks nothing) */
    const int64_t **row_from;   /* per tensor of st (its index): the rows in Hugging Face's order, or NULL */
} GgufModel;

/* Opens path and reads its metadata into cfg. Every key is read, known not to change the model (descriptive
 * general.* keys; tokenizer.* keys, which the tokenizer's packer reads), accepted by --ignore-config-key (opts,
 * may be NULL), or refused in one line naming it. Needs no tensor but token_embd.weight's shape (and
 * rope_freqs.weight's values, where there is one), so `llmcc inspect FILE.gguf --config-only` works on any file. */
void gguf_model_open(Arena *a, const char *path, const ConfigOptions *opts, GgufModel *m, ModelConfig *cfg);
/* Fills st (zero-initialised) with the weights cfg's graph reads, under their Hugging Face names: each one present
 * with its shape and of a type llmcc compiles, and no other tensor in the file. */
void gguf_model_tensors(Arena *a, GgufModel *m, const ModelConfig *cfg, StModel *st);
/* For tensor name of st: ps->src_path and src_off (the bytes' place in the file, for the in-kernel copy) and
 * ps->row_from (gguf_model_row_order). */
void gguf_model_pack_source(const GgufModel *m, const char *name, PackSource *ps);
/* Row r of tensor name (of st) in Hugging Face's order is the file's row [r] of this; NULL: as stored. */
const int64_t *gguf_model_row_order(const GgufModel *m, const char *name);
void gguf_model_close(GgufModel *m);

/* How metadata key KEY of a file of architecture arch_name is treated: "read", "inert" (does not change the model)
 * or NULL (unknown: refused). */
const char *gguf_key_class(const char *arch_name, const char *key);
#endif
