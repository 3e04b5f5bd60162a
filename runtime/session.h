/* session.h: one conversation with the model in one KV cache: a prompt's ids fed in chunks of max_batch, then one
 * token sampled at a time until a stop id, a stop string or the token limit, the reply's text handed to a callback
 * as it becomes final. The command line (run.c: one prompt, or -i's turns one after another in one session) and
 * each of the server's slots (serve.c) run this same code, so that one seed gives one text in both.
 *
 * The caller drives it one unit of model work at a time, session_forward then session_took, so that the server
 * can interleave its slots and decode them as one batch: model_forward_batch feeds a session's next id
 * (ids[n_fed], at position n_fed) and the caller then counts it fed and hands session_took that row's logits. */
#ifndef LLMCC_SESSION_H
#define LLMCC_SESSION_H
#include "buf.h"
#include "grammar.h"
#include "model_api.h"
#include "sample.h"
#include "tokenizer.h"
#include <stdbool.h>
#include <stdint.h>

/* where a reply's next token comes from */
#define SESSION_SAMPLES(X)                                                                   \
    X(SAMPLE_ARGMAX, "the device's argmax")      /* greedy without a penalty: no logits copied */ \
    X(SAMPLE_DEVICE_TOPK, "the device's top-k")  /* top-k from model_topk, penalties applied there */ \
    X(SAMPLE_LOGITS, "the logits")               /* the sampler over every logit */
#define SESSION_SAMPLE_ENUM(e, name) e,
typedef enum { SESSION_SAMPLES(SESSION_SAMPLE_ENUM) } SessionSample;
#undef SESSION_SAMPLE_ENUM

/* what session_took says */
typedef enum {
    SESSION_MORE,      /* go on: session_forward, then session_took */
    SESSION_STOP,      /* the reply ended at a stop id or a stop string */
    SESSION_LENGTH,    /* the reply ended at the token limit */
    SESSION_OOM,       /* the reply's text ran out of memory */
} SessionStep;

typedef struct {
    SampleParams sp;
    long max_new;                  /* new tokens at most; -1 (or more than fit): up to the context's end */
    bool ignore_eos;               /* stop ids are sampled like any other */
    bool want_logits;              /* the caller reads each sampled token's logits (s->logits): sample from them */
    bool device_topk;              /* top-k from model_topk where the parameters allow it */
    bool continues;                /* the reply continues the prompt's text: the decoder sees the prompt first
                                    * (SentencePiece then keeps the continuation's leading space) */
    bool echo;                     /* with continues: the prompt's text goes to on_text too (tok -1) */
    const char *const *stop; const size_t *stop_len; int n_stop;   /* the reply ends right before one */
    /* constrained decoding (grammar.h): the reply's tokens drawn among those that keep it inside the grammar, and
     * it ends where the grammar says it must (a stop token then always stops); NULL: none */
    GrammarState *grammar; const GrammarVocab *grammar_vocab;
    /* The reply's text[0..n) as it becomes final (its end held back while it may still begin a stop string):
     * once for each sampled id that enters the reply (tok, n maybe 0), and with tok -1 for the prompt's echo and
     * for the rest at the reply's end. */
    void (*on_text)(void *ctx, int tok, const char *text, size_t n);
    void *ctx;
} SessionParams;

typedef struct {
    Model *model;
    int slot;                      /* its KV cache: model_use_slot(slot) */
    const Tokenizer *tok;          /* NULL: ids only, no text */
    int ctx;                       /* KV-cache positions */
    int32_t *ids; int n_ids;       /* [ctx + 2] the conversation: prompts and replies */
    int n_fed;                     /* ids[0..n_fed) are in the KV cache */
    int reply_start;               /* ids[reply_start..n_ids): the reply at hand */
    float *logits;                 /* [vocab] the caller's: where a lone forward writes them */
    float *pen_sub;                /* [vocab] model_penalize's amounts (device top-k with a penalty) */
    Sampler smp;                   /* the sampler and its history (repetition penalty) */
    SessionParams p;
    SessionSample how;
    long max_new, n_gen;
    int next;                      /* the device's argmax of the last forward */
    TokDecoder dec;
    Buf text;                      /* the reply's text, cut right before a stop string */
    size_t sent;                   /* text[0..sent) went to on_text */
    char *piece; size_t piece_cap;
    double t_begin, t_first;       /* session_now() at session_begin and when the reply's first token was sampled */
    long topk_ties;                /* device top-k draws that fell back to the logits: a tie at the k-th */
    double t_grammar; long n_grammar;   /* seconds in the grammar's masks and steps, over that many tokens */
} Session;

extern const char *const session_sample_names[];
double session_now(void);          /* seconds, CLOCK_MONOTONIC */
/* generation_config's EOS ids and the chat template's end of turn */
bool session_is_stop(const Tokenizer *tok, int id);
/* The vocabulary as a grammar sees it (grammar.h): each token's bytes as they come out mid-text (kept in *bytes,
 * malloc'd, to free after the vocabulary), control tokens apart, the stop ids; NULL: out of memory */
GrammarVocab *session_grammar_vocab(const Tokenizer *tok, char **bytes);

/* NULL, or "out of memory". logits: [vocab] the caller's, shared by sessions that never run at once. */
const char *session_init(Session *s, Model *m, int slot, const Tokenizer *tok, int ctx, float *logits);
void session_free(Session *s);
/* Cuts the conversation back to ids[0..n) (n <= n_fed; the cache rows past n are overwritten by what is fed next);
 * the repetition penalty's history is rebuilt from what is left. */
void session_truncate(Session *s, int n);
/* A reply to ids[0..n) appended to the conversation (n_ids + n <= ctx: the caller says why not). */
void session_begin(Session *s, const int32_t *ids, int n, const SessionParams *p);
/* the prompt not yet all in the cache */
static inline bool session_prefilling(const Session *s) { return s->n_fed < s->reply_start; }
/* One unit of model work in this session alone: the next chunk of the prompt (max_batch ids at most), or the last
 * sampled id. Then session_took with s->logits. */
void session_forward(Session *s);
/* After a forward (s->next its argmax; logits[vocab] where how is SAMPLE_LOGITS): nothing while the prompt is
 * still being fed, else the next token sampled and its text handed on. */
SessionStep session_took(Session *s, const float *logits);
#endif
