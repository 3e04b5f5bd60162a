/* openai.h: OpenAI's API as this server speaks it, apart from HTTP and from the model's scheduling: a request
 * body read into an ApiRequest (or the error object that names the field at fault), its prompt's ids, and the
 * replies' JSON, whole or as server-sent events. Nothing here touches a socket: serve.c sends what it builds. */
#ifndef LLMCC_OPENAI_H
#define LLMCC_OPENAI_H
#include "buf.h"
#include "sample.h"
#include "tokenizer.h"
#include <stdbool.h>
#include <stdint.h>

#define API_MAX_STOP 4            /* OpenAI's limit on stop strings */

typedef struct {
    bool chat, stream, include_usage, ignore_eos;
    char *messages; size_t messages_len;   /* chat: the messages as JSON, as the template gets them */
    bool has_system;                   /*   one of them is the system's */
    char *tools; size_t tools_len;     /* chat: the tools (JSON), or NULL */
    char *kwargs; size_t kwargs_len;   /* chat: chat_template_kwargs (a JSON object), or NULL */
    char *prompt; size_t prompt_len;   /* completions: a text, */
    int32_t *prompt_ids; int n_prompt_ids;   /* or token ids, as given (no BOS added) */
    char *model_asked;                 /* the request's "model", or NULL (the server checks it is the one it serves) */
    /* constrained decoding: response_format {"type": "json_object"}, or a json_schema (made GBNF here), or
     * llama-server's "grammar" (GBNF) */
    enum { API_FORMAT_TEXT, API_FORMAT_JSON_OBJECT, API_FORMAT_GRAMMAR } format;
    char *grammar; size_t grammar_len;   /* API_FORMAT_GRAMMAR's source */
    long max_tokens;                   /* -1: up to the context's end */
    SampleParams sp;
    unsigned long long seed; bool has_seed;
    char *stop[API_MAX_STOP]; size_t stop_len[API_MAX_STOP]; int n_stop;
    int think;                         /* chat_template_kwargs.enable_thinking, or TOK_THINK_DEFAULT */
    /* what the reply names, set by the server once the request is read: its id is "<kind>-<id_base><serial>" */
    const char *model;
    int key;                           /* which of the server's keys the request carried (0: there are none) */
    long id_base, serial, created;
} ApiRequest;

/* OpenAI's error object, before it is sent: the HTTP status and the four fields */
typedef struct {
    int status;
    const char *type;                  /* "invalid_request_error", "server_error" */
    const char *code;                  /* NULL: none */
    char param[64];                    /* the request field at fault; "": none */
    char message[512];
} ApiError;

typedef struct { int prompt_tokens; long completion_tokens; int cached_tokens; } ApiUsage;

void api_request_free(ApiRequest *r);
/* Reads a body of POST /v1/chat/completions (chat) or /v1/completions into r, the sampling defaults where it
 * says nothing; false with *err filled on a fault (r then holds nothing). */
bool api_parse_request(ApiRequest *r, const char *body, size_t len, bool chat, const SampleParams *defaults,
                       ApiError *err);
/* The request's ids, *ids malloc'd: the chat template over its messages (system: the system message of a chat
 * that brings none; NULL: the template's own), or its prompt's plain encoding. -1 with *err filled where the
 * model cannot take the request (no chat template, a prompt longer than ctx tokens) or memory ran out. */
int api_request_ids(const ApiRequest *r, const Tokenizer *tok, const char *system, int ctx, int vocab,
                    int32_t **ids, ApiError *err);

/* llama-server's POST /tokenize ({"content": TEXT, "add_special": false, "with_pieces": false}) and POST
 * /detokenize ({"tokens": [IDS]}): the request read (false with *err), the reply written (false: out of memory) */
bool api_tokenize(Buf *b, const char *body, size_t len, const Tokenizer *tok, ApiError *err);
bool api_detokenize(Buf *b, const char *body, size_t len, const Tokenizer *tok, int vocab, ApiError *err);

/* A stream's event carrying text[0..n) (role: the chat's opening one, with "role":"assistant") */
void api_stream_delta(Buf *b, const ApiRequest *r, bool role, const char *text, size_t n);
/* A stream's last events: the finish_reason ("stop", "length"), the usage where asked, then [DONE] */
void api_stream_end(Buf *b, const ApiRequest *r, const char *finish, const ApiUsage *u);
/* A whole reply: text[0..n), its finish_reason and usage */
void api_reply(Buf *b, const ApiRequest *r, const char *text, size_t n, const char *finish, const ApiUsage *u);
/* GET /v1/models: the one model */
void api_models(Buf *b, const char *model, long created, const char *architecture, int ctx, const char *target);
#endif
