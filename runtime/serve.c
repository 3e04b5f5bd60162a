/* serve.c: --serve, the OpenAI HTTP API over the compiled model (see serve.h): the slots and their scheduling, and
 * the routes that join the HTTP side (http.c: connections, framing) to OpenAI's schema (openai.c: what the
 * requests and replies say). Routes: POST /v1/chat/completions, POST /v1/completions (both with "stream":
 * server-sent events), GET /v1/models, GET /health; llama-server's POST /tokenize and /detokenize; GET /metrics
 * (metrics.c: Prometheus's text under vLLM's names).
 *
 * One thread, one event loop: poll() over the listening socket and the clients' connections, and between two
 * polls one unit of model work (a prefill chunk of max_batch tokens, or one decode step), so that a streamed
 * token goes out as soon as it is sampled and a client that goes away frees its slot at once.
 *
 * Slots (--parallel N): a slot is one request in flight with a KV cache of its own (model_init_slots); requests
 * beyond N wait in a queue, first come first served. Continuous batching: the slots past their prompt decode
 * together, one token each per model_forward_batch call (the weights read once for all of them; each token's
 * logits bit for bit what it gets alone), and a prompt's prefill chunk (model_forward, max_batch tokens) runs
 * between two such steps. A build without model_forward_batch (it returns -1) has its slots take turns. */
#include "serve.h"
#include "buf.h"
#include "http.h"
#include "metrics.h"
#include "openai.h"
#include "session.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) { return session_now(); }

typedef struct {
    bool active;
    int conn;                    /* the connection served */
    ApiRequest *req;
    Session sess;                /* its KV cache (sess.slot) and what it holds: the request's prompt, then its reply */
    int n_cached;                /* the request's prompt tokens whose KV rows were kept from the slot's last one */
    int n_exact;                 /* rows 0..n_exact of the cache hold ids[0..n_exact) as a fresh prefill computes
                                  * them (whole chunks of max_batch from position 0): a request that starts with
                                  * those ids keeps them, and its text is what it would be from an empty cache */
    double last_used;
    int owner;                   /* the key whose request the cache's rows hold (-1: none): only its requests keep
                                  * them, so that no client learns of another's prompt */
    long n_served, n_generated;  /* statistics: requests finished, tokens generated */
    double t_arrival;            /* the request's first byte (metrics: time to first token, end to end) */
    double t_last_token;         /* when its last token was sampled (metrics: inter-token latency) */
    int n_gen_seen;              /* its tokens the metrics have seen */
    long n_generated_seen;       /* n_generated at the last statistics line */
    Grammar *own_grammar;        /* the request's GBNF, compiled for it (a JSON object's is S.json_grammar) */
    GrammarState grammar;        /* where its reply is in the grammar, when it has one */
} Slot;

static struct {
    const ServeOpts *so;
    const ServeModel *sm;
    const char *name;
    Http http;                   /* the connections */
    ApiRequest *reqs;            /* [http.n_conns] each connection's request */
    int *queue; int n_queue;     /* connection indices waiting for a slot, oldest first */
    Slot *slots; int n_slots;
    int next_slot;               /* round robin: the slot to step first next time */
    int next_decode;             /* the slot a decode batch starts from (more busy slots than max_batch) */
    float *logits;               /* [vocab_size] a lone model_forward's, shared by the slots */
    /* the decode batch: one row per slot (model_forward_batch's arguments and results) */
    int32_t *b_ids, *b_next;
    int *b_slots, *b_pos;
    Slot **b_of;                 /* the slot of each row */
    float *b_logits;             /* [n_slots, vocab_size] */
    bool no_batch;               /* model_forward_batch said -1: the slots take turns */
    bool prefill_next;           /* the next step is a prefill chunk, where one waits */
    bool cache_on;               /* a request may keep the KV rows of a slot's last prompt (its key's: slot_keeps) */
    long created_base, serial;
    /* statistics */
    long n_requests, n_tokens_in, n_tokens_out;
    double t_start, t_last_stats;
    long last_tokens_out;
    double busy_s;
    long n_batches, n_batched;   /* decode batches run, the tokens they took */
    Metrics metrics;             /* GET /metrics */
    /* constrained decoding (grammar.h): the vocabulary's bytes as the grammars see them, made at the first request
     * that asks for one; response_format json_object's grammar, shared by the slots (its states and masks too) */
    GrammarVocab *gvocab;
    char *gvocab_bytes;
    Grammar *json_grammar;
} S;

