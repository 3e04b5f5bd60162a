/* serve.c: --serve, the OpenAI HTTP API over the compiled model (see serve.h).
 *
 * One thread, one event loop: poll() over the listening socket and the clients' connections, and between two
 * polls one unit of model work (a prefill chunk of max_batch tokens, or one decode step), so that a streamed
 * token goes out as soon as it is sampled and a client that goes away frees its slot at once. HTTP/1.1 is
 * parsed by llhttp (Node.js's parser, Debian's node-llhttp sources compiled in); what the requests and replies
 * say is OpenAI's schema (openai.c). Routes: POST /v1/chat/completions, POST /v1/completions (both with
 * "stream": server-sent events), GET /v1/models, GET /health.
 *
 * Slots (--parallel N): a slot is one request in flight with a KV cache of its own (model_init_slots); requests
 * beyond N wait in a queue, first come first served. Continuous batching: the slots past their prompt decode
 * together, one token each per model_forward_batch call (the weights read once for all of them; each token's
 * logits bit for bit what it gets alone), and a prompt's prefill chunk (model_forward, max_batch tokens) runs
 * between two such steps. A build without model_forward_batch (it returns -1) has its slots take turns. */
#include "serve.h"
#include "buf.h"
#include "openai.h"
#include <llhttp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 16384            /* request line + headers, bytes */
#define OUT_MAX (16u << 20)       /* a reply a client does not take up: the connection is dropped past this */
#define IN_PENDING_MAX 65536      /* bytes read ahead while a request is served (pipelining) */
#define OUT_PENDING_MAX 262144    /* replies not taken up past this: no further request is read */
#define READS_PER_TURN 4          /* recv calls per connection between two model steps */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- connections */
enum { CONN_READING, CONN_QUEUED, CONN_SERVING, CONN_CLOSING };

typedef struct {
    int fd;                      /* -1: a free entry */
    int state;
    llhttp_t http;
    Buf in;                      /* bytes read, not yet parsed (a pipelined request waits here) */
    Buf out;                     /* bytes to send */
    size_t out_off;              /* out.p[0..out_off) sent */
    /* the request being parsed */
    Buf url, body, auth;
    char field[32]; size_t field_len; bool field_long;   /* the header name being read, lower case */
    int header;                  /* 0 other, 1 authorization, 2 expect */
    bool expect_continue;
    size_t head_bytes;
    bool in_request;             /* a request's first byte has been parsed, its reply not sent */
    bool lingering;              /* closing: our side is shut, what the client still sends is read and dropped */
    double linger_until;
    bool peer_eof;               /* the client shut its side (or closed): nothing more is read */
    bool head_only;              /* a HEAD request: the reply's head, no body */
    bool http10;                 /* an HTTP/1.0 request: a stream is ended by closing, not chunked */
    bool rejected;               /* accepted past --max-conns only to be answered 503 */
    double t_sent;               /* last progress sending (a reply not taken up times out from here) */
    int error_status;            /* set by a callback that stops the parser: 413, 431, 414 */
    bool keep_alive, chunked;
    double t_request;            /* when the request being read began (or the connection opened) */
    double t_active;             /* last byte in or out */
    ApiRequest req;
} Conn;

typedef struct {
    bool active;
    int index;                   /* its KV cache: model_use_slot(index) */
    int conn;                    /* the connection served */
    ApiRequest *req;
    int32_t *ids; int n_ids;     /* prompt, then the generated ids; [ctx + 1] */
    int n_prompt, n_fed;
    int n_cached;                /* the request's prompt tokens whose KV rows were kept from the slot's last one */
    int n_exact;                 /* rows 0..n_exact of the cache hold ids[0..n_exact) as a fresh prefill computes
                                  * them (whole chunks of max_batch from position 0): a request that starts with
                                  * those ids keeps them, and its text is what it would be from an empty cache */
    double last_used;
    long max_new, n_gen;
    int next;                    /* the argmax of the last forward */
    long n_served, n_generated;  /* statistics: requests finished, tokens generated */
    long n_generated_seen;       /* n_generated at the last statistics line */
    bool dev_argmax;
    TokDecoder dec;
    Buf text;                    /* the reply so far (stop strings cut off) */
    size_t sent;                 /* text bytes already streamed */
    Sampler smp;
    double t_start, t_first;
} Slot;

static struct {
    const ServeOpts *so;
    const ServeModel *sm;
    const char *name;
    int listen_fd;
    Conn *conns; int n_conns;
    int *queue; int n_queue;     /* connection indices waiting for a slot, oldest first */
    Slot *slots; int n_slots;
    int next_slot;               /* round robin: the slot to step first next time */
    int next_decode;             /* the slot a decode batch starts from (more busy slots than max_batch) */
    float *logits;               /* [vocab_size] model_forward's */
    /* the decode batch: one row per slot (model_forward_batch's arguments and results) */
    int32_t *b_ids, *b_next;
    int *b_slots, *b_pos;
    Slot **b_of;                 /* the slot of each row */
    float *b_logits;             /* [n_slots, vocab_size] */
    bool no_batch;               /* model_forward_batch said -1: the slots take turns */
    bool prefill_next;           /* the next step is a prefill chunk, where one waits */
    char *piece; size_t piece_cap;
    long created_base, serial;
    /* statistics */
    long n_requests, n_tokens_in, n_tokens_out, n_errors;
    double t_start, t_last_stats;
    long last_tokens_out;
    double busy_s;
    long n_batches, n_batched;   /* decode batches run, the tokens they took */
    double accept_rest_until;
} S;

