/* interp.c: the reference evaluator (interp.h). One function per op, each
 * the textbook formula: broadcasting by explicit index arithmetic, softmax
 * with the max subtracted, attention as scores -> softmax -> weighted sum. */
#include "interp.h"
#include "quant.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* offset in x of the element at out index idx (x broadcast against out: dims aligned at the right) */
static int64_t bcast_off(const GNode *x, int x_lead, const int64_t *idx, int out_lead) {
    int64_t off = 0, stride = 1;
    for (int i = x_lead - 1; i >= 0; i--) {
        int64_t v = x->dims[i] == 1 ? 0 : idx[i + out_lead - x_lead];
        off += v * stride;
        stride *= x->dims[i];
    }
    return off;
}
static void unravel(int64_t flat, int nd, const int64_t *dims, int64_t *idx) {
    for (int i = nd - 1; i >= 0; i--) { idx[i] = flat % dims[i]; flat /= dims[i]; }
}

static void binary(const GNode *n, double *const *v, double *out) {
    const GNode *a = n->in[0], *b = n->in[1];
    int64_t idx[MAX_DIMS], N = gnode_elems(n);
    for (int64_t f = 0; f < N; f++) {
        unravel(f, n->ndim, n->dims, idx);
        double x = a->op == G_CONST ? a->value : v[a->id][bcast_off(a, a->ndim, idx, n->ndim)];
        double y = b->op == G_CONST ? b->value : v[b->id][bcast_off(b, b->ndim, idx, n->ndim)];
        switch (n->op) {
        case G_ADD: out[f] = x + y; break;
        case G_SUB: out[f] = x - y; break;
        case G_MUL: out[f] = x * y; break;
        case G_DIV: out[f] = x / y; break;
        default: UNREACHABLE();
        }
    }
}

static void softmax_rows(double *x, int64_t rows, int64_t len) {
    for (int64_t r = 0; r < rows; r++) {
        double *row = x + r * len, m = -INFINITY, s = 0;
        for (int64_t j = 0; j < len; j++) if (row[j] > m) m = row[j];
        for (int64_t j = 0; j < len; j++) s += exp(row[j] - m);
        for (int64_t j = 0; j < len; j++) row[j] = exp(row[j] - m) / s;
    }
}

/* o[i N + j] = sum over k < K of a[i ai + k ak] b[k bk + j bj], for i < M, j < N: a strided matrix product */
static void gemm(double *o, int64_t M, int64_t N, int64_t K, const double *a, int64_t ai, int64_t ak, const double *b,
                 int64_t bk, int64_t bj) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += a[i * ai + k * ak] * b[k * bk + j * bj];
            o[i * N + j] = s;
        }
}

/* x[0..k) as the 8-bit activations of runtime/cpu_quant_q8.h see it: per block of 32, in f32, d = max|x| / 127
 * and q = x * (1 / d) rounded to nearest, ties to even; out = d * q */
static void round_q8(const double *x, int64_t k, double *out) {
    for (int64_t b = 0; b + 32 <= k; b += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf((float)x[b + j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++) out[b + j] = (double)d * (double)rintf((float)x[b + j] * id);
    }
}

static void matmul(const GNode *n, const double *A, const double *B, double *out) {
    const GNode *a = n->in[0], *b = n->in[1];
    int nb = n->ndim - 2;
    int64_t M = n->dims[nb], N = n->dims[nb + 1], K = a->dims[a->ndim - 1];
    int64_t batches = dims_elems(n->dims, nb), idx[MAX_DIMS];
    for (int64_t bi = 0; bi < batches; bi++) {
        unravel(bi, nb, n->dims, idx);
        const double *pa = A + bcast_off(a, a->ndim - 2, idx, nb) * M * K;
        const double *pb = B + bcast_off(b, b->ndim - 2, idx, nb) * K * N;
        gemm(out + bi * M * N, M, N, K, pa, K, 1, pb, N, 1);
    }
}

static void sdpa(const GNode *n, double *const *v, double *out) {
    const GNode *q = n->in[0], *k = n->in[1], *vv = n->in[2];
    int nb = n->ndim - 2;
    int64_t L = q->dims[q->ndim - 2], E = q->dims[q->ndim - 1], S = k->dims[k->ndim - 2], Ev = vv->dims[vv->ndim - 1];
    int64_t batches = dims_elems(n->dims, nb), idx[MAX_DIMS];
    double *p = xmalloc(sizeof(double) * (size_t)(L * S));
    for (int64_t bi = 0; bi < batches; bi++) {
        unravel(bi, nb, n->dims, idx);
        const double *pq = v[q->id] + bcast_off(q, q->ndim - 2, idx, nb) * L * E;
        const double *pk = v[k->id] + bcast_off(k, k->ndim - 2, idx, nb) * S * E;
        const double *pv = v[vv->id] + bcast_off(vv, vv->ndim - 2, idx, nb) * S * Ev;
        gemm(p, L, S, E, pq, E, 1, pk, 1, E);
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++) p[i * S + j] = n->causal && j > i ? -INFINITY : p[i * S + j] * n->scale;
        softmax_rows(p, L, S);
        gemm(out + bi * L * Ev, L, Ev, S, p, S, 1, pv, Ev, 1);
    }
    free(p);
}