static volatile sig_atomic_t g_stop, g_usr1;
static void on_stop(int sig) { (void)sig; g_stop = 1; }
static void on_usr1(int sig) { (void)sig; g_usr1 = 1; }

#define SERVER_OOM(c) http_send_error(c, 500, "server_error", NULL, NULL, "out of memory")
static void send_api_error(Conn *c, const ApiError *e) {
    http_send_error(c, e->status, e->type, e->param[0] ? e->param : NULL, e->code, "%s", e->message);
}

/* ---------------------------------------------------------------- generation */
static int chunk_tokens(void) { return model_info.max_batch > 0 ? model_info.max_batch : 1; }

static void slot_release(Slot *s) {
    int fed = s->sess.n_fed < s->sess.reply_start ? s->sess.n_fed : s->sess.reply_start;
    s->n_exact = S.cache_on ? fed / chunk_tokens() * chunk_tokens() : 0;
    s->owner = s->req ? s->req->key : -1;
    s->last_used = now_s();
    if (s->conn >= 0) api_request_free(&S.reqs[s->conn]);
    grammar_free(s->own_grammar);
    s->own_grammar = NULL;
    s->grammar.g = NULL;
    s->active = false;
    /* the shared JSON grammar's states and masks grow with the shapes it has seen: past a bound, and with no
     * request in it, it starts afresh */
    bool json_in_use = false;
    for (int k = 0; k < S.n_slots; k++) json_in_use |= S.slots[k].active && S.slots[k].grammar.g == S.json_grammar;
    if (S.json_grammar && !json_in_use && grammar_stats(S.json_grammar).sets > 200000) {
        grammar_free(S.json_grammar);
        S.json_grammar = NULL;
    }
    s->conn = -1;
    s->req = NULL;
}

static void stream_delta(Conn *c, const ApiRequest *r, bool role, const char *text, size_t n) {
    Buf b = {0};
    api_stream_delta(&b, r, role, text, n);
    http_send_chunk(c, &b);
    buf_free(&b);
}

/* session.h's on_text: a streamed reply's text as it becomes final, one event a piece */
static void slot_text(void *ctx, int tok, const char *text, size_t n) {
    Slot *s = ctx;
    s->n_generated += tok >= 0;
    if (s->req->stream && n) stream_delta(&S.http.conns[s->conn], s->req, false, text, n);
}

/* The reply's end; why: its finish_reason, "stop" or "length" */
static void slot_finish(Slot *s, const char *why) {
    Conn *c = &S.http.conns[s->conn];
    const ApiRequest *r = s->req;
    const Session *ss = &s->sess;
    ApiUsage u = { ss->reply_start, ss->n_gen, s->n_cached };
    S.n_tokens_in += ss->reply_start;
    S.n_tokens_out += ss->n_gen;
    s->n_served++;
    c->log_prompt = ss->reply_start;
    c->log_completion = ss->n_gen;
    S.metrics.prompt_tokens += ss->reply_start;
    S.metrics.generation_tokens += ss->n_gen;
    ++*(strcmp(why, "stop") ? &S.metrics.finished_length : &S.metrics.finished_stop);
    metrics_observe(&S.metrics.e2e, now_s() - s->t_arrival);
    Buf b = {0};
    if (r->stream) {
        api_stream_end(&b, r, why, &u);
        http_send_chunk(c, &b);
        http_end_stream(c);
    } else {
        api_reply(&b, r, ss->text.p ? ss->text.p : "", ss->text.len, why, &u);
        http_send_json(c, 200, &b);
    }
    buf_free(&b);
    slot_release(s);
}

