/* mock_model.c: a fake "generated model" for the runtime tests. A bigram
 * table: the logits of a token are row ids[last] of the f32 tensor
 * "bigram.weight" [300, 300] read from the payload. Aborts on any misuse of
 * model_api.h (positions not contiguous, n outside 1..max_batch, past ctx). */
#include "model_api.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V 300
static const char *const names[] = { "bigram.weight" };

const ModelInfo model_info = {
    .name = "bigram", .architecture = "BigramForTesting", .target = "cpu",
    .vocab_size = V, .hidden_size = V, .intermediate_size = 0, .n_layers = 1,
    .n_heads = 1, .n_kv_heads = 1, .head_dim = V,
    .max_ctx = 64, .max_batch = 4,
    .bos_id = 1, .n_eos = 2, .eos_ids = { 2, 3 },
    .temperature = 0.0f, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .top_k = 0,
    .n_tensors = 1, .tensor_names = names, .max_top_k = 0,
    .decode_weight_bytes = (long long)V * V * 4, .decode_launches = 1, .kv_dtype = "f32",
};

/* kv: [slots][ctx] the ids fed; next_pos[slot]: the first position not fed (a call may start there or before it:
 * rewinding overwrites, skipping ahead is a caller's bug) */
struct Model { const float *w; int ctx, slots, slot; int *next_pos; int32_t *kv; const float *last; };

const char *model_init(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx) {
    return model_init_slots(out, t, data, ctx, 1);
}

int model_use_graph(Model *m, int on) { (void)m; (void)on; return 0; }   /* no graph on the CPU */
int model_graph_kernels(const Model *m) { (void)m; return 0; }

int model_use_slot(Model *m, int slot) {
    if (slot < 0 || slot >= m->slots) return -1;
    m->slot = slot;
    return 0;
}

const char *model_init_slots(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx, int slots) {
    *out = NULL;
    if (t[0].dtype != PDT_F32 || t[0].ndim != 2 || t[0].shape[0] != V || t[0].shape[1] != V)
        return "bigram.weight has the wrong shape";
    if (ctx < 1 || ctx > model_info.max_ctx) return "bad ctx";
    if (slots < 1 || slots > 4096) return "bad slots";
    Model *m = calloc(1, sizeof *m);
    if (!m) return "out of memory";
    m->w = (const float *)(data + t[0].offset);
    m->ctx = ctx;
    m->slots = slots;
    m->kv = calloc((size_t)ctx * slots, sizeof *m->kv);
    m->next_pos = calloc((size_t)slots, sizeof *m->next_pos);
    if (!m->kv || !m->next_pos) { free(m->kv); free(m->next_pos); free(m); return "out of memory"; }
    *out = m;
    return NULL;
}

int model_threads(int n, char *desc, size_t size) {
    snprintf(desc, size, "the mock model's one thread");
    return n > 0 ? n : 1;
}

int model_forward(Model *m, const int32_t *ids, int n, int pos, float *logits) {
    if (n < 1 || n > model_info.max_batch || pos < 0 || pos > m->next_pos[m->slot] || pos + n > m->ctx) {
        fprintf(stderr, "mock_model: bad call n=%d pos=%d (slot %d: expected pos <= %d, ctx %d)\n", n, pos, m->slot,
                m->next_pos[m->slot], m->ctx);
        abort();
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V) { fprintf(stderr, "mock_model: id %d\n", ids[i]); abort(); }
        m->kv[(size_t)m->slot * m->ctx + pos + i] = ids[i];
    }
    m->next_pos[m->slot] = pos + n;
    const float *row = m->w + (size_t)ids[n - 1] * V;
    m->last = row;
    if (logits) {
        #pragma omp parallel for   /* exercises the (static) OpenMP runtime like generated code does */
        for (int j = 0; j < V; j++) logits[j] = row[j];
    }
    int best = 0;
    for (int j = 1; j < V; j++) if (row[j] > row[best]) best = j;
    return best;
}

/* one token for each of n slots, checked as model_forward checks one; each row as model_forward gives it */
int model_forward_batch(Model *m, const int32_t *ids, const int *slots, const int *positions, int n, float *logits,
                        int32_t *next) {
    if (n < 1 || n > model_info.max_batch) { fprintf(stderr, "mock_model: batch of %d\n", n); abort(); }
    int keep = m->slot;
    for (int t = 0; t < n; t++) {
        for (int u = 0; u < t; u++)
            if (slots[u] == slots[t]) { fprintf(stderr, "mock_model: slot %d twice in a batch\n", slots[t]); abort(); }
        if (slots[t] < 0 || slots[t] >= m->slots) { fprintf(stderr, "mock_model: slot %d\n", slots[t]); abort(); }
        m->slot = slots[t];
        next[t] = model_forward(m, ids + t, 1, positions[t], logits ? logits + (size_t)t * V : NULL);
    }
    m->slot = keep;
    return 0;
}

/* no device top-k (max_top_k 0): the sampler reads the logits */
int model_topk(Model *m, int k, float *vals, int32_t *ids) { (void)m; (void)k; (void)vals; (void)ids; return -1; }
void model_logits(Model *m, float *logits) { memcpy(logits, m->last, V * sizeof(float)); }
/* max_top_k is 0: the runtime samples from the logits and never asks */
int model_penalize(Model *m, const int32_t *ids, const float *sub, int n, float rep) {
    (void)m; (void)ids; (void)sub; (void)n; (void)rep;
    abort();
}

size_t model_memory_bytes(const Model *m, size_t *weights, size_t *kv, size_t *act) {
    size_t w = (size_t)V * V * sizeof(float), k = (size_t)m->ctx * m->slots * sizeof(int32_t), a = V * sizeof(float);
    if (weights) *weights = w;
    if (kv) *kv = k;
    if (act) *act = a;
    return w + k + a;
}

void model_free(Model *m) {
    if (!m) return;
    free(m->kv);
    free(m->next_pos);
    free(m);
}