static volatile sig_atomic_t g_stop, g_usr1;
static void on_stop(int sig) { (void)sig; g_stop = 1; }
static void on_usr1(int sig) { (void)sig; g_usr1 = 1; }

static void conn_flush(Conn *c);

/* Queues bytes for the client. A client that takes up nothing while more than OUT_MAX bytes wait is dropped. */
static void conn_send(Conn *c, const void *p, size_t n) {
    if (c->fd < 0 || c->state == CONN_CLOSING) return;
    if (c->out.len == c->out_off) c->t_sent = now_s();
    buf_add(&c->out, p, n);
    if (c->out.oom || c->out.len - c->out_off > OUT_MAX) {
        c->state = CONN_CLOSING;   /* dropped by the loop, its slot freed */
        c->out.len = c->out_off = 0;
        c->out.oom = false;
    }
}

static const char *status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static void send_head(Conn *c, int status, const char *ctype, long length, bool close) {
    Buf h = {0};
    buf_fmt(&h, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", status, status_text(status), ctype);
    if (length >= 0) buf_fmt(&h, "Content-Length: %ld\r\n", length);
    else if (c->http10) { buf_str(&h, "Cache-Control: no-cache\r\n"); close = true; }   /* ends when closed */
    else buf_str(&h, "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n");
    if (close) c->keep_alive = false;
    buf_str(&h, close ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n");
    if (h.oom) c->state = CONN_CLOSING;
    else conn_send(c, h.p, h.len);
    buf_free(&h);
}

static void request_done(Conn *c);

static void send_json(Conn *c, int status, const Buf *body) {
    if (body->oom) { c->state = CONN_CLOSING; return; }
    bool close = !c->keep_alive || status == 413 || status == 431 || status == 408 || status == 414 || g_stop;
    send_head(c, status, "application/json", (long)body->len + 1, close);
    if (!c->head_only) {
        conn_send(c, body->p, body->len);
        conn_send(c, "\n", 1);
    }
    if (close) c->keep_alive = false;
    if (status != 200) S.n_errors++;
    request_done(c);
}

/* OpenAI's error object; param: the request field at fault (NULL: none) */
static void send_error(Conn *c, int status, const char *type, const char *param, const char *code,
                       const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void send_error(Conn *c, int status, const char *type, const char *param, const char *code,
                       const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *key[] = { "message", "type", "param", "code" }, *val[] = { msg, type, param, code };
    Buf b = {0};
    buf_str(&b, "{\"error\":{");
    for (int i = 0; i < 4; i++) {
        buf_fmt(&b, "%s\"%s\":", i ? "," : "", key[i]);
        if (val[i]) buf_json_str(&b, val[i], strlen(val[i])); else buf_str(&b, "null");
    }
    buf_str(&b, "}}");
    send_json(c, status, &b);
    buf_free(&b);
}
#define SERVER_OOM(c) send_error(c, 500, "server_error", NULL, NULL, "out of memory")
static void send_api_error(Conn *c, const ApiError *e) {
    send_error(c, e->status, e->type, e->param[0] ? e->param : NULL, e->code, "%s", e->message);
}

/* ---------------------------------------------------------------- HTTP parsing (llhttp callbacks) */
static Conn *conn_of(llhttp_t *p) { return (Conn *)p->data; }

static int head_grow(Conn *c, size_t n) {
    c->head_bytes += n;
    if (c->head_bytes > HEAD_MAX) { c->error_status = 431; return -1; }
    return 0;
}
static int on_message_begin(llhttp_t *p) {
    Conn *c = conn_of(p);
    c->url.len = c->body.len = c->auth.len = 0;
    c->head_bytes = 0;
    c->field_len = 0;
    c->header = 0;
    c->expect_continue = false;
    c->in_request = true;
    c->t_request = now_s();
    return 0;
}
static int on_url(llhttp_t *p, const char *at, size_t n) {
    Conn *c = conn_of(p);
    if (head_grow(c, n) || c->url.len + n > 2048) { if (!c->error_status) c->error_status = 414; return -1; }
    buf_add(&c->url, at, n);
    return 0;
}
static int on_header_field(llhttp_t *p, const char *at, size_t n) {
    Conn *c = conn_of(p);
    if (head_grow(c, n)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (c->field_len + 1 >= sizeof c->field) { c->field_long = true; break; }
        char ch = at[i];
        c->field[c->field_len++] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
    }
    return 0;
}
static int on_header_field_complete(llhttp_t *p) {
    Conn *c = conn_of(p);
    c->field[c->field_len] = 0;
    c->header = c->field_long ? 0 : !strcmp(c->field, "authorization") ? 1 : !strcmp(c->field, "expect") ? 2 : 0;
    if (c->header == 1) c->auth.len = 0;
    c->field_len = 0;
    c->field_long = false;
    return 0;
}
static int on_header_value(llhttp_t *p, const char *at, size_t n) {
    Conn *c = conn_of(p);
    if (head_grow(c, n)) return -1;
    if (c->header == 1) buf_add(&c->auth, at, n);
    if (c->header == 2 && n >= 12 && !strncasecmp(at, "100-continue", 12)) c->expect_continue = true;
    return 0;
}
static int on_headers_complete(llhttp_t *p) {
    Conn *c = conn_of(p);
    /* "Connection: Upgrade" (curl --http2 on http://) is a request like any other here; CONNECT is answered 405 */
    if (p->method != HTTP_CONNECT) p->upgrade = 0;
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > (uint64_t)S.so->max_body) {
        c->error_status = 413;
        return -1;
    }
    if (c->expect_continue) conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return 0;
}
static int on_body(llhttp_t *p, const char *at, size_t n) {
    Conn *c = conn_of(p);
    if (c->body.len + n > (size_t)S.so->max_body) { c->error_status = 413; return -1; }
    buf_add(&c->body, at, n);
    return 0;
}
static int on_message_complete(llhttp_t *p) {
    Conn *c = conn_of(p);
    c->keep_alive = llhttp_should_keep_alive(p);
    return HPE_PAUSED;   /* one request at a time: the parser waits until its reply is out */
}

static llhttp_settings_t g_http;

/* ---------------------------------------------------------------- generation */
static int chunk_tokens(void) { return model_info.max_batch > 0 ? model_info.max_batch : 1; }

static void slot_release(Slot *s) {
    int fed = s->n_fed < s->n_prompt ? s->n_fed : s->n_prompt;
    s->n_exact = fed / chunk_tokens() * chunk_tokens();
    s->last_used = now_s();
    if (s->conn >= 0) {
        Conn *c = &S.conns[s->conn];
        api_request_free(&c->req);
    }
    s->active = false;
    s->conn = -1;
    s->req = NULL;
    s->text.len = 0;
}

static void chunk(Conn *c, const Buf *payload) {   /* one chunk of a chunked reply (HTTP/1.0: the bytes) */
    if (c->http10) { conn_send(c, payload->p, payload->len); return; }
    char head[32];
    int n = snprintf(head, sizeof head, "%zx\r\n", payload->len);
    conn_send(c, head, (size_t)n);
    conn_send(c, payload->p, payload->len);
    conn_send(c, "\r\n", 2);
}

static void stream_delta(Conn *c, const ApiRequest *r, bool role, const char *text, size_t n) {
    Buf b = {0};
    api_stream_delta(&b, r, role, text, n);
    chunk(c, &b);
    buf_free(&b);
}

/* streams text[sent..upto) as one event */
static void stream_text(Slot *s, Conn *c, size_t upto) {
    if (upto <= s->sent) return;
    stream_delta(c, s->req, false, s->text.p + s->sent, upto - s->sent);
    s->sent = upto;
}

/* The opening of a streamed chat reply: the assistant's role. */
static void stream_open(Slot *s, Conn *c) {
    send_head(c, 200, "text/event-stream", -1, !c->keep_alive || g_stop);
    if (s->req->chat) stream_delta(c, s->req, true, "", 0);
}

/* The reply's end; why: its finish_reason, "stop" or "length" */
static void slot_finish(Slot *s, const char *why) {
    Conn *c = &S.conns[s->conn];
    const ApiRequest *r = s->req;
    ApiUsage u = { s->n_prompt, s->n_gen, s->n_cached };
    S.n_tokens_in += s->n_prompt;
    S.n_tokens_out += s->n_gen;
    s->n_served++;
    Buf b = {0};
    if (r->stream) {
        stream_text(s, c, s->text.len);
        api_stream_end(&b, r, why, &u);
        chunk(c, &b);
        if (!c->http10) conn_send(c, "0\r\n\r\n", 5);
        request_done(c);
    } else {
        api_reply(&b, r, s->text.p ? s->text.p : "", s->text.len, why, &u);
        send_json(c, 200, &b);
    }
    buf_free(&b);
    slot_release(s);
}

/* The rows of slot s's cache a prompt of ids[0..n) keeps: whole chunks of max_batch that it shares with what
 * the slot computed last, leaving at least one token to feed (for the logits). */
static int slot_keeps(const Slot *s, const int32_t *ids, int n) {
    int common = 0, mb = chunk_tokens();
    while (common < n && common < s->n_exact && s->ids[common] == ids[common]) common++;
    int keep = common / mb * mb;
    return keep < n ? keep : (n - 1) / mb * mb;
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
        Conn *c = &S.conns[ci];
        if (c->fd < 0 || c->state != CONN_QUEUED) continue;   /* its client was dropped meanwhile */
        int32_t *ids;
        ApiError e;
        int n = api_request_ids(&c->req, S.sm->tok, S.sm->system, S.sm->ctx, model_info.vocab_size, &ids, &e);
        if (n < 0) { free(ids); send_api_error(c, &e); continue; }
        int keep = -1;
        for (int k = 0; k < S.n_slots; k++) {
            Slot *t = &S.slots[k];
            if (t->active) continue;
            int kt = slot_keeps(t, ids, n);
            if (kt > keep || (kt == keep && t->last_used < s->last_used)) { s = t; keep = kt; }
        }
        memcpy(s->ids, ids, (size_t)n * sizeof *ids);
        free(ids);
        ApiRequest *r = &c->req;
        s->active = true;
        s->conn = ci;
        s->req = r;
        s->n_ids = s->n_prompt = n;
        s->n_fed = s->n_cached = keep;
        s->n_exact = 0;   /* until the request ends (slot_release) */
        s->n_gen = 0;
        long room = S.sm->ctx - n + 1;   /* the last token is sampled from position ctx-1 and never fed back */
        s->max_new = r->max_tokens < 0 || r->max_tokens > room ? room : r->max_tokens;
        s->dev_argmax = !sample_needs_logits(&r->sp);
        sampler_reset(&s->smp);
        sampler_seed(&s->smp, r->has_seed ? r->seed
                                          : (unsigned long long)time(NULL) ^ (unsigned long long)(now_s() * 1e9));
        for (int i = 0; i < n; i++) sampler_add(&s->smp, s->ids[i], false);
        tokdec_init(&s->dec, S.sm->tok, false);
        /* a completion continues its prompt: the decoder sees the prompt first (SentencePiece then keeps the
         * continuation's leading space), as the command line's echo does; a chat reply starts afresh */
        if (!r->chat)
            for (int i = 0; i < n; i++) tokdec_push(&s->dec, s->ids[i], S.piece, S.piece_cap);
        s->text.len = 0;
        s->sent = 0;
        s->t_start = now_s();
        c->state = CONN_SERVING;
        S.n_requests++;
        if (r->stream) stream_open(s, c);
        return true;
    }
    return false;
}

/* the text's end that may still become a stop string: held back from the stream */
static size_t stop_holdback(const Slot *s) {
    size_t hold = 0;
    for (int q = 0; q < s->req->n_stop; q++) {
        size_t L = s->req->stop_len[q];
        for (size_t k = L - 1; k > hold; k--)
            if (k <= s->text.len && !memcmp(s->text.p + s->text.len - k, s->req->stop[q], k)) { hold = k; break; }
    }
    return hold;
}

/* Appends text[0..n) (one sampled id's) to the reply; true when a stop string ended it (the reply is cut
 * right before the stop string). */
static bool slot_add_text(Slot *s, const char *text, size_t n) {
    size_t before = s->text.len, cut = SIZE_MAX;   /* the earliest match of any stop string */
    buf_add(&s->text, text, n);
    for (int q = 0; q < s->req->n_stop; q++) {
        size_t L = s->req->stop_len[q];
        if (s->text.len < L) continue;
        for (size_t at = before + 1 >= L ? before + 1 - L : 0; at + L <= s->text.len && at < cut; at++)
            if (!memcmp(s->text.p + at, s->req->stop[q], L)) { cut = at; break; }
    }
    if (cut == SIZE_MAX) return false;
    s->text.len = cut;
    s->text.p[cut] = 0;
    return true;
}

static void slot_took(Slot *s, const float *logits);

/* One unit of model work in slot s alone: a prefill chunk, or the last sampled token fed; then slot_took */
static void slot_step(Slot *s) {
    double t0 = now_s();
    float *lg = s->dev_argmax ? NULL : S.logits;
    model_use_slot(S.sm->model, s->index);
    int mb = chunk_tokens(), left = s->n_prompt - s->n_fed;
    int k = left <= 0 ? 1 : left < mb ? left : mb;   /* the last sampled token, or a prefill chunk */
    s->next = model_forward(S.sm->model, s->ids + s->n_fed, k, s->n_fed, lg);
    s->n_fed += k;
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
        if (!s->active || s->n_fed < s->n_prompt) continue;
        S.b_ids[n] = s->ids[s->n_fed];
        S.b_slots[n] = s->index;
        S.b_pos[n] = s->n_fed;
        S.b_of[n++] = s;
        logits |= !s->dev_argmax;
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
        s->n_fed++;
        s->next = S.b_next[t];
        slot_took(s, S.b_logits + (size_t)t * model_info.vocab_size);
    }
    return true;
}