/* The rows of slot s's cache a prompt of ids[0..n) keeps: whole chunks of max_batch that it shares with what
 * the slot computed last, leaving at least one token to feed (for the logits). */
static int slot_keeps(const Slot *s, const int32_t *ids, int n, int key) {
    if (s->owner != key) return 0;   /* another key's rows: none (nor does the time tell) */
    int common = 0, mb = chunk_tokens();
    while (common < n && common < s->n_exact && s->sess.ids[common] == ids[common]) common++;
    int keep = common / mb * mb;
    return keep < n ? keep : (n - 1) / mb * mb;
}

/* The vocabulary as grammars see it, made once */
static bool grammar_vocab_ready(void) {
    if (!S.gvocab) S.gvocab = session_grammar_vocab(S.sm->tok, &S.gvocab_bytes);
    return S.gvocab != NULL;
}

/* The grammar request r's reply keeps to (none: NULL and true); false with *e where its GBNF does not compile */
static bool request_grammar(const ApiRequest *r, Grammar **own, GrammarState *st, ApiError *e) {
    char why[400];   /* fits ApiError.message after "grammar: " */
    *own = NULL;
    if (r->format == API_FORMAT_TEXT) return true;
    if (!grammar_vocab_ready()) goto oom;
    if (r->format == API_FORMAT_GRAMMAR) {
        if (!(*own = grammar_compile(r->grammar, r->grammar_len, why, sizeof why))) {
            *e = (ApiError){ .status = 400, .type = "invalid_request_error" };
            snprintf(e->param, sizeof e->param, "grammar");
            snprintf(e->message, sizeof e->message, "grammar: %s", why);
            return false;
        }
        *st = grammar_start(*own);
        return true;
    }
    if (!S.json_grammar && !(S.json_grammar = grammar_compile(grammar_json_object_gbnf,
                                                              strlen(grammar_json_object_gbnf), why, sizeof why)))
        goto oom;
    *st = grammar_start(S.json_grammar);
    return true;
oom:
    *e = (ApiError){ .status = 500, .type = "server_error" };
    snprintf(e->message, sizeof e->message, "out of memory");
    return false;
}

/* Starts the oldest queued request in a free slot, the one that keeps most of its prompt's KV rows (then the
 * least recently used); false when the queue is empty or no slot is free. */
