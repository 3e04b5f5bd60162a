/* http.c: see http.h. HTTP/1.1 is parsed by llhttp (Node.js's parser, Debian's node-llhttp sources compiled in),
 * one request at a time per connection: the parser pauses at a request's end until its reply is out, so that
 * pipelined requests wait in the connection's input, and a client that sends faster than it reads is not read
 * further once its replies pile up. */
#include "http.h"
#include <llhttp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
/* A connection that has sent nothing, and a request's head (line and headers), get far less time than --timeout:
 * a client that opens sockets and sends nothing, or a byte a second, holds an entry only this long. */
#define FIRST_BYTE_S 5.0
#define CHUNK_EXT_MAX 1024        /* bytes of chunk extensions in one request (on_chunk_extension's message says so) */
#define HEAD_S 10.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void conn_flush(Conn *c);
static void dispatch(Http *h, int ci);

/* Queues bytes for the client. A client that takes up nothing while more than OUT_MAX bytes wait is dropped. */
static void conn_send(Conn *c, const void *p, size_t n) {
    if (c->fd < 0 || c->state == CONN_CLOSING) return;
    if (c->out.len == c->out_off) c->t_sent = now_s();
    buf_add(&c->out, p, n);
    if (c->out.oom || c->out.len - c->out_off > OUT_MAX) {
        c->state = CONN_CLOSING;   /* dropped by http_tend, the handler told (closing) */
        c->out.len = c->out_off = 0;
        c->out.oom = false;
    }
}

static const char *status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
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
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