/* rotate-half RoPE at positions pos.. (transformers' apply_rotary_pos_emb) */
static void rope(const GNode *n, const double *x, double *out, int64_t pos) {
    int64_t rows = n->dims[0], W = n->dims[1], hd = n->head_dim, half = hd / 2;
    for (int64_t t = 0; t < rows; t++)
        for (int64_t h = 0; h < n->heads; h++)
            for (int64_t e = 0; e < hd; e++) {
                const double *r = x + t * W + h * hd;
                double ang = (double)(pos + t) * n->inv_freq[e % half];
                double rot = e < half ? -r[e + half] : r[e - half];
                out[t * W + h * hd + e] = r[e] * cos(ang) + rot * sin(ang);
            }
}

/* causal attention of this call's tokens at positions pos.. over the cache
 * rows 0..pos+t (the pos rows before them, then their own), query head h
 * reading kv head h / (heads / kv_heads) */
static void attention(const GNode *n, const double *q, const double *k, const double *v, double *out, int64_t pos) {
    int64_t T = n->dims[0], H = n->heads, KV = n->kv_heads, hd = n->head_dim, G = H / KV;
    double *p = xmalloc(sizeof(double) * (size_t)(pos + T));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const double *qr = q + t * H * hd + h * hd;
            int64_t kh = h / G, len = pos + t + 1;
            gemm(p, 1, len, hd, qr, 0, 1, k + kh * hd, 1, KV * hd);
            for (int64_t j = 0; j < len; j++) p[j] /= sqrt((double)hd);
            softmax_rows(p, 1, len);
            gemm(out + t * H * hd + h * hd, 1, hd, len, p, 0, 1, v + kh * hd, KV * hd, 1);
        }
    free(p);
}

/* topk's order: larger value first, then the smaller index; NaN counts as -inf */
typedef struct { double v; int64_t j; } Ranked;
static int ranked_cmp(const void *pa, const void *pb) {
    const Ranked *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->j < b->j ? -1 : a->j > b->j;
}
static void topk_rows(const GNode *n, const double *x, double *o) {
    int64_t len = n->in[0]->dims[n->in[0]->ndim - 1], k = n->topk, rows = gnode_elems(n->in[0]) / len;
    Ranked *r = xmalloc(sizeof(Ranked) * (size_t)len);
    for (int64_t t = 0; t < rows; t++) {
        for (int64_t j = 0; j < len; j++) r[j] = (Ranked){isnan(x[t * len + j]) ? -INFINITY : x[t * len + j], j};
        qsort(r, (size_t)len, sizeof *r, ranked_cmp);
        for (int64_t i = 0; i < k; i++) { o[t * 2 * k + i] = r[i].v; o[t * 2 * k + k + i] = (double)r[i].j; }
    }
    free(r);
}