static bool slot_start(void) {
    while (S.n_queue > 0) {
        Slot *s = NULL;
        for (int k = 0; k < S.n_slots && !s; k++) if (!S.slots[k].active) s = &S.slots[k];
        if (!s) return false;
        int ci = S.queue[0];
        memmove(S.queue, S.queue + 1, (size_t)--S.n_queue * sizeof *S.queue);
        Conn *c = &S.http.conns[ci];
        if (c->fd < 0 || c->state != CONN_QUEUED) continue;   /* its client was dropped meanwhile */
        int32_t *ids;
        ApiError e;
        int n = api_request_ids(&S.reqs[ci], S.sm->tok, S.sm->system, S.sm->ctx, model_info.vocab_size, &ids, &e);
        if (n < 0) { free(ids); send_api_error(c, &e); continue; }
        Grammar *own;
        GrammarState gs = {0};
        if (!request_grammar(&S.reqs[ci], &own, &gs, &e)) { free(ids); send_api_error(c, &e); continue; }
        int keep = -1;
        for (int k = 0; k < S.n_slots; k++) {
            Slot *t = &S.slots[k];
            if (t->active) continue;
            int kt = slot_keeps(t, ids, n, S.reqs[ci].key);
            if (kt > keep || (kt == keep && t->last_used < s->last_used)) { s = t; keep = kt; }
        }
        ApiRequest *r = &S.reqs[ci];
        s->active = true;
        s->conn = ci;
        s->req = r;
        s->n_cached = keep;
        s->n_exact = 0;   /* until the request ends (slot_release) */
        s->t_arrival = c->t_request;
        s->n_gen_seen = 0;
        s->own_grammar = own;
        s->grammar = gs;
        /* a completion continues its prompt: the decoder sees the prompt first, as the command line's echo does;
         * a chat reply starts afresh */
        SessionParams p = { .sp = r->sp, .max_new = r->max_tokens, .ignore_eos = r->ignore_eos, .continues = !r->chat,
                            .stop = (const char *const *)r->stop, .stop_len = r->stop_len, .n_stop = r->n_stop,
                            .grammar = gs.g ? &s->grammar : NULL, .grammar_vocab = S.gvocab,
                            .on_text = slot_text, .ctx = s };
        session_truncate(&s->sess, 0);
        sampler_seed(&s->sess.smp, r->has_seed ? r->seed
                                   : (unsigned long long)time(NULL) ^ (unsigned long long)(now_s() * 1e9));
        session_begin(&s->sess, ids, n, &p);
        free(ids);
        s->sess.n_fed = keep;   /* the cache's rows 0..keep hold ids[0..keep) already (slot_keeps) */
        c->state = CONN_SERVING;
        if (r->stream) {   /* the opening of a streamed reply: a chat's with the assistant's role */
            http_send_head(c, 200, "text/event-stream", -1, !c->keep_alive || g_stop);
            if (r->chat) stream_delta(c, r, true, "", 0);
        }
        return true;
    }
    return false;
}

/* After slot s's forward (its argmax in sess.next, its logits in logits where it asked): once the prompt is in, the
 * next token sampled, the text streamed, the request finished at a stop or at max_tokens */
static void slot_took(Slot *s, const float *logits) {
    SessionStep step = session_took(&s->sess, logits);
    if (s->sess.n_gen > s->n_gen_seen) {   /* a token sampled: its latency */
        double now = now_s();
        metrics_observe(s->n_gen_seen ? &S.metrics.itl : &S.metrics.ttft,
                        now - (s->n_gen_seen ? s->t_last_token : s->t_arrival));
        s->t_last_token = now;
        s->n_gen_seen = s->sess.n_gen;
    }
    if (step == SESSION_MORE) return;
    if (step == SESSION_OOM) {   /* a stream already begun is cut off; a whole reply gets its error */
        if (s->req->stream) S.http.conns[s->conn].state = CONN_CLOSING;
        else SERVER_OOM(&S.http.conns[s->conn]);
        slot_release(s);
        return;
    }
    slot_finish(s, step == SESSION_STOP ? "stop" : "length");
}

/* One unit of model work in slot s alone: a prefill chunk, or the last sampled token fed; then slot_took */
static void slot_step(Slot *s) {
    double t0 = now_s();
    session_forward(&s->sess);
    S.busy_s += now_s() - t0;
    slot_took(s, S.logits);
}

/* One decode step of every slot past its prompt (up to max_batch of them, in turn from S.next_decode): each one's
 * last sampled token fed at its position in its own KV cache, in one model_forward_batch call. False where the
 * build has none (the slots then take turns). */
