/* serve.c: --serve, the OpenAI HTTP API over the compiled model (see serve.h).
 *
 * One thread, one event loop: poll() over the listening socket and the clients' connections, and between two
 * polls one unit of model work (a prefill chunk of max_batch tokens, or one decode step), so that a streamed
 * token goes out as soon as it is sampled and a client that goes away frees its slot at once. HTTP/1.1 is
 * parsed by llhttp (Node.js's parser, Debian's node-llhttp sources compiled in); request bodies are JSON read
 * with jsmn. Routes: POST /v1/chat/completions, POST /v1/completions (both with "stream": server-sent events),
 * GET /v1/models, GET /health.
 *
 * Slots (--parallel N): a slot is one request in flight with a KV cache of its own (model_init_slots); requests
 * beyond N wait in a queue, first come first served. Continuous batching: the slots past their prompt decode
 * together, one token each per model_forward_batch call (the weights read once for all of them; each token's
 * logits bit for bit what it gets alone), and a prompt's prefill chunk (model_forward, max_batch tokens) runs
 * between two such steps. A build without model_forward_batch (it returns -1) has its slots take turns. */
#define JSMN_STATIC
#define JSMN_STRICT
#include <jsmn.h>

#include "serve.h"
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
#define MAX_STOP 4                /* OpenAI's limit on stop strings */

/* ---------------------------------------------------------------- buffers */
typedef struct { char *p; size_t len, cap; bool oom; } Buf;