void http_send_head(Conn *c, int status, const char *ctype, long length, bool close) {
    Buf h = {0};
    buf_fmt(&h, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", status, status_text(status), ctype);
    if (status == 503) buf_str(&h, "Retry-After: 1\r\n");   /* full or stopping: a client may try again */
    if (c->server->cors) buf_fmt(&h, "Access-Control-Allow-Origin: %s\r\n", c->server->cors);
    c->status = status;
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

static void send_whole(Conn *c, int status, const char *ctype, const Buf *body, const char *end) {
    if (body->oom) { c->state = CONN_CLOSING; return; }
    bool close = !c->keep_alive || status == 413 || status == 431 || status == 408 || status == 414 ||
                 status == 505 || *c->server->stop;
    http_send_head(c, status, ctype, (long)(body->len + strlen(end)), close);
    if (!c->head_only) {
        conn_send(c, body->p, body->len);
        conn_send(c, end, strlen(end));
    }
    if (close) c->keep_alive = false;
    if (status != 200) c->server->n_errors++;
    request_done(c);
}

void http_send_json(Conn *c, int status, const Buf *body) { send_whole(c, status, "application/json", body, "\n"); }
void http_send_body(Conn *c, int status, const char *ctype, const Buf *body) { send_whole(c, status, ctype, body, ""); }

void http_send_preflight(Conn *c) {
    Buf h = {0};
    buf_fmt(&h, "HTTP/1.1 204 No Content\r\nAccess-Control-Allow-Origin: %s\r\n"
            "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
            "Access-Control-Allow-Headers: Authorization, Content-Type\r\nAccess-Control-Max-Age: 86400\r\n"
            "Connection: %s\r\n\r\n", c->server->cors, c->keep_alive ? "keep-alive" : "close");
    c->status = 204;
    if (h.oom) c->state = CONN_CLOSING;
    else conn_send(c, h.p, h.len);
    buf_free(&h);
    request_done(c);
}

void http_shown_path(const Conn *c, char *out, size_t size) {
    const char *url = c->url.p ? c->url.p : "";
    size_t n = strcspn(url, "?");
    if (n > 200) n = 200;
    if (n >= size) n = size - 1;
    for (size_t i = 0; i < n; i++) out[i] = url[i] >= 0x20 && url[i] < 0x7f ? url[i] : '?';
    out[n] = 0;
}

/* The access log's line: who asked what, the answer, how long it took, the tokens */
static void log_request(const Conn *c, const char *note) {
    if (!c->server->access_log) return;
    char path[201], tokens[96] = "";
    http_shown_path(c, path, sizeof path);
    if (c->log_prompt >= 0)
        snprintf(tokens, sizeof tokens, ", tokens: prompt %ld, completion %ld", c->log_prompt, c->log_completion);
    fprintf(stderr, "%s: %s \"%s %s\" %d in %.1f ms%s%s\n", c->server->name, c->peer[0] ? c->peer : "-",
            c->method_name ? c->method_name : "-", c->method_name ? path : "-", c->status,
            (now_s() - c->t_request) * 1e3, tokens, note);
}

void http_send_error(Conn *c, int status, const char *type, const char *param, const char *code, const char *fmt,
                     ...) {
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
    http_send_json(c, status, &b);
    buf_free(&b);
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
    c->head_done = false;
    c->ext_bytes = 0;
    c->crlf_due = 0;
    c->method_name = NULL;
    c->status = 0;
    c->log_prompt = c->log_completion = -1;
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
    c->head_done = true;
    /* HTTP/1.x only: "HTTP/2.0" is not served as 1.1, and HTTP/2's preface ("PRI * HTTP/2.0") is refused */
    if (llhttp_get_http_major(p) != 1) { c->error_status = 505; return -1; }
    /* "Connection: Upgrade" (curl --http2 on http://) is a request like any other here; CONNECT is answered 405 */
    if (p->method != HTTP_CONNECT) p->upgrade = 0;
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > (uint64_t)c->server->max_body) {
        c->error_status = 413;
        return -1;
    }
    if (c->expect_continue) conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return 0;
}
/* chunk extensions (`5;name=value`) mean nothing here: a few are let through, a long run of them refused */
static int on_chunk_extension(llhttp_t *p, const char *at, size_t n) {
    Conn *c = conn_of(p);
    (void)at;
    c->ext_bytes += n;
    if (c->ext_bytes > CHUNK_EXT_MAX) {
        c->error_status = 400;
        c->error_why = "the body's chunk extensions are longer than 1024 bytes";
        return -1;
    }
    return 0;
}
/* llhttp 8 (Debian's) takes any two bytes after a chunk's data for its CRLF, where llhttp 9 refuses them unless
 * told to be lenient: a proxy in front that reads the framing strictly would see another request in them. They are
 * checked here, from `from` to the end of what llhttp parses now; what is left is checked in the next bytes read. */
static bool chunk_crlf_ok(Conn *c, const char *from) {
    while (c->crlf_due > 0 && from < c->exec_end)
        if (*from++ != "\r\n"[2 - c->crlf_due--]) {
            c->error_status = 400;
            c->error_why = "a chunk of the body is not followed by CRLF";
            return false;
        }
    return true;
}
static int on_body(llhttp_t *p, const char *at, size_t n) {
    Conn *c = conn_of(p);
    if (c->body.len + n > (size_t)c->server->max_body) { c->error_status = 413; return -1; }
    buf_add(&c->body, at, n);
    if ((p->flags & F_CHUNKED) && p->content_length == 0) {   /* the chunk's data ends here */
        c->crlf_due = 2;
        if (!chunk_crlf_ok(c, at + n)) return -1;
    }
    return 0;
}
static int on_message_complete(llhttp_t *p) {
    Conn *c = conn_of(p);
    c->keep_alive = llhttp_should_keep_alive(p);
    return HPE_PAUSED;   /* one request at a time: the parser waits until its reply is out */
}

static llhttp_settings_t g_http;
static llhttp_t *parser_of(Conn *c) { return (llhttp_t *)c->server->parsers + (c - c->server->conns); }

void http_send_chunk(Conn *c, const Buf *payload) {   /* HTTP/1.0: the bytes (the stream ends by closing) */
    if (c->http10) { conn_send(c, payload->p, payload->len); return; }
    char head[32];
    int n = snprintf(head, sizeof head, "%zx\r\n", payload->len);
    conn_send(c, head, (size_t)n);
    conn_send(c, payload->p, payload->len);
    conn_send(c, "\r\n", 2);
}

void http_end_stream(Conn *c) {
    if (!c->http10) conn_send(c, "0\r\n\r\n", 5);
    request_done(c);
}

int http_bearer_key(const Conn *c, const char *const *keys, int n) {
    if (n == 0) return 0;
    const char *got = c->auth.p ? c->auth.p : "";
    size_t gl = c->auth.len;
    if (gl >= 7 && !strncasecmp(got, "Bearer ", 7)) { got += 7; gl -= 7; }
    else gl = 0, got = "";
    int which = -1;
    for (int k = 0; k < n; k++) {
        size_t kl = strlen(keys[k]);
        unsigned diff = (unsigned)(gl != kl);
        for (size_t i = 0; i < kl; i++) diff |= (unsigned char)keys[k][i] ^ (unsigned char)(i < gl ? got[i] : 0);
        which = diff == 0 ? k : which;
    }
    return which;
}


/* ---------------------------------------------------------------- connections */
void http_close(Http *h, int ci) {
    Conn *c = &h->conns[ci];
    if (c->fd < 0) return;
    if (c->state == CONN_QUEUED || c->state == CONN_SERVING) {   /* nginx's 499: the client closed first */
        if (c->state == CONN_QUEUED || !c->status) c->status = 499;
        log_request(c, c->status == 499 ? " (the client went away)" : " (cut off: the client went away)");
    }
    h->on.closing(h->on.ctx, ci);   /* the client went away: what serves it stops at once */
    close(c->fd);
    c->fd = -1;
    buf_free(&c->in); buf_free(&c->out); buf_free(&c->url); buf_free(&c->body); buf_free(&c->auth);
}

static void conn_pump(Http *h, int ci);

/* A reply is complete: the next request on the connection may be read. */
static void request_done(Conn *c) {
    log_request(c, "");
    if (c->state == CONN_CLOSING) return;   /* the peer is gone, or the reply closes: nothing more is read */
    c->state = c->keep_alive && !c->peer_eof ? CONN_READING : CONN_CLOSING;
    c->t_request = c->t_active = now_s();
    c->in_request = false;   /* the next request's head and body are reset as it begins (on_message_begin) */
    if (c->keep_alive) llhttp_resume(parser_of(c));
}

/* Parses what has been read; a complete request goes to the handler. */
static void conn_pump(Http *h, int ci) {
    Conn *c = &h->conns[ci];
    llhttp_t *parser = parser_of(c);
    while (c->fd >= 0 && c->state == CONN_READING && c->in.len > 0 && c->out.len - c->out_off <= OUT_PENDING_MAX) {
        c->exec_end = c->in.p + c->in.len;
        llhttp_errno_t err = chunk_crlf_ok(c, c->in.p) ? llhttp_execute(parser, c->in.p, c->in.len) : HPE_USER;
        size_t used = c->in.len;
        if (err == HPE_PAUSED) used = (size_t)(llhttp_get_error_pos(parser) - c->in.p);
        memmove(c->in.p, c->in.p + used, c->in.len - used);
        c->in.len -= used;
        if (err == HPE_PAUSED) { dispatch(h, ci); continue; }
        if (err == HPE_PAUSED_H2_UPGRADE) c->error_status = 505;   /* HTTP/2's preface, PRI * HTTP/2.0 */
        if (err != HPE_OK) {
            c->keep_alive = false;
            if (c->error_status == 413)
                http_send_error(c, 413, "invalid_request_error", NULL, NULL,
                           "the body is larger than --max-body (%ld bytes)", h->max_body);
            else if (c->error_status == 431)
                http_send_error(c, 431, "invalid_request_error", NULL, NULL,
                           "the request's headers are larger than %d bytes", HEAD_MAX);
            else if (c->error_status == 414)
                http_send_error(c, 414, "invalid_request_error", NULL, NULL, "the URL is too long");
            else if (c->error_status == 400)
                http_send_error(c, 400, "invalid_request_error", NULL, NULL, "bad HTTP request: %s", c->error_why);
            else if (c->error_status == 505)
                http_send_error(c, 505, "invalid_request_error", NULL, NULL, "only HTTP/1.0 and HTTP/1.1 are served");
            else {
                const char *why = llhttp_get_error_reason(parser);
                http_send_error(c, 400, "invalid_request_error", NULL, NULL, "bad HTTP request: %s",
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
 * closed socket fails the next send or the one after); a whole reply still to come is dropped (http_close)
 * (a client that closes the connection is gone); a reply already queued is sent, then the connection closed. */
static void conn_eof(Http *h, int ci) {
    Conn *c = &h->conns[ci];
    c->peer_eof = true;
    c->keep_alive = false;
    if ((c->state == CONN_QUEUED || c->state == CONN_SERVING) && !c->streaming) { http_close(h, ci); return; }
    if (c->state == CONN_READING) c->state = CONN_CLOSING;
}

static void conn_read(Http *h, int ci) {
    Conn *c = &h->conns[ci];
    char tmp[65536];
    for (int turn = 0; turn < READS_PER_TURN; turn++) {   /* then the model's turn: a flood does not stall it */
        ssize_t k = recv(c->fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (k > 0) {
            if (c->state == CONN_CLOSING) continue;   /* a reply that closes: what follows is dropped */
            c->t_active = now_s();
            c->got_byte = true;
            buf_add(&c->in, tmp, (size_t)k);
            if (c->in.oom) { http_close(h, ci); return; }
            if (c->state == CONN_READING) conn_pump(h, ci);   /* parsed as it comes: a body is bounded as it grows */
            if (c->fd < 0 || c->in.len > IN_PENDING_MAX) return;   /* read ahead enough: poll waits */
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) http_close(h, ci);   /* reset: whatever the client asked for is dropped */
        else conn_eof(h, ci);
        return;
    }
}

/* whether a connection holds its entry while doing nothing: no request in progress, nothing left to send */
static bool conn_idle(const Conn *c) {
    return c->fd >= 0 && !c->rejected && c->state == CONN_READING && !c->in_request && c->in.len == 0 &&
           c->out_off == c->out.len && !c->lingering;
}

static void conn_accept(Http *h) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept(h->listen_fd, (struct sockaddr *)&sa, &sl);
        if (fd < 0) {   /* out of file descriptors: the listener rests a moment rather than wake poll at once */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                h->accept_rest_until = now_s() + 0.1;
            return;
        }
        char peer[48] = "";
        if (sa.ss_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, peer, sizeof peer);
        if (sa.ss_family == AF_INET6) inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, peer, sizeof peer);
        /* a loopback peer may be a reverse proxy speaking for many clients: it is not capped as one */
        bool capped = *peer && strncmp(peer, "127.", 4) && strcmp(peer, "::1") && strncmp(peer, "::ffff:127.", 11);
        /* past --max-conns the oldest idle connection (a keep-alive with nothing to do, or one that has sent
         * nothing yet) makes room, as production servers do; with none idle, the connection takes one of the
         * spare entries just to be told so (a 503 with Retry-After, then the lingering close that lets the client
         * read it); with none spare it is closed at once */
        int ci = -1, open = 0, same = 0, oldest = -1;
        for (int i = 0; i < h->n_conns; i++) {
            const Conn *o = &h->conns[i];
            if (o->fd < 0) { if (ci < 0) ci = i; continue; }
            open += !o->rejected;
            same += capped && !o->rejected && !strcmp(o->peer, peer);
            if (conn_idle(o) && (oldest < 0 || o->t_active < h->conns[oldest].t_active)) oldest = i;
        }
        if (open >= h->max_conns && oldest >= 0 && !(capped && same >= h->max_per_peer)) {
            http_close(h, oldest);
            if (ci < 0) ci = oldest;
            open--;
        }
        if (ci < 0) { close(fd); continue; }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   /* a token's event goes out at once */
        Conn *c = &h->conns[ci];
        memset(c, 0, sizeof *c);
        c->server = h;
        c->fd = fd;
        c->state = CONN_READING;
        c->log_prompt = c->log_completion = -1;
        snprintf(c->peer, sizeof c->peer, "%s", peer);
        llhttp_init(parser_of(c), HTTP_REQUEST, &g_http);
        parser_of(c)->data = c;
        c->t_request = c->t_active = c->t_sent = now_s();
        if (open >= h->max_conns || (capped && same >= h->max_per_peer)) {
            c->rejected = true;
            c->keep_alive = false;
            http_send_error(c, 503, "server_error", NULL, NULL, open >= h->max_conns ? "too many connections"
                            : "too many connections from this address");
        }
    }
}


/* ---------------------------------------------------------------- the listener and the loop's side */
/* A request read whole: what HTTP says of it, then the handler's */
static void dispatch(Http *h, int ci) {
    Conn *c = &h->conns[ci];
    llhttp_t *parser = parser_of(c);
    int method = llhttp_get_method(parser);
    c->method = method == HTTP_GET ? HTTP_METHOD_GET : method == HTTP_HEAD ? HTTP_METHOD_HEAD
              : method == HTTP_POST ? HTTP_METHOD_POST : method == HTTP_CONNECT ? HTTP_METHOD_CONNECT
              : method == HTTP_OPTIONS ? HTTP_METHOD_OPTIONS : HTTP_METHOD_OTHER;
    c->method_name = llhttp_method_name((llhttp_method_t)method);
    c->head_only = method == HTTP_HEAD;
    c->http10 = llhttp_get_http_major(parser) == 1 && llhttp_get_http_minor(parser) == 0;
    h->on.request(h->on.ctx, ci);
}

int http_open(Http *h, const char *host, int *port, char *shown, size_t shown_size) {
    h->listen_fd = -1;
    h->n_conns = h->max_conns + 16;   /* the spare entries answer 503 past --max-conns */
    h->conns = calloc((size_t)h->n_conns, sizeof *h->conns);
    h->parsers = calloc((size_t)h->n_conns, sizeof(llhttp_t));
    h->pfd = malloc((size_t)(h->n_conns + 1) * sizeof *h->pfd);
    h->pidx = malloc((size_t)(h->n_conns + 1) * sizeof *h->pidx);
    if (!h->conns || !h->parsers || !h->pfd || !h->pidx) {
        fprintf(stderr, "%s: out of memory\n", h->name);
        return -1;
    }
    for (int i = 0; i < h->n_conns; i++) h->conns[i].fd = -1;
    llhttp_settings_init(&g_http);
    g_http.on_message_begin = on_message_begin;
    g_http.on_url = on_url;
    g_http.on_header_field = on_header_field;
    g_http.on_header_field_complete = on_header_field_complete;
    g_http.on_header_value = on_header_value;
    g_http.on_headers_complete = on_headers_complete;
    g_http.on_body = on_body;
    g_http.on_chunk_extension_name = on_chunk_extension;
    g_http.on_chunk_extension_value = on_chunk_extension;
    g_http.on_message_complete = on_message_complete;

    char service[16];
    snprintf(service, sizeof service, "%d", *port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    /* localhost without the resolver: a statically linked executable has no NSS modules to read /etc/hosts with
     * (and a container may have no /etc/hosts); other names go to getaddrinfo, numeric addresses never need more */
    const char *lookup = !strcasecmp(host, "localhost") ? "127.0.0.1" : host;
    hints.ai_flags |= lookup != host ? AI_NUMERICHOST : 0;
    int e = getaddrinfo(lookup, service, &hints, &res);
    if (e) {
        fprintf(stderr, "%s: --host %s: %s (an address such as 127.0.0.1, 0.0.0.0 or ::, or localhost)\n", h->name,
                host, gai_strerror(e));
        return -1;
    }
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
        fprintf(stderr, "%s: cannot listen on %s port %d: %s\n", h->name, host, *port, strerror(last));
        return -1;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    snprintf(shown, shown_size, "?");
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *in4 = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &in4->sin_addr, shown, (socklen_t)shown_size);
            *port = ntohs(in4->sin_port);
        } else if (sa.ss_family == AF_INET6 && shown_size > 2) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
            shown[0] = '[';
            inet_ntop(AF_INET6, &in6->sin6_addr, shown + 1, (socklen_t)shown_size - 2);
            strcat(shown, "]");
            *port = ntohs(in6->sin6_port);
        }
    }
    h->listen_fd = fd;
    return fd;
}