static bool decode_batch(void) {
    int n = 0, first = S.next_decode;
    bool logits = false;
    for (int k = 0; k < S.n_slots && n < chunk_tokens(); k++) {
        Slot *s = &S.slots[(first + k) % S.n_slots];
        S.next_decode = (first + k + 1) % S.n_slots;
        if (!s->active || session_prefilling(&s->sess)) continue;
        S.b_ids[n] = s->sess.ids[s->sess.n_fed];
        S.b_slots[n] = s->sess.slot;
        S.b_pos[n] = s->sess.n_fed;
        S.b_of[n++] = s;
        logits |= s->sess.how == SAMPLE_LOGITS;
    }
    if (!n) return true;
    double t0 = now_s();
    if (model_forward_batch(S.sm->model, S.b_ids, S.b_slots, S.b_pos, n, logits ? S.b_logits : NULL, S.b_next)) {
        S.no_batch = true;
        return false;
    }
    S.busy_s += now_s() - t0;
    S.n_batches++;
    S.n_batched += n;
    for (int t = 0; t < n; t++) {
        Slot *s = S.b_of[t];
        s->sess.n_fed++;
        s->sess.next = S.b_next[t];
        slot_took(s, S.b_logits + (size_t)t * model_info.vocab_size);
    }
    return true;
}

static int slots_busy(void) {
    int busy = 0;
    for (int k = 0; k < S.n_slots; k++) busy += S.slots[k].active;
    return busy;
}

/* ---------------------------------------------------------------- routes */
/* The HTTP side's handler: a request read whole on connection ci, answered at once or queued for a slot */
static void route(void *ctx, int ci) {
    (void)ctx;
    Conn *c = &S.http.conns[ci];
    long serial = ++S.serial, created = (long)time(NULL);
    S.n_requests++;   /* every request read whole counts, whatever its answer (a 401, a 404: with an error) */
    const char *url = c->url.p ? c->url.p : "";
    size_t ul = strcspn(url, "?");
    bool get = c->method == HTTP_METHOD_GET || c->method == HTTP_METHOD_HEAD, post = c->method == HTTP_METHOD_POST;
    if (c->method == HTTP_METHOD_CONNECT) {
        c->keep_alive = false;
        http_send_error(c, 405, "invalid_request_error", NULL, NULL, "CONNECT is not served here");
        return;
    }
    if (c->method == HTTP_METHOD_OPTIONS) {   /* a browser's preflight: it carries no key */
        if (S.so->cors) http_send_preflight(c);
        else http_send_error(c, 405, "invalid_request_error", NULL, NULL, "OPTIONS is answered with --cors");
        return;
    }
#define PATH(s) (ul == strlen(s) && !strncmp(url, s, ul))
    if (PATH("/health")) {
        if (!get) { http_send_error(c, 405, "invalid_request_error", NULL, NULL, "/health takes GET"); return; }
        Buf b = {0};
        buf_str(&b, "{\"status\":\"ok\"}");
        http_send_json(c, 200, &b);
        buf_free(&b);
        return;
    }
    int key = http_bearer_key(c, S.so->api_keys, S.so->n_api_keys);
    if (key < 0) {
        http_send_error(c, 401, "invalid_request_error", NULL, "invalid_api_key", "Incorrect API key provided");
        return;
    }
    if (PATH("/v1/models")) {
        if (!get) { http_send_error(c, 405, "invalid_request_error", NULL, NULL, "/v1/models takes GET"); return; }
        Buf b = {0};
        api_models(&b, S.name, S.created_base, model_info.architecture, S.sm->ctx, model_info.target);
        http_send_json(c, 200, &b);
        buf_free(&b);
        return;
    }
    if (PATH("/metrics")) {
        if (!get) { http_send_error(c, 405, "invalid_request_error", NULL, NULL, "/metrics takes GET"); return; }
        MetricsNow now = { .running = slots_busy(), .waiting = S.n_queue, .requests = S.n_requests,
                           .errors = S.http.n_errors };
        long rows = 0;
        for (int k = 0; k < S.n_slots; k++) rows += S.slots[k].active ? S.slots[k].sess.n_fed : 0;
        now.kv_usage = (double)rows / ((double)S.n_slots * S.sm->ctx);
        Buf b = {0};
        metrics_write(&b, &S.metrics, &now, S.name);
        http_send_body(c, 200, "text/plain; version=0.0.4; charset=utf-8", &b);
        buf_free(&b);
        return;
    }
    bool detok = PATH("/detokenize");
    if (detok || PATH("/tokenize")) {
        if (!post) {
            http_send_error(c, 405, "invalid_request_error", NULL, NULL, "%s takes POST", detok ? "/detokenize"
                            : "/tokenize");
            return;
        }
        Buf b = {0};
        ApiError e;
        if (detok ? api_detokenize(&b, c->body.p, c->body.len, S.sm->tok, model_info.vocab_size, &e)
                  : api_tokenize(&b, c->body.p, c->body.len, S.sm->tok, &e))
            http_send_json(c, 200, &b);
        else
            send_api_error(c, &e);
        buf_free(&b);
        return;
    }
    bool chat = PATH("/v1/chat/completions");
    if (chat || PATH("/v1/completions")) {
        if (!post) {
            http_send_error(c, 405, "invalid_request_error", NULL, NULL, "%s takes POST",
                            chat ? "/v1/chat/completions" : "/v1/completions");
            return;
        }
        if (g_stop) { http_send_error(c, 503, "server_error", NULL, NULL, "the server is shutting down"); return; }
        ApiRequest *r = &S.reqs[ci];
        ApiError e;
        if (!api_parse_request(r, c->body.p, c->body.len, chat, &S.sm->defaults, &e)) {
            send_api_error(c, &e);
            return;
        }
        if (r->model_asked && strcmp(r->model_asked, S.name)) {   /* as OpenAI answers a model it lacks */
            char asked[101];
            size_t n = strlen(r->model_asked) < 100 ? strlen(r->model_asked) : 100;
            for (size_t i = 0; i < n; i++) asked[i] = r->model_asked[i] >= 0x20 && r->model_asked[i] < 0x7f
                                                      ? r->model_asked[i] : '?';
            asked[n] = 0;
            api_request_free(r);
            http_send_error(c, 404, "invalid_request_error", "model", "model_not_found", "The model '%s' does not "
                            "exist (this server serves '%s': GET /v1/models)", asked, S.name);
            return;
        }
        r->model = S.name;
        r->key = key;
        r->id_base = S.created_base;
        r->serial = serial;
        r->created = created;
        c->streaming = r->stream;
        c->state = CONN_QUEUED;
        S.queue[S.n_queue++] = ci;
        return;
    }
#undef PATH
    char shown[201];   /* the path in the message: printable ASCII (the message is JSON, valid UTF-8) */
    http_shown_path(c, shown, sizeof shown);
    http_send_error(c, 404, "invalid_request_error", NULL, NULL, "no route %s (the routes: /v1/chat/completions, "
                    "/v1/completions, /v1/models, /tokenize, /detokenize, /metrics, /health)", shown);
}