/* After slot s's forward (its argmax in s->next, its logits in logits where it asked): once the prompt is in,
 * the next token sampled, the text streamed, the request finished at a stop or at max_tokens */
static void slot_took(Slot *s, const float *logits) {
    Conn *c = &S.conns[s->conn];
    const ApiRequest *r = s->req;
    if (s->n_fed < s->n_prompt) return;
    if (s->n_gen >= s->max_new) { slot_finish(s, "length"); return; }
    int tok = s->dev_argmax ? s->next : sampler_sample(&s->smp, &r->sp, logits);
    if (s->n_gen == 0) s->t_first = now_s() - s->t_start;
    if (!r->ignore_eos && S.sm->is_stop(tok)) {
        slot_add_text(s, S.piece, tokdec_flush(&s->dec, S.piece, S.piece_cap));
        slot_finish(s, "stop");
        return;
    }
    s->ids[s->n_ids++] = tok;
    sampler_add(&s->smp, tok, true);
    s->n_gen++;
    s->n_generated++;
    size_t n = tokdec_push(&s->dec, tok, S.piece, S.piece_cap);
    bool stopped = slot_add_text(s, S.piece, n);
    if (!stopped && s->n_gen >= s->max_new) {
        stopped = slot_add_text(s, S.piece, tokdec_flush(&s->dec, S.piece, S.piece_cap));
        if (!stopped) { slot_finish(s, "length"); return; }
    }
    if (s->text.oom) {   /* a stream already begun is cut off; a whole reply gets its error */
        if (r->stream) c->state = CONN_CLOSING;
        else SERVER_OOM(c);
        slot_release(s);
        return;
    }
    if (stopped) { slot_finish(s, "stop"); return; }
    if (r->stream) stream_text(s, c, s->text.len - stop_holdback(s));
}