void http_stop_listening(Http *h) {
    if (h->listen_fd >= 0) close(h->listen_fd);
    h->listen_fd = -1;
}

int http_tend(Http *h, double now) {
    h->n_poll = 0;
    if (h->listen_fd >= 0 && now >= h->accept_rest_until) {
        h->pfd[h->n_poll] = (struct pollfd){ h->listen_fd, POLLIN, 0 };
        h->pidx[h->n_poll++] = -1;
    }
    int open = 0;
    for (int i = 0; i < h->n_conns; i++) {
        Conn *c = &h->conns[i];
        if (c->fd < 0) continue;
        conn_flush(c);
        bool drained = c->out_off == c->out.len;
        if (c->state == CONN_CLOSING && drained && c->peer_eof) { http_close(h, i); continue; }
        if (c->state == CONN_CLOSING && drained && !c->lingering) {
            /* our side shut; what the client still sends (a body refused as too large) is read and dropped
             * for a moment, so that the kernel does not reset the connection before the reply is read */
            shutdown(c->fd, SHUT_WR);
            c->lingering = true;
            c->linger_until = now + (h->timeout_s < 2 ? h->timeout_s : 2);
        }
        if (c->lingering && now > c->linger_until) {
            http_close(h, i);
            continue;
        }
        /* timeouts: a request that does not arrive whole, a reply not taken up, an idle keep-alive */
        bool waiting = c->state == CONN_READING;
        bool idle = waiting && drained && c->in.len == 0 && !c->in_request;
        bool stop = *h->stop;
        double head_limit = h->timeout_s < HEAD_S ? h->timeout_s : HEAD_S;
        double first_limit = h->timeout_s < FIRST_BYTE_S ? h->timeout_s : FIRST_BYTE_S;
        bool head_late = waiting && c->in_request && !c->head_done && now - c->t_request > head_limit;
        if ((waiting && !idle && c->in_request && now - c->t_request > h->timeout_s) || head_late ||
            (idle && !c->got_byte && now - c->t_active > first_limit) ||
            (idle && now - c->t_active > h->timeout_s) ||
            (!drained && now - c->t_sent > h->timeout_s) ||
            (stop && idle)) {
            if (waiting && !idle && drained && c->fd >= 0 && !stop) {
                c->keep_alive = false;
                http_send_error(c, 408, "invalid_request_error", NULL, NULL, "the request%s did not arrive within %d s",
                                head_late ? "'s line and headers" : "", head_late ? (int)head_limit : h->timeout_s);
                conn_flush(c);
            }
            http_close(h, i);
            continue;
        }
        open++;
        short ev = 0;
        if (!c->peer_eof && c->in.len <= IN_PENDING_MAX && c->out.len - c->out_off <= OUT_PENDING_MAX)
            ev |= POLLIN;
        if (!drained) ev |= POLLOUT;
        h->pfd[h->n_poll] = (struct pollfd){ c->fd, ev, 0 };
        h->pidx[h->n_poll++] = i;
    }
    return open;
}

