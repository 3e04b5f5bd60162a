/* session.c: one conversation in one KV cache, from a prompt's ids to the reply's tokens and text (session.h):
 * prefill in chunks, the next token from the device's argmax, its top-k or the logits, stop ids, stop strings,
 * the token limit, and the text streamed as it becomes final. */
#include "session.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SESSION_SAMPLE_NAME(e, name) name,
const char *const session_sample_names[] = { SESSION_SAMPLES(SESSION_SAMPLE_NAME) };
#undef SESSION_SAMPLE_NAME

double session_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool session_is_stop(const Tokenizer *tok, int id) {
    for (int i = 0; i < model_info.n_eos && i < MODEL_MAX_EOS; i++)
        if (model_info.eos_ids[i] == id) return true;
    return tok && id >= 0 && tokenizer_chat_eot(tok) == id;
}

/* an internal error: the runtime's own contract broken */
#define SESSION_CHECK(cond)                                                                   \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "internal error at %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

static int chunk_tokens(void) { return model_info.max_batch > 0 ? model_info.max_batch : 1; }

const char *session_init(Session *s, Model *m, int slot, const Tokenizer *tok, int ctx, float *logits) {
    memset(s, 0, sizeof *s);
    s->model = m;
    s->slot = slot;
    s->tok = tok;
    s->ctx = ctx;
    s->logits = logits;
    s->ids = malloc((size_t)(ctx + 2) * sizeof *s->ids);
    s->piece_cap = (tok ? tokenizer_max_piece_bytes(tok) : 0) + 64;
    s->piece = malloc(s->piece_cap);
    if (!s->ids || !s->piece || sampler_init(&s->smp, model_info.vocab_size)) return "out of memory";
    return NULL;
}

void session_free(Session *s) {
    free(s->ids);
    free(s->piece);
    free(s->pen_sub);
    buf_free(&s->text);
    sampler_free(&s->smp);
    memset(s, 0, sizeof *s);
}

void session_truncate(Session *s, int n) {
    sampler_reset(&s->smp);
    for (int i = 0; i < n; i++) sampler_add(&s->smp, s->ids[i], false);
    s->n_ids = s->n_fed = s->reply_start = n;
    s->n_gen = 0;
}

