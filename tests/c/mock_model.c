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
    .decode_weight_bytes = (long long)V * V * 4,
};

struct Model { const float *w; int ctx, next_pos; int32_t *kv; const float *last; };

const char *model_init(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx) {
    *out = NULL;
    if (t[0].dtype != PDT_F32 || t[0].ndim != 2 || t[0].shape[0] != V || t[0].shape[1] != V)
        return "bigram.weight has the wrong shape";
    if (ctx < 1 || ctx > model_info.max_ctx) return "bad ctx";
    Model *m = calloc(1, sizeof *m);
    if (!m) return "out of memory";
    m->w = (const float *)(data + t[0].offset);
    m->ctx = ctx;
    m->kv = calloc((size_t)ctx, sizeof *m->kv);
    if (!m->kv) { free(m); return "out of memory"; }
    *out = m;
    return NULL;
}

int model_threads(int n, char *desc, size_t size) {
    snprintf(desc, size, "the mock model's one thread");
    return n > 0 ? n : 1;
}

int model_forward(Model *m, const int32_t *ids, int n, int pos, float *logits) {
    if (n < 1 || n > model_info.max_batch || pos != m->next_pos || pos + n > m->ctx) {
        fprintf(stderr, "mock_model: bad call n=%d pos=%d (expected pos %d, ctx %d)\n", n, pos, m->next_pos, m->ctx);
        abort();
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V) { fprintf(stderr, "mock_model: id %d\n", ids[i]); abort(); }
        m->kv[pos + i] = ids[i];
    }
    m->next_pos = pos + n;
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

/* no device top-k (max_top_k 0): the sampler reads the logits */
int model_topk(Model *m, int k, float *vals, int32_t *ids) { (void)m; (void)k; (void)vals; (void)ids; return -1; }
void model_logits(Model *m, float *logits) { memcpy(logits, m->last, V * sizeof(float)); }

size_t model_memory_bytes(const Model *m, size_t *weights, size_t *kv, size_t *act) {
    *weights = (size_t)V * V * sizeof(float);
    *kv = (size_t)m->ctx * sizeof(int32_t);
    *act = V * sizeof(float);
    return *weights + *kv + *act;
}

void model_free(Model *m) {
    if (!m) return;
    free(m->kv);
    free(m);
}
