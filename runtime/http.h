/* http.h: the server's HTTP/1.1 side, apart from what the requests mean: the listening socket, the clients'
 * connections (keep-alive, pipelining, HEAD, HTTP/1.0, 100-continue, the limits on heads, bodies and replies
 * not taken up, timeouts, the lingering close) and the replies' framing (a head, a whole body, chunks). A
 * request read whole goes to the handler the server gives (HttpHandler), which answers it now or later through
 * the http_send_ functions; errors are answered in OpenAI's error object, the one shape of every error reply.
 *
 * One thread: the server's loop calls http_tend, then http_wait (one poll), between two units of its own work. */
#ifndef LLMCC_HTTP_H
#define LLMCC_HTTP_H
#include "buf.h"
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

enum { CONN_READING, CONN_QUEUED, CONN_SERVING, CONN_CLOSING };   /* QUEUED, SERVING: the handler's to set */
enum { HTTP_METHOD_OTHER, HTTP_METHOD_GET, HTTP_METHOD_HEAD, HTTP_METHOD_POST, HTTP_METHOD_CONNECT,
       HTTP_METHOD_OPTIONS };

typedef struct Http Http;

typedef struct {
    Http *server;
    int fd;                      /* -1: a free entry */
    int state;
    Buf in;                      /* bytes read, not yet parsed (a pipelined request waits here) */
    Buf out;                     /* bytes to send */
    size_t out_off;              /* out.p[0..out_off) sent */
    /* the request being parsed */
    Buf url, body, auth;
    int method;                  /* HTTP_METHOD_ */
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
    bool streaming;              /* the handler's reply is a stream: it goes on after the client shuts its side */
    double t_sent;               /* last progress sending (a reply not taken up times out from here) */
    int error_status;            /* set by a callback that stops the parser: 413, 431, 414 */
    bool keep_alive, chunked;
    double t_request;            /* when the request being read began (or the connection opened) */
    double t_active;             /* last byte in or out */
    bool got_byte;               /* the client has sent something on this connection (FIRST_BYTE_S until then) */
    size_t ext_bytes;            /* the request's chunk extensions so far (CHUNK_EXT_MAX) */
    const char *error_why;       /* with error_status 400: what is wrong with the request's framing */
    int crlf_due;                /* bytes of the CRLF after a chunk's data not yet seen (0 to 2) */
    const char *exec_end;        /* the end of the bytes llhttp is parsing */
    bool head_done;              /* the request's head is read (HEAD_S until then) */
    char peer[48];               /* the client's address ("" where unknown), for --max-conns-per-peer */
    /* the access log's line (request_done) */
    const char *method_name;     /* the request's method as llhttp names it, NULL before its head is read */
    int status;                  /* the reply's */
    long log_prompt, log_completion;   /* the handler's: the request's prompt and generated tokens (-1: none) */
} Conn;

typedef struct {
    void (*request)(void *ctx, int conn);   /* conns[conn] holds a request read whole */
    void (*closing)(void *ctx, int conn);   /* conns[conn] goes: whatever serves it stops */
    void *ctx;
} HttpHandler;

struct Http {
    /* the server's settings, before http_open */
    const char *name;                        /* the messages' prefix */
    long max_body;                           /* request body bytes at most */
    int timeout_s;                           /* a request must arrive whole, a reply be taken up, within this */
    int max_conns;                           /* open connections at most */
    int max_per_peer;                        /* of them from one address (loopback's not counted) */
    const volatile sig_atomic_t *stop;       /* set: replies close their connection, idle ones are dropped */
    const char *cors;                        /* Access-Control-Allow-Origin of every reply (NULL: none) */
    bool access_log;                         /* a line on stderr per request answered */
    HttpHandler on;
    int listen_fd;
    Conn *conns; int n_conns;
    long n_errors;                           /* replies of a status other than 200 */
    /* http.c's */
    void *parsers;                           /* [n_conns] llhttp_t */
    struct pollfd *pfd; int *pidx; int n_poll;   /* the next poll: a connection's index, -1 the listener */
    double accept_rest_until;
};

/* Allocates the connections (max_conns and spares to answer 503 past it) and opens the listener on host:port;
 * the bound address goes to shown (host:port, printable) and *port. -1 after one line on stderr. */
int http_open(Http *h, const char *host, int *port, char *shown, size_t shown_size);
void http_stop_listening(Http *h);
/* Sends what is pending, drops what timed out or is done, and prepares the next poll; the open connections */
int http_tend(Http *h, double now);
/* One poll (timeout_ms), then accepts, reads and parses: requests read whole go to the handler. -1: poll failed */
int http_wait(Http *h, int timeout_ms);
/* The connections that hold a pipelined request whose turn came: parsed and handled */
void http_pump(Http *h);
void http_close(Http *h, int conn);
void http_free(Http *h);   /* every connection closed, the listener too */

/* "Authorization: Bearer KEY", compared in time independent of where they differ (key NULL: none asked) */
/* Which of keys[0..n) the request's "Authorization: Bearer" carries (every key compared in full, so that the
 * time says nothing of which came closest); -1: none of them. 0 when there are no keys. */
int http_bearer_key(const Conn *c, const char *const *keys, int n);
/* length -1: a stream (chunked; HTTP/1.0: ended by closing) */
void http_send_head(Conn *c, int status, const char *ctype, long length, bool close);
void http_send_json(Conn *c, int status, const Buf *body);   /* a whole reply: the request is done */
void http_send_body(Conn *c, int status, const char *ctype, const Buf *body);   /* the same in another type */
void http_send_preflight(Conn *c);   /* 204 to a CORS preflight (OPTIONS): the methods and headers allowed */
/* The request's path (no query) as printable ASCII, at most 200 bytes (others shown as '?'), for messages */
void http_shown_path(const Conn *c, char *out, size_t size);
/* OpenAI's error object; param: the request field at fault (NULL: none). The request is done. */
void http_send_error(Conn *c, int status, const char *type, const char *param, const char *code, const char *fmt,
                     ...) __attribute__((format(printf, 6, 7)));
void http_send_chunk(Conn *c, const Buf *payload);   /* one chunk of a stream */
void http_end_stream(Conn *c);                       /* the stream's last chunk: the request is done */
#endif