/* ---------------------------------------------------------------- routes */
static bool key_ok(const Conn *c) {   /* "Bearer KEY", compared in time independent of where they differ */
    const char *key = S.so->api_key;
    if (!key) return true;
    const char *got = c->auth.p ? c->auth.p : "";
    size_t gl = c->auth.len;
    if (gl >= 7 && !strncasecmp(got, "Bearer ", 7)) { got += 7; gl -= 7; }
    else gl = 0, got = "";
    size_t kl = strlen(key);
    unsigned diff = (unsigned)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

static void route(int ci) {
    Conn *c = &S.conns[ci];
    long serial = ++S.serial, created = (long)time(NULL);
    const char *url = c->url.p ? c->url.p : "";
    size_t ul = strcspn(url, "?");
    int method = llhttp_get_method(&c->http);
    c->head_only = method == HTTP_HEAD;
    c->http10 = llhttp_get_http_major(&c->http) == 1 && llhttp_get_http_minor(&c->http) == 0;
    bool get = method == HTTP_GET || method == HTTP_HEAD, post = method == HTTP_POST;
    if (method == HTTP_CONNECT) {
        c->keep_alive = false;
        send_error(c, 405, "invalid_request_error", NULL, NULL, "CONNECT is not served here");
        return;
    }
#define PATH(s) (ul == strlen(s) && !strncmp(url, s, ul))
    if (PATH("/health")) {
        if (!get) { send_error(c, 405, "invalid_request_error", NULL, NULL, "/health takes GET"); return; }
        Buf b = {0};
        buf_str(&b, "{\"status\":\"ok\"}");
        send_json(c, 200, &b);
        buf_free(&b);
        return;
    }
    if (!key_ok(c)) {
        send_error(c, 401, "invalid_request_error", NULL, "invalid_api_key", "Incorrect API key provided");
        return;
    }
    if (PATH("/v1/models")) {
        if (!get) { send_error(c, 405, "invalid_request_error", NULL, NULL, "/v1/models takes GET"); return; }
        Buf b = {0};
        api_models(&b, S.name, S.created_base, model_info.architecture, S.sm->ctx, model_info.target);
        send_json(c, 200, &b);
        buf_free(&b);
        return;
    }
    bool chat = PATH("/v1/chat/completions");
    if (chat || PATH("/v1/completions")) {
        if (!post) {
            send_error(c, 405, "invalid_request_error", NULL, NULL, "%s takes POST",
                       chat ? "/v1/chat/completions" : "/v1/completions");
            return;
        }
        if (g_stop) { send_error(c, 503, "server_error", NULL, NULL, "the server is shutting down"); return; }
        ApiError e;
        if (!api_parse_request(&c->req, c->body.p, c->body.len, chat, &S.sm->defaults, &e)) {
            send_api_error(c, &e);
            return;
        }
        c->req.model = S.name;
        c->req.id_base = S.created_base;
        c->req.serial = serial;
        c->req.created = created;
        c->state = CONN_QUEUED;
        S.queue[S.n_queue++] = ci;
        return;
    }
#undef PATH
    char shown[201];   /* the path in the message: printable ASCII (the message is JSON, valid UTF-8) */
    size_t sl = ul < 200 ? ul : 200;
    for (size_t i = 0; i < sl; i++) shown[i] = url[i] >= 0x20 && url[i] < 0x7f ? url[i] : '?';
    shown[sl] = 0;
    send_error(c, 404, "invalid_request_error", NULL, NULL, "no route %s (the routes: /v1/chat/completions, "
               "/v1/completions, /v1/models, /health)", shown);
}

/* ---------------------------------------------------------------- connections */
static void conn_close(int ci) {
    Conn *c = &S.conns[ci];
    if (c->fd < 0) return;
    for (int k = 0; k < S.n_slots; k++)   /* the client went away: its slot is free at once */
        if (S.slots[k].active && S.slots[k].conn == ci) slot_release(&S.slots[k]);
    for (int q = 0; q < S.n_queue; q++)
        if (S.queue[q] == ci) {
            memmove(S.queue + q, S.queue + q + 1, (size_t)(--S.n_queue - q) * sizeof *S.queue);
            q--;
        }
    close(c->fd);
    c->fd = -1;
    api_request_free(&c->req);
    buf_free(&c->in); buf_free(&c->out); buf_free(&c->url); buf_free(&c->body); buf_free(&c->auth);
}

static void conn_pump(int ci);

/* A reply is complete: the next request on the connection may be read. */
static void request_done(Conn *c) {
    if (c->state == CONN_CLOSING) return;   /* the peer is gone, or the reply closes: nothing more is read */
    c->state = c->keep_alive && !c->peer_eof ? CONN_READING : CONN_CLOSING;
    c->t_request = c->t_active = now_s();
    c->in_request = false;   /* the next request's head and body are reset as it begins (on_message_begin) */
    if (c->keep_alive) llhttp_resume(&c->http);
}

/* Parses what has been read; a complete request goes to its route. */
static void conn_pump(int ci) {
    Conn *c = &S.conns[ci];
    while (c->fd >= 0 && c->state == CONN_READING && c->in.len > 0 && c->out.len - c->out_off <= OUT_PENDING_MAX) {
        llhttp_errno_t err = llhttp_execute(&c->http, c->in.p, c->in.len);
        size_t used = c->in.len;
        if (err == HPE_PAUSED) used = (size_t)(llhttp_get_error_pos(&c->http) - c->in.p);
        memmove(c->in.p, c->in.p + used, c->in.len - used);
        c->in.len -= used;
        if (err == HPE_PAUSED) { route(ci); continue; }
        if (err != HPE_OK) {
            c->keep_alive = false;
            if (c->error_status == 413)
                send_error(c, 413, "invalid_request_error", NULL, NULL,
                           "the body is larger than --max-body (%ld bytes)", S.so->max_body);
            else if (c->error_status == 431)
                send_error(c, 431, "invalid_request_error", NULL, NULL,
                           "the request's headers are larger than %d bytes", HEAD_MAX);
            else if (c->error_status == 414)
                send_error(c, 414, "invalid_request_error", NULL, NULL, "the URL is too long");
            else {
                const char *why = llhttp_get_error_reason(&c->http);
                send_error(c, 400, "invalid_request_error", NULL, NULL, "bad HTTP request: %s",
                           why ? why : llhttp_errno_name(err));
            }
            c->in.len = 0;
        }
    }
}

static void conn_flush(Conn *c) {
    while (c->fd >= 0 && c->out_off < c->out.len) {
        ssize_t k = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) { c->out_off += (size_t)k; c->t_active = c->t_sent = now_s(); continue; }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        c->state = CONN_CLOSING;   /* the peer is gone: dropped below */
        c->out.len = c->out_off = 0;
        return;
    }
    if (c->out_off == c->out.len) c->out.len = c->out_off = 0;
}