static void buf_add(Buf *b, const void *data, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }
static void buf_fmt(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_fmt(Buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
static void buf_free(Buf *b) { free(b->p); memset(b, 0, sizeof *b); }
/* s[0..n) as a JSON string, quotes included (the text is valid UTF-8: the decoder gives U+FFFD for the rest) */
static void buf_json_str(Buf *b, const char *s, size_t n) {
    buf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        buf_add(b, s + run, i - run);
        run = i + 1;
        switch (ch) {
        case '"': buf_add(b, "\\\"", 2); break;
        case '\\': buf_add(b, "\\\\", 2); break;
        case '\n': buf_add(b, "\\n", 2); break;
        case '\r': buf_add(b, "\\r", 2); break;
        case '\t': buf_add(b, "\\t", 2); break;
        default: buf_fmt(b, "\\u%04x", ch);
        }
    }
    buf_add(b, s + run, n - run);
    buf_add(b, "\"", 1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- requests */
typedef struct {
    bool chat, stream, include_usage, ignore_eos;
    ChatMsg *msgs; int n_msgs;         /* chat: texts owned */
    char *prompt; size_t prompt_len;   /* completions */
    long max_tokens;                   /* -1: up to the context's end */
    SampleParams sp;
    unsigned long long seed; bool has_seed;
    char *stop[MAX_STOP]; size_t stop_len[MAX_STOP]; int n_stop;
    int think;                         /* chat_template_kwargs.enable_thinking, or TOK_THINK_DEFAULT */
} Req;

static void req_free(Req *r) {
    for (int i = 0; i < r->n_msgs; i++) free((char *)r->msgs[i].content);
    free(r->msgs);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
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
    Req req;
    long serial;                 /* request number, for the reply's id */
    long created;                /* the request's Unix time, in every chunk of its reply */
} Conn;

typedef struct {
    bool active;
    int index;                   /* its KV cache: model_use_slot(index) */
    int conn;                    /* the connection served */
    Req *req;
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
#define BAD_REQUEST(c, param, ...) send_error(c, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define SERVER_OOM(c) send_error(c, 500, "server_error", NULL, NULL, "out of memory")

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

/* ---------------------------------------------------------------- JSON request bodies */
typedef struct { const char *js; jsmntok_t *t; int n; } Json;

/* the token after token i's whole value */
static int json_skip(const Json *j, int i) {
    int k = i + 1;
    while (k < j->n && j->t[k].start < j->t[i].end) k++;
    return k;
}
static bool json_text_is(const Json *j, int i, jsmntype_t type, const char *s) {
    size_t n = strlen(s);
    return i >= 0 && i < j->n && j->t[i].type == type && (size_t)(j->t[i].end - j->t[i].start) == n &&
           !memcmp(j->js + j->t[i].start, s, n);
}
static bool json_is(const Json *j, int i, const char *s) { return json_text_is(j, i, JSMN_STRING, s); }
/* the value of key in object obj, or -1 */
static int json_get(const Json *j, int obj, const char *key) {
    if (obj < 0 || obj >= j->n || j->t[obj].type != JSMN_OBJECT) return -1;
    int k = obj + 1;
    for (int e = 0; e < j->t[obj].size; e++) {
        if (json_is(j, k, key)) return k + 1;
        k = json_skip(j, k + 1);
    }
    return -1;
}
static bool json_null(const Json *j, int i) { return json_text_is(j, i, JSMN_PRIMITIVE, "null"); }
static bool json_bool(const Json *j, int i, bool *v) {
    if (json_text_is(j, i, JSMN_PRIMITIVE, "true")) { *v = true; return true; }
    if (json_text_is(j, i, JSMN_PRIMITIVE, "false")) { *v = false; return true; }
    return false;
}
/* whether s[0..n) is a number as JSON writes one: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool json_number_text(const char *s, int n) {
    int i = 0;
    if (i < n && s[i] == '-') i++;
    if (i < n && s[i] == '0') i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return false;
    if (i < n && s[i] == '.') {
        if (++i >= n || s[i] < '0' || s[i] > '9') return false;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return false;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    return i == n;
}
static bool json_num(const Json *j, int i, double *v) {
    if (i < 0 || i >= j->n || j->t[i].type != JSMN_PRIMITIVE) return false;
    char tmp[64];
    int n = j->t[i].end - j->t[i].start;
    if (n <= 0 || n >= (int)sizeof tmp || !json_number_text(j->js + j->t[i].start, n)) return false;
    memcpy(tmp, j->js + j->t[i].start, (size_t)n);
    tmp[n] = 0;
    *v = strtod(tmp, NULL);
    return isfinite(*v);
}
/* jsmn (strict) lets a key without a value through ({"a"}) and literals it only glances at (tru, -): every
 * object's keys are strings with one value, every primitive a literal or a number */
static bool json_valid(const Json *j) {
    for (int i = 0; i < j->n; i++) {
        const jsmntok_t *t = &j->t[i];
        bool b;
        if (t->type == JSMN_PRIMITIVE && !json_null(j, i) && !json_bool(j, i, &b) &&
            !json_number_text(j->js + t->start, t->end - t->start))
            return false;
        if (t->type != JSMN_OBJECT) continue;
        int k = i + 1;
        for (int e = 0; e < t->size; e++) {
            if (k + 1 >= j->n || j->t[k].type != JSMN_STRING || j->t[k].size != 1) return false;
            k = json_skip(j, k + 1);
        }
    }
    return true;
}
static int utf8_len(const unsigned char *s, size_t n) {   /* bytes of one valid UTF-8 character, or 0 */
    unsigned char b = s[0];
    int len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1Fu : len == 3 ? b & 0x0Fu : b & 0x07u;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}
static void put_utf8(Buf *b, uint32_t cp) {
    char o[4];
    size_t n;
    if (cp < 0x80) { o[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    buf_add(b, o, n);
}
static int hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}
/* The string token i unescaped into a malloc'd NUL-terminated text; NULL when it is not a string, or is not
 * valid UTF-8 (*why says which). */
static char *json_text(const Json *j, int i, size_t *len, const char **why) {
    *why = "must be a string";
    if (i < 0 || j->t[i].type != JSMN_STRING) return NULL;
    const char *s = j->js + j->t[i].start;
    size_t n = (size_t)(j->t[i].end - j->t[i].start);
    Buf b = {0};
    buf_add(&b, "", 0);
    *why = "is not valid UTF-8";
    for (size_t k = 0; k < n;) {
        unsigned char ch = (unsigned char)s[k];
        if (ch == '\\' && k + 1 < n) {
            char e = s[k + 1];
            k += 2;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) { buf_add(&b, &"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"], 1); continue; }
            uint32_t cp, lo;
            if (e != 'u' || k + 4 > n || hex4(s + k, &cp)) goto bad;
            k += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {   /* a surrogate pair's high half: the low half follows */
                if (k + 6 > n || s[k] != '\\' || s[k + 1] != 'u' || hex4(s + k + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    goto bad;
                k += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) goto bad;
            put_utf8(&b, cp);
            continue;
        }
        int l = utf8_len((const unsigned char *)s + k, n - k);
        if (!l) goto bad;
        buf_add(&b, s + k, (size_t)l);
        k += (size_t)l;
    }
    if (b.oom) { *why = "is too large (out of memory)"; goto bad; }
    *len = b.len;
    return b.p;
bad:
    buf_free(&b);
    return NULL;
}

/* Reads the body into c->req; on a fault answers 400 naming the field and returns false. */
static bool parse_request(Conn *c, bool chat) {
    const SampleParams *def = &S.sm->defaults;
    Req *r = &c->req;
    req_free(r);
    r->chat = chat;
    r->sp = *def;
    r->max_tokens = -1;
    r->think = TOK_THINK_DEFAULT;
    Json j = { c->body.p ? c->body.p : "", NULL, 0 };
    jsmn_parser jp;
    jsmn_init(&jp);
    int n = memchr(j.js, 0, c->body.len) ? 0 : jsmn_parse(&jp, j.js, c->body.len, NULL, 0);
    if (n <= 0) { BAD_REQUEST(c, NULL, "the body is not valid JSON"); return false; }
    j.t = malloc((size_t)n * sizeof *j.t);
    if (!j.t) { SERVER_OOM(c); return false; }
    jsmn_init(&jp);
    j.n = jsmn_parse(&jp, j.js, c->body.len, j.t, (unsigned)n);
    bool ok = false;
    const char *why;
    char field[64];
    double v;
    bool flag;
    int k;
    if (j.n <= 0 || !json_valid(&j)) {
        BAD_REQUEST(c, NULL, "the body is not valid JSON");
        goto out;
    }
    if (j.t[0].type != JSMN_OBJECT || json_skip(&j, 0) != j.n) {
        BAD_REQUEST(c, NULL, "the body is not a JSON object");
        goto out;
    }
    /* the text */
    if (chat) {
        k = json_get(&j, 0, "messages");
        if (k < 0) { BAD_REQUEST(c, "messages", "messages: missing (an array of messages)"); goto out; }
        if (j.t[k].type != JSMN_ARRAY || j.t[k].size == 0) {
            BAD_REQUEST(c, "messages", "messages: must be a non-empty array");
            goto out;
        }
        r->msgs = calloc((size_t)j.t[k].size, sizeof *r->msgs);
        if (!r->msgs) { SERVER_OOM(c); goto out; }
        int m = k + 1;
        for (int e = 0; e < j.t[k].size; e++, m = json_skip(&j, m)) {
            snprintf(field, sizeof field, "messages[%d]", e);
            if (j.t[m].type != JSMN_OBJECT) { BAD_REQUEST(c, field, "%s: must be an object", field); goto out; }
            int role = json_get(&j, m, "role"), content = json_get(&j, m, "content");
            const char *rname = json_is(&j, role, "system") || json_is(&j, role, "developer") ? "system"
                              : json_is(&j, role, "user") ? "user" : json_is(&j, role, "assistant") ? "assistant"
                              : NULL;
            if (!rname) {
                snprintf(field, sizeof field, "messages[%d].role", e);
                BAD_REQUEST(c, field, "%s: must be \"system\", \"developer\", \"user\" or \"assistant\" "
                            "(tools are not supported)", field);
                goto out;
            }
            snprintf(field, sizeof field, "messages[%d].content", e);
            size_t len = 0;
            char *text = NULL;
            if (content < 0 || json_null(&j, content)) {
                if (!json_is(&j, role, "assistant")) { BAD_REQUEST(c, field, "%s: missing", field); goto out; }
                text = calloc(1, 1);
            } else if (j.t[content].type == JSMN_ARRAY) {   /* content parts: the texts, joined by newlines */
                Buf b = {0};
                buf_add(&b, "", 0);
                int part = content + 1;
                for (int q = 0; q < j.t[content].size; q++, part = json_skip(&j, part)) {
                    int type = json_get(&j, part, "type"), ptext = json_get(&j, part, "text");
                    if (!json_is(&j, type, "text")) {
                        buf_free(&b);
                        snprintf(field, sizeof field, "messages[%d].content[%d].type", e, q);
                        BAD_REQUEST(c, field, "%s: only \"text\" parts are supported", field);
                        goto out;
                    }
                    size_t pl;
                    char *pt = json_text(&j, ptext, &pl, &why);
                    if (!pt) {
                        buf_free(&b);
                        snprintf(field, sizeof field, "messages[%d].content[%d].text", e, q);
                        BAD_REQUEST(c, field, "%s: %s", field, why);
                        goto out;
                    }
                    if (q) buf_add(&b, "\n", 1);
                    buf_add(&b, pt, pl);
                    free(pt);
                }
                if (b.oom) { buf_free(&b); SERVER_OOM(c); goto out; }
                text = b.p;
                len = b.len;
            } else if (!(text = json_text(&j, content, &len, &why))) {
                BAD_REQUEST(c, field, "%s: %s", field, why);
                goto out;
            }
            if (!text) { SERVER_OOM(c); goto out; }
            r->msgs[r->n_msgs++] = (ChatMsg){ rname, text, len };
        }
        k = json_get(&j, 0, "chat_template_kwargs");
        int think = json_get(&j, k, "enable_thinking");
        if (think >= 0) {
            if (!json_bool(&j, think, &flag)) {
                BAD_REQUEST(c, "chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking: "
                            "must be true or false");
                goto out;
            }
            r->think = flag;
        }
    } else {
        k = json_get(&j, 0, "prompt");
        if (k >= 0 && j.t[k].type == JSMN_ARRAY && j.t[k].size == 1 && j.t[k + 1].type == JSMN_STRING) k++;
        if (k < 0) { BAD_REQUEST(c, "prompt", "prompt: missing (a string)"); goto out; }
        if (!(r->prompt = json_text(&j, k, &r->prompt_len, &why))) {
            BAD_REQUEST(c, "prompt", "prompt: %s%s", why,
                        j.t[k].type == JSMN_ARRAY ? " (one prompt per request: no arrays of several)" : "");
            goto out;
        }
    }
    /* the limits and the sampling */
    k = json_get(&j, 0, "max_completion_tokens");
    if (k < 0 || json_null(&j, k)) k = json_get(&j, 0, "max_tokens");
    if (k >= 0 && !json_null(&j, k)) {
        if (!json_num(&j, k, &v) || v != floor(v) || v < 1 || v > 1e9) {
            BAD_REQUEST(c, "max_tokens", "max_tokens: must be a whole number >= 1");
            goto out;
        }
        r->max_tokens = (long)v;
    }
    struct { const char *name; float *dst; double lo, hi; bool lo_open; const char *range; } nums[] = {
        { "temperature", &r->sp.temperature, 0, 2, false, "a number in 0..2" },
        { "top_p", &r->sp.top_p, 0, 1, false, "a number in 0..1" },
        { "min_p", &r->sp.min_p, 0, 1, false, "a number in 0..1" },
        { "repetition_penalty", &r->sp.rep, 0, 1e6, true, "a number > 0" },
        { "frequency_penalty", &r->sp.freq, -2, 2, false, "a number in -2..2" },
        { "presence_penalty", &r->sp.pres, -2, 2, false, "a number in -2..2" },
    };
    for (size_t q = 0; q < sizeof nums / sizeof *nums; q++) {
        k = json_get(&j, 0, nums[q].name);
        if (k < 0 || json_null(&j, k)) continue;
        if (!json_num(&j, k, &v) || v < nums[q].lo || v > nums[q].hi || (nums[q].lo_open && v == nums[q].lo)) {
            BAD_REQUEST(c, nums[q].name, "%s: must be %s", nums[q].name, nums[q].range);
            goto out;
        }
        *nums[q].dst = (float)v;
    }
    if (r->sp.top_p == 0) { r->sp.top_p = 1; r->sp.top_k = 1; }   /* an empty nucleus keeps the best token */
    k = json_get(&j, 0, "top_k");
    if (k >= 0 && !json_null(&j, k)) {
        if (!json_num(&j, k, &v) || v != floor(v) || v < -1 || v > 1e9) {
            BAD_REQUEST(c, "top_k", "top_k: must be a whole number >= 0 (0 or -1: off)");
            goto out;
        }
        r->sp.top_k = v < 0 ? 0 : (int)v;
    }
    k = json_get(&j, 0, "seed");
    if (k >= 0 && !json_null(&j, k)) {
        if (!json_num(&j, k, &v) || v != floor(v) || v < 0 || v > 9007199254740992.0) {
            BAD_REQUEST(c, "seed", "seed: must be a whole number >= 0");
            goto out;
        }
        r->seed = (unsigned long long)v;
        r->has_seed = true;
    }
    k = json_get(&j, 0, "n");
    if (k >= 0 && !json_null(&j, k) && (!json_num(&j, k, &v) || v != 1)) {
        BAD_REQUEST(c, "n", "n: only 1 choice per request is supported");
        goto out;
    }
    /* what OpenAI offers and this server does not: refused by name, not ignored */
    k = json_get(&j, 0, "tools");
    if (k >= 0 && !json_null(&j, k) && !(j.t[k].type == JSMN_ARRAY && j.t[k].size == 0)) {
        BAD_REQUEST(c, "tools", "tools: tool calls are not supported");
        goto out;
    }
    k = json_get(&j, 0, "logprobs");
    if (k >= 0 && !json_null(&j, k) && !(json_bool(&j, k, &flag) && !flag)) {
        BAD_REQUEST(c, "logprobs", "logprobs: not supported");
        goto out;
    }
    struct { const char *name; bool *dst; } bools[] = {
        { "stream", &r->stream }, { "ignore_eos", &r->ignore_eos },
    };
    for (size_t q = 0; q < sizeof bools / sizeof *bools; q++) {
        k = json_get(&j, 0, bools[q].name);
        if (k >= 0 && !json_null(&j, k) && !json_bool(&j, k, bools[q].dst)) {
            BAD_REQUEST(c, bools[q].name, "%s: must be true or false", bools[q].name);
            goto out;
        }
    }
    k = json_get(&j, json_get(&j, 0, "stream_options"), "include_usage");
    if (k >= 0 && !json_null(&j, k) && !json_bool(&j, k, &r->include_usage)) {
        BAD_REQUEST(c, "stream_options.include_usage", "stream_options.include_usage: must be true or false");
        goto out;
    }
    k = json_get(&j, 0, "stop");
    if (k >= 0 && !json_null(&j, k)) {
        int first = k, count = 1;
        if (j.t[k].type == JSMN_ARRAY) { first = k + 1; count = j.t[k].size; }
        if (count > MAX_STOP) { BAD_REQUEST(c, "stop", "stop: at most %d strings", MAX_STOP); goto out; }
        for (int q = 0, s = first; q < count; q++, s = json_skip(&j, s)) {
            size_t len;
            char *t = json_text(&j, s, &len, &why);
            if (!t) { BAD_REQUEST(c, "stop", "stop: %s (a string or an array of strings)", why); goto out; }
            if (!len) { free(t); continue; }    /* an empty stop string matches nothing, as OpenAI's */
            r->stop[r->n_stop] = t;
            r->stop_len[r->n_stop++] = len;
        }
    }
    ok = true;
out:
    free(j.t);
    return ok;
}

/* ---------------------------------------------------------------- generation */
static int chunk_tokens(void) { return model_info.max_batch > 0 ? model_info.max_batch : 1; }

static void slot_release(Slot *s) {
    int fed = s->n_fed < s->n_prompt ? s->n_fed : s->n_prompt;
    s->n_exact = fed / chunk_tokens() * chunk_tokens();
    s->last_used = now_s();
    if (s->conn >= 0) {
        Conn *c = &S.conns[s->conn];
        req_free(&c->req);
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

/* "id", "object", "created", "model" of a reply; object: "chat.completion", "chat.completion.chunk",
 * "text_completion" */
static void reply_id(Buf *b, const Conn *c, const char *object) {
    buf_fmt(b, "\"id\":\"%s-%lx%04lx\",\"object\":\"%s\",\"created\":%ld,\"model\":",
            strncmp(object, "chat", 4) ? "cmpl" : "chatcmpl", S.created_base, c->serial, object, c->created);
    buf_json_str(b, S.name, strlen(S.name));
}
static void usage_json(Buf *b, const Slot *s) {
    buf_fmt(b, ",\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%ld,\"total_tokens\":%ld,"
            "\"prompt_tokens_details\":{\"cached_tokens\":%d}}", s->n_prompt, s->n_gen, s->n_prompt + s->n_gen,
            s->n_cached);
}
/* a streamed reply's event, up to its id */
static void event_open(Buf *b, const Conn *c, const Req *r) {
    buf_str(b, "data: {");
    reply_id(b, c, r->chat ? "chat.completion.chunk" : "text_completion");
}
/* ,"choices":[...] with the one choice: a chat's text as the content of its key ("message" or "delta"; role: after
 * "role":"assistant"; text NULL: an empty delta), a completion's as "text" (NULL: ""); finish: the finish_reason,
 * NULL while streaming */
static void choices_json(Buf *b, const Req *r, const char *key, bool role, const char *text, size_t n,
                         const char *finish) {
    buf_str(b, ",\"choices\":[{\"index\":0,");
    if (r->chat) {
        buf_fmt(b, "\"%s\":{%s", key, role ? "\"role\":\"assistant\"," : "");
        if (text) { buf_str(b, "\"content\":"); buf_json_str(b, text, n); }
        buf_str(b, "}");
    } else {
        buf_str(b, "\"text\":");
        buf_json_str(b, text ? text : "", n);
    }
    buf_str(b, ",\"logprobs\":null,\"finish_reason\":");
    if (finish) buf_fmt(b, "\"%s\"}]", finish);
    else buf_str(b, "null}]");
}

/* one event of a stream: text[0..n) as the choice's delta (see choices_json) */
static void stream_delta(Conn *c, const Req *r, bool role, const char *text, size_t n) {
    Buf b = {0};
    event_open(&b, c, r);
    choices_json(&b, r, "delta", role, text, n, NULL);
    buf_str(&b, "}\n\n");
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
    const Req *r = s->req;
    S.n_tokens_in += s->n_prompt;
    S.n_tokens_out += s->n_gen;
    s->n_served++;
    Buf b = {0};
    if (r->stream) {
        stream_text(s, c, s->text.len);
        event_open(&b, c, r);
        choices_json(&b, r, "delta", false, NULL, 0, why);
        buf_str(&b, "}\n\n");
        if (r->include_usage) {   /* OpenAI's last chunk: no choices, the usage */
            event_open(&b, c, r);
            buf_str(&b, ",\"choices\":[]");
            usage_json(&b, s);
            buf_str(&b, "}\n\n");
        }
        buf_str(&b, "data: [DONE]\n\n");
        chunk(c, &b);
        if (!c->http10) conn_send(c, "0\r\n\r\n", 5);
        request_done(c);
    } else {
        buf_str(&b, "{");
        reply_id(&b, c, r->chat ? "chat.completion" : "text_completion");
        choices_json(&b, r, "message", true, s->text.p ? s->text.p : "", s->text.len, why);
        usage_json(&b, s);
        buf_str(&b, "}");
        send_json(c, 200, &b);
    }
    buf_free(&b);
    slot_release(s);
}

/* The request's ids (the chat template, or the plain encoding), or an answer of 400. */
static int request_ids(Conn *c, int32_t **ids) {
    const Tokenizer *tok = S.sm->tok;
    Req *r = &c->req;
    *ids = NULL;
    int n;
    if (r->chat) {
        if (tokenizer_chat_family(tok) == TOK_CHAT_NONE) {
            BAD_REQUEST(c, "messages", "this model's tokenizer has no chat template: use /v1/completions");
            return -1;
        }
        if (r->think != TOK_THINK_DEFAULT && !tokenizer_chat_has_thinking(tok)) {
            BAD_REQUEST(c, "chat_template_kwargs.enable_thinking",
                        "chat_template_kwargs.enable_thinking: this model's chat template has no thinking switch");
            return -1;
        }
        bool has_system = false;
        for (int i = 0; i < r->n_msgs; i++) has_system |= !strcmp(r->msgs[i].role, "system");
        ChatMsg *m = r->msgs;
        int nm = r->n_msgs;
        ChatMsg *with = NULL;
        if (!has_system && S.sm->system) {   /* --system: the system message of chats that bring none */
            with = malloc((size_t)(nm + 1) * sizeof *with);
            if (!with) { SERVER_OOM(c); return -1; }
            with[0] = (ChatMsg){ "system", S.sm->system, strlen(S.sm->system) };
            memcpy(with + 1, m, (size_t)nm * sizeof *m);
            m = with;
            nm++;
        }
        size_t tl;
        char *text = tokenizer_chat_render_think(tok, m, nm, true, false, r->think, &tl);
        free(with);
        if (!text) { SERVER_OOM(c); return -1; }
        n = tokenizer_encode(tok, text, tl, false, ids);
        free(text);
    } else {
        n = tokenizer_encode(tok, r->prompt, r->prompt_len, true, ids);
        if (n == 0) {
            BAD_REQUEST(c, "prompt", "prompt: empty, and this model adds no BOS token");
            return -1;
        }
    }
    if (n < 0) { SERVER_OOM(c); return -1; }
    for (int i = 0; i < n; i++)
        if ((*ids)[i] < 0 || (*ids)[i] >= model_info.vocab_size) {
            send_error(c, 500, "server_error", NULL, NULL, "the tokenizer gave id %d, outside the vocabulary",
                       (*ids)[i]);
            return -1;
        }
    if (n > S.sm->ctx) {
        send_error(c, 400, "invalid_request_error", r->chat ? "messages" : "prompt", "context_length_exceeded",
                   "the prompt is %d tokens, longer than the context (%d tokens)", n, S.sm->ctx);
        return -1;
    }
    return n;
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
        int n = request_ids(c, &ids);
        if (n < 0) { free(ids); continue; }
        int keep = -1;
        for (int k = 0; k < S.n_slots; k++) {
            Slot *t = &S.slots[k];
            if (t->active) continue;
            int kt = slot_keeps(t, ids, n);
            if (kt > keep || (kt == keep && t->last_used < s->last_used)) { s = t; keep = kt; }
        }
        memcpy(s->ids, ids, (size_t)n * sizeof *ids);
        free(ids);
        Req *r = &c->req;
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
    const Req *r = s->req;
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
    c->serial = ++S.serial;
    c->created = (long)time(NULL);
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
        buf_str(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
        buf_json_str(&b, S.name, strlen(S.name));
        buf_fmt(&b, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"llmcc\",\"meta\":{\"architecture\":",
                S.created_base);
        buf_json_str(&b, model_info.architecture, strlen(model_info.architecture));
        buf_fmt(&b, ",\"context\":%d,\"target\":", S.sm->ctx);
        buf_json_str(&b, model_info.target, strlen(model_info.target));
        buf_str(&b, "}}]}");
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
        if (!parse_request(c, chat)) return;
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
    req_free(&c->req);
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