void session_begin(Session *s, const int32_t *ids, int n, const SessionParams *p) {
    SESSION_CHECK(n >= 0 && s->n_ids + n <= s->ctx);
    s->p = *p;
    memcpy(s->ids + s->n_ids, ids, (size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) sampler_add(&s->smp, ids[i], false);
    s->n_ids += n;
    s->reply_start = s->n_ids;
    long room = s->ctx - s->n_ids + 1;   /* the last token is sampled from position ctx-1 and never fed back */
    s->max_new = p->max_new < 0 || p->max_new > room ? room : p->max_new;
    s->n_gen = 0;
    const SampleParams *sp = &p->sp;
    s->how = p->grammar ? SAMPLE_LOGITS   /* the mask applies to the logits */
           : !sample_needs_logits(sp) && !p->want_logits ? SAMPLE_ARGMAX
           : p->device_topk && !p->want_logits && sp->top_k > 1 && sp->top_k < model_info.max_top_k &&
             sp->top_k < MODEL_TOPK_CAP ? SAMPLE_DEVICE_TOPK : SAMPLE_LOGITS;
    if (s->how == SAMPLE_DEVICE_TOPK && !s->pen_sub) {
        s->pen_sub = malloc((size_t)model_info.vocab_size * sizeof *s->pen_sub);
        if (!s->pen_sub) s->how = SAMPLE_LOGITS;   /* the logits need no more memory */
    }
    s->text.len = 0;
    s->sent = 0;
    s->t_begin = session_now();
    s->t_first = 0;
    if (!s->tok) return;
    tokdec_init(&s->dec, s->tok, false);
    for (int i = 0; p->continues && i < n; i++) {
        size_t k = tokdec_push(&s->dec, ids[i], s->piece, s->piece_cap);
        if (p->echo && p->on_text) p->on_text(p->ctx, -1, s->piece, k);
    }
}

void session_forward(Session *s) {
    int left = s->reply_start - s->n_fed, mb = chunk_tokens();
    int k = left <= 0 ? 1 : left < mb ? left : mb;   /* the last sampled id, or a chunk of the prompt */
    model_use_slot(s->model, s->slot);
    s->next = model_forward(s->model, s->ids + s->n_fed, k, s->n_fed, s->how == SAMPLE_LOGITS ? s->logits : NULL);
    s->n_fed += k;
}

static int cand_id(const void *a, const void *b) {
    return ((const SampleCand *)a)->id - ((const SampleCand *)b)->id;
}
/* sampler_sample() for top-k from the model's device top-k: the same candidates in the same order (ascending ids),
 * so the same token for the same random number. The k+1-th value tells whether the k-th ties with a token outside
 * (after the temperature's rounding): then sampler_sample() keeps the ties and needs every logit. */
static int sample_device_topk(Session *s) {
    const SampleParams *sp = &s->p.sp;
    float v[MODEL_TOPK_CAP];
    int32_t id[MODEL_TOPK_CAP];
    int k = sp->top_k;
    SampleParams plain = *sp;   /* the penalties are in the device's logits from here on */
    if (sp->rep != 1.0f || sp->freq != 0 || sp->pres != 0) {
        /* sample.c's amounts: the repetition penalty over the history's ids, frequency and presence over the
         * generated ones' counts */
        const Sampler *h = &s->smp;
        for (int j = 0; j < h->n_uniq; j++) {
            int c = h->count[h->uniq[j]];
            s->pen_sub[j] = c && (sp->freq != 0 || sp->pres != 0) ? (float)c * sp->freq + sp->pres : 0.0f;
        }
        SESSION_CHECK(model_penalize(s->model, h->uniq, s->pen_sub, h->n_uniq, sp->rep) == 0);
        plain.rep = 1.0f;
        plain.freq = plain.pres = 0;
    }
    SESSION_CHECK(model_topk(s->model, k + 1, v, id) == 0);   /* k + 1 <= max_top_k: session_begin's choice */
    if (sample_is_greedy(sp) && v[0] != v[1]) return id[0];   /* the penalized argmax (ties: the logits decide) */
    if (sample_is_greedy(sp) || v[k - 1] / sp->temperature == v[k] / sp->temperature) {
        s->topk_ties++;
        model_logits(s->model, s->logits);
        return sampler_sample(&s->smp, &plain, s->logits);
    }
    SampleCand *c = s->smp.cand;
    for (int i = 0; i < k; i++) { c[i].id = id[i]; c[i].v = v[i] / sp->temperature; }
    float mx = c[0].v;
    if (mx == -INFINITY) return 0;
    qsort(c, (size_t)k, sizeof *c, cand_id);
    return sampler_sample_from(&s->smp, sp, c, k, mx);
}

/* Appends text[0..n) (one sampled id's) to the reply; true when a stop string ended it (the reply then cut right
 * before the earliest one). */
static bool add_text(Session *s, const char *text, size_t n) {
    size_t before = s->text.len, cut = SIZE_MAX;
    buf_add(&s->text, text, n);
    for (int q = 0; q < s->p.n_stop; q++) {
        size_t L = s->p.stop_len[q];
        if (s->text.len < L) continue;
        for (size_t at = before + 1 >= L ? before + 1 - L : 0; at + L <= s->text.len && at < cut; at++)
            if (!memcmp(s->text.p + at, s->p.stop[q], L)) { cut = at; break; }
    }
    if (cut == SIZE_MAX) return false;
    s->text.len = cut;
    s->text.p[cut] = 0;
    return true;
}

/* the text's end that may still become a stop string: held back */
static size_t stop_holdback(const Session *s) {
    size_t hold = 0;
    for (int q = 0; q < s->p.n_stop; q++) {
        size_t L = s->p.stop_len[q];
        for (size_t k = L - 1; k > hold; k--)
            if (k <= s->text.len && !memcmp(s->text.p + s->text.len - k, s->p.stop[q], k)) { hold = k; break; }
    }
    return hold;
}

/* text[sent..upto) to on_text */
static void hand_on(Session *s, int tok, size_t upto) {
    size_t from = s->sent < upto ? s->sent : upto;
    if (s->p.on_text) s->p.on_text(s->p.ctx, tok, s->text.p ? s->text.p + from : "", upto - from);
    s->sent = upto;
}

/* the reply's end: the decoder's last bytes (unless a stop string came first) and the rest of the text handed on */
static SessionStep finish(Session *s, bool stopped, SessionStep why) {
    /* the decoder's bytes still held (a character cut between tokens): the reply's, or the echoed prompt's; never the
     * unechoed prompt's */
    bool flush = !stopped && s->tok && (s->n_gen > 0 || s->p.echo);
    if (flush && add_text(s, s->piece, tokdec_flush(&s->dec, s->piece, s->piece_cap))) why = SESSION_STOP;
    if (s->text.oom) return SESSION_OOM;
    if (s->text.len > s->sent) hand_on(s, -1, s->text.len);
    return why;
}

SessionStep session_took(Session *s, const float *logits) {
    if (session_prefilling(s)) return SESSION_MORE;
    if (s->n_gen >= s->max_new) return finish(s, false, SESSION_LENGTH);
    GrammarState *gs = s->p.grammar;
    double t_mask = gs ? session_now() : 0;
    if (gs) {   /* only the tokens the grammar allows: none left (its end, and no stop token) ends the reply */
        s->smp.allowed = grammar_mask(gs, s->p.grammar_vocab);
        s->t_grammar += session_now() - t_mask;
        s->n_grammar++;
        if (!s->smp.allowed) return SESSION_OOM;
        bool any = false;
        for (int w = 0; w < (model_info.vocab_size + 63) / 64 && !any; w++) any = s->smp.allowed[w] != 0;
        if (!any) { s->smp.allowed = NULL; return finish(s, false, SESSION_STOP); }
    }
    int tok = s->how == SAMPLE_ARGMAX ? s->next
            : s->how == SAMPLE_DEVICE_TOPK ? sample_device_topk(s) : sampler_sample(&s->smp, &s->p.sp, logits);
    s->smp.allowed = NULL;
    if (s->n_gen == 0) s->t_first = session_now();
    if ((!s->p.ignore_eos || gs) && session_is_stop(s->tok, tok)) return finish(s, false, SESSION_STOP);
    double t_step = gs ? session_now() : 0;
    if (gs && !grammar_accept_token(gs, s->p.grammar_vocab, tok)) return SESSION_OOM;   /* the mask allowed it */
    if (gs) s->t_grammar += session_now() - t_step;
    s->ids[s->n_ids++] = tok;
    sampler_add(&s->smp, tok, true);
    s->n_gen++;
    bool stopped = s->tok && add_text(s, s->piece, tokdec_push(&s->dec, tok, s->piece, s->piece_cap));
    if (s->text.oom) return SESSION_OOM;
    hand_on(s, tok, s->text.len - (stopped ? 0 : stop_holdback(s)));
    if (stopped) return finish(s, true, SESSION_STOP);
    if (gs && grammar_must_end(gs)) return finish(s, false, SESSION_STOP);   /* nothing may follow */
    if (s->n_gen >= s->max_new) return finish(s, false, SESSION_LENGTH);
    return SESSION_MORE;
}

GrammarVocab *session_grammar_vocab(const Tokenizer *tok, char **bytes_out) {
    int V = model_info.vocab_size, n_stop = 0;
    size_t piece = tokenizer_max_piece_bytes(tok), used = 0;
    char *buf = malloc(piece);
    size_t *off = malloc(((size_t)V + 1) * sizeof *off);
    const uint8_t **bytes = malloc((size_t)V * sizeof *bytes);
    int *lens = malloc((size_t)V * sizeof *lens);
    bool *special = malloc((size_t)V);
    int32_t *stop = malloc((size_t)V * sizeof *stop);
    Buf all = {0};
    GrammarVocab *v = NULL;
    bool ok = buf && off && bytes && lens && special && stop;
    for (int id = 0; ok && id < V; id++) {
        size_t n = tokenizer_token_bytes(tok, id, buf, &special[id]);
        off[id] = used;
        buf_add(&all, buf, n);
        used += n;
        lens[id] = (int)n;
        if (session_is_stop(tok, id)) stop[n_stop++] = id;
    }
    ok = ok && !all.oom;
    for (int id = 0; ok && id < V; id++) bytes[id] = (const uint8_t *)all.p + off[id];
    if (ok) v = grammar_vocab_new(V, bytes, lens, special, stop, n_stop);
    if (v) *bytes_out = all.p;
    else buf_free(&all);
    free(buf); free(off); free(bytes); free(lens); free(special); free(stop);
    return v;
}