/* The client shut its side (recv gave 0). A stream goes on (writes tell whether the client still reads: a
 * closed socket fails the next send or the one after); a whole reply still to come is dropped, its slot freed
 * (a client that closes the connection is gone); a reply already queued is sent, then the connection closed. */
static void conn_eof(int ci) {
    Conn *c = &S.conns[ci];
    c->peer_eof = true;
    c->keep_alive = false;
    if ((c->state == CONN_QUEUED || c->state == CONN_SERVING) && !c->req.stream) { conn_close(ci); return; }
    if (c->state == CONN_READING) c->state = CONN_CLOSING;
}

static void conn_read(int ci) {
    Conn *c = &S.conns[ci];
    char tmp[65536];
    for (int turn = 0; turn < READS_PER_TURN; turn++) {   /* then the model's turn: a flood does not stall it */
        ssize_t k = recv(c->fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (k > 0) {
            if (c->state == CONN_CLOSING) continue;   /* a reply that closes: what follows is dropped */
            c->t_active = now_s();
            buf_add(&c->in, tmp, (size_t)k);
            if (c->in.oom) { conn_close(ci); return; }
            if (c->state == CONN_READING) conn_pump(ci);   /* parsed as it comes: a body is bounded as it grows */
            if (c->fd < 0 || c->in.len > IN_PENDING_MAX) return;   /* read ahead enough: poll waits */
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) conn_close(ci);   /* reset: whatever the client asked for is dropped, its slot freed */
        else conn_eof(ci);
        return;
    }
}

static void conn_accept(void) {
    for (;;) {
        int fd = accept(S.listen_fd, NULL, NULL);
        if (fd < 0) {   /* out of file descriptors: the listener rests a moment rather than wake poll at once */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                S.accept_rest_until = now_s() + 0.1;
            return;
        }
        /* past --max-conns, a connection takes one of the spare entries just to be told so (a 503, then the
         * lingering close that lets the client read it); with none spare it is closed at once */
        int ci = -1, open = 0;
        for (int i = 0; i < S.n_conns; i++) {
            if (S.conns[i].fd < 0) { if (ci < 0) ci = i; }
            else open += !S.conns[i].rejected;
        }
        if (ci < 0) { close(fd); continue; }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   /* a token's event goes out at once */
        Conn *c = &S.conns[ci];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->state = CONN_READING;
        llhttp_init(&c->http, HTTP_REQUEST, &g_http);
        c->http.data = c;
        c->t_request = c->t_active = c->t_sent = now_s();
        if (open >= S.so->max_conns) {
            c->rejected = true;
            c->keep_alive = false;
            send_error(c, 503, "server_error", NULL, NULL, "too many connections");
        }
    }
}

/* ---------------------------------------------------------------- the loop */
static int slots_busy(void) {
    int busy = 0;
    for (int k = 0; k < S.n_slots; k++) busy += S.slots[k].active;
    return busy;
}

static void print_stats(void) {
    double now = now_s(), dt = now - S.t_last_stats;
    long out = S.n_tokens_out;
    int open = 0, busy = slots_busy();
    for (int k = 0; k < S.n_slots; k++) out += S.slots[k].active ? S.slots[k].n_gen : 0;
    for (int i = 0; i < S.n_conns; i++) open += S.conns[i].fd >= 0;
    fprintf(stderr, "%s: %ld requests (%ld answered with an error), %ld prompt tokens, %ld generated; "
            "%.1f tok/s generated over the last %.0f s; slots busy %d of %d; queue %d; %d connections; "
            "model busy %.0f%%; %ld decode batches of %.1f tokens on average%s\n", S.name, S.n_requests,
            S.n_errors, S.n_tokens_in, out, dt > 0 ? (out - S.last_tokens_out) / dt : 0.0, dt, busy, S.n_slots,
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

static int open_listener(void) {
    const ServeOpts *so = S.so;
    char port[16];
    snprintf(port, sizeof port, "%d", so->port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int e = getaddrinfo(so->host, port, &hints, &res);
    if (e) { fprintf(stderr, "%s: --host %s: %s\n", S.name, so->host, gai_strerror(e)); return -1; }
    int fd = -1, last = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) { last = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) { last = errno; close(fd); fd = -1; }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "%s: cannot listen on %s port %d: %s\n", S.name, so->host, so->port, strerror(last));
        return -1;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char host[128] = "?";
    int bound = so->port;
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *in4 = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &in4->sin_addr, host, sizeof host);
            bound = ntohs(in4->sin_port);
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
            host[0] = '[';
            inet_ntop(AF_INET6, &in6->sin6_addr, host + 1, sizeof host - 2);
            strcat(host, "]");
            bound = ntohs(in6->sin6_port);
        }
    }
    size_t kv = 0;
    model_memory_bytes(S.sm->model, NULL, &kv, NULL);
    fprintf(stderr, "%s: serving on http://%s:%d/v1 (%d slot%s of context %d, KV caches %.1f MiB; %s)\n", S.name,
            host, bound, so->parallel, so->parallel > 1 ? "s" : "", S.sm->ctx, kv / 1048576.0, S.sm->compute);
    return fd;
}