/* The HTTP side's handler: connection ci goes (its client went away, or it timed out): its slot is free at once */
static void conn_gone(void *ctx, int ci) {
    (void)ctx;
    for (int k = 0; k < S.n_slots; k++)
        if (S.slots[k].active && S.slots[k].conn == ci) slot_release(&S.slots[k]);
    for (int q = 0; q < S.n_queue; q++)
        if (S.queue[q] == ci) {
            memmove(S.queue + q, S.queue + q + 1, (size_t)(--S.n_queue - q) * sizeof *S.queue);
            q--;
        }
    api_request_free(&S.reqs[ci]);
}

/* ---------------------------------------------------------------- the loop */

static void print_stats(void) {
    double now = now_s(), dt = now - S.t_last_stats;
    long out = S.n_tokens_out;
    int open = 0, busy = slots_busy();
    for (int k = 0; k < S.n_slots; k++) out += S.slots[k].active ? S.slots[k].sess.n_gen : 0;
    for (int i = 0; i < S.http.n_conns; i++) open += S.http.conns[i].fd >= 0;
    fprintf(stderr, "%s: %ld requests (%ld answered with an error), %ld prompt tokens, %ld generated; "
            "%.1f tok/s generated over the last %.0f s; slots busy %d of %d; queue %d; %d connections; "
            "model busy %.0f%%; %ld decode batches of %.1f tokens on average%s\n", S.name, S.n_requests,
            S.http.n_errors, S.n_tokens_in, out, dt > 0 ? (out - S.last_tokens_out) / dt : 0.0, dt, busy, S.n_slots,
            S.n_queue, open, now > S.t_start ? 100 * S.busy_s / (now - S.t_start) : 0.0, S.n_batches,
            S.n_batches ? (double)S.n_batched / (double)S.n_batches : 0.0,
            S.no_batch ? " (this build has no batched decoding: the slots take turns)" : "");
    for (int k = 0; k < S.n_slots && S.n_slots > 1; k++) {
        Slot *sl = &S.slots[k];
        fprintf(stderr, "%s:   slot %d: %s, %ld requests served, %ld tokens generated, %.1f tok/s over the last "
                "%.0f s\n", S.name, k, sl->active ? "busy" : "idle", sl->n_served, sl->n_generated,
                dt > 0 ? (sl->n_generated - sl->n_generated_seen) / dt : 0.0, dt);
        sl->n_generated_seen = sl->n_generated;
    }
    S.t_last_stats = now;
    S.last_tokens_out = out;
}

