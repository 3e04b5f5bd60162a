/* chat.h: -i, a conversation at the terminal as ollama run and llama-cli -cnv hold one: the messages so far and
 * the ids each new message feeds (chat.c), and the user's input, line edited with libedit on a terminal, with its
 * commands (/bye, /clear, /system TEXT, /help) and multi-line messages. run.c generates the replies. */
#ifndef LLMCC_CHAT_H
#define LLMCC_CHAT_H
#include "session.h"
#include "tokenizer.h"
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const Tokenizer *tok;
    Session *sess;                 /* the conversation's ids and what the KV cache holds */
    int think;                     /* enable_thinking: 0, 1, or TOK_THINK_DEFAULT */
    char *system;                  /* the system message (owned); NULL: the template's own */
    ChatMsg *msgs; int n_msgs;     /* the messages the conversation holds (texts owned; no system message) */
    int dropped;                   /* turns left out so far, the oldest first, to stay within the context */
    int too_long;                  /* the tokens of the last message that did not fit the context alone */
    const char *kwargs;            /* more template variables (--chat-template-kwargs: a JSON object), or NULL */
    char error[512];               /* why the template refused the last message (chat_message_ids: -3) */
} Chat;

/* what chat_read gave */
typedef enum {
    CHAT_MESSAGE,    /* a message in *text */
    CHAT_BYE,        /* /bye */
    CHAT_CLEAR,      /* /clear */
    CHAT_SYSTEM,     /* /system TEXT: TEXT in *text */
    CHAT_HELP,       /* /help (or /?) */
    CHAT_UNKNOWN,    /* a / command it does not know: the line in *text */
    CHAT_INTERRUPT,  /* Ctrl-C at the prompt */
    CHAT_END,        /* the input's end (Ctrl-D) */
} ChatInput;

/* NULL, or "out of memory" */
const char *chat_init(Chat *c, const Tokenizer *tok, Session *sess, const char *system, int think);
void chat_free(Chat *c);
/* The ids to feed for the user's next message, in *ids (malloc'd), their count returned; the session cut back to
 * where the new rendering agrees with what the cache holds. When the conversation would leave fewer than reserve
 * positions for the reply, its oldest turns are left out (c->dropped counts them). -1 when out of memory, -2 when
 * the message alone does not fit the context, -3 when the template refuses the conversation (c->error says why);
 * the message is then not kept. */
int chat_message_ids(Chat *c, const char *text, size_t len, int reserve, int32_t **ids);
/* The reply the session just generated, kept for later renderings. NULL, or "out of memory". */
const char *chat_add_reply(Chat *c);
/* /clear: no messages (the system message stays) */
void chat_clear(Chat *c);
/* /system TEXT: the system message from here on. NULL, or "out of memory". */
const char *chat_set_system(Chat *c, const char *text, size_t len);

/* The user's next input from stdin (on a terminal: libedit, with history; a line ending in \ goes on on the next
 * line, and """ opens and closes a block of lines); *text malloc'd, NUL-terminated, *len bytes. prompt: shown on a
 * terminal. */
ChatInput chat_read(const char *prompt, char **text, size_t *len);
/* Set by the caller's SIGINT handler (Ctrl-C): chat_read then returns CHAT_INTERRUPT; a reply stops. */
extern volatile sig_atomic_t chat_interrupted;
/* the help text of the commands */
extern const char chat_help[];
#endif