double *interp_run(const Graph *g, double *const *leaves, const InterpOptions *io) {
    int64_t pos = io->pos;
    double **v = xcalloc((size_t)g->n, sizeof(double *));
    for (int i = 0; i < g->n; i++) {
        const GNode *n = g->nodes[i];
        if (n->op == G_INPUT || n->op == G_WEIGHT) {
            CHECK(leaves[i], "leaf %s has no values", n->name); v[i] = leaves[i]; continue;
        }
        if (n->op == G_CONST) continue;
        CHECK(!n->rows_n, "%s: the reference needs static shapes (n fixed)", n->name);
        int64_t N = gnode_elems(n);
        /* a cache holds the rows before pos too */
        int64_t alloc = n->op == G_KV_WRITE ? N + pos * n->dims[1] : N;
        double *o = xcalloc((size_t)alloc, sizeof(double));
        v[i] = o;
        const GNode *x = n->nin ? n->in[0] : NULL;
        int64_t last = n->ndim ? n->dims[n->ndim - 1] : 1;
        switch (n->op) {
        case G_ADD: case G_SUB: case G_MUL: case G_DIV: binary(n, v, o); break;
        case G_SILU:
            for (int64_t f = 0; f < N; f++) { double a = v[x->id][f]; o[f] = a / (1.0 + exp(-a)); }
            break;
        case G_ARGMAX: {
            /* the first maximum, NaN counted as -inf (the runtime's sampler's rule; numpy's argmax would pick a NaN) */
            int64_t len = x->dims[x->ndim - 1];
            for (int64_t r = 0; r < N; r++) {
                const double *row = v[x->id] + r * len;
                int64_t best = 0;
                double bv = isnan(row[0]) ? -INFINITY : row[0];
                for (int64_t j = 1; j < len; j++) if (row[j] > bv) { best = j; bv = row[j]; }
                o[r] = (double)best;
            }
            break;
        }
        case G_TOPK: topk_rows(n, v[x->id], o); break;
        case G_SOFTMAX:
            memcpy(o, v[x->id], sizeof(double) * (size_t)N);
            softmax_rows(o, N / last, last);
            break;
        case G_RMSNORM: {   /* over the last dim, or over each head of it (head_dim: Qwen3's q_norm / k_norm) */
            int64_t w = n->head_dim ? n->head_dim : last;
            for (int64_t r = 0; r < N / w; r++) {
                const double *row = v[x->id] + r * w;
                double ss = 0;
                for (int64_t j = 0; j < w; j++) ss += row[j] * row[j];
                double inv = 1.0 / sqrt(ss / (double)w + n->eps);
                for (int64_t j = 0; j < w; j++) o[r * w + j] = row[j] * inv * (n->nin > 1 ? v[n->in[1]->id][j] : 1.0);
            }
            break;
        }
        case G_LINEAR: {
            const double *w = v[n->in[1]->id], *b = n->nin > 2 ? v[n->in[2]->id] : NULL;
            int64_t in = n->in[1]->dims[1];
            bool round_x = io->bf16_linear_x && n->in[1]->dtype == DT_BF16;
            bool q8_x = io->q8_linear_x && dtype_is_quant(n->in[1]->dtype) && !n->picks_token;
            double *xq = q8_x ? malloc((size_t)in * sizeof(double)) : NULL;
            for (int64_t r = 0; r < N / last; r++) {
                if (q8_x) round_q8(v[x->id] + r * in, in, xq);
                for (int64_t j = 0; j < last; j++) {
                    double s = b ? b[j] : 0;
                    for (int64_t k = 0; k < in; k++) {
                        double xv = q8_x ? xq[k] : v[x->id][r * in + k];
                        if (round_x) xv = cvt_bf16_to_f32(cvt_f32_to_bf16((float)xv));
                        s += xv * w[j * in + k];
                    }
                    o[r * last + j] = s;
                }
            }
            free(xq);
            break;
        }
        case G_MATMUL: matmul(n, v[x->id], v[n->in[1]->id], o); break;
        case G_SDPA: sdpa(n, v, o); break;
        case G_ROPE: rope(n, v[x->id], o, pos); break;
        case G_KV_WRITE:   /* the cache rows before pos, then this call's */
            if (pos) {
                CHECK(io->cache && io->cache[i], "%s: no cache rows before position %lld", n->name, (long long)pos);
                memcpy(o, io->cache[i], sizeof(double) * (size_t)(pos * n->dims[1]));
            }
            memcpy(o + pos * n->dims[1], v[x->id], sizeof(double) * (size_t)N);
            /* a bf16 cache (g->kv_dtype) holds each value rounded to nearest even from f32, as the kernels store
             * it; attention reads the rounded values (the rows before pos were written rounded) */
            if (g->kv_dtype == DT_BF16)
                for (int64_t f = pos * n->dims[1]; f < pos * n->dims[1] + N; f++)
                    o[f] = cvt_bf16_to_f32(cvt_f32_to_bf16((float)o[f]));
            break;
        case G_ATTENTION: attention(n, v[x->id], v[n->in[1]->id], v[n->in[2]->id], o, pos); break;
        default: die_user(NULL, graph_op_names[n->op], "the reference does not evaluate this op yet");
        }
    }
    double *out = v[g->logits->id];
    for (int i = 0; i < g->n; i++)
        if (v[i] && v[i] != out && !leaves[i]) free(v[i]);
    free(v);
    return out;
}
