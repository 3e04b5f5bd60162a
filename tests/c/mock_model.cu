/* mock_model.cu: the bigram mock of tests/c/mock_model.c on the GPU, for
 * checking templates/Makefile.cuda (static cudart, C runtime linked in).
 * logits = row ids[n-1] of "bigram.weight", copied on the device. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
/* payload.h uses C11's _Static_assert, which C++ spells static_assert */
#define _Static_assert static_assert
extern "C" {
#include "model_api.h"
}

#define V 300
static const char *const names[] = { "bigram.weight" };

extern "C" const ModelInfo model_info = {
    "bigram", "BigramForTesting", "cuda",
    V, V, 0, 1,
    1, 1, V,
    64, 4,
    1, 2, { 2, 3 },
    0.0f, 1.0f, 0.0f, 1.0f,
    0,
    1, names,
    0,
    (long long)V * V * 4,
    1,
    "f32",
};

struct Model { float *w, *out; int ctx, next_pos; };   /* one slot: model_init_slots refuses more */

__global__ void copy_row(const float *w, int row, float *out) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < V) out[j] = w[(size_t)row * V + j];
}

extern "C" const char *model_init(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx);
extern "C" const char *model_init_slots(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx,
                                        int slots) {
    if (slots != 1) return "the CUDA mock has one KV-cache slot";
    return model_init(out, t, data, ctx);
}
extern "C" int model_use_slot(Model *m, int slot) { (void)m; return slot == 0 ? 0 : -1; }
extern "C" int model_use_graph(Model *m, int on) { (void)m; (void)on; return 0; }   /* one kernel a step */
extern "C" int model_graph_kernels(const Model *m) { (void)m; return 0; }

extern "C" const char *model_init(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx) {
    *out = NULL;
    if (t[0].dtype != PDT_F32 || t[0].ndim != 2 || t[0].shape[0] != V || t[0].shape[1] != V)
        return "bigram.weight has the wrong shape";
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return "no CUDA device";
    Model *m = (Model *)calloc(1, sizeof *m);
    if (!m) return "out of memory";
    m->ctx = ctx;
    if (cudaMalloc(&m->w, (size_t)V * V * 4) != cudaSuccess || cudaMalloc(&m->out, V * 4) != cudaSuccess ||
        cudaMemcpy(m->w, data + t[0].offset, (size_t)V * V * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
        free(m);
        return "cannot allocate GPU memory";
    }
    *out = m;
    return NULL;
}

extern "C" int model_threads(int n, char *desc, size_t size) {
    (void)n;
    snprintf(desc, size, "the GPU (CUDA)");
    return 0;
}

extern "C" int model_forward(Model *m, const int32_t *ids, int n, int pos, float *logits) {
    if (n < 1 || n > model_info.max_batch || pos != m->next_pos || pos + n > m->ctx) {
        fprintf(stderr, "mock_model: bad call n=%d pos=%d\n", n, pos);
        abort();
    }
    m->next_pos = pos + n;
    copy_row<<<(V + 127) / 128, 128>>>(m->w, ids[n - 1], m->out);
    static float row[V];
    cudaMemcpy(row, m->out, V * 4, cudaMemcpyDeviceToHost);
    if (logits) memcpy(logits, row, V * 4);
    int best = 0;
    for (int j = 1; j < V; j++) if (row[j] > row[best]) best = j;
    return best;
}

/* no batched decoding in this mock: the server's slots then take turns */
extern "C" int model_forward_batch(Model *m, const int32_t *ids, const int *slots, const int *positions, int n,
                                   float *logits, int32_t *next) {
    (void)m; (void)ids; (void)slots; (void)positions; (void)n; (void)logits; (void)next;
    return -1;
}

/* no device top-k (max_top_k 0): the sampler reads the logits */
extern "C" int model_topk(Model *m, int k, float *vals, int32_t *ids) { (void)m; (void)k; (void)vals; (void)ids; return -1; }
extern "C" void model_logits(Model *m, float *logits) { cudaMemcpy(logits, m->out, V * 4, cudaMemcpyDeviceToHost); }
extern "C" int model_penalize(Model *m, const int32_t *ids, const float *sub, int n, float rep) {
    (void)m; (void)ids; (void)sub; (void)n; (void)rep;
    return -1;   /* max_top_k 0: the runtime samples from the logits */
}

extern "C" size_t model_memory_bytes(const Model *m, size_t *weights, size_t *kv, size_t *act) {
    (void)m;
    if (weights) *weights = (size_t)V * V * 4;
    if (kv) *kv = 0;
    if (act) *act = V * 4;
    return (size_t)V * V * 4 + V * 4;
}

extern "C" void model_free(Model *m) {
    if (!m) return;
    cudaFree(m->w); cudaFree(m->out);
    free(m);
}