int serve_run(const ServeOpts *so, const ServeModel *sm) {
    memset(&S, 0, sizeof S);
    S.so = so;
    S.sm = sm;
    S.name = model_info.name && *model_info.name ? model_info.name : "llmcc";
    S.created_base = (long)time(NULL);
    S.t_start = S.t_last_stats = now_s();
    llhttp_settings_init(&g_http);
    g_http.on_message_begin = on_message_begin;
    g_http.on_url = on_url;
    g_http.on_header_field = on_header_field;
    g_http.on_header_field_complete = on_header_field_complete;
    g_http.on_header_value = on_header_value;
    g_http.on_headers_complete = on_headers_complete;
    g_http.on_body = on_body;
    g_http.on_message_complete = on_message_complete;

    S.n_conns = so->max_conns + 16;   /* the spare entries answer 503 past --max-conns */
    S.conns = calloc((size_t)S.n_conns, sizeof *S.conns);
    S.queue = malloc((size_t)S.n_conns * sizeof *S.queue);
    struct pollfd *pfd = malloc((size_t)(S.n_conns + 1) * sizeof *pfd);
    int *pidx = malloc((size_t)(S.n_conns + 1) * sizeof *pidx);
    S.logits = malloc((size_t)model_info.vocab_size * sizeof *S.logits);
    S.piece_cap = tokenizer_max_piece_bytes(sm->tok) + 64;
    S.piece = malloc(S.piece_cap);
    S.n_slots = so->parallel;
    S.slots = calloc((size_t)S.n_slots, sizeof *S.slots);
    int rows = S.n_slots < chunk_tokens() ? S.n_slots : chunk_tokens();   /* a decode batch's */
    S.b_ids = malloc((size_t)rows * sizeof *S.b_ids);
    S.b_next = malloc((size_t)rows * sizeof *S.b_next);
    S.b_slots = malloc((size_t)rows * sizeof *S.b_slots);
    S.b_pos = malloc((size_t)rows * sizeof *S.b_pos);
    S.b_of = malloc((size_t)rows * sizeof *S.b_of);
    S.b_logits = malloc((size_t)rows * (size_t)model_info.vocab_size * sizeof *S.b_logits);
    bool oom = !S.conns || !S.queue || !pfd || !pidx || !S.logits || !S.piece || !S.slots || !S.b_ids || !S.b_next ||
               !S.b_slots || !S.b_pos || !S.b_of || !S.b_logits;
    for (int k = 0; !oom && k < S.n_slots; k++) {
        Slot *sl = &S.slots[k];
        sl->index = k;
        sl->conn = -1;
        sl->ids = malloc((size_t)(sm->ctx + 2) * sizeof *sl->ids);
        oom |= !sl->ids || sampler_init(&sl->smp, model_info.vocab_size) != NULL;
    }
    if (oom) {
        fprintf(stderr, "%s: out of memory\n", S.name);
        return 1;
    }
    for (int i = 0; i < S.n_conns; i++) S.conns[i].fd = -1;

    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    S.listen_fd = open_listener();
    if (S.listen_fd < 0) return 1;
    int status = 0;
    for (;;) {
        if (g_stop && S.listen_fd >= 0) {   /* drain: no new connections, what is in flight finishes */
            close(S.listen_fd);
            S.listen_fd = -1;
            fprintf(stderr, "%s: stopping: finishing %d request(s) in flight\n", S.name,
                    S.n_queue + slots_busy());
        }
        if (g_usr1) { g_usr1 = 0; print_stats(); }
        double now = now_s();
        if (so->stats && now - S.t_last_stats >= so->stats_every) print_stats();
        while (slot_start()) {}
        int np = 0;
        if (S.listen_fd >= 0 && now >= S.accept_rest_until) {
            pfd[np] = (struct pollfd){ S.listen_fd, POLLIN, 0 };
            pidx[np++] = -1;
        }
        int open = 0;
        for (int i = 0; i < S.n_conns; i++) {
            Conn *c = &S.conns[i];
            if (c->fd < 0) continue;
            conn_flush(c);
            bool drained = c->out_off == c->out.len;
            if (c->state == CONN_CLOSING && drained && c->peer_eof) { conn_close(i); continue; }
            if (c->state == CONN_CLOSING && drained && !c->lingering) {
                /* our side shut; what the client still sends (a body refused as too large) is read and dropped
                 * for a moment, so that the kernel does not reset the connection before the reply is read */
                shutdown(c->fd, SHUT_WR);
                c->lingering = true;
                c->linger_until = now + (so->timeout_s < 2 ? so->timeout_s : 2);
            }
            if (c->lingering && now > c->linger_until) {
                conn_close(i);
                continue;
            }
            /* timeouts: a request that does not arrive whole, a reply not taken up, an idle keep-alive */
            bool waiting = c->state == CONN_READING;
            bool idle = waiting && drained && c->in.len == 0 && !c->in_request;
            if ((waiting && !idle && c->in_request && now - c->t_request > so->timeout_s) ||
                (idle && now - c->t_active > so->timeout_s) ||
                (!drained && now - c->t_sent > so->timeout_s) ||
                (g_stop && idle)) {
                if (waiting && !idle && drained && c->fd >= 0 && !g_stop) {
                    c->keep_alive = false;
                    send_error(c, 408, "invalid_request_error", NULL, NULL, "the request did not arrive within %d s",
                               so->timeout_s);
                    conn_flush(c);
                }
                conn_close(i);
                continue;
            }
            open++;
            short ev = 0;
            if (!c->peer_eof && c->in.len <= IN_PENDING_MAX && c->out.len - c->out_off <= OUT_PENDING_MAX)
                ev |= POLLIN;
            if (!drained) ev |= POLLOUT;
            pfd[np] = (struct pollfd){ c->fd, ev, 0 };
            pidx[np++] = i;
        }
        if (g_stop && !slots_busy() && S.n_queue == 0 && open == 0) break;
        bool work = slots_busy() || S.n_queue > 0;
        int r = poll(pfd, (nfds_t)np, work ? 0 : 250);
        if (r < 0 && errno != EINTR) { fprintf(stderr, "%s: poll: %s\n", S.name, strerror(errno)); status = 1; break; }
        for (int k = 0; r > 0 && k < np; k++) {
            if (!pfd[k].revents) continue;
            if (pidx[k] < 0) { conn_accept(); continue; }
            int ci = pidx[k];
            Conn *c = &S.conns[ci];
            if (c->fd < 0) continue;
            if ((pfd[k].revents & (POLLHUP | POLLERR)) && c->peer_eof) conn_close(ci);   /* gone both ways */
            else if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) conn_read(ci);
            if (c->fd >= 0 && (pfd[k].revents & POLLOUT)) conn_flush(c);
        }
        for (int k = 0; k < S.n_slots; k++)   /* a slot whose client was dropped (a failed send) is free */
            if (S.slots[k].active && S.conns[S.slots[k].conn].state == CONN_CLOSING) slot_release(&S.slots[k]);
        /* one unit of model work: the decode batch and a waiting prompt's chunk in alternation (without
         * batching: the next busy slot's step, in turn) */
        int decoding = 0, prefilling = 0;
        for (int k = 0; k < S.n_slots; k++)
            if (S.slots[k].active) ++*(S.slots[k].n_fed < S.slots[k].n_prompt ? &prefilling : &decoding);
        bool batched = decoding && !S.no_batch && (!prefilling || !S.prefill_next) && decode_batch();
        S.prefill_next = batched;
        for (int k = 0; !batched && k < S.n_slots; k++) {
            Slot *sl = &S.slots[(S.next_slot + k) % S.n_slots];
            if (!sl->active || (!S.no_batch && sl->n_fed >= sl->n_prompt && prefilling)) continue;
            S.next_slot = (sl->index + 1) % S.n_slots;
            slot_step(sl);
            break;
        }
        for (int i = 0; i < S.n_conns; i++)   /* a finished reply lets a pipelined request through */
            if (S.conns[i].fd >= 0 && S.conns[i].state == CONN_READING && S.conns[i].in.len) conn_pump(i);
    }
    if (S.so->stats) print_stats();
    for (int i = 0; i < S.n_conns; i++) conn_close(i);
    if (S.listen_fd >= 0) close(S.listen_fd);
    for (int k = 0; S.slots && k < S.n_slots; k++) {
        sampler_free(&S.slots[k].smp);
        buf_free(&S.slots[k].text);
        free(S.slots[k].ids);
    }
    free(S.b_ids); free(S.b_next); free(S.b_slots); free(S.b_pos); free(S.b_of); free(S.b_logits);
    free(S.slots); free(S.logits); free(S.piece); free(S.conns); free(S.queue); free(pfd); free(pidx);
    return status;
}