int serve_run(const ServeOpts *so, const ServeModel *sm) {
    memset(&S, 0, sizeof S);
    S.so = so;
    S.sm = sm;
    S.name = model_info.name && *model_info.name ? model_info.name : "llmcc";
    S.created_base = (long)time(NULL);
    S.t_start = S.t_last_stats = now_s();
    S.http = (Http){ .name = S.name, .max_body = so->max_body, .timeout_s = so->timeout_s,
                     .max_conns = so->max_conns, .max_per_peer = so->max_per_peer ? so->max_per_peer
                                                                                  : (so->max_conns + 3) / 4,
                     .stop = &g_stop, .cors = so->cors, .access_log = so->access_log,
                     .on = { route, conn_gone, NULL } };
    metrics_init(&S.metrics);

    S.logits = malloc((size_t)model_info.vocab_size * sizeof *S.logits);
    S.n_slots = so->parallel;
    S.slots = calloc((size_t)S.n_slots, sizeof *S.slots);
    int rows = S.n_slots < chunk_tokens() ? S.n_slots : chunk_tokens();   /* a decode batch's */
    S.b_ids = malloc((size_t)rows * sizeof *S.b_ids);
    S.b_next = malloc((size_t)rows * sizeof *S.b_next);
    S.b_slots = malloc((size_t)rows * sizeof *S.b_slots);
    S.b_pos = malloc((size_t)rows * sizeof *S.b_pos);
    S.b_of = malloc((size_t)rows * sizeof *S.b_of);
    S.b_logits = malloc((size_t)rows * (size_t)model_info.vocab_size * sizeof *S.b_logits);
    bool oom = !S.logits || !S.slots || !S.b_ids || !S.b_next || !S.b_slots ||
               !S.b_pos || !S.b_of || !S.b_logits;
    for (int k = 0; !oom && k < S.n_slots; k++) {
        Slot *sl = &S.slots[k];
        sl->conn = -1;
        sl->owner = -1;
        oom |= session_init(&sl->sess, sm->model, k, sm->tok, sm->ctx, S.logits) != NULL;
    }
    if (oom) {
        fprintf(stderr, "%s: out of memory\n", S.name);
        return 1;
    }

    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char host[128];
    int port = so->port;
    if (http_open(&S.http, so->host, &port, host, sizeof host) < 0) return 1;
    S.reqs = calloc((size_t)S.http.n_conns, sizeof *S.reqs);
    S.queue = malloc((size_t)S.http.n_conns * sizeof *S.queue);
    if (!S.reqs || !S.queue) {
        fprintf(stderr, "%s: out of memory\n", S.name);
        return 1;
    }
    size_t kv = 0;
    model_memory_bytes(sm->model, NULL, &kv, NULL);
    /* the prompt cache tells a request, by cached_tokens and by its speed, whether the last one in its slot began
     * as it does: across clients that is a leak, so by default it is on only where clients are told apart (each
     * key its own rows) or the address is this machine's */
    bool loopback = !strncmp(host, "127.", 4) || !strcmp(host, "[::1]");
    S.cache_on = so->prompt_cache >= 0 ? so->prompt_cache == 1 : so->n_api_keys > 0 || loopback;
    fprintf(stderr, "%s: serving on http://%s:%d/v1 (%d slot%s of context %d, KV caches %.1f MiB; %s; prompt "
            "cache %s)\n", S.name, host, port, so->parallel, so->parallel > 1 ? "s" : "", sm->ctx, kv / 1048576.0,
            sm->compute, !S.cache_on ? "off" : so->n_api_keys > 1 ? "per key" : "on");
    if (!loopback && !so->n_api_keys)
        fprintf(stderr, "%s: warning: serving beyond this machine without --api-key: anyone who reaches port %d "
                "can use the model%s\n", S.name, port, S.cache_on ? ", and the prompt cache tells one client of "
                "another's prompt" : "");
    int status = 0;
    for (;;) {
        if (g_stop && S.http.listen_fd >= 0) {   /* drain: no new connections, what is in flight finishes */
            http_stop_listening(&S.http);
            fprintf(stderr, "%s: stopping: finishing %d request(s) in flight\n", S.name,
                    S.n_queue + slots_busy());
        }
        if (g_usr1) { g_usr1 = 0; print_stats(); }
        double now = now_s();
        if (so->stats && now - S.t_last_stats >= so->stats_every) print_stats();
        while (slot_start()) {}
        int open = http_tend(&S.http, now);
        if (g_stop && !slots_busy() && S.n_queue == 0 && open == 0) break;
        bool work = slots_busy() || S.n_queue > 0;
        if (http_wait(&S.http, work ? 0 : 250) < 0) { status = 1; break; }
        for (int k = 0; k < S.n_slots; k++)   /* a slot whose client was dropped (a failed send) is free */
            if (S.slots[k].active && S.http.conns[S.slots[k].conn].state == CONN_CLOSING) slot_release(&S.slots[k]);
        /* one unit of model work: the decode batch and a waiting prompt's chunk in alternation (without
         * batching: the next busy slot's step, in turn) */
        int decoding = 0, prefilling = 0;
        for (int k = 0; k < S.n_slots; k++)
            if (S.slots[k].active) ++*(session_prefilling(&S.slots[k].sess) ? &prefilling : &decoding);
        bool batched = decoding && !S.no_batch && (!prefilling || !S.prefill_next) && decode_batch();
        S.prefill_next = batched;
        for (int k = 0; !batched && k < S.n_slots; k++) {
            Slot *sl = &S.slots[(S.next_slot + k) % S.n_slots];
            if (!sl->active || (!S.no_batch && !session_prefilling(&sl->sess) && prefilling)) continue;
            S.next_slot = (sl->sess.slot + 1) % S.n_slots;
            slot_step(sl);
            break;
        }
        http_pump(&S.http);
    }
    if (S.so->stats) print_stats();
    http_free(&S.http);
    for (int k = 0; S.slots && k < S.n_slots; k++) session_free(&S.slots[k].sess);
    free(S.b_ids); free(S.b_next); free(S.b_slots); free(S.b_pos); free(S.b_of); free(S.b_logits);
    free(S.slots); free(S.logits); free(S.reqs); free(S.queue);
    grammar_free(S.json_grammar);
    grammar_vocab_free(S.gvocab);
    free(S.gvocab_bytes);
    return status;
}
