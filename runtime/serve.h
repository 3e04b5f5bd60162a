/* serve.h: --serve, the executable as an OpenAI-compatible HTTP server (serve.c). run.c loads the payload, the
 * tokenizer and the model, then hands them over here. */
#ifndef LLMCC_SERVE_H
#define LLMCC_SERVE_H
#include "model_api.h"
#include "sample.h"
#include "tokenizer.h"
#include <stdbool.h>

typedef struct {
    const char *host;         /* address to bind (default 127.0.0.1) */
    int port;                 /* 0: one the system picks (printed on stderr) */
    int parallel;             /* requests decoded at once (slots) */
    const char *const *api_keys; int n_api_keys;   /* the keys requests may carry (none: none asked); each key's
                              * requests share prompt-cache rows only with that key's */
    int prompt_cache;         /* 1 on, 0 off, -1: on where it cannot tell one client another's prompt (keys given,
                              * or a loopback address), else off */
    long max_body;            /* request body bytes at most */
    int timeout_s;            /* a request must arrive whole, a reply be taken up, within this; idle keep-alive */
    int max_conns;            /* open connections at most */
    int max_per_peer;         /* of them from one address other than loopback (0: max_conns / 4) */
    const char *cors;         /* Access-Control-Allow-Origin of every reply, and OPTIONS answered (NULL: neither) */
    bool access_log;          /* a line on stderr per request answered */
    bool stats;               /* a line on stderr every stats_every seconds (SIGUSR1: at once, always) */
    int stats_every;
} ServeOpts;

typedef struct {
    Model *model;
    const Tokenizer *tok;     /* never NULL: the server speaks text */
    int ctx;                  /* KV-cache positions */
    SampleParams defaults;    /* generation_config's sampling, or the command line's */
    const char *system;       /* --system: the system message when a chat brings none (NULL: the template's) */
    const char *compute;      /* what runs the kernels (model_threads) */
} ServeModel;

/* Serves until SIGTERM or SIGINT (then finishes what is in flight). Returns the exit status; a setup error
 * (the address in use) is one line on stderr and 1. */
int serve_run(const ServeOpts *so, const ServeModel *sm);
#endif
