/* sample.h: the next token from a model's logits, the way Hugging Face's generate() processes them:
 * repetition penalty (over the whole history, prompt included), frequency and presence penalties (OpenAI's:
 * over the generated tokens only), temperature, top-k, top-p, min-p, then one draw from a seeded generator.
 * Shared by the command line (run.c) and the server (serve.c), so that one seed gives one text in both. */
#ifndef LLMCC_SAMPLE_H
#define LLMCC_SAMPLE_H
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    float temperature;     /* >= 0; below SAMPLE_GREEDY_BELOW: greedy */
    int top_k;             /* 0: off */
    float top_p;           /* (0, 1]; 1: off */
    float min_p;           /* [0, 1]; 0: off */
    float rep;             /* > 0; 1: off. logit / rep if positive, * rep if not, once per id in the history */
    float freq, pres;      /* OpenAI's: logit -= count * freq + (count > 0) * pres, count over generated ids */
} SampleParams;

/* A temperature below this samples as greedy: a logit gap of 0.01 weighs e^-100 there already, and a smaller one
 * (1e-45) would overflow logit / temperature to inf (every candidate alike). The same on the CLI and the API. */
#define SAMPLE_GREEDY_BELOW 1e-4f
static inline bool sample_is_greedy(const SampleParams *p) {
    return p->temperature < SAMPLE_GREEDY_BELOW || p->top_k == 1;
}

typedef struct SampleCand { int id; float v; } SampleCand;

typedef struct {
    int vocab;
    uint64_t rng;            /* xorshift64* state, never 0 */
    float *work;             /* [vocab] the processed logits */
    SampleCand *cand;        /* [vocab] */
    SampleCand *heap;        /* [vocab] top-k's min-heap */
    unsigned char *seen;     /* [vocab] ids in the history (repetition penalty) */
    int32_t *uniq; int n_uniq;       /* [vocab] the seen ids, in order of first appearance */
    int32_t *count;          /* [vocab] times each id was generated (frequency / presence penalties) */
    int32_t *counted; int n_counted; /* [vocab] the ids with a count, to reset them */
    const uint64_t *allowed; /* NULL, or a bit per id: the others are never drawn (a grammar's mask, grammar.h) */
} Sampler;

/* NULL, or "out of memory" */
const char *sampler_init(Sampler *s, int vocab);
void sampler_free(Sampler *s);
void sampler_seed(Sampler *s, unsigned long long seed);
/* Forgets the history (a new conversation). */
void sampler_reset(Sampler *s);
/* An id entered the history: a prompt's (generated false) or a sampled one's (generated true). */
void sampler_add(Sampler *s, int32_t id, bool generated);
/* Whether the parameters need the logits on the host (any penalty, or a draw): false for plain greedy, whose
 * token is the device's argmax. */
bool sample_needs_logits(const SampleParams *p);
/* The next id from logits[vocab] (NaN counted as -inf). */
int sampler_sample(Sampler *s, const SampleParams *p, const float *logits);
/* The draw over the candidates c[0..n) (ascending ids, temperature applied), mx their largest value:
 * top-p, min-p, then one random number. */
int sampler_sample_from(Sampler *s, const SampleParams *p, SampleCand *c, int n, float mx);
#endif
