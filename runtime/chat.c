/* chat.c: -i's conversation (chat.h). Each new message renders the whole conversation with the checkpoint's
 * template and feeds only what the KV cache lacks: the cache is kept up to where the new ids agree with it (a
 * template that never rewrites earlier turns agrees up to the new message; Qwen3's, which drops the reasoning of
 * answered turns, and /clear, /system or turns left out, agree less). When a message would leave the reply too little
 * room, the oldest turns go first, as llama-cli's context shift does, the system message always kept. */
#include "chat.h"
#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <sys/select.h>
#include <termcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t chat_interrupted;

const char chat_help[] =
    "  /bye             leave (so does Ctrl-D, or Ctrl-C twice at the prompt)\n"
    "  /clear           forget the conversation (the system message stays)\n"
    "  /system TEXT     the system message from here on\n"
    "  /help, /?        this text\n"
    "  a line ending in \\ goes on on the next line; \"\"\" opens and closes a message of several lines\n"
    "  Ctrl-C           stop the reply (the conversation keeps it)\n";

static char *dup_text(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

const char *chat_init(Chat *c, const Tokenizer *tok, Session *sess, const char *system, int think) {
    memset(c, 0, sizeof *c);
    c->tok = tok;
    c->sess = sess;
    c->think = think;
    if (system && !(c->system = dup_text(system, strlen(system)))) return "out of memory";
    return NULL;
}

/* the first n messages go (the oldest) */
static void drop_msgs(Chat *c, int n) {
    if (n <= 0) return;
    for (int i = 0; i < n; i++) free((char *)c->msgs[i].content);
    memmove(c->msgs, c->msgs + n, (size_t)(c->n_msgs - n) * sizeof *c->msgs);
    c->n_msgs -= n;
}

/* the messages from i on go (the newest) */
static void drop_msgs_from(Chat *c, int i) {
    for (int k = i; k < c->n_msgs; k++) free((char *)c->msgs[k].content);
    if (i < c->n_msgs) c->n_msgs = i;
}

void chat_free(Chat *c) {
    drop_msgs(c, c->n_msgs);
    free(c->msgs);
    free(c->system);
    memset(c, 0, sizeof *c);
}

/* appends a message whose text (malloc'd) it then owns; false when out of memory (text freed) */
static bool push(Chat *c, const char *role, char *text, size_t len) {
    ChatMsg *m = text ? realloc(c->msgs, (size_t)(c->n_msgs + 1) * sizeof *m) : NULL;
    if (!m) { free(text); return false; }
    c->msgs = m;
    c->msgs[c->n_msgs++] = (ChatMsg){ role, text, len };
    return true;
}

/* The template's text of the whole conversation (the system message first where there is one), encoded as
 * transformers does (add_special_tokens=False: the text holds its special tokens). -3 where the template refuses
 * it (its reason in c->error). */
static int render(Chat *c, int32_t **ids) {
    ChatMsg *all = malloc((size_t)(c->n_msgs + 1) * sizeof *all);
    if (!all) return -1;
    int k = 0;
    if (c->system) all[k++] = (ChatMsg){ "system", c->system, strlen(c->system) };
    memcpy(all + k, c->msgs, (size_t)c->n_msgs * sizeof *c->msgs);
    size_t tl;
    char *text = tokenizer_chat_render(c->tok, all, k + c->n_msgs, true, c->think, c->kwargs, &tl, c->error,
                                       sizeof c->error);
    free(all);
    if (!text) return strcmp(c->error, "out of memory") ? -3 : -1;
    k = tokenizer_encode(c->tok, text, tl, false, ids);
    free(text);
    return k;
}

int chat_message_ids(Chat *c, const char *text, size_t len, int reserve, int32_t **ids) {
    Session *s = c->sess;
    *ids = NULL;
    if (!push(c, "user", dup_text(text, len), len)) return -1;
    for (;;) {
        /* the whole conversation rendered again: the cache is kept up to where the new ids agree with it, so a
         * template that renders earlier turns the same feeds only the new message (and one that rewrites them,
         * as Qwen3's drops answered turns' reasoning, feeds from the first change) */
        int n = render(c, ids);
        if (n == -3) { drop_msgs_from(c, c->n_msgs - 1); return -3; }
        if (n < 0) return -1;
        if (n + reserve <= s->ctx || (c->n_msgs == 1 && n <= s->ctx)) {
            int keep = 0;   /* the cache's rows that the new ids agree with */
            while (keep < n && keep < s->n_fed && s->ids[keep] == (*ids)[keep]) keep++;
            if (keep == n) keep--;   /* the last id is fed again: its logits start the reply */
            if (keep < s->n_ids) session_truncate(s, keep);
            memmove(*ids, *ids + keep, (size_t)(n - keep) * sizeof **ids);
            return n - keep;
        }
        free(*ids);
        *ids = NULL;
        if (c->n_msgs == 1) {   /* the message alone is too long: it is not kept */
            c->too_long = n;
            drop_msgs(c, 1);
            return -2;
        }
        /* the oldest turn goes: its user message and the reply to it */
        drop_msgs(c, c->n_msgs > 2 && !strcmp(c->msgs[1].role, "assistant") ? 2 : 1);
        c->dropped++;
    }
}

const char *chat_add_reply(Chat *c) {
    const Session *s = c->sess;
    char *reply = tokenizer_decode(c->tok, s->ids + s->reply_start, s->n_ids - s->reply_start, false);
    return reply && push(c, "assistant", reply, strlen(reply)) ? NULL : "out of memory";
}

void chat_clear(Chat *c) {
    drop_msgs(c, c->n_msgs);
}

const char *chat_set_system(Chat *c, const char *text, size_t len) {
    char *d = dup_text(text, len);
    if (!d) return "out of memory";
    free(c->system);
    c->system = d;
    return NULL;
}

/* ---------------------------------------------------------------- input */
/* libedit's read of a key. SIGINT is blocked while libedit runs and let through only inside pselect, so that a
 * Ctrl-C that comes just before the wait ends it as surely as one during it (with a plain read() the flag set
 * just before would go unseen until the next key). */
static sigset_t wait_mask;   /* the signal mask inside the wait: the caller's, SIGINT let through */
static int read_key(FILE *f) {
    int fd = fileno(f);
    for (;;) {
        if (chat_interrupted) return EOF;
        fd_set ready;
        FD_ZERO(&ready);
        FD_SET(fd, &ready);
        if (pselect(fd + 1, &ready, NULL, NULL, NULL, &wait_mask) < 0) {
            if (errno == EINTR) continue;
            return EOF;
        }
        unsigned char c;
        ssize_t n = read(fd, &c, 1);
        if (n == 1) return c;
        if (n == 0 || (errno != EINTR && errno != EAGAIN)) return EOF;
    }
}

/* One line without its end, malloc'd; NULL at the input's end or on an interruption (chat_interrupted). On a
 * terminal libedit edits it (its prompt on stderr, stdout being the replies'), elsewhere it is read as is. */
/* Whether libedit edits the input: on a terminal it has a description of (terminfo). Where there is none, as in a
 * bare container, the line is read as it comes and the prompt is ours (libedit would say "Cannot read termcap
 * database" and edit no better). */
static bool editing(void) {
    static int described = -1;
    if (described < 0) {
        const char *term = getenv("TERM");
        char entry[4096];   /* termcap's buffer: ncurses ignores it */
        described = isatty(0) && term && *term && tgetent(entry, term) == 1;
    }
    return described;
}

static char *read_line(const char *prompt, bool tty) {
    if (tty && !editing() && *prompt) {
        fputs(prompt, stderr);
        fflush(stderr);
    }
    if (tty && editing()) {
        static bool ready;
        if (!ready) {
            rl_instream = stdin;
            rl_outstream = stderr;
            rl_catch_signals = 0;          /* SIGINT is the caller's */
            rl_getc_function = read_key;
            ready = true;
        }
        sigset_t intr, old;
        sigemptyset(&intr);
        sigaddset(&intr, SIGINT);
        sigprocmask(SIG_BLOCK, &intr, &old);
        wait_mask = old;
        sigdelset(&wait_mask, SIGINT);
        char *line = chat_interrupted ? NULL : readline(prompt);
        sigprocmask(SIG_SETMASK, &old, NULL);
        return line;
    }
    char *line = NULL;
    size_t cap = 0;
    errno = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) { free(line); return NULL; }
    if (n > 0 && line[n - 1] == '\n') line[--n] = 0;
    if (n > 0 && line[n - 1] == '\r') line[--n] = 0;
    return line;
}

