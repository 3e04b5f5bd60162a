/* sample.c: see sample.h. The order is Hugging Face's logits processors' (repetition penalty, temperature,
 * top-k, top-p, min-p), with OpenAI's frequency and presence penalties next to the repetition penalty. */
#include "sample.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *sampler_init(Sampler *s, int vocab) {
    memset(s, 0, sizeof *s);
    s->vocab = vocab;
    s->work = malloc((size_t)vocab * sizeof *s->work);
    s->cand = malloc((size_t)vocab * sizeof *s->cand);
    s->heap = malloc((size_t)vocab * sizeof *s->heap);
    s->seen = calloc((size_t)vocab, 1);
    s->uniq = malloc((size_t)vocab * sizeof *s->uniq);
    s->count = calloc((size_t)vocab, sizeof *s->count);
    s->counted = malloc((size_t)vocab * sizeof *s->counted);
    sampler_seed(s, 0);
    if (!s->work || !s->cand || !s->heap || !s->seen || !s->uniq || !s->count || !s->counted) return "out of memory";
    return NULL;
}

void sampler_free(Sampler *s) {
    free(s->work); free(s->cand); free(s->heap); free(s->seen); free(s->uniq); free(s->count); free(s->counted);
    memset(s, 0, sizeof *s);
}

static uint32_t rng_u32(Sampler *s) {   /* xorshift64* */
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (uint32_t)((s->rng * 0x2545F4914F6CDD1Dull) >> 32);
}
void sampler_seed(Sampler *s, unsigned long long seed) {   /* splitmix64 of the seed, never 0 */
    uint64_t z = (uint64_t)seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    s->rng = z ? z : 1;
}
static double rng_unit(Sampler *s) { return (rng_u32(s) >> 8) / 16777216.0; }   /* [0, 1) */

void sampler_reset(Sampler *s) {
    for (int j = 0; j < s->n_uniq; j++) s->seen[s->uniq[j]] = 0;
    for (int j = 0; j < s->n_counted; j++) s->count[s->counted[j]] = 0;
    s->n_uniq = s->n_counted = 0;
}

void sampler_add(Sampler *s, int32_t id, bool generated) {
    if (id < 0 || id >= s->vocab) return;
    if (!s->seen[id]) { s->seen[id] = 1; s->uniq[s->n_uniq++] = id; }
    if (generated && s->count[id]++ == 0) s->counted[s->n_counted++] = id;
}

bool sample_needs_logits(const SampleParams *p) {
    return !sample_is_greedy(p) || p->rep != 1.0f || p->freq != 0 || p->pres != 0;
}

static int cand_desc(const void *a, const void *b) {
    const SampleCand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

static void heap_down(SampleCand *h, int n, int i) {   /* min-heap on v */
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l].v < h[m].v) m = l;
        if (r < n && h[r].v < h[m].v) m = r;
        if (m == i) return;
        SampleCand t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}

int sampler_sample(Sampler *s, const SampleParams *p, const float *logits) {
    const int V = s->vocab;
    float *w = s->work;
    for (int i = 0; i < V; i++) w[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    if (s->allowed)
        for (int i = 0; i < V; i++) if (!(s->allowed[i >> 6] >> (i & 63) & 1)) w[i] = -INFINITY;
    if (p->rep != 1.0f)
        for (int j = 0; j < s->n_uniq; j++) {
            float *x = &w[s->uniq[j]];
            *x = *x > 0 ? *x / p->rep : *x * p->rep;
        }
    if (p->freq != 0 || p->pres != 0)
        for (int j = 0; j < s->n_counted; j++) {
            int id = s->counted[j];
            w[id] -= (float)s->count[id] * p->freq + p->pres;
        }
    if (sample_is_greedy(p)) {
        int best = 0;
        for (int i = 1; i < V; i++) if (w[i] > w[best]) best = i;
        return best;
    }
    SampleCand *c = s->cand;
    int n = V;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) {
        c[i].id = i;
        c[i].v = w[i] / p->temperature;
        if (c[i].v > mx) mx = c[i].v;
    }
    if (mx == -INFINITY) return 0;
    if (p->top_k > 0 && p->top_k < n) {
        /* the k-th largest value; every token scoring at least that stays (ties too) */
        int k = p->top_k;
        SampleCand *heap = s->heap;
        memcpy(heap, c, (size_t)k * sizeof *heap);
        for (int i = k / 2 - 1; i >= 0; i--) heap_down(heap, k, i);
        for (int i = k; i < n; i++)
            if (c[i].v > heap[0].v) { heap[0] = c[i]; heap_down(heap, k, 0); }
        float kth = heap[0].v;
        int m = 0;
        for (int i = 0; i < n; i++) if (c[i].v >= kth) c[m++] = c[i];
        n = m;
    }
    return sampler_sample_from(s, p, c, n, mx);
}

/* Keeps the candidates whose weight exp(v - mx) is at least w, and the most likely; returns their count. */
static int keep_from(SampleCand *c, int n, float mx, double w) {
    int m = 0;
    for (int i = 0; i < n; i++) if (exp((double)c[i].v - mx) >= w || c[i].v == mx) c[m++] = c[i];
    return m;
}

int sampler_sample_from(Sampler *s, const SampleParams *p, SampleCand *c, int n, float mx) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)c[i].v - mx);
    if (p->top_p < 1.0f) {
        /* tokens below (1-p)/(n-1) of the mass can never be in the nucleus (but for the most likely, which
         * always is: with p < 1/n it may be below the bound too): drop them before sorting */
        if (n > 1) n = keep_from(c, n, mx, (1.0 - p->top_p) / (n - 1) * sum);
        qsort(c, (size_t)n, sizeof *c, cand_desc);
        double cum = 0, lim = p->top_p * sum;
        int m = 0;
        while (m < n && (m == 0 || cum < lim)) { cum += exp((double)c[m].v - mx); m++; }
        n = m;
    }
    if (p->min_p > 0) n = keep_from(c, n, mx, p->min_p);
    double tot = 0;
    for (int i = 0; i < n; i++) tot += exp((double)c[i].v - mx);
    double r = rng_unit(s) * tot, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)c[i].v - mx);
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}
