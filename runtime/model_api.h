/* model_api.h: the contract between the code llmcc generates for one model
 * (model.c or model.cu: kernels + the launch plan) and the hand-written
 * runtime around it (run.c: payload, tokenizer, sampling, CLI).
 * The generated code defines everything declared here. */
#ifndef LLMCC_MODEL_API_H
#define LLMCC_MODEL_API_H
#include <stddef.h>
#include <stdint.h>
#include "payload.h"

#define MODEL_MAX_EOS 8
#define MODEL_TOPK_CAP 128       /* max_top_k is at most this */
#define MODEL_SAMPLING_SETTINGS 5   /* temperature, top-k, top-p, min-p, repetition penalty */

typedef struct {
    const char *name;            /* executable name, e.g. "qwen" */
    const char *architecture;    /* "Qwen2ForCausalLM" */
    const char *target;          /* "cpu" | "cuda" */
    int vocab_size, hidden_size, intermediate_size, n_layers;
    int n_heads, n_kv_heads, head_dim;
    int max_ctx;                 /* KV-cache positions compiled in */
    int max_batch;               /* most tokens one model_forward call takes */
    int bos_id;                  /* -1: none */
    int n_eos; int eos_ids[MODEL_MAX_EOS];
    /* sampling defaults from generation_config.json */
    float temperature, top_p, min_p, repetition_penalty;
    int top_k;
    int n_tensors;               /* weights expected in the payload, in order */
    const char *const *tensor_names;
    int max_top_k;               /* the most model_topk gives (0: none; the sampler reads the logits) */
    long long decode_weight_bytes;   /* weight bytes one decode step reads: each weight whole, the embedding's
                                      * gather one row (--stats: bytes per token) */
    int decode_launches;         /* kernel launches of a one-token model_forward call (--info, --stats) */
    const char *kv_dtype;        /* the KV cache's elements: "f32" or "bf16" (llmcc build --kv-dtype) */
    /* where each sampling default came from, in the order temperature, top-k, top-p, min-p, repetition penalty:
     * "generation_config.json", "transformers' default", "llama.cpp's default", a GGUF key (--info) */
    const char *sampling_from[MODEL_SAMPLING_SETTINGS];
} ModelInfo;

extern const ModelInfo model_info;

typedef struct Model Model;

/* The threads the kernels run on (cpu and cuda-emu targets), called before model_init: n > 0 threads, or 0
 * for one per physical core the process may run on, pinned one to each core (unless OMP_PROC_BIND or
 * OMP_PLACES choose). Writes what runs into desc (the threads, the instruction set the kernels use) and
 * returns the thread count; CUDA: describes the GPU path and returns 0. */
int model_threads(int n, char *desc, size_t size);

/* Binds the weights. tensors[i] describes model_info.tensor_names[i];
 * data is the payload's base address (tensor bytes at data + tensors[i].offset).
 * ctx (<= max_ctx) sizes the KV cache. Returns NULL on success, else a
 * one-line message (no GPU, out of memory, a tensor of the wrong shape). */
const char *model_init(Model **out, const PayloadTensor *tensors, const uint8_t *data, int ctx);
/* model_init with slots independent KV caches of ctx positions each (the server's: one conversation a slot);
 * model_init is model_init_slots(..., 1). */
const char *model_init_slots(Model **out, const PayloadTensor *tensors, const uint8_t *data, int ctx, int slots);
/* Makes cache slot (0..slots-1) the one model_forward reads and appends to (slot 0 after init). Returns 0, or
 * -1 when slot is out of range. */
int model_use_slot(Model *m, int slot);
/* Runs n (1..max_batch) tokens at positions pos..pos+n-1 through the model,
 * appending their K/V to the cache, writes the logits of the last token
 * (vocab_size floats) to logits unless it is NULL, and returns their argmax
 * (the first maximum, NaN counted as -inf), computed on the device: greedy
 * decoding needs no logits from it. */
int model_forward(Model *m, const int32_t *ids, int n, int pos, float *logits);
/* One decode step of n (1..max_batch) sequences at once: token t is ids[t] at position positions[t] of cache slot
 * slots[t] (distinct slots), its K/V appended there; writes the argmax of its logits to next[t] and, unless
 * logits is NULL, its logits to logits[t * vocab_size ...]. The weights are read once for all the tokens; each
 * token's logits are bit for bit what model_forward gives for it alone. Returns 0, or -1 when an argument is out of
 * range or the build has no batched decoding (the slots then take turns with model_forward). The slot
 * model_use_slot chose is left as it was; model_topk and model_logits see row 0. */
int model_forward_batch(Model *m, const int32_t *ids, const int *slots, const int *positions, int n, float *logits,
                        int32_t *next);
/* The k (1..max_top_k) largest logits of the last model_forward call and their ids, computed on the
 * device: largest first, equal values by the smaller id first, NaN counted as -inf. Returns 0, or -1
 * when k is out of range. Sampling with top-k then copies 2k numbers, not the logits. */
int model_topk(Model *m, int k, float *vals, int32_t *ids);
/* The sampler's penalties on the last model_forward call's logits, on the device, in place (so that model_topk
 * then sees them, and sampling with penalties copies 2k numbers too): for each of the n distinct ids[j], x / rep
 * if x > 0 else x * rep (rep 1: unchanged), then x - sub[j] (the frequency and presence penalties, computed by the
 * caller as sample.c does; 0 where none). Returns 0, or -1 when n is outside 0..vocab_size or an id is out of
 * range. */
int model_penalize(Model *m, const int32_t *ids, const float *sub, int n, float rep);
/* Copies the last model_forward call's logits (vocab_size floats), as if it had been given logits. */
void model_logits(Model *m, float *logits);
/* Bytes of device (or host, for the CPU) memory taken: weights, KV cache, activations. */
size_t model_memory_bytes(const Model *m, size_t *weights, size_t *kv, size_t *act);
void model_free(Model *m);
/* The decode step (model_forward with n = 1): on (the GPU builds' default), one launch of a CUDA Graph of its
 * kernels, captured at a cache slot's first step with the position read from device memory, so that it serves
 * every later step; off (--no-graph), its kernels launched one by one. Returns whether the graph is used: 0 on
 * the cpu target and under LLMCC_CUDA_CHECK (which synchronises after each launch). cuda-emu runs the captured
 * step's launches as the graph would replay them. */
int model_use_graph(Model *m, int on);
/* The kernels the decode step's graph holds, counted at its capture (0 before the first decode step) */
int model_graph_kernels(const Model *m);
#endif