static bool starts(const char *s, const char *word) {
    size_t n = strlen(word);
    return !strncmp(s, word, n) && (s[n] == 0 || s[n] == ' ' || s[n] == '\t');
}

ChatInput chat_read(const char *prompt, char **text, size_t *len) {
    const bool tty = isatty(0);
    *text = NULL;
    *len = 0;
    char *msg = NULL;
    size_t n = 0;
    bool block = false;   /* inside """ ... """ */
    int n_parts = 0;
    for (;;) {
        char *line = read_line(msg ? "... " : prompt, tty);
        if (!line) {
            free(msg);
            return chat_interrupted ? CHAT_INTERRUPT : CHAT_END;
        }
        size_t l = strlen(line);
        if (!msg && !l) { free(line); continue; }   /* an empty line is no message */
        if (!msg && line[0] == '/') {
            ChatInput k = starts(line, "/bye") || starts(line, "/exit") ? CHAT_BYE
                        : starts(line, "/clear") ? CHAT_CLEAR
                        : starts(line, "/system") ? CHAT_SYSTEM
                        : starts(line, "/help") || starts(line, "/?") ? CHAT_HELP : CHAT_UNKNOWN;
            if (k == CHAT_SYSTEM) {
                const char *t = line + strlen("/system");
                while (*t == ' ' || *t == '\t') t++;
                memmove(line, t, strlen(t) + 1);
            }
            if (editing()) add_history(line);
            *text = line;
            *len = strlen(line);
            return k;
        }
        /* the line's part of the message: a block's quotes and a continuation's backslash dropped */
        const char *part = line;
        bool opens = !msg && l >= 3 && !strncmp(line, "\"\"\"", 3), more = false;
        if (opens) { block = true; part += 3; l -= 3; }
        if (block) {
            if (l >= 3 && !strncmp(part + l - 3, "\"\"\"", 3)) { l -= 3; block = false; }
            more = block;
        } else if (l && part[l - 1] == '\\') {
            l--;
            more = true;
        }
        /* parts joined by line ends; a block's bare opening and closing lines add none */
        bool sep = msg && n_parts > 0 && (l > 0 || more);
        char *grown = realloc(msg, n + l + 2);
        if (!grown) { free(line); free(msg); return CHAT_END; }
        msg = grown;
        if (sep) msg[n++] = '\n';
        memcpy(msg + n, part, l);
        n += l;
        msg[n] = 0;
        n_parts += !(opens && l == 0);
        free(line);
        if (more) continue;
        if (editing()) add_history(msg);
        *text = msg;
        *len = n;
        return CHAT_MESSAGE;
    }
}