int http_wait(Http *h, int timeout_ms) {
    int r = poll(h->pfd, (nfds_t)h->n_poll, timeout_ms);
    if (r < 0 && errno != EINTR) { fprintf(stderr, "%s: poll: %s\n", h->name, strerror(errno)); return -1; }
    for (int k = 0; r > 0 && k < h->n_poll; k++) {
        short revents = h->pfd[k].revents;
        if (!revents) continue;
        if (h->pidx[k] < 0) { conn_accept(h); continue; }
        int ci = h->pidx[k];
        Conn *c = &h->conns[ci];
        if (c->fd < 0) continue;
        if ((revents & (POLLHUP | POLLERR)) && c->peer_eof) http_close(h, ci);   /* gone both ways */
        else if (revents & (POLLIN | POLLHUP | POLLERR)) conn_read(h, ci);
        if (c->fd >= 0 && (revents & POLLOUT)) conn_flush(c);
    }
    return 0;
}

void http_pump(Http *h) {
    for (int i = 0; i < h->n_conns; i++)   /* a finished reply lets a pipelined request through */
        if (h->conns[i].fd >= 0 && h->conns[i].state == CONN_READING && h->conns[i].in.len) conn_pump(h, i);
}

void http_free(Http *h) {
    for (int i = 0; h->conns && i < h->n_conns; i++) http_close(h, i);
    http_stop_listening(h);
    free(h->conns); free(h->parsers); free(h->pfd); free(h->pidx);
    h->conns = NULL;
}
